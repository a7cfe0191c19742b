"""The compile policy of every kernel: one fastmath set, and borrowing (``_nrt=False``).

Plain ``fastmath=True`` includes ``nnan``/``ninf``, which lets LLVM assume no infinities: then
``np.isinf`` and ``-inf`` masking in top-k silently break. These flags keep inf/nan semantics.

Borrowing kernels (``_nrt=False``): numba increfs and decrefs every array a compiled function
receives, unpacks from a tuple or passes on (an atomic add each), which was a sixth of BM25
search time. Kernels that only read and write arrays they are given, and never allocate, are
declared ``@njit(..., _nrt=False)``: they borrow their callers' references and count nothing.
A callee that does not set ``_nrt`` itself inherits its caller's setting (numba compiles one
overload per signature and flags), so a kernel that allocates and is called from a borrowing one
sets ``_nrt=True`` explicitly (``kernels/bm25/lazy.py``'s ``decode_ready``), and a borrowing
kernel may not return an array. ``tests/kernels/test_borrowing_kernels.py`` checks both rules on
every overload a BM25 search compiles.
"""

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

# Below this many queries a batch runs serially: thread start-up costs more than it saves.
PARALLEL_MIN_QUERIES = 8
