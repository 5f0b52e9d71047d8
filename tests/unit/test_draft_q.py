"""The V1 runner's draft q, truncated like the target's p (draft_q.py): the mask itself,
against an independent numpy reference of vLLM's sampler, in the head's dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.e2e.test_sampling_distribution import truncated_probs
from vllm_frozen_kv_mtp.drafters import draft_q
from vllm_frozen_kv_mtp.drafters.draft_q import mask_outside_top_k_top_p

VOCAB = 64


def _kept_reference(logits: torch.Tensor, t: float, top_k: int, top_p: float) -> np.ndarray:
    """Tokens vLLM's sampler keeps for a row (numpy, independent of the plugin)."""
    probs = truncated_probs(logits.double().numpy()[None], t or 1.0, top_k=top_k, top_p=top_p)
    return probs[0] > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mask_keeps_exactly_what_the_target_sampler_keeps(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    logits = (torch.randn(4, VOCAB) * 3).to(dtype)
    rows = [(1.0, 8, 1.0), (0.7, VOCAB, 0.9), (1.3, 20, 0.8), (0.0, 5, 0.5)]  # last: greedy
    temperature = torch.tensor([r[0] for r in rows])
    top_k = torch.tensor([r[1] for r in rows], dtype=torch.int32)
    top_p = torch.tensor([r[2] for r in rows])
    masked = logits.clone()
    mask_outside_top_k_top_p(masked, temperature, top_k, top_p)
    for i, (t, k, p) in enumerate(rows):
        kept = ~masked[i].isneginf()
        want = _kept_reference(logits[i].float(), t, k, p)
        assert kept.numpy().tolist() == want.tolist(), (i, kept.sum(), want.sum())
        assert torch.equal(masked[i][kept], logits[i][kept])  # kept logits untouched
    assert not masked[3].isneginf()[logits[3].float().argmax()]  # greedy keeps its argmax


def test_the_cut_is_taken_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's Triton top-k / top-p (every GPU) accepts float32 only; bf16 heads feed it."""
    seen: list[torch.dtype] = []
    real = draft_q.apply_top_k_top_p

    def spy(logits: torch.Tensor, k: Any, p: Any) -> torch.Tensor:
        seen.append(logits.dtype)
        return real(logits, k, p)

    monkeypatch.setattr(draft_q, "apply_top_k_top_p", spy)
    logits = torch.randn(2, VOCAB, dtype=torch.bfloat16)
    mask_outside_top_k_top_p(logits, torch.ones(2), torch.tensor([4, 4]), None)
    assert seen == [torch.float32]
    assert int((~logits.isneginf()).sum()) == 8


def test_no_top_k_or_top_p_leaves_the_logits() -> None:
    logits = torch.randn(3, VOCAB)
    before = logits.clone()
    mask_outside_top_k_top_p(logits, torch.ones(3), None, None)
    assert torch.equal(logits, before)
