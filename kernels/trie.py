"""A trie of code points in flat arrays, for segmenters' and tokenizers' dictionaries.

An edge ``(node, code point) -> child`` lives in an open-addressing hash table with linear
probing: ``keys`` int64 ``node * CP_LIMIT + code point`` (-1 for an empty slot), ``vals``
int32 the child node. Node 0 is the root. :func:`build_edge_table` makes the table from a
list of edges; :func:`build_trie` inserts pieces into an empty one and records which node
ends each piece.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "CP_LIMIT",
    "build_edge_table",
    "build_trie",
    "child",
    "edge_slot",
    "hash_slot",
    "trie_capacity",
]

CP_LIMIT = 0x110000


@njit(cache=True, inline="always")
def _mix(key):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(20))


@njit(cache=True)
def build_edge_table(parents, cps, children):
    """Hash table of trie edges: returns ``(keys int64, vals int32)`` of a power-of-2 size."""
    n = parents.shape[0]
    cap = 16
    while cap < 2 * n:
        cap *= 2
    keys = np.full(cap, -1, dtype=np.int64)
    vals = np.zeros(cap, dtype=np.int32)
    mask = cap - 1
    for i in range(n):
        key = np.int64(parents[i]) * CP_LIMIT + np.int64(cps[i])
        slot = _mix(key) & mask
        while keys[slot] != -1:
            slot = (slot + 1) & mask
        keys[slot] = key
        vals[slot] = children[i]
    return keys, vals


@njit(cache=True, inline="always")
def hash_slot(keys, node, cp):
    """The slot where the search for edge ``(node, cp)`` starts."""
    return _mix(np.int64(node) * CP_LIMIT + np.int64(cp)) & (keys.shape[0] - 1)


@njit(cache=True, inline="always")
def edge_slot(keys, node, cp):
    """The slot of edge ``(node, cp)`` in ``keys``, or -1 if ``node`` has no such child."""
    key = np.int64(node) * CP_LIMIT + np.int64(cp)
    mask = keys.shape[0] - 1
    slot = _mix(key) & mask
    while True:
        k = keys[slot]
        if k == key:
            return slot
        if k == -1:
            return -1
        slot = (slot + 1) & mask


@njit(cache=True)
def child(keys, vals, node, cp):
    """The child of ``node`` along code point ``cp``, or -1."""
    slot = edge_slot(keys, node, cp)
    return vals[slot] if slot >= 0 else -1


def trie_capacity(n_edges: int) -> int:
    """Hash table slots for ``n_edges`` edges: a power of two at least twice as many."""
    cap = 1024
    while cap < 2 * n_edges + 2:
        cap *= 2
    return cap


@njit(cache=True)
def build_trie(cps, offsets, keys, vals, piece):
    """Insert pieces ``cps[offsets[i]:offsets[i + 1]]`` (id ``i``; a later duplicate wins;
    empty pieces are left out) into ``keys``/``vals`` (all -1, room from
    :func:`trie_capacity` of the code points) and ``piece`` (all -1, one more than the code
    points). Returns the number of nodes."""
    mask = keys.shape[0] - 1
    nodes = np.int64(1)
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        if a == b:
            continue
        node = np.int64(0)
        for j in range(a, b):
            key = node * CP_LIMIT + np.int64(cps[j])
            slot = _mix(key) & mask
            while keys[slot] != -1 and keys[slot] != key:
                slot = (slot + 1) & mask
            if keys[slot] == key:
                node = np.int64(vals[slot])
            else:
                keys[slot] = key
                vals[slot] = nodes
                node = nodes
                nodes += 1
        piece[node] = i
    return nodes
