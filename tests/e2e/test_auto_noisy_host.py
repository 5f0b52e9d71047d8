"""``"auto"`` on a host shared with busy processes (real engine, CPU, fp32).

Two processes spinning on the cores for the whole test make every step's time
bursty: runs of steps take 2x to 40x their quiet time, for a few steps to a few dozen.
A paired comparison of k that straddles such a burst reads anything, and a policy that
believed those readings drove a pair whose drafts are all accepted to k = 0 for a
third of its steps. Here ``auto`` must hold k_max on that pair and k = 0 on the random
pair for 90% of its steps once it has learnt, and the random pair's greedy output
must stay that of no speculation.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import pair
from tests.utils.engine import PROMPTS, engine, engine_core, outputs

pytestmark = pytest.mark.engine

K_MAX = 4


@contextlib.contextmanager
def busy_host(processes: int = 2) -> Iterator[None]:
    """``processes`` Python loops spinning on the cores while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _params(max_tokens: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def _auto(
    variant: str, learn_tokens: int, runs: int, tokens: int
) -> tuple[list[Any], Counter[int], Any]:
    """Output of a first batch that the policy learns on, and the k it chose over
    ``runs`` more batches of 8 requests with ``tokens`` tokens each."""
    target, assistant = pair(variant)
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": K_MAX,
    }
    prompts = PROMPTS[:8]
    with engine(target, spec) as llm:
        policy = engine_core(llm).scheduler.k_policy
        got = outputs(llm.generate(prompts, _params(learn_tokens), use_tqdm=False))
        before = Counter(policy.chosen)
        for _ in range(runs):
            llm.generate(prompts, _params(tokens), use_tqdm=False)
        settled = Counter(policy.chosen) - before
    return got, settled, policy


def test_auto_holds_k_max_on_a_busy_host_when_everything_is_accepted() -> None:
    with busy_host():
        _, settled, policy = _auto("fp32-oracle", learn_tokens=200, runs=5, tokens=480)
    total = sum(settled.values())
    assert settled[K_MAX] >= 0.9 * total, (settled, policy.summary())


def test_auto_holds_k0_on_a_busy_host_when_nothing_is_accepted() -> None:
    target, _ = pair("fp32")
    with engine(target) as llm:
        expected = outputs(llm.generate(PROMPTS[:8], _params(200), use_tqdm=False))
    with busy_host():
        got, settled, policy = _auto("fp32", learn_tokens=200, runs=1, tokens=480)
    assert got == expected
    total = sum(settled.values())
    assert settled[0] >= 0.9 * total, (settled, policy.summary())
