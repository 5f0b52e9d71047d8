"""The bench's client-side latencies and draft-round share (pure logic, no engine)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench.request_timing import ChunkClock, draft_fields, latency_fields
from bench.token_timing import Latencies


class _Processor:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def process_outputs(self, outputs: list[Any], *args: Any, **kwargs: Any) -> str:
        self.seen.append(outputs)
        return "processed"


def _out(rid: str, n: int) -> Any:
    return SimpleNamespace(request_id=rid, new_token_ids=list(range(n)))


def test_chunk_clock_stamps_chunks_and_keeps_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _Processor()
    clock = ChunkClock()
    clock.wrap(proc)
    times = iter([10.0, 10.02, 10.05])
    monkeypatch.setattr("bench.request_timing.time.perf_counter", lambda: next(times))
    # step 1: both requests' first chunk; step 2: only "a" (b's output carried no token);
    # step 3: "a" with three accepted tokens in one chunk, "b" again
    assert proc.process_outputs([_out("a", 1), _out("b", 1)]) == "processed"
    proc.process_outputs([_out("a", 2), _out("b", 0)])
    proc.process_outputs([_out("a", 3), _out("b", 1)])
    lat = clock.latencies(submitted=9.9)
    assert lat.ttft_ms == pytest.approx([100.0, 100.0])
    # a: gaps 20 ms and 30 ms; b: one gap of 50 ms
    assert sorted(lat.itl_ms) == pytest.approx([20.0, 30.0, 50.0])
    assert clock.events[1] == (10.02, {"a": 2})
    clock.clear()
    assert clock.latencies(0.0).itl_ms == []
    assert len(proc.seen) == 3


def test_latency_and_draft_fields() -> None:
    f = latency_fields(Latencies(ttft_ms=[10.0, 30.0, 20.0], itl_ms=[1.0, 2.0, 3.0, 4.0, 100.0]))
    assert f["ttft_p50_ms"] == 20.0
    assert f["itl_p50_ms"] == 3.0
    assert f["itl_p90_ms"] == pytest.approx(61.6)  # linear between ranks, as numpy
    assert latency_fields(Latencies())["itl_p90_ms"] is None
    # 10 rounds of 1.5 ms over 12 steps (two k = 0 steps) at 5 ms a step
    d = draft_fields([1.5] * 10, steps=12, step_ms=5.0)
    assert d["draft_ms_per_step"] == pytest.approx(1.25)
    assert d["draft_share"] == pytest.approx(0.25)
    assert draft_fields([], 12, 5.0) == {"draft_ms_per_step": None, "draft_share": None}
