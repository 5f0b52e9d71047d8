"""The drafter reads the target's KV and never writes it; one seed row per request."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conftest import pair
from tests.utils.engine import PROMPTS, drafter, engine, model_runner, outputs
from vllm_frozen_kv_mtp.drafters.kv_guard import KVWriteError, kv_checksum

pytestmark = pytest.mark.engine


def _params(max_tokens: int = 24) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


def test_checksum_detects_a_single_changed_byte() -> None:
    caches = [torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.float32)]
    before = kv_checksum(caches)
    caches[0].view(-1).view(torch.uint8)[17] = 1
    assert kv_checksum(caches) != before


def test_target_kv_unchanged_by_every_draft_round() -> None:
    target, assistant = pair("fp32-kvshared")
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec) as llm:
        runner, d = model_runner(llm), drafter(llm)
        original = d.propose
        sums: list[tuple[str, str]] = []

        def propose(*args: Any, **kwargs: Any) -> Any:
            before = kv_checksum(runner.kv_caches)
            out = original(*args, **kwargs)
            sums.append((before, kv_checksum(runner.kv_caches)))
            return out

        d.propose = propose
        llm.generate(PROMPTS, _params(), use_tqdm=False)
        del d.propose
    assert len(sums) > 5
    assert all(b == a for b, a in sums)
    assert len({b for b, _ in sums}) > 1  # the target itself did write between rounds


def test_drafter_layers_share_owner_layers_and_own_no_kv() -> None:
    """Wiring as vLLM built it: each draft layer reads the last non-shared target layer
    of its type (layers 0-3 own KV here; 4-5 are KV-shared), with matching shapes."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    target, assistant = pair("fp32-kvshared")
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 2}
    with engine(target, spec) as llm:
        d = drafter(llm)
        layers = get_layers_from_vllm_config(d.vllm_config, AttentionLayerBase)
        wiring = {
            n: layers[n].kv_sharing_target_layer_name for n in sorted(d._draft_attn_layer_names)
        }
        for name, target_name in wiring.items():
            mine, theirs = layers[name].kv_cache, layers[target_name].kv_cache
            mine = mine[0] if isinstance(mine, list) else mine
            theirs = theirs[0] if isinstance(theirs, list) else theirs
            # the draft layer's cache *is* the target layer's: same memory, same view
            assert mine.data_ptr() == theirs.data_ptr() and mine.shape == theirs.shape
    targets = sorted(wiring.values())
    # layer_types = (s, s, f) * 2 with 2 shared tail layers: owners are 3 (s) and 2 (f)
    assert targets == ["model.layers.2.self_attn.attn", "model.layers.3.self_attn.attn"]


def test_kv_guard_option_reaches_the_drafter_and_catches_writes() -> None:
    target, assistant = pair("fp32")
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num_speculative_tokens": 2,
        "kv_guard": True,
    }
    with engine(target, spec) as llm:
        d, runner = drafter(llm), model_runner(llm)
        assert d.frozen_options.kv_guard is True
        ok = outputs(llm.generate(PROMPTS[:4], _params(8), use_tqdm=False))
        assert all(len(t) == 8 for t, _, _ in ok)
        # A drafter that wrote into the target cache must be stopped by the guard.
        forward = d.model.forward

        def writing_forward(*args: Any, **kwargs: Any) -> Any:
            runner.kv_caches[0].view(-1)[0] += 1.0
            return forward(*args, **kwargs)

        d.model.forward = writing_forward
        with pytest.raises(KVWriteError):
            llm.generate(PROMPTS[:2], _params(8), use_tqdm=False)


def _rows_per_forward(llm: Any) -> tuple[list[tuple[int, int]], Any]:
    """Record (rows in the drafter forward, requests in the round) for every forward."""
    d = drafter(llm)
    calls: list[tuple[int, int]] = []
    original_propose, forward = d.propose, d.model.forward
    state = {"reqs": 0}

    def propose(*args: Any, **kwargs: Any) -> Any:
        state["reqs"] = kwargs["common_attn_metadata"].batch_size()
        return original_propose(*args, **kwargs)

    def counting_forward(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.append((int(ids.shape[0]), state["reqs"]))
        return forward(*args, **kwargs)

    d.propose, d.model.forward = propose, counting_forward
    return calls, d


@pytest.mark.parametrize("method", ["frozen_kv_mtp", "mtp"])
def test_drafter_rows_per_round(method: str) -> None:
    """frozen_kv_mtp: every drafter forward has one row per request. Upstream mtp's first
    forward covers every scheduled target token (whole prompts on prefill)."""
    target, assistant = pair("fp32")
    k = 3
    spec = {"method": method, "model": assistant, "num_speculative_tokens": k}
    with engine(target, spec) as llm:
        calls, d = _rows_per_forward(llm)
        llm.generate(PROMPTS[:6], _params(16), use_tqdm=False)
        stats = getattr(d, "frozen_stats", None)
    assert calls
    if method == "frozen_kv_mtp":
        assert all(rows == reqs for rows, reqs in calls), calls
        assert stats is not None and stats.metadata_builds == stats.rounds  # once per round
        assert stats.forwards == k * stats.rounds
    else:
        assert type(d).__name__ == "Gemma4Proposer"  # untouched upstream class
        assert max(rows - reqs for rows, reqs in calls) > 10  # prompt-wide first pass
