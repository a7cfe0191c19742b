"""The one fastmath policy of every kernel.

Plain ``fastmath=True`` includes ``nnan``/``ninf``, which lets LLVM assume no infinities: then
``np.isinf`` and ``-inf`` masking in top-k silently break. These flags keep inf/nan semantics.
"""

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

# Below this many queries a batch runs serially: thread start-up costs more than it saves.
PARALLEL_MIN_QUERIES = 8
