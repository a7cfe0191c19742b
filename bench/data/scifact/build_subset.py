"""A BEIR-style SciFact folder from the part of SciFact that is reachable here (see SOURCE.md).

Reads ``gen_bm25_corpus.SCIFACT_DIR`` (the 2,101 abstracts of 9-25 sentences and the 237
claims with CONTRADICT evidence) and writes ``corpus.jsonl`` (``_id``, ``title`` empty,
``text``), ``queries.jsonl`` (``_id``, ``text``) and ``qrels/test.tsv`` into ``OUT``: the claims
that cite at least one of those abstracts, each relevant to the cited abstracts present.

Usage: ``python bench/data/scifact/build_subset.py [OUT]`` (default ``bench/.work/scifact/beir``),
then ``python bench/bench_quality.py --sets scifact --scifact OUT``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gen_bm25_corpus import SCIFACT_DIR, SCIFACT_FILES  # noqa: E402


def build(out: Path) -> dict:
    paths = [SCIFACT_DIR / f for f in SCIFACT_FILES]
    if not all(p.exists() for p in paths):
        raise SystemExit(f"copy {', '.join(SCIFACT_FILES)} into {SCIFACT_DIR} (see SOURCE.md)")
    docs = [json.loads(x) for x in paths[0].read_text(encoding="utf-8").splitlines()]
    ids = {str(d["doc_id"]) for d in docs}
    claims = [json.loads(x) for x in paths[1].read_text(encoding="utf-8").splitlines()]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in docs:
            row = {"_id": str(d["doc_id"]), "title": "", "text": d["text"]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    n_q = n_rel = 0
    with (
        (out / "queries.jsonl").open("w", encoding="utf-8") as fq,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as fr,
    ):
        fr.write("query-id\tcorpus-id\tscore\n")
        for c in claims:
            rel = [str(d) for d in c["cited_doc_ids"] if str(d) in ids]
            if not rel:
                continue
            fq.write(json.dumps({"_id": str(c["id"]), "text": c["claim"]}) + "\n")
            fr.writelines(f"{c['id']}\t{d}\t1\n" for d in rel)
            n_q += 1
            n_rel += len(rel)
    return {"docs": len(docs), "queries": n_q, "relevant": n_rel, "folder": str(out)}


if __name__ == "__main__":
    here = Path(__file__).resolve().parents[2]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else here / ".work" / "scifact" / "beir"
    print(json.dumps(build(target)))
