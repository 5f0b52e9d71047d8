"""The one-pass soft-cap (``softcap_kernel``, patch 5) on CUDA is bitwise vLLM's three
eager ops: every bf16 and fp16 value, random fp32 values over many scales, the special
values, and rows of a wider tensor. Skipped without CUDA."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from vllm_frozen_kv_mtp.kernels.softcap_kernel import (
    BLOCK,
    eager_softcap,
    one_pass_softcap_supported,
    softcap_in_place,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

CAP = 30.0  # Gemma 4's final_logit_softcapping


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per element: equal bit patterns, or both NaN (payloads may differ)."""
    ints = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return (a.view(ints) == b.view(ints)) | (a.isnan() & b.isnan())


def _every_16_bit_value(dtype: torch.dtype) -> torch.Tensor:
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32, device="cuda").to(torch.int16)
    return bits.view(dtype).reshape(16, 4096)


def _check_rows_of_a_wider_tensor(
    kernel: Callable[..., Any], dtype: torch.dtype, supported: Callable[[Any], bool] | None = None
) -> None:
    """vLLM slices padded vocabularies (``logits[..., :org_vocab_size]``): a row stride
    that is not the row length; ``kernel`` writes the view in place, bitwise vLLM's, and
    leaves the columns past it untouched (``supported``: the kernel's own precondition,
    which the view must meet)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    wide = (torch.randn(5, 2 * BLOCK + 700, device="cuda", generator=g) * 40).to(dtype)
    view = wide[:, : 2 * BLOCK + 300]
    want = eager_softcap(view, CAP)
    tail = wide[:, 2 * BLOCK + 300 :].clone()
    assert supported is None or supported(view)
    out = kernel(view, CAP)
    assert out.data_ptr() == wide.data_ptr()
    assert torch.equal(out, want)
    assert torch.equal(wide[:, 2 * BLOCK + 300 :], tail)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_16_bit_value_matches_vllm(dtype: torch.dtype) -> None:
    x = _every_16_bit_value(dtype)
    want = eager_softcap(x, CAP)
    assert one_pass_softcap_supported(x)
    got = softcap_in_place(x.clone(), CAP)
    same = _same_bits(got, want)
    bad = (~same).nonzero()
    assert bool(same.all()), f"{len(bad)} values differ, e.g. {x[tuple(bad[0])].item()}"


def test_random_fp32_values_match_vllm() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    scales = torch.logspace(-4, 4, 64, device="cuda").repeat_interleave(4)[:, None]
    x = torch.randn(256, 262144, device="cuda", generator=g) * scales
    x[0, :6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45])
    want = eager_softcap(x, CAP)
    got = softcap_in_place(x.clone(), CAP)
    assert bool(_same_bits(got, want).all())


def test_rows_of_a_wider_tensor() -> None:
    _check_rows_of_a_wider_tensor(softcap_in_place, torch.bfloat16, one_pass_softcap_supported)
