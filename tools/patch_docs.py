"""Rewrite each patch body's docstring from the registry (``vllm_frozen_kv_mtp/patches``).

``python -m tools.patch_docs`` keeps each body module's own text (what precedes the
generated header) and replaces the rest with the body's registry entries, as
``patches.body_doc`` renders them. ``--check`` changes nothing and exits 1 when a body
has drifted (tests/unit/test_patch_docs.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

from vllm_frozen_kv_mtp import patches


def bodies() -> list[str]:
    """Every module that holds a registry entry's body, in registry order."""
    return list(dict.fromkeys(p.body for p in patches.PATCHES))


def own_text(doc: str) -> str:
    """The part of a body's docstring written by hand: all before the generated header."""
    return doc.split(patches.GENERATED, 1)[0].rstrip()


def wanted_doc(module: str) -> str:
    doc = importlib.import_module(module).__doc__ or ""
    return own_text(doc) + "\n\n" + patches.body_doc(module) + "\n"


def rewrite(module: str) -> bool:
    """Give ``module``'s source the wanted docstring; whether the file changed."""
    path = Path(importlib.import_module(module).__file__ or "")
    source = path.read_text()
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant), path
    lines = source.splitlines(keepends=True)
    assert node.end_lineno is not None
    head, tail = "".join(lines[: node.lineno - 1]), "".join(lines[node.end_lineno :])
    text = wanted_doc(module)
    assert '"""' not in text and "\\" not in text, f"{module}: the entry needs escaping"
    new = head + '"""' + text + '"""\n' + tail
    if new == source:
        return False
    path.write_text(new)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, change nothing")
    args = parser.parse_args(argv)
    drifted = [m for m in bodies() if (importlib.import_module(m).__doc__ or "") != wanted_doc(m)]
    if args.check:
        for m in drifted:
            print(f"{m}: docstring differs from the registry", file=sys.stderr)
        return 1 if drifted else 0
    for m in bodies():
        if rewrite(m):
            print(f"rewrote {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
