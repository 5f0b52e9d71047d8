"""The long-context byte model behind the bounded-draft-context break-even."""

from __future__ import annotations

from typing import Any

import pytest

from bench.bounded_bytes import (
    draft_kv_bytes,
    estimate,
    kv_bytes_per_key,
    measured_steps,
    slope,
    verify_kv_bytes,
)
from vllm_frozen_kv_mtp.frontend.published_sizes import shape


def test_bytes_per_key_follow_the_shapes() -> None:
    e4b, b31 = shape("E4B").target, shape("31B").target
    assert kv_bytes_per_key(e4b, "full_attention") == 2 * 512 * 2 * 2  # 2 KV heads x 512
    assert kv_bytes_per_key(e4b, "sliding_attention") == 2 * 256 * 2 * 2
    assert kv_bytes_per_key(b31, "full_attention") == 4 * 512 * 2 * 2  # global KV heads
    assert kv_bytes_per_key(b31, "sliding_attention") == 16 * 256 * 2 * 2


def test_draft_and_verify_reads() -> None:
    full = draft_kv_bytes("E4B", 32768)
    assert full == {"global": 32768 * 4096, "sliding": 3 * 512 * 2048}
    assert draft_kv_bytes("E4B", 32768, (4, 512))["global"] == 516 * 4096
    assert draft_kv_bytes("E4B", 300, (4, 512)) == draft_kv_bytes("E4B", 300)
    # E4B's target: 7 global layers over every key, 35 sliding over the window of 512
    assert verify_kv_bytes("E4B", 32768) == 7 * 32768 * 4096 + 35 * 512 * 2048


def test_slope_and_measured_steps() -> None:
    assert slope({1: 6.0, 3: 7.0, 5: 8.0}) == pytest.approx(0.5)
    assert slope({4: 7.0}) is None
    base: dict[str, Any] = {"model": "E4B", "method": "frozen_kv_mtp", "profile": "code"}
    base |= {"attention": "TRITON_ATTN", "concurrency": 8, "prompt_len": 128}
    rows = [
        base | {"k": 2, "step_ms": 7.0},
        base | {"k": 2, "step_ms": 9.0},
        base | {"k": 4, "step_ms": 9.0},
        base | {"k": 4, "step_ms": 99.0, "temperature": 1.0},  # sampled: not this model
        base | {"k": 4, "step_ms": 99.0, "prompt_len": 8192},
    ]
    assert measured_steps(rows, "E4B") == {8: {2: 8.0, 4: 9.0}}


def test_estimate_break_even() -> None:
    steps = {8: {2: 8.0, 4: 9.0}}
    r = estimate("E4B", 32768, 8, 4, steps, 2.0, (4, 512))
    assert r is not None
    ms_per_byte = 1e-9 / 2.0
    saved = 4 * 8 * (32768 - 516) * 4096 * ms_per_byte
    assert r["bounded_saves_ms"] == pytest.approx(saved, abs=1e-3)
    assert r["break_even_al_loss"] == pytest.approx(saved / r["step_ms"], abs=1e-3)
    assert r["draft_step_rest_ms"] == pytest.approx(0.5)
    assert estimate("E4B", 32768, 32, 4, steps, 2.0, (4, 512)) is None
