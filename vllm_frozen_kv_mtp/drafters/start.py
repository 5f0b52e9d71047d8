"""What every frozen-KV drafter does when vLLM builds it, on either runner."""

from __future__ import annotations

from typing import Any

from vllm_frozen_kv_mtp.drafters.stats import DraftStats, log_stats_at_exit
from vllm_frozen_kv_mtp.options import FrozenKVOptions, options_from_vllm_config
from vllm_frozen_kv_mtp.patches import enable_frozen_runtime_fixes


def start_drafter(vllm_config: Any) -> tuple[FrozenKVOptions, DraftStats]:
    """The drafter's options (the front end validated them into the config) and a fresh
    set of round counters, logged when the process exits; the runtime fixes the drafter
    relies on are switched on (idempotent)."""
    options = options_from_vllm_config(vllm_config)
    assert options is not None
    stats = DraftStats()
    log_stats_at_exit(stats)
    enable_frozen_runtime_fixes()
    return options, stats
