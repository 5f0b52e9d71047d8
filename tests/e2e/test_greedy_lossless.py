"""Greedy output with frozen_kv_mtp is token-identical to no speculation (fp32, real engine).

Covers k in {1, 2, 4}, batch sizes 1 and 8, 18 prompts whose sequences run past the
sliding window (32), dense and centroid heads, a target with KV-shared tail layers,
and an oracle pair where every draft is accepted (multi-token commits every step).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import pair
from tests.utils.engine import PROMPTS, engine, outputs, plugin_log, spec_metrics

pytestmark = pytest.mark.engine

VARIANTS = ["fp32", "fp32-centroid", "fp32-kvshared", "fp32-oracle"]
MAX_TOKENS = 40
SLIDING_WINDOW = 32


def _params() -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)


def _generate(llm: Any) -> dict[str, list[Any]]:
    """Outputs for the whole prompt list in one batch, and one prompt at a time."""
    batched = outputs(llm.generate(PROMPTS, _params(), use_tqdm=False))
    single = [outputs(llm.generate([p], _params(), use_tqdm=False))[0] for p in PROMPTS]
    return {"batch8": batched, "batch1": single}


_baselines: dict[str, dict[str, list[Any]]] = {}


def _baseline(variant: str) -> dict[str, list[Any]]:
    if variant not in _baselines:
        target, _ = pair(variant)
        with engine(target) as llm:
            _baselines[variant] = _generate(llm)
    return _baselines[variant]


def test_prompts_reach_past_the_sliding_window() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(pair("fp32")[0])
    lengths = [len(tok(p).input_ids) for p in PROMPTS]
    assert len(PROMPTS) >= 16
    assert sum(n > SLIDING_WINDOW for n in lengths) >= 3, lengths


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_identical_to_no_speculation(variant: str, k: int) -> None:
    expected = _baseline(variant)
    target, assistant = pair(variant)
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}
    with engine(target, spec) as llm:
        got = _generate(llm)
        metrics = spec_metrics(llm)
    for mode in ("batch8", "batch1"):
        for i, (g, e) in enumerate(zip(got[mode], expected[mode], strict=True)):
            assert g == e, f"{variant} k={k} {mode} prompt {i}: {g} != {e}"
    assert metrics["num_drafts"] > 0
    assert metrics["num_draft_tokens"] == k * metrics["num_drafts"]
    if variant == "fp32-oracle":
        # The oracle assistant computes the target's own next-token map: all accepted.
        assert metrics["num_accepted_tokens"] == metrics["num_draft_tokens"]
        assert metrics["num_accepted_tokens_per_pos"] == [metrics["num_drafts"]] * k


@pytest.mark.parametrize("k", [3, "auto"])
def test_chunked_prefill_and_prefix_caching(k: int | str) -> None:
    """Long prompts split into chunks, and repeated prefixes served from the prefix cache,
    at a fixed k and with k chosen each step."""
    variant = "fp32-kvshared"
    target, assistant = pair(variant)
    shared = "class Attention(nn.Module):\n    def forward(self, x):\n" * 4
    prompts = [shared + tail for tail in ("return x", "x = x + 1", "pass", "y = x")] + PROMPTS[:6]
    kwargs = dict(
        enable_chunked_prefill=True, max_num_batched_tokens=64, enable_prefix_caching=True
    )

    def run(llm: Any) -> list[Any]:
        first = outputs(llm.generate(prompts, _params(), use_tqdm=False))
        again = outputs(llm.generate(prompts, _params(), use_tqdm=False))  # prefix-cache hits
        assert first == again
        return first

    with engine(target, **kwargs) as llm:
        expected = run(llm)
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}
    with engine(target, spec, **kwargs) as llm:
        got = run(llm)
        assert spec_metrics(llm)["num_drafts"] > 0
    assert got == expected


def test_v2_only_options_on_the_v1_runner_warn_and_keep_output() -> None:
    """centroid_head, sliding_split_kv_max_rows, draft_attention and dense_head tune Model
    Runner V2; the V1 runner (the CPU's) says at start-up that it ignores them, and
    output stays lossless."""
    import logging

    variant = "fp32-centroid"
    expected = _baseline(variant)
    target, assistant = pair(variant)
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 2,
        "centroid_head": "fused",
        "sliding_split_kv_max_rows": 8,
        "draft_attention": "split",
        "dense_head": "fp8",
    }
    with plugin_log(logging.WARNING) as seen, engine(target, spec) as llm:
        assert not llm.llm_engine.vllm_config.use_v2_model_runner
        got = _generate(llm)
    assert got == expected
    assert any("centroid_head='fused' applies to Model Runner V2 only" in m for m in seen), seen
    assert any("sliding_split_kv_max_rows=8 applies to Model Runner V2" in m for m in seen), seen
    assert any("draft_attention='split' applies to Model Runner V2" in m for m in seen), seen
    assert any("dense_head='fp8' applies to Model Runner V2" in m for m in seen), seen
