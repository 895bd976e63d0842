"""No import cycle anywhere in the tree (DESIGN §3), checked on the source: nothing is imported.

The graph has one node per module of the six packages and an edge for every import a
module runs, at its top or inside a function: a cycle through a function-level import
is still two modules that need each other. Imports under ``if TYPE_CHECKING:`` never
run and are left out. ``from package import name`` is an edge to ``package.name`` when
that is a module, else to ``package``; importing a module does not count as an edge
to the packages above it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "kafkaio", "producers", "sandbox_workers", "consumers", "rewardbus")
TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING:
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _ours(name: str, known: dict[str, Path]) -> str | None:
    """``name`` or the nearest package above it that is one of our modules."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that ``name`` (at ``path``) imports when it runs."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                for alias in node.names
            ]
        found.update(t for t in (_ours(target, known) for target in targets) if t)
    return found - {name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
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
                components.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_one_cycle(sorted(component), edges) for component in components]


def _one_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A path from the component's first module back to itself, inside the component."""
    inside = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for target in sorted(edges[node] & inside):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                frontier.append(target)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def test_the_tree_has_no_import_cycle() -> None:
    found = [" -> ".join(cycle) for cycle in cycles(graph())]
    assert found == [], "import cycles:\n" + "\n".join(found)


def test_the_graph_is_read_from_the_whole_tree() -> None:
    edges = graph()
    assert set(PACKAGES) <= set(edges)
    assert len(edges) > 150
    assert "schemas" in edges["kafkaio.errors"]  # from schemas import RewardbusError
    assert "rewardbus.wiring" in edges["rewardbus.cli.worker"]  # imported in run()


def test_imports_that_run_are_edges_and_type_checking_ones_are_not(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg import sub\n"
        "if TYPE_CHECKING:\n"
        "    import pkg.hints\n"
        "else:\n"
        "    import pkg.fallback\n"
        "def f():\n"
        "    from .lazy import thing\n"
    )
    known = dict.fromkeys(["pkg", "pkg.sub", "pkg.hints", "pkg.fallback", "lazy"], source)
    assert imports("mod", source, known) == {"pkg.sub", "pkg.fallback", "lazy"}


def test_a_cycle_is_found_and_named() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
