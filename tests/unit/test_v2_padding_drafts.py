"""Graph-padding rows of a Model Runner V2 draft round draft token 0.

The whole round runs in one CUDA graph over the padded batch, so a padding row's draft
becomes the next step's input id. On vLLM 0.32, Triton split-KV attention leaves NaN in
padding rows and the Triton argmax of Gumbel sampling turns an all-NaN row into the
vocabulary size: the next step's embedding lookup then asserted on the device
(`tests/gpu/test_gpu_sampling.py`, sampled drafts with 35 requests in a 40-row graph).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

VOCAB = 512


def _speculator(monkeypatch: pytest.MonkeyPatch, upstream_tokens: torch.Tensor) -> Any:
    from tests.utils.v2_speculator import sampling_speculator, upstream_class
    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator as cls

    monkeypatch.setattr(
        upstream_class(cls), "sample_draft", lambda self, h, *a, **k: upstream_tokens.clone()
    )
    return sampling_speculator(SimpleNamespace(masked_embedding=None))


def test_sampled_round_padding_rows_draft_token_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's sampler returned the vocabulary size for two padding rows (what its Triton
    argmax gives an all-NaN row): they become token 0, the real rows keep their drafts."""
    sampled = torch.tensor([7, 3, VOCAB, VOCAB])
    spec = _speculator(monkeypatch, sampled)
    idx_mapping = torch.tensor([5, 2, -1, -1])
    h = torch.zeros(4, 8)
    draft_logits = torch.zeros(8, 2, VOCAB)
    out = spec.sample_draft(h, None, idx_mapping, None, None, None, draft_logits)
    assert out.tolist() == [7, 3, 0, 0]


def test_real_rows_keep_every_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No padding: the drafts pass through unchanged, the last vocabulary id included."""
    sampled = torch.tensor([VOCAB - 1, 0, 11])
    spec = _speculator(monkeypatch, sampled)
    out = spec.sample_draft(
        torch.zeros(3, 8), None, torch.tensor([0, 1, 2]), None, None, None, torch.zeros(3, 2, VOCAB)
    )
    assert out.tolist() == [VOCAB - 1, 0, 11]


def test_dummy_round_drafts_token_zero_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dummy round (warm-up, idle DP rank) marks every row -1: all draft token 0, so
    nothing it leaves in the input buffers can be out of range."""
    spec = _speculator(monkeypatch, torch.tensor([VOCAB, VOCAB, 4]))
    out = spec.sample_draft(torch.zeros(3, 8), None, torch.full((3,), -1), None, None, None, None)
    assert out.tolist() == [0, 0, 0]
