"""fastrag.flow: LazyLLM's pipeline / parallel / bind, run batch-first (calls counted)."""

from __future__ import annotations

import threading
import warnings

import pytest

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.flow import Parallel, Pipeline, package

TEXTS = [
    "亚硫酸盐是亚硫酸所成的盐，葡萄酒中常加入亚硫酸盐作防腐剂。",
    "猴面包树是一种锦葵科猴面包树属的大型落叶乔木，原产于热带非洲。",
    "北京是中华人民共和国的首都，2008年在北京举办了夏季奥运会。",
    "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。",
    "熊猫是中国特有的哺乳动物，主要以竹子为食。",
    "葡萄酒是用新鲜的葡萄或葡萄汁经发酵酿成的酒精饮料。",
]
QUERIES = [
    "亚硫酸盐有什么作用？",
    "猴面包树原产于哪里？",
    "2008年奥运会在哪里举办？",
    "熊猫吃什么？",
]


def embed(texts: list[str]):
    """Character-bag vectors (deterministic, cheap)."""
    import numpy as np

    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, t in enumerate(texts):
        for ch in t:
            out[i, ord(ch) % 64] += 1.0
    return out


@pytest.fixture(scope="module")
def doc():
    d = fr.Document.from_texts(TEXTS, embed=embed)
    d.create_node_group(name="block", transform=lambda t: t.split("，"))
    return d


class Counter:
    """Counts calls of one method of one object (instance attribute shadows the class's)."""

    def __init__(self, obj, name: str) -> None:
        self.calls: list[tuple] = []
        inner = getattr(obj, name)

        def wrapped(*a, **kw):
            self.calls.append((a, kw))
            return inner(*a, **kw)

        setattr(obj, name, wrapped)


def seed_app(doc, llm):
    """The seed's app (shared/seeds/004, "基于 LazyLLM 数据流"), fastrag's names."""
    prompt = "你是一个知识问答助手，请通过给定的文档回答用户问题。"
    with fr.pipeline() as ppl:
        with fr.parallel().sum as ppl.prl:
            ppl.prl.retriever1 = fr.Retriever(
                doc=doc, group_name="block", similarity="bm25_chinese", topk=3
            )
            ppl.prl.retriever2 = fr.Retriever(
                doc=doc, group_name="block", similarity="cosine", topk=3
            )
        ppl.reranker = fr.Reranker(
            name="ModuleReranker",
            model=lambda q, ts: [float(len(set(q) & set(t))) for t in ts],
            topk=3,
        ) | fr.bind(query=ppl.input)
        ppl.formatter = (
            lambda nodes, query: dict(
                context_str="".join([node.get_content() for node in nodes]), query=query
            )
        ) | fr.bind(query=ppl.input)
        ppl.llm = llm.prompt(fr.ChatPrompter(instruction=prompt, extra_keys=["context_str"]))
    return ppl


def test_seed_app_batch_equals_loop_and_runs_each_stage_once(doc):
    llm = fr.FunctionLLM(lambda p: "答:" + p.rsplit("\n", 1)[-1], latency=0.01)
    ppl = seed_app(doc, llm)
    r1 = Counter(ppl.prl.retriever1, "batch")
    r2 = Counter(ppl.prl.retriever2, "batch")
    rr = Counter(ppl.reranker.f, "batch")
    loop = [ppl(q) for q in QUERIES]
    assert (len(r1.calls), len(r2.calls), len(rr.calls), llm.n_calls) == (4, 4, 4, 4)
    llm.reset()
    batch = ppl.batch(QUERIES)
    assert batch == loop == [f"答:{q}" for q in QUERIES]
    # one retriever call per branch, one rerank call, every LLM call overlapped
    assert (len(r1.calls), len(r2.calls), len(rr.calls)) == (5, 5, 5)
    assert r1.calls[-1][0] == (QUERIES,) and r2.calls[-1][0] == (QUERIES,)
    nodes, queries = rr.calls[-1][0]
    assert queries == QUERIES and all(1 <= len(n) <= 6 for n in nodes)
    assert llm.n_calls == 4 and llm.max_in_flight == 4
    # the prompt: instruction, the extra key's section, then the query on its own line
    p = sorted(llm.prompts)[0]
    assert p.startswith("你是一个知识问答助手，请通过给定的文档回答用户问题。\n")
    assert "Here are some extra messages you can referred to:\n\n### context_str:\n" in p


