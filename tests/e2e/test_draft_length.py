"""k changing between steps: vLLM's batch-size schedule and the goodput policy ("auto").

Real engine, real scheduler and rejection sampler (CPU, fp32). Greedy output must
stay token-identical to no speculation while k moves, k = 0 steps must run no draft
round, and "auto" must settle where the acceptance says: k = 0 when nothing is
accepted (random pair), k_max when everything is (oracle pair).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.conftest import pair
from tests.utils.engine import (
    PROMPTS,
    drafter,
    engine,
    engine_core,
    outputs,
    plugin_log,
    spec_metrics,
)

pytestmark = pytest.mark.engine

METHOD = "frozen_kv_mtp"


def _params(max_tokens: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def _staggered(llm: Any, prompts: list[str]) -> list[Any]:
    """One batch whose requests end at different steps, so the batch size, and with it
    a batch-size schedule's k, changes many times during the run."""
    params = [_params(8 + 6 * (i % 6)) for i in range(len(prompts))]
    return outputs(llm.generate(prompts, params, use_tqdm=False))


_baselines: dict[str, list[Any]] = {}


def _baseline(variant: str, prompts: list[str]) -> list[Any]:
    key = f"{variant}:{len(prompts)}"
    if key not in _baselines:
        target, _ = pair(variant)
        with engine(target) as llm:
            _baselines[key] = _staggered(llm, prompts)
    return _baselines[key]


def test_alternating_schedule_keeps_greedy_output_and_skips_k0_rounds() -> None:
    target, assistant = pair("fp32")
    prompts = PROMPTS[:8]
    # k moves 3 -> 1 -> 0 -> 2 -> 4 as the batch shrinks from 8 to 1 (k = 0 at 4-5).
    schedule = [[1, 1, 3], [2, 2, 1], [3, 3, 2], [4, 5, 0], [6, 8, 4]]
    spec = {
        "method": METHOD,
        "model": assistant,
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": schedule,
    }
    with engine(target, spec) as llm:
        got = _staggered(llm, prompts)
        stats = drafter(llm).frozen_stats
        metrics = spec_metrics(llm)
    assert got == _baseline("fp32", prompts)
    assert stats.skipped_rounds > 0, "a k = 0 step must run no draft round"
    assert {1, 2, 3, 4} <= set(stats.rounds_by_k), stats.rounds_by_k
    # every draft the scheduler verified came from a k > 0 round
    assert metrics["num_drafts"] > 0


@pytest.mark.parametrize("variant", ["fp32-kv2", "fp32-deep"])
def test_other_shapes_keep_greedy_output_under_a_random_schedule_and_auto(variant: str) -> None:
    """Shapes the other pairs lack (two KV heads, a three-layer assistant, KV-shared
    layers with head_dim 32) under a seeded random schedule with k = 0 entries, and
    under "auto": k moves every few steps and output stays that of no speculation."""
    import random

    target, assistant = pair(variant)
    prompts = PROMPTS[:8]
    rng = random.Random(variant)
    schedule, lo = [], 1
    while lo <= 8:
        hi = min(8, lo + rng.randint(0, 2))
        schedule.append([lo, hi, rng.randint(0, 6)])
        lo = hi + 1
    schedule[rng.randrange(len(schedule))][2] = 0  # at least one k = 0 entry
    for spec in (
        {"num_speculative_tokens": 6, "num_speculative_tokens_per_batch_size": schedule},
        {"num_speculative_tokens": "auto", "max_num_speculative_tokens": 5},
    ):
        with engine(target, {"method": METHOD, "model": assistant, **spec}) as llm:
            got = _staggered(llm, prompts)
        assert got == _baseline(variant, prompts), (spec, schedule)


def test_schedule_without_k_uses_its_largest_entry() -> None:
    target, assistant = pair("fp32-oracle")
    spec = {
        "method": METHOD,
        "model": assistant,
        "num_speculative_tokens_per_batch_size": [[1, 8, 3]],
    }
    with engine(target, spec) as llm:
        llm.generate(PROMPTS[:2], _params(12), use_tqdm=False)
        assert set(drafter(llm).frozen_stats.rounds_by_k) == {3}


