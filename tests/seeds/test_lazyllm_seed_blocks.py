"""seeds/004 (LazyLLM tutorial "检索升级实践"): every one of its 42 ```python blocks, run from the
seed's own text (tests/seeds/blocks/lazyllm_004.txt, compared with shared/seeds by
test_lazyllm_dataflow.py::test_blocks_are_the_seeds_text when that folder is there).

Only the table in tests/seeds/lazyllm_seed.py (:func:`swap`) changes the text: LazyLLM's
import lines and model classes become fastrag's, the seed's data paths ``DATA_PATH``, and two
seed typos that neither Python nor LazyLLM accepts are fixed. The models are
tests/openai_server.py over real HTTP; its chat reply (:func:`_model`) stands in for the model's
words only.

The 42 blocks (numbered in seed order; tests/seeds/blocks/lazyllm_004.txt has their lines):

(a) run as written (with the table), 25: on their own 2, 3, 4, 5, 6, 7, 8, 9, 11, 14, 15,
    17, 18, 19, 20, 22, 24, 25, 34 and 36 (defs: called), 35, 39 (a class: used by 40) here; 26
    and 28 in test_lazyllm_dataflow.py; 27 (``lazyllm.WebModule(ppl, port=...).start().wait()``,
    serving 26's ``ppl``: run after 26, in a thread until stopped, a chat message posted). 3
    and 25 call ``llm.prompt(ChatPrompter(...))`` for its effect, then ``llm(dict)``:
    fastrag's ``prompt`` sets the LLM's prompter, as LazyLLM's.
(b) fragments, 17. Run with what they continue, 12: 16 uses ``lazyllm.config`` without
    importing lazyllm and reads a setting its comment says to declare (run with those two
    lines; ``fr.OnlineEmbeddingModuleBase``, ``fr.config``); 10 and 23 use names they never import
    (run with the sibling block's import line); 12, 13 continue 11; 21 continues 20; 37 and 38
    continue 35 ("其他代码不变", as the seed says; 37 fails as the seed says it does: ``'DocNode'
    object has no attribute 'split'``); 40 uses 39's class; 41 (a class without its imports)
    and 42 (uses 41's class) in test_lazyllm_dataflow.py; 29 is appendix pseudo-code on
    undefined ``document`` / ``summary_llm`` / ``label_llm`` (run with those). Not Python, 5:
    1 (``pip install``), 30-32 (node listings; 31 and 32 do not parse, 30 names undefined
    ``Node`` / ``all_nodes``), 33 (a signature sketch, ``parser/nodes=``).
(c) fail on fastrag: none.

Block 5's ``set().update(hits)`` de-duplicates hits of the same node (NodeWithScore compares
by node, as LazyLLM's nodes do).

Count: 25 run as written / 17 fragments (12 run with their context, 5 not Python) / 0 fail on
fastrag."""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
import traceback
from pathlib import Path

import httpx
import numpy as np
import pytest
from lazyllm_seed import DATA_PATHS, MODEL_CALL, blocks, swap
from openai_server import OpenAIServer
from platform_server import PlatformServer
from seed_support import prompts, requests

import fastrag as fr
from fastrag.errors import TransformError

SULFITE = (
    "亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO。绝大多数葡萄酒中都自然存在亚硫酸盐。"
    "而且有时也在葡萄酒中加入亚硫酸盐作防腐剂，防止变质和氧化。"
)
BAOBAB = (
    "猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲。"
    "现今中国大陆的云南、福建、广东等地，以及台湾皆有人工引种栽培。"
)
# the tutorial's own "段落节点组" output for 国际象棋超级大赛 (its table after block 12)
CHESS = (
    "中国（南京）国际象棋超级大赛（Pearl Spring Super Tournament）原名中国（南京）国际象棋特级大师"
    "邀请赛，首届比赛于2008年12月11日至22日在南京市浦口区明发珍珠泉大酒店举行。本次大赛由南京市"
    "人民政府、国家体育总局棋牌运动管理中心主办，浦口区人民政府、南京市体育局承办。"
)
# what the tutorial's "MIT OpenCourseWare是啥？" asks about
MIT_OCW = (
    "麻省理工学院开放式课程（MIT OpenCourseWare）是麻省理工学院于2001年启动的计划，"
    "把该校的课程讲义、习题与考试在互联网上免费公开，供全世界的学习者使用。"
)


