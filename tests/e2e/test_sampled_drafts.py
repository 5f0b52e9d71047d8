"""Sampled drafts (``draft_sample_method="probabilistic"``) on the real CPU engine, over a
centroid head (the E2B/E4B assistants' kind).

Greedy requests in a batch with sampled ones keep the output of no speculation; the
centroid head's q is 0 outside the tokens its selected centroids hold, and every draft
lies inside them; a seeded sampled request gives the same tokens alone and in a batch;
the start-up log states the draft probabilities' memory; sampled drafts are the default
and are chosen per batch, so all-greedy batches draft greedily. That the target
distribution is kept is tests/e2e/test_sampling_distribution.py's chi-square test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.conftest import pair
from tests.utils.engine import PROMPTS, drafter, engine, plugin_log, spec_metrics
from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

pytestmark = pytest.mark.engine

VARIANT = "fp32-centroid"
K = 3
MAX_TOKENS = 24
#: Gemma 4's recommended sampling
SAMPLED = dict(temperature=1.0, top_p=0.95, top_k=64)


def _params(i: int, sampled: bool, seed: int | None = None) -> Any:
    from vllm import SamplingParams

    kw: dict[str, Any] = SAMPLED if sampled else {"temperature": 0.0}
    return SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, seed=seed, **kw)


def _mixed() -> list[Any]:
    """Even indices greedy, odd ones sampled (unseeded: the global RNG)."""
    return [_params(i, sampled=i % 2 == 1) for i in range(8)]


@pytest.fixture(scope="module")
def greedy_expected() -> list[list[int]]:
    target, _ = pair(VARIANT)
    with engine(target) as llm:
        outs = llm.generate(PROMPTS[:8], _mixed(), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def startup_log() -> list[str]:
    return []


@pytest.fixture(scope="module")
def sampled_llm(greedy_expected: list[list[int]], startup_log: list[str]) -> Iterator[Any]:
    target, assistant = pair(VARIANT)
    # No draft_sample_method: sampled drafts ("probabilistic") are the plugin's default.
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": K}

    with contextlib.ExitStack() as stack:
        with plugin_log() as seen:  # start-up only
            llm = stack.enter_context(engine(target, spec))
        startup_log.extend(seen)
        yield llm


class DraftRecorder:
    """Records every sampled draft step: its hidden rows, tokens and probabilities."""

    def __init__(self, llm: Any) -> None:
        self.d = drafter(llm)
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def __enter__(self) -> DraftRecorder:
        original = self.d._sample_draft_tokens

        def record(hidden: torch.Tensor, sampling_metadata: Any) -> Any:
            ids, probs = original(hidden, sampling_metadata)
            if probs is not None:
                self.steps.append((hidden.clone(), ids.clone(), probs.clone()))
            return ids, probs

        self.d._sample_draft_tokens = record
        return self

    def __exit__(self, *exc: object) -> None:
        del self.d._sample_draft_tokens


def test_greedy_requests_in_a_mixed_batch_match_no_speculation(
    sampled_llm: Any, greedy_expected: list[list[int]]
) -> None:
    before = spec_metrics(sampled_llm)
    with DraftRecorder(sampled_llm) as rec:
        outs = sampled_llm.generate(PROMPTS[:8], _mixed(), use_tqdm=False)
    for i, o in enumerate(outs):
        tokens = list(o.outputs[0].token_ids)
        assert len(tokens) == MAX_TOKENS, (i, tokens)
        if i % 2 == 0:
            assert tokens == greedy_expected[i], i
    # Non-vacuous: drafts were sampled (probabilities reached the rejection sampler's
    # input) in this batch, and verified.
    assert rec.steps
    after = spec_metrics(sampled_llm)
    assert after["num_accepted_tokens"] > before.get("num_accepted_tokens", 0)


def test_all_greedy_batches_draft_greedily(sampled_llm: Any) -> None:
    """Sampled drafts are chosen per batch (vLLM's ``all_greedy``): greedy traffic pays
    no draft probabilities, and a batch with one sampled request samples."""
    stats = drafter(sampled_llm).frozen_stats
    rounds, sampled_rounds = stats.rounds, stats.sampled_rounds
    greedy = [_params(i, sampled=False) for i in range(4)]
    with DraftRecorder(sampled_llm) as rec:
        sampled_llm.generate(PROMPTS[:4], greedy, use_tqdm=False)
    assert not rec.steps
    assert stats.rounds > rounds and stats.sampled_rounds == sampled_rounds
    with DraftRecorder(sampled_llm) as rec:
        sampled_llm.generate(PROMPTS[:4], greedy[:3] + [_params(3, sampled=True)], use_tqdm=False)
    assert rec.steps and stats.sampled_rounds > sampled_rounds


def test_a_drafting_engine_logs_its_summary_when_due(sampled_llm: Any) -> None:
    """A server's engine is killed before its exit hook, so the drafter's summary line
    comes while it drafts, once per interval: due now, it comes in the next round, with
    the counts so far, and not again within the interval."""
    stats = drafter(sampled_llm).frozen_stats
    stats.next_log_at = 0.0
    with plugin_log() as seen:
        sampled_llm.generate(PROMPTS[:4], [_params(i, sampled=True) for i in range(4)])
    lines = [m for m in seen if "draft rounds (" in m]
    assert len(lines) == 1, seen
    assert f"k={K}:" in lines[0] and "sampled their drafts" in lines[0]
    assert stats.next_log_at > 0.0


def test_centroid_q_is_zero_outside_the_selected_centroids(sampled_llm: Any) -> None:
    params = [_params(i, sampled=True) for i in range(6)]
    with DraftRecorder(sampled_llm) as rec:
        sampled_llm.generate(PROMPTS[:6], params, use_tqdm=False)
    assert rec.steps
    model = rec.d.model
    me = model.masked_embedding
    assert me is not None and me.num_selected < me.vocab_size
    widths = []
    for hidden, ids, probs in rec.steps:
        with torch.inference_mode():  # the recorded rows are inference tensors
            _, candidates = me._select_and_score(hidden, model._get_full_lm_head_weight())
        inside = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, candidates, True)
        assert torch.all(probs[~inside] == 0)
        torch.testing.assert_close(probs.sum(-1), torch.ones(len(probs)))
        assert torch.all(inside.gather(1, ids.view(-1, 1)))
        widths.append(int((probs > 0).sum(-1).max()))
    # Non-vacuous: q spread over several tokens (these drafts were sampled, not argmaxed).
    assert max(widths) > 1, widths


def test_seeded_sampled_request_gives_the_same_tokens_alone_and_in_a_batch(
    sampled_llm: Any,
) -> None:
    """vLLM's draft sampler draws from the global RNG; the plugin redraws seeded
    requests' drafts with their own generators, so a seed fixes the output."""
    seeded = _params(0, sampled=True, seed=1234)
    alone = sampled_llm.generate(PROMPTS[:1], [seeded], use_tqdm=False)
    others = [_params(i, sampled=True) for i in range(1, 6)]
    batch = sampled_llm.generate(PROMPTS[:6], [seeded, *others], use_tqdm=False)
    assert list(alone[0].outputs[0].token_ids) == list(batch[0].outputs[0].token_ids)


def test_startup_log_states_the_draft_probability_memory(startup_log: list[str]) -> None:
    from vllm_frozen_kv_mtp.drafters.seed_proposer import draft_probs_bytes

    per_request = draft_probs_bytes(K, 512) / 2**20  # the tiny pairs' vocabulary
    lines = [m for m in startup_log if "draft probabilities take" in m]
    assert lines, startup_log
    assert f"{per_request:.2f} MiB per request" in lines[0], lines[0]


def test_v1_runner_refuses_block_verification_at_construction() -> None:
    """Pure logic: where vLLM falls back to the V1 runner by itself (config time cannot
    know), the V1 proposer refuses block verification before the parent builds anything."""
    from vllm_frozen_kv_mtp.drafters.proposer import FrozenKVMTPProposer

    config = SimpleNamespace(speculative_config=SimpleNamespace(rejection_sample_method="block"))
    proposer = object.__new__(FrozenKVMTPProposer)
    with pytest.raises(FrozenKVMTPConfigError) as e:
        FrozenKVMTPProposer.__init__(proposer, config, torch.device("cpu"))
    assert "Model Runner V2" in str(e.value)
    assert "drop rejection_sample_method" in e.value.fix
