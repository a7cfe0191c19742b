"""Checks of untrusted store files, run before native code or a decoder parses them.

A store's checksums catch accidents, not a buggy or foreign writer. What hnswlib or a JSON
decoder would trust is checked here first, over flat arrays; the wrappers
(:func:`fastrag.indexes.hnsw.check_index_file`,
:func:`fastrag.documents.deepcheck.check_json_objects`) turn the codes into messages.

**hnswlib index files.** hnswlib (0.8.0) trusts its file completely: a neighbour id past the
last element, a link count above the list's capacity or a neighbour missing from a level it is
linked on makes a search read outside its arrays (a segfault, or silently wrong results).
Layout (``HierarchicalNSW::saveIndex``, little-endian, every field 4-byte aligned, so the whole
file is read as one uint32 array ``words``):

* header, 96 bytes (``HEADER_WORDS`` words): ``offsetLevel0_, max_elements_,
  cur_element_count, size_data_per_element_, label_offset_, offsetData_`` (size_t),
  ``maxlevel_`` (int32), ``enterpoint_node_`` (uint32), ``maxM_, maxM0_, M_`` (size_t),
  ``mult_`` (double), ``ef_construction_`` (size_t);
* level 0: ``n`` elements of ``elem_words`` words: a header word (link count in the low 16
  bits, flags in bits 16-23: ``DELETE_MARK``), ``maxM0_`` neighbour ids, then at ``data_word``
  the ``dim`` float32 values of the vector, and at ``label_word`` the uint64 label;
* upper levels: per element a uint32 ``linkListSize`` (bytes), then ``linkListSize / 4`` words:
  one block of ``max_m + 1`` words (a count word, ``maxM_`` neighbour ids) per level above 0.

:func:`check_graph` returns ``(code, element, value, level)``: ``OK`` or one of the ``E_*``
codes, the element concerned, the value found and the level it was found on.

**JSON metadata.** :func:`check_json_objects` accepts exactly what Python's ``json.loads``
accepts (RFC 8259 plus ``NaN``, ``Infinity``, ``-Infinity``; no control characters inside
strings; integers of at most ``max_int_digits`` digits, Python's int conversion limit) when it
is a JSON object nested at most ``max_depth`` deep; the bytes are valid UTF-8 already (Arrow
checked them).
"""

from __future__ import annotations

import numpy as np
from numba import njit

HEADER_WORDS = 24
DELETE_MARK = 0x01

OK = 0
E_TRUNCATED = 1  # an upper-level list runs past the end of the file
E_TRAILING = 2  # bytes after the last upper-level list
E_LIST_SIZE = 3  # linkListSize is not a whole number of level blocks
E_LEVEL = 4  # an element's level is above maxlevel_
E_COUNT0 = 5  # level-0 link count above maxM0_
E_FLAGS0 = 6  # unknown bits in a level-0 header word
E_LINK0 = 7  # level-0 neighbour id >= cur_element_count
E_COUNT = 8  # upper-level link count above maxM_ (or unknown bits in its header word)
E_LINK = 9  # upper-level neighbour id >= cur_element_count
E_LINK_LEVEL = 10  # upper-level neighbour whose own level is below the link's level
E_VECTOR = 11  # a vector component is NaN or infinite
E_LABEL = 12  # a label >= label_limit
E_DUPLICATE = 13  # two elements with the same label


