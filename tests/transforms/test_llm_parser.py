"""LLMParser node groups through the real OpenAILike HTTP path (local test server)."""

from __future__ import annotations

import re
import time

import pytest
from wallclock import below

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.llms import LLMError
from fastrag.transforms.llm_parser import parse_keywords, parse_qa

FILES = {
    "a.txt": "亚硫酸盐是一种食品添加剂。\n它可以防腐。\n葡萄酒中常见。",
    "b.txt": "国际象棋超级大赛在荷兰举行。\n每年一月开赛。",
}


def model(messages):
    """The test model: summary, keywords and QA answers derived from the text it was sent."""
    p = messages[-1]["content"]
    text = re.search(r"(?:Text|文本)[:：]\n(.*?)\n\n", p, re.DOTALL).group(1)
    first = text.split("\n")[0][:8]
    if "关键词" in p or "keywords" in p:
        return f"关键词：{first}，测试、{first}\n"
    if "问答对" in p or "question and answer" in p:
        return f"问：{first}是什么？\n答：{first}。\n问：为什么？\n答：因为\n所以。"
    return f"摘要：{first}"


@pytest.fixture
def server(openai_server):
    openai_server.reply = model
    return openai_server


@pytest.fixture
def llm(server):
    return fr.OpenAILike(
        "parser-model", server.url, retry_backoff=0.01, timeout=10.0, max_retries=1
    )


@pytest.fixture
def kb(tmp_path):
    d = tmp_path / "kb"
    d.mkdir()
    for name, text in FILES.items():
        (d / name).write_text(text, encoding="utf-8")
    return d


def chat_requests(server):
    return [r for r in server.requests if r.path == "/v1/chat/completions"]


def test_each_task_type_gives_its_nodes(server, llm, kb):
    doc = fr.Document(str(kb))
    doc.create_node_group("summary", transform=fr.LLMParser(llm, language="zh"))
    doc.create_node_group("keyword", transform=fr.LLMParser(llm, "zh", "keywords"))
    doc.create_node_group("qapair", transform=fr.LLMParser(llm, "zh", "qa"))
    roots = doc.group("root").texts()
    firsts = [t.split("\n")[0][:8] for t in roots]
    assert doc.group("summary").texts() == [f"摘要：{f}" for f in firsts]
    assert doc.group("keyword").texts() == [w for f in firsts for w in (f, "测试")]
    qa = doc.group("qapair")
    assert qa.texts() == [q for f in firsts for q in (f"{f}是什么？", "为什么？")]
    answers = [n.metadata["answer"] for n in qa.nodes(range(len(qa)))]
    assert answers == [a for f in firsts for a in (f"{f}。", "因为\n所以。")]
    # children keep their document's metadata and point at their parent
    node = qa.nodes([0])[0]
    assert node.metadata["file_name"] == "a.txt" and node.parent.text == roots[0]
    assert len(chat_requests(server)) == 3 * len(FILES)
    assert all("请" in r.body["messages"][-1]["content"] for r in chat_requests(server))


def test_a_group_is_parsed_in_one_bounded_concurrent_batch(server, llm):
    texts = [f"Text number {i}." for i in range(12)]
    doc = fr.Document.from_texts(texts)
    parser = fr.LLMParser(llm, task_type="summary", max_concurrency=4)
    doc.create_node_group("summary", transform=parser)
    server.script(["slow:0.2"] * 12)
    t0 = time.perf_counter()
    group = doc.group("summary")
    wall = time.perf_counter() - t0
    assert len(group) == 12 and parser.calls == 12
    assert server.max_in_flight == 4
    below(wall, 12 * 0.2 / 2, "12 calls of 0.2 s, 4 at a time")  # 3 rounds, not 12
    prompt = chat_requests(server)[0].body["messages"][-1]["content"]
    assert prompt.startswith("Summarize the following text") and "Text number" in prompt


def test_store_keeps_parsed_groups_and_parses_only_new_files(server, llm, kb, tmp_path):
    store = tmp_path / "kb.store"

    def open_doc():
        doc = fr.Document(str(kb), store=str(store))
        doc.create_node_group("block", transform=lambda t: t.split("\n"))
        doc.create_node_group(
            "block-summary", parent="block", transform=fr.LLMParser(llm, "zh", "summary")
        )
        return doc

    first = open_doc().group("block-summary").table
    n_blocks = sum(len(t.split("\n")) for t in FILES.values())
    assert len(chat_requests(server)) == n_blocks == first.num_rows
    server.reset()
    server.reply = model
    again = open_doc().group("block-summary").table
    assert chat_requests(server) == []  # reopening parses nothing
    assert again.equals(first)
    (kb / "c.txt").write_text("新的文件。\n第二段。\n第三段。", encoding="utf-8")
    grown = open_doc().group("block-summary")
    assert len(chat_requests(server)) == 3  # the new file's blocks only
    assert len(grown) == n_blocks + 3
    assert grown.texts()[-3:] == ["摘要：新的文件。", "摘要：第二段。", "摘要：第三段。"]


