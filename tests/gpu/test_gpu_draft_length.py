"""k changing between steps on CUDA (async scheduling, CUDA graphs): vLLM's batch-size
schedule and "auto" keep greedy output, skip k = 0 rounds, and on Model Runner V2
replay a captured whole-round graph for every k (no graph miss)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

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
        assert cfg.use_v2_model_runner == (runner == "v2")
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
