"""A memory prefetch hint for numba kernels: `prefetch_row(table, row)` asks the CPU to bring the
cache line of table[row, 0] in, without waiting for it.

A plain load of a row found ahead also starts the fetch, but it occupies the reorder buffer until
the line arrives, so only a few such loads overlap before the core stalls; a prefetch instruction
retires at once, so the fetches of a whole batch of chunks overlap with the work between them. It
changes no value.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def prefetch_row(typingctx, table, row):
    """Prefetch the cache line of table[row, 0] (a hint: no effect on any value)."""
    if not isinstance(table, types.Array) or table.ndim != 2 or not isinstance(row, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        zero = context.get_constant(signature.args[1], 0)
        pointer = cgutils.get_item_pointer(context, builder, array_type, array, [args[1], zero], wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0")
        builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])  # read, keep, data
        return context.get_dummy_value()

    return types.void(table, row), codegen
