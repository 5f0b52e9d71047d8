"""Decode rate and latencies of one closed batch, from the outputs an engine's front end
received: the same definitions for every engine a benchmark compares.

An output log is a list of ``(seconds, {request id: tokens the request gained})``, one
entry per output batch (one engine step with streaming requests), in arrival order.

* decode tok/s: tokens that arrived after the last request's first token (the end of the
  batch's last prefill) over the time from then to the last output, tail included:
  ``bench.gpu_tokens.decode_span``'s definition, timed at the front end instead of at
  the scheduler's step outputs.
* full-batch tok/s: only the outputs that carried every request of the batch, each
  timed from the previous such output (what a server at constant concurrency sees).
* TTFT: first output of a request minus the batch's submission time.
* ITL: gap between two consecutive outputs of one request during its decode. With
  speculative decoding an output carries 1 to k + 1 tokens, so this is the per-chunk
  gap vLLM's and SGLang's serving benchmarks call ITL; TPOT spreads a request's decode
  time over its tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: (seconds, {request id: tokens gained in this output})
OutputEvent = tuple[float, dict[str, int]]


class OutputLog:
    """Builds an output log from cumulative per-request token counts (what SGLang's
    ``BatchTokenIDOutput.completion_tokens`` carries)."""

    def __init__(self) -> None:
        self.events: list[OutputEvent] = []
        self._seen: dict[str, int] = {}

    def add(self, t: float, rids: Sequence[str], totals: Sequence[int]) -> None:
        gained: dict[str, int] = {}
        for rid, total in zip(rids, totals, strict=True):
            new = int(total) - self._seen.get(rid, 0)
            if new > 0:
                gained[rid] = new
                self._seen[rid] = int(total)
        if gained:
            self.events.append((t, gained))

    def clear(self) -> None:
        self.events.clear()
        self._seen.clear()


def first_outputs(events: Iterable[OutputEvent]) -> dict[str, float]:
    """Request id -> time of its first output."""
    first: dict[str, float] = {}
    for t, gained in events:
        for rid in gained:
            first.setdefault(rid, t)
    return first


def decode_span(events: Sequence[OutputEvent]) -> tuple[int, float]:
    """(tokens, seconds) after the last request's first output, to the last output."""
    if not events:
        return 0, 0.0
    start = max(first_outputs(events).values())
    tokens = sum(sum(g.values()) for t, g in events if t > start)
    return tokens, events[-1][0] - start


def full_batch_span(events: Sequence[OutputEvent], batch: int) -> tuple[int, float]:
    """(tokens, seconds) of the outputs that carried all ``batch`` requests, each timed
    from the previous such output."""
    tokens, seconds = 0, 0.0
    for (t0, g0), (t1, g1) in zip(events, events[1:], strict=False):
        if len(g0) == batch and len(g1) == batch:
            tokens += sum(g1.values())
            seconds += t1 - t0
    return tokens, seconds


@dataclass
class Latencies:
    """Per-request latency samples of one or more runs, in milliseconds."""

    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)

    def extend(self, other: Latencies) -> None:
        self.ttft_ms += other.ttft_ms
        self.itl_ms += other.itl_ms
        self.tpot_ms += other.tpot_ms


def latencies(events: Sequence[OutputEvent], submitted: float) -> Latencies:
    """TTFT, ITL and TPOT samples of one batch submitted at ``submitted``."""
    times: dict[str, list[float]] = {}
    tokens: dict[str, int] = {}
    for t, gained in events:
        for rid, n in gained.items():
            times.setdefault(rid, []).append(t)
            tokens[rid] = tokens.get(rid, 0) + n
    out = Latencies()
    for rid, ts in times.items():
        out.ttft_ms.append(1000 * (ts[0] - submitted))
        out.itl_ms += [1000 * (b - a) for a, b in zip(ts, ts[1:], strict=False)]
        # tokens after the first output (which may carry more than one)
        first_n = next(g[rid] for _, g in events if rid in g)
        decoded = tokens[rid] - first_n
        if decoded > 0:
            out.tpot_ms.append(1000 * (ts[-1] - ts[0]) / decoded)
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linear between closest ranks (numpy's default);
    None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
