"""The ``fastrag`` command line: ingest, info, search, ask, eval, serve, warmup, demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

_KINDS = ("lines", "paragraphs", "sentence", "tokens")


def _parse_group(spec: str) -> tuple[str, str, dict]:
    """``NAME=SPEC``: SPEC is ``lines``, ``paragraphs``, ``sentence:SIZE[:OVERLAP]`` or
    ``tokens:SIZE[:OVERLAP]``, optionally followed by ``@PARENT``."""
    if "=" not in spec:
        raise argparse.ArgumentTypeError(f"--group {spec!r}: expected NAME=SPEC, e.g. block=lines")
    name, rest = spec.split("=", 1)
    parent = "root"
    if "@" in rest:
        rest, parent = rest.rsplit("@", 1)
    kind, *args = rest.split(":")
    if kind not in _KINDS:
        raise argparse.ArgumentTypeError(
            f"--group {spec!r}: unknown SPEC {kind!r}; use lines, paragraphs, "
            "sentence:SIZE[:OVERLAP] or tokens:SIZE[:OVERLAP]"
        )
    try:
        nums = [int(a) for a in args]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--group {spec!r}: sizes must be integers") from None
    return name, parent, {"kind": kind, "args": nums}


def _transform(spec: dict):
    """The transform of a CLI group spec (one whose spec the store records)."""
    from fastrag.transforms import (
        LineSplitter,
        ParagraphSplitter,
        SentenceSplitter,
        TokenTextSplitter,
    )

    kind, args = spec["kind"], spec["args"]
    if kind == "lines":
        return LineSplitter()
    if kind == "paragraphs":
        return ParagraphSplitter()
    cls = SentenceSplitter if kind == "sentence" else TokenTextSplitter
    size = args[0] if args else 256
    overlap = args[1] if len(args) > 1 else size // 10
    return cls(chunk_size=size, chunk_overlap=overlap)


def _progress(desc: str, total: int | None, quiet: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="group", disable=quiet, file=sys.stderr, leave=False)


def cmd_ingest(args: argparse.Namespace) -> int:
    from fastrag.documents.document import Document

    t0 = time.perf_counter()
    opts = {
        "on_error": args.on_error,
        "json_text_field": args.text_field,
        "show_progress": not args.quiet,
    }
    opts.update(_reader_options(args))
    existed = (Path(args.store) / "manifest.json").exists()
    if args.add:
        if not existed:
            print(
                f"error: --add needs an existing store; {args.store} is not one (drop --add "
                "to create it)",
                file=sys.stderr,
            )
            return 2
        doc = Document(store=args.store, **opts)
        added = doc.add(args.path)
        print(f"added {len(added)} documents from {', '.join(args.path)}", file=sys.stderr)
    else:
        doc = Document(
            args.path, store=args.store, replace=args.replace, remove_missing=args.sync, **opts
        )
    if not len(doc.group("root")) and not existed:
        report = doc.read_report
        print(report.summary(), file=sys.stderr)
        raise _Usage(
            f"no documents found in {', '.join(args.path)}: nothing was written "
            f"(the store {args.store} was not created); ingest files with text "
            "(-v lists what was skipped and why)"
        )
    for name, parent, spec in args.group:
        doc.create_node_group(name, transform=_transform(spec), parent=parent)
    if not args.group and len(doc.group_names) == 1 + len(Document._BUILTIN) and not args.builtin:
        doc.create_node_group(
            "chunk", transform=_transform({"kind": "sentence", "args": [256, 32]})
        )
        print("no --group given: building group 'chunk' (sentence:256:32)", file=sys.stderr)
    names = [
        n
        for n in doc.group_names[1:]
        if n not in Document._BUILTIN or n in args.builtin or _stored(doc, n)
    ]
    from fastrag.documents.building import STORED_ONLY
    from fastrag.errors import ConfigError

    with _progress("building groups", len(names), args.quiet) as bar:
        for name in names:
            bar.set_postfix_str(name)
            try:
                doc.group(name)
            except ConfigError as exc:
                if doc._defs[name].fn is not STORED_ONLY:
                    raise
                print(f"note: group {name!r} was not updated: {exc}", file=sys.stderr)
            bar.update(1)
    _build_default_index(doc, names, args.quiet)
    report = doc.read_report
    if not args.add and report.entries:
        print(report.summary())
        if args.verbose:
            print(report.details())
    changes = doc.source_changes
    verb = "updated" if existed else "ingested"
    print(
        f"{verb} {args.store}: {changes.summary()}; {len(doc.group('root')):,} documents "
        f"in {time.perf_counter() - t0:.2f} s"
    )
    return _print_info(Path(args.store))


def _build_default_index(doc, built: list[str], quiet: bool) -> None:
    """Build and store the index `fastrag search` uses by default, so reads never build (or
    write) one."""
    if doc.store is None or not doc.store.writable:
        return
    group = _pick_group(doc, None, quiet=True)
    if group != "root" and group not in built:
        return
    from fastrag.retrieval.retriever import Retriever

    if not len(doc.group(group)):
        return
    Retriever(doc, group, "bm25", topk=1)("index")


def _stored(doc, name: str) -> bool:
    return doc.store is not None and name in doc.store.manifest["groups"]


def _reader_options(args: argparse.Namespace) -> dict:
    """The Document's folder-walk and record options from the ingest flags."""
    out = {"recursive": not args.no_recursive}
    if args.metadata_field:
        out["metadata_fields"] = args.metadata_field
    if args.required_ext:
        out["required_exts"] = args.required_ext
    if args.exclude:
        out["exclude"] = args.exclude
    return out