@njit(cache=True, nogil=True)
def check_graph(
    words,
    n,
    elem_words,
    data_word,
    dim,
    label_word,
    max_m0,
    max_m,
    maxlevel,
    label_limit,
    seen,
    levels,
    labels,
    deleted,
):
    """Check the level-0 block and the upper-level lists of an hnswlib file (see the module
    docstring); fills ``levels`` (int32), ``labels`` (int64) and ``deleted`` (bool), each of
    length ``n``. ``seen`` (uint8, ``label_limit`` long, zeroed) finds duplicate labels; an
    empty ``seen`` skips that check. Returns ``(code, element, value, level)``."""
    total = words.shape[0]
    block = max_m + 1
    starts = np.empty(n, np.int64)
    pos = np.int64(HEADER_WORDS) + np.int64(n) * elem_words
    for i in range(n):  # pass 1: every element's level and where its lists start
        if pos >= total:
            return E_TRUNCATED, i, 0, 0
        size = np.int64(words[pos])
        pos += 1
        if size % (4 * block) != 0:
            return E_LIST_SIZE, i, size, 0
        lvl = size // (4 * block)
        if lvl > maxlevel:
            return E_LEVEL, i, lvl, 0
        levels[i] = lvl
        starts[i] = pos
        pos += size // 4
        if pos > total:
            return E_TRUNCATED, i, size, 0
    if pos != total:
        return E_TRAILING, n, (total - pos) * 4, 0
    check_dups = seen.shape[0] > 0
    for i in range(n):  # pass 2: level 0, vector, label, upper-level links
        base = np.int64(HEADER_WORDS) + np.int64(i) * elem_words
        head = np.int64(words[base])
        cnt = head & 0xFFFF
        if cnt > max_m0:
            return E_COUNT0, i, cnt, 0
        if (head >> 16) & ~DELETE_MARK:
            return E_FLAGS0, i, head >> 16, 0
        deleted[i] = (head >> 16) & DELETE_MARK
        for j in range(cnt):
            nb = np.int64(words[base + 1 + j])
            if nb >= n:
                return E_LINK0, i, nb, 0
        for j in range(dim):
            if (words[base + data_word + j] & 0x7F800000) == 0x7F800000:
                return E_VECTOR, i, j, 0
        lab = np.uint64(words[base + label_word]) | (
            np.uint64(words[base + label_word + 1]) << np.uint64(32)
        )
        if lab >= np.uint64(label_limit):
            return E_LABEL, i, np.int64(lab & np.uint64(0x7FFFFFFFFFFFFFFF)), 0
        labels[i] = np.int64(lab)
        if check_dups:
            if seen[lab]:
                return E_DUPLICATE, i, np.int64(lab), 0
            seen[lab] = 1
        for lvl in range(1, levels[i] + 1):
            at = starts[i] + (lvl - 1) * block
            head = np.int64(words[at])
            cnt = head & 0xFFFF
            if cnt > max_m or head >> 16:
                return E_COUNT, i, head, lvl
            for j in range(cnt):
                nb = np.int64(words[at + 1 + j])
                if nb >= n:
                    return E_LINK, i, nb, lvl
                if levels[nb] < lvl:
                    return E_LINK_LEVEL, i, nb, lvl
    return OK, -1, 0, 0


# -- JSON objects ----------------------------------------------------------------------------

_OBJ, _ARR = 0, 1
_VALUE, _KEY, _AFTER = 0, 1, 2
# the literals json.loads accepts, back to back, and where each starts (numba freezes both)
_LITERALS = np.frombuffer(b"nulltruefalseNaNInfinity-Infinity", np.uint8)
_LITERAL_STARTS = np.array([0, 4, 8, 13, 16, 24, 33], np.int64)


@njit(cache=True, nogil=True, inline="always")
def _ws(data, p, hi):
    while p < hi and (data[p] == 32 or data[p] == 9 or data[p] == 10 or data[p] == 13):
        p += 1
    return p


@njit(cache=True, nogil=True, inline="always")
def _digit(data, p, hi):
    return p < hi and 48 <= data[p] <= 57


@njit(cache=True, nogil=True, inline="always")
def _hex(c):
    return 48 <= c <= 57 or 65 <= c <= 70 or 97 <= c <= 102


@njit(cache=True, nogil=True, inline="always")
def _string(data, p, hi):
    """End of the string starting at the quote ``data[p]``, or -1 (json's strict rules)."""
    p += 1
    while p < hi:
        c = data[p]
        if c == 34:  # "
            return p + 1
        if c == 92:  # backslash
            if p + 1 >= hi:
                return -1
            e = data[p + 1]
            if e == 117:  # \uXXXX
                if p + 6 > hi:
                    return -1
                for q in range(p + 2, p + 6):
                    if not _hex(data[q]):
                        return -1
                p += 6
            elif (
                e == 34
                or e == 92
                or e == 47
                or e == 98
                or e == 102
                or e == 110
                or e == 114
                or e == 116
            ):
                p += 2
            else:
                return -1
        elif c < 32:
            return -1
        else:
            p += 1
    return -1


