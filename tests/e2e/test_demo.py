"""``make demo`` (``python -m devkit.demo``), the README's first command: both engines
stay up in one process, their timed passes alternate, and the result lines say what the
README says they say."""

from __future__ import annotations

import re

import pytest

from devkit import demo

pytestmark = pytest.mark.engine


def test_demo_runs_both_engines_and_prints_its_result(capsys: pytest.CaptureFixture[str]) -> None:
    demo.main([])  # raises SystemExit where the outputs differ
    out = capsys.readouterr().out
    assert "greedy output identical to no speculation: yes" in out
    assert re.search(r"per-position acceptance: 0\.[5-9]\d / 0\.[4-9]\d / 0\.[4-9]\d", out), out
    assert re.search(r"frozen_kv_mtp: \d+ draft rounds \(k=3: \d+\)", out), out
    m = re.search(
        r"tokens/s: no speculation ([\d.]+), frozen_kv_mtp ([\d.]+) \(([\d.]+)x; "
        rf"median of {demo.TIMED_PASSES} passes",
        out,
    )
    assert m, out
    assert float(m[1]) > 0 and float(m[2]) > 0
