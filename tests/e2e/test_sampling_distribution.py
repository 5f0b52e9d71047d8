"""With temperature > 0 (and top-k / top-p), frozen_kv_mtp + vLLM's RejectionSampler keep
the target distribution.

The oracle target's next-token logits depend only on the current token (all
attention/MLP branches write zero), so the exact distribution of every generated
token is computable: P[t] = the truncated, renormalised softmax(logits(t) / T) that
vLLM samples from, token 1 ~ P[last prompt token], token 2 ~ p1 @ P, token 3 ~ p1 @ P @ P.
Tokens 2 and 3 are verified drafts (the oracle drafter proposes the target's greedy
token, one-hot, so acceptance probability is P[d]); a chi-square test compares their
empirical frequencies with the exact marginals. The same test is shown to reject a
biased sampler that always accepts the draft, and one that ignores top-k / top-p.

Sampled drafts (``draft_sample_method="probabilistic"``) are drawn from the oracle
assistant's q, which is not the target's p: the assistant has no final-logit soft-cap
(the target caps at 30), so q = the truncated softmax(raw logits / T), sharper than p.
Its first-draft acceptance, sum over tokens of min(p, q), is then computable too and
differs from the greedy draft's p(argmax q); the chi-square test also rejects samplers
that verify sampled drafts wrongly (always accept; resample from p on rejection; verify
with another request's q).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from tests.conftest import pair
from tests.utils.engine import drafter, engine, spec_metrics

pytestmark = pytest.mark.engine

TEMPERATURE = 1.5
N = 1500
ALPHA = 1e-3
#: FROZEN_KV_MTP_TEST_SEED draws another sample: a chance failure of a chi-square test
#: (about 1 in 1,000 a position) must not repeat under new seeds, a real bias does
SEED_BASE = int(os.environ.get("FROZEN_KV_MTP_TEST_SEED", "0"))
PROMPT = "def forward(self, x):"
#: sampling settings on top of TEMPERATURE; each cuts real mass off the oracle's rows
SETTINGS: dict[str, dict[str, Any]] = {
    "temperature": {},
    "top_k": {"top_k": 8},
    "top_p": {"top_p": 0.8},
    "top_k_top_p": {"top_k": 20, "top_p": 0.7},
}
#: sampled drafts: Gemma 4's recommended temperature, with and without its top-k / top-p
SAMPLED_TEMPERATURE = 1.0
SAMPLED_SETTINGS: dict[str, dict[str, Any]] = {
    "temperature": {},
    "top_k": {"top_k": 8},
    "gemma_recommended": {"top_k": 64, "top_p": 0.95},
}


@functools.cache
def oracle_logits(target: str, softcap: bool = True) -> np.ndarray:
    """logits[t]: the oracle target's next-token logits after current token t (HF fp32).
    Without the soft-cap they are the oracle assistant's logits after input token t."""
    from transformers import Gemma4ForCausalLM

    model = Gemma4ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    if not softcap:
        model.config.final_logit_softcapping = None
    vocab = model.config.vocab_size
    with torch.no_grad():
        logits = model(input_ids=torch.arange(vocab)[:, None]).logits[:, -1].double()
    return logits.numpy()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def truncated_probs(
    logits: np.ndarray,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    slack: float = 0.0,
) -> np.ndarray:
    """Row-wise distribution vLLM samples from (``apply_top_k_top_p_pytorch``): logits / T;
    drop logits below the k-th largest; then drop the least likely tokens whose total
    mass is <= 1 - top_p (the most likely one always stays); renormalise. ``slack``
    widens both cuts, for support checks that must tolerate fp32 rounding."""
    x = logits / temperature
    order = np.argsort(x, axis=-1, kind="stable")  # ascending, as vLLM sorts
    xs = np.take_along_axis(x, order, axis=-1)
    vocab = x.shape[-1]
    if 0 < top_k < vocab:
        kth = xs[:, vocab - top_k][:, None]
        xs = np.where(xs < kth - slack, -np.inf, xs)
    if top_p < 1.0:
        cum = np.cumsum(_softmax(xs), axis=-1)
        drop = cum <= 1 - top_p - slack
        drop[:, -1] = False
        xs = np.where(drop, -np.inf, xs)
    out = np.empty_like(xs)
    np.put_along_axis(out, order, xs, axis=-1)
    return _softmax(out)


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells with small expectation are pooled.
    Counts in zero-probability cells make the fit fail (p = 0)."""
    from scipy.stats import chisquare

    if counts[probs == 0].sum() > 0:
        return 0.0
    expected = probs * counts.sum()
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    return float(chisquare(obs, exp).pvalue)


def verified_probs(P: np.ndarray, D: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Row-wise distribution of a verified token when the draft is drawn from D and
    vLLM's ratio test is given V: keep d with min(1, P(d) / V(d)), else draw from
    max(P - V, 0) renormalised. V = D gives P exactly (the lossless case)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(V > 0, np.minimum(1.0, P / V), 1.0)
    residual = np.maximum(P - V, 0)
    norm = residual.sum(-1, keepdims=True)
    residual = np.divide(residual, norm, out=np.zeros_like(residual), where=norm > 0)
    reject = (D * (1 - keep)).sum(-1, keepdims=True)
    return D * keep + reject * residual


def draft_acceptance(P: np.ndarray, Q: np.ndarray, p1: np.ndarray, sampled: bool) -> float:
    """Expected acceptance of the first draft, after token 1 ~ p1: sum min(p, q) for a
    draft sampled from q, p(argmax q) for a greedy one."""
    per_token = np.minimum(P, Q).sum(-1) if sampled else P[np.arange(len(P)), Q.argmax(-1)]
    return float(p1 @ per_token)


def test_sampled_draft_verification_model_is_exact_and_the_test_has_power() -> None:
    """With sampled drafts, V = D reproduces p exactly; verifying with a wrong q, always
    keeping the draft, or resampling from p on rejection all fail at the same N."""
    target, _ = pair("fp32-oracle")
    rng = np.random.default_rng(1)
    for name, setting in SAMPLED_SETTINGS.items():
        P = truncated_probs(oracle_logits(target), SAMPLED_TEMPERATURE, **setting)
        Q = truncated_probs(oracle_logits(target, softcap=False), SAMPLED_TEMPERATURE, **setting)
        np.testing.assert_allclose(verified_probs(P, Q, Q), P, atol=1e-12)
        p1, true_p2 = P[7], P[7] @ P
        assert chi_square_pvalue(rng.multinomial(N, true_p2), true_p2) > ALPHA, name
        keep_all = Q
        resample_from_p = np.minimum(P, Q) + (1 - np.minimum(P, Q).sum(-1, keepdims=True)) * P
        biased = {
            "always accept": keep_all,
            "resample from p": resample_from_p,
            # each draft verified with the q of another request (a row mix-up)
            "another request's q": verified_probs(P, Q, np.roll(Q, 1, axis=0)),
        }
        for bias, rows in biased.items():
            assert chi_square_pvalue(rng.multinomial(N, p1 @ rows), true_p2) < 1e-12, (name, bias)
        # the engine test below tells sampled from greedy drafts by their acceptance
        gap = draft_acceptance(P, Q, p1, True) - draft_acceptance(P, Q, p1, False)
        assert gap > 0.1, (name, gap)


def test_chi_square_has_power_against_biased_samplers() -> None:
    """Same N and alpha: exact samples pass; 'always accept the draft' samples fail, and
    so do samples that ignore top-k / top-p (what garbage expanded values give)."""
    target, _ = pair("fp32-oracle")
    logits = oracle_logits(target)
    rng = np.random.default_rng(0)
    P = truncated_probs(logits, TEMPERATURE)
    p1 = P[7]
    true_p2 = p1 @ P
    greedy = P.argmax(-1)
    biased_p2 = np.bincount(greedy, weights=p1, minlength=P.shape[0])  # draft always kept
    honest = rng.multinomial(N, true_p2)
    biased = rng.multinomial(N, biased_p2)
    assert chi_square_pvalue(honest, true_p2) > ALPHA
    assert chi_square_pvalue(biased, true_p2) < 1e-12
    for name, setting in SETTINGS.items():
        if not setting:
            continue
        Pt = truncated_probs(logits, TEMPERATURE, **setting)
        truncated_p2 = Pt[7] @ Pt
        assert chi_square_pvalue(rng.multinomial(N, truncated_p2), truncated_p2) > ALPHA, name
        untruncated = rng.multinomial(N, Pt[7] @ P)  # verification ignored the setting
        assert chi_square_pvalue(untruncated, truncated_p2) < 1e-12, name


def _llm(draft_sample_method: str) -> Iterator[Any]:
    target, assistant = pair("fp32-oracle")
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 2,
        "draft_sample_method": draft_sample_method,
    }
    with engine(target, spec, max_num_seqs=64) as llm:
        yield llm


@pytest.fixture(scope="module")
def spec_llm() -> Iterator[Any]:
    yield from _llm("greedy")


@pytest.fixture(scope="module")
def sampled_llm() -> Iterator[Any]:
    yield from _llm("probabilistic")


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_verified_tokens_follow_the_target_distribution(spec_llm: Any, setting: str) -> None:
    _check_distribution(spec_llm, TEMPERATURE, SETTINGS[setting], sampled=False)


@pytest.mark.parametrize("setting", list(SAMPLED_SETTINGS))
def test_sampled_drafts_keep_the_target_distribution(sampled_llm: Any, setting: str) -> None:
    _check_distribution(sampled_llm, SAMPLED_TEMPERATURE, SAMPLED_SETTINGS[setting], sampled=True)


def _check_distribution(
    llm: Any,
    temperature: float,
    kw: dict[str, Any],
    sampled: bool,
    draft_truncated: bool = True,
    first_draft_rate: bool = True,
) -> None:
    """Chi-square of tokens 1-3 against the exact marginals, plus non-vacuity checks.
    ``draft_truncated``: the draft q carries the request's top-k / top-p (the V1 runner)
    or the temperature only (Model Runner V2, vLLM's q). ``first_draft_rate``: the first
    drafts' acceptance must match the standard ratio test's (block verification accepts
    at other rates)."""
    from vllm import SamplingParams

    target, _ = pair("fp32-oracle")
    P = truncated_probs(oracle_logits(target), temperature, **kw)
    Q = truncated_probs(
        oracle_logits(target, softcap=False), temperature, **(kw if draft_truncated else {})
    )
    before = spec_metrics(llm)
    params = [
        SamplingParams(
            temperature=temperature, max_tokens=3, seed=SEED_BASE + i, ignore_eos=True, **kw
        )
        for i in range(N)
    ]
    outs = llm.generate([PROMPT] * N, params, use_tqdm=False)
    after = spec_metrics(llm)
    tokens = np.array([list(o.outputs[0].token_ids) for o in outs])
    assert tokens.shape == (N, 3)
    p1 = P[outs[0].prompt_token_ids[-1]]
    p2 = p1 @ P
    p3 = p2 @ P
    vocab = P.shape[0]
    pvalues = [
        chi_square_pvalue(np.bincount(tokens[:, i], minlength=vocab), p)
        for i, p in enumerate((p1, p2, p3))
    ]
    assert all(p > ALPHA for p in pvalues), pvalues
    # Non-vacuous: drafts were verified, and both accepted and rejected ones occurred.
    drafts, accepted, drafted = (
        after[key] - before.get(key, 0)
        for key in ("num_drafts", "num_accepted_tokens", "num_draft_tokens")
    )
    assert drafts >= N
    assert 0 < accepted < drafted
    if not first_draft_rate:
        return
    # The first drafts were accepted at the rate of the draft method the engine ran
    # (sampled from q and verified with q, or greedy): within 4.5 standard errors.
    first = (
        after["num_accepted_tokens_per_pos"][0] - before.get("num_accepted_tokens_per_pos", [0])[0]
    )
    want = draft_acceptance(P, Q, p1, sampled)
    assert abs(first / drafts - want) < 4.5 * np.sqrt(want * (1 - want) / drafts), (
        first / drafts,
        want,
    )


def test_sampled_drafts_keep_the_target_distribution_while_k_changes() -> None:
    """Gemma 4's recommended sampling (T=1.0, top_k 64, top_p 0.95) with sampled drafts
    while k moves between steps: a batch-size schedule with a k = 0 entry, over groups
    of requests that end at different steps, so every request's rounds run at several
    k. The oracle target's token t has the exact marginal p1 @ P^(t-1) whatever k each
    step drafted, and every position is tested against it."""
    from vllm import SamplingParams

    target, assistant = pair("fp32-oracle")
    kw = SAMPLED_SETTINGS["gemma_recommended"]
    P = truncated_probs(oracle_logits(target), SAMPLED_TEMPERATURE, **kw)
    group, lengths = 16, (3, 4, 5, 6, 7, 8)
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 3,
        "draft_sample_method": "probabilistic",
        # k as the group drains: 2 at 12-16 running, 3 at 7-11, 1 at 3-6, none at 1-2
        "num_speculative_tokens_per_batch_size": [[1, 2, 0], [3, 6, 1], [7, 11, 3], [12, 16, 2]],
    }
    with engine(target, spec, max_num_seqs=group) as llm:
        before = spec_metrics(llm)
        tokens: list[list[int]] = []
        for start in range(0, N, group):
            params = [
                SamplingParams(
                    temperature=SAMPLED_TEMPERATURE,
                    max_tokens=lengths[i % len(lengths)],
                    seed=SEED_BASE + i,
                    ignore_eos=True,
                    **kw,
                )
                for i in range(start, min(start + group, N))
            ]
            outs = llm.generate([PROMPT] * len(params), params, use_tqdm=False)
            tokens += [list(o.outputs[0].token_ids) for o in outs]
        last = outs[0].prompt_token_ids[-1]
        after = spec_metrics(llm)
        stats = drafter(llm).frozen_stats
    assert [len(t) for t in tokens] == [lengths[i % len(lengths)] for i in range(N)]
    vocab = P.shape[0]
    p, pvalues = P[last], []
    for pos in range(max(lengths)):
        column = [t[pos] for t in tokens if len(t) > pos]
        pvalues.append(chi_square_pvalue(np.bincount(column, minlength=vocab), p))
        p = p @ P
    assert all(pv > ALPHA for pv in pvalues), pvalues
    # Non-vacuous: k moved through 1, 2 and 3 and skipped rounds at k = 0, the rounds
    # sampled their drafts, and drafts were both accepted and rejected.
    assert {1, 2, 3} <= set(stats.rounds_by_k), stats.rounds_by_k
    assert stats.skipped_rounds > 0
    assert stats.sampled_rounds > 0
    accepted, drafted = (
        after[key] - before.get(key, 0) for key in ("num_accepted_tokens", "num_draft_tokens")
    )
    assert 0 < accepted < drafted
