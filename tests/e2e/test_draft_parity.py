"""Draft tokens equal upstream mtp's on the same weights (the math is the same).

Upstream's first pass runs the drafter over every scheduled token and keeps each
request's last accepted row; that row attends to exactly the committed prefix, as
our one-row seed does, and all later steps are identical. So every round's drafts
must match. Checked in fp32 with batch size 1 and 8.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import pair
from tests.utils.engine import PROMPTS, engine, outputs, record_drafts

pytestmark = pytest.mark.engine


def _run(variant: str, method: str, k: int) -> tuple[list[Any], list[Any], list[Any]]:
    from vllm import SamplingParams

    target, assistant = pair(variant)
    spec = {"method": method, "model": assistant, "num_speculative_tokens": k}
    params = SamplingParams(temperature=0.0, max_tokens=24)
    with engine(target, spec) as llm, record_drafts(llm) as rounds:
        out = outputs(llm.generate(PROMPTS[:8], params, use_tqdm=False))
        batched = list(rounds)
        rounds.clear()
        for p in PROMPTS[8:12]:
            out += outputs(llm.generate([p], params, use_tqdm=False))
        single = list(rounds)
    return out, batched, single


@pytest.mark.parametrize("variant, k", [("fp32", 3), ("fp32-kvshared", 2), ("fp32-oracle", 4)])
def test_drafts_equal_upstream_mtp(variant: str, k: int) -> None:
    ours = _run(variant, "frozen_kv_mtp", k)
    upstream = _run(variant, "mtp", k)
    assert ours[0] == upstream[0]  # same outputs...
    assert len(ours[1]) > 3 and len(ours[2]) > 3
    assert ours[1] == upstream[1]  # ...and the same drafts, round by round
    assert ours[2] == upstream[2]
