"""k changing between steps on CUDA (async scheduling, CUDA graphs): vLLM's batch-size
schedule and "auto" keep greedy output, skip k = 0 rounds, and on Model Runner V2
replay a captured whole-round graph for every k (no graph miss)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from devkit.instrument import uses_v2_model_runner
from tests.gpu import GRAPH_KW
from tests.utils.engine import clear_margin_case, drafter, engine, engine_core, outputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _params(i: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=12 + 8 * (i % 5), ignore_eos=True)


def _run(llm: Any, prompts: list[Any]) -> list[Any]:
    params = [_params(i) for i in range(len(prompts))]
    return outputs(llm.generate(prompts, params, use_tqdm=False))


@pytest.mark.parametrize("policy", ["schedule", "auto"])
def test_changing_k_keeps_greedy_output_with_graphs(runner: str, policy: str) -> None:
    target, assistant, prompts, extra = clear_margin_case("fp32-oracle")
    kw = {**GRAPH_KW, **extra}
    with engine(target, **kw) as llm:
        expected = _run(llm, prompts)
    spec: dict[str, Any] = {"method": "frozen_kv_mtp", "model": assistant}
    if policy == "schedule":
        spec["num_speculative_tokens"] = 4
        spec["num_speculative_tokens_per_batch_size"] = [
            [1, 1, 3],
            [2, 2, 1],
            [3, 4, 0],
            [5, 8, 2],
            [9, 64, 4],
        ]
    else:
        spec["num_speculative_tokens"] = "auto"
        spec["max_num_speculative_tokens"] = 4
    with engine(target, spec, **kw) as llm:
        cfg = llm.llm_engine.vllm_config
        assert cfg.scheduler_config.async_scheduling
        assert uses_v2_model_runner(cfg) == (runner == "v2")
        got = _run(llm, prompts)
        stats = drafter(llm).frozen_stats
        if policy == "auto":
            print(f"{runner} auto: {engine_core(llm).scheduler.k_policy.summary()}")
    print(
        f"{runner} {policy}: rounds_by_k={stats.rounds_by_k} skipped={stats.skipped_rounds} "
        f"graph_misses={stats.graph_misses}"
    )
    assert got == expected
    assert len(stats.rounds_by_k) >= 2 or policy == "auto"
    if policy == "schedule":
        assert stats.skipped_rounds > 0
    if runner == "v2":
        assert stats.graph_misses == 0, "a k without a captured draft-round graph"


def test_auto_replays_a_graph_for_every_k_with_one_request_slot(runner: str) -> None:
    """With ``max_num_seqs`` below the ceiling + 1, vLLM's table of the stand-in schedule
    holds only the first k's; every k must still verify and draft in a FULL graph."""
    if runner != "v2":
        pytest.skip("Model Runner V2 captures a graph per k")
    from collections import Counter

    from devkit.instrument import model_runner

    target, assistant, prompts, extra = clear_margin_case("fp32-oracle")
    kw = {**GRAPH_KW, **extra, "max_num_seqs": 1}
    prompts = prompts[:2]
    with engine(target, **kw) as llm:
        expected = _run(llm, prompts)
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": 4,
    }
    with engine(target, spec, **kw) as llm:
        scheduler = engine_core(llm).scheduler
        manager = model_runner(llm).cudagraph_manager
        modes: Counter[tuple[int, str]] = Counter()
        original = manager.dispatch

        def dispatch(
            num_reqs: int, num_tokens: int, uniform: int | None, *a: Any, **kw: Any
        ) -> Any:
            desc = original(num_reqs, num_tokens, uniform, *a, **kw)
            if uniform is not None and num_reqs == 1:
                modes[uniform, desc.cg_mode.name] += 1
            return desc

        manager.dispatch = dispatch
        got = []
        for k in range(5):  # pin each k in turn, as the policy may choose it
            scheduler.reset_k_policy()
            scheduler.dynamic_sd_lookup = [k, k]
            got.append(_run(llm, prompts))
        stats = drafter(llm).frozen_stats
    print(f"verify modes={dict(modes)} rounds_by_k={stats.rounds_by_k}")
    assert all(g == expected for g in got)
    assert set(stats.rounds_by_k) >= {1, 2, 3, 4}
    assert stats.graph_rounds > 0, "no round asked for its CUDA graph"
    assert stats.graph_misses == 0, "a k without a captured draft-round graph"
    assert {q for q, _ in modes} >= {1, 2, 3, 4, 5}
    assert {mode for _, mode in modes} == {"FULL"}, modes