def test_failure_names_node_and_file(server, kb):
    llm = fr.OpenAILike("m", server.url, max_retries=0, timeout=5.0)
    doc = fr.Document(str(kb))
    doc.create_node_group("summary", transform=fr.LLMParser(llm, max_concurrency=1))
    server.script(["ok", "500"])
    with pytest.raises(
        LLMError,
        match=r"LLMParser\(task_type='summary'\) failed on node "
        r"'[0-9a-f]+' of file '.*b\.txt'",
    ):
        doc.group("summary")


def test_on_error_skip_records_the_failure(server, kb):
    llm = fr.OpenAILike("m", server.url, max_retries=0, timeout=5.0)
    server.reply = model
    doc = fr.Document(str(kb))
    doc.create_node_group(
        "summary", transform=fr.LLMParser(llm, max_concurrency=1, on_error="skip")
    )
    server.script(["500", "ok"])
    with pytest.warns(
        UserWarning,
        match=r"failed on 1 of 2 nodes \(node '[0-9a-f]+' of file "
        r"'.*a\.txt'\)",
    ):
        g = doc.group("summary")
    nodes = g.nodes(range(len(g)))
    assert nodes[0].text == FILES["a.txt"]
    assert nodes[0].metadata["llm_parser_error"].startswith("LLMError")
    assert "llm_parser_error" not in nodes[1].metadata
    assert nodes[1].text.startswith("摘要：")


def test_arguments_are_checked(llm):
    with pytest.raises(ConfigError, match="task_type must be"):
        fr.LLMParser(llm, task_type="title")
    with pytest.raises(ConfigError, match="language must be"):
        fr.LLMParser(llm, language="fr")
    with pytest.raises(ConfigError, match=r"missing required variable \{text\}"):
        fr.LLMParser(llm, prompt_template="Summarize {content}")
    with pytest.raises(ConfigError, match="max_concurrency"):
        fr.LLMParser(llm, max_concurrency=0)
    with pytest.raises(ConfigError, match="no LLM given"):
        fr.LLMParser(None)


def test_identity_is_stable_and_follows_the_configuration(llm, server):
    a = fr.LLMParser(llm, task_type="summary")
    b = fr.LLMParser(
        fr.OpenAILike("parser-model", server.url, api_key="sk-secret"), task_type="summary"
    )
    assert a.identity() == b.identity() and "sk-secret" not in b.identity()
    assert a.identity() != fr.LLMParser(llm, task_type="keywords").identity()
    assert a.identity() != fr.LLMParser(llm, prompt_template="S: {text}").identity()


def test_lazyllm_complex_group_tree(server, llm, kb):
    # seeds/004 "构造复杂的节点组树", with fastrag's direct transform form (batched)
    summary_llm = fr.LLMParser(llm, language="zh", task_type="summary")
    keyword_llm = fr.LLMParser(llm, language="zh", task_type="keywords")
    qapair_llm = fr.LLMParser(llm, language="zh", task_type="qa")
    docs = fr.Document(str(kb))
    docs.create_node_group(name="block", transform=lambda d: d.split("\n"))
    docs.create_node_group(name="qapair", transform=qapair_llm)
    docs.create_node_group(name="doc-summary", transform=summary_llm)
    docs.create_node_group(name="keyword", transform=keyword_llm, parent="block")
    docs.create_node_group(name="sentence", transform=lambda d: d.split("。"), parent="block")
    docs.create_node_group(name="block-summary", transform=summary_llm, parent="block")
    # LazyLLM's own spelling (a lambda around the parser, trans_node=True) works too
    docs.create_node_group(
        name="kw2", transform=lambda b: keyword_llm(b), parent="block", trans_node=True
    )
    n_blocks = sum(len(t.split("\n")) for t in FILES.values())
    sizes = {
        g: len(docs.group(g))
        for g in ("block", "qapair", "doc-summary", "keyword", "sentence", "block-summary", "kw2")
    }
    assert sizes == {
        "block": n_blocks,
        "qapair": 4,
        "doc-summary": 2,
        "keyword": 2 * n_blocks,
        "sentence": n_blocks,
        "block-summary": n_blocks,
        "kw2": 2 * n_blocks,
    }
    assert docs.group("kw2").texts() == docs.group("keyword").texts()
    hit = fr.Retriever(docs, "block-summary", "bm25_chinese", topk=1)("亚硫酸盐有什么作用？")[0]
    assert hit.text == "摘要：亚硫酸盐是一种食" and hit.parent.text == "亚硫酸盐是一种食品添加剂。"
    assert [n.text for n in docs.find("keyword")([hit.parent])] == ["亚硫酸盐是一种食", "测试"]


@pytest.mark.parametrize(
    "text, want",
    [
        ("Keywords: a, b, a", ["a", "b"]),
        ("1. alpha\n2. beta\n- gamma", ["alpha", "beta", "gamma"]),
        ("关键词：甲、乙；丙，甲", ["甲", "乙", "丙"]),
        ("```\nx, y\n```", ["x", "y"]),
    ],
)
def test_parse_keywords(text, want):
    assert parse_keywords(text) == want


def test_parse_qa():
    text = (
        "1. **Q:** What?\n**A:** This.\n\nQuestion 2: Why?\nAnswer 2: Because\nof that.\n"
        "Q: Orphan question?\n"
    )
    assert parse_qa(text) == [("What?", "This."), ("Why?", "Because\nof that.")]