def _print_info(path: Path, verify: bool = False, deep: bool = False) -> int:
    from fastrag.documents.store import MANIFEST, Store
    from fastrag.errors import StoreError

    if not (path / MANIFEST).exists():
        print(f"error: {path} is not a fastrag store (no {MANIFEST})", file=sys.stderr)
        return 2
    try:
        store = Store(path, mode="r")
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    m = store.manifest
    n_sources = sum(s["rows"] for s in m["sources"])
    print(
        f"store {path}  format v{m['format_version']}  sources {n_sources:,}  "
        f"generation {m['generation']}  total {store.nbytes():,} bytes"
    )
    print(f"{'group':<20} {'parent':<14} {'nodes':>10} {'segments':>9} {'bytes':>14}")
    for name, g in m["groups"].items():
        stale = "  (stale: updated on next use)" if g["root_gen"] < m["root_gen"] else ""
        size = sum(s["size"] for s in g["segments"])
        print(
            f"{name:<20} {g.get('parent') or '-'!s:<14} {g['nodes']:>10,} "
            f"{len(g['segments']):>9} {size:>14,}{stale}"
        )
    for v in m["vectors"].values():
        print(
            f"vectors {v['group']!r} key {v['key']!r}: dim {v['dim']}, "
            f"{sum(s['rows'] for s in v['segments']):,} nodes"
        )
    if m["indexes"]:
        print(f"{len(m['indexes'])} indexes: " + ", ".join(sorted(m["indexes"])))
    _print_sources(store)
    if verify:
        problems = store.verify()
        for p in problems:
            print(f"damaged: {p}", file=sys.stderr)
        print(f"verify: {len(store.referenced()) - 1} files checked, {len(problems)} damaged")
        if deep and not problems:
            from fastrag.documents.deepcheck import deep_check

            problems = deep_check(store)
            for p in problems:
                print(f"bad structure: {p}", file=sys.stderr)
            print(f"deep: every table, index and vector checked, {len(problems)} problems")
        return 1 if problems else 0
    return 0


def _print_sources(store) -> None:
    """Where the store was made from, and which of its source files are missing or changed
    on disk (the store serves them as stored either way)."""
    from fastrag.documents.relink import source_status
    from fastrag.documents.sources import SOURCE_SCHEMA
    from fastrag.errors import StoreError

    inputs = store.manifest.get("inputs")
    if inputs:
        print(f"made from {', '.join(inputs)}")
    try:
        sources = store.read_segments(store.manifest["sources"], SOURCE_SCHEMA)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return
    missing, changed = source_status(sources)
    for what, keys, fix in (
        (
            "missing on disk (kept and served as stored)",
            missing,
            "re-link moved files: fastrag ingest NEW_PATH --store STORE; remove them: "
            "fastrag ingest PATH --store STORE --sync",
        ),
        (
            "changed on disk since ingest (served as ingested)",
            changed,
            "update them: fastrag ingest PATH --store STORE",
        ),
    ):
        if keys:
            print(f"{len(keys):,} source files {what}; {fix}")
            for k in keys[:20]:
                print(f"  {k}")
            if len(keys) > 20:
                print(f"  ... and {len(keys) - 20:,} more")


# -- search / ask ------------------------------------------------------------------------------
def _open_store(path: str):
    """The Document of a store (its sources and groups), read-only: reading never changes a
    store (an index `fastrag ingest` did not build is built in memory)."""
    from fastrag.documents.document import Document
    from fastrag.documents.store import MANIFEST

    if not (Path(path) / MANIFEST).is_file():
        raise _Usage(
            f"{path} is not a fastrag store (no {MANIFEST}); create one with "
            f"`fastrag ingest FILES --store {path}`"
        )
    return Document(store=path, mode="r", show_progress=True)


