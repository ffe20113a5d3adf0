"""The package's imports: the layers and other contracts of ``[tool.importlinter]`` in pyproject.toml
hold (import-linter, which reads every import statement, also those inside functions; docs/
architecture.md), and there are no import circles in ``charllm_trace``: no module imports one
that (directly or through others) imports it back (the layers say nothing about modules of one
package).

The imports are read from the source (``ast``), not by importing. Every import statement of a
module counts, also those inside functions: a deferred import only postpones the circle to the
first call (the five-module circle of issue 12 ran through such imports). Imports under
``if TYPE_CHECKING:`` do not count (they never run). ``from pkg import name`` depends on the
submodule ``pkg.name`` when there is one (a ``.py`` file, a package, or a compiled extension,
which imports nothing of ours), else on ``pkg`` itself. Importing ``a.b.c`` also runs
``a/__init__`` and ``a/b/__init__``; those implicit parent imports are not edges (every module
would otherwise sit in a circle with its package's ``__init__``).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from importlinter.api import read_configuration
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "charllm_trace"


def _modules(pkg_dir: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package)."""
    out = {}
    for p in sorted(pkg_dir.rglob("*.py")):
        parts = list(p.relative_to(pkg_dir.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (p, is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _is_compiled(pkg_dir: Path, name: str) -> bool:
    """A compiled extension module ``name`` in ``pkg_dir`` (built, or its C source is there)."""
    return (
        (pkg_dir / f"{name}.c").exists()
        or any(pkg_dir.glob(f"{name}.*.so"))
        or any(pkg_dir.glob(f"{name}.*.pyd"))
    )


def import_graph(pkg_dir: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its code)."""
    mods = _modules(pkg_dir)
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        here = name if is_pkg else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
                continue
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                full = f"{target}.{a.name}"
                if full in mods:
                    deps.add(full)
                elif target in mods and not (
                    mods[target][1] and _is_compiled(mods[target][0].parent, a.name)
                ):
                    deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
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


def test_the_package_has_no_import_circles() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "charllm_trace.et.reader" in graph  # the walk found the package
    found = cycles(graph)
    detail = [" -> ".join(c) for c in found]
    assert not found, "import circles (each a set of modules that import each other):\n" + "\n".join(detail)


def test_the_checker_finds_a_circle_through_deferred_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n    return b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n"
        "def g():\n    from . import _ext\n    from ..c import h\n"
    )
    (pkg / "sub" / "_ext.c").write_text("")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.c"}  # the TYPE_CHECKING import and the extension are not edges
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_the_import_contracts_hold(capsys) -> None:
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert "Contracts: " in out and " kept, 0 broken" in out, out
    assert code == 0, out


def test_the_contracts_list_few_exemptions() -> None:
    """At most a few ``ignore_imports`` lines in all, each an exception the config explains."""
    contracts = read_configuration(str(ROOT / "pyproject.toml"))["contracts_options"]
    assert {c["type"] for c in contracts} >= {"layers", "forbidden"}
    assert sum(len(c.get("ignore_imports", [])) for c in contracts) <= 5


def _lint_copy(tmp_path: Path, module: str, source: str) -> subprocess.CompletedProcess[str]:
    """import-linter with this repository's contracts on a copy of the package holding one more
    module (in a child process: this one has imported the real package already)."""
    shutil.copytree(PACKAGE, tmp_path / "charllm_trace", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "charllm_trace" / Path(*module.split("."))).with_suffix(".py").write_text(source)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_deferred_import_up_the_layers_breaks_the_contract(spawn, tmp_path: Path) -> None:
    """The contracts see an import inside a function (what the ``ast`` walk of issue 12 hid): an
    analysis that imports a renderer breaks the layers and, through the renderer's ``rich``, the
    no-terminal contract; one that imports torch breaks its own contract."""
    r = _lint_copy(
        tmp_path,
        "analysis.probe",
        "def f():\n    from charllm_trace.render import tables\n    import torch\n    return tables, torch\n",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "charllm_trace.analysis is not allowed to import charllm_trace.render" in r.stdout, r.stdout
    assert "charllm_trace.analysis.probe -> charllm_trace.render.tables" in r.stdout, r.stdout
    assert "charllm_trace.analysis is not allowed to import rich" in r.stdout, r.stdout
    assert "charllm_trace.analysis.probe -> torch" in r.stdout, r.stdout
    assert "Contracts: 3 kept, 3 broken" in r.stdout, r.stdout