# -- the model's words and the data ---------------------------------------------------------------
SUB_QUESTIONS = (
    "健康饮食的基本原则是什么？\n如何合理安排一日三餐？\n健康饮食中应该包含哪些食物类别？"
)
MIT_QUESTIONS = (
    "MIT OpenCourseWare是什么？\nMIT OpenCourseWare由谁在哪一年启动？\n"
    "MIT OpenCourseWare公开哪些课程内容？"
)


def _model(messages) -> str:
    """The chat model: LLMParser's summary / keywords / QA pairs from the text it is given, the
    tutorial's rewriters and judge, and an answer that repeats the prompt's last line."""
    p = messages[-1]["content"]
    text = p.split("文本：\n", 1)[1].rsplit("\n\n", 1)[0] if "文本：\n" in p else ""
    first = text.split("。")[0]
    if p.startswith("请用一段话总结"):
        return "摘要：" + first
    if p.startswith("请从下面的文本中提取"):
        return ", ".join(re.findall(r"[\u4e00-\u9fff]{4}", first)[:3]) or "无"
    if p.startswith("请根据下面的文本生成若干问答对"):
        return f"问：{first[:12]}讲的是什么？\n答：{first}"
    if p.startswith("你是一个查询改写"):
        return "为我介绍下" + p.rsplit("\n", 1)[-1]
    if p.startswith("你是一个查询重写助手，将用户查询分解"):
        return MIT_QUESTIONS
    if p.startswith("你是一个查询重写助手"):
        return SUB_QUESTIONS
    if p.startswith("你是一个判别助手"):
        return "True"
    return "回答：" + p.rsplit("\n", 1)[-1]


@pytest.fixture
def models(server):
    server.reply = _model
    return {
        "LLM": fr.OpenAILike("test-model", server.url, retry_backoff=0.01, timeout=20.0),
        "EMBED": fr.OpenAIEmbedding(server.url, "bge-large-zh-v1.5"),
        "EMBED2": fr.OpenAIEmbedding(server.url, "bge-m3"),
        "RERANK": fr.OpenAIRerank(server.url, "bge-reranker-large"),
    }


@pytest.fixture
def data_path(cmrc_kb, tmp_path):
    """Five files of the tutorial's data_kb plus its own paragraphs (one file, one a line)."""
    d = tmp_path / "data_kb"
    d.mkdir()
    for f in sorted(Path(cmrc_kb).iterdir())[:5]:
        shutil.copy(f, d / f.name)
    (d / "tutorial.txt").write_text("\n".join([SULFITE, BAOBAB, CHESS, MIT_OCW]), encoding="utf-8")
    return str(d)


def run(nums, models: dict, data_path: str, capsys, preamble: str = "", ns: dict | None = None):
    """Blocks ``nums`` (seed order) swapped and run in one namespace; (namespace, stdout)."""
    ns = ns if ns is not None else {"__name__": "seed_block", "DATA_PATH": data_path, **models}
    for n in [nums] if isinstance(nums, int) else nums:
        code = preamble + swap(blocks()[n - 1])
        exec(compile(code, f"<seed 004 block {n}>", "exec"), ns)
        preamble = ""
    return ns, capsys.readouterr().out


