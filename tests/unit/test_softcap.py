"""The one-pass soft-cap (patch 5) on CPU: which logits processors a drafter marks, and
that a marked one keeps vLLM's ops off CUDA.

What the kernel computes (bitwise vLLM's three ops: every bf16 and fp16 value, random
fp32, strided rows) needs the GPU's tanh, which Triton's interpreter lacks:
tests/gpu/test_gpu_softcap.py. tests/unit/test_kernels_compile.py compiles it for sm_90.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch


def _logits_processor(**kw: float) -> Any:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    with set_current_vllm_config(VllmConfig()):
        return LogitsProcessor(64, **kw)


def test_drafter_marks_only_soft_capped_logits_processors() -> None:
    from vllm_frozen_kv_mtp.patches import TARGET_SOFTCAP_ATTR
    from vllm_frozen_kv_mtp.patches.target_softcap import mark_target_logits

    model = torch.nn.Module()
    model.capped = _logits_processor(soft_cap=30.0)
    model.plain = _logits_processor()
    assert mark_target_logits(model) == 1
    assert getattr(model.capped, TARGET_SOFTCAP_ATTR, None) == "one_pass"
    assert not getattr(model.plain, TARGET_SOFTCAP_ATTR, False)


def test_marked_processor_on_cpu_keeps_vllms_result(caplog: Any) -> None:
    """Patch 5 is for CUDA tensors: a marked processor on CPU runs vLLM's ops, and the
    log says so rather than claiming the kernel."""
    import vllm_frozen_kv_mtp
    from vllm_frozen_kv_mtp.patches.target_softcap import mark_target_logits

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
    model.embed = torch.nn.Embedding(4, 16)  # the target's weights, on CPU
    with caplog.at_level("INFO", logger="vllm.frozen_kv_mtp"):
        assert mark_target_logits(model) == 1
    assert "keeps vLLM's ops" in caplog.text and "on CUDA (" not in caplog.text
    assert torch.equal(lp(head, h), want)
