"""seeds/004: the LazyLLM tutorial's dataflow apps (``with pipeline() as ppl``, ``parallel().sum``,
``bind(query=ppl.input)``, ``llm.prompt(ChatPrompter(...))``), run from the seed's own text
(tests/seeds/blocks/lazyllm_004.txt, checked against shared/seeds when that folder is there).

Only the import lines and the model classes change, by the table in lazyllm_seed.py (also in
docs/guide/migrating.md); the models are the local OpenAI-compatible test server, over real
HTTP. Then each app answers CMRC questions one by one and as one batch: same answers, and the
server counts what batching saves."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from lazyllm_seed import blocks_by_lines
from lazyllm_seed import swap as seed_swap
from seed_support import prompts, requests

import fastrag as fr

SEED_DIR = Path(__file__).resolve().parents[3] / "shared" / "seeds"
WEB_UI = re.compile(r"^(lazyllm\.WebModule\(.*|webpage = .*)$", re.M)  # a blocking web UI


def blocks() -> dict[str, str]:
    return blocks_by_lines()


def swap(block: str) -> str:
    """The block with lazyllm_seed.py's table applied, its web UI line a no-op."""
    return WEB_UI.sub(
        "pass  # the web UI (its .wait() blocks: see block 27's test)", seed_swap(block)
    )


def test_blocks_are_the_seeds_text():
    seeds = sorted(SEED_DIR.glob("004_*.txt"))
    if not seeds:
        pytest.skip("shared/seeds is not beside this checkout")
    seed = seeds[0].read_text(encoding="utf-8").splitlines(keepends=True)
    for lines, code in blocks().items():
        a, b = (int(x) for x in lines.split("-"))
        assert "".join(seed[a - 1 : b]) == code, lines


@pytest.fixture
def models(server):
    return {
        "EMBED": fr.OpenAIEmbedding(server.url, "bge-large-zh-v1.5"),
        "RERANK": fr.OpenAIRerank(server.url, "bge-reranker-large"),
        "LLM": fr.OpenAILike("test-model", server.url, retry_backoff=0.01, timeout=20.0),
    }


@pytest.fixture
def data_path(cmrc_kb, tmp_path):
    """Five files of the tutorial's data_kb (50 CMRC paragraphs, one per line)."""
    for f in sorted(Path(cmrc_kb).iterdir())[:5]:
        shutil.copy(f, tmp_path / f.name)
    return str(tmp_path)


@pytest.fixture
def questions(cmrc_squad, data_path):
    """CMRC questions about the paragraphs in ``data_path``."""
    texts = "".join(p.read_text(encoding="utf-8") for p in Path(data_path).iterdir())
    out = []
    for art in cmrc_squad["data"]:
        for para in art["paragraphs"]:
            if para["context"].replace("\n", " ") in texts:
                out += [qa["question"] for qa in para["qas"][:1]]
    return out[:6]


def run(code: str, models: dict, data_path: str) -> dict:
    ns = {"__name__": "seed_block", "DATA_PATH": data_path, **models}
    exec(compile(code, "<seed block>", "exec"), ns)
    return ns


def loop_then_batch(server, ppl, qs):
    """Answers one by one, then as one batch; each with the server's requests by path."""
    ppl(qs[0])  # builds the indexes (the corpus' embeddings) before counting
    server.reset()
    loop = [ppl(q) for q in qs]
    n_loop = {p: len(requests(server, p)) for p in ("/v1/embeddings", "/v1/rerank")}
    server.reset()
    batch = ppl.batch(qs)
    n_batch = {p: len(requests(server, p)) for p in ("/v1/embeddings", "/v1/rerank")}
    return loop, batch, n_loop, n_batch


