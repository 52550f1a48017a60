"""Memory loads the kernels share: eight bytes of a byte array as one word."""

from __future__ import annotations

import sys

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def load8(typingctx, text, start):
    """The 8 bytes text[start:start + 8] (uint8 array, in bounds: not checked) as one little-endian
    uint64: one unaligned load (numba's text[i] is a load and a negative-index select a byte)."""
    if not isinstance(text, types.Array) or text.dtype != types.uint8 or not isinstance(start, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        i64 = ir.IntType(64)
        address = builder.gep(array.data, [args[1]])
        value = builder.load(builder.bitcast(address, i64.as_pointer()), align=1)
        if sys.byteorder == "big":
            swap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.bswap.i64")
            value = builder.call(swap, [value])
        return value

    return types.uint64(text, start), codegen
