"""Untrusted stores: every file altered and *resealed* (its size and checksum recomputed in the
manifest, and the manifest's own checksum), so that checksums pass and only structural checks
stand between the bytes and the parsers (Arrow, NumPy, hnswlib, the kernels). Opening and
querying such a store must give answers, a StoreError, or a StoreWarning and a rebuild: never a
crash, a hang, or a raw exception. Every probe runs in a subprocess, so a crash is counted
instead of killing the run. Also: the HNSW file validator on crafted files, and deep_check."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from pyarrow import ipc
from store_probe import CHILD_PRELUDE

import fastrag as fr
from fastrag.documents.store import MANIFEST, Store, _manifest_checksum
from fastrag.errors import StoreError

# these tests damage packed BM25 indexes: stores here pack every index
pytestmark = pytest.mark.usefixtures("pack_every_index")


ROOT = Path(__file__).resolve().parents[2]
TEXTS = [f"doc {i} cat dog {'bird ' * (i % 3)}\nline two {i} fish" for i in range(40)]
# A probe that spends this much CPU time is a hang (an endless loop: what a damaged index did
# to hnswlib). CPU time, not wall-clock time: a loaded machine slows a probe down but does not
# make it spend more CPU. A probe blocked without spending CPU (a deadlock) is cut by the wall
# clock only after HANG_WALL_S, far beyond any load.
HANG_CPU_S = 120
HANG_WALL_S = 900

COMMON = CHILD_PRELUDE + textwrap.dedent("""
    import hashlib, json

    LINE = lambda t: t.split("\\n")  # noqa: E731  (same group identity in every process)
    SIMS = [("bm25", "default"), ("cosine", "default"), ("cosine", "hnsw")]

    def answers(doc, create=True):
        if create:
            doc.create_node_group("line", transform=LINE)
        out = []
        for sim, index in SIMS:
            res = fr.Retriever(doc, "line", sim, topk=3, index=index).batch(["cat bird",
                                                                              "fish 7"])
            if index == "hnsw":  # approximate: nodes of equal score may swap places
                out.append([[round(h.score, 4) for h in r] for r in res])
            else:
                out.append([[(h.text, round(h.score, 4)) for h in r] for r in res])
        return out

    def walk(doc):
        # every node of every group: id, text, metadata (a digest of them)
        out = []
        for name in doc.group_names:
            g = doc.group(name)
            out.append([name, g.ids, g.texts(), [n.metadata for n in g.nodes(range(len(g)))]])
        return hashlib.sha1(json.dumps(out, sort_keys=True, default=str).encode()).hexdigest()

    def exercise(doc, mode):
        # query every index, read every node; writable: an update, then all of it again
        got = [answers(doc), walk(doc)]
        if mode == "a":
            doc.add(texts=["a cat and a fish 99\\nline two 99 fish"])
            doc.delete(doc.group("root").ids[:1])
            got += [answers(doc, create=False), walk(doc)]
        return got
""")

# stdin: JSON list of [store, mode]. A probe that spends more than HANG_CPU_S of CPU time (or
# runs HANG_WALL_S) dumps its stack and exits (faulthandler): the parent counts it as a hang.
CHILD = COMMON + textwrap.dedent(f"""
    import faulthandler, os, sys, threading, time, traceback, warnings
    from fastrag.errors import StoreError, StoreWarning

    case_cpu = [None]  # the process CPU time when the current probe began

    def watchdog():
        while True:
            time.sleep(0.25)
            began = case_cpu[0]
            if began is not None and time.process_time() - began > {HANG_CPU_S}:
                sys.stderr.write("Timeout: over {HANG_CPU_S} s of CPU time in one probe\\n")
                faulthandler.dump_traceback(all_threads=True)
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()

    def probe(store, mode):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = exercise(fr.Document(store=store, embed=emb, mode=mode), mode)
                result = {{"status": "OK", "hits": got}}
            except StoreError as exc:
                result = {{"status": "STOREERROR", "message": str(exc)}}
            except Exception as exc:  # reported, and failed by the test
                tb = traceback.format_exception(exc)[-3:]
                result = {{"status": "OTHER", "message": f"{{type(exc).__name__}}: {{exc}}",
                          "where": "".join(tb)[-1500:]}}
        result["warnings"] = [str(w.message) for w in caught
                              if issubclass(w.category, StoreWarning)]
        return result

    for store, mode in json.loads(sys.stdin.readline()):
        print("BEGIN " + store, flush=True)  # names the case if the interpreter dies in it
        case_cpu[0] = time.process_time()
        faulthandler.dump_traceback_later({HANG_WALL_S}, exit=True)
        result = probe(store, mode)
        faulthandler.cancel_dump_traceback_later()
        case_cpu[0] = None
        print("RESULT " + json.dumps({{"store": store, **result}}), flush=True)
""")

ns: dict = {"__name__": "__main__"}  # LINE gets the group identity it has in the children
exec(COMMON, ns)
emb, answers = ns["emb"], ns["answers"]


# -- running probes ------------------------------------------------------------------------------


def _run_batch(cases: list[tuple[str, str]], env: dict) -> subprocess.Popen:
    """A child probing ``cases`` (passed on stdin: thousands of paths overflow argv)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    proc.stdin.write(json.dumps(cases) + "\n")
    proc.stdin.flush()
    return proc


