"""Host-side counters of a drafter's rounds, logged while it drafts and when its process exits.

Both drafters (V1's proposer and Model Runner V2's speculator) count what they ran
without a device sync; ``DraftStats.summary`` is the line a process logs. A server's
engine processes are killed at shutdown before their exit hooks run, so a drafting
engine also logs the line (and the kernel fallbacks so far) every
:data:`LOG_INTERVAL_S`: rounds without their CUDA graph and fallbacks are performance
cliffs a server's operator must be able to see while it serves.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any

from vllm_frozen_kv_mtp.kernels import fallbacks

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: seconds between two summary lines of a drafting engine (checked on each round's host
#: side, one clock read)
LOG_INTERVAL_S = 60.0


@dataclass
class DraftStats:
    """Host-side counters (no device sync) of the draft rounds run so far."""

    rounds: int = 0
    #: rows in each round's first drafter forward, summed (one per request)
    seed_rows: int = 0
    #: drafter forwards (k per round)
    forwards: int = 0
    metadata_builds: int = 0
    #: steps whose k was 0: no draft round ran
    skipped_rounds: int = 0
    #: draft rounds per k (the k the scheduler asked for)
    rounds_by_k: dict[int, int] = dataclasses.field(default_factory=dict)
    #: V2 rounds that asked for a whole-round CUDA graph (0 when eager, and on V1, whose
    #: rounds this plugin does not dispatch)
    graph_rounds: int = 0
    #: of those, rounds at a k whose CUDA graph was not captured (ran eagerly instead)
    graph_misses: int = 0
    #: rounds whose drafts were sampled from the assistant (a batch with a sampled
    #: request, draft_sample_method "probabilistic"); the other rounds drafted greedily
    sampled_rounds: int = 0
    #: when the next summary line is due (time.monotonic)
    next_log_at: float = dataclasses.field(
        default_factory=lambda: time.monotonic() + LOG_INTERVAL_S, repr=False, compare=False
    )

    def count_round(self, k: int) -> None:
        self.rounds_by_k[k] = self.rounds_by_k.get(k, 0) + 1
        self._log_when_due()

    def count_skipped(self) -> None:
        """A step whose k was 0: no draft round ran."""
        self.skipped_rounds += 1
        self._log_when_due()

    def _log_when_due(self) -> None:
        now = time.monotonic()
        if now < self.next_log_at:
            return
        self.next_log_at = now + LOG_INTERVAL_S
        logger.info("%s", self.summary())
        line = fallbacks.summary()
        if line is not None:
            logger.warning("%s", line)

    def summary(self) -> str:
        """What the drafter did so far, in one line."""
        per_k = ", ".join(f"k={k}: {n}" for k, n in sorted(self.rounds_by_k.items()))
        return (
            f"frozen_kv_mtp: {self.rounds} draft rounds ({per_k or 'none'}); "
            f"{self.sampled_rounds} sampled their drafts, the others drafted greedily; "
            f"{self.skipped_rounds} steps with k=0; {self._graphs()}"
        )

    def _graphs(self) -> str:
        # "0 rounds without their CUDA graph" would read as a pass where no graph was used
        if not self.graph_rounds:
            return "no CUDA graph counts (eager rounds, or the V1 runner)"
        return f"{self.graph_misses} rounds without their CUDA graph"

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(dataclasses.asdict(self))
        del d["next_log_at"]
        d["seed_rows_per_round"] = self.seed_rows / self.rounds if self.rounds else 0.0
        d["metadata_builds_per_round"] = self.metadata_builds / self.rounds if self.rounds else 0.0
        return d


#: the drafters' counters in this process, logged at exit while their drafter lives
_exit_stats: list[weakref.ref[DraftStats]] = []


def log_stats_at_exit(stats: DraftStats) -> None:
    """Log ``stats.summary()`` when this process exits (engine core or worker)."""
    if not _exit_stats:
        atexit.register(_log_exit_stats)
    _exit_stats.append(weakref.ref(stats))


def _log_exit_stats() -> None:
    for ref in _exit_stats:
        stats = ref()
        if stats is not None and (stats.rounds or stats.skipped_rounds):
            logger.info("%s", stats.summary())
