"""FP8 KV cache on CUDA: drafter layers read the target's cache with the target's scales.

Upstream's V1 proposer leaves the drafter's K/V scales at 1.0 while it reads a
calibrated FP8 cache (vllm-project/vllm#41789: 0.2% acceptance). A checkpoint with
calibrated scales is simulated by giving every target attention layer a K/V scale
of 2.0 at load; the drafter's layers keep vLLM's default 1.0 unless someone copies
the target's. Run once per runner, as the other GPU tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from devkit.instrument import acceptance, kernel_fallbacks, kernel_launches
from tests.gpu import GRAPH_KW
from tests.utils.engine import drafter, engine, outputs, spec_metrics

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

SCALE = 2.0
KW: dict[str, Any] = {**GRAPH_KW, "kv_cache_dtype": "fp8", "dtype": "float32"}


@pytest.fixture
def calibrated_target_scales(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from vllm.model_executor.layers.attention.attention import Attention

    original = Attention.process_weights_after_loading

    def process_weights_after_loading(self: Any, act_dtype: torch.dtype) -> None:
        original(self, act_dtype)
        # Target layers only: the drafter's are named ``draft_model...`` (their KV
        # sharing is wired after loading, so kv_sharing_target_layer_name is unset here).
        if "draft_model" not in self.layer_name:
            self._k_scale.fill_(SCALE)
            self._v_scale.fill_(SCALE)
            self._k_scale_float = self._v_scale_float = SCALE
            for name in ("_k_scale_cpu", "_v_scale_cpu"):
                if hasattr(self, name):
                    getattr(self, name).fill_(SCALE)

    monkeypatch.setattr(Attention, "process_weights_after_loading", process_weights_after_loading)
    yield


def split_counts() -> tuple[int, int]:
    """(fallbacks, launches) of the split decode attention in this process so far."""
    return kernel_fallbacks().get("split_decode", 0), kernel_launches().get("split_decode", 0)


def _draft_scales(llm: Any) -> list[float]:
    """K and V scales of every drafter attention layer (both runners name them)."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    d = drafter(llm)
    names = getattr(d, "draft_attn_layer_names", None) or d._draft_attn_layer_names
    cfg = llm.llm_engine.vllm_config
    layers = get_layers_from_vllm_config(cfg, AttentionLayerBase)  # type: ignore[type-abstract]
    return [float(getattr(layers[n], s)) for n in sorted(names) for s in ("_k_scale", "_v_scale")]


def test_fp8_kv_drafter_uses_target_scales(calibrated_target_scales: None, runner: str) -> None:
    from vllm import SamplingParams

    from devkit.fixtures.trained import eval_prompts, trained_pair_paths

    t, a = trained_pair_paths()
    prompts = [{"prompt_token_ids": p} for p in eval_prompts()]
    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    res: dict[str, Any] = {}
    for method in ("none", "mtp", "frozen_kv_mtp"):
        spec = (
            None
            if method == "none"
            else {"method": method, "model": str(a), "num_speculative_tokens": 3}
        )
        with engine(str(t), spec, max_num_seqs=len(prompts), **KW) as llm:
            out = outputs(llm.generate(prompts, params, use_tqdm=False))
            res[method] = (out, acceptance(spec_metrics(llm)), _draft_scales(llm) if spec else [])
    for method in ("mtp", "frozen_kv_mtp"):
        _, acc, scales = res[method]
        print(f"{runner} fp8 {method}: drafter K/V scales {sorted(set(scales))}, {acc}")
    out, acc, scales = res["frozen_kv_mtp"]
    assert scales and all(s == SCALE for s in scales), scales
    assert out == res["none"][0]
    # Same drafts as upstream wherever upstream reads the cache right (V2); never worse.
    assert acc["accepted_tokens"] >= 0.98 * res["mtp"][1]["accepted_tokens"]
    assert acc["accepted_tokens"] > 0.5 * acc["draft_tokens"]


def test_fp8_kv_split_decode_attention(calibrated_target_scales: None, runner: str) -> None:
    """draft_attention="split" over an FP8 cache: the split kernel reads it with the
    target's per-tensor scales (no fallback to vLLM's kernels), output equals no
    speculation at fp8, and acceptance matches plain frozen_kv_mtp's (same drafts up to
    the two kernels' rounding)."""
    if runner != "v2":
        pytest.skip("draft_attention applies to Model Runner V2")
    from vllm import SamplingParams

    from devkit.fixtures.trained import eval_prompts, trained_pair_paths

    t, a = trained_pair_paths()
    prompts = [{"prompt_token_ids": p} for p in eval_prompts()]
    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    base = {"method": "frozen_kv_mtp", "model": str(a), "num_speculative_tokens": 3}
    res: dict[str, Any] = {}
    for name, spec in (
        ("none", None),
        ("frozen", base),
        ("split", {**base, "draft_attention": "split"}),
    ):
        before = split_counts()
        with engine(str(t), spec, max_num_seqs=len(prompts), **KW) as llm:
            out = outputs(llm.generate(prompts, params, use_tqdm=False))
            acc = acceptance(spec_metrics(llm)) if spec else {}
            scales = _draft_scales(llm) if spec else []
        after = split_counts()
        counts = (after[0] - before[0], after[1] - before[1])
        res[name] = (out, acc, scales, counts)
        print(f"{runner} fp8 {name}: {acc}, (fallbacks, split calls) {counts}")
    out, acc, scales, (fallbacks, calls) = res["split"]
    assert calls > 0 and fallbacks == 0, (calls, fallbacks)
    assert scales and all(s == SCALE for s in scales), scales
    assert out == res["none"][0]
    plain = res["frozen"][1]["accepted_tokens"]
    assert abs(acc["accepted_tokens"] - plain) <= 0.02 * plain, (acc, res["frozen"][1])