def test_the_seed_has_42_blocks_and_the_table_applies():
    bs = blocks()
    assert len(bs) == 42
    seed = sorted((Path(__file__).resolve().parents[3] / "shared" / "seeds").glob("004_*.txt"))
    if seed:  # the checked-in copy has every python block of the seed
        fences = re.findall(r"^\s*```python\s*$", seed[0].read_text(encoding="utf-8"), re.M)
        assert len(fences) == 42
    swapped = [swap(b) for b in bs]
    for n, s in enumerate(swapped, 1):
        assert "import lazyllm\n" not in s and "from lazyllm" not in s, n
        assert not MODEL_CALL.search(s), n
    b25 = swapped[24]  # block 25: three model classes, one with lazyllm.deploy.Vllm
    assert b25.startswith("import fastrag as lazyllm\n")
    assert "embedding_model = EMBED\n" in b25 and "offline_rerank = RERANK\n" in b25
    assert "llm = LLM\n" in b25 and "deploy" not in b25
    assert swapped[4].startswith("from fastrag import Document, ChatPrompter, Retriever\n")


@pytest.mark.parametrize("n", [1, 30, 31, 32, 33])
def test_fragments_that_are_not_python(n):
    """1: a shell command; 30-32: listings of the appendix's node groups; 33: a signature."""
    code = swap(blocks()[n - 1])
    if n == 30:  # parses, but is a listing over names the seed never defines
        with pytest.raises(NameError, match="all_nodes|Node"):
            exec(compile(code, "<30>", "exec"), {})
        return
    with pytest.raises(SyntaxError):
        compile(code, f"<{n}>", "exec")


# -- evaluation, query rewriting --------------------------------------------------------------
def test_block_2_retrieval_metrics(server, models, data_path, capsys):
    server.reply = (
        '[{"statement": "非洲猴面包树的果实长约15至20厘米。", "reason": "上下文中有", "score": 1}]'
    )
    ns, _ = run(2, models, data_path, capsys)
    assert ns["m_recall"](ns["data"]) == 1.0 and ns["m_cr"](ns["data"]) == 0.5
    assert ns["res"] == 1.0
    assert "钙含量" in prompts(server)[0]


def test_block_3_rewrite_retrieve_answer(server, models, data_path, capsys):
    ns, out = run(3, models, data_path, capsys)
    assert out.startswith("改写后的查询：\n为我介绍下MIT OpenCourseWare是啥？")
    assert ns["res"] == "回答：为我介绍下MIT OpenCourseWare是啥？"


def test_block_4_sub_questions(server, models, data_path, capsys):
    ns, out = run(4, models, data_path, capsys)
    assert out == SUB_QUESTIONS + "\n"
    assert prompts(server) == [ns["prompt"] + "\n有哪些健康饮食的建议"]


def test_block_5_sub_question_rag(server, models, data_path, capsys):
    ns, out = run(5, models, data_path, capsys)
    assert ns["queries_list"] == MIT_QUESTIONS.split("\n")
    assert any(MIT_OCW in n.get_content() for n in ns["retrieved_docs"])
    assert ns["res"] == "回答：MIT OpenCourseWare是啥？"
    assert out.endswith("系统答案:  回答：MIT OpenCourseWare是啥？\n")
    sent = prompts(server)
    assert len(sent) == 2 and MIT_OCW in sent[1]  # the rewrite, then the answer


def test_block_5_set_deduplicates_hits(server, models, data_path, capsys):
    ns, _ = run(5, models, data_path, capsys)
    ids = [n.node.id for n in ns["retrieved_docs"]]
    assert ids and len(ids) == len(set(ids))  # each sub-question hits the same CoarseChunk


def test_block_6_rewrite_until_judged(server, models, data_path, capsys):
    ns, out = run(6, models, data_path, capsys)
    assert ns["LLM_JUDGE"] is True
    assert ns["query_rewrite"] == "为我介绍下MIT OpenCourseWare是啥？"
    assert out.count("重写的查询") == 1 and "LLM判断结果：True" in out
    assert [p[:8] for p in prompts(server)] == [
        "你是一个查询改写",
        "你是一个友好的 ",
        "你是一个判别助手",
    ]


