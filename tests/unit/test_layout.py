"""The repository's layout rules, read from the sources with ``ast``: the wheel holds the
plugin only and imports none of the lab around it, only the adapter imports vLLM, and
the benchmarks do not import the tests."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from setuptools import find_packages

from tests.conftest import REPO

PLUGIN = "vllm_frozen_kv_mtp"
LAB = ("devkit", "bench", "tests", "tools")
#: the one place that imports vLLM's names for the plugin (see adapters/__init__.py)
ADAPTERS = f"{PLUGIN}/adapters/"
#: public vLLM names read outside the adapter
PUBLIC = {"vllm.version"}


def imports(root: str) -> Iterator[tuple[str, int, str]]:
    """(file, line, imported module) of every import under ``root``, at any depth."""
    for path in sorted((REPO / root).rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                yield rel, node.lineno, node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield rel, node.lineno, alias.name


def _top(module: str) -> str:
    return module.split(".")[0]


def test_the_plugin_imports_none_of_the_lab() -> None:
    found = [f"{f}:{n} imports {m}" for f, n, m in imports(PLUGIN) if _top(m) in LAB]
    assert not found, "\n".join(found)


def test_only_the_adapter_imports_vllm() -> None:
    found = [
        f"{f}:{n} imports {m}"
        for f, n, m in imports(PLUGIN)
        if _top(m) == "vllm" and not f.startswith(ADAPTERS) and m not in PUBLIC
    ]
    assert not found, "\n".join(found)


def test_bench_does_not_import_the_tests() -> None:
    found = [f"{f}:{n} imports {m}" for f, n, m in imports("bench") if _top(m) == "tests"]
    assert not found, "\n".join(found)


def _setup_includes() -> list[str]:
    """The ``include`` list that setup.py hands ``find_packages``."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "find_packages":
            (include,) = [k.value for k in node.keywords if k.arg == "include"]
            return list(ast.literal_eval(include))
    raise AssertionError("setup.py no longer calls find_packages(include=...)")


def test_the_wheel_packages_the_plugin_only() -> None:
    packages = find_packages(str(REPO), include=_setup_includes())
    assert PLUGIN in packages and f"{PLUGIN}.adapters.vllm_0_32" in packages
    assert all(_top(p) == PLUGIN for p in packages), packages
    assert not (Path(REPO) / PLUGIN / "fixtures").exists(), "the fixtures moved to devkit/"
