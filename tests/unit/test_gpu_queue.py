"""tools/gpu_queue.sh: a detached queue keeps going past a failed step and copies its
rows and log tails out on every wait, in one archive (a call brings back at most 8 files)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_queue.sh"


def test_queue_runs_every_step_and_copies_rows(tmp_path: Path) -> None:
    plan = tmp_path / "plan"
    plan.write_text(
        "# a comment\necho first > $Q/rows/r.jsonl\nexit 3\necho second >> $Q/rows/r.jsonl\n"
    )
    env = {
        **os.environ,
        "QUEUE_DIR": str(tmp_path / "q"),
        "OUT": str(tmp_path / "out"),
        "QUEUE_POLL_S": "1",
    }
    run = subprocess.run(
        ["bash", str(SCRIPT), "start", str(plan)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "3 steps" in run.stdout
    done = subprocess.run(
        ["bash", str(SCRIPT), "wait", "30"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "done" in done.stdout
    assert "rc=3" in done.stdout  # the failed step is reported, and the next one still ran
    with tarfile.open(tmp_path / "out/queue.tgz") as pack:
        names = {n.removeprefix("./") for n in pack.getnames()}
        rows = pack.extractfile("./rows/r.jsonl")
        assert rows is not None and rows.read() == b"first\nsecond\n"
    assert {"steps.tsv", "logs/01.log", "logs/03.log"} <= names
    assert len(list((tmp_path / "out").iterdir())) == 2  # queue.tgz and steps.tsv
