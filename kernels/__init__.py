"""numba kernels of fastrag, installed as ``fastrag._kernels``.

Arrays and scalars in, arrays out: no pyarrow and no Python objects inside. Every kernel is
``@njit(cache=True)`` at module level and compiles on first call, never at import.
"""