def run_probes(cases: list[tuple[Path, str]], workers: int = 2) -> dict[str, dict]:
    """Probe every (store, mode) in child processes (``workers`` at a time); a child that
    dies (a signal, or a hang cut short) is recorded as status CRASH or HANG for the case it
    was in, and the rest of its batch runs in a fresh child."""
    env = dict(os.environ)
    todo = [[str(s), m] for s, m in cases]
    results: dict[str, dict] = {}
    while todo:
        share = -(-len(todo) // workers)
        procs = [_run_batch(todo[i : i + share], env) for i in range(0, len(todo), share)]
        for proc in procs:
            # a deadlock backstop only (each probe limits itself); select() takes < 2^31 ms
            out, err = proc.communicate(timeout=min(len(todo) * HANG_WALL_S + 120, 86_400))
            begun = None
            for line in out.splitlines():
                if line.startswith("BEGIN "):
                    begun = line[6:]
                elif line.startswith("RESULT "):
                    r = json.loads(line[7:])
                    results[r["store"]] = r
                    begun = None
            if begun is not None:  # the child died inside this case
                hang = "Timeout" in err or "most recent call first" in err
                results[begun] = {
                    "store": begun,
                    "status": "HANG" if hang else "CRASH",
                    "returncode": proc.returncode,
                    "message": err[-2000:],
                    "warnings": [],
                }
            elif proc.returncode != 0:
                raise AssertionError(f"probe child failed outside a case: {err[-2000:]}")
        todo = [c for c in todo if c[0] not in results]
    return results


# -- resealing -----------------------------------------------------------------------------------


def write_manifest(st: Path, body: dict) -> None:
    data = {**body, "checksum": _manifest_checksum(body)}
    (st / MANIFEST).write_bytes(json.dumps(data, ensure_ascii=False, indent=1).encode())


def reseal(st: Path, rel: str) -> None:
    """Record ``rel``'s current size and checksum in the manifest and re-checksum it: a store
    whose checksums all pass over altered bytes (a buggy writer, a foreign store)."""
    body = json.loads((st / MANIFEST).read_bytes())
    body.pop("checksum")
    data = (st / rel).read_bytes()
    entries = [seg for seg in _segments(body) if seg["file"] == rel]
    entries += [
        f
        for idx in body["indexes"].values()
        for name, f in idx["files"].items()
        if f"{idx['dir']}/{name}" == rel
    ]
    assert len(entries) == 1, rel
    entries[0].update(size=len(data), checksum=xxhash.xxh3_64(data).hexdigest())
    write_manifest(st, body)


def reseal_manifest(st: Path) -> bool:
    """Recompute the manifest's own checksum over its (altered) body; False when the bytes are
    no longer a JSON object (then no checksum can be recomputed)."""
    try:
        body = json.loads((st / MANIFEST).read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    if not isinstance(body, dict):
        return False
    body.pop("checksum", None)
    write_manifest(st, body)
    return True


def _segments(m: dict):
    yield from m["sources"]
    for g in m["groups"].values():
        yield from g["segments"]
    for v in m["vectors"].values():
        yield from v["segments"]


# -- alterations ---------------------------------------------------------------------------------


def _flip(data: bytes, pos: int, mask: int) -> bytes:
    out = bytearray(data)
    out[pos] ^= mask
    return bytes(out)


def _zero(data: bytes, lo: int, n: int) -> bytes:
    out = bytearray(data)
    out[lo : lo + n] = bytes(len(out[lo : lo + n]))
    return bytes(out)


def _swap(data: bytes, a: int, b: int, n: int) -> bytes:
    out = bytearray(data)
    out[a : a + n], out[b : b + n] = data[b : b + n], data[a : a + n]
    return bytes(out)


def alterations(data: bytes, seed: int, extra: int = 0) -> list[tuple[str, bytes]]:
    """Altered copies of ``data``, each different from it: bit flips at the headers (the first
    and last bytes: magic numbers, Arrow footers, npy and hnswlib headers) and spread over the
    file, truncations, zeroed ranges, random garbage, swapped blocks. ``extra`` adds that many
    flips at random positions."""
    n = len(data)
    rng = np.random.default_rng(seed)
    head = [0, 1, 3, 6, 8, 9, 10, 12, 16, 24, 40, 48, 52, 56, 64, 80, 88]
    spread = [n // 8, n // 4, n // 3, n // 2, 2 * n // 3, 3 * n // 4]
    tail = [n - 1, n - 4, n - 7, n - 10, n - 16, n - 24]
    rand = rng.integers(0, n, extra).tolist()
    masks = (0x01, 0x80, 0xFF, 0x10, 0x40)
    out = [
        (f"flip@{p}^{masks[i % 5]:#x}", _flip(data, p, masks[i % 5]))
        for i, p in enumerate(sorted({p for p in head + spread + tail + rand if 0 <= p < n}))
    ]
    out += [(f"truncate@{k}", data[:k]) for k in sorted({0, 8, n // 2, n - 1})]
    out += [
        ("zero@0+16", _zero(data, 0, 16)),
        (f"zero@{n // 2}+64", _zero(data, n // 2, 64)),
        ("zero@-32", _zero(data, max(n - 32, 0), 32)),
        ("garbage", rng.integers(0, 256, n, dtype=np.uint8).tobytes()),
        ("garbage-after-16", data[:16] + rng.integers(0, 256, n - 16, np.uint8).tobytes()),
        (f"swap@{n // 3}/{2 * n // 3}+8", _swap(data, n // 3, 2 * n // 3, 8)),
        ("swap@8/9", _swap(data, 8, 9, 1)),
    ]
    seen, unique = {data}, []
    for name, altered in out:
        if altered not in seen:  # an alteration must change the file
            seen.add(altered)
            unique.append((name, altered))
    return unique


def kind(rel: str) -> str:
    """manifest, sources, root, line (a group), vec, or an index file: bm25:<array>, hnsw."""
    if rel == MANIFEST:
        return "manifest"
    if rel.startswith("indexes/"):
        name = rel.split("/")[-1]
        return "hnsw" if name == "index.bin" else "bm25:" + name[:-4]
    return rel.split("/")[-1].split(".")[0].split("-")[0]


DERIVED = ("vec", "hnsw", "bm25")  # dropped and rebuilt with a StoreWarning when damaged


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    st = tmp_path_factory.mktemp("untrusted") / "template"
    answers(fr.Document.from_texts(TEXTS, store=st, embed=emb))
    return st


@pytest.fixture(scope="module")
def clean(template, tmp_path_factory):
    """What probes of the unaltered store answer, by mode."""
    dest = tmp_path_factory.mktemp("clean")
    cases = [(shutil.copytree(template, dest / mode), mode) for mode in ("r", "a")]
    got = run_probes(cases)
    assert all(
        got[str(st)]["status"] == "OK" and not got[str(st)]["warnings"] for st, _ in cases
    ), got
    return {mode: got[str(st)]["hits"] for st, mode in cases}


def check_outcomes(results: dict[str, dict], where: dict, clean) -> Counter:
    """Assert every outcome is allowed; returns the counts by (kind, outcome)."""
    counts: Counter = Counter()
    bad = []
    for st, (rel, how, mode) in where.items():
        got = results[st]
        k = kind(rel)
        status = got["status"]
        if status == "OK":
            outcome = (
                "ok+warning"
                if got["warnings"]
                else ("ok" if got["hits"] == clean[mode] else "ok, answers changed")
            )
        else:
            outcome = status.lower()
        counts[(k, outcome)] += 1
        if status in ("CRASH", "HANG", "OTHER"):
            bad.append((rel, how, mode, got))
        elif status == "STOREERROR":
            # the error names the damaged file (or, for the manifest, the file it names)
            if k != "manifest" and Path(rel).name not in got["message"]:
                bad.append((rel, how, mode, got))
            if k.split(":")[0] in DERIVED:  # derived files are rebuilt, never an error
                bad.append((rel, how, mode, got))
        elif got["warnings"] and got["hits"] != clean[mode]:
            # a derived file dropped and rebuilt from intact data: the clean answers
            bad.append((rel, how, mode, got))
    assert not bad, (len(bad), bad[:5])
    return counts


def report(counts: Counter, n_cases: int, n_files: int) -> str:
    kinds = sorted({k for k, _ in counts})
    lines = [f"{n_cases} cases, {n_files} files, {len(kinds)} kinds"]
    for k in kinds:
        lines.append(
            f"  {k:20s} "
            + ", ".join(f"{o}: {c}" for (kk, o), c in sorted(counts.items()) if kk == k)
        )
    total = Counter()
    for (_, o), c in counts.items():
        total[o] += c
    lines.append("  total: " + ", ".join(f"{o}: {c}" for o, c in sorted(total.items())))
    return "\n".join(lines)


# -- alterations of single Arrow buffers (located in an uncompressed rewrite) --------------------


def _roles(t: pa.DataType) -> list[str]:
    """What each buffer of an array of type ``t`` holds, in ``Array.buffers()`` order."""
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return ["validity", "offsets32", "utf8" if pa.types.is_string(t) else "data"]
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return ["validity", "offsets64", "utf8" if pa.types.is_large_string(t) else "data"]
    if pa.types.is_list(t):
        return ["validity", "offsets32"] + _roles(t.value_type)
    if pa.types.is_large_list(t):
        return ["validity", "offsets64"] + _roles(t.value_type)
    if pa.types.is_fixed_size_list(t):
        return ["validity"] + _roles(t.value_type)
    return ["validity", "data"]


def _plain_segment(data: bytes) -> bytes:
    """The same table written as an uncompressed Arrow IPC file (a valid segment)."""
    table = ipc.open_file(pa.py_buffer(data)).read_all()
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=65536)
    return sink.getvalue().to_pybytes()


def buffer_alterations(data: bytes, tmp: Path) -> list[tuple[str, bytes]]:
    """The segment ``data`` rewritten uncompressed (first, unaltered), then copies of that
    with one buffer of one column altered: offsets out of range, negative, decreasing or past
    the data; invalid UTF-8; numbers set to all-ones bits; validity bitmaps cleared."""
    plain = _plain_segment(data)
    path = tmp / "plain.arrow"
    path.write_bytes(plain)
    mm = pa.memory_map(str(path), "r")
    base = mm.read_buffer().address
    mm.seek(0)
    table = ipc.open_file(mm).read_all()
    out = [("rewritten uncompressed", plain)]
    for name, col in zip(table.column_names, table.columns, strict=True):
        for chunk in col.chunks:
            for role, buf in zip(_roles(chunk.type), chunk.buffers(), strict=True):
                if buf is None or buf.size == 0:
                    continue
                at, size = buf.address - base, buf.size
                assert 0 <= at and at + size <= len(plain), (name, role)
                edits = []
                if role.startswith("offsets"):
                    width = 4 if role == "offsets32" else 8
                    n = size // width
                    mid = at + width * (n // 2)
                    last = at + width * (n - 1)
                    cur = int.from_bytes(plain[last : last + width], "little", signed=True)
                    edits = [
                        ("huge", mid, (2 ** (8 * width - 1) - 16).to_bytes(width, "little")),
                        ("negative", mid, (-1).to_bytes(width, "little", signed=True)),
                        ("past end", last, (cur + 1).to_bytes(width, "little")),
                        ("first 1", at, (1).to_bytes(width, "little")),
                    ]
                    if n > 2:
                        edits.append(
                            (
                                "swapped",
                                mid,
                                plain[mid + width : mid + 2 * width] + plain[mid : mid + width],
                            )
                        )
                elif role == "utf8":
                    edits = [
                        ("invalid utf-8", at + size // 2, bytes([0xFF])),
                        ("lone continuation", at, bytes([0x80])),
                    ]
                elif role == "data":
                    edits = [("all ones", at + (size // 2) // 8 * 8, b"\xff" * min(8, size))]
                else:
                    edits = [("cleared", at, bytes(min(size, 2)))]
                for what, pos, new in edits:
                    altered = plain[:pos] + new + plain[pos + len(new) :]
                    if altered != plain:
                        out.append((f"{name}.{role} {what}", altered))
    del table, mm
    return out


# -- manifests a buggy writer could commit (parsed, changed, resealed) ---------------------------


def _paths(value, path=()):
    """Every (path, value) in a JSON value; of a long list only its first two items."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from _paths(v, path + (i,))


def _replaced(body, path, new):
    out = json.loads(json.dumps(body))
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    if new is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return out


_DELETE = object()


def manifest_mutations(body: dict) -> list[tuple[str, dict]]:
    """Manifest bodies with one value changed: every key removed; every number moved by one,
    negative, huge or a string; every string emptied, changed or a number; every list and
    object emptied or of another type; file names pointing out of the store."""
    out = []
    for path, value in _paths(body):
        if not path or path == ("format_version",):
            continue  # the whole body; the version (refused by the format check already)
        where = "/".join(map(str, path))
        news: list = []
        if isinstance(path[-1], str):
            news.append(("removed", _DELETE))
        if isinstance(value, bool):
            news += [("not", not value), ("string", "yes")]
        elif isinstance(value, int):
            news += [
                ("+1", value + 1),
                ("-1", value - 1),
                ("negative", -5),
                ("huge", 1 << 62),
                ("string", str(value)),
                ("float", value + 0.5),
                ("null", None),
            ]
        elif isinstance(value, float):
            news += [("doubled", value * 2), ("string", str(value)), ("null", None)]
        elif isinstance(value, str):
            news += [
                ("empty", ""),
                ("changed", value[:-1] + ("x" if value[-1:] != "x" else "y")),
                ("number", 7),
                ("null", None),
                ("list", [value]),
            ]
            if path[-1] in ("file", "dir"):
                news += [("outside", "../" + value), ("absolute", "/etc/" + value)]
        elif isinstance(value, list):
            news += [
                ("emptied", []),
                ("shortened", value[:-1]),
                ("object", {}),
                ("null", None),
                ("string", "x"),
            ]
        elif isinstance(value, dict):
            news += [("emptied", {}), ("list", []), ("null", None), ("string", "x")]
        else:  # None
            news += [("string", "x"), ("number", 3), ("object", {})]
        for what, new in news:
            altered = _replaced(body, path, new)
            if altered != body:
                out.append((f"{where} {what}", altered))
    return out


# -- the campaigns -------------------------------------------------------------------------------


def build_cases(
    template: Path,
    dest: Path,
    *,
    extra_flips: int = 0,
    a_every: int = 10,
    buffers: bool = True,
    manifests: int = 4,
) -> tuple[list[tuple[Path, str]], dict[str, tuple[str, str, str]]]:
    """One altered, resealed copy of the template per case: byte alterations of every file
    (:func:`alterations`), single-buffer alterations of every segment
    (:func:`buffer_alterations`), and every ``manifests``-th manifest mutation. Each is probed
    read-only; every ``a_every``-th also writable (an update, then everything again)."""
    files = sorted(Store(template).referenced())
    body = json.loads((template / MANIFEST).read_bytes())
    body.pop("checksum")
    todo: list[tuple[str, str, bytes | dict]] = []
    for i, rel in enumerate(files):
        data = (template / rel).read_bytes()
        todo += [(rel, how, b) for how, b in alterations(data, i, extra_flips)]
        if buffers and rel.endswith(".arrow"):
            todo += [(rel, how, b) for how, b in buffer_alterations(data, dest)]
    todo += [(MANIFEST, how, b) for how, b in manifest_mutations(body)[::manifests]]
    cases, where = [], {}
    for j, (rel, how, altered) in enumerate(todo):
        for mode in ("r", "a") if j % a_every == 0 else ("r",):
            st = dest / f"case{len(cases)}"
            shutil.copytree(template, st)
            if isinstance(altered, dict):
                write_manifest(st, altered)
            else:
                (st / rel).write_bytes(altered)
                reseal_manifest(st) if rel == MANIFEST else reseal(st, rel)
            cases.append((st, mode))
            where[str(st)] = (rel, how, mode)
    return cases, where


def campaign(template: Path, clean: dict, dest: Path, **kw) -> Counter:
    cases, where = build_cases(template, dest, **kw)
    results = run_probes(cases)
    assert len(results) == len(cases)
    counts = check_outcomes(results, where, clean)
    print("\n" + report(counts, len(cases), len(Store(template).referenced())))
    return counts


@pytest.mark.slow  # a damage campaign: CI's full run
def test_resealed_damage_campaign(template, clean, tmp_path):
    """Every file of every kind, altered and resealed: never a crash, hang or raw exception;
    derived files are rebuilt, the others answer or raise a StoreError naming the file."""
    counts = campaign(template, clean, tmp_path)
    kinds = {k for k, _ in counts}
    assert kinds == {"manifest", "sources", "root", "line", "vec", "hnsw"} | {
        f"bm25:{a}"
        for a in (
            *("blk_dw", "blk_last", "blk_tw", "blk_word", "doc_len", "indptr", "term_max"),
            *("words", "vocab_bytes", "vocab_offsets"),
        )
    }
    assert sum(counts.values()) >= 700
    for k in kinds:  # every kind's damage was seen (not only answered around)
        assert counts[(k, "storeerror")] + counts[(k, "ok+warning")] > 0, k


@pytest.mark.slow
def test_resealed_damage_campaign_large(template, clean, tmp_path):
    """The campaign with 40 more random flips per file, every manifest mutation, and every
    other case also probed writable (about 2,400 cases)."""
    counts = campaign(template, clean, tmp_path, extra_flips=40, a_every=2, manifests=1)
    assert sum(counts.values()) >= 2300


def test_manifest_shape_is_checked_on_read(template, tmp_path):
    body = json.loads((template / MANIFEST).read_bytes())
    body.pop("checksum")
    cases = []
    for how in ("sources removed", "groups/line/root_gen removed", "indexes list"):
        altered = dict(manifest_mutations(body))[how]
        st = shutil.copytree(template, tmp_path / f"case{len(cases)}")
        write_manifest(st, altered)
        cases.append((st, "r"))
    results = run_probes(cases)
    assert [results[str(st)]["status"] for st, _ in cases] == ["STOREERROR"] * 3


# -- the HNSW file validator ---------------------------------------------------------------------

HNSW_HEADER = struct.Struct("<6QiI3QdQ")
HNSW_FIELDS = (
    "off_level0",
    "max_elements",
    "count",
    "per_elem",
    "label_off",
    "data_off",
    "maxlevel",
    "enterpoint",
    "max_m",
    "max_m0",
    "m",
    "mult",
    "ef_construction",
)


def parse_hnsw(raw: bytes) -> dict:
    """An hnswlib file as its header fields, level-0 words (n, per_elem / 4) and per-element
    upper-level words (written out by :func:`write_hnsw` unchanged, or edited)."""
    h = dict(zip(HNSW_FIELDS, HNSW_HEADER.unpack(raw[:96]), strict=True))
    n, per = h["count"], h["per_elem"]
    level0 = np.frombuffer(raw, "<u4", n * per // 4, 96).reshape(n, per // 4).copy()
    upper, pos = [], 96 + n * per
    for _ in range(n):
        size = int.from_bytes(raw[pos : pos + 4], "little")
        upper.append(np.frombuffer(raw, "<u4", size // 4, pos + 4).copy())
        pos += 4 + size
    assert pos == len(raw)
    return {"header": h, "level0": level0, "upper": upper}


def write_hnsw(path: Path, f: dict) -> Path:
    h = f["header"]
    parts = [HNSW_HEADER.pack(*(h[k] for k in HNSW_FIELDS)), f["level0"].astype("<u4").tobytes()]
    for words in f["upper"]:
        parts += [struct.pack("<I", 4 * len(words)), words.astype("<u4").tobytes()]
    path.write_bytes(b"".join(parts))
    return path


def synthetic_hnsw(path: Path, n: int, dim: int, M: int = 16, seed: int = 0) -> Path:
    """A valid hnswlib file of ``n`` random unit vectors and a random graph that keeps every
    rule hnswlib's own files keep (for timing at sizes too slow to build)."""
    rng = np.random.default_rng(seed)
    mult = 1 / np.log(M)
    levels = np.floor(-np.log(rng.random(n)) * mult).astype(np.int64)
    ep = int(np.argmax(levels))
    m0, words0 = 2 * M, 2 * M + 1
    level0 = np.zeros((n, words0 + dim + 2), "<u4")
    count0 = min(m0, n - 1)
    level0[:, 0] = count0
    level0[:, 1 : 1 + count0] = rng.integers(0, n, (n, count0))
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    level0[:, words0 : words0 + dim] = vecs.view("<u4")
    level0[:, -2] = np.arange(n)
    upper = [np.zeros(0, "<u4")] * n
    on_level = [np.flatnonzero(levels >= lvl) for lvl in range(int(levels.max()) + 1)]
    for i in np.flatnonzero(levels):
        blocks = np.zeros((levels[i], M + 1), "<u4")
        for lvl in range(1, levels[i] + 1):
            peers = on_level[lvl][rng.integers(0, len(on_level[lvl]), M)]
            blocks[lvl - 1, 0] = M
            blocks[lvl - 1, 1:] = peers  # repeats are harmless, as in level 0
        upper[i] = blocks.ravel()
    per = 4 * (words0 + dim + 2)
    header = dict(
        off_level0=0,
        max_elements=n,
        count=n,
        per_elem=per,
        label_off=4 * (words0 + dim),
        data_off=4 * words0,
        maxlevel=int(levels[ep]),
        enterpoint=ep,
        max_m=M,
        max_m0=m0,
        m=M,
        mult=float(mult),
        ef_construction=200,
    )
    return write_hnsw(path, {"header": header, "level0": level0, "upper": upper})


@pytest.fixture(scope="module")
def hnsw_file(tmp_path_factory):
    """A real index: 300 rows of dim 8 with M=4 (so several upper levels), 3 rows deleted."""
    from fastrag.indexes.hnsw import HNSWIndex

    x = np.random.default_rng(1).standard_normal((300, 8)).astype(np.float32)
    index = HNSWIndex(8, M=4, ef_construction=50, num_threads=1)
    index.add(x)
    index.mark_deleted([3, 30, 299])
    path = tmp_path_factory.mktemp("hnsw") / "index.bin"
    index.save(path)
    f = parse_hnsw(path.read_bytes())
    assert f["header"]["maxlevel"] >= 2 and sum(len(u) > 0 for u in f["upper"]) > 30
    return path, f


def _edited(f: dict, edit) -> dict:
    out = {
        "header": dict(f["header"]),
        "level0": f["level0"].copy(),
        "upper": [u.copy() for u in f["upper"]],
    }
    edit(out)
    return out


def _first_upper(f: dict, level: int = 1) -> int:
    """An element with at least ``level`` upper levels and links on that level."""
    block = f["header"]["max_m"] + 1
    return next(
        i
        for i, u in enumerate(f["upper"])
        if len(u) >= level * block and u[(level - 1) * block] > 0
    )


def _set(header_key, value):
    def edit(f):
        f["header"][header_key] = value

    return edit


def _low_level_element(f):
    return next(i for i, u in enumerate(f["upper"]) if len(u) == 0)


def _raise_level(f):  # an element above the top level: one more block than maxlevel allows
    block = f["header"]["max_m"] + 1
    i = _first_upper(f)
    f["upper"][i] = np.zeros(block * (f["header"]["maxlevel"] + 1), "<u4")


def _upper_link(value_of):
    def edit(f):
        block = f["header"]["max_m"] + 1
        i = _first_upper(f, 2) if value_of == "low" else _first_upper(f)
        lvl = 2 if value_of == "low" else 1
        at = (lvl - 1) * block + 1
        f["upper"][i][at] = {"count": 10**6, "low": _low_level_element(f)}[value_of]

    return edit


def _upper_header(value):
    def edit(f):
        f["upper"][_first_upper(f)][0] = value

    return edit


def _lower_entry_point(f):
    i = _low_level_element(f)
    f["header"]["enterpoint"] = i


def _cut_list(f):
    i = _first_upper(f)
    f["upper"][i] = f["upper"][i][:-1]


def _dup_label(f):
    f["level0"][5, -2:] = f["level0"][6, -2:]


CRAFTED = {  # name -> (edit, expected message)
    "dim": (_set("label_off", 4 * (9 + 8 + 3)), r"holds vectors of dim 11, not dim=8"),
    "maxM0": (_set("max_m0", 9), r"maxM0=9 \(expected"),
    "M": (_set("m", 0), r"has M=0"),
    "offsetLevel0": (_set("off_level0", 4), r"element layout offsetLevel0=4"),
    "size_data_per_element": (_set("per_elem", 80), r"size_data_per_element=80"),
    "mult": (_set("mult", 2.0), r"level multiplier 2.0"),
    "ef_construction": (_set("ef_construction", 2), r"ef_construction=2"),
    "count": (_set("count", 10**9), r"bytes for 1000000000 elements"),
    "count + 1": (_set("count", 301), r"element 0 has upper-level links of \d+ bytes"),
    "max_elements": (_set("max_elements", 299), r"capacity 299"),
    "max_elements huge": (_set("max_elements", 1 << 60), None),  # ignored: capacity = count
    "enterpoint": (_set("enterpoint", 300), r"entry point 300 for 300 elements"),
    "maxlevel negative": (_set("maxlevel", -1), r"top level -1 and entry point"),
    "maxlevel too high": (_set("maxlevel", 9), r"highest element is on level"),
    "entry point low": (_lower_entry_point, r"entry point \d+ on level 0"),
    "level-0 count": (
        lambda f: f["level0"].__setitem__((7, 0), 9),
        r"element 7 has 9 level-0 "
        "links, more than maxM0=8",
    ),
    "level-0 flags": (
        lambda f: f["level0"].__setitem__((7, 0), 0x20001),
        r"element 7 has unknown flags 0x2",
    ),
    "level-0 high byte": (
        lambda f: f["level0"].__setitem__((7, 0), 0x1000001),
        r"element 7 has unknown flags 0x100",
    ),
    "level-0 link": (
        lambda f: f["level0"].__setitem__((7, 1), 300),
        r"element 7 links to element 300 on level 0, but there are only 300",
    ),
    "vector nan": (
        lambda f: f["level0"].__setitem__((7, 9 + 2), 0x7FC00000),
        r"element 7 has a NaN or infinite vector component 2",
    ),
    "vector inf": (
        lambda f: f["level0"].__setitem__((7, 9), 0xFF800000),
        r"element 7 has a NaN or infinite vector component 0",
    ),
    "label": (lambda f: f["level0"].__setitem__((7, -1), 1), r"element 7 has row id 4294967\d+"),
    "duplicate label": (_dup_label, r"share row id"),
    "list size": (_cut_list, r"upper-level links of \d+ bytes, not a whole number of levels"),
    "level above top": (_raise_level, r"above the index's top level"),
    "upper count": (_upper_header(5), r"level-1 link header 0x5 \(count above maxM=4"),
    "upper header bits": (_upper_header(0x10001), r"level-1 link header 0x10001"),
    "upper link": (_upper_link("count"), r"links to element 1000000 on level 1"),
    "upper link level": (_upper_link("low"), r"on level 2, which is not on that level"),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_hnsw_validator_rejects_crafted_file(hnsw_file, tmp_path, name):
    from fastrag.errors import StoreError
    from fastrag.indexes.hnsw import HNSWIndex, check_index_file

    _, f = hnsw_file
    edit, message = CRAFTED[name]
    path = write_hnsw(tmp_path / "index.bin", _edited(f, edit))
    if message is None:  # harmless: accepted, and loads
        assert check_index_file(path, 8, max_rows=300).count == 300
        assert HNSWIndex.load(path, 8, max_rows=300).n == 297
        return
    with pytest.raises(StoreError, match=message) as info:
        check_index_file(path, 8, max_rows=300)
    assert str(path) in str(info.value) and "rebuild the index" in str(info.value)
    with pytest.raises(StoreError, match=message):  # load checks first: no crash, same error
        HNSWIndex.load(path, 8, max_rows=300)


def test_hnsw_validator_byte_level_damage(hnsw_file, tmp_path):
    """Truncation, trailing bytes, an odd size and an empty index that claims a graph."""
    from fastrag.errors import StoreError
    from fastrag.indexes.hnsw import check_index_file

    path, f = hnsw_file
    raw = path.read_bytes()
    bad = tmp_path / "bad.bin"
    for data, message in [
        (raw[:50], r"is truncated \(50 bytes\)"),
        (raw[:-4], r"is truncated: the upper-level links of element 299"),
        (raw + bytes(8), r"has 8 bytes after the last element's links"),
        (raw + bytes(2), r"has \d+ bytes for 300 elements"),
        (raw[: 96 + 300 * 76 - 4], r"has \d+ bytes for 300 elements"),
    ]:
        bad.write_bytes(data)
        with pytest.raises(StoreError, match=message):
            check_index_file(bad, 8)
    empty = _edited(f, lambda g: g["header"].update(count=0))
    empty.update(level0=f["level0"][:0], upper=[])
    write_hnsw(bad, empty)
    with pytest.raises(StoreError, match=r"has no elements but top level"):
        check_index_file(bad, 8)


def test_hnsw_validator_row_ids_against_max_rows(hnsw_file, tmp_path):
    from fastrag.errors import StoreError
    from fastrag.indexes.hnsw import check_index_file

    path, f = hnsw_file
    assert check_index_file(path, 8, max_rows=300).count == 300
    with pytest.raises(StoreError, match=r"row id 299, outside \[0, 299\)"):
        check_index_file(path, 8, max_rows=299)
    dup = write_hnsw(tmp_path / "dup.bin", _edited(f, _dup_label))
    for max_rows in (300, None):  # bitmap and sort paths
        with pytest.raises(StoreError, match=r"share row id"):
            check_index_file(dup, 8, max_rows=max_rows)


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_hnsw_kernel_matches_its_python_twin(hnsw_file, tmp_path, name):
    """The compiled kernel and its plain-Python source agree on every crafted file (numba's
    integer semantics change nothing)."""
    from fastrag._kernels import store_check

    _, f = hnsw_file
    path = write_hnsw(tmp_path / "index.bin", _edited(f, CRAFTED[name][0]))
    words = np.fromfile(path, "<u4")
    h, n = f["header"], 300  # the unedited header's layout, over the edited words
    outs = []
    for fn in (store_check.check_graph, store_check.check_graph.py_func):
        out = np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.bool_)
        code = fn(
            words,
            n,
            h["per_elem"] // 4,
            h["data_off"] // 4,
            8,
            h["label_off"] // 4,
            h["max_m0"],
            h["max_m"],
            h["maxlevel"],
            300,
            np.zeros(300, np.uint8),
            *out,
        )
        outs.append((tuple(int(v) for v in code), [o.tolist() for o in out]))
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    "n,dim,M,deleted",
    [
        (0, 8, 16, 0),
        (1, 1, 2, 0),
        (2, 8, 2, 1),
        (50, 8, 4, 5),
        (2000, 24, 16, 100),
        (3000, 64, 8, 0),
    ],
)
def test_hnsw_validator_accepts_real_files(tmp_path, n, dim, M, deleted):
    from fastrag.indexes.hnsw import HNSWIndex, check_index_file

    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    index = HNSWIndex(dim, M=M, ef_construction=40, max_elements=max(n, 1))
    rows = rng.permutation(n * 2)[:n]  # sparse row ids
    index.add(x, rows=rows)
    gone = rows[:deleted]
    if deleted:
        index.mark_deleted(gone)
    path = tmp_path / "index.bin"
    index.save(path)
    info = check_index_file(path, dim, max_rows=2 * n)
    assert info.count == n and info.dim == dim and info.M == M
    assert sorted(info.labels.tolist()) == sorted(rows.tolist())
    assert sorted(info.labels[info.deleted].tolist()) == sorted(gone.tolist())
    assert info.levels.max(initial=-1) == info.max_level
    loaded = HNSWIndex.load(path, dim, max_rows=2 * n)
    assert loaded.n == n - deleted
    q = rng.standard_normal((3, dim)).astype(np.float32)
    if n:
        for a, b in zip(index.search(q, 5), loaded.search(q, 5), strict=True):
            np.testing.assert_array_equal(a, b)
    loaded.add(rng.standard_normal((2, dim)).astype(np.float32))  # a loaded index grows
    assert loaded.n == n - deleted + 2


def test_hnsw_synthetic_file_is_valid_for_both(tmp_path):
    """The timing helper's synthetic files pass the validator and load in hnswlib."""
    import hnswlib

    from fastrag.indexes.hnsw import check_index_file

    path = synthetic_hnsw(tmp_path / "s.bin", 5000, 16, M=8)
    info = check_index_file(path, 16, max_rows=5000)
    assert info.count == 5000 and info.max_level >= 2
    raw = hnswlib.Index(space="ip", dim=16)
    raw.load_index(str(path), max_elements=5000)
    assert raw.element_count == 5000
    labels, _ = raw.knn_query(np.ones((1, 16), np.float32), k=5)
    assert labels.shape == (1, 5)


def measure_hnsw_check(
    n: int, dim: int, folder: Path, real: bool = False, repeats: int = 3
) -> dict:
    """Seconds to check an index file of ``n`` x ``dim`` (M=16) vs hnswlib's load_index of it
    (best of ``repeats``, page cache warm). ``real``: built by hnswlib (slow), else synthetic.
    ``python -c "import sys; sys.path[:0] = ['tests', 'tests/documents']; import
    test_store_untrusted as t, pathlib; print(t.measure_hnsw_check(100_000, 384,
    pathlib.Path('/tmp')))"``"""
    import time

    import hnswlib

    from fastrag.indexes.hnsw import HNSWIndex, check_index_file

    path = folder / f"hnsw-{n}x{dim}.bin"
    if real:
        x = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
        index = HNSWIndex(dim, M=16, ef_construction=100, max_elements=n)
        index.add(x)
        index.save(path)
    else:
        synthetic_hnsw(path, n, dim)
    check_index_file(path, dim, max_rows=n)  # compile / load the kernel
    out = {"n": n, "dim": dim, "bytes": path.stat().st_size, "real": real}
    for what, fn in (
        ("check", lambda: check_index_file(path, dim, max_rows=n)),
        (
            "hnswlib_load",
            lambda: hnswlib.Index(space="ip", dim=dim).load_index(str(path), max_elements=n),
        ),
    ):
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[what + "_s"] = round(best, 4)
    out["ratio"] = round(out["check_s"] / out["hnswlib_load_s"], 3)
    path.unlink()
    return out


# -- metadata JSON: the kernel agrees with json.loads --------------------------------------------

JSON_EDGES = [
    "{}",
    ' { "k" : { "n" : [ ] } } ',
    '{"a": [1, 2.5, -3e-4, 1E+5, true, false, null]}',
    '{"a": [NaN, Infinity, -Infinity]}',
    '{"a": "x\\u00e9\\n\\"\\\\\\/\\b\\f\\r\\t"}',
    '{"é": "ü"}',
    '{"a": "\\ud800"}',
    '{"a": "\x7f"}',
    "\t{}\r\n",
    '{"a": -0}',
    '{"a": ' + "1" * 4300 + "}",
    '{"a": ' + "1" * 4301 + ".5}",
    '{"a":' + "[" * 511 + "]" * 511 + "}",
    # refused
    "",
    " ",
    "[1]",
    '"x"',
    "3",
    "null",
    "{",
    "}",
    "{}}",
    "{{}}",
    "{}x",
    "\ufeff{}",
    '{"a":1,}',
    '{"a" 1}',
    '{"a": 01}',
    '{"a": 1.}',
    '{"a": .5}',
    '{"a": -}',
    '{"a": 1e}',
    '{"a": +1}',
    '{"a": tru}',
    '{"a": -NaN}',
    '{"a": nan}',
    '{"a": [1,]}',
    '{"a": [,1]}',
    '{"a": {"b": }}',
    '{"a": 1 2}',
    '{"a": "\x01"}',
    '{"a": "\\x"}',
    '{"a": "\\u12g4"}',
    '{"a": "\\u12"}',
    '{"a": "open}',
    "{'a': 1}",
    '{"a": ' + "1" * 4301 + "}",
    '{"a": -' + "1" * 4301 + "}",
    '{"a":' + "[" * 512 + "]" * 512 + "}",
    '{"a":' + "[" * 3000 + "]" * 3000 + "}",
]


def _mutants(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    base = [
        json.dumps(
            {"file_path": "/a/b.txt", "n": 12, "x": [1.5, None, True, {"q": "é\n"}]},
            ensure_ascii=False,
        ),
        '{"a": {"b": [1, 2, {"c": null}]}, "d": -0.5e-3, "e": NaN, "f": -Infinity, '
        '"g": "\\u00e9\\"x"}',
    ]
    alphabet = list('{}[]":,.-+eE0123456789 \\/ntrufalsbNIfy\x01\tu\u00e9ax')
    out = []
    for _ in range(n):
        s = list(base[int(rng.integers(2))])
        for _ in range(int(rng.integers(1, 4))):
            pos, op = int(rng.integers(len(s))), rng.random()
            if op < 0.4:
                s[pos] = alphabet[int(rng.integers(len(alphabet)))]
            elif op < 0.7:
                del s[pos]
            else:
                s.insert(pos, alphabet[int(rng.integers(len(alphabet)))])
        out.append("".join(s))
    return out


def test_json_kernel_agrees_with_json_loads(monkeypatch):
    from fastrag.documents import storecheck

    monkeypatch.setattr(storecheck, "JSON_KERNEL_MIN_ROWS", -1)  # always the kernel
    values = JSON_EDGES + _mutants(8_000, 0)
    want = [storecheck.json_object_ok(v) for v in values]
    assert sum(want[: len(JSON_EDGES)]) == 13 and 1000 < sum(want) < len(values) - 1000
    arr = pa.array(values)
    got = [storecheck.check_json_objects(arr.slice(i, 1)) == -1 for i in range(len(values))]
    assert got == want
    for fast in (-1, 10**9):  # the first bad row of a column, kernel and reference
        monkeypatch.setattr(storecheck, "JSON_KERNEL_MIN_ROWS", fast)
        assert storecheck.check_json_objects(pa.chunked_array([arr[:5], arr[5:]])) == 13
        assert storecheck.check_json_objects(pa.array(["{}", None])) == 1
        assert storecheck.check_json_objects(arr[:13]) == -1


# -- segments: what the reader refuses -----------------------------------------------------------


def _rewrite_segment(st: Path, rel: str, edit) -> None:
    """Replace a segment by ``edit(table)`` (a valid Arrow file of other content), resealed."""
    table = ipc.open_file(pa.memory_map(str(st / rel))).read_all()
    sink = pa.BufferOutputStream()
    new = edit(table)
    with ipc.new_file(sink, new.schema) as writer:
        writer.write_table(new)
    (st / rel).write_bytes(sink.getvalue().to_pybytes())
    reseal(st, rel)


def _segment(st: Path, name: str) -> str:
    return next(
        f for f in sorted(Store(st, mode="r").referenced()) if f.startswith(f"data/{name}.")
    )


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            lambda t: t.set_column(
                6, t.schema.field(6), pa.array(["{"] + ["{}"] * (t.num_rows - 1))
            ),
            r"row 0 of column 'metadata' is not a JSON object",
        ),
        (
            lambda t: t.set_column(6, t.schema.field(6), pa.array(["[]"] * t.num_rows)),
            r"row 0 of column 'metadata' is not a JSON object",
        ),
        (
            lambda t: t.set_column(
                0, t.schema.field(0), pa.array([None] + t.column(0).to_pylist()[1:], pa.string())
            ),
            r"column 'id' holds 1 nulls",
        ),
    ],
)
def test_group_segment_content_is_checked_on_read(template, tmp_path, edit, message):
    from fastrag.errors import StoreError

    st = shutil.copytree(template, tmp_path / "st")
    rel = _segment(st, "root")
    _rewrite_segment(st, rel, edit)
    with pytest.raises(StoreError, match=message) as info:
        fr.Document(store=st, mode="r")
    assert Path(rel).name in str(info.value)


def test_list_offsets_are_checked_on_read(template, tmp_path):
    """A ``roots`` list whose middle offset points past its values would make Arrow read out
    of bounds (a segfault when the sources are next used)."""
    from fastrag.errors import StoreError

    st = shutil.copytree(template, tmp_path / "st")
    rel = _segment(st, "sources")
    cases = [
        (how, b)
        for how, b in buffer_alterations((st / rel).read_bytes(), tmp_path)
        if how.startswith("roots.offsets32 huge")
    ]
    assert len(cases) == 2  # the list's offsets and its strings' offsets
    for _, altered in cases:
        (st / rel).write_bytes(altered)
        reseal(st, rel)
        with pytest.raises(StoreError, match=r"column 'roots'.* out of (range|bounds)"):
            fr.Document(store=st, mode="r")


# -- deep_check ----------------------------------------------------------------------------------


def _index_dir(st: Path, kind_: str) -> str:
    return next(
        v["dir"]
        for v in Store(st, mode="r").manifest["indexes"].values()
        if v["meta"]["kind"] == kind_
    )


def _edit_npy(st: Path, rel: str, edit) -> None:
    arr = np.load(st / rel).copy()
    edit(arr)
    np.save(st / rel, arr)
    reseal(st, rel)


def _edit_manifest(st: Path, edit) -> None:
    body = json.loads((st / MANIFEST).read_bytes())
    body.pop("checksum")
    edit(body)
    write_manifest(st, body)


def test_deep_check_passes_sound_stores(template, tmp_path):
    from fastrag.analysis.registry import get_analyzer
    from fastrag.distributed.segment import segment_tokens
    from fastrag.documents.deepcheck import deep_check

    assert deep_check(Store(template, mode="r")) == []
    st = shutil.copytree(template, tmp_path / "st")
    doc = fr.Document(store=st, embed=emb)
    answers(doc)
    doc.add(texts=["a cat and a fish 99\nline two 99 fish"])
    doc.delete(doc.group("root").ids[:3])
    answers(doc, create=False)  # BM25 rebuilt, HNSW updated in place (rows deleted, added)
    segment_tokens(doc, doc.group("line"), get_analyzer("bm25"))
    kinds = {v["meta"]["kind"] for v in Store(st).manifest["indexes"].values()}
    assert kinds == {"bm25", "hnsw", "tokens"}
    assert deep_check(Store(st, mode="r")) == []


def _bm25_skip_entry(st):
    # the first block's last doc id: its postings no longer decode to it
    _edit_npy(st, _index_dir(st, "bm25") + "/blk_last.npy", lambda a: a.__setitem__(0, a[0] + 1))


def _bm25_gap(st):
    folder = st / _index_dir(st, "bm25")
    j = int(np.flatnonzero(np.load(folder / "blk_dw.npy"))[0])  # a block with doc-id gaps
    start = int(np.load(folder / "blk_word.npy")[j])

    def edit(a):  # its first gap changed: the block no longer ends at its skip entry
        a[start] ^= 1

    _edit_npy(st, _index_dir(st, "bm25") + "/words.npy", edit)


def _bm25_weight_above_bound(st):
    def edit(a):  # the bound of the first term with a positive one, halved
        t = int(np.flatnonzero(a > 0)[0])
        a[t] = a[t] / 2

    _edit_npy(st, _index_dir(st, "bm25") + "/term_max.npy", edit)


def _bm25_doc_len(st):
    _edit_npy(st, _index_dir(st, "bm25") + "/doc_len.npy", lambda a: a.__setitem__(0, a[0] + 1))


def _hnsw_link(st):
    rel = _index_dir(st, "hnsw") + "/index.bin"
    f = parse_hnsw((st / rel).read_bytes())
    f["level0"][3, 0], f["level0"][3, 1] = 1, 10**6
    write_hnsw(st / rel, f)
    reseal(st, rel)


def _hnsw_ids(st):
    def edit(body):
        entry = next(v for v in body["indexes"].values() if v["meta"]["kind"] == "hnsw")
        entry["meta"]["ids"][4] = None  # a live row without a node id

    _edit_manifest(st, edit)


def _vector_nan(st):
    rel = _segment(st, "vec-line-default")

    def edit(t):
        flat = t.column("vector").combine_chunks().flatten().to_numpy().copy()
        flat[5] = np.nan
        return t.set_column(
            1, t.schema.field(1), pa.FixedSizeListArray.from_arrays(pa.array(flat), 8)
        )

    _rewrite_segment(st, rel, edit)


def _duplicate_ids(st):
    def edit(t):
        ids = t.column("id").to_pylist()
        return t.set_column(0, t.schema.field(0), pa.array([ids[1]] + ids[1:]))

    _rewrite_segment(st, _segment(st, "line"), edit)


def _unknown_root(st):
    def edit(t):
        roots = t.column("roots").to_pylist()
        roots[2] = ["0" * 32]
        return t.set_column(6, t.schema.field(6), pa.array(roots, t.schema.field(6).type))

    _rewrite_segment(st, _segment(st, "sources"), edit)


def _outside_file(st):
    _edit_manifest(st, lambda b: b["sources"][0].update(file="data/../../secret.arrow"))


def _bm25_n_docs(st):
    def edit(body):
        entry = next(v for v in body["indexes"].values() if v["meta"]["kind"] == "bm25")
        entry["meta"]["index"]["n_docs"] = 81

    _edit_manifest(st, edit)


def _unchecksummed(st):
    rel = _segment(st, "root")
    data = bytearray((st / rel).read_bytes())
    data[len(data) // 2] ^= 1  # not resealed
    (st / rel).write_bytes(bytes(data))


DEEP = {  # name -> (damage, file named, words of the problem)
    "bm25 skip entry": (_bm25_skip_entry, "line_bm25", "do not decode to their skip entries"),
    "bm25 gap": (_bm25_gap, "line_bm25", "do not decode to their skip entries"),
    "bm25 weight": (_bm25_weight_above_bound, "line_bm25", "above their term's bound"),
    "bm25 doc length": (_bm25_doc_len, "line_bm25", "do not add up to n_tokens"),
    "bm25 n_docs": (_bm25_n_docs, "line_bm25", "doc_len is (80,) uint32, expected (81,)"),
    "hnsw link": (_hnsw_link, "index.bin", "links to element 1000000 on level 0"),
    "hnsw ids": (_hnsw_ids, "index.bin", "node ids recorded for them disagree"),
    "vector nan": (_vector_nan, "vec-line-default", "hold nulls, NaN or inf"),
    "duplicate ids": (_duplicate_ids, "data/line.", "repeats ids"),
    "outside": (_outside_file, "manifest.json", "needs a file in data/"),
    "unknown root": (_unknown_root, "data/sources.", "root ids the root group does not hold"),
    "checksum": (_unchecksummed, "root.", "fails its checksum"),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_check_names_each_problem(template, tmp_path, name):
    from fastrag.documents.deepcheck import deep_check

    damage, where, words = DEEP[name]
    st = shutil.copytree(template, tmp_path / "st")
    damage(st)
    if where == MANIFEST:  # the manifest's shape is checked on every open already
        with pytest.raises(StoreError, match=re.escape(words)):
            Store(st, mode="r")
        return
    problems = deep_check(Store(st, mode="r"))
    assert len(problems) == 1, problems
    assert where in problems[0] and words in problems[0], problems


def test_deep_check_reads_what_an_open_does_not(template, tmp_path, monkeypatch):
    """Texts of large files (kept memory-mapped, not read) and BM25 postings (checked per term
    when a query reads them) are checked by deep_check at once."""
    from fastrag.documents import store as store_mod
    from fastrag.documents.deepcheck import deep_check

    st = shutil.copytree(template, tmp_path / "st")
    rel = _segment(st, "root")
    plain = _plain_segment((st / rel).read_bytes())
    pos = plain.index(b"doc 7 cat")
    (st / rel).write_bytes(plain[:pos] + b"\xff" + plain[pos + 1 :])  # invalid UTF-8 in a text
    reseal(st, rel)
    _bm25_skip_entry(st)
    monkeypatch.setattr(store_mod, "VERIFY_BELOW", 0)  # every file counts as large
    fr.Document(store=st, mode="r")  # opens: the texts stay unread, the postings unchecked
    problems = deep_check(Store(st, mode="r"))
    assert len(problems) == 2, problems
    assert Path(rel).name in problems[0] and "UTF8" in problems[0].upper()
    assert "line_bm25" in problems[1] and "skip entries" in problems[1]


def test_hnsw_file_that_crashed_hnswlib_is_rebuilt(template, tmp_path):
    """A resealed index.bin with a link past the last element (hnswlib 0.8 would follow it out
    of bounds when a search reaches it): a StoreWarning, the index rebuilt from the stored
    vectors and the clean answers; a writable open stores the rebuilt index."""
    from fastrag.documents.deepcheck import deep_check

    cases, clean = [], {}
    for mode in ("r", "a"):
        clean[mode] = shutil.copytree(template, tmp_path / f"clean-{mode}")
        st = shutil.copytree(template, tmp_path / mode)
        _hnsw_link(st)
        cases.append((st, mode))
    # one child probes the clean copies and the damaged ones (starting it costs more than they)
    results = run_probes([(c, m) for m, c in clean.items()] + cases, workers=1)
    for st, mode in cases:
        got, want = results[str(st)], results[str(clean[mode])]
        assert want["status"] == "OK" and not want["warnings"], want
        assert got["status"] == "OK" and got["hits"] == want["hits"], got
        assert len(got["warnings"]) == 1 and "index.bin" in got["warnings"][0]
        assert "links to element 1000000 on level 0" in got["warnings"][0]
    assert deep_check(Store(cases[0][0], mode="r")) != []  # read-only: left as it was
    assert deep_check(Store(cases[1][0], mode="r")) == []  # writable: replaced
