"""Class masks of 64 bytes at once for the byte-level pre-tokenizer: `class_masks64(text, start)`.

One unaligned 64-byte vector load and a few vector compares, each turned into a uint64 with one bit
a byte (bit k: text[start + k]). LLVM lowers the `<64 x i1>` to `i64` bitcasts to the target's
compare-and-move-mask instructions (AVX-512 `vpcmpb` into a mask register, AVX2/SSE2 `pmovmskb`,
NEON's equivalents), so the same IR is portable and exact on every CPU.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

N_MASKS = 8  # letters, digits, whitespace, spaces, high bytes, lead bytes, apostrophes, newlines


@intrinsic
def class_masks64(typingctx, text, start):
    """(letters [A-Za-z], digits [0-9], ASCII whitespace [\\t\\n\\v\\f\\r ], spaces ' ', bytes >= 0x80,
    bytes >= 0xC0 (leads of multi-byte characters), apostrophes ', newlines [\\r\\n]): uint64 masks of the 64 bytes
    text[start:start + 64] (uint8 array; in bounds: not checked)."""
    if not isinstance(text, types.Array) or text.dtype != types.uint8 or not isinstance(start, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        i8 = ir.IntType(8)
        i64 = ir.IntType(64)
        vector = ir.VectorType(i8, 64)
        address = builder.gep(array.data, [args[1]])
        v = builder.load(builder.bitcast(address, vector.as_pointer()), align=1)

        def splat(value):
            return ir.Constant(vector, [ir.Constant(i8, value)] * 64)

        def below(x, bound):  # unsigned x < bound, as one bit a byte
            return builder.icmp_unsigned("<", x, splat(bound))

        space = builder.icmp_unsigned("==", v, splat(32))
        masks = [
            below(builder.sub(builder.or_(v, splat(0x20)), splat(ord("a"))), 26),
            below(builder.sub(v, splat(ord("0"))), 10),
            builder.or_(below(builder.sub(v, splat(9)), 5), space),
            space,
            builder.icmp_unsigned(">=", v, splat(0x80)),
            builder.icmp_unsigned(">=", v, splat(0xC0)),
            builder.icmp_unsigned("==", v, splat(39)),
            builder.or_(builder.icmp_unsigned("==", v, splat(10)), builder.icmp_unsigned("==", v, splat(13))),
        ]
        return context.make_tuple(builder, signature.return_type, [builder.bitcast(m, i64) for m in masks])

    return types.UniTuple(types.uint64, N_MASKS)(text, start), codegen
