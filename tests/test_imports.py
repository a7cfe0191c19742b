"""The import graph: every module imports on its own, module-level imports form no cycle,
and production code never imports the test doubles (fastrag.llms.mock).

The graph is read from the source with ``ast``: an edge ``a -> b`` for each ``import`` that
runs when ``a`` is imported (module body, class bodies, ``try``/``if`` blocks; not function
bodies, not ``if TYPE_CHECKING:``). ``from pkg import name`` points at ``pkg.name`` when that
is a module, else at ``pkg``. Importing a submodule also runs its package's ``__init__``;
that implicit edge is left out (a package re-exporting its submodules is not a loop).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fastrag

TEST_DOUBLES = {"fastrag.llms.mock"}


def _module_files() -> dict[str, Path]:
    """Module name -> source file, for fastrag and fastrag._kernels."""
    roots = [("fastrag", Path(fastrag.__file__).parent)]
    spec = importlib.util.find_spec("fastrag._kernels")
    assert spec is not None and spec.submodule_search_locations
    roots.append(("fastrag._kernels", Path(list(spec.submodule_search_locations)[0])))
    out: dict[str, Path] = {}
    for prefix, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "_kernels", "data")]
            for fn in filenames:
                if not fn.endswith(".py"):
                    continue
                path = Path(dirpath) / fn
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join([prefix, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _imports(body: list[ast.stmt], *, module_level: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            yield st
            continue
        if module_level and isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if module_level and isinstance(st, ast.If) and _is_type_checking(st.test):
            yield from _imports(st.orelse, module_level=module_level)
            continue
        for child in ast.iter_child_nodes(st):
            if isinstance(child, ast.stmt):
                yield from _imports([child], module_level=module_level)
            elif isinstance(child, ast.excepthandler):
                yield from _imports(child.body, module_level=module_level)


def _targets(mod: str, path: Path, st: ast.Import | ast.ImportFrom, mods: dict) -> set[str]:
    if isinstance(st, ast.Import):
        return {a.name for a in st.names if a.name in mods}
    base = st.module or ""
    if st.level:
        pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - (st.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    out = set()
    for a in st.names:
        full = f"{base}.{a.name}"
        out.add(full if full in mods else base)
    return {t for t in out if t in mods}


def _graph(*, module_level: bool) -> dict[str, set[str]]:
    mods = _module_files()
    graph = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        deps: set[str] = set()
        for st in _imports(tree.body, module_level=module_level):
            deps |= _targets(mod, path, st, mods)
        graph[mod] = deps - {mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_module_level_imports_have_no_cycle():
    graph = _graph(module_level=True)
    assert "fastrag.analysis.registry" in graph and "fastrag._kernels.bm25" in graph
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_production_code_never_imports_test_doubles():
    graph = _graph(module_level=False)  # function-local imports count here too
    bad = {
        m: sorted(d & TEST_DOUBLES)
        for m, d in graph.items()
        if m not in TEST_DOUBLES and m != "fastrag.llms" and d & TEST_DOUBLES
    }
    assert bad == {}
    # fastrag.llms (the package) re-exports MockLLM; the production modules do not need it
    assert "fastrag.llms.mock" not in graph["fastrag.llms.resolve"]


def test_every_module_imports_in_a_fresh_process():
    names = sorted(_module_files())
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(len(sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_no_hidden_loops_in_analysis_and_llms():
    """Counting function-local imports too: analysis/ and llms/ are acyclic (a local import
    may keep a heavy optional package lazy, never hide a loop)."""
    cycles = _cycles(_graph(module_level=False))
    assert [
        c for c in cycles if any(m.startswith(("fastrag.analysis", "fastrag.llms")) for m in c)
    ] == []
