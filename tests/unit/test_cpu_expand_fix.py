"""Patch 4: float per-request values expand correctly to per-draft-token values on CPU."""

from __future__ import annotations

import torch

import vllm_frozen_kv_mtp
from vllm_frozen_kv_mtp import patches


def test_float_expand_is_exact_on_cpu() -> None:
    vllm_frozen_kv_mtp.register()
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample import rejection_sampler as rs

    patches.enable_frozen_runtime_fixes()
    cu = torch.tensor([2, 3, 3, 6], dtype=torch.int32)  # 2, 1, 0 and 3 drafts
    temps = torch.tensor([1.5, 0.0, 0.7, 2.0])
    out = rs.expand_batch_to_tokens(temps, cu, 6, replace_from=0, replace_to=1)
    assert out.tolist() == [1.5, 1.5, 1.0, 2.0, 2.0, 2.0]
    # integer tensors still take vLLM's own kernel
    ints = rs.expand_batch_to_tokens(torch.tensor([5, 7, 8, 9]), cu, 6)
    assert ints.tolist() == [5, 5, 7, 9, 9, 9]
