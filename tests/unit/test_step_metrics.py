"""``frozen_kv_mtp:steps_total{k=...}``: the stat-logger plugin vLLM's AsyncLLM loads,
fed vLLM's own stats objects, on engine configs built by vLLM's real EngineArgs (no
engine). The server test (tests/serving/test_readme_server.py) reads it on /metrics."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest

from tests.conftest import REPO
from vllm_frozen_kv_mtp.frontend import metrics

TRAINED = REPO / "devkit/fixtures/data/trained"


def _config(spec: dict[str, Any] | None) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=str(TRAINED / "target"),
        served_model_name=["tiny"],
        max_model_len=512,
        gpu_memory_utilization=0.3,
        speculative_config=spec,
    ).create_engine_config()


def _step(drafts: list[int] | None, generated: int, prompt: int = 0) -> tuple[Any, Any]:
    """vLLM's SchedulerStats and IterationStats of one step: ``drafts`` the draft tokens
    each request verified (None: no spec-decode stats), ``generated`` output tokens,
    ``prompt`` prompt tokens of requests that finished their prefill."""
    from vllm.v1.metrics.stats import IterationStats, SchedulerStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    sched = SchedulerStats()
    if drafts is not None:
        sched.spec_decoding_stats = spec = SpecDecodingStats.new(max(drafts, default=1))
        for n in drafts:
            spec.observe_draft(n, 0)
    it = IterationStats()
    it.num_generation_tokens = generated
    it.prompt_token_stats.total = prompt
    return sched, it


def _value(k: int, engine: str = "0") -> float:
    import prometheus_client

    got = prometheus_client.REGISTRY.get_sample_value(
        "frozen_kv_mtp:steps_total", {"model_name": "tiny", "engine": engine, "k": str(k)}
    )
    return -1.0 if got is None else got


def test_vllm_finds_the_plugin() -> None:
    from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

    names = [e.name for e in entry_points(group="vllm.stat_logger_plugins")]
    assert "frozen_kv_mtp" in names
    assert metrics.FrozenKVMTPStatLogger in load_stat_logger_plugin_factories()


@pytest.mark.parametrize(
    ("drafts", "generated", "prompt", "k"),
    [
        ([3, 3, 3], 7, 0, 3),  # every request verified 3 drafts
        ([3, 3], 5, 16, 3),  # a prefill finished beside them: k still shows
        ([2, 3, 3, 3], 9, 0, 3),  # one request near its end verified fewer
        (None, 4, 0, 0),  # decoded with no drafts: k = 0
        ([], 4, 0, 0),
        (None, 1, 16, None),  # a prefill alone says nothing about k
        (None, 0, 0, None),  # no output (a middle prefill chunk)
    ],
)
def test_step_draft_length(
    drafts: list[int] | None, generated: int, prompt: int, k: int | None
) -> None:
    assert metrics.step_draft_length(*_step(drafts, generated, prompt)) == k


def test_counts_steps_per_k_of_a_frozen_kv_mtp_engine() -> None:
    spec = {
        "method": "frozen_kv_mtp",
        "model": str(TRAINED / "assistant"),
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": 4,
    }
    log = metrics.FrozenKVMTPStatLogger(_config(spec), engine_index=0)
    before = {k: _value(k) for k in range(6)}
    assert all(before[k] >= 0 for k in range(5)) and before[5] == -1.0  # 0..k_max, from 0
    for step in [([4, 4], 6), ([4, 4], 3), (None, 2), ([2, 2], 5)]:
        log.record(*_step(*step))
    log.record(None, None)
    assert {k: _value(k) - before[k] for k in (0, 2, 4)} == {0: 1, 2: 1, 4: 2}
    assert _value(3) == before[3]


def test_a_plain_engine_gets_a_logger_that_does_nothing() -> None:
    before = _value(1, engine="7")
    log = metrics.FrozenKVMTPStatLogger(_config(None), engine_index=7)
    log.record(*_step([1], 2))
    log.log_engine_initialized()
    assert _value(1, engine="7") == before == -1.0
