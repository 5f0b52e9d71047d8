"""The package's modules import each other without a circle, counting every import the
code names: at module level, under ``TYPE_CHECKING`` and inside functions. A circle means
a definition sits in the wrong module (the drafters read vLLM's names through
``adapters.active`` and are read by ``adapters.bound_drafters``: one module for both ran
the imports in a circle)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PLUGIN = "vllm_frozen_kv_mtp"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (``from a import b`` names ``a.b`` where
    ``b`` is a module, else ``a``)."""
    paths = sorted((REPO / PLUGIN).rglob("*.py"))
    modules = {_module_of(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in modules:
                        edges.add(sub)
                    elif node.module in modules:
                        edges.add(node.module)
        me = _module_of(path)
        graph[me] = edges - {me}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_of_the_package_imports_itself_in_a_circle() -> None:
    graph = import_graph()
    assert f"{PLUGIN}.adapters.active" in graph  # the walk read the package
    assert circles(graph) == []


def test_a_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