def test_concurrent_callers_get_their_own_answers(doc):
    llm = fr.FunctionLLM(lambda p: p.rsplit("\n", 1)[-1], to_thread=False, latency=0.005)
    ppl = seed_app(doc, llm)
    got: dict[int, object] = {}

    def call(i: int) -> None:
        got[i] = ppl(QUERIES[i % 4]) if i % 2 else ppl.batch([QUERIES[i % 4]] * 2)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == {i: QUERIES[i % 4] if i % 2 else [QUERIES[i % 4]] * 2 for i in range(8)}


def test_sum_concatenates_branch_outputs_in_branch_order(doc):
    with fr.pipeline() as ppl:
        with fr.parallel().sum as ppl.prl:
            ppl.prl.a = fr.Retriever(doc, "block", "bm25_chinese", topk=2)
            ppl.prl.b = fr.Retriever(doc, "block", "cosine", topk=3)
    a = fr.Retriever(doc, "block", "bm25_chinese", topk=2)(QUERIES[0])
    b = fr.Retriever(doc, "block", "cosine", topk=3)(QUERIES[0])
    got = ppl(QUERIES[0])
    assert [h.node.id for h in got] == [h.node.id for h in a + b]
    assert [[h.node.id for h in r] for r in ppl.batch(QUERIES[:2])][0] == [h.node.id for h in a + b]


def test_plain_parallel_is_a_package_spread_into_the_next_stage():
    ppl = fr.pipeline(fr.parallel(lambda x: x + 1, lambda x: x * 10), lambda a, b: (a, b))
    assert ppl(3) == (4, 30)
    out = fr.parallel(lambda x: x + 1, lambda x: x * 10)(3)
    assert isinstance(out, package) and out == (4, 30)
    assert fr.parallel(a=str.upper, b=str.lower).asdict("Ab") == {"a": "AB", "b": "ab"}
    assert fr.parallel(str.upper, str.lower).join("|")("Ab") == "AB|ab"
    assert fr.parallel(str.upper, str.lower).sum("Ab") == "ABab"
    assert fr.parallel(lambda x: [x], lambda x: [x, x]).sum(1) == [1, 1, 1]
    assert fr.parallel(str.upper, str.lower).aslist("Ab") == ["AB", "ab"]
    assert fr.parallel(str.upper).astuple("a") == ("A",)
    # several arguments travel as one package
    assert fr.pipeline(lambda a, b: a - b)(5, 2) == 3


def test_sequential_runs_branches_in_turn_and_parallel_overlaps_them():
    inside, peak, lock = [0], [0], threading.Lock()

    async def slow(x):
        import asyncio

        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        await asyncio.sleep(0.02)
        with lock:
            inside[0] -= 1
        return x

    assert fr.parallel.sequential(slow, slow, slow).sum([1]) == [1, 1, 1]
    assert peak[0] == 1
    assert fr.parallel(slow, slow, slow).sum([1]) == [1, 1, 1]
    assert peak[0] == 3
    assert isinstance(fr.parallel.sequential(), Parallel)


def test_bind_input_of_outer_pipeline_inside_a_nested_one():
    with fr.pipeline() as outer:
        outer.upper = str.upper
        with fr.pipeline() as outer.inner:
            outer.inner.pair = (lambda x, orig, own: f"{x}/{orig}/{own}") | fr.bind(
                orig=outer.input, own=outer.inner.input
            )
    assert outer("ab") == "AB/ab/AB"
    assert outer.batch(["ab", "cd"]) == ["AB/ab/AB", "CD/cd/CD"]
    # positional bound arguments replace the call's; an input of another pipeline is an error
    assert fr.pipeline(len, fr.bind(lambda a, b: (a, b), 5, 1))("xyz") == (5, 1)
    other = fr.pipeline()
    p = fr.pipeline((lambda x, y: x) | fr.bind(y=other.input))
    with pytest.raises(ConfigError, match="is not known here"):
        p("xyz")
    with fr.pipeline() as q:
        q.n = len
        q.pick = (lambda n, k: (n, k)) | fr.bind(k=q.input["k"])
    assert q({"k": 7, "z": 1}) == (2, 7)


