"""What a streaming client sees, and what the draft round costs on the device, for an
in-process engine: time to first token, inter-token latency, and the draft round's GPU
time per step.

A client sees a request's tokens in chunks, one chunk a step (more than one token when
drafts were accepted). ``ChunkClock`` stamps each request's chunks where the engine
hands them to the output processor, the last point before a server streams them, and
``bench.token_timing`` turns that log into TTFT and ITL with the definitions the SGLang
peer's rows use.

``DraftTimer`` brackets the drafter's ``propose`` with CUDA events on the current
stream. Under async scheduling the host returns from ``propose`` long before the device
finishes the round, so host wall time says nothing; the events time the device's work
between the two points, which is one graph replay per round on Model Runner V2.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from bench.token_timing import Latencies, OutputEvent, latencies, percentile


class ChunkClock:
    """An output log (``bench.token_timing``) of what the output processor received:
    one event a step, with the tokens each request gained in it."""

    def __init__(self) -> None:
        self.events: list[OutputEvent] = []
        self.enabled = True

    def wrap(self, output_processor: Any) -> None:
        original = output_processor.process_outputs

        def stamped(outputs: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
            if self.enabled:
                gained = {
                    out.request_id: len(out.new_token_ids)
                    for out in outputs
                    if getattr(out, "new_token_ids", None)
                }
                if gained:
                    self.events.append((time.perf_counter(), gained))
            return original(outputs, *args, **kwargs)

        output_processor.process_outputs = stamped

    def clear(self) -> None:
        self.events.clear()

    def latencies(self, submitted: float) -> Latencies:
        """TTFT and inter-chunk gaps of the requests stamped since the last ``clear``, for a
        batch submitted at ``submitted``."""
        return latencies(self.events, submitted)


def latency_fields(samples: Latencies) -> dict[str, float | None]:
    """A row's latency columns from the pooled samples of its timed runs."""

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "ttft_p50_ms": r(percentile(samples.ttft_ms, 50)),
        "itl_p50_ms": r(percentile(samples.itl_ms, 50)),
        "itl_p90_ms": r(percentile(samples.itl_ms, 90)),
    }


class DraftTimer:
    """Device time of each draft round, from CUDA events around the drafter's ``propose``
    (no host synchronisation until ``collect``)."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Any, Any]] = []
        self.enabled = True

    def wrap(self, drafter: Any) -> bool:
        """Bracket ``drafter.propose``; False where there is no CUDA device to time on."""
        import torch

        if drafter is None or not torch.cuda.is_available():
            return False
        original = drafter.propose

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = original(*args, **kwargs)
            end.record()
            self.pairs.append((start, end))
            return out

        drafter.propose = timed
        return True

    def collect(self) -> list[float]:
        """The ms of every round since the last call (waits for the device)."""
        import torch

        if not self.pairs:
            return []
        torch.cuda.synchronize()
        ms = [start.elapsed_time(end) for start, end in self.pairs]
        self.pairs.clear()
        return ms


def draft_fields(round_ms: list[float], steps: int, step_ms: float) -> dict[str, float | None]:
    """The draft round's device ms per engine step (rounds that ran, spread over every
    step, k = 0 steps included) and its share of the step's wall time."""
    if not round_ms or steps <= 0:
        return {"draft_ms_per_step": None, "draft_share": None}
    per_step = sum(round_ms) / steps
    return {
        "draft_ms_per_step": round(per_step, 4),
        "draft_share": round(per_step / step_ms, 4) if step_ms > 0 else None,
    }
