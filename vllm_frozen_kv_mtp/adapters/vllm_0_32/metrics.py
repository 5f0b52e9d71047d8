"""vLLM's stat-logger base, which the front end's steps-per-k metric extends
(``frontend/metrics.py``; vLLM loads only subclasses of it as stat-logger plugins)."""

from vllm.v1.metrics.loggers import StatLoggerBase

__all__ = ["StatLoggerBase"]
