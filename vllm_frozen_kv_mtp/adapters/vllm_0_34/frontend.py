"""vLLM 0.34's names for the front end: those of 0.32/0.33, less the V1 runner switch,
and the method registered with vLLM (hook 1) rather than rewritten to ``"mtp"``.

Like the 0.32 module, every function imports vLLM when called, never at import.
"""

from __future__ import annotations

from typing import Any

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
from vllm_frozen_kv_mtp.identity import METHOD

__all__ = [
    "BLOCK_VERIFICATION_LOSSLESS_FROM",
    "CONFIG_CLASS",
    "attention_layers",
    "block_verification_lossless",
    "carry_options",
    "dense_k_table",
    "engine_args_cls",
    "install",
    "logits_processor_cls",
    "on_cpu",
    "options_of",
    "triton_attention_impl_cls",
    "v1_runner_forced",
    "validate_schedule",
]

#: the ``SpeculatorConfig`` of the method, by qualified name: vLLM imports it when a
#: process first reads a frozen_kv_mtp config, so registering imports no vLLM worker code
CONFIG_CLASS = "vllm_frozen_kv_mtp.adapters.vllm_0_34.config.FrozenKVMTPSpeculatorConfig"


def v1_runner_forced() -> bool:
    """Always False: vLLM 0.34 has no V1 GPU runner (``vllm.envs`` dropped
    ``VLLM_USE_V2_MODEL_RUNNER``, so reading it would raise at config time), and its CPU
    runner is Model Runner V2's."""
    return False


# ---- hook 1: the method registered with vLLM ----------------------------------------


def install() -> None:
    """Register the method (``register()`` runs in every process, as vLLM asks of a
    custom method). vLLM's ``SpeculativeConfig`` then accepts ``method=METHOD``, keeps it
    in ``custom_method`` and runs as the config class's ``base_method`` (``"mtp"``: every
    in-tree Gemma 4 MTP gate keeps working), and the model runner builds the config
    class's ``speculator_class``, where patch 3 dispatched before. Registering the same
    name again is a no-op."""
    from vllm.v1.worker.gpu.spec_decode.speculator_config import register_speculative_method

    register_speculative_method(METHOD, CONFIG_CLASS)


def carry_options(engine_args: Any, spec: dict[str, Any], options: dict[str, Any]) -> None:
    """Hand a validated frozen_kv_mtp request to vLLM: ``spec`` keeps the registered
    method, and ``options`` ride in ``speculator_options``, which the config class
    accepts and which reaches every process with the speculative config."""
    engine_args.speculative_config = dict(spec, method=METHOD, speculator_options=options)


def options_of(vllm_config: Any) -> dict[str, Any] | None:
    """The options of a frozen_kv_mtp engine (``speculator_options`` of a speculative
    config whose ``custom_method`` is ours), or None for any other engine, an
    ``additional_config`` that names the method included."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or getattr(spec, "custom_method", None) != METHOD:
        return None
    return dict(spec.speculator_options or {})
