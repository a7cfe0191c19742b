"""``Retriever(..., stemmer=)``: stemming as one keyword, the stemmed default, exact scores
against bm25s with the same Snowball stemmer, and configuration errors raised at construction
(unknown BM25 method, a group with no nodes) rather than at the first query."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import fastrag as fr
from fastrag.errors import ConfigError, MissingExtraError

Stemmer = pytest.importorskip("Stemmer")  # PyStemmer: a core dependency

CORPUS = [
    "The runner runs every morning along the river",
    "She is walking her dogs in the park",
    "Running shoes wear out after many miles",
    "A dog walked into the quiet library",
    "Libraries lend books, magazines and films",
    "He connected the cables and the connection worked",
    "Connections between rivers and lakes shape the valley",
    "Morning coffee, then a long run by the lake",
    "The films were screened in two connected rooms",
    "Books about running and walking fill the shelves",
    "Quiet parks are good for reading books",
    "x y z and a single letter or two",
]
QUERIES = [
    "running",
    "runs",
    "walking dogs",
    "connected library",
    "book films",
    "river lakes morning",
    "quiet",
    "x a",
    "nothing matches zebra",
    "the and",
]
K1, B = 1.2, 0.7
PATTERN = r"(?u)\b\w+\b"  # fastrag's \w+ words (bm25s's default drops 1-letter words)


@pytest.fixture(scope="module")
def doc():
    return fr.Document.from_texts(CORPUS)


def scores_of(ret, query, n):
    """fastrag's scores as a dense [n] vector (0 for nodes not returned) and the hit rows."""
    ids = {nid: i for i, nid in enumerate(ret.doc.group("root").ids)}
    out = np.zeros(n, dtype=np.float64)
    rows = []
    for h in ret(query):
        out[ids[h.id]] = h.score
        rows.append(ids[h.id])
    return out, rows


def bm25s_scores(stemmer):
    bm25s = pytest.importorskip("bm25s")
    tok = bm25s.tokenize(
        CORPUS, stopwords="en_plus", stemmer=stemmer, token_pattern=PATTERN, show_progress=False
    )
    ret = bm25s.BM25(method="lucene", k1=K1, b=B, backend="numpy")
    ret.index(tok, show_progress=False)

    def score(query):
        words = bm25s.tokenize(
            [query],
            stopwords="en_plus",  # NLTK's list, the default analyzer's
            stemmer=stemmer,
            token_pattern=PATTERN,
            return_ids=False,
            show_progress=False,
        )[0]
        ids = [tok.vocab[w] for w in words if w in tok.vocab]
        if not ids:
            return np.zeros(len(CORPUS))
        return np.asarray(ret.get_scores_from_ids(ids), dtype=np.float64)

    return score


# ------------------------------------------------------------------------------ stemming effect
def test_running_finds_runs_only_with_stemming(doc):
    stemmed = fr.Retriever(doc, "root", "bm25", stemmer="english", topk=12)
    plain = fr.Retriever(doc, "root", "bm25", stemmer=None, topk=12)
    assert stemmed.stemmer == "english" and plain.stemmer is None
    runs = CORPUS[0]  # says "runner runs", never "running"
    assert runs in [h.text for h in stemmed("running")]
    assert runs not in [h.text for h in plain("running")]
    # unstemmed, "running" matches the literal word only
    assert {h.text for h in plain("running")} == {CORPUS[2], CORPUS[9]}
    assert {h.text for h in stemmed("running")} == {CORPUS[0], CORPUS[2], CORPUS[7], CORPUS[9]}


@pytest.mark.parametrize("stemmer", ["english", None])
def test_exact_scores_equal_bm25s(doc, stemmer):
    ours = fr.Retriever(
        doc, "root", "bm25", stemmer=stemmer, topk=len(CORPUS), method="lucene", k1=K1, b=B
    )
    theirs = bm25s_scores(Stemmer.Stemmer("english") if stemmer else None)
    n_hits = 0
    for q in QUERIES:
        got, rows = scores_of(ours, q, len(CORPUS))
        want = theirs(q)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=q)
        assert sorted(rows) == np.flatnonzero(want > 0).tolist(), q  # same hits, no others
        assert [round(got[r], 4) for r in rows] == sorted(want[want > 0].round(4), reverse=True)
        n_hits += len(rows)
    assert n_hits > 15  # the queries do hit


def test_stemming_changes_the_scores(doc):
    stemmed = fr.Retriever(doc, "root", "bm25", stemmer="english", topk=12)
    plain = fr.Retriever(doc, "root", "bm25", stemmer=None, topk=12)
    assert (
        scores_of(stemmed, "connected library", 12)[0].tolist()
        != scores_of(plain, "connected library", 12)[0].tolist()
    )


def test_default_is_english_stemming(doc):
    default = fr.Retriever(doc, "root", "bm25", topk=12)
    explicit = fr.Retriever(doc, "root", "bm25", stemmer="english", topk=12)
    auto = fr.Retriever(doc, "root", "bm25", stemmer="auto", topk=12)
    assert default.stemmer == "english" == auto.stemmer
    for q in QUERIES:
        want = [(h.id, h.score) for h in explicit(q)]
        assert [(h.id, h.score) for h in default(q)] == want
        assert [(h.id, h.score) for h in auto(q)] == want


def test_without_pystemmer_auto_is_off_and_english_is_an_error(doc, monkeypatch):
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # as if PyStemmer were not installed
    ret = fr.Retriever(doc, "root", "bm25", topk=12)
    assert ret.stemmer is None
    plain = fr.Retriever(doc, "root", "bm25", stemmer=None, topk=12)
    assert [(h.id, h.score) for h in ret("running")] == [(h.id, h.score) for h in plain("running")]
    with pytest.raises(
        MissingExtraError,
        match=r"stemmer='english' needs the optional package "
        r"'PyStemmer'.*fastrag-engine\[stem\]",
    ):
        fr.Retriever(doc, "root", "bm25", stemmer="english")


