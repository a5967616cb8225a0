"""The tree shows the data flow: no import cycle anywhere in ``monitor/`` (imports inside functions and under
``TYPE_CHECKING`` included), few modules at the top, and nothing imports the commands.

The layering rules themselves (stages never import the composition root, rubrics never import the judge) are
import-linter contracts in ``pyproject.toml``, run by ``scripts/test.sh``; this file proves what import-linter
does not: that the module graph has no cycle at all.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "monitor"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every module of ``modules`` that ``path`` imports, wherever the import statement stands."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from a import b`` imports the module ``a.b`` when there is one, else a name of ``a``; either way it
            # runs ``a``'s ``__init__`` first, which counts as an import of ``a``.
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    paths = {module_name(p, root): p for p in root.rglob("*.py") if "migrations" not in p.parts}
    modules = set(paths)
    return {name: imports_of(path, name, modules) for name, path in paths.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        # Recursion depth is bounded by the number of modules (a few hundred).
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg.sub import b\n")
    (root / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (root / "c.py").write_text("import pkg.a\n")
    (root / "d.py").write_text("from pkg import a\n")
    assert cycles(import_graph(root)) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_no_module_of_monitor_is_part_of_an_import_cycle() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_nothing_in_monitor_imports_the_commands() -> None:
    graph = import_graph(PACKAGE)
    importers = sorted(name for name, targets in graph.items() if not name.startswith("monitor.cli")
                       and name != "monitor.__main__" and any(t.startswith("monitor.cli") for t in targets))
    assert importers == []


def test_a_dozen_modules_at_most_at_the_top_of_monitor() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
