"""Sampled drafts and block verification on Model Runner V2 (CUDA graphs, async
scheduling): the target distribution is kept (chi-square against the oracle pair's exact
marginals, as in tests/e2e/test_sampling_distribution.py) and greedy requests stay
token-identical to no speculation.

On Model Runner V2 the draft q is vLLM's: the assistant's softmax at the request's
temperature (no top-k / top-p), Gumbel-sampled inside the whole-round draft graph, its
logits cached for the rejection sampler. The V1 runner cuts q by top_k / top_p (a bf16
head included, below). Block verification is vLLM's too (Sun et al.);
it accepts at other per-position rates than the standard ratio test, so only the
distribution is checked for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from devkit.instrument import acceptance, uses_v2_model_runner
from tests.conftest import pair
from tests.e2e.test_sampling_distribution import (
    SAMPLED_SETTINGS,
    SAMPLED_TEMPERATURE,
    _check_distribution,
)
from tests.gpu import GRAPH_KW
from tests.utils.engine import clear_margin_case, drafter, engine, outputs, spec_metrics
from vllm_frozen_kv_mtp.adapters import active

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

#: (draft_sample_method, rejection_sample_method) pairs beyond the default greedy/standard
VARIANTS = {
    "sampled": ("probabilistic", "standard"),
    "block": ("greedy", "block"),
    "sampled_block": ("probabilistic", "block"),
}


def _spec(assistant: str, variant: str, k: int = 2) -> dict[str, Any]:
    draft, rejection = VARIANTS[variant]
    return {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": k,
        "draft_sample_method": draft,
        "rejection_sample_method": rejection,
    }


def _skip_where_block_is_refused(variant: str, target: str, assistant: str) -> None:
    """vLLM 0.32's block verification does not keep the target distribution (it failed
    the chi-square test below), so the config is refused there: check that, then skip."""
    if VARIANTS[variant][1] != "block" or active.frontend.block_verification_lossless():
        return
    with pytest.raises(Exception, match="is not lossless on vLLM"):
        with engine(target, _spec(assistant, variant)):
            pass
    pytest.skip("block verification is refused before vLLM 0.33")


@pytest.fixture(scope="module", params=list(VARIANTS))
def oracle_llm(request: Any) -> Iterator[tuple[str, Any]]:
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0":
        pytest.skip("block verification and this q are Model Runner V2's")
    target, assistant = pair("fp32-oracle")
    _skip_where_block_is_refused(request.param, target, assistant)
    with engine(target, _spec(assistant, request.param), max_num_seqs=64, **GRAPH_KW) as llm:
        assert uses_v2_model_runner(llm.llm_engine.vllm_config)
        yield request.param, llm


@pytest.mark.parametrize("setting", list(SAMPLED_SETTINGS))
def test_v2_sampling_keeps_the_target_distribution(
    oracle_llm: tuple[str, Any], setting: str
) -> None:
    variant, llm = oracle_llm
    draft, rejection = VARIANTS[variant]
    _check_distribution(
        llm,
        SAMPLED_TEMPERATURE,
        SAMPLED_SETTINGS[setting],
        sampled=draft == "probabilistic",
        draft_truncated=False,
        first_draft_rate=rejection == "standard",
    )
    stats = drafter(llm).frozen_stats
    assert stats.graph_misses == 0


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_v2_greedy_requests_identical_with_sampling_options(runner: str, variant: str) -> None:
    """Greedy requests, alone and mixed into a batch of sampled ones, give no
    speculation's tokens under every sampling option (trained pair, fp32)."""
    if runner != "v2":
        pytest.skip("Model Runner V2 options")
    from vllm import SamplingParams

    target, assistant, prompts, extra = clear_margin_case("trained")
    _skip_where_block_is_refused(variant, target, assistant)
    prompts = prompts[:16]
    greedy = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    sampled = SamplingParams(temperature=1.0, top_p=0.95, top_k=64, max_tokens=48, ignore_eos=True)
    kw = {**GRAPH_KW, **extra}
    with engine(target, **kw) as llm:
        expected = outputs(llm.generate(prompts, greedy, use_tqdm=False))
    with engine(target, _spec(assistant, variant, k=3), **kw) as llm:
        stats = drafter(llm).frozen_stats
        # vLLM's kernel warm-up already ran real steps with sampled requests: count from here.
        rounds, sampled_rounds = stats.rounds, stats.sampled_rounds
        alone = outputs(llm.generate(prompts, greedy, use_tqdm=False))
        greedy_rounds = stats.rounds - rounds
        sampled_alone = stats.sampled_rounds - sampled_rounds
        mixed_params = [greedy if i % 2 == 0 else sampled for i in range(len(prompts))]
        mixed = outputs(llm.generate(prompts, mixed_params, use_tqdm=False))
    assert alone == expected
    assert [m for i, m in enumerate(mixed) if i % 2 == 0] == expected[::2]
    assert stats.graph_misses == 0
    assert greedy_rounds > 0
    # All-greedy batches draft greedily, in graphs of their own, whatever the option.
    assert sampled_alone == 0
    assert (stats.sampled_rounds > sampled_rounds) is (VARIANTS[variant][0] == "probabilistic")