def _auto_run(variant: str, prompts: list[str], k_max: int) -> tuple[list[Any], Any, Any]:
    target, assistant = pair(variant)
    spec = {
        "method": METHOD,
        "model": assistant,
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": k_max,
    }
    with engine(target, spec) as llm:
        got = _staggered(llm, prompts)
        # a second, longer batch: the policy has learnt by now; what it picks here is
        # where it settled. Long enough that its first tries of the k next to the best
        # in this batch's bucket (a few steps each, once) weigh little.
        policy = engine_core(llm).scheduler.k_policy
        before = Counter(policy.chosen)
        llm.generate(prompts, _params(360), use_tqdm=False)
        settled = Counter(policy.chosen) - before
        stats = drafter(llm).frozen_stats
    return got, settled, stats


def test_auto_settles_on_k0_when_nothing_is_accepted() -> None:
    prompts = PROMPTS[:4]
    got, settled, stats = _auto_run("fp32", prompts, k_max=4)
    assert got == _baseline("fp32", prompts)
    total = sum(settled.values())
    assert settled[0] >= 0.75 * total, settled
    assert stats.skipped_rounds > 0


def test_auto_settles_on_k_max_when_everything_is_accepted() -> None:
    prompts = PROMPTS[:4]
    got, settled, _ = _auto_run("fp32-oracle", prompts, k_max=4)
    assert got == _baseline("fp32-oracle", prompts)
    total = sum(settled.values())
    assert settled[4] >= 0.75 * total, settled


def test_auto_uses_our_scheduler_and_vllm_sees_a_dynamic_schedule() -> None:
    from vllm_frozen_kv_mtp.draft_length.scheduler import _GoodputK

    target, assistant = pair("fp32")
    spec = {"method": METHOD, "model": assistant, "num_speculative_tokens": "auto"}
    with plugin_log() as seen, engine(target, spec) as llm:
        core = engine_core(llm)
        assert isinstance(core.scheduler, _GoodputK)
        # CPU runs without async scheduling: the log names the sync parent, since vLLM
        # warns about custom schedulers that async may be off
        assert any(
            "over vLLM's Scheduler: this engine schedules synchronously" in m for m in seen
        ), seen
        sc = llm.llm_engine.vllm_config.speculative_config
        assert sc.num_speculative_tokens == 7  # the default ceiling
        assert sc.uses_dynamic_speculative_decoding()


def test_auto_with_fewer_request_slots_than_k_values() -> None:
    """``max_num_seqs=1`` under "auto" (a latency deployment): vLLM's table of the
    stand-in schedule holds one row, yet the policy may pick any k in 0..k_max. Each k
    pinned in turn runs its rounds, and output stays that of no speculation."""
    target, assistant = pair("fp32-oracle")
    prompts = PROMPTS[:2]
    params = _params(20)
    with engine(target, max_num_seqs=1) as llm:
        expected = outputs(llm.generate(prompts, params, use_tqdm=False))
    spec = {
        "method": METHOD,
        "model": assistant,
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": 4,
    }
    with engine(target, spec, max_num_seqs=1) as llm:
        scheduler = engine_core(llm).scheduler
        got = [outputs(llm.generate(prompts, params, use_tqdm=False))]  # the policy's own k
        for k in range(5):
            scheduler.reset_k_policy()
            scheduler.dynamic_sd_lookup = [k, k]
            got.append(outputs(llm.generate(prompts, params, use_tqdm=False)))
        stats = drafter(llm).frozen_stats
    assert all(g == expected for g in got)
    assert set(stats.rounds_by_k) == {1, 2, 3, 4}, stats.rounds_by_k
    assert stats.skipped_rounds > 0, "k = 0 must run no draft round"
