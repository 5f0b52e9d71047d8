"""A drafting engine's summary line while it serves: a server's engine processes are
killed before their exit hooks run, so the drafter logs what it did (and the kernel
fallbacks so far) once per interval, from the rounds' host side."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from vllm_frozen_kv_mtp.drafters import stats as draft_stats
from vllm_frozen_kv_mtp.drafters.stats import DraftStats
from vllm_frozen_kv_mtp.kernels import fallbacks


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Clock]:
    c = _Clock()
    monkeypatch.setattr(draft_stats.time, "monotonic", c)
    fallbacks.reset()
    yield c
    fallbacks.reset()


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vllm.frozen_kv_mtp"]


def test_summary_is_logged_once_per_interval(
    clock: _Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vllm.frozen_kv_mtp")
    stats = DraftStats()
    stats.rounds += 1
    stats.count_round(4)
    stats.count_skipped()
    assert _lines(caplog) == []  # not due yet

    clock.now += draft_stats.LOG_INTERVAL_S
    stats.rounds += 1
    stats.count_round(3)
    assert _lines(caplog) == [
        "frozen_kv_mtp: 2 draft rounds (k=3: 1, k=4: 1); 0 sampled their drafts, the others "
        "drafted greedily; 1 steps with k=0; no CUDA graph counts (eager rounds, or the V1 "
        "runner)"
    ]
    clock.now += draft_stats.LOG_INTERVAL_S - 1
    stats.count_skipped()
    assert len(_lines(caplog)) == 1  # the next one is an interval after the last
    clock.now += 1
    stats.count_skipped()
    assert len(_lines(caplog)) == 2 and "3 steps with k=0" in _lines(caplog)[1]


def test_kernel_fallbacks_so_far_join_the_line(
    clock: _Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vllm.frozen_kv_mtp")
    stats = DraftStats()
    for _ in range(3):
        fallbacks.record("split_decode", "a batch the kernel cannot take")
    clock.now += draft_stats.LOG_INTERVAL_S
    stats.count_round(4)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # the first fallback's own warning, then the running count
    assert warnings[1].getMessage() == (
        'frozen_kv_mtp: kernel fallbacks in this process: draft_attention="split": 3 '
        "(then vLLM's attention kernels for that batch)"
    )


def test_as_dict_holds_counters_only() -> None:
    d = DraftStats().as_dict()
    assert "next_log_at" not in d and d["rounds"] == 0