def test_dataflow_app_runs_as_written_and_batches(server, models, data_path, questions):
    """block 26 (基于 LazyLLM 数据流实现): two retrievers in parallel().sum, a reranker and a
    formatter bound to ppl.input, an LLM with ChatPrompter(extra_keys=['context_str'])."""
    server.reply = lambda messages: "回答：" + messages[-1]["content"].rsplit("\n", 1)[-1]
    code = swap(blocks()["1162-1186"])
    ns = run(code, models, data_path)
    assert len(prompts(server)) == 1  # the block's own ppl("")
    ppl, qs = ns["ppl"], questions
    assert len(qs) == 6
    loop, batch, n_loop, n_batch = loop_then_batch(server, ppl, qs)
    assert batch == loop == [f"回答：{q}" for q in qs]
    # the cosine retriever embeds the queries: one request per query in the loop, one per
    # batch; /v1/rerank takes one query a request, so both send one per question
    assert n_loop == {"/v1/embeddings": 6, "/v1/rerank": 6}
    assert n_batch == {"/v1/embeddings": 1, "/v1/rerank": 6}
    sent = prompts(server)
    head = "你是一个知识问答助手，请通过给定的文档回答用户问题。\n"
    assert sorted(p.rsplit("\n", 1)[-1] for p in sent) == sorted(qs)
    for p in sent:
        assert p.startswith(head + "Here are some extra messages you can referred to:")
        context = p[len(head) :].split("### context_str:\n", 1)[1].rsplit("\n", 1)[0]
        assert context  # three reranked paragraphs of data_kb
    ranked = {r.body["query"]: r.body["documents"] for r in requests(server, "/v1/rerank")}
    assert sorted(ranked) == sorted(qs) and all(2 <= len(d) <= 6 for d in ranked.values())


def test_custom_transform_app_runs_as_written(server, models, data_path, questions):
    """blocks 41-42 (国学大师): Document(dataset_path=..., manager=False), the seed's
    ParagraphSplitter, `prl.retriever1 = ...` inside `with parallel().sum as ppl.prl`, a
    positional similarity_cut_off, a reranker with output_format="content", join=True."""
    server.reply = lambda messages: "答"
    splitter = blocks()["1573-1585"]
    # the seed defines ParagraphSplitter in an earlier section, whose imports it does not show
    preamble = "from typing import List\nfrom fastrag import DocNode, NodeTransform\n"
    code = swap(blocks()["1601-1617"])
    ns = run(preamble + splitter + code, models, data_path)
    ppl = ns["ppl"]
    assert ns["prl"] is ppl.prl and list(ppl.prl.stages) == ["retriever1", "retriever2"]
    loop, batch, n_loop, n_batch = loop_then_batch(server, ppl, questions)
    assert batch == loop == ["答"] * len(questions)
    assert n_batch["/v1/embeddings"] == 1 and n_loop["/v1/embeddings"] == len(questions)
    instruction = ns["prompt"]
    for p in prompts(server):
        assert p.startswith(instruction + "\nHere are some extra messages")
        context = p.split("### context_str:\n", 1)[1].rsplit("\n", 1)[0]
        assert context.strip() and "<Node" not in context  # one paragraph's text (join=True)


def _qa_model(messages):
    """The chat model of the QA-pair app: QA pairs for the parser, the query rewritten (as it
    is), an answer for the RAG prompt."""
    p = messages[-1]["content"]
    if p.startswith("请根据下面的文本生成若干问答对"):
        text = p.split("文本：\n", 1)[1].rsplit("\n\n问答对：", 1)[0]
        lines = [t for t in text.split("\n") if t.strip()]
        return "\n".join(f"问：{t[:12]}讲的是什么？\n答：{t[:40]}" for t in lines)
    if p.startswith("你是一个查询重写助手"):
        return p.rsplit("\n", 1)[-1]
    return "回答"


def test_qa_pair_app_runs_as_written(server, models, data_path, questions):
    """block 28 (预置QA对): llm.share(ChatPrompter(...)) as query rewriter, a pipeline built by
    a function as a branch of parallel().sum beside a QA-pair retriever, the formatter bound
    to the outer pipeline's input."""
    server.reply = _qa_model
    code = swap(blocks()["1212-1266"])
    ns = run(code, models, data_path)
    ppl = ns["ppl"]
    assert list(ppl.stages) == ["query_rewriter", "prl", "formatter", "llm"]
    assert list(ppl.prl.stages) == ["retrieve_rerank", "qa_retrieve"]
    loop, batch, n_loop, n_batch = loop_then_batch(server, ppl, questions)
    n = len(questions)
    assert batch == loop == ["回答"] * n
    # two cosine retrievers embed the rewritten queries: 2 requests per query vs 2 in all
    assert n_loop == {"/v1/embeddings": 2 * n, "/v1/rerank": n}
    assert n_batch == {"/v1/embeddings": 2, "/v1/rerank": n}
    sent = prompts(server)
    assert len(sent) == 2 * n  # a rewrite and an answer per question
    answers = [p for p in sent if not p.startswith("你是一个查询重写助手")]
    # the formatter's query is the outer pipeline's input: the question, on the last line
    assert sorted(p.rsplit("\n", 1)[-1] for p in answers) == sorted(questions)
    assert all("讲的是什么？" in p for p in answers)  # the QA-pair branch's nodes are in
