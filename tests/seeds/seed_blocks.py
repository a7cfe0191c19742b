"""Read a seed's Python code blocks and run them as written (see seed_imports for the swap
table): helpers of tests/seeds/test_seed_blocks.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
#: seeds 000 and 003 as written, for machines without shared/ (CI's clean clone); a test
#: checks them against SEEDS where that folder is there
COPIES = Path(__file__).parent / "blocks"
_FENCE = re.compile(r"^ *```+ *(python|py)\s*$")
_IMPORT = re.compile(r"^(\s*)from llama_index[\w.]* import ", re.M)


def seed_file(prefix: str) -> Path:
    """The seed file whose name starts with ``prefix`` (``"000"``)."""
    for folder in (SEEDS, COPIES):
        found = sorted(folder.glob(f"{prefix}_*.txt"))
        if found:
            assert len(found) == 1, f"more than one seed {prefix}_*.txt in {folder}"
            return found[0]
    raise AssertionError(f"no seed {prefix}_*.txt in {SEEDS} or {COPIES}")


def python_blocks(prefix: str) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each fenced Python block of the seed, in order."""
    lines = seed_file(prefix).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if _FENCE.match(lines[i]):
            j = i + 1
            while not lines[j].strip().startswith("```"):
                j += 1
            out.append((i + 2, "\n".join(lines[i + 1 : j]) + "\n"))
            i = j
        i += 1
    return out


class _DropEllipsisItems(ast.NodeTransformer):
    def visit_List(self, node: ast.List) -> ast.List:  # noqa: N802 - ast's naming
        self.generic_visit(node)
        node.elts = [
            e for e in node.elts if not (isinstance(e, ast.Constant) and e.value is Ellipsis)
        ]
        return node


def port(text: str) -> ast.Module:
    """The block with its LlamaIndex imports pointed at seed_imports and ``...`` list items
    dropped; nothing else changes."""
    tree = ast.parse(_IMPORT.sub(r"\1from seed_imports import ", text))
    return ast.fix_missing_locations(_DropEllipsisItems().visit(tree))


def run_block(prefix: str, index: int, namespace: dict[str, Any]) -> dict[str, Any]:
    """Run block ``index`` of seed ``prefix`` in ``namespace`` (blocks share it, as a
    notebook's cells do); returns the namespace."""
    line, text = python_blocks(prefix)[index]
    code = compile(port(text), f"{seed_file(prefix).name}:{line}", "exec")
    exec(code, namespace)  # noqa: S102 - the seed's own code is what is tested
    return namespace
