"""Model Runner V2: greedy or sampled drafts chosen per batch, at the speculator level.

With ``draft_sample_method="probabilistic"`` vLLM's V2 speculator computes full-vocabulary
draft logits in every round. Ours drafts greedily when every request of the batch is
greedy (vLLM's V1 rule), in graphs of its own, and then hands the rejection sampler no q:
``draft_logits`` is what the model runner passes it at the next verification.

The speculator is ``tests/utils/v2_speculator.py``'s (real vLLM batch, buffers and
dispatch; no model, no engine), with two graph managers with FULL graphs, and the
sampler's per-request temperatures stood in for (vLLM's ``SamplingStates`` needs pinned
memory, which a CPU-only host lacks); the round itself is recorded instead of run.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from tests.utils.v2_speculator import FullGraphs, dummy_batch, propose, stand_in_speculator

K = 2
MAX_REQS = 8
VOCAB = 16


class _Temperatures:
    """The one field of vLLM's ``SamplingStates`` the speculator reads: host temperatures
    per request-state slot, written as ``SamplingStates.add_request`` writes them."""

    def __init__(self) -> None:
        self.temperature = SimpleNamespace(np=np.zeros(MAX_REQS, dtype=np.float32))

    def add_request(self, slot: int, params: Any) -> None:
        self.temperature.np[slot] = params.temperature


def _speculator(sampled_engine: bool = True, states: Any = None) -> Any:
    spec = stand_in_speculator(K, MAX_REQS, FullGraphs(name="sampled"))
    spec.draft_logits = torch.zeros(MAX_REQS, K, VOCAB) if sampled_engine else None
    spec.greedy_cudagraph_manager = FullGraphs(name="greedy") if sampled_engine else None
    if states is not None:
        spec.attach_sampling_states(states)
    # What the round's graph replay would see: its manager and the logits sample_draft gets.
    spec._multi_step_decode = lambda *args: spec.rounds.append(
        (spec.decode_cudagraph_manager.name, spec.draft_logits is None)
    )
    return spec


def _propose(spec: Any, num_reqs: int, dummy_run: bool = False) -> None:
    propose(spec, dummy_batch(num_reqs, num_reqs * (K + 1), MAX_REQS), dummy_run=dummy_run)


def _states(*temperatures: float) -> _Temperatures:
    from vllm import SamplingParams

    states = _Temperatures()
    for slot, t in enumerate(temperatures):
        states.add_request(slot, SamplingParams(temperature=t))
    return states


def test_all_greedy_batch_drafts_greedily_and_verifies_without_q() -> None:
    spec = _speculator(states=_states(0.0, 0.0, 0.0))
    buffer = spec._draft_logits_buffer
    _propose(spec, 3)
    assert spec.rounds == [("greedy", True)]  # greedy graphs; sample_draft gets no logits
    assert spec.draft_logits is None  # the next verification checks greedy drafts
    assert spec.decode_cudagraph_manager.name == "sampled"  # restored after the round
    assert spec._draft_logits_buffer is buffer  # vLLM's buffer is kept
    assert spec.frozen_stats.sampled_rounds == 0 and spec.frozen_stats.rounds == 1


def test_one_sampled_request_makes_the_batch_sample() -> None:
    states = _states(0.0, 0.0, 0.0)
    spec = _speculator(states=states)
    _propose(spec, 3)
    states.temperature.np[1] = 1.0  # a sampled request joins slot 1
    _propose(spec, 3)
    assert spec.rounds == [("greedy", True), ("sampled", False)]
    assert spec.draft_logits is spec._draft_logits_buffer  # q for the next verification
    assert spec.frozen_stats.sampled_rounds == 1 and spec.frozen_stats.rounds == 2


def test_requests_outside_the_batch_do_not_count() -> None:
    spec = _speculator(states=_states(0.0, 0.0, 0.7))  # slot 2 samples, batch holds 0-1
    _propose(spec, 2)
    assert spec.rounds == [("greedy", True)]


def test_dummy_run_keeps_the_last_family() -> None:
    spec = _speculator(states=_states(0.0, 0.0))
    _propose(spec, 2)
    _propose(spec, 2, dummy_run=True)
    assert spec.rounds == [("greedy", True), ("greedy", True)]
    assert spec.draft_logits is None
    assert spec.frozen_stats.rounds == 1  # dummy rounds are not counted


@pytest.mark.parametrize("sampled_engine", [True, False])
def test_without_sampling_states_nothing_changes(sampled_engine: bool) -> None:
    """No states handed over: a sampled engine samples every round (vLLM's V2 behaviour);
    a greedy engine drafts greedily in its only graphs, and never had a q."""
    spec = _speculator(sampled_engine=sampled_engine)
    _propose(spec, 2)
    assert spec.rounds == [("sampled", not sampled_engine)]
    assert (spec.draft_logits is None) is (not sampled_engine)


def test_model_runner_hands_its_sampling_states_to_our_speculator_only() -> None:
    from vllm_frozen_kv_mtp.patches.sampling_states import hand_sampling_states

    states = object()
    spec = _speculator()
    runner = SimpleNamespace(speculator=spec, sampler=SimpleNamespace(sampling_states=states))
    assert hand_sampling_states(runner)
    assert spec.frozen_sampling_states is states
    upstream = SimpleNamespace(speculator=object(), sampler=runner.sampler)
    assert not hand_sampling_states(upstream)
    assert not hand_sampling_states(SimpleNamespace(speculator=None, sampler=None))


def test_patch_wraps_vllms_model_runner_load_model() -> None:
    """The registry's patch is on the real ``GPUModelRunner.load_model``, once."""
    import vllm_frozen_kv_mtp
    from vllm_frozen_kv_mtp.patches.state import MARK

    vllm_frozen_kv_mtp.register()
    from vllm.v1.worker.gpu import model_runner

    vllm_frozen_kv_mtp.register()
    load_model = model_runner.GPUModelRunner.load_model
    assert getattr(load_model, MARK, False)
    assert not getattr(load_model.__wrapped__, MARK, False)  # not wrapped twice


def test_exit_summary_names_sampled_and_greedy_rounds(caplog: pytest.LogCaptureFixture) -> None:
    """The drafter's counters reach the log when its process exits."""
    import logging

    from vllm_frozen_kv_mtp.drafters import stats as frozen_kv

    spec = _speculator(states=_states(0.0, 1.0))
    _propose(spec, 1)  # slot 0: greedy
    _propose(spec, 2)  # slot 1 samples
    frozen_kv.log_stats_at_exit(spec.frozen_stats)
    with caplog.at_level(logging.INFO, logger="vllm.frozen_kv_mtp"):
        frozen_kv._log_exit_stats()
    assert (
        "frozen_kv_mtp: 2 draft rounds (k=2: 2); 1 sampled their drafts, the others drafted "
        "greedily; 0 steps with k=0; 0 rounds without their CUDA graph"
    ) in caplog.text
    assert spec.frozen_stats.graph_rounds == 2  # both rounds asked for their graph
    # rounds that never asked for a graph (eager, V1) are not reported as 0 misses
    eager = frozen_kv.DraftStats(rounds=2)
    assert eager.summary().endswith("; no CUDA graph counts (eager rounds, or the V1 runner)")
