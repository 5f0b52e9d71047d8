"""Stops that land inside a multi-token accepted run give exactly the no-speculation output.

The oracle pair accepts every draft, so with k=3 each step commits 4 tokens and
stop strings, stop token ids, EOS and max_tokens regularly fall mid-run (the bug
class of SGLang #23802/#25980 and vLLM #47616). Again with k moving between steps (a
batch-size schedule, k = 1..4 by how many requests run), so stops land in runs of
every length.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import pair
from tests.utils.engine import PROMPTS, drafter, engine, spec_metrics

pytestmark = pytest.mark.engine

K = 3
#: k by running batch size (max_num_seqs 8), beside the fixed K
SCHEDULE = [[1, 2, 4], [3, 4, 1], [5, 6, 3], [7, 8, 2]]
_baseline: list[Any] = []


def _full(results: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (
            list(r.outputs[0].token_ids),
            r.outputs[0].text,
            r.outputs[0].finish_reason,
            r.outputs[0].stop_reason,
        )
        for r in results
    ]


def _cases(base: list[tuple[Any, ...]]) -> list[tuple[str, Any]]:
    """(prompt, SamplingParams) cases built from the baseline's own continuations."""
    from vllm import SamplingParams

    cases: list[tuple[str, Any]] = []
    for prompt, (ids, text, _, _) in zip(PROMPTS, base, strict=True):
        if len(text) < 12:
            continue
        mid, late = text[5:8], text[9:12]
        for include in (False, True):
            cases.append(
                (
                    prompt,
                    SamplingParams(
                        temperature=0, max_tokens=40, stop=[mid], include_stop_str_in_output=include
                    ),
                )
            )
        cases.append((prompt, SamplingParams(temperature=0, max_tokens=40, stop=[late, mid])))
        cases.append(
            (prompt, SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[ids[6]]))
        )
    for n in (1, 2, 3, 5, 6, 7, 9, 10):
        for prompt in PROMPTS[:4]:
            cases.append((prompt, SamplingParams(temperature=0, max_tokens=n)))
    return cases


@pytest.mark.parametrize("schedule", [False, True], ids=["fixed", "schedule"])
def test_stops_inside_accepted_runs(schedule: bool) -> None:
    from vllm import SamplingParams

    target, assistant = pair("fp32-oracle")
    plain = SamplingParams(temperature=0, max_tokens=40)
    if not _baseline:
        with engine(target) as llm:
            base = _full(llm.generate(PROMPTS, plain, use_tqdm=False))
            cases = _cases(base)
            prompts, params = [p for p, _ in cases], [s for _, s in cases]
            _baseline.extend([base, cases, _full(llm.generate(prompts, params, use_tqdm=False))])
    base, cases, expected = _baseline
    spec: dict[str, Any] = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": K,
    }
    if schedule:
        spec["num_speculative_tokens_per_batch_size"] = SCHEDULE
    with engine(target, spec) as llm:
        assert _full(llm.generate(PROMPTS, plain, use_tqdm=False)) == base
        got = _full(llm.generate([p for p, _ in cases], [s for _, s in cases], use_tqdm=False))
        metrics = spec_metrics(llm)
        rounds_by_k = dict(drafter(llm).frozen_stats.rounds_by_k)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"case {i} ({cases[i][1]}): {g} != {e}"
    # Non-vacuous: runs really were multi-token, EOS really ended some requests, and
    # stops really cut outputs short of max_tokens.
    assert metrics["num_accepted_tokens"] == metrics["num_draft_tokens"] > 0
    assert any(fr == "stop" and sr is None for _, _, fr, sr in base), "no EOS finish"
    assert sum(fr == "stop" and sr is not None for _, _, fr, sr in expected) >= 20
    assert any(len(ids) == 5 for ids, _, fr, _ in expected if fr == "length")
    if schedule:
        assert len(rounds_by_k) >= 3, rounds_by_k
