"""The LazyLLM seed's (shared/seeds/004) python blocks and the table that swaps LazyLLM's
import lines and model classes for fastrag's (not a test module: the seed tests import it).

Only this table changes a block's text (:func:`swap`):

- ``import lazyllm`` -> ``import fastrag as lazyllm``; ``from lazyllm[.tools.rag[.doc_node]]
  import X`` and ``from lazyllm.module import X`` -> ``from fastrag import X``;
  ``from lazyllm.tools.eval import X`` -> ``from fastrag.eval import X``; the model classes
  (``OnlineChatModule``, ``OnlineEmbeddingModule``, ``TrainableModule``, ``deploy``) are
  dropped from those imports.
- a model's whole expression, ``[lazyllm.]OnlineChatModule(...)`` or ``TrainableModule(...)``
  with its ``.deploy_method(...)`` / ``.start()``, becomes one of:
  ``LLM`` (chat models) = ``fr.OpenAILike`` on the local test server;
  ``EMBED`` (``OnlineEmbeddingModule(...)``, ``TrainableModule("bge-...")``) =
  ``fr.OpenAIEmbedding(url, "bge-large-zh-v1.5")``, ``EMBED2`` for ``bge-m3`` (another
  model name; the seed's sparse bge-m3 becomes dense: fastrag has no sparse embeddings);
  ``RERANK`` (``type="rerank"``, ``"bge-reranker-large"``, ``model='bge-reranker-large'``) =
  ``fr.OpenAIRerank(url, "bge-reranker-large")``.
- the seed's data paths (``"/path/to/your/document"``, ``"rag_master"``, ...) -> ``DATA_PATH``:
  five CMRC 2018 files of the tutorial's data_kb plus the tutorial's own paragraphs.
- two seed typos that neither Python nor LazyLLM accepts: ``"CoarseChunk"，similarity``
  (a full-width comma, block 28) and ``ChatPrompter(instrusction=...)`` (block 3).
- the seed's web UI ports (``WebModule(ppl, port=23491)``, ``23456``) -> ``WEB_PORT``: the seed's
  port may be in use on the test machine; the test puts a free one in ``WEB_PORT`` (block 27
  runs as written otherwise: ``lazyllm.WebModule(ppl, port=WEB_PORT).start().wait()``)."""

from __future__ import annotations

import re
from pathlib import Path

BLOCKS_FILE = Path(__file__).parent / "blocks" / "lazyllm_004.txt"


def blocks_by_lines() -> dict[str, str]:
    """The blocks keyed by their seed line range, e.g. ``"1162-1186"``."""
    text = BLOCKS_FILE.read_text(encoding="utf-8")
    parts = re.split(r"^===== block: lines (\d+-\d+)\n", text, flags=re.M)[1:]
    return dict(zip(parts[0::2], parts[1::2], strict=True))


def blocks() -> list[str]:
    """The seed's 42 python blocks, in order (block n is ``blocks()[n - 1]``)."""
    return list(blocks_by_lines().values())


MODEL_CALL = re.compile(
    r"(?<![\w.])(?:lazyllm\.)?(OnlineChatModule|OnlineEmbeddingModule|TrainableModule)\("
)
CHAINED = re.compile(r"\s*\.(deploy_method|start)\(")
MODEL_CLASSES = {"OnlineChatModule", "OnlineEmbeddingModule", "TrainableModule", "deploy"}
FROM_IMPORT = re.compile(
    r"^from lazyllm(\.tools\.eval|\.tools\.rag\.doc_node|\.tools\.rag|\.module)? import (.*)$", re.M
)
DATA_PATHS = re.compile(
    r"""(["'])(/path/to/your/documents?|/path/to/your/doc/|/content/doc/|rag_master|"""
    r"""/mnt/lustre/share_data/dist/cmrc2018/data_kb)\1"""
)
WEB_PORTS = re.compile(r"(WebModule\(ppl, port=)\d+")
SEED_TYPOS = {
    '"CoarseChunk"，similarity': '"CoarseChunk", similarity',
    "instrusction=": "instruction=",
}


def _call_end(s: str, i: int) -> int:
    """Index after the parenthesis that closes the one at ``s[i]``."""
    depth = 0
    for k in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[k], 0)
        if depth == 0:
            return k + 1
    raise AssertionError(f"unbalanced call at {s[i : i + 40]!r}")


def _model_name(call: str) -> str:
    if call.startswith(("OnlineChatModule", "lazyllm.OnlineChatModule")):
        return "LLM"
    if "rerank" in call:
        return "RERANK"
    if "OnlineEmbeddingModule" in call or "bge" in call:
        return "EMBED2" if "bge-m3" in call else "EMBED"
    return "LLM"


def swap(block: str) -> str:
    """The block with the table above applied."""
    out, pos = [], 0
    for m in MODEL_CALL.finditer(block):
        if m.start() < pos:
            continue
        end = _call_end(block, m.end() - 1)
        while chained := CHAINED.match(block, end):
            end = _call_end(block, chained.end() - 1)
        out += [block[pos : m.start()], _model_name(block[m.start() : end])]
        pos = end
    block = "".join(out) + block[pos:]

    def from_import(m: re.Match) -> str:
        names = [n.strip() for n in m.group(2).split(",") if n.strip() not in MODEL_CLASSES]
        module = "fastrag.eval" if m.group(1) == ".tools.eval" else "fastrag"
        return f"from {module} import {', '.join(names)}" if names else "pass"

    block = FROM_IMPORT.sub(from_import, block).replace(
        "import lazyllm\n", "import fastrag as lazyllm\n"
    )
    block = block.replace("model='bge-reranker-large'", "model=RERANK")
    for old, new in SEED_TYPOS.items():
        block = block.replace(old, new)
    block = WEB_PORTS.sub(r"\1WEB_PORT", block)
    return DATA_PATHS.sub("DATA_PATH", block)
