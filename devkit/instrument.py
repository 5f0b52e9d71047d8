"""Read-outs of a running in-process engine for the demo, benchmarks and tests.

vLLM's own spec-decode counters (acceptance), host-side timing and row counts of the
drafter, and this process's kernel fallbacks and launches. Needs
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (engine in this process); ``worker_drafter_info``
reads a worker's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from vllm_frozen_kv_mtp.kernels import fallbacks


def kernel_fallbacks() -> dict[str, int]:
    """Kernel fallbacks in this process so far, per kernel (``kernels/fallbacks.py``
    names them); empty when every kernel ran."""
    return fallbacks.counts()


def kernel_launches() -> dict[str, int]:
    """Launches counted so far in this process, per kernel (the split decode attention
    outside CUDA graphs, the target's one-pass soft-cap)."""
    return fallbacks.launches()


def uses_v2_model_runner(vllm_config: Any) -> bool:
    """Whether an engine runs Model Runner V2. vLLM 0.32/0.33 say so in
    ``VllmConfig.use_v2_model_runner``; 0.34 dropped the V1 GPU runner and the field with
    it, so an engine without the field runs V2."""
    return bool(getattr(vllm_config, "use_v2_model_runner", True))


def model_runner(llm: Any) -> Any:
    core = llm.llm_engine.engine_core.engine_core
    return core.model_executor.driver_worker.worker.model_runner


def runner_drafter(runner: Any) -> Any:
    """The drafter of a model runner: ``speculator`` on Model Runner V2, ``drafter`` on V1."""
    return getattr(runner, "speculator", None) or getattr(runner, "drafter", None)


def drafter(llm: Any) -> Any:
    return runner_drafter(model_runner(llm))


def worker_drafter_info(worker: Any) -> dict[str, Any]:
    """Drafter class and frozen-KV counters inside a worker process, for
    ``llm.collective_rpc(worker_drafter_info)`` when TP>1 puts the drafter there."""
    d = runner_drafter(worker.model_runner)
    stats = getattr(d, "frozen_stats", None)
    return {
        "cls": type(d).__name__,
        "stats": stats.as_dict() if stats is not None else None,
        "kernel_fallbacks": kernel_fallbacks(),
    }


def spec_metrics(llm: Any) -> dict[str, Any]:
    """vLLM's spec-decode counters, keyed without the ``vllm:spec_decode_`` prefix."""
    out: dict[str, Any] = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            value = getattr(m, "values", None)
            out[m.name.removeprefix("vllm:spec_decode_")] = (
                list(value) if value is not None else m.value
            )
    return out


def acceptance(metrics: dict[str, Any]) -> dict[str, Any]:
    """Mean acceptance length (1 + accepted/drafts, vLLM's definition) and per position."""
    drafts = metrics.get("num_drafts", 0) or 0
    accepted = metrics.get("num_accepted_tokens", 0) or 0
    per_pos = metrics.get("num_accepted_tokens_per_pos") or []
    return {
        "drafts": drafts,
        "draft_tokens": metrics.get("num_draft_tokens", 0) or 0,
        "accepted_tokens": accepted,
        "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
        "per_position_acceptance": [round(a / drafts, 3) for a in per_pos] if drafts else [],
    }


def diff_metrics(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        prev = before.get(key)
        if isinstance(value, list):
            prev = prev or [0] * len(value)
            out[key] = [b - a for a, b in zip(prev, value, strict=False)]
        else:
            out[key] = value - (prev or 0)
    return out


@dataclass
class DrafterProbe:
    """Wraps the drafter's ``propose`` and model forward: wall time per round and
    rows per forward (CPU engines: calls are synchronous, so wall time is real)."""

    rounds: int = 0
    round_seconds: list[float] = field(default_factory=list)
    requests: int = 0
    seed_rows: int = 0
    rows: int = 0
    enabled: bool = True

    def attach(self, d: Any) -> DrafterProbe:
        propose, forward = d.propose, d.model.forward
        state = {"first": False}

        def timed_propose(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return propose(*args, **kwargs)
            cad = kwargs.get("common_attn_metadata")
            self.requests += cad.batch_size() if cad is not None else 0
            state["first"] = True
            t = time.perf_counter()
            out = propose(*args, **kwargs)
            self.round_seconds.append(time.perf_counter() - t)
            self.rounds += 1
            return out

        def counting_forward(*args: Any, **kwargs: Any) -> Any:
            if self.enabled:
                ids = kwargs.get("input_ids", args[0] if args else None)
                n = int(ids.shape[0]) if ids is not None else 0
                self.rows += n
                if state["first"]:
                    self.seed_rows += n
                    state["first"] = False
            return forward(*args, **kwargs)

        d.propose, d.model.forward = timed_propose, counting_forward
        return self

    def reset(self) -> None:
        """Zero the counters; the wrapped methods stay in place."""
        self.rounds = self.requests = self.seed_rows = self.rows = 0
        self.round_seconds = []

    def summary(self) -> dict[str, Any]:
        if not self.rounds:
            return {"rounds": 0}
        ms = sorted(1000 * s for s in self.round_seconds)
        return {
            "rounds": self.rounds,
            "draft_ms_per_round": round(ms[len(ms) // 2], 3),
            "first_pass_rows_per_request": round(self.seed_rows / max(self.requests, 1), 2),
            "drafter_rows_per_round": round(self.rows / self.rounds, 2),
        }
