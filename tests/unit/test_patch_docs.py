"""Each patch body's docstring carries its registry entries as the registry renders them,
so the why, how, upstream and removal condition cannot drift between the two."""

from __future__ import annotations

import importlib

import pytest

from tools.patch_docs import bodies, own_text, wanted_doc
from vllm_frozen_kv_mtp import patches


def test_every_entry_has_a_body_module() -> None:
    for p in patches.PATCHES:
        assert p.body.startswith("vllm_frozen_kv_mtp.patches."), p.target
        assert p.why and p.how and p.upstream and p.remove_when, p.target


@pytest.mark.parametrize("module", bodies())
def test_body_docstring_is_generated_from_the_registry(module: str) -> None:
    doc = importlib.import_module(module).__doc__ or ""
    assert own_text(doc), f"{module} lost its own summary line"
    assert doc == wanted_doc(module), (
        f"{module}'s docstring differs from its registry entries: edit the entry in "
        "vllm_frozen_kv_mtp/patches/__init__.py, then run `python -m tools.patch_docs`"
    )


def test_the_registry_docstring_lists_every_entry() -> None:
    doc = patches.__doc__ or ""
    for p in patches.PATCHES:
        assert patches.describe(p) in doc
