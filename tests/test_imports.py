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
import functools
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fastrag
from fastrag.cli.main import main as cli_main

TEST_DOUBLES = {"fastrag.llms.mock"}


@functools.cache
def _parse(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per test session (several tests walk it)."""
    return ast.parse(path.read_text("utf-8"), str(path))


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
        if isinstance(st, ast.If) and _is_type_checking(st.test):  # never runs
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
        tree = _parse(path)
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


# -- the house rules of docs/STYLE.md, checked on the source ---------------------------------
MAX_MODULE_LINES = 800
UPWARD = "# upward:"
LAZY = "# lazy:"


def _function_level_imports() -> list[tuple[str, int, str, set[str]]]:
    """(module, line, source line, fastrag targets) of each import inside a function."""
    mods = _module_files()
    out = []
    for mod, path in mods.items():
        lines = path.read_text("utf-8").splitlines()
        tree = _parse(path)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for st in ast.walk(fn):
                if isinstance(st, (ast.Import, ast.ImportFrom)):
                    targets = _targets(mod, path, st, mods) - {mod}
                    if targets:
                        out.append((mod, st.lineno, lines[st.lineno - 1], targets))
    return sorted({(m, n, s, tuple(sorted(t))) for m, n, s, t in out})


def test_fastrag_imports_sit_at_module_top():
    """Inside a function, only a marked upward shim (a familiar entry point such as
    Document.as_query_engine) or a marked lazy import (numba, an optional extra) imports
    fastrag code."""
    bad = [
        (m, n, s.strip())
        for m, n, s, _ in _function_level_imports()
        if UPWARD not in s and LAZY not in s
    ]
    assert bad == []
    upward = [m for m, _, s, _ in _function_level_imports() if UPWARD in s]
    assert len(upward) <= 3  # Document.as_query_engine / as_chat_engine, RAGPipeline's


def test_kernel_modules_are_leaves():
    graph = _graph(module_level=False)
    assert {
        m: sorted(d)
        for m, d in graph.items()
        if m.startswith("fastrag._kernels") and any(not t.startswith("fastrag._kernels") for t in d)
    } == {}


def test_no_import_cycle_counting_function_level_imports():
    """Lazy imports count; only the marked upward shims are left out."""
    graph = _graph(module_level=False)
    for mod, _, src, targets in _function_level_imports():
        if UPWARD in src:
            graph[mod] -= set(targets)
    assert _cycles(graph) == []


def _unit(mod: str) -> str:
    """The package a module belongs to: fastrag.<sub> for subpackages, else the module."""
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else mod


def test_no_private_name_crosses_a_package():
    mods = _module_files()
    defined: dict[str, set[str]] = {}
    accesses = []
    for mod, path in mods.items():
        unit = _unit(mod) if path.name != "__init__.py" else _unit(mod + ".__init__")
        tree = _parse(path)
        names = defined.setdefault(unit, set())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif node.attr.startswith("_") and not node.attr.startswith("__"):
                    accesses.append((unit, mod, node.attr, ast.unparse(node.value)))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and node.module in mods and _unit(node.module) != unit:
                        accesses.append((unit, mod, alias.name, f"from {node.module}"))
    # reaching into the standard library's documented underscore API is fine
    allowed = {("os", "_exit"), ("sys", "_getframe")}
    bad = sorted(
        (mod, name, where)
        for unit, mod, name, where in accesses
        if (where.startswith("from ") or name not in defined[unit])
        and (where, name) not in allowed
        and where not in ("self", "cls")
    )
    assert bad == []


def test_no_module_over_800_lines():
    sizes = {
        mod: len(path.read_text("utf-8").splitlines()) for mod, path in _module_files().items()
    }
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}


# -- start-up: what a command loads (issue 42, goal 4) -------------------------------------------
# Each module here costs a CLI call 0.05-0.8 s before any work; a command that does not use one
# must not import it (checked by module, not by wall clock: load cannot break these tests).
HEAVY = {
    "numpy",
    "numba",
    "llvmlite",
    "scipy",
    "pyarrow",
    "pandas",
    "torch",
    "jieba",
    "tiktoken",
    "onnxruntime",
    "sentence_transformers",
    "fastapi",
    "uvicorn",
    "starlette",
    "mcp",
    "httpx",
    "pydantic",
}
# what a command that runs no search needs: the parser and the error types
LIGHT_CLI = {"fastrag", "fastrag.cli", "fastrag.cli.main", "fastrag.errors", "fastrag.plugins"}


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(out.stdout.strip().splitlines()[-1].split())


def _tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_fastrag_help_and_version_load_no_command_module():
    """``fastrag --help`` and ``--version`` build the parser from the command table alone."""
    loaded = _loaded_after(
        "import contextlib, io\n"
        "from fastrag.cli.main import main\n"
        "for argv in (['--help'], ['--version']):\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(io.StringIO()):\n"
        "            main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    assert _tops(loaded) & HEAVY == set()
    assert {m for m in loaded if m.startswith("fastrag")} == LIGHT_CLI


def test_import_fastrag_loads_nothing_heavy():
    """``import fastrag`` (and ``fastrag.cli``) stays cheap: public names load on use."""
    loaded = _loaded_after("import fastrag, fastrag.cli")
    assert _tops(loaded) & HEAVY == set()


def test_search_loads_no_llm_server_or_model_stack(tmp_path):
    """``fastrag search`` loads what searching needs (numpy, pyarrow, numba), not the HTTP
    LLM client, the servers or the model runtimes."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("Use tail -f to follow a log file as it grows.\n", encoding="utf-8")
    (kb / "b.md").write_text("chown changes the owner of a file.\n", encoding="utf-8")
    store = tmp_path / "store"
    assert cli_main(["ingest", str(kb), "--store", str(store), "-q"]) == 0  # in this process
    code = (
        "import contextlib, io\n"
        "from fastrag.cli.main import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    assert main(['search', {str(store)!r}, 'follow a log']) == 0\n"
        "assert 'a.md' in out.getvalue(), out.getvalue()\n"
    )
    loaded = _loaded_after(code)
    unwanted = {"torch", "tiktoken", "onnxruntime", "sentence_transformers", "fastapi"}
    unwanted |= {"uvicorn", "starlette", "mcp", "httpx", "pydantic"}
    assert _tops(loaded) & unwanted == set()
    assert "fastrag.llms.openai_like" not in loaded


def test_mcp_server_module_loads_no_store_or_kernels():
    """``fastrag mcp`` answers ``initialize`` before the store opens: its module loads the SDK
    later and no numba, pyarrow or store code (they load in the engine's thread)."""
    loaded = _loaded_after("import fastrag.integrations.mcp_server")
    assert _tops(loaded) & {"numba", "llvmlite", "scipy", "pyarrow", "pandas", "mcp"} == set()
    assert "fastrag.documents.document" not in loaded and "fastrag.serve.engine" not in loaded
