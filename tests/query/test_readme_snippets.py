"""The Modular RAG snippets of docs/guide/pipelines.md run as written: the first with
``fr.MockLLM()``, the second (which reuses its ``llm``) against the local OpenAI-compatible
server."""

from __future__ import annotations

import re
from pathlib import Path

from query_support import prompts

import fastrag as fr

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "pipelines.md"


def test_modular_rag_snippets_run(server, llm, capsys):
    text = GUIDE.read_text("utf-8")
    naive, advanced = re.findall(r"```python\n(.*?)```", text, re.DOTALL)[:2]
    scope: dict = {}
    exec(compile(naive, "README naive", "exec"), scope)
    resp = scope["resp"]
    assert resp.source_nodes[0].text == "Copenhagen is the capital of Denmark."
    assert isinstance(scope["llm"], fr.MockLLM)
    assert "outside your knowledge base" in scope["llm"].prompts[-1]

    scope["llm"] = llm  # the same code with a model behind real HTTP
    exec(compile(advanced, "README advanced", "exec"), scope)
    resps = scope["resps"]
    # per question: rewrite + expansion + compact answer (no history: no compression call)
    assert [r.metadata["llm_calls"] for r in resps] == [3, 3]
    assert [r.response for r in resps] == ["ANSWER", "ANSWER"]
    t = resps[0].metadata["trace"]
    assert t["expanded"][0] == "What is the capital of Denmark explained"
    assert len(t["retrieved"]) == 8  # 4 variants x 2 retrievers
    assert len(resps[0].source_nodes) <= 3
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "What is the second largest city of Denmark explained"
    assert sum("standalone query" in p for p in prompts(server)) == 1
    assert scope["qe"].query("capital").response == "ANSWER"
