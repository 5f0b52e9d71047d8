"""The soak's arithmetic, free of servers: the load's concurrency over time, the per-minute
rows (requests served, latency, preemptions, memory, k histogram, graph misses) built from
request records and periodic samples, and the pass/fail criteria over them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: request outcomes: served, dropped by the client on purpose, or failed
OK, ABORTED, ERROR_5XX, ERROR_4XX, ERROR_OTHER = "ok", "aborted", "5xx", "4xx", "other"


@dataclass(frozen=True)
class RequestRecord:
    """One soak request; times in seconds since the load started."""

    start: float
    end: float
    outcome: str
    output_tokens: int = 0
    sampled: bool = False
    #: what went wrong (the error body or exception), for failed requests
    detail: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class Sample:
    """What the sampler saw at ``t`` (seconds since the load started). Counters are the
    server's cumulative values; ``None`` where a reading failed."""

    t: float
    healthy: bool = True
    alive: bool = True
    target_concurrency: int = 0
    in_flight: int = 0
    preemptions: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    drafts: float | None = None
    accepted: float | None = None
    gpu_mem_mib: float | None = None
    rss_mib: float | None = None
    #: draft rounds per k so far (k = 0: steps without a round), from the stats probe
    rounds_by_k: dict[int, int] = field(default_factory=dict)
    graph_misses: int | None = None
    #: target steps per CUDA-graph runtime mode so far (vLLM's --cudagraph-metrics)
    target_graph_modes: dict[str, int] = field(default_factory=dict)


def concurrency_at(t: float, duration: float, c_min: int, c_max: int, periods: int) -> int:
    """A triangle wave from ``c_min`` up to ``c_max`` and back, ``periods`` times over
    ``duration``: arrivals while it rises, departures while it falls. With ``periods`` a
    multiple of 4 every quarter of the run sees the same load, so quarters compare."""
    if duration <= 0 or periods <= 0 or c_max <= c_min:
        return c_min
    phase = (t / (duration / periods)) % 1.0
    up = 2 * phase if phase < 0.5 else 2 * (1 - phase)
    return int(round(c_min + (c_max - c_min) * up))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _delta(now: Mapping[Any, int | float], before: Mapping[Any, int | float]) -> dict[Any, Any]:
    out = {k: v - before.get(k, 0) for k, v in now.items()}
    return {k: v for k, v in sorted(out.items()) if v}


def _at(ordered: Sequence[Sample], t: float | None, attr: str) -> Any:
    """The newest reading of ``attr`` at or before ``t`` (None: all) that did not fail; a
    missing reading (a failed scrape) must not count as a drop to zero."""
    for s in reversed(ordered):
        v = getattr(s, attr)
        if (t is None or s.t < t) and v is not None and v != {}:
            return v
    return None


