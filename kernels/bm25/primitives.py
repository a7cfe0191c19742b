"""Small pieces the BM25 kernels share: an atomic add, heap offers and bars, a galloping
search in ascending rows, and sorts that compile quickly.

Hot loops index with unsigned integers where they can: numba then skips its negative-index
fix-up on every access.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import cgutils as _cgutils
from numba.core import types as _nbtypes
from numba.extending import intrinsic

from .._config import FASTMATH
from ..topk import heap_offer, heap_sift_down

# Relative slack on upper bounds so that float32 rounding can never prune a document that
# would have made the top-k (a pruned bound is always a true bound).
BOUND_SLACK = 1.0 + 2e-5


@intrinsic
def fetch_add(typingctx, arr, idx, val):
    """Atomically add ``val`` to ``arr[idx]`` (an int64 array) and return the old value: the
    work counter that lets parallel slots take queries dynamically."""
    sig = _nbtypes.int64(arr, idx, val)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = _cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        v = context.cast(builder, args[2], signature.args[2], _nbtypes.int64)
        return builder.atomic_rmw("add", ptr, v, "monotonic")

    return sig, codegen


@intrinsic
def popcount(typingctx, x):
    """Set bits of a uint64 (one ``popcnt``)."""
    sig = _nbtypes.uint64(_nbtypes.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@intrinsic
def cmov(typingctx, cond, a, b):
    """``a if cond else b`` as one ``select`` marked unpredictable, so that LLVM keeps it a
    conditional move instead of a branch (it would branch on a select whose operand is a load,
    and a branch on data is mispredicted often)."""
    sig = a(_nbtypes.boolean, a, a)

    def codegen(context, builder, signature, args):
        c = context.cast(builder, args[0], signature.args[0], _nbtypes.boolean)
        inst = builder.select(c, args[1], args[2])
        inst.set_metadata("unpredictable", builder.module.add_metadata([]))
        return inst

    return sig, codegen


def _fence(ordering):
    def typer(typingctx):
        def codegen(context, builder, signature, args):
            builder.fence(ordering)
            return context.get_dummy_value()

        return _nbtypes.none(), codegen

    return typer


# A release fence before publishing data that other threads read once they see a flag, an
# acquire fence after reading such a flag (on x86 both only stop the compiler from moving
# loads and stores across them).
fence_release = intrinsic(_fence("release"))
fence_acquire = intrinsic(_fence("acquire"))


# --------------------------------------------------------------------------------------------
# The heap of the current top-k
# --------------------------------------------------------------------------------------------


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def raise_row(a, base32, d, heap_s, heap_d, pos, n_heap, k_eff):
    """Offer row ``d`` with new partial sum ``a`` to the heap (raising it in place when it is
    already there); return the heap size."""
    f = a + base32
    pd = pos[d]
    if pd >= 0:
        heap_s[pd] = f
        heap_sift_down(heap_s, heap_d, pos, True, n_heap, pd)
        return n_heap
    return heap_offer(heap_s, heap_d, pos, True, n_heap, k_eff, f, d)


@njit(cache=True, fastmath=FASTMATH, nogil=True, inline="always")
def offer_bar(heap_s, n_heap, k_eff, base):
    """The partial sum a row must exceed to be offered to the heap: 0 (only positive sums are
    hits) until the heap is full, then just below its worst score minus the base weight (the
    heap itself settles exact ties by row). One compare against it keeps hot loops simple."""
    if n_heap < k_eff:
        return np.float32(0.0)
    b = (float(heap_s[0]) - base) * (1.0 - 1e-6)
    return np.float32(b) if b > 0.0 else np.float32(0.0)


@njit(cache=True, fastmath=FASTMATH, nogil=True, inline="always")
def final_bar(theta_floor, theta_known, heap_s, n_heap, k_eff):
    """The bar a final score must reach: the caller's cutoff, a known k-th best score, or the
    heap's worst once it holds k rows (its sums are lower bounds of final scores)."""
    theta = max(theta_floor, theta_known)
    if n_heap == k_eff and heap_s[0] > theta:
        theta = heap_s[0]
    return theta


