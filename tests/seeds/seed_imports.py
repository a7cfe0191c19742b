"""The swap table of the seed blocks run as written (tests/seeds/test_seed_blocks.py): a seed
block's ``from llama_index.<anything> import A, B`` line becomes ``from seed_imports import A,
B``, and these are the names it then gets. Nothing else of a block is changed, except the
docs' "and more" placeholder ``...`` as an element of a list, which is dropped.

LlamaIndex name -> fastrag:

* ``Node`` (``data_structs``), ``NodeWithScore`` (``schema``) -> ``fr.Node``, ``fr.NodeWithScore``
* ``ResponseMode``, ``get_response_synthesizer`` -> the same names of ``fr``
* ``PromptTemplate``, ``TreeSummarize``, ``Settings`` -> the same names of ``fr``
* ``OpenAI(model=...)`` (``llms.openai``), the model class -> ``fr.OpenAILike(model,
  <the test server>)``
* ``display_source_node(node, source_length)`` (``response.notebook_utils``) -> prints the
  node's id, score and text
"""

from __future__ import annotations

from typing import Any

import fastrag as fr

Node = fr.Node
NodeWithScore = fr.NodeWithScore
ResponseMode = fr.ResponseMode
get_response_synthesizer = fr.get_response_synthesizer
PromptTemplate = fr.PromptTemplate
TreeSummarize = fr.TreeSummarize
Settings = fr.Settings

#: the local OpenAI-compatible server the model classes talk to (set by the tests' fixture)
BASE_URL: str | None = None


def OpenAI(model: str = "gpt-3.5-turbo", **kwargs: Any) -> fr.OpenAILike:  # noqa: N802
    """LlamaIndex's ``OpenAI`` model class: ``fr.OpenAILike`` on the test server."""
    assert BASE_URL is not None, "set seed_imports.BASE_URL first"
    return fr.OpenAILike(model, BASE_URL, retry_backoff=0.01, timeout=20.0, **kwargs)


def display_source_node(node: Any, source_length: int = 100) -> None:
    """LlamaIndex's notebook helper, printed instead of rendered."""
    print(
        f"Node ID: {node.id}\nSimilarity: {node.score}\nText: {node.get_content()[:source_length]}"
    )
