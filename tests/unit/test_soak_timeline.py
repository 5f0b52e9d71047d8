"""The soak's pure arithmetic (``serving/fuzz/timeline.py``): the load's concurrency wave,
the per-minute rows and the pass/fail criteria, on hand-made records and samples."""

from __future__ import annotations

from typing import Any

import pytest

from devkit.serving.fuzz import timeline as tl
from devkit.serving.fuzz.timeline import RequestRecord, Sample

DURATION = 240.0  # four 60 s quarters


def test_concurrency_wave_rises_and_falls_the_same_way_every_quarter() -> None:
    c = [tl.concurrency_at(t, DURATION, 64, 256, 8) for t in range(0, 240)]
    assert min(c) == 64 and max(c) == 256
    assert c[0] == 64 and c[15] == 256 and c[30] == 64  # a 30 s period
    quarters = [c[q * 60 : (q + 1) * 60] for q in range(4)]
    assert all(q == quarters[0] for q in quarters)
    assert tl.concurrency_at(5, DURATION, 8, 8, 4) == 8  # flat when c_min == c_max
    assert tl.concurrency_at(5, 0, 8, 16, 4) == 8


def test_percentile_is_nearest_rank() -> None:
    assert tl.percentile([], 50) is None
    assert tl.percentile([3.0], 99) == 3.0
    values = [float(v) for v in range(1, 101)]
    assert tl.percentile(values, 50) == 50.0 and tl.percentile(values, 99) == 99.0
    assert tl.percentile(list(reversed(values)), 100) == 100.0


def _sample(t: float, pre: float, rounds: dict[int, int], misses: int, **kw: Any) -> Sample:
    return Sample(t=t, preemptions=pre, rounds_by_k=rounds, graph_misses=misses, **kw)


def test_buckets_count_requests_where_they_end_and_counters_as_deltas() -> None:
    records = [
        RequestRecord(0.0, 10.0, tl.OK, 10, sampled=True),
        RequestRecord(5.0, 25.0, tl.OK, 40),
        RequestRecord(30.0, 50.0, tl.ABORTED, 3),
        RequestRecord(40.0, 70.0, tl.OK, 30),
        RequestRecord(41.0, 71.0, tl.ERROR_5XX),
        RequestRecord(42.0, 72.0, tl.ERROR_OTHER),
        RequestRecord(100.0, 130.0, tl.OK, 30),  # ends after the load: the last bucket
    ]
    samples = [
        _sample(0, 0, {}, 0, gpu_mem_mib=1000.0, rss_mib=500.0, target_concurrency=4),
        _sample(30, 2, {0: 1, 3: 10}, 0, gpu_mem_mib=1010.0, drafts=10.0, accepted=15.0),
        _sample(60, 5, {0: 2, 3: 20, 4: 5}, 1, gpu_mem_mib=1005.0, healthy=False),
        _sample(90, 5, {0: 2, 3: 20, 4: 5}, 1, target_graph_modes={"FULL": 7}),
    ]
    rows = tl.buckets(records, samples, 60.0, 120.0)
    assert len(rows) == 2
    a, b = rows
    assert (a["served"], a["aborted"], a["errors_5xx"], a["errors_other"]) == (2, 1, 0, 0)
    assert (b["served"], b["errors_5xx"], b["errors_other"]) == (2, 1, 1)
    assert a["latency_p50_s"] == 10.0 and a["latency_p99_s"] == 20.0
    assert a["ms_per_token_p50"] == 500.0  # 20 s / 40 tokens, 10 s / 10 tokens: nearest rank
    assert a["sampled_share"] == 0.5
    assert a["preemptions"] == 2 and b["preemptions"] == 3
    assert a["k_histogram"] == {0: 1, 3: 10} and b["k_histogram"] == {0: 1, 3: 10, 4: 5}
    assert a["graph_misses"] == 0 and b["graph_misses"] == 1
    assert a["mean_acceptance_length"] == 2.5 and b["mean_acceptance_length"] is None
    assert a["gpu_mem_mib_max"] == 1010.0 and b["gpu_mem_mib_max"] == 1005.0
    assert b["target_graph_modes"] == {"FULL": 7}
    assert (a["unhealthy_samples"], b["unhealthy_samples"]) == (0, 1)
    assert a["output_tok_s"] == round(50 / 60, 1)


def test_buckets_without_samples_or_records() -> None:
    rows = tl.buckets([], [], 60.0, 90.0)
    assert [r["served"] for r in rows] == [0, 0]
    assert rows[0]["latency_p50_s"] is None and rows[0]["k_histogram"] == {}


