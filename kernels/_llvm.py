"""LLVM IR compiled for this CPU by llvmlite (numba's own code generator) into ctypes
functions: the int8 kernels numba cannot emit (``vnni``, ``avx2``). ctypes releases the GIL
during a call, so search workers run them in parallel."""

from __future__ import annotations

import ctypes
from typing import Any

PTR = ctypes.c_void_p
I64 = ctypes.c_int64


def host_has(*features: str) -> bool:
    """Whether the host CPU has every LLVM feature named (``"avx2"``, ``"avx512vnni"``...)."""
    import llvmlite.binding as llvm

    try:
        found = llvm.get_host_cpu_features()
    except RuntimeError:  # hosts LLVM cannot describe
        return False
    return all(found.get(f) for f in features)


def compile_ir(ir: str, name: str, argtypes: list[Any], keep: dict[str, Any]) -> Any:
    """Function ``name`` of ``ir``, compiled for the host CPU at optimisation level 3, as a
    ctypes function returning nothing. The execution engine that owns the machine code goes
    into ``keep["engine"]``: it must live as long as the function is called."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    mod = llvm.parse_assembly(ir)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    keep["engine"] = engine
    return ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))