# --------------------------------------------------------------------------------------------
# Search and sorts
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def gallop_find(indices, lo, hi, d, g):
    """First position in ``[lo, hi)`` whose row is >= ``d`` (``hi`` if none); rows ascend.
    The search starts at the guess ``g`` and gallops outward from it: with an interpolated
    guess (rows of a posting list spread evenly over the documents) the answer is a few
    postings away, in the same cache lines, where a plain binary search misses cache at
    nearly every step."""
    if lo >= hi:
        return lo
    g = min(max(g, lo), hi - 1)
    if indices[np.uint64(g)] < d:
        # indices[a] < d; find b > a with indices[b] >= d (or b = hi).
        a = g
        step = 1
        b = g + 1
        while b < hi and indices[np.uint64(b)] < d:
            a = b
            step <<= 1
            b = a + step
        b = min(b, hi)
    else:
        # indices[b] >= d; find a < b with indices[a] < d (or a = lo - 1).
        b = g
        step = 1
        a = g - 1
        while a >= lo and indices[np.uint64(a)] >= d:
            b = a
            step <<= 1
            a = b - step
        a = max(a, lo - 1)
    while b - a > 1:
        mid = (a + b) >> 1
        if indices[np.uint64(mid)] < d:
            a = mid
        else:
            b = mid
    return b


@njit(cache=True, nogil=True)
def sort_rows(rows, n, n_docs):
    """Sort ``rows[:n]`` (ints in ``[0, n_docs)``) ascending in place: LSD radix sort with
    11-bit digits (linear time; no n log n over thousands of candidates)."""
    if n < 64:
        for i in range(1, n):
            v = rows[i]
            j = i - 1
            while j >= 0 and rows[j] > v:
                rows[j + 1] = rows[j]
                j -= 1
            rows[j + 1] = v
        return
    tmp = np.empty(n, rows.dtype)
    counts = np.empty(2048, np.int64)
    src = rows
    dst = tmp
    shift = 0
    swapped = False
    while (n_docs - 1) >> shift > 0 or shift == 0:
        counts[:] = 0
        for i in range(n):
            counts[(src[i] >> shift) & 2047] += 1
        total = 0
        for b in range(2048):
            c = counts[b]
            counts[b] = total
            total += c
        for i in range(n):
            b = (src[i] >> shift) & 2047
            dst[counts[b]] = src[i]
            counts[b] += 1
        src, dst = dst, src
        swapped = not swapped
        shift += 11
    if swapped:
        for i in range(n):
            rows[i] = tmp[i]


@njit(cache=True, nogil=True)
def _sift_down(a, root, end):
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and a[child] < a[child + 1]:
            child += 1
        if a[root] < a[child]:
            a[root], a[child] = a[child], a[root]
            root = child
        else:
            return


@njit(cache=True, nogil=True)
def heapsort(a):
    """Sort ``a`` ascending in place. For query-sized arrays: no recursion and a fraction of
    the compile time of numba's ``np.sort`` (quicksort plus its helpers, ~8 s cold)."""
    n = a.shape[0]
    for s in range(n // 2 - 1, -1, -1):
        _sift_down(a, s, n)
    for end in range(n - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        _sift_down(a, np.int64(0), end)


@njit(cache=True, nogil=True)
def _later(key, i, j):
    """Whether position ``i`` comes after ``j``: a lower key, or an equal key and a later index
    (descending by key, stable)."""
    return key[i] < key[j] or (key[i] == key[j] and i > j)


@njit(cache=True, nogil=True)
def order_desc_stable(key, m):
    """Indices of ``key[:m]`` by descending key, equal keys in index order (what
    ``np.argsort(-key[:m], kind="mergesort")`` returns), by heapsort."""
    order = np.arange(m)
    for start in range(m // 2 - 1, -1, -1):
        _sift_order(key, order, start, m)
    for end in range(m - 1, 0, -1):
        order[0], order[end] = order[end], order[0]
        _sift_order(key, order, np.int64(0), end)
    return order


@njit(cache=True, nogil=True)
def _sift_order(key, order, root, end):
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and _later(key, order[child + 1], order[child]):
            child += 1
        if _later(key, order[child], order[root]):
            order[root], order[child] = order[child], order[root]
            root = child
        else:
            return