# -- node groups ----------------------------------------------------------------------------------
def _printed_groups(out: str) -> dict[str, str]:
    parts = re.split(r"^======= (\S+) =====\n", out, flags=re.M)[1:]
    return {k: v.rstrip("\n") for k, v in zip(parts[0::2], parts[1::2], strict=True)}


def test_block_7_builtin_groups_and_sentence_splitter(models, data_path, capsys):
    ns, out = run(7, models, data_path, capsys)
    got = _printed_groups(out)
    assert list(got) == ["CoarseChunk", "MediumChunk", "FineChunk", "512Chunk"]
    assert all("亚硫酸盐" in v for v in got.values())
    assert got["CoarseChunk"].startswith(SULFITE)  # the tutorial file's text, 1024-token chunk
    assert len(got["FineChunk"]) < len(got["CoarseChunk"])


def test_block_8_custom_transforms(models, data_path, capsys):
    ns, out = run(8, models, data_path, capsys)
    got = _printed_groups(out)
    assert list(got) == [f"block{i}" for i in range(1, 7)]
    sentence = "亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO"
    for name in ("block1", "block2", "block3", "block4", "block6"):
        assert "亚硫酸盐" in got[name] and "。" not in got[name], name
    assert got["block5"] == SULFITE  # split on \n: one paragraph
    assert any(sentence in v for v in got.values())


def test_block_9_small_to_big(server, models, data_path, capsys):
    ns, out = run(9, models, data_path, capsys)
    nodes = ns["doc_node_list"]
    assert len(nodes) == 3 and all(n.node.group == "sentences" for n in nodes)
    assert all(n.parent.get_text().find(n.get_content()) >= 0 for n in nodes)
    assert ns["res"] == "回答：都有谁参加了2008年的奥运会？"
    sent = prompts(server)[-1]
    assert "".join(ns["parent_list"]) in sent


def test_block_10_llm_parser_groups(server, models, data_path, capsys):
    """A fragment: it uses OnlineChatModule/LLMParser/Document/Retriever without importing
    them; run with block 11's import line (and Retriever)."""
    preamble = "from fastrag import Document, LLMParser, Retriever\n"
    assert "LLMParser" not in blocks()[9].split("\n", 1)[0]
    ns, out = run(10, models, data_path, capsys, preamble=preamble)
    got = _printed_groups(out)
    assert list(got) == ["CoarseChunk", "summary", "keyword", "qapair"]
    assert got["summary"] == "摘要：亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO"
    # a QA pair's content is LazyLLM's "query:\n<question>\nanswer\n<answer>"
    assert got["qapair"] == (
        "query:\n亚硫酸盐是亚硫酸所成的盐讲的是什么？\nanswer\n亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO"
    )


def test_blocks_11_12_13_group_tree(server, models, data_path, capsys):
    """11 builds the group tree; 12 and 13 continue it (they use 11's ``docs``)."""
    ns, out = run([11, 12], models, data_path, capsys)
    assert out.startswith("CoarseChunk节点组：\n") and CHESS in out
    ns, out = run(13, models, data_path, capsys, ns=ns)
    assert out == "CoarseChunk节点组：\n " + CHESS + "\n"  # the block-summary node's parent
    summary = list(ns["docs"].group("block-summary"))
    assert {s.text for s in summary} >= {"摘要：" + CHESS.split("。")[0]}
    lens = list(ns["docs"].group("sentence-len"))  # a number: a node with metadata "value"
    assert lens and all(n.metadata["value"] == len(n.parent.text) for n in lens)


def test_block_14_two_groups_one_answer(server, models, data_path, capsys):
    ns, out = run(14, models, data_path, capsys)
    assert len(ns["doc_node_list1"]) == len(ns["doc_node_list2"]) == 3
    assert ns["doc_node_list2"][0].get_content() in SULFITE
    assert out == "系统答案： 回答：亚硫酸盐有什么作用？\n"


