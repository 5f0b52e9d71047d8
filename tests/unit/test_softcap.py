"""The one-pass soft-cap (patch 5) on CPU: which logits processors a drafter marks, that
a marked one keeps vLLM's ops off CUDA, and the table kernel (a candidate for 16-bit
logits) in Triton's interpreter.

What the kernel computes (bitwise vLLM's three ops: every bf16 and fp16 value, random
fp32, strided rows) needs the GPU's tanh, which Triton's interpreter lacks:
tests/gpu/test_gpu_softcap.py. tests/unit/test_kernels_compile.py compiles it for sm_90.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from tests.utils.triton_interpreter import run_in_triton_interpreter

_TABLE_CHECK = """
import torch
from vllm_frozen_kv_mtp.kernels.softcap_kernel import BLOCK, eager_softcap, softcap_table_in_place

g = torch.Generator().manual_seed(0)
for dtype in (torch.bfloat16, torch.float16):
    every = torch.arange(2**16, dtype=torch.int32).to(torch.int16).view(dtype)
    # rows of a wider tensor: every 16-bit pattern, then random values; a row stride that
    # is not the row length, and columns past the view that must stay as they were
    wide = (torch.randn(3, BLOCK + 700, generator=g) * 40).to(dtype)
    wide[0, :BLOCK] = every[:BLOCK]
    wide[1] = every[BLOCK : 2 * BLOCK + 700]
    view = wide[:, : BLOCK + 300]
    want = eager_softcap(view.clone(), 30.0)
    tail = wide[:, BLOCK + 300 :].clone()
    out = softcap_table_in_place(view, 30.0)
    assert out.data_ptr() == wide.data_ptr()
    assert torch.equal(wide[:, BLOCK + 300 :].view(torch.int16), tail.view(torch.int16))
    assert torch.equal(out.view(torch.int16), want.view(torch.int16)), dtype
    full = softcap_table_in_place(every.clone().reshape(16, 4096), 30.0).reshape(-1)
    assert torch.equal(full.view(torch.int16), eager_softcap(every, 30.0).view(torch.int16))
print("table kernel gives the eager ops' bits")
"""


def test_table_kernel_gives_the_eager_ops_bits() -> None:
    """On CPU the table holds the CPU's eager results, so the kernel must reproduce them
    bit for bit: every 16-bit pattern, strided rows, nothing written past the view."""
    assert "eager ops' bits" in run_in_triton_interpreter(_TABLE_CHECK)


def _logits_processor(**kw: float) -> Any:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    with set_current_vllm_config(VllmConfig()):
        return LogitsProcessor(64, **kw)


def test_drafter_marks_only_soft_capped_logits_processors() -> None:
    from vllm_frozen_kv_mtp.kernels.softcap_kernel import mark_target_logits
    from vllm_frozen_kv_mtp.patches import TARGET_SOFTCAP_ATTR

    model = torch.nn.Module()
    model.capped = _logits_processor(soft_cap=30.0)
    model.plain = _logits_processor()
    assert mark_target_logits(model) == 1
    assert getattr(model.capped, TARGET_SOFTCAP_ATTR, None) == "one_pass"
    assert not getattr(model.plain, TARGET_SOFTCAP_ATTR, False)
    assert mark_target_logits(model, "table") == 1  # on CPU: no table is built
    assert getattr(model.capped, TARGET_SOFTCAP_ATTR, None) == "table"


def test_marked_processor_on_cpu_keeps_vllms_result() -> None:
    """Patch 5 is for CUDA tensors: a marked processor on CPU runs vLLM's ops."""
    import vllm_frozen_kv_mtp
    from vllm_frozen_kv_mtp.kernels.softcap_kernel import mark_target_logits

    vllm_frozen_kv_mtp.register()
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    assert getattr(LogitsProcessor.forward, "_frozen_kv_mtp_patch", False), "patch 5 not applied"
    lp = _logits_processor(soft_cap=30.0)
    head = SimpleNamespace(
        weight=torch.randn(64, 16) * 4,
        quant_method=SimpleNamespace(apply=lambda layer, h, bias=None: h @ layer.weight.t()),
        tp_size=1,
    )
    h = torch.randn(5, 16)
    want = torch.tanh(h @ head.weight.t() / 30.0) * 30.0
    assert torch.equal(lp(head, h), want)
    model = torch.nn.Module()
    model.lp = lp
    mark_target_logits(model)
    assert torch.equal(lp(head, h), want)
