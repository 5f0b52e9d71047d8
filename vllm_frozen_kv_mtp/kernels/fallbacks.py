"""Process-wide record of kernel fallbacks, and of the launches tests check for.

A kernel that raises (a compile error on a new GPU or Triton version, say) or meets a
batch it cannot handle must not stop serving, so its caller falls back to a slower path
with the same result. Each fallback is a performance cliff, so none is silent: it logs a
WARNING naming the option, what runs instead and the reason (once per kernel and
reason), it is counted here, and the counts are logged again at interpreter exit.
``devkit/instrument.py`` reads them for tests. Counts are per process: with tensor
parallelism each worker keeps its own.
"""

from __future__ import annotations

import atexit
import logging
from collections import Counter
from dataclasses import dataclass

logger = logging.getLogger("vllm.frozen_kv_mtp")


@dataclass(frozen=True)
class FallbackPath:
    """What a kernel's fallback means to a user."""

    option: str  # the option (and value) that asked for the kernel
    instead: str  # what runs after the fallback


#: every kernel that can fall back; ``record`` refuses other names
KERNELS: dict[str, FallbackPath] = {
    "centroid_head": FallbackPath(
        'centroid_head="fused" (or "auto", which picks it)',
        'the "dense" head for the rest of the process',
    ),
    "dense_head": FallbackPath(
        'dense_head="fused"/"fp8"', "upstream's head for the rest of the process"
    ),
    "seed_rows": FallbackPath(
        "the Model Runner V2 seed-row kernel", "torch ops for the rest of the process"
    ),
    "split_decode": FallbackPath(
        'draft_attention="split"', "vLLM's attention kernels for that batch"
    ),
    "one_pass_softcap": FallbackPath(
        'target_softcap="one_pass"', "vLLM's three eager ops for those logits"
    ),
}

_fallbacks: Counter[str] = Counter()
_launches: Counter[str] = Counter()
#: (kernel, reason) pairs already logged: per-batch fallbacks warn once per reason
_warned: set[tuple[str, str]] = set()


def record(kernel: str, reason: BaseException | str) -> None:
    """Count one fallback of ``kernel`` and warn, the first time for this reason."""
    path = KERNELS[kernel]
    _fallbacks[kernel] += 1
    text = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else reason
    if (kernel, text) not in _warned:
        _warned.add((kernel, text))
        logger.warning(
            "frozen_kv_mtp: %s kernel fell back to %s (%s)", path.option, path.instead, text
        )


def count(kernel: str) -> int:
    """Fallbacks of ``kernel`` so far in this process."""
    return _fallbacks[kernel]


def counts() -> dict[str, int]:
    """Fallbacks so far, per kernel that fell back."""
    return dict(_fallbacks)


def launched(kernel: str) -> None:
    """Count one launch of ``kernel`` (tests check that an engine used it)."""
    _launches[kernel] += 1


def launches() -> dict[str, int]:
    """Launches counted so far, per kernel."""
    return dict(_launches)


def reset() -> None:
    """Forget all counts and logged reasons (tests)."""
    _fallbacks.clear()
    _launches.clear()
    _warned.clear()


def summary() -> str | None:
    """One line naming each kernel that fell back and how often; None if none did."""
    if not _fallbacks:
        return None
    parts = [
        f"{KERNELS[k].option}: {n} (then {KERNELS[k].instead})"
        for k, n in sorted(_fallbacks.items())
    ]
    return "frozen_kv_mtp: kernel fallbacks in this process: " + "; ".join(parts)


def _log_summary() -> None:
    line = summary()
    if line is not None:
        logger.warning("%s", line)


# Registered after logging's own exit hook, so it runs first (atexit is last in, first out).
atexit.register(_log_summary)