# -- embeddings, similarity -----------------------------------------------------------------------
def test_block_15_embedding_modules(server, models, data_path, capsys):
    """bge-m3 sparse (deploy_method(AutoDeploy, embed_type='sparse')) is swapped for a dense
    EMBED2: fastrag has no sparse embeddings."""
    _, out = run(15, models, data_path, capsys)
    assert out.count("embed:") == 3
    assert [r.body["model"] for r in requests(server, "/v1/embeddings")] == [
        "bge-large-zh-v1.5",
        "bge-large-zh-v1.5",
        "bge-m3",
    ]


def test_block_16_custom_online_embedding_module(monkeypatch, tmp_path):
    """A fragment: it uses ``lazyllm.config`` without importing lazyllm, and reads a setting
    its comment says to declare with ``lazyllm.config.add``; run with those two lines. The
    subclass then embeds through its own request and answer shapes over HTTP."""
    preamble = (
        "import fastrag as lazyllm\n"
        "lazyllm.config.add('new_platform_api_key', str, '', 'NEW_PLATFORM_API_KEY')\n"
    )
    monkeypatch.setenv("LAZYLLM_NEW_PLATFORM_API_KEY", "sk-platform")
    ns = {"__name__": "seed_block"}
    exec(compile(preamble + swap(blocks()[15]), "<seed 004 block 16>", "exec"), ns)
    with PlatformServer(dim=6) as srv:
        emb = ns["CustomOnlineEmbeddingModule"](embed_url=srv.url, embed_model_name="m-2")
        vec = emb("猴面包树")
        np.testing.assert_array_equal(vec, OpenAIServer.embedding("猴面包树", 6))
        assert srv.bodies == [{"input": ["猴面包树"], "model": "m-2"}]
        assert srv.auth == ["Bearer sk-platform"]


def test_blocks_17_18_cosine_and_bm25(server, models, data_path, capsys):
    ns, _ = run(17, models, data_path, capsys)
    assert ns["documents"].embed == {"default": models["EMBED"]}
    ns, out = run(18, models, data_path, capsys)
    assert len(ns["result1"]) == len(ns["result2"]) == 3
    assert ns["result2"][0].get_content() in out and "bm25召回结果：" in out
    assert any("2008" in r.get_content() for r in ns["result2"])


def test_blocks_19_20_21_several_embeddings(server, models, data_path, capsys):
    ns, _ = run(19, models, data_path, capsys)
    assert ns["doc"].embed == {"vec1": models["EMBED"], "vec2": models["EMBED"]}
    ns, out = run(20, models, data_path, capsys)
    assert len(ns["result1"]) == len(ns["result2"]) == 3
    models_used = {r.body["model"] for r in requests(server, "/v1/embeddings")}
    assert models_used == {"bge-large-zh-v1.5", "bge-m3"}
    ns, _ = run(21, models, data_path, capsys, ns=ns)  # continues block 20
    hits = ns["retriever"](query="都有谁参加了2008年的奥运会？")
    assert 1 <= len(hits) <= 6


def test_block_22_similarity_cut_off(server, models, data_path, capsys):
    ns, _ = run(22, models, data_path, capsys)
    assert len(ns["result1"]) == 6
    assert all(r.score >= 0.6 for r in ns["result2"])
    assert len(ns["result2"]) == sum(r.score >= 0.6 for r in ns["result1"])


