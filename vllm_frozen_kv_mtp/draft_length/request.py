"""How many drafts the user asked for: a fixed k, vLLM's batch-size schedule, or "auto".

The front end calls :func:`requested_draft_length` while it translates the config; each
refusal names the fix. Under ``"auto"`` it also hands vLLM the stand-in schedule
(``stand_in.py``) and names the goodput scheduler as vLLM's ``scheduler_cls``.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.draft_length.stand_in import graph_capture_schedule
from vllm_frozen_kv_mtp.options import (
    AUTO_DEFAULT_K_MAX,
    AUTO_K,
    MAX_NUM_SPECULATIVE_TOKENS,
    FrozenKVMTPConfigError,
)

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: vLLM's scheduler_cls for "auto" (a supported vLLM extension point)
AUTO_SCHEDULER_CLS = "vllm_frozen_kv_mtp.draft_length.scheduler.GoodputScheduler"


def default_k(assistant_hf_config: Any) -> int:
    """vLLM's Gemma 4 recipe values: 2 for E2B-sized backbones, 4 otherwise."""
    backbone = getattr(assistant_hf_config, "backbone_hidden_size", 0) or 0
    return 2 if backbone <= 1536 else 4


def requested_draft_length(
    cfg: dict[str, Any], assistant_cfg: Any, engine_args: Any, target_parallel_config: Any
) -> tuple[str, int, list[list[int]] | None]:
    """(policy, k or k_max, the schedule vLLM gets) of the request; raises with the fix.

    "static" is a fixed k; "schedule" is vLLM's batch-size table, applied by vLLM's
    scheduler; "auto" is the goodput policy, applied by our scheduler."""
    raw_k = cfg.get("num_speculative_tokens")
    schedule = cfg.get("num_speculative_tokens_per_batch_size")
    if "max_num_speculative_tokens" in cfg and raw_k != AUTO_K:
        raise FrozenKVMTPConfigError(
            'max_num_speculative_tokens is the ceiling of num_speculative_tokens="auto" '
            "and means nothing with a fixed k.",
            'set "num_speculative_tokens": "auto", or remove max_num_speculative_tokens.',
        )
    if raw_k == AUTO_K:
        if schedule is not None:
            raise FrozenKVMTPConfigError(
                'num_speculative_tokens="auto" and num_speculative_tokens_per_batch_size '
                "both choose k per step.",
                "keep one: remove num_speculative_tokens_per_batch_size for the goodput "
                "policy, or set num_speculative_tokens to an integer ceiling for the schedule.",
            )
        k_max = _check_auto(cfg, engine_args, target_parallel_config)
        return AUTO_K, k_max, graph_capture_schedule(k_max)
    if schedule is not None:
        parsed = _check_schedule(schedule)
        top = max(k for _, _, k in parsed)
        if raw_k is None:
            k = max(top, 1)
            logger.info(
                "frozen_kv_mtp: num_speculative_tokens not set; the schedule's largest k, %d", k
            )
        else:
            k = _check_k(raw_k)
            if top > k:
                logger.warning(
                    "frozen_kv_mtp: schedule entries above num_speculative_tokens=%d are capped "
                    "to %d (vLLM's semantics); raise num_speculative_tokens to use them",
                    k,
                    k,
                )
        return "schedule", k, [list(e) for e in parsed]
    if raw_k is None:
        k = default_k(assistant_cfg)
        logger.info("frozen_kv_mtp: num_speculative_tokens not set, using %d", k)
        return "static", k, None
    return "static", _check_k(raw_k), None


def _check_schedule(schedule: Any) -> list[tuple[int, int, int]]:
    try:
        parsed = active.frontend.validate_schedule(schedule)
    except (ValueError, TypeError) as e:
        raise FrozenKVMTPConfigError(
            f"num_speculative_tokens_per_batch_size={schedule!r} is invalid ({e}).",
            "pass non-overlapping [first_batch_size, last_batch_size, k] ranges that start "
            "at batch size 1, with k >= 0, e.g. [[1, 8, 4], [9, 64, 2], [65, 1024, 0]].",
        ) from e
    for _, _, k in parsed:
        if k > MAX_NUM_SPECULATIVE_TOKENS:
            raise FrozenKVMTPConfigError(
                f"num_speculative_tokens_per_batch_size has k={k}.",
                f"keep every k between 0 and {MAX_NUM_SPECULATIVE_TOKENS}.",
            )
    return parsed


def _check_auto(cfg: dict[str, Any], engine_args: Any, target_parallel_config: Any) -> int:
    k_max = _check_k(
        cfg.get("max_num_speculative_tokens", AUTO_DEFAULT_K_MAX), "max_num_speculative_tokens"
    )
    dp = getattr(target_parallel_config, "data_parallel_size", 1) or 1
    if dp > 1:
        raise FrozenKVMTPConfigError(
            f'num_speculative_tokens="auto" with data_parallel_size={dp}: vLLM turns a '
            "per-step k off under data parallelism (a MoE target's ranks run in lockstep and "
            "would choose different k), and auto needs it.",
            "set num_speculative_tokens to an integer for data parallelism.",
        )
    user_cls = getattr(engine_args, "scheduler_cls", None)
    if user_cls not in (None, AUTO_SCHEDULER_CLS):
        raise FrozenKVMTPConfigError(
            f'num_speculative_tokens="auto" needs its own scheduler, but scheduler_cls='
            f"{user_cls!r} is set.",
            "remove --scheduler-cls, or set num_speculative_tokens to an integer.",
        )
    engine_args.scheduler_cls = AUTO_SCHEDULER_CLS
    return k_max


def _check_k(k: Any, key: str = "num_speculative_tokens") -> int:
    auto_hint = ', or "auto" (k chosen each step)' if key == "num_speculative_tokens" else ""
    if isinstance(k, bool) or not isinstance(k, int):
        raise FrozenKVMTPConfigError(
            f"{key} must be an integer, got {k!r}.",
            f"pass an integer between 1 and {MAX_NUM_SPECULATIVE_TOKENS}, e.g. 4{auto_hint}.",
        )
    if not 1 <= k <= MAX_NUM_SPECULATIVE_TOKENS:
        raise FrozenKVMTPConfigError(
            f"{key}={k} is out of range.",
            f"pass an integer between 1 and {MAX_NUM_SPECULATIVE_TOKENS} "
            f"(Gemma 4 recipes use 2 for E2B and 4 for E4B/26B/31B){auto_hint}.",
        )
    return k


def describe_draft_length(policy: str, k: int, schedule: Any) -> str:
    """How k is chosen, in the words of the start-up log and ``check-config``."""
    if policy == AUTO_K:
        return f'k chosen each step in 0..{k} (num_speculative_tokens="auto")'
    if policy == "schedule":
        return f"k by batch size {schedule} (at most {k})"
    return f"k={k}"
