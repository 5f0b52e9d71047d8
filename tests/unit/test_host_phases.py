"""``bench.host_phases``: the step loop's host time per phase, and its Python profile."""

from __future__ import annotations

import time
from typing import Any

from bench.host_phases import HostPhases, host_table, ms_per_step, profile_run


class _Loop:
    """A step loop's shape: ``step`` calls ``schedule`` and ``update``, then does its
    own work; ``Output.result`` stands for a class-level method (every instance)."""

    class Output:
        def result(self) -> int:
            time.sleep(0.002)
            return 1

    def schedule(self) -> None:
        time.sleep(0.003)

    def update(self, out: int) -> int:
        return out + 1

    def step(self) -> int:
        self.schedule()
        out = self.update(_Loop.Output().result())
        time.sleep(0.004)  # the loop's own glue: "other"
        return out


def test_phases_time_instance_and_class_methods_and_leave_results_alone() -> None:
    loop = _Loop()
    phases = HostPhases()
    original_result = _Loop.Output.result
    try:
        phases.wrap(loop, "step", "llm_step")
        phases.wrap(loop, "schedule", "schedule")
        phases.wrap(loop, "update", "update_from_output")
        phases.wrap(_Loop.Output, "result", "get_output")
        before = phases.snapshot()
        assert [loop.step() for _ in range(5)] == [2] * 5
        ms = ms_per_step(before, phases.snapshot(), steps=5)
    finally:
        _Loop.Output.result = original_result  # type: ignore[method-assign]
    assert ms["schedule"] >= 3.0 and ms["get_output"] >= 2.0
    assert ms["llm_step"] >= ms["schedule"] + ms["get_output"] + 4.0
    # what the step spent outside its timed parts: the 4 ms of glue, not the parts again
    assert 4.0 <= ms["other"] < ms["llm_step"] - ms["schedule"]
    assert ms["update_from_output"] < 1.0


def test_ms_per_step_counts_only_the_span_between_snapshots() -> None:
    before = {"llm_step": 1.0, "schedule": 0.5}
    after = {"llm_step": 1.1, "schedule": 0.54}
    ms = ms_per_step(before, after, steps=10)
    assert ms == {"llm_step": 10.0, "schedule": 4.0, "other": 6.0}


def test_profile_run_names_the_function_that_took_the_time() -> None:
    steps = [0]

    def busy() -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass

    def run() -> Any:
        for _ in range(4):
            busy()
            steps[0] += 1

    top = profile_run(run, lambda: steps[0], top=5)
    names = [name for name, *_ in top]
    assert any(name.endswith("(busy)") for name in names)
    busy_row = next(r for r in top if r[0].endswith("(busy)"))
    assert busy_row[3] == 1.0  # one call per step
    assert busy_row[2] >= 15.0  # about 20 ms of cumulative time per step


def test_host_table_lists_rows_with_phases_and_their_kernel_time() -> None:
    base = {"model": "E4B", "concurrency": 256, "profile": "chat", "step_ms": 23.85}
    rows = [
        {
            **base,
            "method": "frozen_kv_mtp",
            "k": 0,
            "trace": {"gpu_ms_per_step": 9.49},
            "host_ms_per_step": {"schedule": 4.0, "get_output": 0.1, "other": 1.0},
        },
        {**base, "method": "none", "k": 0, "profile": "-", "step_ms": 10.72},  # no phases
    ]
    table = host_table(rows).splitlines()
    assert len(table) == 3  # header, rule, the one row with phases
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    row = dict(zip(header, cells, strict=True))
    assert row["method"] == "frozen_kv_mtp" and row["kernels ms"] == "9.49"
    assert row["schedule"] == "4.00" and row["other"] == "1.00" and row["execute_model"] == "-"
    assert host_table(rows[1:]) == ""


def test_cost_samples_list_each_keys_samples_in_ms_with_their_step() -> None:
    from bench.gpu_tokens import cost_samples
    from vllm_frozen_kv_mtp.draft_length.policy import GoodputPolicy
    from vllm_frozen_kv_mtp.draft_length.settings import PolicySettings

    policy = GoodputPolicy(PolicySettings(k_max=3, settle_samples=0))  # every step counts
    for batch, k, seconds in [(200, 1, 0.0135), (256, 1, 0.0221), (256, 3, 0.0196), (8, 3, 0.007)]:
        policy.choose(batch)
        policy.observe_step(batch, k, seconds)
    samples = cost_samples(policy)
    assert samples == {  # short contexts: the first context bucket
        8: {1536: {3: [[4, 7.0]]}},
        256: {1536: {1: [[1, 13.5], [2, 22.1]], 3: [[3, 19.6]]}},
    }
    # the step times the log reports are the medians of exactly these samples
    assert policy.summary()["step_ms"][256][1536][1] == round((13.5 + 22.1) / 2, 2)