def _counter_delta(ordered: Sequence[Sample], t0: float, t1: float | None, attr: str) -> float:
    return float(_at(ordered, t1, attr) or 0.0) - float(_at(ordered, t0, attr) or 0.0)


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def buckets(
    records: Sequence[RequestRecord], samples: Sequence[Sample], bucket_s: float, duration: float
) -> list[dict[str, Any]]:
    """One row per ``bucket_s`` of the load: requests by the bucket they ended in, counters
    as the change between the last sample of the bucket and the last one before it."""
    n = max(1, math.ceil(duration / bucket_s))
    ordered = sorted(samples, key=lambda s: s.t)
    rows = []
    for i in range(n):
        t0, t1 = i * bucket_s, min((i + 1) * bucket_s, duration)
        last = i == n - 1
        upto = None if last else t1  # the last bucket takes what came after the load
        done = [r for r in records if t0 <= r.end < t1 or (last and r.end >= t1)]
        inside = [s for s in ordered if t0 <= s.t < t1 or (last and s.t >= t1)]
        ok = [r for r in done if r.outcome == OK]
        lat = [r.latency for r in ok]
        tpot = [1000 * r.latency / r.output_tokens for r in ok if r.output_tokens]
        tokens = sum(r.output_tokens for r in ok)
        drafts = _counter_delta(ordered, t0, upto, "drafts")
        accepted = _counter_delta(ordered, t0, upto, "accepted")
        misses = None
        if _at(ordered, upto, "graph_misses") is not None:
            misses = int(_counter_delta(ordered, t0, upto, "graph_misses"))
        rows.append(
            {
                "bucket": i,
                "t0_s": round(t0, 1),
                "t1_s": round(t1, 1),
                "served": len(ok),
                "aborted": sum(r.outcome == ABORTED for r in done),
                "errors_5xx": sum(r.outcome == ERROR_5XX for r in done),
                "errors_other": sum(r.outcome in (ERROR_4XX, ERROR_OTHER) for r in done),
                "sampled_share": _round(sum(r.sampled for r in ok) / len(ok)) if ok else None,
                "latency_p50_s": _round(percentile(lat, 50)),
                "latency_p99_s": _round(percentile(lat, 99)),
                "ms_per_token_p50": _round(percentile(tpot, 50), 2),
                "output_tok_s": round(tokens / (t1 - t0), 1) if t1 > t0 else None,
                "preemptions": int(_counter_delta(ordered, t0, upto, "preemptions")),
                "target_concurrency_mean": _mean([s.target_concurrency for s in inside]),
                "in_flight_mean": _mean([s.in_flight for s in inside]),
                "running_mean": _mean([s.running for s in inside if s.running is not None]),
                "waiting_max": max((s.waiting or 0 for s in inside), default=None),
                "gpu_mem_mib_max": max(
                    (s.gpu_mem_mib for s in inside if s.gpu_mem_mib is not None), default=None
                ),
                "rss_mib_max": max(
                    (s.rss_mib for s in inside if s.rss_mib is not None), default=None
                ),
                "k_histogram": _delta(
                    _at(ordered, upto, "rounds_by_k") or {}, _at(ordered, t0, "rounds_by_k") or {}
                ),
                "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
                "graph_misses": misses,
                "target_graph_modes": _delta(
                    _at(ordered, upto, "target_graph_modes") or {},
                    _at(ordered, t0, "target_graph_modes") or {},
                ),
                "unhealthy_samples": sum(not s.healthy or not s.alive for s in inside),
            }
        )
    return rows


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def _quarter(t: float, duration: float) -> int:
    return min(3, int(4 * t / duration)) if duration > 0 else 0


@dataclass(frozen=True)
class Limits:
    """The pass rules' tolerances."""

    #: p50 latency of the last quarter over that of the second quarter, at most
    drift_ratio: float = 1.2
    #: GPU memory may rise by this much (MiB, or the fraction below, whichever is larger)
    gpu_mem_slack_mib: float = 64.0
    gpu_mem_slack_frac: float = 0.02
    #: host memory (RSS of the server's processes) may rise by this fraction
    rss_slack_frac: float = 0.10


