"""Patch body: the split-KV choice of the drafter's sliding-window attention.

vLLM's Triton attention runs a decode batch either in one pass per (request, KV head)
(the "2D" kernel) or split over 16 KV segments plus a ``reduce_segments`` kernel (the
"3D" kernel, for batches of at most ``seq_threshold_3D`` requests: 64 for Gemma 4 E4B's
two KV heads). That threshold is set per metadata builder for any context length. A
sliding-window layer reads at most ``sliding_window`` keys (512 for Gemma 4) however long
the context, so where a single pass is cheap enough the split and its extra kernel only
cost time. Option ``sliding_split_kv_max_rows`` sets the threshold of the drafter's own
sliding-window builders (Model Runner V2 builds them for the drafter alone, so the
target's attention is untouched); full-attention layers keep vLLM's choice.

The threshold can only go down: the builder sizes its split-KV scratch buffers for
``seq_threshold_3D`` rows at start-up, and more rows would overrun them.

Registry entries (generated from ``patches/__init__.py``; edit them there):

Patch 9: ``vllm.v1.attention.backends.triton_attn.TritonAttentionMetadataBuilder.seq_thr
    eshold_3D`` (load time; Model Runner V2, option ``sliding_split_kv_max_rows``,
    TRITON_ATTN, made by
    ``vllm_frozen_kv_mtp.patches.sliding_split_kv.set_sliding_split_kv_max_rows``)
Why: vLLM picks split-KV ("3D") attention for batches up to a threshold sized for the
    target; the drafter's one-row batches over a sliding window can prefer another
    threshold. vLLM has no per-layer-group knob.
How: ``set_sliding_split_kv_max_rows`` lowers the threshold on the drafter's own
    attention-group builders (never raises it: the scratch buffers were sized for vLLM's
    value). Default -1: untouched.
Upstream: not filed in vllm-project/vllm (no per-group split-KV threshold).
Remove when: the option is removed or vLLM exposes a per-group threshold.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("vllm.frozen_kv_mtp")


def set_sliding_split_kv_max_rows(attn_groups: Any, max_rows: int) -> dict[str, int]:
    """Let the drafter's sliding-window attention split KV only for batches of at most
    ``max_rows`` rows (0: never). ``attn_groups`` is the drafter's ``list[list[
    AttentionGroup]]``; only builders with a ``seq_threshold_3D`` (TRITON_ATTN) change.
    Returns {layer name: threshold now} for the layers whose builders changed."""
    if max_rows < 0:
        return {}
    changed: dict[str, int] = {}
    other_backends: dict[str, list[str]] = {}  # builder class -> layers it keeps
    for groups in attn_groups:
        for group in groups:
            if getattr(group.kv_cache_spec, "sliding_window", None) is None:
                continue
            for builder in getattr(group, "metadata_builders", []):
                threshold = getattr(builder, "seq_threshold_3D", None)
                if threshold is None:
                    other_backends.setdefault(type(builder).__name__, []).extend(group.layer_names)
                    continue
                builder.seq_threshold_3D = min(max_rows, threshold)  # scratch holds no more
                for name in group.layer_names:
                    changed[name] = builder.seq_threshold_3D
    for builder_cls, layers in other_backends.items():
        # FA4, for one, has no split-KV threshold: the option cannot apply there.
        logger.warning(
            "frozen_kv_mtp: sliding_split_kv_max_rows=%d needs the TRITON_ATTN backend; "
            "drafter layers %s are built by %s and keep their backend's choice",
            max_rows,
            sorted(layers),
            builder_cls,
        )
    if changed:
        logger.info(
            "frozen_kv_mtp: drafter sliding-window attention splits KV for batches of at "
            "most %d rows (%d layers)",
            min(changed.values()),
            len(changed),
        )
    return changed
