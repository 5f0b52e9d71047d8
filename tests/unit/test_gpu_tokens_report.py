"""``python -m bench.gpu_tokens``: the tables BENCHMARKS.md quotes, from rows, and its run flags."""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
from typing import Any

import pytest

from bench.gpu_tokens import (
    ALTERNATE_STEPS,
    RUN_KINDS,
    Alternating,
    GcPauses,
    _ks,
    _temperatures,
    by_run_kind,
    common_draw_seeds,
    decode_span,
    draft_share_table,
    full_batch_rate,
    gc_since,
    interleaved,
    repeats_at,
    report,
    step_ms_by_k,
    switching_table,
    variable_k_tax,
)
from tests.conftest import REPO


def _row(
    engine: str, method: str, k: int, tok_s: float, step_ms: float, **kw: Any
) -> dict[str, Any]:
    return {
        "model": "E4B",
        "engine": engine,
        "method": method,
        "k": k,
        "concurrency": 32,
        "profile": "chat",
        "temperature": 0.0,
        "decode_tok_s": tok_s,
        "step_ms": step_ms,
        "pinned": engine == "frozen:sweep" and method == "frozen_kv_mtp",
        **kw,
    }


ROWS = [
    {**_row("none", "none", 0, 5000.0, 6.0), "profile": "-"},
    _row("mtp:4", "mtp", 4, 8800.0, 9.3),
    _row("frozen:4", "frozen_kv_mtp", 4, 9500.0, 8.9),
    _row("frozen:sweep", "frozen_kv_mtp", 4, 9800.0, 8.5),
    _row("frozen:sweep", "frozen_kv_mtp", 7, 9600.0, 9.2),
    _row("frozen:sweep", "frozen_kv_mtp:auto", 7, 12000.0, 6.9, mean_k=3.5),
    # a sampled-request row of the same engine must not enter the greedy tables
    _row("frozen:sweep", "frozen_kv_mtp", 4, 1.0, 99.0, temperature=1.0),
]