class _Usage(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def _pick_group(doc, name: str | None, quiet: bool = False) -> str:
    if name is not None:
        doc.check_group(name)
        return name
    built = [n for n in doc.group_names[1:] if _stored(doc, n)]
    if not built:
        return "root"
    if len(built) > 1 and not quiet:
        print(
            f"searching group {built[-1]!r} (also in the store: "
            f"{', '.join(built[:-1])}; choose with --group)",
            file=sys.stderr,
        )
    return built[-1]


def _retriever(doc, args: argparse.Namespace, topk: int):
    from fastrag.retrieval.retriever import Retriever

    group = _pick_group(doc, args.group)
    return Retriever(doc, group, args.similarity or "bm25", topk=topk, filter=args.filter)


def _source(hit, doc) -> str:
    """The hit's file as the store shows it (its path under the ingested folder), and page."""
    meta = hit.metadata
    path = meta.get("file_path")
    name = (
        doc.source_path(path)
        if isinstance(path, str) and path
        else meta.get("file_name") or hit.doc_id or hit.id
    )
    page = meta.get("page_label")
    return f"{name} p.{page}" if page is not None else str(name)


def _snippet(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _hit_record(qi: int, query: str, rank: int, hit, doc) -> dict:
    return {
        "query_idx": qi,
        "query": query,
        "rank": rank,
        "score": float(hit.score),
        "node_id": hit.id,
        "doc_id": hit.doc_id,
        "source": _source(hit, doc),
        "file_path": hit.metadata.get("file_path"),
        "text": hit.text,
    }


def _read_queries(path: Path) -> list[str]:
    if not path.is_file():
        raise _Usage(f"--queries {path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        col = next((c for c in ("query", "question", "text") if c in table.column_names), None)
        if col is None:
            raise _Usage(f"--queries {path}: no 'query' column (columns: {table.column_names})")
        return [str(q) for q in table.column(col).to_pylist()]
    lines = [ln for ln in path.read_text(encoding="utf-8-sig").splitlines() if ln.strip()]
    if suffix != ".jsonl":
        return lines
    out = []
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _Usage(f"--queries {path}: line {i} is not JSON ({exc.msg})") from None
        q = (
            rec
            if isinstance(rec, str)
            else next(
                (
                    rec[k]
                    for k in ("query", "question", "text")
                    if isinstance(rec, dict) and k in rec
                ),
                None,
            )
        )
        if not isinstance(q, str):
            raise _Usage(f"--queries {path}: line {i} has no 'query' field")
        out.append(q)
    return out


def _write_hits(records: list[dict], out: Path) -> None:
    if out.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), out)
    else:
        with open(out, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


def cmd_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.queries is None):
        raise _Usage("give one query, or --queries FILE (one query per line, JSONL or Parquet)")
    doc = _open_store(args.store)
    ret = _retriever(doc, args, args.topk)
    queries = [args.query] if args.queries is None else _read_queries(Path(args.queries))
    t0 = time.perf_counter()
    hits = ret.batch(queries)
    seconds = time.perf_counter() - t0
    records = [
        _hit_record(qi, q, r, h, doc)
        for qi, (q, hs) in enumerate(zip(queries, hits, strict=True))
        for r, h in enumerate(hs, 1)
    ]
    if args.out:
        _write_hits(records, Path(args.out))
        print(
            f"{len(queries):,} queries ({len(queries) / max(seconds, 1e-9):,.0f}/s, "
            f"{ret.similarity} on group {ret.group_name!r}): {len(records):,} hits written to "
            f"{args.out}",
            file=sys.stderr,
        )
        return 0
    if args.json:
        for r in records:
            print(json.dumps(r, ensure_ascii=False))
        return 0
    for qi, q in enumerate(queries):
        if len(queries) > 1:
            print(f"\nquery {qi}: {q}")
        rows = [r for r in records if r["query_idx"] == qi]
        if not rows:
            print(f"no hits: {ret.why_no_hits(q)}")
            continue
        width = max(len(r["source"]) for r in rows)
        width = min(max(width, 6), 40)
        print(f"{'rank':>4}  {'score':>8}  {'source':<{width}}  snippet")
        for r in rows:
            print(
                f"{r['rank']:>4}  {r['score']:>8.3f}  {_snippet(r['source'], width):<{width}}"
                f"  {_snippet(r['text'])}"
            )
    return 0


def _llm_from(args: argparse.Namespace):
    """An OpenAI-compatible LLM from --base-url/--model or the environment, or None."""
    base = args.base_url or os.environ.get("FASTRAG_LLM_BASE_URL")
    model = args.model or os.environ.get("FASTRAG_LLM_MODEL")
    if not base and not model:
        return None
    if not base or not model:
        raise _Usage(
            "an LLM needs both a base URL and a model: --base-url/--model or "
            "FASTRAG_LLM_BASE_URL/FASTRAG_LLM_MODEL"
        )
    from fastrag.llms.openai_like import OpenAILike

    return OpenAILike(
        model=model,
        base_url=base,
        api_key=os.environ.get("OPENAI_API_KEY"),
        max_retries=args.max_retries,
    )


def extractive_answer(query: str, hits: list, analyzer, max_sentences: int = 3) -> list[tuple]:
    """The sentences of ``hits`` sharing the most query terms: ``[(sentence, hit), ...]``,
    best first (ties keep the hits' order)."""
    import re

    terms = set(analyzer(query))
    scored = []
    for hi, hit in enumerate(hits):
        for si, sent in enumerate(re.split(r"(?<=[.!?。！？；;])\s*|\n+", hit.text)):
            sent = sent.strip()
            if len(sent) < 2:
                continue
            words = analyzer(sent)
            overlap = len(terms.intersection(words))
            if overlap:
                scored.append((-overlap / (1 + len(set(words))) ** 0.5, hi, si, sent, hit))
    scored.sort(key=lambda x: x[:3])
    return [(sent, hit) for *_, sent, hit in scored[:max_sentences]]


def cmd_ask(args: argparse.Namespace) -> int:
    doc = _open_store(args.store)
    ret = _retriever(doc, args, args.topk)
    hits = ret(args.question)
    llm = _llm_from(args)
    if not hits:
        print(f"no passage in the store matches the question: {ret.why_no_hits(args.question)}")
        return 1
    if llm is None:
        from fastrag.analysis import get_analyzer

        best = extractive_answer(
            args.question,
            hits,
            get_analyzer(ret.similarity)
            if ret.similarity.startswith("bm25")
            else get_analyzer("bm25"),
        )
        print("Best-matching passages (extractive answer):")
        for sent, hit in best or [(_snippet(hits[0].text, 300), hits[0])]:
            print(f"- {sent}  [{_source(hit, doc)}]")
        print(
            "(no LLM configured: set FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL, or pass "
            "--base-url and --model, for a generated answer)",
            file=sys.stderr,
        )
    else:
        from fastrag.synth.factory import get_response_synthesizer

        synth = get_response_synthesizer(response_mode=args.mode, llm=llm, streaming=True)
        resp = synth.synthesize(args.question, hits)
        for piece in resp.response_gen:
            sys.stdout.write(piece)
            sys.stdout.flush()
        print()
    print("\nSources:")
    for rank, hit in enumerate(hits, 1):
        print(f"{rank}. {_source(hit, doc)}  (score {hit.score:.3f})  {_snippet(hit.text, 70)}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    if args.deep and not args.verify:
        raise _Usage("--deep extends --verify: pass both (fastrag info STORE --verify --deep)")
    return _print_info(Path(args.path), verify=args.verify, deep=args.deep)


def _run_eval(squad, args) -> int:
    import tempfile

    from fastrag.eval.squad_run import evaluate_squad, format_table

    topks = [int(k) for k in str(args.topk).split(",")]
    with tempfile.TemporaryDirectory(prefix="fastrag-eval-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        res = evaluate_squad(
            squad,
            workdir,
            similarities=args.similarity,
            topks=topks,
            per_file=args.kb_per_file,
            group=args.group,
        )
    print(
        f"{res['n_queries']:,} questions over {res['n_nodes']:,} paragraphs "
        f"(one batch per similarity)\n"
    )
    print(format_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, ensure_ascii=False))
        print(f"\nwrote {args.json}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from fastrag.eval.loaders import _read_json

    if args.squad:
        if args.store or args.questions:
            raise _Usage("--squad builds its own knowledge base: drop STORE and --questions")
        squad = _read_json(Path(args.squad))
        args.group = args.group or "block"
        if args.similarity is None:
            from fastrag.analysis.language import detect_language
            from fastrag.eval.loaders import squad_questions

            questions, _, contexts = squad_questions(squad)
            zh = detect_language(contexts[:200] + questions[:200]) == "zh"
            args.similarity = ["bm25_chinese", "bm25_cjk"] if zh else ["bm25"]
        return _run_eval(squad, args)
    if not args.store or not args.questions:
        raise _Usage("eval needs STORE and --questions FILE (or --squad FILE for SQuAD data)")
    return _eval_store(args)


def _read_questions(path: Path) -> list[dict]:
    """Question records from JSONL, a JSON list, or CSV: ``question`` (or ``query``) and a
    gold field: ``answer``/``answers`` (text a relevant passage contains), ``source`` (a
    file name or path the passage comes from) or ``node_ids``."""
    import csv

    if not path.is_file():
        raise _Usage(f"--questions {path}: no such file")
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix.lower() == ".csv":
        records = list(csv.DictReader(text.splitlines()))
    elif path.suffix.lower() == ".jsonl":
        records = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    else:
        data = json.loads(text)
        records = data if isinstance(data, list) else data.get("questions", [])
    out = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise _Usage(f"--questions {path}: record {i} is not an object")
        q = rec.get("question", rec.get("query"))
        answers = rec.get("answers", rec.get("answer"))
        answers = [answers] if isinstance(answers, str) else list(answers or [])
        source = rec.get("source", rec.get("file"))
        ids = rec.get("node_ids") or []
        if not isinstance(q, str) or not (answers or source or ids):
            raise _Usage(
                f"--questions {path}: record {i} needs 'question' and one of "
                "'answer', 'source' or 'node_ids'"
            )
        out.append(
            {
                "question": q,
                "answers": [a for a in answers if a],
                "source": source,
                "node_ids": list(ids),
            }
        )
    if not out:
        raise _Usage(f"--questions {path}: no questions")
    return out


def _gold_ids(group, records: list[dict]) -> list[set]:
    """For each question, the ids of the group's nodes that answer it."""
    import pyarrow.compute as pc

    table = group.table
    ids = table.column("id")
    paths = [m.get("file_path") or "" for m in (json.loads(x) for x in group.full_metadata_json())]
    gold = []
    for rec in records:
        hit = set(rec["node_ids"])
        for ans in rec["answers"]:
            mask = pc.match_substring(table.column("text"), ans)
            hit.update(pc.filter(ids, mask).to_pylist())
        if rec["source"]:
            src = str(rec["source"])
            hit.update(
                i
                for i, p in zip(group.ids, paths, strict=True)
                if p == src or Path(p).name == src or p.endswith("/" + src)
            )
        gold.append(hit)
    return gold


def _eval_store(args: argparse.Namespace) -> int:
    from fastrag.eval.metrics import evaluate_retrieval

    records = _read_questions(Path(args.questions))
    doc = _open_store(args.store)
    topks = [int(k) for k in str(args.topk).split(",")]
    sims = args.similarity or [None]
    gold = None
    rows = []
    for sim in sims:
        args_sim = argparse.Namespace(**{**vars(args), "similarity": sim, "filter": None})
        ret = _retriever(doc, args_sim, max(topks))
        if gold is None:
            gold = _gold_ids(doc.group(ret.group_name), records)
            missing = sum(1 for g in gold if not g)
            if missing:
                print(
                    f"note: {missing} of {len(records)} questions have no passage in group "
                    f"{ret.group_name!r} that holds their answer; they count as misses",
                    file=sys.stderr,
                )
        questions = [r["question"] for r in records]
        ret(questions[0])  # builds (or loads) the index outside the timing
        t0 = time.perf_counter()
        hits = ret.batch(questions)
        qps = len(questions) / max(time.perf_counter() - t0, 1e-9)
        res = evaluate_retrieval(
            [[h.id for h in hs] for hs in hits], [sorted(g) for g in gold], topks
        )
        rows.append((ret.similarity, res, qps))
    head = (
        ["similarity"]
        + [f"hit@{k}" for k in topks]
        + [f"ndcg@{k}" for k in topks]
        + ["MRR", "queries/s"]
    )
    print(
        f"{len(records):,} questions over group {ret.group_name!r} "
        f"({len(doc.group(ret.group_name)):,} nodes), one batch per similarity\n"
    )
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for sim, res, qps in rows:
        print(
            " | ".join(
                [sim]
                + [f"{res[f'hit_rate@{k}']:.3f}" for k in topks]
                + [f"{res[f'ndcg@{k}']:.3f}" for k in topks]
                + [f"{res['mrr']:.3f}", f"{qps:,.0f}"]
            )
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "n_queries": len(records),
                    "group": ret.group_name,
                    "similarities": {sim: {**res, "queries_per_s": qps} for sim, res, qps in rows},
                },
                indent=1,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fastrag._coldstart import kernels_ready
    from fastrag.datasets import load_cmrc2018_dev

    print(
        "fastrag demo: CMRC 2018 dev (CC BY-SA 4.0, bundled) as the LazyLLM tutorial's "
        "knowledge base; all questions retrieved as one batch per analyzer"
    )
    if not kernels_ready():
        print(
            "note: first run after an install: the timed batches wait for the kernels "
            "compiling in the background (about a minute), so queries/s is the engine's",
            file=sys.stderr,
        )
    return _run_eval(load_cmrc2018_dev(), args)


def _eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kb-per-file", type=int, default=10, help="paragraphs per .txt file")
    p.add_argument("--group", default="block")
    p.add_argument(
        "--similarity",
        action="append",
        default=None,
        help="repeatable; default: by the data's language (bm25 for English, "
        "bm25_chinese and bm25_cjk side by side for Chinese)",
    )
    p.add_argument("--topk", default="1,3,5", help="comma-separated cut-offs")
    p.add_argument("--workdir", help="keep the knowledge base and store here")
    p.add_argument("--json", help="also write the results as JSON to this path")


def _query_args(p: argparse.ArgumentParser, topk: int) -> None:
    p.add_argument("--group", help="node group to search (default: the last one built)")
    p.add_argument(
        "--similarity",
        help="bm25 (the default: any language, mixed folders "
        "too), bm25_english, bm25_chinese, bm25_cjk, cosine, hybrid, ...",
    )
    p.add_argument("--topk", type=int, default=topk)
    p.add_argument("--filter", help="metadata filter, Spring AI syntax: \"file_type == 'md'\"")


def cmd_warmup(args: argparse.Namespace) -> int:
    from fastrag.warmup import warmup

    print("compiling fastrag's kernels (cached on disk; later runs start at once)")
    print(f"warm-up done in {warmup():.1f} s")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from fastrag.integrations.mcp_server import cmd_mcp as run

    return run(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from fastrag.documents.store import MANIFEST

    store = Path(args.store)
    if not (store / MANIFEST).is_file():
        raise _Usage(
            f"{store} is not a fastrag store (no {MANIFEST}); create one with "
            f"`fastrag ingest FILES --store {store}`"
        )
    if args.group is not None:
        groups = json.loads((store / MANIFEST).read_text("utf-8")).get("groups", {})
        builtin = ("CoarseChunk", "MediumChunk", "FineChunk")
        if args.group not in groups and args.group not in builtin:
            raise _Usage(
                f"--group {args.group!r} is not in the store; it has "
                f"{', '.join(sorted(groups))} (or a built-in: {', '.join(builtin)})"
            )
    base = args.llm_base_url or os.environ.get("FASTRAG_LLM_BASE_URL")
    model = args.llm_model or os.environ.get("FASTRAG_LLM_MODEL")
    if bool(base) != bool(model):
        raise _Usage(
            "an LLM needs both --llm-base-url and --llm-model (or "
            "FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL)"
        )
    if args.compress_history and not base:
        raise _Usage("--compress-history needs an LLM: give --llm-base-url and --llm-model")
    if args.api_key_env is not None and not os.environ.get(args.api_key_env):
        raise _Usage(
            f"--api-key-env {args.api_key_env}: that environment variable is not set or empty"
        )
    for flag, value in (
        ("--workers", args.workers),
        ("--search-threads", args.search_threads),
        ("--llm-max-concurrency", args.llm_max_concurrency),
    ):
        if value < 1:
            raise _Usage(f"{flag} {value}: must be at least 1")
    cfg = {
        "store": str(store.resolve()),
        "group": args.group,
        "similarity": args.similarity,
        "topk": args.topk,
        "mode": args.mode,
        "compress_history": args.compress_history,
        "batching": not args.no_batching,
        "batch_window_ms": args.batch_window_ms,
        "max_batch": args.max_batch,
        "search_threads": args.search_threads,
        "max_body_bytes": args.max_body_bytes,
        "max_upload_bytes": args.max_upload_bytes,
        "api_key_env": args.api_key_env,
        "tasks_dir": args.tasks_dir,
        "chat_memory": args.chat_memory,
        "llm": {
            "base_url": base,
            "model": model,
            "api_key_env": args.llm_api_key_env,
            "max_retries": args.llm_max_retries,
            "timeout": args.llm_timeout,
            "max_concurrency": args.llm_max_concurrency,
        }
        if base
        else None,
    }
    from fastrag.serve import serve_config

    if args.host not in ("127.0.0.1", "localhost", "::1") and args.api_key_env is None:
        print(
            f"warning: listening on {args.host} without --api-key-env: anyone who can reach "
            "this port can read and change the store",
            file=sys.stderr,
        )
    serve_config(
        cfg, host=args.host, port=args.port, workers=args.workers, log_level=args.log_level
    )
    return 0


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "store",
        help="a store built with fastrag ingest (opened read-only; uploads go through one writer)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="server processes (default 1)")
    p.add_argument("--group", help="default node group (default: the last one built)")
    p.add_argument(
        "--similarity",
        help="default similarity: one name (bm25, the default; "
        "bm25_chinese, hybrid, ...) or GROUP=NAME pairs, comma-separated; requests "
        "may name their own",
    )
    p.add_argument("--topk", type=int, default=5, help="hits per query (default 5)")
    p.add_argument(
        "--chat-memory",
        help="file (.json) or folder keeping the conversations "
        "of chats that send a session_id (or user); default: in memory, per process",
    )
    p.add_argument(
        "--mode",
        default="compact",
        help="response mode of chat answers (compact, "
        "refine, tree_summarize, simple_summarize, ...)",
    )
    p.add_argument(
        "--llm-base-url", help="OpenAI-compatible LLM endpoint for chat (or FASTRAG_LLM_BASE_URL)"
    )
    p.add_argument("--llm-model", help="the LLM's model name (or FASTRAG_LLM_MODEL)")
    p.add_argument(
        "--llm-api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the LLM's key (default OPENAI_API_KEY)",
    )
    p.add_argument("--llm-max-retries", type=int, default=2)
    p.add_argument("--llm-timeout", type=float, default=60.0, help="seconds")
    p.add_argument(
        "--llm-max-concurrency",
        type=int,
        default=64,
        help="LLM calls in flight at once, across all chats (default 64)",
    )
    p.add_argument(
        "--compress-history",
        action="store_true",
        help="rewrite chat history + question into one standalone query (one more "
        "LLM call per follow-up question)",
    )
    p.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="require 'Authorization: Bearer <key>', the key read from this environment variable",
    )
    p.add_argument(
        "--no-batching",
        action="store_true",
        help="one Retriever.batch call per request (no micro-batching)",
    )
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=3.0,
        help="how long a retrieval waits for others to batch with (default 3)",
    )
    p.add_argument("--max-batch", type=int, default=256, help="queries per batch call at most")
    p.add_argument(
        "--search-threads",
        type=int,
        default=1,
        help="numba threads per batch call (default 1: concurrent calls already use the cores)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=1 << 20,
        help="JSON request body limit (default 1 MiB)",
    )
    p.add_argument(
        "--max-upload-bytes", type=int, default=50 << 20, help="upload body limit (default 50 MiB)"
    )
    p.add_argument(
        "--tasks-dir",
        help="folder for upload/delete tasks, kept across restarts "
        "(default: $XDG_STATE_HOME/fastrag/serve-tasks/<store>-<hash>, i.e. "
        "~/.local/state/...)",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fastrag-engine")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fastrag", description=__doc__)
    p.add_argument("--version", action="version", version=f"fastrag {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    ing = sub.add_parser("ingest", help="read files into a store and build node groups")
    ing.add_argument("path", nargs="+", help="files or directories (read recursively)")
    ing.add_argument("--store", required=True, help="store directory (created if missing)")
    ing.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        type=_parse_group,
        help="node group to build: lines, paragraphs, sentence:SIZE[:OVERLAP], "
        "tokens:SIZE[:OVERLAP]; append @PARENT for a parent other than root "
        "(default: chunk=sentence:256:32 for a new store)",
    )
    ing.add_argument(
        "--builtin",
        action="append",
        default=[],
        choices=["CoarseChunk", "MediumChunk", "FineChunk"],
        help="also build a built-in group",
    )
    how = ing.add_mutually_exclusive_group()
    how.add_argument(
        "--add",
        action="store_true",
        help="add these files to an existing store (keeping its sources)",
    )
    how.add_argument(
        "--replace", action="store_true", help="make these files the store's only sources"
    )
    how.add_argument(
        "--sync",
        action="store_true",
        help="also remove the store's sources that are gone from disk or not "
        "under these paths (by default they are kept and reported)",
    )
    ing.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        default="raise",
        help="skip: report a file that cannot be read and go on",
    )
    ing.add_argument(
        "--text-field", default="text", help="JSON/JSONL/CSV field holding the text (default: text)"
    )
    ing.add_argument(
        "--metadata-field",
        action="append",
        default=[],
        help="repeatable: keep only these record fields as metadata",
    )
    ing.add_argument(
        "--required-ext",
        action="append",
        default=[],
        help="repeatable: read only files with these extensions (.md)",
    )
    ing.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="repeatable: skip files matching this glob",
    )
    ing.add_argument("--no-recursive", action="store_true", help="top-level files only")
    ing.add_argument("-v", "--verbose", action="store_true", help="list the files skipped")
    ing.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    ing.set_defaults(func=cmd_ingest)

    info = sub.add_parser(
        "info", help="print a store's groups, node counts and bytes (--verify: checksums)"
    )
    info.add_argument("path")
    info.add_argument(
        "--verify",
        action="store_true",
        help="check every file's size and checksum (exit 1 if any is damaged)",
    )
    info.add_argument(
        "--deep",
        action="store_true",
        help="with --verify: also check the structure of every table and index "
        "(for a store from someone else: checksums catch accidents only)",
    )
    info.set_defaults(func=cmd_info)

    se = sub.add_parser(
        "search",
        help="retrieve from a store: a hits table, JSON, or a batch of queries to JSONL/Parquet",
    )
    se.add_argument("store")
    se.add_argument("query", nargs="?")
    _query_args(se, 5)
    se.add_argument("--json", action="store_true", help="one JSON object per hit")
    se.add_argument("--queries", help="file of queries: one per line, JSONL or Parquet")
    se.add_argument("--out", help="write the hits here (.jsonl or .parquet)")
    se.set_defaults(func=cmd_search)

    ask = sub.add_parser(
        "ask",
        help="answer a question from a store (an OpenAI-compatible "
        "LLM, or an extractive answer without one)",
    )
    ask.add_argument("store")
    ask.add_argument("question")
    _query_args(ask, 5)
    ask.add_argument(
        "--mode",
        default="compact",
        help="response mode (compact, refine, tree_summarize, simple_summarize, accumulate, ...)",
    )
    ask.add_argument("--base-url", help="OpenAI-compatible endpoint (or FASTRAG_LLM_BASE_URL)")
    ask.add_argument(
        "--model", help="model name (or FASTRAG_LLM_MODEL); the key is read from OPENAI_API_KEY"
    )
    ask.add_argument("--max-retries", type=int, default=3)
    ask.set_defaults(func=cmd_ask)

    ev = sub.add_parser(
        "eval",
        help="hit rate / nDCG / MRR of a store on your questions, or "
        "recall on SQuAD data (--squad)",
    )
    ev.add_argument("store", nargs="?", help="a store built with fastrag ingest")
    ev.add_argument("--questions", help="JSONL/JSON/CSV: question + answer | source | node_ids")
    ev.add_argument("--squad", help="SQuAD-format JSON file (e.g. CMRC 2018)")
    _eval_args(ev)
    ev.set_defaults(func=cmd_eval, group=None)

    warm = sub.add_parser("warmup", help="compile every kernel ahead of time (for images, CI)")
    warm.set_defaults(func=cmd_warmup)

    srv = sub.add_parser(
        "serve",
        help="an OpenAI-compatible RAG server over a store: chat "
        "completions, batch retrieval, uploads, a chat page",
    )
    _serve_args(srv)
    srv.set_defaults(func=cmd_serve)
    from fastrag.integrations.mcp_server import add_arguments as _mcp_args

    mcp = sub.add_parser(
        "mcp",
        help="an MCP server over a store for agents: tools search, "
        "ask and list_groups, documents as resources (stdio, or --http)",
    )
    _mcp_args(mcp)
    mcp.set_defaults(func=cmd_mcp)

    demo = sub.add_parser("demo", help="batch retrieval over the bundled CMRC knowledge base")
    _eval_args(demo)
    demo.set_defaults(func=cmd_demo)
    return p


def _one_line_warnings(category: type) -> None:
    """Print fastrag's warnings as ``warning: MESSAGE`` lines (not Python's file:line form)."""
    import warnings

    default = warnings.showwarning

    def show(message, cat, filename, lineno, file=None, line=None):
        if issubclass(cat, category):
            print(f"warning: {message}", file=sys.stderr)
        else:
            default(message, cat, filename, lineno, file, line)

    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo" and args.similarity is None:
        args.similarity = ["bm25_chinese", "bm25_cjk"]
    from fastrag.errors import FastragError, StoreWarning

    _one_line_warnings(StoreWarning)
    try:
        return args.func(args)
    except (FastragError, _Usage) as exc:
        from fastrag.errors import ReaderError

        hint = (
            "\n(pass --on-error skip to report unreadable files and go on)"
            if isinstance(exc, ReaderError) and args.command == "ingest"
            else ""
        )
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `fastrag search ... | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
