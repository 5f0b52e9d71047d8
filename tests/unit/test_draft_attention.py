"""``set_sliding_split_kv_max_rows``: which drafter builders change, and by how much.

Pure logic over vLLM's attention-group layout (stand-in groups and builders); the
engine-level effect (same greedy output, the drafter's TRITON_ATTN builders changed)
is a GPU test in tests/gpu/test_gpu_frozen_kv.py.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from vllm_frozen_kv_mtp.options import VLLM_SPLIT_KV_THRESHOLD as VLLM_DEFAULT
from vllm_frozen_kv_mtp.patches.sliding_split_kv import set_sliding_split_kv_max_rows


def _groups() -> list[list[SimpleNamespace]]:
    def group(window: int | None, names: list[str], threshold: int | None) -> SimpleNamespace:
        builder = SimpleNamespace()
        if threshold is not None:
            builder.seq_threshold_3D = threshold
        return SimpleNamespace(
            kv_cache_spec=SimpleNamespace(sliding_window=window),
            layer_names=names,
            metadata_builders=[builder],
        )

    return [
        [group(512, ["d.0", "d.1", "d.2"], 64)],  # sliding, TRITON_ATTN
        [group(None, ["d.3"], 64)],  # full attention: untouched
        [],  # a KV-cache group with no drafter layer
        [group(512, ["x.0"], None)],  # a backend without a split-KV threshold
    ]


def _thresholds(groups: list[list[SimpleNamespace]]) -> list[int | None]:
    builders = [b for gs in groups for g in gs for b in g.metadata_builders]
    return [getattr(b, "seq_threshold_3D", None) for b in builders]


def test_only_sliding_triton_builders_change() -> None:
    groups = _groups()
    changed = set_sliding_split_kv_max_rows(groups, 8)
    assert changed == {"d.0": 8, "d.1": 8, "d.2": 8}
    assert _thresholds(groups) == [8, 64, None]


def test_default_changes_nothing_and_zero_never_splits() -> None:
    groups = _groups()
    assert set_sliding_split_kv_max_rows(groups, VLLM_DEFAULT) == {}
    assert _thresholds(groups) == [64, 64, None]
    assert set_sliding_split_kv_max_rows(groups, 0) == {"d.0": 0, "d.1": 0, "d.2": 0}


def test_threshold_never_rises_past_the_scratch_vllm_sized() -> None:
    # vLLM sizes the split-KV scratch for seq_threshold_3D rows at start-up.
    groups = _groups()
    assert set_sliding_split_kv_max_rows(groups, 256) == {"d.0": 64, "d.1": 64, "d.2": 64}
    assert _thresholds(groups) == [64, 64, None]


def test_layers_of_another_backend_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """FA4 (vLLM's pick for Gemma 4 on a stock Hopper install) has no split-KV threshold:
    the option is said not to apply there, with the layers it leaves alone."""
    with caplog.at_level(logging.WARNING, logger="vllm.frozen_kv_mtp"):
        set_sliding_split_kv_max_rows(_groups(), 8)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "needs the TRITON_ATTN backend" in warnings[0]
    assert "['x.0']" in warnings[0] and "SimpleNamespace" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vllm.frozen_kv_mtp"):
        set_sliding_split_kv_max_rows(_groups(), VLLM_DEFAULT)  # option unset: no word
    assert not caplog.records
