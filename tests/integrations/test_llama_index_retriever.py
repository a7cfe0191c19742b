"""FastragRetriever in LlamaIndex: nodes, a RetrieverQueryEngine answering through an
OpenAI-compatible server, and batches (retrieve_batch, QueryFusionRetriever's gathered
aretrieve calls) as one fastrag batch call each."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import fastrag as fr

pytest.importorskip("llama_index.core")

from integrations_support import GENERATED  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.llms.custom import CustomLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.retrievers import QueryFusionRetriever  # noqa: E402
from llama_index.core.schema import NodeRelationship, QueryBundle, TextNode  # noqa: E402

from fastrag.integrations.llama_index import FastragRetriever  # noqa: E402

Q = "What is the capital of Denmark?"


class FastragLLM(CustomLLM):
    """LlamaIndex's CustomLLM over fr.OpenAILike (llama-index-llms-openai-like is not a
    dependency): every completion is a real HTTP call to the test server."""

    inner: Any = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="test-model")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
        return CompletionResponse(text=self.inner.complete(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kw: Any
    ) -> CompletionResponseGen:
        def gen() -> CompletionResponseGen:
            text = ""
            for piece in self.inner.stream(prompt):
                text += piece
                yield CompletionResponse(text=text, delta=piece)

        return gen()


def test_nodes_carry_fastrag_ids_text_metadata_scores(ret, store):
    denmark = Path(store).parent / "docs" / "en" / "denmark.md"
    want = ret(Q)
    got = FastragRetriever(ret).retrieve(Q)
    assert [n.node.id_ for n in got] == [h.id for h in want]
    assert [n.score for n in got] == [h.score for h in want]
    top = got[0].node
    assert isinstance(top, TextNode) and "Copenhagen" in top.text
    # as SimpleDirectoryReader sets it: the absolute path (fastrag's abs_path)
    assert top.metadata["file_path"] == str(denmark.resolve())
    assert "abs_path" not in top.metadata and top.metadata["file_name"] == "denmark.md"
    assert top.relationships[NodeRelationship.SOURCE].node_id == want[0].node.doc_id
    assert top.ref_doc_id == want[0].node.doc_id


def test_topk_and_filter(ret):
    assert len(FastragRetriever(ret, topk=1).retrieve(Q)) == 1
    hits = FastragRetriever(ret, filter="file_name == 'france.md'").retrieve("capital")
    assert [h.node.metadata["file_name"] for h in hits] == ["france.md"]


def test_retriever_query_engine_answers_through_the_llm(ret, fr_llm, llm_server):
    engine = RetrieverQueryEngine.from_args(FastragRetriever(ret), llm=FastragLLM(inner=fr_llm))
    resp = engine.query(Q)
    assert str(resp) == "Copenhagen (from the context)"
    assert resp.source_nodes[0].node.id_ == ret(Q)[0].id
    prompts = [r.body["messages"][-1]["content"] for r in llm_server.requests]
    assert len(prompts) == 1 and "Copenhagen is the capital of Denmark" in prompts[0]
    assert str(asyncio.run(engine.aquery(Q))) == "Copenhagen (from the context)"


def test_retrieve_batch_is_one_call(ret, batch_calls):
    adapter = FastragRetriever(ret)
    queries = [Q, QueryBundle("Spring Boot main method"), "BM25 term frequency"]
    got = adapter.retrieve_batch(queries)
    assert batch_calls == [[Q, "Spring Boot main method", "BM25 term frequency"]]
    assert [[n.node.id_ for n in hits] for hits in got] == [
        [h.id for h in ret(q if isinstance(q, str) else q.query_str)] for q in queries
    ]
    asyncio.run(adapter.aretrieve_batch(queries))
    assert len(batch_calls) == 1 + 1 + len(queries)  # + the reference calls above
    assert adapter.calls == 2


def test_gathered_aretrieve_calls_coalesce(ret, batch_calls):
    adapter = FastragRetriever(ret)

    async def main():
        return await asyncio.gather(*(adapter.aretrieve(q) for q in GENERATED))

    got = asyncio.run(main())
    assert batch_calls == [GENERATED]
    assert [[n.node.id_ for n in hits] for hits in got] == [
        [h.id for h in hits] for hits in ret.batch(GENERATED)
    ]


@pytest.mark.parametrize("use_async", [True, False])
def test_query_fusion_one_fastrag_call_per_fusion_step(ret, batch_calls, fr_llm, use_async):
    fusion = QueryFusionRetriever(
        [FastragRetriever(ret)],
        llm=FastragLLM(inner=fr_llm),
        num_queries=4,
        similarity_top_k=3,
        use_async=use_async,
    )
    hits = fusion.retrieve(Q)
    assert any("Copenhagen" in h.node.text for h in hits)
    if use_async:  # the four queries were gathered: one fastrag batch
        assert len(batch_calls) == 1 and sorted(batch_calls[0]) == sorted([Q, *GENERATED])
        batch_calls.clear()
        asyncio.run(fusion.aretrieve(Q))
        assert len(batch_calls) == 1 and len(batch_calls[0]) == 4
    else:  # LlamaIndex calls retrieve() once per query
        assert len(batch_calls) == 4


def test_a_pipeline_works_as_the_target(ret):
    pipe = fr.RAGPipeline(ret)
    got = FastragRetriever(pipe, topk=2).retrieve(Q)
    assert [n.node.id_ for n in got] == [h.id for h in ret(Q)[:2]]


def test_bad_target_is_named():
    with pytest.raises(
        fr.ConfigError,
        match=r"needs a fastrag.Retriever or fastrag.RAGPipeline"
        r", got str",
    ):
        FastragRetriever("kb.store")
    with pytest.raises(fr.ConfigError, match="topk"):
        FastragRetriever(fr.RAGPipeline(lambda q: []), topk=0)
