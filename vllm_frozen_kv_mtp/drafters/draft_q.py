"""A draft q truncated like the target's p: drop the tokens a request's top-k / top-p drop.

vLLM's draft samplers (V1 and Model Runner V2) draw sampled drafts at the request's
temperature only. Such a q keeps mass on tokens the target's truncated p never keeps,
and a draft is accepted with probability sum(min(p, q)). Masking those tokens out of q
before the draft is drawn, and verifying with exactly that q, keeps the output p's
(the rejection sampler's guarantee holds for any q it is handed) and raises acceptance:
on the committed KL-distilled pair at temperature 1.0, top_p 0.95, top_k 64 (CPU, k=3)
the mean acceptance length is 3.00 with a truncated q against 2.77 without.

The V1 (and CPU) runner cuts every sampled round's q here. Model Runner V2 keeps vLLM's
q: in its whole-round draft graph the cut is vLLM's Triton top-k / top-p over the full
vocabulary once per draft step, which costs a step more than the longer acceptance buys
(docs/tuning.md, "The draft q").
"""

from __future__ import annotations

import torch

from vllm_frozen_kv_mtp.adapters import active

_SAMPLING_EPS = active.proposer_helpers._SAMPLING_EPS
apply_top_k_top_p = active.proposer_helpers.apply_top_k_top_p


def mask_outside_top_k_top_p(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
) -> None:
    """In place: -inf wherever a row's top-k / top-p, taken after its temperature as vLLM's
    sampler takes the target's, drops the token. ``temperature``, ``top_k`` and ``top_p``
    hold one value per row; a greedy row (temperature 0) keeps its argmax, which both cuts
    keep. The cut is computed on a float32 copy whatever the logits' dtype: vLLM's
    Triton top-k / top-p takes float32 only, and bf16 heads feed it on GPUs."""
    if top_k is None and top_p is None:
        return
    t = torch.where(temperature < _SAMPLING_EPS, 1.0, temperature).to(torch.float32)
    kept = apply_top_k_top_p(logits.float() / t.unsqueeze(1), top_k, top_p)
    logits.masked_fill_(kept.isneginf(), float("-inf"))
