"""The KL-distilled assistant (``assistant_kl/``) of the committed trained target on the
real CPU engine.

It was distilled against the target's whole distribution so that sampled drafts
(``draft_sample_method="probabilistic"``) are accepted at temperature 1, where the
greedy-distilled assistant's over-sharp q overlaps p little (vLLM AL 1.39 there, see
bench/results/cpu_acceptance.json). One engine with sampled drafts serves both
checks: greedy requests (drafted greedily) must give exactly the target's own tokens,
and seeded requests at Gemma 4's recommended sampling must clear an acceptance floor
that the greedy-distilled assistant does not reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.fixtures.trained import eval_prompts, trained_pair_paths
from devkit.instrument import diff_metrics
from tests.utils.engine import engine, outputs, spec_metrics

pytestmark = pytest.mark.engine

K = 3
PROMPTS = 8
GREEDY_TOKENS = 48
SAMPLED_TOKENS = 48
#: Gemma 4's recommended sampling
SAMPLED = dict(temperature=1.0, top_p=0.95, top_k=64)
#: AL measured here: 3.08 with these seeds, 2.65 to 3.03 with three other seed sets;
#: the greedy-distilled assistant gives 1.42 (at most 1.46 over the same seed sets),
#: so the floor catches an over-sharp q (or a q that is not the assistant's) and
#: leaves room for sampling noise on other builds.
AL_FLOOR = 2.2


def _prompts() -> list[dict[str, list[int]]]:
    return [{"prompt_token_ids": p} for p in eval_prompts()[:PROMPTS]]


def _engine(spec: dict[str, Any] | None) -> Any:
    target, _ = trained_pair_paths(assistant="kl")
    return engine(str(target), spec, dtype="float32", max_num_seqs=PROMPTS)


def _greedy() -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=GREEDY_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def plain_tokens() -> list[list[int]]:
    with _engine(None) as llm:
        return [o[0] for o in outputs(llm.generate(_prompts(), _greedy(), use_tqdm=False))]


@pytest.fixture(scope="module")
def kl_llm(plain_tokens: list[list[int]]) -> Iterator[Any]:
    spec = {
        "method": "frozen_kv_mtp",
        "model": str(trained_pair_paths(assistant="kl")[1]),
        "num_speculative_tokens": K,
        "draft_sample_method": "probabilistic",
    }
    with _engine(spec) as llm:
        yield llm


def _acceptance_length(before: dict[str, Any], after: dict[str, Any]) -> float:
    m = diff_metrics(before, after)
    assert m["num_drafts"] > 0
    return 1 + m["num_accepted_tokens"] / m["num_drafts"]


def test_greedy_output_is_the_targets_own(kl_llm: Any, plain_tokens: list[list[int]]) -> None:
    before = spec_metrics(kl_llm)
    res = kl_llm.generate(_prompts(), _greedy(), use_tqdm=False)
    tokens = [o[0] for o in outputs(res)]
    assert all(len(t) == GREEDY_TOKENS for t in tokens)
    assert tokens == plain_tokens
    # Non-vacuous: most drafts were accepted, so the output went through verification.
    assert _acceptance_length(before, spec_metrics(kl_llm)) > 2.0


def test_sampled_drafts_at_temperature_one_clear_the_floor(kl_llm: Any) -> None:
    from vllm import SamplingParams

    params = [
        SamplingParams(max_tokens=SAMPLED_TOKENS, ignore_eos=True, seed=i, **SAMPLED)
        for i in range(PROMPTS)
    ]
    before = spec_metrics(kl_llm)
    res = kl_llm.generate(_prompts(), params, use_tqdm=False)
    assert all(len(o[0]) == SAMPLED_TOKENS for o in outputs(res))
    al = _acceptance_length(before, spec_metrics(kl_llm))
    assert al >= AL_FLOOR, f"AL {al:.3f} at temperature 1 with sampled drafts < {AL_FLOOR}"
