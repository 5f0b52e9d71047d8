"""``"auto"`` learns its step costs apart for short and long contexts (real engine, CPU).

The scheduler reads the computed tokens of each step's requests and the policy keys
its cost table by batch bucket and context bucket. A batch of short prompts and then
a batch of ~1.7k-token prompts must leave two context buckets, each with costs
compared on its own, in the table the engine log reports; greedy output stays that of
no speculation at both lengths.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import pair
from tests.utils.engine import PROMPTS, engine, engine_core, outputs, plugin_log

pytestmark = pytest.mark.engine

MAX_MODEL_LEN = 2048
LONG = 1700  # tokens a long prompt holds: the 3072 bucket once decoding starts


def _params() -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=160, ignore_eos=True)


def _long_prompts(llm: Any, n: int) -> list[dict[str, list[int]]]:
    """``n`` prompts of LONG tokens: each of PROMPTS repeated and cut."""
    tok = llm.get_tokenizer()
    out = []
    for text in PROMPTS[:n]:
        ids = tok(text, add_special_tokens=False).input_ids
        out.append({"prompt_token_ids": (ids * (LONG // len(ids) + 1))[:LONG]})
    return out


def test_auto_keeps_short_and_long_context_costs_apart() -> None:
    target, assistant = pair("fp32-oracle")
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": 4,
    }
    with engine(target, max_model_len=MAX_MODEL_LEN) as llm:
        long_prompts = _long_prompts(llm, 4)
        expected = [
            outputs(llm.generate(p, _params(), use_tqdm=False)) for p in (PROMPTS[:4], long_prompts)
        ]
    with plugin_log() as seen, engine(target, spec, max_model_len=MAX_MODEL_LEN) as llm:
        got = [
            outputs(llm.generate(p, _params(), use_tqdm=False)) for p in (PROMPTS[:4], long_prompts)
        ]
        summary = engine_core(llm).scheduler.k_policy.summary()
    assert got == expected
    relative = summary["relative_cost"]
    assert set(relative[4]) == {1536, 3072}, summary  # batch bucket 4, both contexts
    assert all(len(costs) >= 2 for costs in relative[4].values()), summary
    # the engine log's table, as a server would show it, has both context buckets
    lines = [m for m in seen if "frozen_kv_mtp auto k:" in m]
    assert lines, seen
    table = re.search(r"relative_step_cost_by_batch_context_and_k=(\{.*?\}\}\})", lines[-1])
    assert table and "1536: {" in table.group(1) and "3072: {" in table.group(1), lines[-1]