@njit(cache=True, nogil=True)
def _number(data, p, hi, max_int_digits):
    """End of the number starting at ``data[p]`` (``-`` or a digit), or -1."""
    if data[p] == 45:  # -
        p += 1
    start = p
    if not _digit(data, p, hi):
        return -1
    if data[p] == 48:  # a leading 0 stands alone
        p += 1
    else:
        while _digit(data, p, hi):
            p += 1
    digits = p - start
    frac = False
    if p + 1 < hi and data[p] == 46 and _digit(data, p + 1, hi):  # .
        p += 2
        while _digit(data, p, hi):
            p += 1
        frac = True
    if p < hi and (data[p] == 101 or data[p] == 69):  # e E (else not part of the number)
        q = p + 1
        if q < hi and (data[q] == 43 or data[q] == 45):
            q += 1
        if _digit(data, q, hi):
            while _digit(data, q, hi):
                q += 1
            p = q
            frac = True
    if not frac and digits > max_int_digits:
        return -1
    return p


@njit(cache=True, nogil=True)
def _literal(data, p, hi):
    """End of the literal starting at ``data[p]``, or -1."""
    for w in range(_LITERAL_STARTS.shape[0] - 1):
        a, b = _LITERAL_STARTS[w], _LITERAL_STARTS[w + 1]
        if p + b - a <= hi:
            same = True
            for i in range(b - a):
                if data[p + i] != _LITERALS[a + i]:
                    same = False
                    break
            if same:
                return p + b - a
    return -1


@njit(cache=True, nogil=True)
def _json_object(data, lo, hi, stack, max_depth, max_int_digits):
    p = _ws(data, lo, hi)
    if p >= hi or data[p] != 123:  # {
        return False
    depth = 0
    state = _VALUE
    while True:
        p = _ws(data, p, hi)
        if state == _VALUE:
            if p >= hi:
                return False
            c = data[p]
            if c == 123 or c == 91:  # { [
                depth += 1
                if depth > max_depth:
                    return False
                stack[depth] = _OBJ if c == 123 else _ARR
                p = _ws(data, p + 1, hi)
                if p < hi and data[p] == (125 if c == 123 else 93):  # empty: } ]
                    p += 1
                    depth -= 1
                    state = _AFTER
                else:
                    state = _KEY if c == 123 else _VALUE
            elif c == 34:
                p = _string(data, p, hi)
                state = _AFTER
            elif 48 <= c <= 57 or (c == 45 and p + 1 < hi and data[p + 1] != 73):  # not -I
                p = _number(data, p, hi, max_int_digits)
                state = _AFTER
            else:
                p = _literal(data, p, hi)
                state = _AFTER
            if p < 0:
                return False
        elif state == _KEY:
            if p >= hi or data[p] != 34:
                return False
            p = _string(data, p, hi)
            if p < 0:
                return False
            p = _ws(data, p, hi)
            if p >= hi or data[p] != 58:  # :
                return False
            p += 1
            state = _VALUE
        else:  # _AFTER a value
            if depth == 0:
                return p == hi
            if p >= hi:
                return False
            c = data[p]
            if c == 44:  # ,
                p += 1
                state = _KEY if stack[depth] == _OBJ else _VALUE
            elif (c == 125 and stack[depth] == _OBJ) or (c == 93 and stack[depth] == _ARR):
                p += 1
                depth -= 1
            else:
                return False


@njit(cache=True, nogil=True)
def check_json_objects(data, offsets, max_depth, max_int_digits):
    """Index of the first row ``data[offsets[r]:offsets[r + 1]]`` (UTF-8) that Python's
    ``json.loads`` would not decode into a dict nested at most ``max_depth`` deep, or -1."""
    stack = np.empty(max_depth + 2, np.uint8)
    for r in range(offsets.shape[0] - 1):
        if not _json_object(data, offsets[r], offsets[r + 1], stack, max_depth, max_int_digits):
            return r
    return -1