def test_v2_default_drafts_per_batch(runner: str) -> None:
    """With no draft_sample_method, greedy batches draft greedily and batches with a
    sampled request sample their drafts, in one engine (trained pair, fp32)."""
    if runner != "v2":
        pytest.skip("Model Runner V2's per-batch draft graphs")
    from vllm import SamplingParams

    target, assistant, prompts, extra = clear_margin_case("trained")
    prompts = prompts[:8]
    greedy = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    sampled = SamplingParams(temperature=1.0, max_tokens=32, ignore_eos=True)
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, **GRAPH_KW, **extra) as llm:
        assert llm.llm_engine.vllm_config.speculative_config.draft_sample_method == (
            "probabilistic"
        )
        stats = drafter(llm).frozen_stats
        # vLLM's kernel warm-up already ran real steps with sampled requests: count from here.
        rounds, sampled_rounds = stats.rounds, stats.sampled_rounds
        llm.generate(prompts, greedy, use_tqdm=False)
        assert stats.rounds > rounds and stats.sampled_rounds == sampled_rounds
        rounds = stats.rounds
        llm.generate(prompts, sampled, use_tqdm=False)
        assert stats.sampled_rounds - sampled_rounds == stats.rounds - rounds > 0
        assert stats.graph_misses == 0


def test_v1_sampled_drafts_with_top_k_top_p_on_a_bf16_head(runner: str) -> None:
    """The V1 runner cuts a sampled draft's q by top_k / top_p with vLLM's sampler, whose
    CUDA kernel takes float32 logits only: a bf16 assistant head must not reach it in its
    own dtype. Every request completes, its drafts are sampled, and some are accepted."""
    if runner != "v1":
        pytest.skip("the V1 runner's cut q")
    from vllm import SamplingParams

    target, assistant, prompts, extra = clear_margin_case("trained")
    prompts = prompts[:16]
    settings = [
        SamplingParams(temperature=1.0, max_tokens=32, ignore_eos=True, **kw)
        for kw in ({"top_k": 64}, {"top_p": 0.95}, {"top_k": 64, "top_p": 0.95})
    ] + [SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)]
    params = [settings[i % len(settings)] for i in range(len(prompts))]
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    kw = {**GRAPH_KW, **extra, "dtype": "bfloat16"}
    with engine(target, spec, **kw) as llm:
        assert llm.llm_engine.vllm_config.speculative_config.draft_sample_method == (
            "probabilistic"
        )
        stats = drafter(llm).frozen_stats
        sampled_rounds = stats.sampled_rounds
        results = llm.generate(prompts, params, use_tqdm=False)
        sampled_now = stats.sampled_rounds - sampled_rounds
        acc = acceptance(spec_metrics(llm))
    assert [len(r.outputs[0].token_ids) for r in results] == [32] * len(prompts)
    assert sampled_now > 0
    assert acc["accepted_tokens"] > 0