# -- reranking ------------------------------------------------------------------------------------
def test_block_23_reranker_forms(server, models, data_path, capsys):
    """A fragment: it uses Reranker without importing it; run with that import."""
    ns, _ = run(23, models, data_path, capsys, preamble="from fastrag import Reranker\n")
    assert ns["online_rerank"] is ns["offline_rerank"] is models["RERANK"]
    query = "猴面包树有哪些功效？"
    hits = fr.Retriever(fr.Document(data_path), "CoarseChunk", "bm25_chinese", topk=5)(query)
    server.reset()
    out = ns["reranker"](hits, query=query)  # the last of the block's three rerankers
    want = sorted((h.get_content() for h in hits), key=lambda t: -server.rerank_score(query, t))
    assert [n.get_content() for n in out] == want[:3]
    assert len(requests(server, "/v1/rerank")) == 1


def test_block_24_rerank_to_joined_content(server, models, data_path, capsys):
    ns, out = run(24, models, data_path, capsys)
    assert len(ns["result1"]) == 3
    assert isinstance(ns["result2"], str) and ns["result2"] in out
    ranked = requests(server, "/v1/rerank")
    assert len(ranked) == 1 and ranked[0].body["query"] == "猴面包树有哪些功效？"
    assert ns["result2"] == "".join(
        sorted(
            ranked[0].body["documents"],
            key=lambda d: -server.rerank_score("猴面包树有哪些功效？", d),
        )
    )


def test_block_25_rerank_rag(server, models, data_path, capsys):
    ns, out = run(25, models, data_path, capsys)
    assert out == "Answer: 回答：2008年有哪些赛事？\n"


