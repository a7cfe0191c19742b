"""seeds/004: the LazyLLM tutorial "检索升级实践" (lecture 7), every code example adapted to
fastrag's names (lazyllm.Document/Retriever/Reranker/LLMParser -> fr.*, OnlineChatModule ->
fr.OpenAILike, OnlineEmbeddingModule -> fr.OpenAIEmbedding, online rerank -> fr.OpenAIRerank,
ChatPrompter(instruction, extra_keys=['context_str']) -> fr.ContextualQueryAugmenter,
lazyllm.pipeline/parallel -> fr.RAGPipeline) on the CMRC 2018 knowledge base
(fastrag.datasets) and the tutorial's own small examples. tests/query/test_seed_examples.py
covers the rewrite / sub-question / multi-step flows with ``{query}`` templates; these tests
use the tutorial's own prompts (no query placeholder) and cover the rest of the tutorial.
These are fastrag-shaped rewrites asserting exact prompts, orders and scores; the seed's own code
blocks run as written in test_lazyllm_seed_blocks.py and test_lazyllm_dataflow.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from openai_server import OpenAIServer
from seed_support import prompts, requests

import fastrag as fr
from fastrag.eval import ContextRelevance, LLMContextRecall, NonLLMContextRecall

SULFITE = (
    "亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO。绝大多数葡萄酒中都自然存在亚硫酸盐。"
    "而且有时也在葡萄酒中加入亚硫酸盐作防腐剂，防止变质和氧化。"
)
BAOBAB = (
    "猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲。"
    "现今中国大陆的云南、福建、广东等地，以及台湾皆有人工引种栽培。"
)

robot_prompt = "你是一个友好的 AI 问答助手，你需要根据给定的上下文和问题提供答案。\
                根据以下资料回答问题：\
                {context_str} \n"


def _answer_prompt(template: str, context: str, query: str) -> str:
    """What a LazyLLM instruction with ``{context_str}`` and no query placeholder becomes: the
    context filled in and the user's query on a line of its own after it."""
    return template.rstrip("\n").replace("{context_str}", context) + "\n" + query


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    """The tutorial's two .txt files (亚硫酸盐, 猴面包树)."""
    d = tmp_path_factory.mktemp("two_files")
    (d / "1.txt").write_text(SULFITE, encoding="utf-8")
    (d / "2.txt").write_text(BAOBAB, encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def kb_dir(cmrc_kb, tmp_path_factory):
    """CMRC's data_kb plus the tutorial's two paragraphs (as one more file)."""
    d = tmp_path_factory.mktemp("data_kb")
    for f in Path(cmrc_kb).iterdir():
        shutil.copy(f, d / f.name)
    (d / "tutorial.txt").write_text(SULFITE + "\n" + BAOBAB, encoding="utf-8")
    return str(d)


@pytest.fixture(scope="module")
def cmrc_doc(kb_dir):
    return fr.Document(kb_dir)


# -- 检索组件的评测指标 --
def test_evaluation_metrics(server, llm):
    data = [
        {
            "question": "非洲的猴面包树果实的长度约是多少厘米？",
            "answer": "非洲猴面包树的果实长约15至20厘米。",
            "context_retrieved": [
                "非洲猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲，它的果实长约15至20厘米。",
                "钙含量比菠菜高50％以上，含较高的抗氧化成分。",
            ],
            "context_reference": [
                "非洲猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲，它的果实长约15至20厘米。"
            ],
        }
    ]
    m_recall = NonLLMContextRecall()
    assert m_recall(data) == 1.0
    m_cr = ContextRelevance()
    assert m_cr(data) == 0.5
    server.reply = json.dumps(
        [{"statement": "非洲猴面包树的果实长约15至20厘米。", "reason": "上下文中有", "score": 1}],
        ensure_ascii=False,
    )
    m_lcr = LLMContextRecall(llm)
    assert m_lcr(data) == 1.0
    p = prompts(server)
    assert len(p) == 1 and "非洲猴面包树的果实长约15至20厘米。" in p[0] and "钙含量" in p[0]


# -- 1.1 查询扩写 --
rewrite_prompt = "你是一个查询改写写助手，将用户的查询改写的更加清晰。\
                注意，你不需要对问题进行回答，只需要对原始问题进行改写。\
                下面是一个简单的例子：\
                输入：RAG\
                输出：为我介绍下RAG。\
                    \
                用户输入为："


def _tutorial_model(messages):
    p = messages[-1]["content"]
    if p.startswith("你是一个查询改写写助手"):
        return "为我介绍下" + p.rsplit("\n", 1)[1]
    if p.startswith("你是一个查询重写助手"):
        return (
            "1. 健康饮食的基本原则是什么？\n2. 如何合理安排一日三餐？\n"
            "3. 健康饮食中应该包含哪些食物类别及其比例？\n4. 多余的第四条？"
        )
    return "回答"


def test_query_rewrite_then_retrieve_then_answer(server, llm, cmrc_doc):
    server.reply = _tutorial_model
    retriever = fr.Retriever(
        doc=cmrc_doc, group_name="CoarseChunk", similarity="bm25_chinese", topk=3
    )
    robot = fr.ContextualQueryAugmenter(
        prompt_template=robot_prompt,
        document_formatter=lambda nodes: "".join(node.get_content() for node in nodes),
    )
    query = "MIT OpenCourseWare是啥？"
    query_rewriter = fr.RewriteQueryTransformer(llm, prompt_template=rewrite_prompt)
    query = query_rewriter(query).text
    assert query == "为我介绍下MIT OpenCourseWare是啥？"
    doc_node_list = retriever(query=query)
    assert len(doc_node_list) == 3
    res = llm.complete(robot.augment(query, doc_node_list).text)
    assert res == "回答"
    assert prompts(server) == [
        rewrite_prompt + "\nMIT OpenCourseWare是啥？",
        _answer_prompt(robot_prompt, "".join(n.get_content() for n in doc_node_list), query),
    ]


# -- 1.2 子问题查询 --
subq_prompt = "你是一个查询重写助手，如果用户查询较为抽象或笼统，将其分解为多个角度的具体问题。\
          注意，你不需要进行回答，只需要根据问题的字面进行子问题拆分，输出不要超过3条.\
          下面是一个简单的例子：\
          输入：RAG是什么？\
          输出：RAG的定义是什么？\
               RAG是什么领域内的名词？\
               RAG有什么特点？"


def test_sub_question_decomposition(server, llm):
    server.reply = _tutorial_model
    query_rewriter = fr.SubQuestionExpander(llm, max_questions=3, prompt_template=subq_prompt)
    subs = query_rewriter("有哪些健康饮食的建议")
    assert [q.text for q in subs] == [
        "健康饮食的基本原则是什么？",
        "如何合理安排一日三餐？",
        "健康饮食中应该包含哪些食物类别及其比例？",
    ]
    assert prompts(server) == [subq_prompt + "\n有哪些健康饮食的建议"]


def test_sub_question_rag_retrieves_each_and_answers_the_query(server, llm, cmrc_doc):
    server.reply = _tutorial_model
    rewrite = "你是一个查询重写助手，将用户查询分解为多个角度的具体问题。\
          注意，你不需要对问题进行回答，只需要根据问题的字面意思进行子问题拆分，输出不要超过 3 条.\
          下面是一个简单的例子：\
          输入：RAG是什么？\
          输出：RAG的定义是什么？\
               RAG是什么领域内的名词？\
               RAG有什么特点？\
               \
          用户输入为："
    retriever = fr.Retriever(
        doc=cmrc_doc, group_name="CoarseChunk", similarity="bm25_chinese", topk=3
    )
    ppl = fr.RAGPipeline(
        retriever,
        query_expander=fr.SubQuestionExpander(llm, max_questions=3, prompt_template=rewrite),
        augmenter=fr.ContextualQueryAugmenter(prompt_template=robot_prompt),
        llm=llm,
    )
    query = "MIT OpenCourseWare是啥？"
    res = ppl.query(query)
    subs = [
        "健康饮食的基本原则是什么？",
        "如何合理安排一日三餐？",
        "健康饮食中应该包含哪些食物类别及其比例？",
    ]
    assert res.metadata["trace"]["expanded"] == subs
    retrieved_docs: dict = {}
    for q in subs:
        for node in retriever(q):
            retrieved_docs.setdefault(node.id, node)
    assert [n.id for n in res.source_nodes] == list(retrieved_docs)
    assert prompts(server)[-1] == _answer_prompt(
        robot_prompt, "\n".join(n.get_content() for n in retrieved_docs.values()), query
    )
    assert res.response == "回答"


# -- 1.3 多步骤查询 --
def test_multi_step_query_with_the_tutorial_prompts(server, llm, cmrc_doc):
    rewrite = "你是一个查询改写助手，将用户的查询改写的更加清晰。\
          注意，你不需要对问题进行回答，只需要对原问题进行改写.\
          下面是一个简单的例子：\
          输入：RAG\
          输出：为我介绍下RAG\
          用户输入为："
    judge_prompt = (
        "你是一个判别助手，用于判断某个回答能否解决对应的问题。"
        "如果回答可以解决问题，则输出True，否则输出False。 "
        "            注意，你的输出只能是True或者False。不要带有任何其他输出。 "
        "            当前回答为{context_str} \n"
    )
    verdicts = iter(["False", "True"])

    def model(messages):
        p = messages[-1]["content"]
        if p.startswith("你是一个判别助手"):
            return next(verdicts)
        if p.startswith("你是一个查询改写助手"):
            return "为我介绍下MIT OpenCourseWare"
        return "草稿"

    server.reply = model
    retriever = fr.Retriever(
        doc=cmrc_doc, group_name="CoarseChunk", similarity="bm25_chinese", topk=3
    )
    multi = fr.MultiStepQuery(
        llm,
        retriever,
        prompt_template=rewrite,
        judge_template=judge_prompt,
        answer_template=robot_prompt,
        max_steps=5,
    )
    res = multi.query("MIT OpenCourseWare是啥？")
    assert [s["judged"] for s in res.metadata["steps"]] == [False, True]  # "False" is not True
    assert res.response == "草稿"
    judge = [p for p in prompts(server) if p.startswith("你是一个判别助手")]
    assert judge[0] == _answer_prompt(judge_prompt, "草稿", "MIT OpenCourseWare是啥？")


# -- 2.1 Node Group --
def test_node_group_parse_and_find(two_files):
    document = fr.Document(str(two_files))
    document.create_node_group(name="block", transform=lambda t: t.split("。"))
    origin = list(document.group("root"))
    block = list(document.group("block"))
    assert [n.text for n in origin] == [SULFITE, BAOBAB]
    assert [n.text for n in block] == [
        "亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO",
        "绝大多数葡萄酒中都自然存在亚硫酸盐",
        "而且有时也在葡萄酒中加入亚硫酸盐作防腐剂，防止变质和氧化",
        "猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲",
        "现今中国大陆的云南、福建、广东等地，以及台湾皆有人工引种栽培",
    ]
    assert [b.parent.id for b in block] == [origin[0].id] * 3 + [origin[1].id] * 2
    assert document.find("root")([block[1], block[3]]) == [origin[0], origin[1]]
    assert document.find("block")([origin[1]]) == [block[3], block[4]]


def test_builtin_sentence_splitter_and_preset_groups(cmrc_doc):
    docs = cmrc_doc
    docs.create_node_group(
        name="512Chunk", transform=fr.SentenceSplitter, chunk_size=512, chunk_overlap=64
    )
    group_names = ["CoarseChunk", "MediumChunk", "FineChunk", "512Chunk"]
    sizes = {"CoarseChunk": 1024, "MediumChunk": 256, "FineChunk": 128, "512Chunk": 512}
    for group_name in group_names:
        retriever = fr.Retriever(docs, group_name=group_name, similarity="bm25_chinese", topk=1)
        node = retriever("亚硫酸盐有什么作用？")
        assert len(node) == 1 and node[0].node.group == group_name
        assert "亚硫酸盐" in node[0].get_content()
        assert fr.count_tokens(node[0].get_content()) <= sizes[group_name]
    n_512 = len(list(docs.group("512Chunk")))
    assert len(list(docs.group("CoarseChunk"))) < n_512 < len(list(docs.group("MediumChunk")))


def split_by_sentence1(node: str, **kwargs) -> list[str]:
    return node.split("。")


def split_by_sentence2(node: fr.Node, **kwargs) -> list[fr.Node]:
    content = node.get_text()
    nodes = []
    for text in content.split("。"):
        nodes.append(fr.Node(text=text))
    return nodes


class SymbolSplitter:
    def __init__(self, splitter="。", trans_node=False):
        self._splitter = splitter
        self._trans_node = trans_node

    def __call__(self, node):
        if self._trans_node:
            return node.get_text().split(self._splitter)
        return node.split(self._splitter)


def test_custom_transform_forms(cmrc_doc, kb_dir):
    docs = fr.Document(kb_dir)
    docs.create_node_group(name="block1", transform=split_by_sentence1)
    docs.create_node_group(name="block2", transform=split_by_sentence2, trans_node=True)
    docs.create_node_group(name="block3", transform=SymbolSplitter())
    docs.create_node_group(
        name="block4", transform=SymbolSplitter(trans_node=True), trans_node=True
    )
    docs.create_node_group(name="block5", transform=SymbolSplitter(splitter="\n"))
    docs.create_node_group(name="block6", transform=lambda b: b.split("。"))
    got = {}
    for i in range(6):
        group_name = f"block{i + 1}"
        retriever = fr.Retriever(docs, group_name=group_name, similarity="bm25_chinese", topk=1)
        node = retriever("亚硫酸盐有什么作用？")
        got[group_name] = node[0].get_content()
    sentence = got["block1"]
    assert "亚硫酸盐" in sentence and "。" not in sentence
    assert got["block2"] == got["block3"] == got["block4"] == got["block6"] == sentence
    assert got["block5"] == SULFITE and sentence in got["block5"]


def test_small_to_big_retrieval_returns_parents(server, llm, cmrc_doc, kb_dir):
    server.reply = "系统答案"
    docs = fr.Document(kb_dir)
    docs.create_node_group(
        name="sentences",
        transform=(lambda d: d.split("\n") if d else ""),
        parent=fr.Document.CoarseChunk,
    )
    retriever = fr.Retriever(docs, group_name="sentences", similarity="bm25_chinese", topk=3)
    query = "都有谁参加了2008年的奥运会？"
    doc_node_list = retriever(query=query)
    assert len(doc_node_list) == 3
    parent_list = [node.parent.get_text() for node in doc_node_list]
    for node, parent in zip(doc_node_list, parent_list, strict=True):
        assert node.parent.group == "CoarseChunk" and node.get_content() in parent
    assert any("2008" in p and "奥运" in p for p in parent_list)
    robot = fr.ContextualQueryAugmenter(prompt_template=robot_prompt)
    res = llm.complete(robot.augment(query, [fr.Node(text="".join(parent_list))]).text)
    assert res == "系统答案"
    assert prompts(server) == [_answer_prompt(robot_prompt, "".join(parent_list), query)]


# -- LLMParser groups --
def _parser_model(messages):
    p = messages[-1]["content"]
    text = p.split("文本：\n", 1)[1].rsplit("\n\n", 1)[0] if "文本：\n" in p else ""
    first = text.split("。")[0]
    if p.startswith("请用一段话总结"):
        return "摘要：" + first
    if p.startswith("请从下面的文本中提取"):
        return "亚硫酸盐, 葡萄酒, 防腐剂" if "亚硫酸盐" in text else "猴面包树, 非洲"
    if p.startswith("请根据下面的文本生成若干问答对"):
        if "亚硫酸盐" in text:
            return "问：亚硫酸盐有什么作用？\n答：作防腐剂，防止变质和氧化。"
        return "问：猴面包树原产于哪里？\n答：热带非洲。"
    return "回答"


def test_llm_parser_summary_keyword_qa_groups(server, llm, two_files):
    server.reply = _parser_model
    summary_llm = fr.LLMParser(llm, language="zh", task_type="summary")
    keyword_llm = fr.LLMParser(llm, language="zh", task_type="keywords")
    qapair_llm = fr.LLMParser(llm, language="zh", task_type="qa")
    docs = fr.Document(str(two_files))
    docs.create_node_group(name="summary", transform=lambda d: summary_llm(d), trans_node=True)
    docs.create_node_group(name="keyword", transform=lambda d: keyword_llm(d), trans_node=True)
    docs.create_node_group(name="qapair", transform=lambda d: qapair_llm(d), trans_node=True)
    group_names = ["CoarseChunk", "summary", "keyword", "qapair"]
    got = {}
    for group_name in group_names:
        retriever = fr.Retriever(docs, group_name=group_name, similarity="bm25_chinese", topk=1)
        node = retriever("亚硫酸盐有什么作用？")
        got[group_name] = node[0]
    assert got["CoarseChunk"].get_content() == SULFITE
    assert got["summary"].get_content() == "摘要：亚硫酸盐是亚硫酸所成的盐，含有亚硫酸根离子SO"
    assert got["keyword"].get_content() == "亚硫酸盐"
    # LazyLLM's QA node: get_content() shows the question and its answer
    assert (
        got["qapair"].get_content()
        == "query:\n亚硫酸盐有什么作用？\nanswer\n作防腐剂，防止变质和氧化。"
    )
    assert got["qapair"].text == "亚硫酸盐有什么作用？"
    assert got["qapair"].metadata["answer"] == "作防腐剂，防止变质和氧化。"
    assert [n.text for n in docs.group("keyword")] == [
        "亚硫酸盐",
        "葡萄酒",
        "防腐剂",
        "猴面包树",
        "非洲",
    ]
    assert len(prompts(server)) == 6  # one call per document and group
    assert got["summary"].parent.text == SULFITE


def test_complex_node_group_tree(server, llm, two_files):
    server.reply = _parser_model
    summary_llm = fr.LLMParser(llm, language="zh", task_type="summary")
    keyword_llm = fr.LLMParser(llm, language="zh", task_type="keywords")
    qapair_llm = fr.LLMParser(llm, language="zh", task_type="qa")
    docs = fr.Document(str(two_files))
    docs.create_node_group(name="block", transform=lambda d: d.split("\n"))
    docs.create_node_group(name="qapair", transform=lambda d: qapair_llm(d), trans_node=True)
    docs.create_node_group(name="doc-summary", transform=lambda d: summary_llm(d), trans_node=True)
    docs.create_node_group(
        name="keyword", transform=lambda b: keyword_llm(b), parent="block", trans_node=True
    )
    docs.create_node_group(name="sentence", transform=lambda d: d.split("。"), parent="block")
    docs.create_node_group(
        name="block-summary", transform=lambda b: summary_llm(b), parent="block", trans_node=True
    )
    assert {
        g: docs.parent_of(g)
        for g in ("block", "qapair", "doc-summary", "keyword", "sentence", "block-summary")
    } == {
        "block": "root",
        "qapair": "root",
        "doc-summary": "root",
        "keyword": "block",
        "sentence": "block",
        "block-summary": "block",
    }
    retriever = fr.Retriever(docs, group_name="block-summary", similarity="bm25_chinese", topk=1)
    node = retriever("亚硫酸盐的概况")
    assert node[0].parent.get_content() == SULFITE and node[0].parent.group == "block"
    assert len(list(docs.group("sentence"))) == 5


def test_sentence_len_group(two_files):
    docs = fr.Document(str(two_files))
    docs.create_node_group(name="sentence", transform=lambda d: d.split("。"))
    docs.create_node_group(name="sentence-len", transform=lambda s: len(s), parent="sentence")
    # the node's content is the number (a metadata-only node: metadata["value"])
    lens = [n.metadata["value"] for n in docs.group("sentence-len")]
    sentences = list(docs.group("sentence"))
    assert lens == [len(s.text) for s in sentences]
    assert [n.parent.id for n in docs.group("sentence-len")] == [s.id for s in sentences]


def test_rag_with_two_node_groups(server, llm, kb_dir):
    server.reply = "系统答案"
    documents = fr.Document(kb_dir)
    documents.create_node_group(name="sentences", transform=lambda b: b.split("。"))
    documents.create_node_group(name="block", transform=lambda b: b.split("\n"))
    retriever1 = fr.Retriever(doc=documents, group_name="block", similarity="bm25_chinese", topk=3)
    retriever2 = fr.Retriever(
        doc=documents, group_name="sentences", similarity="bm25_chinese", topk=3
    )
    robot = fr.RAGPipeline(
        [retriever1, retriever2],
        joiner=fr.ConcatenationDocumentJoiner(),
        augmenter=fr.ContextualQueryAugmenter(
            prompt_template=robot_prompt,
            document_formatter=lambda nodes: "".join(n.get_content() for n in nodes),
        ),
        llm=llm,
    )
    query = "亚硫酸盐有什么作用？"
    doc_node_list = retriever1(query=query) + retriever2(query=query)
    res = robot.query(query)
    assert res.response == "系统答案"
    assert [n.id for n in res.source_nodes] == [n.id for n in doc_node_list]
    assert prompts(server) == [
        _answer_prompt(robot_prompt, "".join(n.get_content() for n in doc_node_list), query)
    ]
    assert res.source_nodes[0].get_content() == SULFITE


# -- 2.2 Embedding / Similarity --
@pytest.fixture
def block_docs(server, two_files):
    server.dim = 64
    online_embed = fr.OpenAIEmbedding(server.url, "embedding-2")
    docs = fr.Document(str(two_files), embed=online_embed)
    docs.create_node_group(name="block", transform=(lambda d: d.split("。")))
    return docs


def test_online_embedding_module(server):
    server.dim = 16
    online_embed = fr.OpenAIEmbedding(server.url, "text-embedding-ada-002")
    vec = online_embed("hello world")
    assert np.asarray(vec).reshape(-1).shape == (16,)
    assert np.allclose(
        np.asarray(vec).reshape(-1), OpenAIServer.embedding("hello world", 16), atol=1e-6
    )


def test_embedding_only_when_a_dense_similarity_needs_it(server, block_docs):
    retriever2 = fr.Retriever(block_docs, group_name="block", similarity="bm25_chinese", topk=3)
    result2 = retriever2(query="亚硫酸盐有什么作用？")
    assert len(result2) == 3 and requests(server, "/v1/embeddings") == []
    retriever1 = fr.Retriever(block_docs, group_name="block", similarity="cosine", topk=3)
    query = "绝大多数葡萄酒中都自然存在亚硫酸盐"
    result1 = retriever1(query=query)
    assert len(requests(server, "/v1/embeddings")) >= 2  # the group, then the query
    assert result1[0].get_content() == query and result1[0].score == pytest.approx(1.0, abs=1e-5)


def test_multiple_embeddings_and_embed_keys(server, two_files):
    vec1 = fr.OpenAIEmbedding(server.url, "bge-m3", dimensions=8)
    vec2 = fr.OpenAIEmbedding(server.url, "bge-large-zh-v1.5", dimensions=64)
    docs = fr.Document(str(two_files), embed={"vec1": vec1, "vec2": vec2})
    docs.create_node_group(name="block", transform=(lambda d: d.split("。")))
    texts = [n.text for n in docs.group("block")]
    query = "都有谁参加了2008年的奥运会？"

    def top3(dim):
        q = OpenAIServer.embedding(query, dim)
        scores = [float(q @ OpenAIServer.embedding(t, dim)) for t in texts]
        return [texts[i] for i in np.argsort(-np.asarray(scores), kind="stable")[:3]]

    retriever1 = fr.Retriever(
        docs, group_name="block", embed_keys=["vec1"], similarity="cosine", topk=3
    )
    retriever2 = fr.Retriever(
        docs, group_name="block", embed_keys=["vec2"], similarity="cosine", topk=3
    )
    assert [n.text for n in retriever1(query=query)] == top3(8)
    assert [n.text for n in retriever2(query=query)] == top3(64)
    # both keys: topk of each, de-duplicated (not topk overall)
    retriever = fr.Retriever(
        docs, group_name="block", embed_keys=["vec1", "vec2"], similarity="cosine", topk=3
    )
    assert {n.text for n in retriever(query)} == set(top3(8)) | set(top3(64))


def test_similarity_cut_off(server, block_docs):
    retriever1 = fr.Retriever(block_docs, group_name="block", similarity="cosine", topk=6)
    retriever2 = fr.Retriever(
        block_docs, group_name="block", similarity="cosine", similarity_cut_off=0.6, topk=6
    )
    query = "猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲"
    result1 = retriever1(query=query)
    result2 = retriever2(query=query)
    assert len(result1) == 5  # every block (fewer than topk)
    assert [r.get_content() for r in result2] == [query]
    assert all(r.score >= 0.6 for r in result2)


# -- 3. Reranker --
def test_reranker_orders_by_the_rerank_model(server, block_docs):
    online_rerank = fr.OpenAIRerank(server.url, "bge-reranker-large")
    retriever = fr.Retriever(block_docs, group_name="block", similarity="cosine", topk=3)
    query = "猴面包树有哪些功效？"
    result1 = retriever(query=query)
    reranker = fr.Reranker("ModuleReranker", model=online_rerank, topk=3)
    result2 = reranker(result1, query=query)
    want = sorted(
        (n.get_content() for n in result1), key=lambda t: -OpenAIServer.rerank_score(query, t)
    )
    assert [n.get_content() for n in result2] == want
    assert len(requests(server, "/v1/rerank")) == 1
    joined = fr.Reranker(
        "ModuleReranker", model=online_rerank, topk=3, output_format="content", join=True
    )(result1, query=query)
    assert joined == "".join(want)
    listed = fr.Reranker("ModuleReranker", model=online_rerank, topk=3, output_format="content")(
        result1, query=query
    )
    assert listed == want


def test_reranker_dict_output_has_content_embedding_metadata(server, block_docs):
    online_rerank = fr.OpenAIRerank(server.url, "bge-reranker-large")
    retriever = fr.Retriever(block_docs, group_name="block", similarity="cosine", topk=3)
    result1 = retriever(query="猴面包树有哪些功效？")
    out = fr.Reranker("ModuleReranker", model=online_rerank, topk=3, output_format="dict")(
        result1, query="猴面包树有哪些功效？"
    )
    assert len(out) == 3
    assert all({"content", "embedding", "metadata"} <= set(d) for d in out)


# -- 综合所有优化的 RAG 实现 --
@pytest.fixture(scope="module")
def embedded_kb(kb_dir):
    """The data_kb with an online embedding (its own test server, kept for the module)."""
    srv = OpenAIServer(dim=32).start()
    docs = fr.Document(
        kb_dir,
        embed=fr.OpenAIEmbedding(srv.url, "bge-large-zh-v1.5", batch_size=256, max_concurrency=4),
    )
    docs.create_node_group(name="block", transform=(lambda d: d.split("\n")))
    yield docs, srv
    srv.stop()


def test_multi_path_rag_with_rerank(server, llm, embedded_kb):
    docs, _ = embedded_kb
    server.reply = "2008年有很多重要的赛事"
    offline_rerank = fr.OpenAIRerank(server.url, "bge-reranker-large")
    retriever1 = fr.Retriever(docs, group_name="CoarseChunk", similarity="cosine", topk=3)
    retriever2 = fr.Retriever(docs, group_name="block", similarity="bm25_chinese", topk=3)
    reranker = fr.Reranker("ModuleReranker", model=offline_rerank, topk=3)
    prompt = "你是一个友好的 AI 问答助手，你需要根据给定的上下文和问题提供答案。\
          根据以下资料回答问题：\
          {context_str} \n "
    query = "2008年有哪些赛事？"
    result1 = retriever1(query=query)
    result2 = retriever2(query=query)
    result = reranker(result1 + result2, query=query)
    assert len(result) == 3
    scores = [OpenAIServer.rerank_score(query, n.get_content()) for n in result1 + result2]
    assert [OpenAIServer.rerank_score(query, n.get_content()) for n in result] == sorted(
        scores, reverse=True
    )[:3]
    # the same flow as one pipeline: both retrievers, one rerank, the prompt with the context
    server.reset()
    ppl = fr.RAGPipeline(
        [retriever1, retriever2],
        joiner=fr.ConcatenationDocumentJoiner(),
        reranker=reranker,
        augmenter=fr.ContextualQueryAugmenter(
            prompt_template=prompt,
            document_formatter=lambda nodes: "".join(n.get_content() for n in nodes),
        ),
        llm=llm,
    )
    res = ppl.query(query)
    assert [n.id for n in res.source_nodes] == [n.id for n in result]
    assert res.response == "2008年有很多重要的赛事"
    assert len(requests(server, "/v1/rerank")) == 1
    assert prompts(server) == [
        _answer_prompt(prompt, "".join(n.get_content() for n in result), query)
    ]


def test_dataflow_pipeline_instruction_without_context_placeholder(server, llm, embedded_kb):
    # ChatPrompter(instruction=prompt, extra_keys=['context_str']) with an instruction that
    # has no {context_str}: the context and the query still reach the model
    docs, _ = embedded_kb
    server.reply = "答"
    prompt = "你是一个知识问答助手，请通过给定的文档回答用户问题。"
    ppl = fr.RAGPipeline(
        [
            fr.Retriever(doc=docs, group_name="block", similarity="bm25_chinese", topk=3),
            fr.Retriever(doc=docs, group_name="block", similarity="cosine", topk=3),
        ],
        joiner=fr.ConcatenationDocumentJoiner(),
        reranker=fr.Reranker(
            name="ModuleReranker", model=fr.OpenAIRerank(server.url, "rerank"), topk=3
        ),
        augmenter=fr.ContextualQueryAugmenter(
            prompt_template=prompt,
            document_formatter=lambda nodes: "".join(n.get_content() for n in nodes),
        ),
        llm=llm,
    )
    query = "亚硫酸盐有什么作用？"
    res = ppl.query(query)
    p = prompts(server)[-1]
    assert p.startswith(prompt) and query in p
    assert all(n.get_content() in p for n in res.source_nodes)


def test_qa_pair_pipeline(server, llm, embedded_kb, kb_dir):
    _, emb_server = embedded_kb
    rewriter_prompt = "你是一个查询重写助手，负责给用户查询进行模板切换。\
          注意，你不需要进行回答，只需要对问题进行重写，使更容易进行检索\
          下面是一个简单的例子：\
          输入：RAG是啥？\
          输出：RAG的定义是什么？"
    rag_prompt = "你是一个友好的 AI 问答助手，你需要根据给定的上下文和问题提供答案。\
                根据以下资料回答问题：\
                {context_str} \n "

    def model(messages):
        p = messages[-1]["content"]
        if p.startswith("你是一个查询重写助手"):
            return "亚硫酸盐的作用是什么？"
        if p.startswith("请根据下面的文本生成若干问答对"):
            if "亚硫酸盐" in p:
                return "问：亚硫酸盐的作用是什么？\n答：QA对答案：葡萄酒的防腐剂。"
            return "问：" + p.split("文本：\n", 1)[1][:12] + "是什么？\n答：见原文。"
        return "回答"

    server.reply = model
    qa_parser = fr.LLMParser(llm, language="zh", task_type="qa")
    docs = fr.Document(
        kb_dir, embed=fr.OpenAIEmbedding(emb_server.url, "bge-large-zh-v1.5", batch_size=256)
    )
    docs.create_node_group(name="block", transform=(lambda d: d.split("\n")))
    docs.create_node_group(name="qapair", transform=qa_parser)
    offline_rerank = fr.OpenAIRerank(server.url, "bge-reranker-large")

    def retrieve_and_rerank():
        return fr.RAGPipeline(
            [
                fr.Retriever(doc=docs, group_name="CoarseChunk", similarity="cosine", topk=3),
                fr.Retriever(doc=docs, group_name="block", similarity="bm25_chinese", topk=3),
            ],
            joiner=fr.ConcatenationDocumentJoiner(),
            reranker=fr.Reranker("ModuleReranker", model=offline_rerank, topk=3),
        )

    ppl = fr.RAGPipeline(
        [
            retrieve_and_rerank().retrieve,
            fr.Retriever(doc=docs, group_name="qapair", similarity="cosine", topk=3),
        ],
        query_transformers=[fr.RewriteQueryTransformer(llm, prompt_template=rewriter_prompt)],
        joiner=fr.ConcatenationDocumentJoiner(),
        augmenter=fr.ContextualQueryAugmenter(
            prompt_template=rag_prompt,
            document_formatter=lambda nodes: "\n".join(n.get_content() for n in nodes),
        ),
        answer_query="transformed",
        llm=llm,
    )
    res = ppl.query("亚硫酸盐的作用是什么？")
    assert res.response == "回答"
    assert len(res.source_nodes) == 6
    qa_hits = [n for n in res.source_nodes if n.node.group == "qapair"]
    qa = "query:\n亚硫酸盐的作用是什么？\nanswer\nQA对答案：葡萄酒的防腐剂。"
    assert [n.get_content() for n in qa_hits][0] == qa
    # the QA pair's question and answer reach the model, as LazyLLM's formatter sends them
    assert qa_hits[0].metadata["answer"] == "QA对答案：葡萄酒的防腐剂。"
    assert qa in prompts(server)[-1]


# -- 附录1 LazyLLM中RAG的设计 --
APPENDIX = [
    "你好，我是由商汤开发的人工智能机器人，我叫LazyLLM。我的使命是协助您，用最低的成本，"
    "构建最强大的大模型应用。现在，我们开始吧。",
    "parallel的所有组件共享输入，并将结果合并输出。 parallel 的定义方法和 pipeline 类似，"
    "也可以直接在定义 parallel 时初始化其元素，或在with块中初始化其元素。",
]


@pytest.fixture
def appendix_doc():
    document = fr.Document.from_texts(APPENDIX)
    document.create_node_group("block", lambda x: x.split("。"))
    document.create_node_group("sentence", lambda x: x.split("，"), parent="block")
    return document


def test_appendix_relation_tree_and_find(appendix_doc):
    document = appendix_doc
    block = list(document.group("block"))
    assert [b.text.strip() for b in block] == [
        "你好，我是由商汤开发的人工智能机器人，我叫LazyLLM",
        "我的使命是协助您，用最低的成本，构建最强大的大模型应用",
        "现在，我们开始吧",
        "parallel的所有组件共享输入，并将结果合并输出",
        "parallel 的定义方法和 pipeline 类似，也可以直接在定义 parallel 时初始化其元素，"
        "或在with块中初始化其元素",
    ]
    sentence = list(document.group("sentence"))
    assert len(sentence) == 13
    found = document.find("sentence")([block[1], block[3]])
    assert [s.text.strip() for s in found] == [
        "我的使命是协助您",
        "用最低的成本",
        "构建最强大的大模型应用",
        "parallel的所有组件共享输入",
        "并将结果合并输出",
    ]
    origin = list(document.group("root"))
    assert document.find("root")([block[1], block[3]]) == [origin[0], origin[1]]
    # Retriever(documents, 'Sentence', similarity='chinese_bm25', index='default', topk=6)
    ret = fr.Retriever(document, "sentence", similarity="chinese_bm25", index="default", topk=6)
    hits = ret("parallel的定义方法")
    assert 0 < len(hits) <= 6 and all(h.node.group == "sentence" for h in hits)
    assert hits[0].text.strip() == "parallel 的定义方法和 pipeline 类似"


def test_appendix_map_index_ignores_similarity_and_topk():
    document = fr.Document.from_texts(["重复的句子", "另一个", "重复的句子"])
    ret = fr.Retriever(document, "root", similarity="bm25", index="map", topk=1)
    hits = ret("重复的句子")
    assert [h.text for h in hits] == ["重复的句子", "重复的句子"]


def test_appendix_register_similarity_on_text_or_embedding(server):
    @fr.register_similarity(mode="text", batch=False)
    def seed_char_overlap(query: str, text: str, **kw) -> float:
        return float(len(set(query) & set(text)))

    @fr.register_similarity(mode="embedding", batch=False)
    def seed_neg_l2(query_vec, node_vec, **kw) -> float:
        return -float(np.linalg.norm(np.asarray(query_vec) - np.asarray(node_vec)))

    server.dim = 16
    doc = fr.Document.from_texts(APPENDIX, embed=fr.OpenAIEmbedding(server.url, "e"))
    hits = fr.Retriever(doc, "root", "seed_char_overlap", topk=1)("parallel pipeline")
    assert hits[0].text == APPENDIX[1]
    hits = fr.Retriever(doc, "root", "seed_neg_l2", topk=1)(APPENDIX[0])
    assert hits[0].text == APPENDIX[0] and hits[0].score == pytest.approx(0.0, abs=1e-5)


def test_appendix_doc_node_attributes(server, tmp_path):
    (tmp_path / "a.txt").write_text(APPENDIX[0], encoding="utf-8")
    server.dim = 8
    document = fr.Document(
        str(tmp_path), embed=fr.OpenAIEmbedding(server.url, "e"), global_metadata={"kb": "lazyllm"}
    )
    document.create_node_group("block", lambda x: x.split("。"))
    fr.Retriever(document, "block", "cosine", topk=1)("现在")
    node = list(document.group("block"))[1]
    assert node.text == "我的使命是协助您，用最低的成本，构建最强大的大模型应用"
    assert len(node.embedding["default"]) == 8
    assert node.parent.text == APPENDIX[0] and node.root_node.text == APPENDIX[0]
    assert [c.text for c in node.parent.children["block"]][1] == node.text
    assert node.metadata["file_name"] == "a.txt"
    assert node.doc_path == str(tmp_path / "a.txt")
    assert node.global_metadata == {"kb": "lazyllm"}


# -- 附录2 自定义 Transform --
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
    server.dim = 32
    return d


def test_function_transform_receives_str(server, rag_master):
    seen = []

    def SentSplitter(text: str, splitter: str = "\n"):
        seen.append(type(text))
        if text == "":
            return [""]
        paragraphs = text.split(splitter)
        return [para for para in paragraphs]

    documents = fr.Document(str(rag_master), embed=fr.OpenAIEmbedding(server.url, "embedding-2"))
    documents.create_node_group(name="sentences", transform=SentSplitter)
    ppl = fr.Retriever(documents, group_name="sentences", similarity="cosine", topk=3)
    out = ppl("何为天道")
    assert len(out) == 3 and all(isinstance(n, fr.NodeWithScore) for n in out)
    assert seen == [str, str, str]
    assert len(list(documents.group("sentences"))) == 6


def test_function_transform_with_trans_node_gets_a_doc_node(server, rag_master):
    def SentSplitter(text: str, splitter: str = "\n"):
        if text == "":
            return [""]
        return text.split(splitter)

    documents = fr.Document(str(rag_master), embed=fr.OpenAIEmbedding(server.url, "embedding-2"))
    documents.create_node_group(name="sentences", transform=SentSplitter, trans_node=True)
    with pytest.raises(Exception, match="'DocNode' object has no attribute 'split'"):
        ppl = fr.Retriever(documents, group_name="sentences", similarity="cosine", topk=3)
        ppl("何为天道")


def test_function_transform_returning_doc_nodes_with_content(server, rag_master):
    def SentSplitter(text: str, splitter: str = "\n"):
        if text == "":
            return [""]
        paragraphs = text.split(splitter)
        return [fr.Node(content=para) for para in paragraphs if para]

    documents = fr.Document(str(rag_master), embed=fr.OpenAIEmbedding(server.url, "embedding-2"))
    documents.create_node_group(name="sentences", transform=SentSplitter)
    ppl = fr.Retriever(documents, group_name="sentences", similarity="cosine", topk=3)
    assert len(ppl("何为天道")) == 3


class ParagraphSplitter(fr.NodeTransform):
    def __init__(self, splitter: str = r"\n\n", num_workers: int = 0):
        super().__init__(num_workers=num_workers)
        self.splitter = splitter

    def transform(self, node: fr.Node, **kwargs) -> list[str]:
        return self.split_text(node.get_text())

    def split_text(self, text: str) -> list[str]:
        if text == "":
            return [""]
        paragraphs = text.split(self.splitter)
        return [para for para in paragraphs]


def test_class_transform_subclassing_node_transform(server, rag_master):
    documents = fr.Document(str(rag_master), embed=fr.OpenAIEmbedding(server.url, "embedding-2"))
    documents.create_node_group(name="sentences", transform=ParagraphSplitter)
    ppl = fr.Retriever(documents, group_name="sentences", similarity="cosine", topk=3)
    out = ppl("何为天道")
    assert len(out) == 3
    # r"\n\n" is a literal backslash-n pair: every file stays one paragraph
    assert sorted(n.text for n in documents.group("sentences")) == sorted(CLASSICS.values())


def test_rag_chatbot_with_custom_transform(server, llm, rag_master):
    class LineSplitter(fr.NodeTransform):
        def transform(self, text):
            return [p for p in text.split("\n") if p]

    server.reply = "天之道，利而不害。"
    prompt = (
        "You will play the role of an AI Q&A assistant and complete a dialogue task. In "
        "this task, you need to provide your answer based on the given context and question."
    )
    documents = fr.Document(str(rag_master), embed=fr.OpenAIEmbedding(server.url, "bge"))
    documents.create_node_group(name="paragraphs", transform=LineSplitter)
    retriever1 = fr.Retriever(documents, group_name="paragraphs", similarity="cosine", topk=3)
    retriever2 = fr.Retriever(documents, "CoarseChunk", "bm25_chinese", 0.003, topk=3)
    assert retriever2.topk == 3
    reranker = fr.Reranker(
        name="ModuleReranker",
        model=fr.OpenAIRerank(server.url, "bge-rr"),
        topk=1,
        output_format="content",
        join=True,
    )
    query = "何为天道"
    nodes = reranker(retriever1(query) + retriever2(query), query=query)
    assert isinstance(nodes, str) and "道" in nodes
    formatter = fr.ContextualQueryAugmenter(prompt_template=prompt + "\n{context_str}")
    answer = llm.complete(formatter.augment(query, [nodes]).text)
    assert answer == "天之道，利而不害。"
    assert prompts(server) == [prompt + "\n" + nodes + "\n" + query]
