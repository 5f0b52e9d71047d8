"""A draft q truncated like the target's p (option ``draft_q``): the mask itself, against
an independent numpy reference, and where Model Runner V2 applies it (the speculator's
``compute_draft_logits``, read by the parent's Gumbel draw and logits cache).

The V2 speculator is ``tests/utils/v2_speculator.py``'s stand-in (no model, no engine);
the sampler's per-request top_k / top_p stand in for vLLM's ``SamplingStates``, which
needs pinned memory a CPU-only host lacks.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from tests.e2e.test_sampling_distribution import truncated_probs
from tests.utils.v2_speculator import stand_in_speculator
from vllm_frozen_kv_mtp import draft_q
from vllm_frozen_kv_mtp.draft_q import mask_outside_top_k_top_p

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


# ---- Model Runner V2: the speculator's hook --------------------------------------


def _v2_speculator(draft_q_option: str, greedy_round: bool = False) -> Any:
    spec = stand_in_speculator(k=2, max_reqs=4, manager=None)
    spec.frozen_options = SimpleNamespace(kv_guard=False, draft_q=draft_q_option)
    torch.manual_seed(1)
    spec.model_logits = torch.randn(4, VOCAB) * 3
    spec.model = SimpleNamespace(compute_logits=lambda hidden: spec.model_logits.clone())
    # request-state slots 2, 0, 3, 1 hold the batch's rows 0..3
    spec.idx_mapping[:] = torch.tensor([2, 0, 3, 1])
    spec.temperature[:] = torch.tensor([1.0, 0.5, 1.0, 2.0])  # by slot
    top_k = torch.tensor([VOCAB, 4, 10, VOCAB], dtype=torch.int32)  # by slot
    top_p = torch.tensor([0.9, 1.0, 1.0, 1.0])
    spec.attach_sampling_states(
        SimpleNamespace(top_k=SimpleNamespace(gpu=top_k), top_p=SimpleNamespace(gpu=top_p))
    )
    spec._greedy_round = greedy_round
    return spec


def test_v2_truncated_q_cuts_each_row_by_its_requests_settings() -> None:
    spec = _v2_speculator("truncated")
    logits = spec.compute_draft_logits(torch.zeros(4, 8), 0)
    slots = [2, 0, 3, 1]
    temps, ks, ps = [1.0, 0.5, 1.0, 2.0], [VOCAB, 4, 10, VOCAB], [0.9, 1.0, 1.0, 1.0]
    for row, slot in enumerate(slots):
        want = _kept_reference(spec.model_logits[row], temps[slot], ks[slot], ps[slot])
        assert (~logits[row].isneginf()).numpy().tolist() == want.tolist(), row
    assert int((~logits[0].isneginf()).sum()) == 10  # row 0 is slot 2: top_k 10


@pytest.mark.parametrize(("option", "greedy_round"), [("auto", False), ("truncated", True)])
def test_v2_keeps_vllms_q_by_default_and_in_greedy_rounds(option: str, greedy_round: bool) -> None:
    spec = _v2_speculator(option, greedy_round)
    logits = spec.compute_draft_logits(torch.zeros(4, 8), 0)
    assert torch.equal(logits, spec.model_logits)
