"""``frozen_kv_mtp:steps_total{k=...}`` on vLLM's ``/metrics``: engine steps per draft length.

vLLM's spec-decode counters give the mean k (draft tokens / drafts), not its spread:
under ``"auto"`` an operator wants to see which k the engine runs, and how often it turns
speculation off (k = 0), on the same dashboard as the rest of the server. vLLM's
``AsyncLLM`` (the OpenAI server, Ray Serve LLM) loads stat loggers from the
``vllm.stat_logger_plugins`` entry-point group and hands them every step's
``SchedulerStats`` in the front-end process; this one reads the step's verified drafts
there, into the process's Prometheus registry (the OpenAI server's ``/metrics``; Ray Serve
exports vLLM's metrics through its own logger instead, which does not carry this one). No
engine object is touched, and an engine without ``frozen_kv_mtp`` gets a logger that does
nothing.

The metric's name has no ``vllm:`` prefix: vLLM's own Prometheus logger, built after the
plugins, unregisters every ``vllm:`` collector it finds.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.options import options_from_vllm_config

logger = logging.getLogger("vllm.frozen_kv_mtp")

STEPS_METRIC = "frozen_kv_mtp:steps"
STEPS_DOC = (
    "Engine steps by the draft length k each request verified in them; k=0 counts the "
    "steps that decoded without drafts and prefilled nothing (k chosen as 0, or no draft "
    "yet)."
)
#: one counter per process, shared by every engine's logger (a second AsyncLLM in the
#: process must not register the name again)
_steps_counter: Any = None


def steps_counter() -> Any:
    """The process's ``frozen_kv_mtp:steps`` counter (labels model_name, engine, k)."""
    global _steps_counter
    if _steps_counter is None:
        import prometheus_client

        _steps_counter = prometheus_client.Counter(
            STEPS_METRIC, STEPS_DOC, labelnames=["model_name", "engine", "k"]
        )
    return _steps_counter


def step_draft_length(scheduler_stats: Any, iteration_stats: Any) -> int | None:
    """The k a step's requests verified; 0 for a step that decoded with no drafts and no
    prefill; None for a step that says nothing about k (a prefill, no output)."""
    spec = getattr(scheduler_stats, "spec_decoding_stats", None)
    if spec is not None and spec.num_drafts:
        return round(spec.num_draft_tokens / spec.num_drafts)
    if iteration_stats is None or not iteration_stats.num_generation_tokens:
        return None
    if iteration_stats.num_prompt_tokens:
        return None
    return 0


class FrozenKVMTPStatLogger(active.metrics.StatLoggerBase):
    """Counts each step of a ``frozen_kv_mtp`` engine under its draft length."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self._counts: dict[int, Any] = {}
        try:
            if options_from_vllm_config(vllm_config) is None:
                return
            model_name = str(vllm_config.model_config.served_model_name)
            counter = steps_counter()
            self._label = lambda k: counter.labels(model_name, str(engine_index), str(k))
            k_max = int(vllm_config.speculative_config.num_speculative_tokens or 0)
            # every k the engine can run, at 0 from the start, so a dashboard sees them all
            self._counts = {k: self._label(k) for k in range(k_max + 1)}
        except Exception as e:  # a metric must never stop a server from starting
            logger.warning("frozen_kv_mtp: no %s metric (%r)", STEPS_METRIC, e)
            self._counts = {}

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if not self._counts:
            return
        try:
            k = step_draft_length(scheduler_stats, iteration_stats)
            if k is None:
                return
            child = self._counts.get(k)
            if child is None:
                child = self._counts[k] = self._label(k)
            child.inc()
        except Exception as e:  # a metric must never stop the server's output loop
            logger.warning("frozen_kv_mtp: %s stops counting (%r)", STEPS_METRIC, e)
            self._counts = {}

    def log_engine_initialized(self) -> None:
        if self._counts:
            logger.info(
                "frozen_kv_mtp: /metrics counts engine %d's steps per draft length as "
                "%s_total{k=...}",
                self.engine_index,
                STEPS_METRIC,
            )
