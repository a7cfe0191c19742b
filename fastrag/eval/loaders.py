"""Dataset loaders for retrieval evaluation: SQuAD-style files (CMRC 2018) and BEIR folders.

Both return a :class:`RetrievalDataset`: the corpus (ids, texts, titles), the queries (ids,
texts) and the relevance judgements ``qrels[query_id][corpus_id] = grade``. Every malformed
input raises :class:`~fastrag.errors.ReaderError` naming the file and, where there is one, the
line.

SQuAD-style data has no corpus of its own: the corpus is the set of unique ``context``
paragraphs (first-seen order, newlines inside a paragraph turned into spaces so that a
knowledge base can hold one paragraph per line) and each question's one relevant document is
the paragraph it was asked about.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from fastrag.documents.inflate import InflateBudget
from fastrag.errors import ConfigError, ReaderError

__all__ = [
    "RetrievalDataset",
    "load_beir",
    "load_squad",
    "normalize_paragraph",
    "read_squad_json",
    "squad_questions",
]


@dataclass
class RetrievalDataset:
    """A retrieval benchmark: corpus, queries and graded relevance judgements."""

    corpus_ids: list[str]
    corpus_texts: list[str]
    corpus_titles: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]
    name: str = ""
    _corpus_pos: dict[str, int] | None = field(default=None, repr=False, compare=False)

    @property
    def n_docs(self) -> int:
        return len(self.corpus_ids)

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def gold_ids(self) -> list[list[str]]:
        """Per query (in query order), its relevant corpus ids (grade > 0), best grade first."""
        out = []
        for qid in self.query_ids:
            rel = [(g, cid) for cid, g in self.qrels.get(qid, {}).items() if g > 0]
            rel.sort(key=lambda t: -t[0])  # stable: equal grades keep qrels order
            out.append([cid for _, cid in rel])
        return out

    def gold_grades(self) -> list[dict[str, int]]:
        """Per query, ``{corpus_id: grade}`` of its relevant documents (for graded nDCG)."""
        return [
            {cid: g for cid, g in self.qrels.get(qid, {}).items() if g > 0}
            for qid in self.query_ids
        ]

    def corpus_index(self, corpus_id: str) -> int:
        """Row of ``corpus_id`` in ``corpus_ids``."""
        if self._corpus_pos is None:
            self._corpus_pos = {cid: i for i, cid in enumerate(self.corpus_ids)}
        try:
            return self._corpus_pos[corpus_id]
        except KeyError:
            raise KeyError(f"corpus id {corpus_id!r} is not in dataset {self.name!r}") from None


# -- SQuAD ------------------------------------------------------------------------------------
def normalize_paragraph(text: str) -> str:
    """A paragraph as stored in a one-paragraph-per-line knowledge base: line breaks -> spaces."""
    return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def _squad_articles(squad: Any, where: str) -> list:
    if not isinstance(squad, Mapping) or not isinstance(squad.get("data"), list):
        got = type(squad).__name__ if not isinstance(squad, Mapping) else f"keys {sorted(squad)}"
        raise ReaderError(
            f"{where} is not SQuAD-format: expected a JSON object with a 'data' list, got {got}"
        )
    return squad["data"]


def _squad_walk(squad: Any, where: str = "squad"):
    """Yield ``(context, question, qa_id)`` for every question, validating the structure."""
    for ai, article in enumerate(_squad_articles(squad, where)):
        loc = f"{where}: data[{ai}]"
        if not isinstance(article, Mapping) or not isinstance(article.get("paragraphs"), list):
            raise ReaderError(f"{loc} has no 'paragraphs' list")
        for pi, para in enumerate(article["paragraphs"]):
            ploc = f"{loc}.paragraphs[{pi}]"
            if not isinstance(para, Mapping) or not isinstance(para.get("context"), str):
                raise ReaderError(f"{ploc} has no 'context' string")
            qas = para.get("qas", [])
            if not isinstance(qas, list):
                raise ReaderError(f"{ploc}.qas is {type(qas).__name__}, expected a list")
            if not qas:
                yield para["context"], None, None, article.get("title", "")
            for qi, qa in enumerate(qas):
                if not isinstance(qa, Mapping) or not isinstance(qa.get("question"), str):
                    raise ReaderError(f"{ploc}.qas[{qi}] has no 'question' string")
                qid = qa.get("id")
                yield (
                    para["context"],
                    qa["question"],
                    (str(qid) if qid is not None else None),
                    article.get("title", ""),
                )


def squad_questions(squad: Mapping) -> tuple[list[str], list[int], list[str]]:
    """``(questions, gold_context_idx, contexts)`` of a SQuAD-format dict.

    ``contexts`` are the unique paragraphs in first-seen order, normalised as written by
    :func:`fastrag.datasets.build_squad_kb` (line breaks -> spaces); ``gold_context_idx[i]`` is
    the index in ``contexts`` of the paragraph question ``i`` was asked about.
    """
    questions: list[str] = []
    gold: list[int] = []
    pos: dict[str, int] = {}
    for context, question, _qid, _title in _squad_walk(squad):
        ctx = normalize_paragraph(context)
        idx = pos.setdefault(ctx, len(pos))
        if question is not None:
            questions.append(question)
            gold.append(idx)
    return questions, gold, list(pos)


def load_squad(source: str | PathLike | Mapping, name: str | None = None) -> RetrievalDataset:
    """Load a SQuAD-style file (``.json`` or ``.json.gz``) or dict as a retrieval dataset.

    Corpus ids are ``"ctx-<i>"`` (the paragraph's index among unique paragraphs); titles are the
    article titles; query ids are the questions' ``id`` (``"q-<i>"`` where missing).
    """
    if isinstance(source, Mapping):
        data, where = source, "squad"
    elif isinstance(source, (str, PathLike)):
        path = Path(source)
        where = str(path)
        data = read_squad_json(path)
    else:
        raise ConfigError(f"load_squad needs a path or a SQuAD dict, got {type(source).__name__}")
    pos: dict[str, int] = {}
    titles: list[str] = []
    query_ids: list[str] = []
    query_texts: list[str] = []
    qrels: dict[str, dict[str, int]] = {}
    for context, question, qid, title in _squad_walk(data, where):
        ctx = normalize_paragraph(context)
        if ctx not in pos:
            pos[ctx] = len(pos)
            titles.append(str(title or ""))
        if question is None:
            continue
        qid = qid if qid is not None else f"q-{len(query_ids)}"
        if qid in qrels:
            raise ReaderError(f"{where}: question id {qid!r} appears twice; ids must be unique")
        query_ids.append(qid)
        query_texts.append(question)
        qrels[qid] = {f"ctx-{pos[ctx]}": 1}
    return RetrievalDataset(
        corpus_ids=[f"ctx-{i}" for i in range(len(pos))],
        corpus_texts=list(pos),
        corpus_titles=titles,
        query_ids=query_ids,
        query_texts=query_texts,
        qrels=qrels,
        name=name if name is not None else (Path(where).name if where != "squad" else "squad"),
    )


def read_squad_json(path: str | PathLike) -> Any:
    """The parsed JSON of a SQuAD-style file (``.json`` or ``.json.gz``); a missing,
    unreadable or malformed file is a :class:`~fastrag.errors.ReaderError` naming it, and so
    is gzip data inflating past :func:`~fastrag.documents.inflate.inflate_cap`."""
    path = Path(path)
    if not path.is_file():
        raise ReaderError(f"SQuAD file {str(path)!r} does not exist or is not a file")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                data = InflateBudget(path, path.stat().st_size).read(f, "gzip data")
            return json.loads(data.decode("utf-8"))
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ReaderError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except RecursionError:
        raise _too_deep(path) from None
    except (UnicodeDecodeError, OSError, EOFError) as e:
        raise ReaderError(f"{path}: cannot read as UTF-8 JSON ({e})") from None


def _too_deep(path: Path, where: str = "") -> ReaderError:
    return ReaderError(
        f"{path}{where}: JSON nested more than about {sys.getrecursionlimit()} levels deep, "
        "past what Python's JSON parser reads; flatten the data"
    )


# -- BEIR -------------------------------------------------------------------------------------
def _read_jsonl(path: Path, kind: str, need_text: bool = True):
    """Yield ``(line_no, _id, obj)`` of a BEIR jsonl file, validating each line."""
    seen: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReaderError(f"{path} line {line_no}: invalid JSON ({e.msg})") from None
            except RecursionError:
                raise _too_deep(path, f" line {line_no}") from None
            if not isinstance(obj, dict):
                raise ReaderError(
                    f"{path} line {line_no}: expected a JSON object, got {type(obj).__name__}"
                )
            if "_id" not in obj:
                raise ReaderError(f"{path} line {line_no}: {kind} record has no '_id'")
            _id = str(obj["_id"])
            if need_text and not isinstance(obj.get("text"), str):
                raise ReaderError(f"{path} line {line_no}: {kind} {_id!r} has no 'text' string")
            if _id in seen:
                raise ReaderError(f"{path} line {line_no}: duplicate {kind} id {_id!r}")
            seen.add(_id)
            yield line_no, _id, obj


def load_beir(folder: str | PathLike, split: str = "test") -> RetrievalDataset:
    """Load a BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{split}.tsv``.

    The qrels file is tab-separated ``query-id, corpus-id, score`` with a header line. Queries
    are those with at least one judgement of score > 0, in ``queries.jsonl`` order.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ReaderError(f"BEIR folder {str(root)!r} does not exist or is not a directory")
    corpus_path, queries_path = root / "corpus.jsonl", root / "queries.jsonl"
    qrels_path = root / "qrels" / f"{split}.tsv"
    for p in (corpus_path, queries_path):
        if not p.is_file():
            raise ReaderError(f"BEIR folder {str(root)!r} has no {p.name}")
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise ReaderError(
            f"BEIR folder {str(root)!r} has no qrels/{split}.tsv; available splits: {have}"
        )
    try:
        corpus_ids, corpus_texts, corpus_titles = [], [], []
        for _, _id, obj in _read_jsonl(corpus_path, "document"):
            corpus_ids.append(_id)
            corpus_texts.append(obj["text"])
            title = obj.get("title") or ""
            corpus_titles.append(title if isinstance(title, str) else str(title))
        queries: dict[str, str] = {}
        for _, _id, obj in _read_jsonl(queries_path, "query"):
            queries[_id] = obj["text"]
    except UnicodeDecodeError as e:
        raise ReaderError(f"BEIR folder {str(root)!r}: a jsonl file is not UTF-8 ({e})") from None

    known_docs = set(corpus_ids)
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8", newline="") as f:
        for line_no, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != 3:
                raise ReaderError(
                    f"{qrels_path} line {line_no}: expected 3 tab-separated columns "
                    f"(query-id, corpus-id, score), got {len(row)}"
                )
            qid, cid, score = (c.strip() for c in row)
            try:
                grade = int(score)
            except ValueError:
                if line_no == 1:
                    continue  # the header line
                raise ReaderError(
                    f"{qrels_path} line {line_no}: score {score!r} is not an integer"
                ) from None
            if qid not in queries:
                raise ReaderError(
                    f"{qrels_path} line {line_no}: query id {qid!r} is not in queries.jsonl"
                )
            if cid not in known_docs:
                raise ReaderError(
                    f"{qrels_path} line {line_no}: corpus id {cid!r} is not in corpus.jsonl"
                )
            qrels.setdefault(qid, {})[cid] = grade
    query_ids = [q for q in queries if any(g > 0 for g in qrels.get(q, {}).values())]
    if not query_ids:
        raise ReaderError(f"{qrels_path}: no query has a judgement with score > 0")
    return RetrievalDataset(
        corpus_ids=corpus_ids,
        corpus_texts=corpus_texts,
        corpus_titles=corpus_titles,
        query_ids=query_ids,
        query_texts=[queries[q] for q in query_ids],
        qrels={q: qrels[q] for q in query_ids},
        name=root.name,
    )
