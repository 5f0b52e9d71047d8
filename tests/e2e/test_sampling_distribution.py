"""With temperature > 0, frozen_kv_mtp + vLLM's RejectionSampler keep the target distribution.

The oracle target's next-token logits depend only on the current token (all
attention/MLP branches write zero), so the exact distribution of every generated
token is computable: P[t] = softmax(logits(t) / T), token 1 ~ P[last prompt token],
token 2 ~ p1 @ P, token 3 ~ p1 @ P @ P. Tokens 2 and 3 are verified drafts (the
oracle drafter proposes the target's greedy token, one-hot, so acceptance
probability is P[d]); a chi-square test compares their empirical frequencies with
the exact marginals. The same test is shown to reject a biased sampler that always
accepts the draft.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import pair
from tests.utils.engine import engine, spec_metrics

pytestmark = pytest.mark.engine

TEMPERATURE = 1.5
N = 1500
ALPHA = 1e-3
PROMPT = "def forward(self, x):"


def _transition(target: str) -> np.ndarray:
    """P[t] over next tokens at TEMPERATURE for every current token t (exact, HF fp32)."""
    from transformers import Gemma4ForCausalLM

    model = Gemma4ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    with torch.no_grad():
        logits = model(input_ids=torch.arange(vocab)[:, None]).logits[:, -1].double()
    return torch.softmax(logits / TEMPERATURE, dim=-1).numpy()


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells with small expectation are pooled."""
    from scipy.stats import chisquare

    expected = probs * counts.sum()
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    return float(chisquare(obs, exp).pvalue)


def test_chi_square_has_power_against_an_always_accept_sampler() -> None:
    """Same N and alpha: exact samples pass, 'always accept the draft' samples fail."""
    target, _ = pair("fp32-oracle")
    P = _transition(target)
    rng = np.random.default_rng(0)
    p1 = P[7]
    true_p2 = p1 @ P
    greedy = P.argmax(-1)
    biased_p2 = np.bincount(greedy, weights=p1, minlength=P.shape[0])  # draft always kept
    honest = rng.multinomial(N, true_p2)
    biased = rng.multinomial(N, biased_p2)
    assert chi_square_pvalue(honest, true_p2) > ALPHA
    assert chi_square_pvalue(biased, true_p2) < 1e-12


def test_verified_tokens_follow_the_target_distribution() -> None:
    from vllm import SamplingParams

    target, assistant = pair("fp32-oracle")
    P = _transition(target)
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 2}
    with engine(target, spec, max_num_seqs=64) as llm:
        from transformers import AutoTokenizer

        last = AutoTokenizer.from_pretrained(target)(PROMPT).input_ids[-1]
        params = [
            SamplingParams(temperature=TEMPERATURE, max_tokens=3, seed=i, ignore_eos=True)
            for i in range(N)
        ]
        outs = llm.generate([PROMPT] * N, params, use_tqdm=False)
        metrics = spec_metrics(llm)
    tokens = np.array([list(o.outputs[0].token_ids) for o in outs])
    assert tokens.shape == (N, 3)
    p1 = P[last]
    p2 = p1 @ P
    p3 = p2 @ P
    vocab = P.shape[0]
    pvalues = [
        chi_square_pvalue(np.bincount(tokens[:, i], minlength=vocab), p)
        for i, p in enumerate((p1, p2, p3))
    ]
    assert all(p > ALPHA for p in pvalues), pvalues
    # Non-vacuous: drafts were verified, and both accepted and rejected ones occurred.
    assert metrics["num_drafts"] >= N
    assert 0 < metrics["num_accepted_tokens"] < metrics["num_draft_tokens"]
