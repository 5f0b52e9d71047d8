"""vLLM 0.34's names for the front end: those of 0.32/0.33, less the V1 runner switch.

Like the 0.32 module, every function imports vLLM when called, never at import.
"""

from __future__ import annotations

from vllm_frozen_kv_mtp.adapters.vllm_0_32.frontend import (
    BLOCK_VERIFICATION_LOSSLESS_FROM,
    attention_layers,
    block_verification_lossless,
    dense_k_table,
    engine_args_cls,
    logits_processor_cls,
    on_cpu,
    triton_attention_impl_cls,
    validate_schedule,
)

__all__ = [
    "BLOCK_VERIFICATION_LOSSLESS_FROM",
    "attention_layers",
    "block_verification_lossless",
    "dense_k_table",
    "engine_args_cls",
    "logits_processor_cls",
    "on_cpu",
    "triton_attention_impl_cls",
    "v1_runner_forced",
    "validate_schedule",
]


def v1_runner_forced() -> bool:
    """Always False: vLLM 0.34 has no V1 GPU runner (``vllm.envs`` dropped
    ``VLLM_USE_V2_MODEL_RUNNER``, so reading it would raise at config time), and its CPU
    runner is Model Runner V2's."""
    return False
