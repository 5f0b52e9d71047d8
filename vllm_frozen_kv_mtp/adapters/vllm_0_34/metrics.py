"""vLLM's stat-logger base: unchanged from 0.32/0.33 on 0.34."""

from vllm_frozen_kv_mtp.adapters.vllm_0_32.metrics import StatLoggerBase

__all__ = ["StatLoggerBase"]