def criteria(
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    duration: float,
    end: Mapping[str, Any],
    *,
    graphs: bool,
    limits: Limits | None = None,
) -> dict[str, dict[str, Any]]:
    """Each rule: ``{"ok": bool, "value": ..., "rule": text}``. Quarters are of the load's
    duration; the second quarter is the reference (the first holds the warm-up). ``end``:
    ``engine_death_lines``, ``alive``, ``final_request_ok``, ``kv_usage``."""
    lim = limits or Limits()
    ok = [r for r in records if r.outcome == OK]
    q_lat: dict[int, list[float]] = {q: [] for q in range(4)}
    for r in ok:
        q_lat[_quarter(r.end, duration)].append(r.latency)
    p2, p4 = percentile(q_lat[1], 50), percentile(q_lat[3], 50)
    out: dict[str, dict[str, Any]] = {}

    unhealthy = sum(not s.healthy or not s.alive for s in samples)
    deaths = int(end.get("engine_death_lines") or 0) + (0 if end.get("alive") else 1)
    out["zero_engine_deaths"] = {
        "ok": deaths == 0 and unhealthy == 0 and bool(end.get("final_request_ok")),
        "value": {"deaths": deaths, "unhealthy_samples": unhealthy},
        "rule": "the server and its engine live to the end; /health 200 at every sample",
    }
    e5 = sum(r.outcome == ERROR_5XX for r in records)
    other = sum(r.outcome in (ERROR_4XX, ERROR_OTHER) for r in records)
    out["no_errors"] = {
        "ok": e5 == 0 and other == 0,
        "value": {"5xx": e5, "other": other},
        "rule": "every request served or aborted by the client on purpose",
    }
    out["no_latency_drift"] = {
        "ok": p2 is not None and p4 is not None and p4 <= lim.drift_ratio * p2,
        "value": {"p50_q2_s": _round(p2), "p50_q4_s": _round(p4)},
        "rule": f"p50 latency of the last quarter <= {lim.drift_ratio} x the second quarter's",
    }
    out.update(_memory_rules(samples, duration, lim))
    ordered = sorted(samples, key=lambda s: s.t)
    steady = None
    if graphs and _at(ordered, None, "graph_misses") is not None:
        steady = int(_counter_delta(ordered, duration / 4, None, "graph_misses"))
    out["no_graph_misses_at_steady_state"] = {
        "ok": steady == 0 if graphs else True,
        "value": steady if graphs else "n/a (no CUDA graphs)",
        "rule": "no draft round without its CUDA graph after the first quarter",
    }
    pre = float(_at(ordered, None, "preemptions") or 0.0)
    out["preempted"] = {
        "ok": pre > 0,
        "value": int(pre),
        "rule": "vLLM preempted requests (the KV cache was small enough)",
    }
    out["kv_back_to_0"] = {
        "ok": end.get("kv_usage") == 0.0,
        "value": end.get("kv_usage"),
        "rule": "vllm:kv_cache_usage_perc is 0 once the server is idle",
    }
    return out


def _memory_rules(
    samples: Sequence[Sample], duration: float, lim: Limits
) -> dict[str, dict[str, Any]]:
    def qmax(attr: str, q: int) -> float | None:
        vals = [
            getattr(s, attr)
            for s in samples
            if getattr(s, attr) is not None and _quarter(s.t, duration) == q
        ]
        return max(vals) if vals else None

    out: dict[str, dict[str, Any]] = {}
    g2, g4 = qmax("gpu_mem_mib", 1), qmax("gpu_mem_mib", 3)
    if g2 is not None and g4 is not None:
        slack = max(lim.gpu_mem_slack_mib, lim.gpu_mem_slack_frac * g2)
        out["gpu_memory_flat"] = {
            "ok": g4 <= g2 + slack,
            "value": {"max_q2_mib": g2, "max_q4_mib": g4},
            "rule": f"GPU memory of the last quarter <= the second quarter's + {slack:.0f} MiB",
        }
    r2, r4 = qmax("rss_mib", 1), qmax("rss_mib", 3)
    out["host_memory_flat"] = {
        "ok": r2 is not None and r4 is not None and r4 <= r2 * (1 + lim.rss_slack_frac),
        "value": {"max_q2_mib": _round(r2, 1), "max_q4_mib": _round(r4, 1)},
        "rule": f"server RSS of the last quarter <= (1 + {lim.rss_slack_frac}) x the second's",
    }
    return out


def totals(records: Sequence[RequestRecord], samples: Sequence[Sample]) -> dict[str, Any]:
    """Whole-run counts: outcomes, preemptions, the k histogram, latency percentiles."""
    ordered = sorted(samples, key=lambda s: s.t)
    lat = [r.latency for r in records if r.outcome == OK]
    counts: dict[str, int] = {}
    for r in records:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    return {
        "requests": len(records),
        "outcomes": dict(sorted(counts.items())),
        "latency_p50_s": _round(percentile(lat, 50)),
        "latency_p99_s": _round(percentile(lat, 99)),
        "preemptions": int(_at(ordered, None, "preemptions") or 0),
        "k_histogram": dict(sorted((_at(ordered, None, "rounds_by_k") or {}).items())),
        "graph_misses": _at(ordered, None, "graph_misses"),
        "target_graph_modes": dict(_at(ordered, None, "target_graph_modes") or {}),
        "error_examples": [
            {"outcome": r.outcome, "start_s": round(r.start, 1), "detail": r.detail}
            for r in records
            if r.outcome not in (OK, ABORTED)
        ][:10],
    }
