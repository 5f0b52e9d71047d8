"""The fused centroid head on CUDA at the E4B head shape (256 wide, 262144 tokens, 2048
centroids of 128, top 32) in bf16, where Triton's CPU interpreter runs fp32 only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from devkit.instrument import kernel_fallbacks
from vllm_frozen_kv_mtp.drafters.heads import candidate_tokens, top_tokens

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

DIM, VOCAB, CENTROIDS, TOP_K = 256, 262144, 2048, 32


def _model(dtype: torch.dtype) -> Any:
    g = torch.Generator().manual_seed(0)
    centroids = torch.nn.Linear(DIM, CENTROIDS, bias=False)
    with torch.no_grad():
        centroids.weight.copy_(torch.randn(CENTROIDS, DIM, generator=g) * DIM**-0.5)
    me = SimpleNamespace(
        centroids=centroids.to("cuda", dtype),
        token_ordering=torch.randperm(VOCAB, generator=g).cuda(),
        num_centroids=CENTROIDS,
        vocab_size=VOCAB,
        vocab_size_per_centroid=VOCAB // CENTROIDS,
        centroid_intermediate_top_k=TOP_K,
    )
    weight = (torch.randn(VOCAB, DIM, generator=g) * DIM**-0.5).to("cuda", dtype)
    return SimpleNamespace(
        masked_embedding=me, _suppress_idx=None, _get_full_lm_head_weight=lambda: weight
    )


@pytest.mark.parametrize("rows", [1, 8, 40, 128])
def test_fused_head_picks_a_best_candidate_in_bf16(rows: int) -> None:
    """Every ``fused`` pick is one of the row's candidates and scores the row's best up to
    one bf16 rounding step (only the summation order of the dot products differs)."""
    model = _model(torch.bfloat16)
    h = torch.randn(rows, DIM, generator=torch.Generator().manual_seed(rows)).to("cuda")
    h = (h * 2).to(torch.bfloat16)
    with torch.inference_mode():
        fused = top_tokens(model, h, "fused")
        cand = candidate_tokens(model.masked_embedding, h)
        weight = model._get_full_lm_head_weight().float()
        best = (h.float() @ weight.t()).gather(1, cand).max(1).values
        picked = (h.float() * weight[fused]).sum(-1)
    assert "centroid_head" not in kernel_fallbacks(), "a launch failed"
    assert bool((cand == fused[:, None]).any(1).all())
    assert bool((picked >= best - best.abs() * 2**-7 - 1e-3).all()), (picked - best).min()