def test_block_27_web_module_serves_the_flow(models, data_path, capsys):
    """LazyLLM's web UI for block 26's ``ppl``, run as written (the table puts a free port in
    ``WEB_PORT``): its ``.wait()`` blocks, so it runs in a thread until the module is stopped."""
    pytest.importorskip("fastapi")
    ns, _ = run(26, models, data_path, capsys)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        ns["WEB_PORT"] = port = s.getsockname()[1]
    code = swap(blocks()[26])
    assert code.startswith("webpage = lazyllm.WebModule(ppl, port=WEB_PORT).start().wait()\n")
    failed: list[str] = []

    def serve() -> None:
        try:
            exec(compile(code, "<seed 004 block 27>", "exec"), ns)
        except BaseException:  # shown by the assertions below
            failed.append(traceback.format_exc())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not fr.WebModule.running() and not failed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not failed, failed[0]
    (webpage,) = fr.WebModule.running()
    assert webpage.flow is ns["ppl"] and webpage.url == f"http://127.0.0.1:{port}/"
    try:
        question = "2008年有哪些赛事？"
        r = httpx.post(
            webpage.url + "v1/chat/completions",
            json={"messages": [{"role": "user", "content": question}]},
            timeout=300,  # a cold numba cache compiles the BM25 kernels in this first search
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == ns["ppl"](question)
        assert ns["ppl"](question) == "回答：2008年有哪些赛事？"
        assert thread.is_alive()  # still in .wait()
    finally:
        webpage.stop()
    thread.join(15)
    assert not thread.is_alive() and not failed
    assert ns["webpage"] is webpage and fr.WebModule.running() == ()


@pytest.mark.parametrize(
    ("n", "name", "instead"),
    [
        (4, "OnlineChatModule", "fr.OpenAILike"),
        (17, "OnlineEmbeddingModule", "fr.OpenAIEmbedding"),
        (25, "TrainableModule", "fr.OpenAIRerank"),
    ],
)
def test_unswapped_model_classes_say_what_to_use(n, name, instead, data_path):
    """Only the import swapped (a user's first try): the model class's AttributeError names
    fastrag's counterpart."""
    code = blocks()[n - 1].replace("import lazyllm\n", "import fastrag as lazyllm\n")
    code = DATA_PATHS.sub("DATA_PATH", code)
    ns = {"__name__": "seed_block", "DATA_PATH": data_path}
    with pytest.raises(AttributeError, match=f"fastrag has no {name} .*{re.escape(instead)}"):
        exec(compile(code, f"<{n}>", "exec"), ns)


# -- appendix 1: the design of RAG --------------------------------------------------------------
def test_block_29_group_tree_pseudo_code(server, models, tmp_path, capsys):
    """Pseudo-code on undefined ``document``, ``summary_llm``, ``label_llm``: run with those.
    Its ``'。'.split(x)`` splits the separator by the text (the seed's slip), so each block node
    is the one string '。'."""
    (tmp_path / "a.txt").write_text("你好，我是LazyLLM。现在，我们开始吧。", encoding="utf-8")
    ns = {
        "__name__": "seed_block",
        "document": fr.Document(str(tmp_path)),
        "summary_llm": fr.LLMParser(models["LLM"], language="zh", task_type="summary"),
        "label_llm": fr.LLMParser(models["LLM"], language="zh", task_type="keywords"),
    }
    run(29, models, str(tmp_path), capsys, ns=ns)
    doc = ns["document"]
    assert [n.text for n in doc.group("block")] == ["。"]
    assert [n.text for n in doc.group("sentence")] == ["，"]
    assert [n.metadata["value"] for n in doc.group("count")] == [1]  # len("，")


# -- appendix 2: custom transforms ----------------------------------------------------------------
CLASSICS = {
    "daodejing.txt": "道可道，非常道。名可名，非常名。\n天之道，利而不害。圣人之道，为而不争。",
    "zhongyong.txt": "天命之谓性，率性之谓道，修道之谓教。\n诚者，天之道也。诚之者，人之道也。",
    "lunyu.txt": "学而时习之，不亦说乎？\n朝闻道，夕死可矣。",
}


@pytest.fixture
def rag_master(tmp_path, server):
    d = tmp_path / "rag_master"
    d.mkdir()
    for name, text in CLASSICS.items():
        (d / name).write_text(text, encoding="utf-8")
    return str(d)


def test_block_34_function_transform(models, rag_master, capsys):
    ns, _ = run(34, models, rag_master, capsys)
    assert ns["SentSplitter"]("a\nb") == ["a", "b"] and ns["SentSplitter"]("") == [""]


def test_blocks_35_36_37_38_function_transform_in_and_out_types(server, models, rag_master, capsys):
    ns, out = run(35, models, rag_master, capsys)
    hits = ns["ppl"]("何为天道")
    assert len(hits) == 3 and all(h.node.group == "sentences" for h in hits)
    assert {h.get_content() for h in hits} <= {
        line for text in CLASSICS.values() for line in text.split("\n")
    }
    # 36: SentSplitter prints its input's type; "其他代码不变" (35's code after its def) reruns
    rest = blocks()[34].split("    return [para for para in paragraphs]\n", 1)[1]
    ns, out = run(36, models, rag_master, capsys, ns=ns)
    exec(compile(swap(rest), "<35 rest>", "exec"), ns)
    out = capsys.readouterr().out
    assert out.count("text: <class 'str'>") == 3  # one per file
    # 37: trans_node=True hands the function a DocNode: the seed shows this error
    with pytest.raises(TransformError, match="'DocNode' object has no attribute 'split'"):
        run(37, models, rag_master, capsys, ns=ns)
    assert "text: <class 'fastrag" in capsys.readouterr().out
    # 38: str in, DocNode(content=...) out
    run(38, models, rag_master, capsys, ns=ns)
    exec(compile(swap(rest), "<35 rest>", "exec"), ns)
    out = capsys.readouterr().out
    assert out.count("text: <class 'str'>") == 3
    assert len(ns["ppl"]("何为天道")) == 3


def test_blocks_39_40_class_transform(server, models, rag_master, capsys):
    ns, _ = run([39, 40], models, rag_master, capsys)
    hits = ns["ppl"]("何为天道")
    # the seed's splitter is r"\n\n" (a backslash-n pair, not in the text): one node per file
    assert len(hits) == 3 and {h.get_content() for h in hits} == set(CLASSICS.values())
