"""The plugin's draft tokens equal the independent reference drafter's, token for token.

Real vLLM on CPU, mainly with the committed trained pair (drafts are often accepted,
so rounds commit several tokens), plus two random fixtures: a centroid head, and a
target whose last layers are KV-shared (drafter layers must read the owners' KV).
One request per engine call: round ``r``'s seed is
the prefix committed before it, rebuilt from the greedy output and the drafts that
matched it (greedy verification accepts exactly the drafts equal to the output).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.fixtures.reference import load_pair, reference_drafts
from devkit.fixtures.trained import eval_prompts, trained_pair_paths
from tests.conftest import pair
from tests.utils.engine import engine, outputs, record_drafts

pytestmark = pytest.mark.engine

MAX_TOKENS = 40
WINDOW = 32


def rounds_with_seeds(
    prompt: list[int], output: list[int], rounds: list[list[list[int]]]
) -> Iterator[tuple[list[int], int, list[int], int]]:
    """(committed prefix, bonus, drafts, accepted) for each round seeded inside ``output``."""
    m = 0  # output tokens committed before the round (the bonus is output[m])
    for batch in rounds:
        if m >= len(output):
            return
        assert len(batch) == 1, "one request per engine call"
        drafts = batch[0]
        accepted = 0
        while (
            accepted < len(drafts)
            and m + 1 + accepted < len(output)
            and drafts[accepted] == output[m + 1 + accepted]
        ):
            accepted += 1
        yield prompt + output[:m], output[m], drafts, accepted
        m += 1 + accepted


def _paths(variant: str) -> tuple[str, str]:
    if variant == "trained":
        target, assistant = trained_pair_paths()
        return str(target), str(assistant)
    return pair(variant)


_hf: dict[str, tuple[Any, Any]] = {}


def _hf_pair(variant: str) -> tuple[Any, Any]:
    if variant not in _hf:
        _hf[variant] = load_pair(*_paths(variant))
    return _hf[variant]


def _prompts() -> list[list[int]]:
    held = eval_prompts()
    # short (< window) and long (> window) prompts; the chains run well past the window
    picked = [held[0], held[1], held[2], held[3]]
    assert min(map(len, picked)) < WINDOW < max(map(len, picked))
    return picked


@pytest.mark.parametrize(
    "variant,k",
    [("trained", 1), ("trained", 2), ("trained", 3), ("fp32-centroid", 2), ("fp32-kvshared", 3)],
)
def test_plugin_drafts_equal_reference(variant: str, k: int) -> None:
    from vllm import SamplingParams

    target_dir, assistant_dir = _paths(variant)
    target, assistant = _hf_pair(variant)
    spec = {"method": "frozen_kv_mtp", "model": assistant_dir, "num_speculative_tokens": k}
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    compared = accepted_total = multi = 0
    with engine(target_dir, spec, dtype="float32") as llm:
        for prompt in _prompts():
            with record_drafts(llm) as rounds:
                out = outputs(llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False))
            output = out[0][0]
            assert len(output) == MAX_TOKENS
            seen = list(rounds_with_seeds(prompt, output, rounds))
            # every verified round was recorded: the rounds cover the whole output
            assert sum(1 + a for *_, a in seen) >= MAX_TOKENS - k
            for committed, bonus, drafts, accepted in seen:
                assert len(drafts) == k
                want = reference_drafts(target, assistant, committed, bonus, k)
                assert drafts == want, (
                    f"k={k}, {len(committed)} committed tokens, bonus {bonus}: "
                    f"plugin {drafts} != reference {want}"
                )
                compared += 1
                accepted_total += accepted
                multi += accepted > 0
    assert compared >= 4 * MAX_TOKENS // (k + 1)
    if variant == "trained":
        # rounds commit several tokens, so later seeds sit at positions reached
        # through multi-token commits
        assert multi >= compared // 4 and accepted_total > 0