def test_bind_outside_a_pipeline_and_errors():
    with fr.pipeline() as ppl:
        ppl.f = str.upper
    b = (lambda x, query: x + query) | fr.bind(query=ppl.input)
    with pytest.raises(ConfigError, match="bind a pipeline's input only in a stage"):
        b("x")
    assert ((lambda x, y: x + y) | fr.bind(y="!"))("x") == "x!"
    with pytest.raises(ConfigError, match="already bound"):
        ((lambda x, y: x + y) | fr.bind(y="!"))("x", y="?")
    with pytest.raises(ConfigError, match="callable stage on the left"):
        _ = 3 | fr.bind(y=1)


def test_building_errors_name_the_fix():
    with pytest.raises(ConfigError, match="outside the flow's `with` block"):
        ppl = fr.pipeline(str.upper)
        ppl.g = str.lower
    with pytest.raises(ConfigError, match="already named 'a'"):
        with fr.pipeline() as ppl:
            ppl.a = str.upper
            ppl.a = str.lower
    with pytest.raises(ConfigError, match="'input' is an attribute of Pipeline"):
        with fr.pipeline() as ppl:
            ppl.input = str.upper
    with pytest.raises(ConfigError, match="must be callable"):
        fr.pipeline(3)
    with pytest.raises(ConfigError, match="already combines"):
        _ = fr.parallel().sum.sum
    with pytest.raises(ConfigError, match="takes a list of inputs, got str"):
        fr.pipeline(str.upper).batch("abc")
    with pytest.raises(ConfigError, match="either positionally or by name"):
        fr.pipeline(str.upper, b=str.lower)
    with pytest.raises(ConfigError, match=r"option\(s\) \['post_action'\] are not supported"):
        fr.pipeline(str.upper, post_action=print)
    assert fr.pipeline(str.upper).batch([]) == [] and fr.parallel(str.upper).sum.batch([]) == []


def test_a_list_is_one_input_as_in_lazyllm():
    ppl = fr.pipeline(len)
    assert ppl(["a", "b", "c"]) == 3
    assert ppl.batch([["a"], ["a", "b"]]) == [1, 2]


def test_named_flows_bind_module_globals_as_in_lazyllm():
    g: dict = {"fr": fr}
    exec(
        "with fr.pipeline() as ppl:\n"
        "    with fr.parallel().sum as ppl.prl:\n"
        "        prl.a = lambda x: [x]\n"
        "        prl.b = lambda x: [x + 1]\n",
        g,
    )
    assert g["prl"] is g["ppl"].prl and g["ppl"](1) == [1, 2]


def test_prompters_render_as_lazyllm():
    chat = fr.ChatPrompter("ctx: {context_str}", extra_keys=["context_str"])
    assert chat.generate_prompt({"query": "q?", "context_str": "C"}) == (
        "ctx: C\nHere are some extra messages you can referred to:\n\n### context_str:\nC\nq?"
    )
    assert fr.ChatPrompter("be brief").generate_prompt("q?") == "be brief\nq?"
    assert fr.ChatPrompter("translate: {text}").generate_prompt("hi") == "translate: hi"
    alpaca = fr.AlpacaPrompter("answer {input}")
    assert alpaca.generate_prompt("q?").endswith("### Instruction:\nanswer q?\n\n### Response:\n")
    with pytest.raises(ConfigError, match="lacks the prompt's key"):
        chat.generate_prompt({"query": "q"})
    with pytest.raises(ConfigError, match="only one"):
        fr.ChatPrompter("x").generate_prompt({"a": 1, "b": 2})
    with pytest.raises(ConfigError, match="slot of the instruction"):
        fr.AlpacaPrompter("no slot").generate_prompt("q")
    with pytest.raises(ConfigError, match="extra_keys must be"):
        fr.ChatPrompter("x", extra_keys=[1])
    llm = fr.FunctionLLM(lambda p: p.upper(), to_thread=False)
    assert llm("plain") == "PLAIN"  # no prompter yet: a prompt str
    with pytest.raises(ConfigError, match="takes a str"):
        llm({"query": 1})
    assert fr.pipeline(str.lower, llm).batch(["A", "B"]) == ["A", "B"]  # an LLM is a stage
    with pytest.raises(ConfigError, match=r"use llm.prompt\(ChatPrompter"):
        fr.pipeline(lambda q: {"query": q, "context_str": "c"}, llm)("q")
    # LazyLLM's llm.prompt(p) sets p on llm and returns it; share(p) leaves llm as it is
    assert llm.prompt(chat) is llm
    assert llm({"query": "q", "context_str": "c"}).endswith("Q")
    assert fr.pipeline(lambda q: {"query": q, "context_str": "c"}, llm)("q").endswith("Q")
    shared = llm.share("be brief")
    assert shared("q") == "BE BRIEF\nQ" and llm({"query": "q", "context_str": "c"}).endswith("Q")
    assert llm.complete("raw") == "RAW"  # fastrag's own calls send their prompt unchanged
    assert llm.prompt() is llm and llm("plain") == "PLAIN"  # prompt() clears it


