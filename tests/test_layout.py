"""docs/STYLE.md's layout picture matches the tree: every module and package of fastrag/ is in
it, everything it names exists, and the classes it names are defined where fastrag defines
classes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _block() -> list[str]:
    text = (ROOT / "docs" / "STYLE.md").read_text(encoding="utf-8")
    start = text.index("## Layout")
    body = text[start:].split("```\n", 2)[1]
    return body.splitlines()


def test_every_fastrag_entry_is_in_the_layout_and_nothing_else():
    named = set()
    for line in _block():
        m = re.match(r"^  (\S+?)(?:\s|$)", line)  # an entry under fastrag/ (two spaces)
        if m and not line.startswith("   "):
            named.add(m.group(1).rstrip("/"))
    actual = {
        p.name.removesuffix(".py")
        for p in (ROOT / "fastrag").iterdir()
        if p.name != "__pycache__" and (p.suffix == ".py" or p.is_dir())
    }
    named = {n.removesuffix(".py") for n in named}
    assert named == actual, (sorted(named - actual), sorted(actual - named))


def test_named_kernels_and_top_folders_exist():
    block = "\n".join(_block())
    kernels = block.split("\nkernels/", 1)[1].split("bench/")[0]
    for name in re.findall(r"(?<![\w/])(\w+\.py)\b", kernels.split("bm25/", 1)[0]):
        assert (ROOT / "kernels" / name).is_file(), name
    for name in re.findall(r"\b(\w+\.py)\b", kernels.split("bm25/", 1)[1]):
        assert (ROOT / "kernels" / "bm25" / name).is_file(), name
    for top in ("kernels", "bench", "tests", "docs"):
        assert re.search(rf"^{top}/", block, re.M) and (ROOT / top).is_dir(), top


def test_named_classes_are_defined():
    block = "\n".join(_block())
    camel = r"[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*"
    one_word = r"Document|Query|Retriever|Response|Settings"
    names = set(re.findall(rf"\b({camel}|{one_word})\b", block))
    names -= {"FastAPI", "LlamaIndex", "LangChain", "OpenAI", "SQLite", "CMRC", "MCP", "SQuAD"}
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "fastrag").rglob("*.py"))
    missing = [n for n in sorted(names) if not re.search(rf"^(class {n}\b|{n} = )", source, re.M)]
    assert len(names) > 10
    assert missing == []


def _fastrag_modules():
    import importlib
    import pkgutil

    import fastrag

    for info in pkgutil.walk_packages(fastrag.__path__, "fastrag."):
        try:
            yield info, importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue


def _foreign(module, name: str) -> str | None:
    """Where ``module.name`` is defined, when that is another fastrag module (classes and
    functions only: constants carry no home)."""
    import inspect

    obj = getattr(module, name, None)
    home = getattr(obj, "__module__", None)
    if (inspect.isclass(obj) or inspect.isfunction(obj)) and home != module.__name__:
        return home if home and home.startswith("fastrag") else None
    return None


def test_modules_export_only_what_they_define():
    """Only a package's ``__init__`` re-exports; a module's ``__all__`` is its own names."""
    stray = [
        f"{m.__name__}.{n} (from {home})"
        for info, m in _fastrag_modules()
        if not info.ispkg
        for n in getattr(m, "__all__", [])
        if (home := _foreign(m, n))
    ]
    assert stray == []


def test_no_name_is_imported_through_a_module_that_is_not_its_home():
    """``from fastrag.a.b import X`` names X's own module (or a package that exports it)."""
    import ast
    import importlib

    stray = []
    files = [*ROOT.glob("fastrag/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py")]
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if not node.module.startswith("fastrag."):
                continue
            try:
                mod = importlib.import_module(node.module)
            except ImportError:
                continue
            if mod.__file__ and mod.__file__.endswith("__init__.py"):
                continue
            for alias in node.names:
                if home := _foreign(mod, alias.name):
                    stray.append(f"{f.relative_to(ROOT)}: {node.module}.{alias.name} is {home}'s")
    assert stray == []


def test_no_private_name_is_imported_from_another_module():
    """An underscore name stays in its module: fastrag/ and kernels/ import none from another
    (``from . import _fresh``, a private module of the importing package, is not a name)."""
    import ast

    stray = []
    for f in [*ROOT.glob("fastrag/**/*.py"), *ROOT.glob("kernels/*.py")]:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    stray.append(f"{f.relative_to(ROOT)}: {node.module}.{alias.name}")
    assert stray == []
