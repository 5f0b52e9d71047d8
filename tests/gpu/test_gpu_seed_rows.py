"""The seed-row Triton kernel on CUDA writes what the torch path writes (bf16 hidden)."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from tests.unit.test_seed_rows import make_case
from vllm_frozen_kv_mtp.drafters.seed_rows import load_seed_rows_torch, load_seed_rows_triton

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _cuda(obj: object) -> None:
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, torch.Tensor):
            setattr(obj, f.name, value.cuda())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seed_kernel_matches_torch_on_cuda(seed: int) -> None:
    src, want = make_case(seed, torch.bfloat16)
    _, got = make_case(seed, torch.bfloat16)
    for obj in (src, want, got):
        _cuda(obj)
    load_seed_rows_torch(src, want)
    load_seed_rows_triton(src, got)  # no fallback here: a failed launch fails the test
    for f in fields(want):
        a, b = getattr(want, f.name), getattr(got, f.name)
        assert torch.equal(a, b), f.name
