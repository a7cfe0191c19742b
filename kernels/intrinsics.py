"""CPU intrinsics numba does not expose, for kernels of any family."""

from __future__ import annotations

from llvmlite import ir as _ir
from numba.core import cgutils as _cgutils
from numba.core import types as _nbtypes
from numba.extending import intrinsic

__all__ = ["prefetch"]


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the CPU to load ``arr[idx]`` into cache (no bounds check; never faults)."""
    sig = _nbtypes.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = _cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = _ir.IntType(8).as_pointer()
        i32 = _ir.IntType(32)
        fnty = _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32])
        fn = _cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