def test_document_takes_lazyllm_arguments(tmp_path):
    (tmp_path / "a.txt").write_text("甲乙丙。丁戊己。", encoding="utf-8")
    d = fr.Document(dataset_path=str(tmp_path), embed=embed, manager=False)
    assert d.source_text(tmp_path / "a.txt") == "甲乙丙。丁戊己。"
    assert [h.node.text for h in fr.Retriever(d, "root", "bm25_chinese", topk=1)("丁戊己")] == [
        "甲乙丙。丁戊己。"
    ]
    with pytest.raises(ConfigError, match="no document-manager service"):
        fr.Document(dataset_path=str(tmp_path), manager=True)
    with pytest.raises(ConfigError, match="both path="):
        fr.Document(str(tmp_path), dataset_path=str(tmp_path))


def test_pipeline_module_is_callable_and_ragpipeline_moved():
    import importlib

    mod = importlib.import_module("fastrag.pipeline")
    assert isinstance(mod(str.upper), Pipeline) and isinstance(fr.pipeline(), Pipeline)
    assert fr.pipeline is mod  # the module and the factory are one object
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        moved = mod.RAGPipeline  # what `from fastrag.pipeline import RAGPipeline` reads
    assert moved is fr.RAGPipeline
    assert [str(x.message) for x in w if x.category is DeprecationWarning] == [
        "fastrag.pipeline.RAGPipeline moved to fastrag.rag; import it from there "
        "(from fastrag.rag import RAGPipeline) or as fastrag.RAGPipeline"
    ]
    assert "parallel" not in fr.__all__ and fr.parallel is Parallel  # LazyLLM's names


def test_a_flow_is_a_batch_retriever_of_a_ragpipeline(doc):
    with fr.pipeline() as ppl:
        with fr.parallel().sum as ppl.prl:
            ppl.prl.a = fr.Retriever(doc, "block", "bm25_chinese", topk=2)
            ppl.prl.b = fr.Retriever(doc, "block", "cosine", topk=2)
    c = Counter(ppl.prl.a, "batch")
    rag = fr.RAGPipeline([ppl], llm=fr.FunctionLLM(lambda p: "ok", to_thread=False))
    out = rag.batch(QUERIES)
    assert [r.response for r in out] == ["ok"] * 4
    assert len(c.calls) == 1 and c.calls[0][0] == (QUERIES,)


def test_repr_of_a_flow_whose_stage_binds_its_input_is_finite():
    """``ppl.input`` inside a stage of ``ppl``: the repr names the owner without recursing
    (a WebModule logs its flow's repr)."""
    with fr.pipeline() as ppl:
        ppl.a = str.upper
        ppl.b = (lambda x, q: x + q) | fr.bind(q=ppl.input)
    text = repr(ppl)
    assert text.startswith("pipeline(a=") and f"<input of pipeline {id(ppl):#x}>" in text
    assert repr(ppl.input["k"].x) == f"<input of pipeline {id(ppl):#x}['k'].x>"
    assert ppl("ab") == "ABab"