# ---------------------------------------------------------------------- stemmed vs unstemmed
def test_stemmed_and_unstemmed_indexes_never_confused(tmp_path):
    store = tmp_path / "st"
    first = fr.Document.from_texts(CORPUS, store=store)
    want = {}
    for stemmer in ("english", None, "english"):  # in-memory cache: each its own index
        hits = fr.Retriever(first, "root", "bm25", stemmer=stemmer, topk=12)("running")
        want.setdefault(stemmer, [(h.id, h.score) for h in hits])
        assert [(h.id, h.score) for h in hits] == want[stemmer]
    assert want["english"] != want[None]
    keys = [k for k in first.store.manifest["indexes"] if k.startswith("root/bm25/")]
    assert len(keys) == 2  # one stored index per stemmer
    again = fr.Document.from_texts(CORPUS, store=store)  # reopened: read from disk
    for stemmer in (None, "english"):
        hits = fr.Retriever(again, "root", "bm25", stemmer=stemmer, topk=12)("running")
        assert [(h.id, h.score) for h in hits] == want[stemmer]


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("similarity", ["bm25_chinese", "bm25_cjk", "cosine", "dot"])
@pytest.mark.parametrize("stemmer", ["english", None])
def test_stemmer_with_another_similarity_is_an_error(doc, similarity, stemmer):
    with pytest.raises(
        ConfigError,
        match=rf"stemmer={stemmer!r} applies to similarities "
        rf"'bm25', 'bm25_english' and 'hybrid', not "
        rf"'{similarity}'; drop "
        r"stemmer= or use similarity='bm25'",
    ):
        fr.Retriever(doc, "root", similarity, stemmer=stemmer)


def test_stemmer_with_analyzer_or_bad_value_is_an_error(doc):
    with pytest.raises(ConfigError, match=r"stemmer='english' and analyzer= were both given"):
        fr.Retriever(doc, "root", "bm25", stemmer="english", analyzer=str.split)
    with pytest.raises(
        ConfigError,
        match=r"unknown Snowball stemmer language 'klingon'; "
        r"known: .*english",
    ):
        fr.Retriever(doc, "root", "bm25", stemmer="klingon")
    with pytest.raises(
        ConfigError,
        match=r"stemmer must be None \(no stemming\) or a non-empty "
        r"str .*got int 3",
    ):
        fr.Retriever(doc, "root", "bm25", stemmer=3)


def test_unknown_bm25_method_fails_at_construction(doc, monkeypatch):
    def no_index(*a, **k):
        raise AssertionError("no index is built for a bad configuration")

    monkeypatch.setattr(doc.derived, "bm25", no_index)
    with pytest.raises(
        ConfigError,
        match=r"unknown BM25 method 'okapi2'; known methods: lucene, "
        r"robertson, atire, bm25l, bm25\+ \(pass method= one "
        r"of them; 'lucene' is the default\)",
    ):
        fr.Retriever(doc, "root", "bm25", method="okapi2")
    with pytest.raises(ConfigError, match=r"unknown BM25 method 'okapi2'"):
        fr.Retriever(doc, "root", "bm25_chinese", method="okapi2")
    with pytest.raises(ConfigError, match=r"BM25 parameter b=2 must be within \[0, 1\]"):
        fr.Retriever(doc, "root", "bm25", b=2)


class TinyEmbedding:
    """Deterministic letter-count vectors (stands in for a model's content only)."""

    def embed(self, texts):
        out = np.ones((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for c in t.lower():
                if "a" <= c <= "z":
                    out[i, ord(c) - 97] += 1
        return out


@pytest.mark.parametrize(
    "similarity,index",
    [
        ("bm25", "default"),
        ("bm25_chinese", "default"),
        ("cosine", "default"),
        ("cosine", "hnsw"),
        ("dot", "default"),
    ],
)
def test_empty_group_fails_at_construction(similarity, index):
    doc = fr.Document.from_texts(["alpha beta", "gamma"], embed=TinyEmbedding())
    doc.create_node_group("none", transform=lambda t: [])
    with pytest.raises(
        ConfigError,
        match=r"group 'none' has no nodes: its transform made none "
        r"from the Document's 2 root nodes; check the "
        r"transform given to create_node_group",
    ):
        fr.Retriever(doc, "none", similarity, index=index)


def test_empty_folder_fails_at_construction(tmp_path):
    (tmp_path / "kb").mkdir()
    doc = fr.Document(tmp_path / "kb")
    with pytest.raises(
        ConfigError,
        match=r"group 'root' has no nodes: the Document holds no "
        r"documents \(its sources gave no text, e\.g\. the "
        r"source folder had no readable files\); add documents "
        r"with doc\.add\(\.\.\.\)",
    ):
        fr.Retriever(doc, "root", "bm25")
    with pytest.raises(
        ConfigError,
        match=r"group 'CoarseChunk' has no nodes: the Document "
        r"holds no documents",
    ):
        fr.Retriever(doc, "CoarseChunk")


def test_group_emptied_after_construction_fails_at_query(tmp_path):
    (tmp_path / "a.txt").write_text("the runner runs")
    doc = fr.Document(tmp_path / "a.txt")
    ret = fr.Retriever(doc, "root", "bm25")
    assert [h.text for h in ret("runner")] == ["the runner runs"]
    doc.delete(doc.group("root")[0].doc_id)
    with pytest.raises(
        ConfigError,
        match=r"group 'root' has no nodes: the Document holds no "
        r"documents",
    ):
        ret("runner")
