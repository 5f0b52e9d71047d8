"""``"auto"`` keeps the right k while the contexts of the traffic change (pure logic).

A simulated server at 32 requests whose prompts move between 1k and 32k tokens: each
draft of a frozen-KV drafter reads the target's KV of its shared layers, so at 32k a
draft costs ten times what it does at 1k and the best k falls from 4 (chat) or 7
(code) to 2 or 4. The policy learns a cost curve per context bucket, starting a new
bucket from its neighbour's curve, and must reach 0.97x the best static k of every
phase, the first steps after each change included. A policy blind to the context
(one curve per batch bucket) holds the last phase's k until its comparisons go stale.
"""

from __future__ import annotations

import random

import pytest

from tests.unit.test_k_policy import CHAT, CODE, accepted
from vllm_frozen_kv_mtp.draft_length.policy import GoodputPolicy
from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings

BATCH = 32


def step_ms(context: int, k: int) -> float:
    """A step of BATCH requests holding ``context`` tokens each: weights and the
    target's verify of k + 1 tokens, the target's KV read once, and per draft a
    drafter forward plus its read of the shared layers' KV (half the target's)."""
    kv = BATCH * context * 1e-5
    return 8 + 0.02 * BATCH * (k + 1) + kv + k * (0.3 + kv / 2)


def tokens(rates: list[float], k: int) -> float:
    return 1 + sum(rates[:k])


def phase(
    policy: GoodputPolicy, rates: list[float], prompt: int, steps: int, rng: random.Random
) -> tuple[float, float]:
    """``steps`` steps of requests whose contexts cycle through prompt..prompt + 127 (a
    request ends, another starts), with 3% step-time noise and one step in twenty
    stalled 1.3-2x; returns the phase's committed tokens per request and its ms."""
    committed = ms = 0.0
    for i in range(steps):
        context = prompt + i % 128
        policy.context = context  # what the scheduler sets from the step before
        k = policy.choose(BATCH)
        t = step_ms(context, k)
        stall = rng.uniform(1.3, 2.0) if rng.random() < 0.05 else 1.0
        policy.observe_step(BATCH, k, t / 1000 * max(0.5, rng.gauss(1, 0.03)) * stall, context)
        for _ in range(BATCH):
            if k:
                policy.observe_verify(k, accepted(rates, k, rng))
        committed += tokens(rates, k)
        ms += t
    return committed, ms


def best_static(rates: list[float], prompt: int, steps: int) -> float:
    """Committed tokens per ms of the best fixed k over such a phase."""
    contexts = [prompt + i % 128 for i in range(steps)]
    return max(steps * tokens(rates, k) / sum(step_ms(c, k) for c in contexts) for k in range(8))


PHASES = (1024, 32768, 1024, 32768, 1024)


@pytest.mark.parametrize("profile", ["chat", "code"])
def test_auto_keeps_the_best_k_as_contexts_move_between_1k_and_32k(profile: str) -> None:
    """Phases of 300 steps, 1k -> 32k -> 1k -> 32k -> 1k: in every phase the policy's
    committed tokens per second reach 0.97x the best static k's on average over three
    draws, and 0.96x in each (the bar the measured-curve tests set: two k within 3% of
    each other are told apart by a few noisy comparisons), and the cost table keeps the
    two contexts apart."""
    rates = {"chat": CHAT, "code": CODE}[profile]
    best_k = [max(range(8), key=lambda k: tokens(rates, k) / step_ms(p, k)) for p in PHASES]
    assert best_k[0] > best_k[1]  # the phases want different k
    shares: list[list[float]] = []
    for seed in range(3):
        rng = random.Random(seed)
        policy = GoodputPolicy(PolicySettings(k_max=7))
        draw = []
        for prompt in PHASES:
            committed, ms = phase(policy, rates, prompt, 300, rng)
            draw.append(round(committed / ms / best_static(rates, prompt, 300), 3))
        shares.append(draw)
        assert min(draw) >= 0.96, (seed, draw, policy.summary())
        relative = policy.summary()["relative_cost"]
        assert isinstance(relative, dict) and set(relative[BATCH]) == {1536, 49152}
    for i in range(len(PHASES)):
        assert sum(d[i] for d in shares) / len(shares) >= 0.97, shares
