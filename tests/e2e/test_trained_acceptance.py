"""The committed trained pair drafts well through vLLM, and its metrics.json is honest.

Acceptance comes from vLLM's own spec-decode counters (``llm.get_metrics()``) on
the held-out prompts the committed numbers were measured on. Upstream vLLM's
``mtp`` method must load the same assistant and emit the same greedy tokens.
"""

from __future__ import annotations

from typing import Any

import pytest

from devkit.fixtures.trained import eval_prompts, metrics, trained_pair_paths
from tests.utils.engine import engine, outputs, spec_metrics

pytestmark = pytest.mark.engine

K = 3


def _run(method: str) -> tuple[list[list[int]], dict[str, Any]]:
    from vllm import SamplingParams

    target_dir, assistant_dir = trained_pair_paths()
    recorded = metrics()["vllm_acceptance"]
    prompts = eval_prompts()
    spec = {"method": method, "model": str(assistant_dir), "num_speculative_tokens": K}
    params = SamplingParams(temperature=0.0, max_tokens=recorded["max_tokens"], ignore_eos=True)
    with engine(str(target_dir), spec, dtype="float32", max_num_seqs=len(prompts)) as llm:
        res = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [o[0] for o in outputs(res)], spec_metrics(llm)


@pytest.fixture(scope="module")
def frozen() -> tuple[list[list[int]], dict[str, Any]]:
    return _run("frozen_kv_mtp")


def test_mean_acceptance_length_at_least_two(
    frozen: tuple[list[list[int]], dict[str, Any]],
) -> None:
    _, m = frozen
    assert m["num_drafts"] > 0
    mean_len = 1 + m["num_accepted_tokens"] / m["num_drafts"]
    per_pos = [a / m["num_drafts"] for a in m["num_accepted_tokens_per_pos"]]
    assert len(per_pos) == K
    assert mean_len >= 2.0, f"mean acceptance length {mean_len:.3f} < 2.0 (per pos {per_pos})"
    # a chain: position j+1 is only accepted after position j
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:], strict=False))
    recorded = metrics()["vllm_acceptance"]
    assert recorded["k"] == K
    assert abs(mean_len - recorded["mean_acceptance_length"]) < 0.05, (mean_len, recorded)


def test_upstream_mtp_loads_the_assistant_and_agrees(
    frozen: tuple[list[list[int]], dict[str, Any]],
) -> None:
    tokens, m = frozen
    up_tokens, up = _run("mtp")
    assert up_tokens == tokens  # both lossless under greedy verification
    up_len = 1 + up["num_accepted_tokens"] / up["num_drafts"]
    mean_len = 1 + m["num_accepted_tokens"] / m["num_drafts"]
    # same drafting algorithm, so about the same acceptance
    assert abs(up_len - mean_len) < 0.1, (up_len, mean_len)
