"""Kernel fallbacks are visible: a WARNING naming the option, what runs instead and the
reason; one count per kernel in ``kernels/fallbacks.py``, read through ``instrument``;
and a summary at interpreter exit."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from devkit import instrument
from vllm_frozen_kv_mtp.kernels import fallbacks


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    saved = fallbacks.counts(), fallbacks.launches()
    fallbacks.reset()
    yield
    fallbacks.reset()
    fallbacks._fallbacks.update(saved[0])
    fallbacks._launches.update(saved[1])


def test_a_fallback_warns_once_per_reason_and_counts_every_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="vllm.frozen_kv_mtp")
    fallbacks.record("dense_head", RuntimeError("compile error"))
    fallbacks.record("dense_head", RuntimeError("compile error"))
    fallbacks.record("split_decode", "a batch larger than the split workspace")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        'frozen_kv_mtp: dense_head="fused"/"fp8" kernel fell back to upstream\'s head for '
        "the rest of the process (RuntimeError: compile error)",
        'frozen_kv_mtp: draft_attention="split" kernel fell back to vLLM\'s attention '
        "kernels for that batch (a batch larger than the split workspace)",
    ]
    assert instrument.kernel_fallbacks() == {"dense_head": 2, "split_decode": 1}
    assert fallbacks.count("dense_head") == 2 and fallbacks.count("seed_rows") == 0


def test_every_fallback_names_a_known_kernel() -> None:
    with pytest.raises(KeyError):
        fallbacks.record("tiled", "no such kernel")
    assert instrument.kernel_fallbacks() == {}


def test_launches_are_counted_apart_from_fallbacks() -> None:
    fallbacks.launched("one_pass_softcap")
    assert instrument.kernel_launches() == {"one_pass_softcap": 1}
    assert instrument.kernel_fallbacks() == {} and fallbacks.summary() is None


def test_the_summary_is_logged_at_exit() -> None:
    code = (
        "import logging; logging.basicConfig(format='%(message)s')\n"
        "from vllm_frozen_kv_mtp.kernels import fallbacks\n"
        "fallbacks.record('seed_rows', RuntimeError('boom'))\n"
        "fallbacks.record('centroid_head', ValueError('bad shape'))\n"
    )
    err = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr
    last = err.strip().splitlines()[-1]
    assert last.startswith("frozen_kv_mtp: kernel fallbacks in this process: "), err
    assert 'centroid_head="fused" (or "auto", which picks it): 1' in last
    assert "the Model Runner V2 seed-row kernel: 1 (then torch ops" in last


def test_no_summary_at_exit_without_fallbacks() -> None:
    code = (
        "import logging; logging.basicConfig(format='%(message)s')\n"
        "from vllm_frozen_kv_mtp.kernels import fallbacks\n"
        "fallbacks.launched('split_decode')\n"
    )
    err = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr
    assert "fallbacks" not in err
