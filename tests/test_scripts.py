"""scripts/ stays small and acyclic, and the figure registry (scripts/figs/registry.py) says the truth.

The imports of every file under scripts/ are read with `ast` (module level and inside functions, relative
imports and `importlib.import_module("...")` with a literal name): no cycle among them, and no file over
400 lines. Importing `a.b` runs `a/__init__.py` first, so it counts as importing the package `a` too.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
MAX_LINES = 400


def local_modules(root: Path) -> dict[str, Path]:
    """Module name as imported with `root` on sys.path (`figs.base`, `figs` for figs/__init__.py) -> file."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported_names(path: Path, module: str) -> Iterator[str]:
    """Every dotted name the file imports (or might: `from a import b` gives `a` and `a.b`)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                prefix = package[: len(package) - (node.level - 1)]
                base = ".".join(prefix + ([node.module] if node.module else []))
            else:
                base = node.module
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def import_graph(root: Path) -> dict[str, set[str]]:
    """Local module -> the local modules its import statements run (each prefix of a dotted name)."""
    modules = local_modules(root)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            parts = name.split(".")
            targets |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()
        graph[module] = targets - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a closed path `[a, b, ..., a]`, or None (depth-first search)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_among_the_scripts():
    graph = import_graph(SCRIPTS)
    assert {"figures", "figs", "figs.base", "figs.registry", "run_experiments"} <= graph.keys()
    assert "figs.base" in graph["run_experiments"] and "run_experiments" in graph["figs.ch08_comparison"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in scripts/: " + " -> ".join(cycle)


def test_the_cycle_check_sees_function_level_and_package_init_cycles(tmp_path):
    (tmp_path / "a.py").write_text("import b\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n", encoding="utf-8")
    assert find_cycle(import_graph(tmp_path)) == ["a", "b", "a"]
    (tmp_path / "b.py").write_text("X = 1\n", encoding="utf-8")
    assert find_cycle(import_graph(tmp_path)) is None
    # c imports pkg.base, which runs pkg/__init__.py, which imports pkg.m, which imports c
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import m\n", encoding="utf-8")
    (tmp_path / "pkg" / "base.py").write_text("X = 1\n", encoding="utf-8")
    (tmp_path / "pkg" / "m.py").write_text("import c\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("from pkg.base import X\n", encoding="utf-8")
    assert find_cycle(import_graph(tmp_path)) == ["c", "pkg", "pkg.m", "c"]


@pytest.mark.parametrize("path", sorted(SCRIPTS.rglob("*.py")), ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_no_script_is_longer_than_400_lines(path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines: split it (see scripts/figs/ for the pattern)"


def test_every_registered_figure_is_on_its_page_and_reads_an_existing_cache():
    sys.path.insert(0, str(SCRIPTS))
    from figs.registry import REGISTRY

    docs = ROOT / "docs"
    for name, figure in REGISTRY.items():
        assert figure.path.exists(), f"{name}: {figure.path} is not committed"
        src = figure.path.relative_to(docs).as_posix()
        assert f"]({src})" in (docs / figure.page).read_text(encoding="utf-8"), f"{name}: not on {figure.page}"
        if figure.cache is not None:
            assert (ROOT / figure.cache).is_file(), f"{name}: no cache {figure.cache}"


def test_every_committed_figure_has_a_script_that_draws_it():
    sys.path.insert(0, str(SCRIPTS))
    import run_reasoning
    from figs.registry import REGISTRY

    drawn = {f.path for f in REGISTRY.values()} | set(run_reasoning.FIGURES.values())
    orphans = sorted(p.name for p in (ROOT / "docs" / "figures").glob("*.svg") if p not in drawn)
    assert not orphans, f"figures no script draws: {orphans}"