def _steady_run(
    q4_latency: float = 1.0, q4_gpu: float = 1000.0, misses_late: int = 0
) -> tuple[list[RequestRecord], list[Sample]]:
    records = []
    for q, lat in enumerate([3.0, 1.0, 1.0, q4_latency]):
        for i in range(20):
            end = q * 60 + 5 + 2 * i
            records.append(RequestRecord(end - lat, end, tl.OK, 10))
    records.append(RequestRecord(10, 12, tl.ABORTED))
    samples = []
    for t in range(0, 240, 10):
        q = int(t // 60)
        samples.append(
            Sample(
                t=t,
                preemptions=float(t),
                gpu_mem_mib=q4_gpu if q == 3 else 1000.0,
                rss_mib=800.0,
                graph_misses=3 + (misses_late if q == 3 else 0),  # 3 during warm-up
            )
        )
    return records, samples


END = {"engine_death_lines": 0, "alive": True, "final_request_ok": True, "kv_usage": 0.0}


def test_criteria_pass_a_steady_run() -> None:
    records, samples = _steady_run()
    c = tl.criteria(records, samples, DURATION, END, graphs=True)
    assert all(v["ok"] for v in c.values()), c
    assert c["no_latency_drift"]["value"] == {"p50_q2_s": 1.0, "p50_q4_s": 1.0}
    assert c["no_graph_misses_at_steady_state"]["value"] == 0  # warm-up misses are allowed
    assert c["preempted"]["value"] == 230


@pytest.mark.parametrize(
    "change, failing",
    [
        ({"q4_latency": 1.3}, "no_latency_drift"),
        ({"q4_gpu": 1100.0}, "gpu_memory_flat"),
        ({"misses_late": 1}, "no_graph_misses_at_steady_state"),
    ],
)
def test_criteria_fail_drift_memory_growth_and_late_graph_misses(
    change: dict[str, Any], failing: str
) -> None:
    records, samples = _steady_run(**change)
    c = tl.criteria(records, samples, DURATION, END, graphs=True)
    assert [k for k, v in c.items() if not v["ok"]] == [failing]


def test_criteria_fail_deaths_errors_no_preemption_and_kv_left() -> None:
    records, samples = _steady_run()
    bad = {"engine_death_lines": 1, "alive": True, "final_request_ok": True, "kv_usage": 0.0}
    assert not tl.criteria(records, samples, DURATION, bad, graphs=True)["zero_engine_deaths"]["ok"]
    dead = {**END, "alive": False}
    assert not tl.criteria(records, samples, DURATION, dead, graphs=True)["zero_engine_deaths"][
        "ok"
    ]
    samples[4].healthy = False
    c = tl.criteria(records, samples, DURATION, END, graphs=True)
    assert c["zero_engine_deaths"]["value"] == {"deaths": 0, "unhealthy_samples": 1}
    assert not c["zero_engine_deaths"]["ok"]
    records.append(RequestRecord(1, 2, tl.ERROR_5XX))
    records.append(RequestRecord(1, 2, tl.ERROR_4XX))
    c = tl.criteria(records, samples, DURATION, {**END, "kv_usage": 0.01}, graphs=True)
    assert c["no_errors"]["value"] == {"5xx": 1, "other": 1} and not c["no_errors"]["ok"]
    assert not c["kv_back_to_0"]["ok"]
    for s in samples:
        s.preemptions = 0.0
    assert not tl.criteria(records, samples, DURATION, END, graphs=True)["preempted"]["ok"]


def test_criteria_without_gpu_memory_or_graphs() -> None:
    records, samples = _steady_run(misses_late=5)
    for s in samples:
        s.gpu_mem_mib = None
    c = tl.criteria(records, samples, DURATION, END, graphs=False)
    assert "gpu_memory_flat" not in c and c["host_memory_flat"]["ok"]
    assert c["no_graph_misses_at_steady_state"]["ok"]  # eager: nothing to miss
    samples[-1].rss_mib = 900.0  # +12.5% in the last quarter
    assert not tl.criteria(records, samples, DURATION, END, graphs=False)["host_memory_flat"]["ok"]


def test_criteria_fail_when_a_quarter_served_nothing() -> None:
    records, samples = _steady_run()
    late = [r for r in records if r.end < 180]
    c = tl.criteria(late, samples, DURATION, END, graphs=True)
    assert not c["no_latency_drift"]["ok"]
    assert c["no_latency_drift"]["value"]["p50_q4_s"] is None


def test_totals() -> None:
    records, samples = _steady_run()
    samples[-1].rounds_by_k = {0: 4, 2: 9}
    t = tl.totals(records, samples)
    assert t["requests"] == 81 and t["outcomes"] == {tl.ABORTED: 1, tl.OK: 80}
    assert t["preemptions"] == 230 and t["k_histogram"] == {0: 4, 2: 9}
    assert t["latency_p50_s"] == 1.0 and t["latency_p99_s"] == 3.0
    assert tl.totals([], [])["k_histogram"] == {}