def test_report_ratios_use_greedy_rows_and_the_best_fixed_k() -> None:
    line = next(x for x in report(ROWS).splitlines() if x.startswith("| E4B | chat | 32 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:7] == ["5000", "8800", "8800 (k=4)", "9800 (k=4)"]
    assert cells[8] == "12000 (3.5)"
    assert cells[9:] == ["2.40", "1.22", "1.36"]


def test_variable_k_tax_compares_with_the_static_frozen_engine() -> None:
    text = variable_k_tax(ROWS)
    assert "frozen_kv_mtp:4, static engine" in text
    assert "| E4B | chat | 32 | 8.90 | 8.50 (0.96x) | 9.20 (1.03x) |" in text


def _respelled(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as this bench writes them now: the engine in the one method spelling."""
    return [{**r, "engine": r["engine"].replace("frozen:", "frozen_kv_mtp:")} for r in rows]


def test_rows_of_either_spelling_give_the_same_tables() -> None:
    """Older rows name their engine ``frozen:4``/``frozen:sweep``, newer ones
    ``frozen_kv_mtp:4``/``frozen_kv_mtp:sweep``: the report reads both alike."""
    new = _respelled(ROWS)
    assert new != ROWS and any(r["engine"] == "frozen_kv_mtp:sweep" for r in new)
    assert report(new) == report(ROWS)
    assert variable_k_tax(new) == variable_k_tax(ROWS)
    assert variable_k_tax(new + ROWS[2:4]) == variable_k_tax(ROWS)


def test_variable_k_tax_falls_back_to_upstream_mtp() -> None:
    rows = [r for r in ROWS if r["engine"] != "frozen:4"]
    text = variable_k_tax(rows)
    assert "mtp:4, static engine" in text
    assert "| E4B | chat | 32 | 9.30 | 8.50 (0.91x) | 9.20 (0.99x) |" in text


def test_run_flags_are_checked_before_any_engine_starts() -> None:
    assert _ks("0,4,7") == [0, 4, 7]
    assert _ks("1,3,1/3") == [1, 3, "1/3"]
    assert _temperatures("0,1") == [0.0, 1.0]
    for parse, bad in (
        (_ks, "0,x"),
        (_ks, "-1"),
        (_ks, "1/1"),
        (_ks, "1/2/3"),
        (_ks, "1/-2"),
        (_temperatures, "1,-1"),
        (_temperatures, "a"),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


@pytest.mark.parametrize(("n", "repeats"), [(8, 3), (24, 3), (2, 3), (1, 1), (7, 5)])
def test_interleaved_runs_spread_every_row_over_the_concurrency(n: int, repeats: int) -> None:
    cells = list(range(n))
    order = interleaved(cells, repeats)
    rounds = [order[r * n : (r + 1) * n] for r in range(repeats)]
    assert all(sorted(r) == cells for r in rounds)  # each round times every row once
    if n >= repeats > 1:
        assert len({r[0] for r in rounds}) == repeats  # and starts somewhere new
        # no row has all its runs at the start (or the end) of the span
        mean_position = [sum(r.index(c) for r in rounds) / repeats for c in cells]
        assert max(mean_position) - min(mean_position) < n / 2


def test_best_fixed_k_counts_static_engines_without_options() -> None:
    rows = [
        *ROWS,
        _row("mtp:sweep", "mtp", 4, 8000.0, 9.9, pinned=True),
        _row("mtp:sweep", "mtp", 2, 8500.0, 8.0, pinned=True),
        _row("frozen:4", "frozen_kv_mtp", 4, 99999.0, 1.0, options="target_softcap=vllm"),
    ]
    line = next(x for x in report(rows).splitlines() if x.startswith("| E4B | chat | 32 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # mtp's static k=4 engine beats its pinned rows; an engine with options is not a fixed k
    assert cells[5:7] == ["8800 (k=4)", "9800 (k=4)"]


def test_min_tokens_adds_runs_only_where_a_row_decodes_few_tokens() -> None:
    # 128 output tokens per request: 127 decoded per request and run
    assert [repeats_at(c, 3, 2048, 128) for c in (1, 8, 32, 128)] == [17, 3, 3, 3]
    assert [repeats_at(c, 3, 0, 128) for c in (1, 8)] == [3, 3]  # 0 turns it off


def test_common_draws_match_across_rows_and_differ_across_runs() -> None:
    # the n-th run of every row at a concurrency meets the same requests' seeds
    assert common_draw_seeds(4, 0) == common_draw_seeds(4, 0) == [0, 1, 2, 3]
    runs = [set(common_draw_seeds(4, n)) for n in range(3)]
    assert not (runs[0] & runs[1]) and not (runs[1] & runs[2])  # each run its own draws


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--repeats", "0"], "--repeats must be >= 1 and --min-tokens >= 0"),
        (["--min-tokens", "-1"], "--repeats must be >= 1 and --min-tokens >= 0"),
        (["--tp", "0"], "--tp must be >= 1"),
    ],
)
def test_bad_run_counts_are_refused_before_an_engine_starts(flags: list[str], error: str) -> None:
    cmd = [sys.executable, "-m", "bench.gpu_tokens", "run", "--engine", "none", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2
    assert error in done.stderr


def test_a_kept_auto_policy_learns_only_from_its_own_rows() -> None:
    """Pinned and scheduled runs of a sweep engine get a throwaway policy: the scheduler
    feeds whichever policy it holds, and an "auto" row's kept policy must not learn
    another profile's acceptance between its runs."""
    from types import SimpleNamespace

    from bench.gpu_tokens import Engine
    from vllm_frozen_kv_mtp.draft_length.scheduler import _GoodputK

    sched = SimpleNamespace(num_spec_tokens=3)
    sched.reset_k_policy = lambda policy=None: _GoodputK.reset_k_policy(sched, policy)  # type: ignore[arg-type]
    eng = Engine.__new__(Engine)
    eng.sweep, eng.max_seqs, eng.k_max, eng.scheduler = True, 4, 3, sched

    eng.set_k("auto")
    kept = sched.k_policy
    assert sched.dynamic_sd_lookup[2] == 3 and kept.steps == 1  # the policy decides
    drafted = list(kept.acceptance.drafted)
    for setting, lookup in ((2, [2] * 5), ("schedule", [0, 3, 3, 3, 3])):
        eng.set_k(setting)
        assert sched.dynamic_sd_lookup == lookup  # vLLM's table, k capped at k_max
        assert sched.k_policy is not kept
        sched.k_policy.observe_verify(3, 0, count=100)  # what the scheduler feeds
    assert kept.acceptance.drafted == drafted and kept.steps == 1
    eng.set_k("auto", kept)
    assert sched.k_policy is kept and sched.dynamic_sd_lookup.policy is kept
    eng.set_k("auto")  # a fresh one when none is kept
    assert sched.k_policy is not kept and sched.k_policy.steps == 0


def test_rows_timed_two_ways_get_separate_tables() -> None:
    later = [{**r, "interleaved": True} for r in ROWS if r["method"] != "frozen_kv_mtp:auto"]
    groups = by_run_kind(ROWS + later)
    assert [len(g) for g in groups.values()] == [len(ROWS), len(ROWS) - 1]
    # a run without "auto" rows still has its line: the fixed k and upstream's columns
    line = next(x for x in report(groups[RUN_KINDS[True]]).splitlines() if x.startswith("| E4B |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:7] == ["5000", "8800", "8800 (k=4)", "9800 (k=4)"]
    assert cells[8:] == ["-"] * 4


def test_runs_on_different_hosts_get_separate_tables() -> None:
    """Two interleaved runs, one labelled: the best fixed k is never taken across them."""
    first = [{**r, "interleaved": True} for r in ROWS]
    second = [{**r, "interleaved": True, "label": "h200-b", "decode_tok_s": 1.0} for r in ROWS]
    groups = by_run_kind(first + second)
    assert list(groups) == [RUN_KINDS[True], RUN_KINDS[True] + ", run h200-b"]
    assert all(r["decode_tok_s"] == 1.0 for r in groups[RUN_KINDS[True] + ", run h200-b"])


def test_runs_on_different_cards_get_separate_tables() -> None:
    """One label on two cards (an H100 and an H200 host) is two tables, each naming its card."""
    h100 = [
        {**r, "interleaved": True, "label": "x", "device": "NVIDIA H100 80GB HBM3"} for r in ROWS
    ]
    h200 = [{**r, "interleaved": True, "label": "x", "device": "NVIDIA H200"} for r in ROWS]
    groups = by_run_kind(h100 + h200)
    assert sorted(groups) == [
        RUN_KINDS[True] + ", run x, NVIDIA H100 80GB HBM3",
        RUN_KINDS[True] + ", run x, NVIDIA H200",
    ]


def test_synthetic_rates_reach_each_rank_or_say_they_cannot() -> None:
    """``set_profile`` sends the rates to every rank (``collective_rpc``): each rank's
    rejection sampler draws acceptance itself under tensor parallelism."""
    from types import SimpleNamespace

    import torch

    from bench.gpu_tokens import set_synthetic_rates

    table = torch.zeros(3)
    worker = SimpleNamespace(
        model_runner=SimpleNamespace(
            rejection_sampler=SimpleNamespace(synthetic_conditional_rates=table)
        )
    )
    assert set_synthetic_rates(worker, [0.9, 0.5, 0.25])
    assert table.tolist() == pytest.approx([0.9, 0.5, 0.25])
    plain = SimpleNamespace(model_runner=SimpleNamespace(rejection_sampler=SimpleNamespace()))
    assert not set_synthetic_rates(plain, [0.9])


def test_full_batch_rate_counts_only_back_to_back_full_decode_steps() -> None:
    log = [
        (0.00, 4, 4, False, None),  # prefill: the first token of each request
        (0.10, 4, 12, True, None),  # timed from a prefill step: left out
        (0.12, 4, 10, True, None),
        (0.15, 4, 14, True, None),
        (0.16, 2, 6, True, None),  # two requests done: the tail
        (0.17, 1, 3, True, None),
    ]
    tokens, seconds = full_batch_rate(log, 4)
    assert tokens == 24 and seconds == pytest.approx(0.05)
    assert full_batch_rate(log[:2], 4) == (0, 0.0)


def test_decode_span_times_from_the_last_prefill_step_to_the_last_output() -> None:
    log = [
        (0.00, 3, 2, False, None),  # chunked prefill: two requests get their first token
        (0.05, 4, 5, False, None),  # the last prompt's chunk, one request decoding beside it
        (0.10, 4, 12, True, None),
        (0.12, 4, 10, True, None),
        (0.16, 2, 6, True, None),  # the tail
    ]
    tokens, seconds, steps = decode_span(log)
    assert (tokens, steps) == (28, 3) and seconds == pytest.approx(0.11)
    assert decode_span(log[:2]) == (0, 0.0, 0)


def test_step_ms_by_k_splits_full_batch_from_tail_steps() -> None:
    log = [
        (0.000, 4, 4, False, None),  # prefill: not a decode step, and not the start of one
        (0.010, 4, 12, True, 3),
        (0.030, 4, 8, True, 3),
        (0.036, 4, 12, True, 1),
        (0.040, 2, 4, True, 1),
        (0.045, 2, 2, True, 1),
    ]
    assert step_ms_by_k(log, 4) == {"full:1": [1, 6.0], "full:3": [1, 20.0], "tail:1": [2, 4.5]}
    no_lookup = [(t, n, tokens, decode, None) for t, n, tokens, decode, _ in log]
    assert step_ms_by_k(no_lookup, 4) == {}  # an engine without a k lookup


def test_report_of_the_full_batch_rate_leaves_out_rows_without_it() -> None:
    rows = [{**r, "full_batch_tok_s": 2 * r["decode_tok_s"]} for r in ROWS]
    rows[0] = {**rows[0], "full_batch_tok_s": None}  # "none" timed before the rate existed
    line = next(
        x
        for x in report(rows, "full_batch_tok_s").splitlines()
        if x.startswith("| E4B | chat | 32 |")
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:7] == ["-", "17600", "17600 (k=4)", "19600 (k=4)"]
    assert cells[8:] == ["24000 (3.5)", "-", "1.22", "1.36"]


def test_gc_pauses_count_the_collectors_real_runs() -> None:
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    try:
        before = pauses.snapshot()
        gc.collect()  # a full collection, through the same callbacks the engine's would use
        gc.collect(0)
        ms, full = gc_since(pauses, before)
    finally:
        gc.callbacks.remove(pauses)
    assert full >= 1 and pauses.count[0] >= 1
    assert ms > 0.0 and ms == pytest.approx(sum(pauses.ms) - sum(before[0]))


def test_an_alternating_row_holds_each_k_for_its_steps() -> None:
    lookup = Alternating(1, 3, hold=2)
    assert [lookup[256] for _ in range(6)] == [1, 1, 3, 3, 1, 1]  # whatever the batch


def test_switching_table_sets_an_alternated_k_beside_the_same_k_pinned() -> None:
    def row(k: int, runs: list[dict[str, list[float]]], **kw: Any) -> dict[str, Any]:
        return {
            "model": "E4B",
            "profile": "prose",
            "concurrency": 256,
            "method": "frozen_kv_mtp",
            "k": k,
            "step_ms_by_k": runs,
            **kw,
        }

    rows = [
        row(
            1, [{"full:1": [90, 14.0]}, {"full:1": [90, 15.0]}, {"full:1": [90, 30.0]}], pinned=True
        ),
        row(3, [{"full:3": [60, 22.0]}], pinned=True),
        row(
            3,
            [{"full:1": [40, 21.0], "full:3": [40, 22.0], "tail:1": [4, 8.0]}],
            method="frozen_kv_mtp:alternate",
            alternate=[1, 3],
        ),
    ]
    text = switching_table(rows)
    assert f"every {ALTERNATE_STEPS} steps" in text
    assert "| E4B | prose | 256 | 1/3 | 1 | 15.00 | 21.00 (1.40x) |" in text  # median of runs
    assert "| E4B | prose | 256 | 1/3 | 3 | 22.00 | 22.00 (1.00x) |" in text
    assert switching_table(rows[:2]) == ""  # no alternating row, no table


def test_each_context_length_gets_its_own_table() -> None:
    """Rows at 8k and 32k never meet the 128-token rows: a (model, profile, c) key would
    otherwise take the best fixed k across context lengths."""
    long = [{**r, "interleaved": True, "prompt_len": 8192} for r in ROWS]
    short = [{**r, "interleaved": True, "prompt_len": 128} for r in ROWS]
    groups = by_run_kind(short + long)
    assert list(groups) == [RUN_KINDS[True], RUN_KINDS[True] + ", 8192-token prompts"]
    assert all(r["prompt_len"] == 8192 for r in groups[RUN_KINDS[True] + ", 8192-token prompts"])


def test_draft_share_table_lists_the_timed_speculating_rows() -> None:
    rows = [
        {**ROWS[0], "draft_share": None},
        {**ROWS[3], "draft_ms_per_step": 2.125, "draft_share": 0.25},
    ]
    table = draft_share_table(rows).splitlines()
    assert len(table) == 3
    assert table[2] == "| E4B | chat | 32 | frozen_kv_mtp | 4 | 8.50 | 2.12 | 25% |"
    assert draft_share_table(ROWS) == ""
