"""vLLM helpers the V1 proposer's own modules call (``drafters/seed_proposer.py``,
``draft_q.py``, ``kv_readonly.py``): the V1 sampler's, and Model Runner V2's FP8 KV-scale
copy. Apart from ``proposer.py`` (the concrete class), which imports those modules."""

from __future__ import annotations

from typing import Any

from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p, random_sample
from vllm.v1.sample.sampler import _SAMPLING_EPS

__all__ = [
    "_SAMPLING_EPS",
    "apply_top_k_top_p",
    "copy_target_kv_scales",
    "random_sample",
]


def copy_target_kv_scales(layer: Any, target: Any) -> None:
    """Model Runner V2's helper that gives a drafter layer its target layer's K/V
    scales; the V1 proposer leaves them at 1.0 (vllm-project/vllm#41789). Imported when
    called: its module is Model Runner V2's."""
    from vllm.v1.worker.gpu.spec_decode.gemma4.speculator import _copy_target_kv_scales

    _copy_target_kv_scales(layer, target)
