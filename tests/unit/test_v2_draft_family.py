"""Model Runner V2: greedy or sampled drafts chosen per batch, at the speculator level.

With ``draft_sample_method="probabilistic"`` vLLM's V2 speculator computes full-vocabulary
draft logits in every round. Ours drafts greedily when every request of the batch is
greedy (vLLM's V1 rule), in graphs of its own, and then hands the rejection sampler no q:
``draft_logits`` is what the model runner passes it at the next verification.

Real vLLM pieces: ``InputBuffers``, ``InputBatch.make_dummy``, ``BatchExecutionDescriptor``,
``dispatch_cg_and_sync_dp``, the parent's ``_copy_request_inputs``, our ``_load_seed``,
``SamplingParams``. Stand-ins: the speculator's state (no model, no engine), two graph
managers with FULL graphs, and the sampler's per-request temperatures (vLLM's
``SamplingStates`` needs pinned memory, which a CPU-only host lacks); the round itself
is recorded instead of run.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from vllm_frozen_kv_mtp.frozen_kv import DraftStats

K = 2
MAX_REQS = 8
MAX_TOKENS = 32
HIDDEN = 8
VOCAB = 16


class _FullGraphs:
    """Decode graph manager stand-in: a FULL graph at every batch size."""

    def __init__(self, name: str) -> None:
        self.name = name

    def dispatch(
        self, num_reqs: int, num_tokens: int, uniform_token_count: int | None, **_: Any
    ) -> Any:
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        return BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=num_tokens,
            num_reqs=num_reqs,
            uniform_token_count=uniform_token_count,
        )

    def specialize_spec_tokens(self, batch_desc: Any, num_spec_tokens: int) -> Any:
        return batch_desc


class _Temperatures:
    """The one field of vLLM's ``SamplingStates`` the speculator reads: host temperatures
    per request-state slot, written as ``SamplingStates.add_request`` writes them."""

    def __init__(self) -> None:
        self.temperature = SimpleNamespace(np=np.zeros(MAX_REQS, dtype=np.float32))

    def add_request(self, slot: int, params: Any) -> None:
        self.temperature.np[slot] = params.temperature


def _speculator(sampled_engine: bool = True, states: Any = None) -> Any:
    from vllm.v1.worker.gpu.input_batch import InputBuffers

    from vllm_frozen_kv_mtp.v2.speculator import FrozenKVMTPSpeculator

    spec: Any = object.__new__(FrozenKVMTPSpeculator)  # not the registry's dispatching __new__
    spec.num_speculative_steps = K
    spec.vllm_config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=128))
    if not isinstance(getattr(FrozenKVMTPSpeculator, "max_model_len", None), property):
        spec.max_model_len = 128  # 0.32: an attribute; 0.33: a property over vllm_config
    spec.dp_size, spec.dp_rank = 1, 0
    spec.draft_tokens = torch.zeros(MAX_REQS, K, dtype=torch.int64)
    spec.temperature = torch.zeros(MAX_REQS)
    spec.seeds = torch.zeros(MAX_REQS, dtype=torch.int64)
    spec.idx_mapping = torch.zeros(MAX_REQS, dtype=torch.int32)
    spec.input_buffers = InputBuffers(MAX_REQS, MAX_TOKENS, torch.device("cpu"))
    spec.hidden_states = torch.zeros(MAX_TOKENS, HIDDEN)
    spec.sample_src_positions = torch.zeros(MAX_REQS, dtype=torch.int64)
    spec.current_draft_step = torch.zeros((), dtype=torch.int32)
    spec.draft_logits = torch.zeros(MAX_REQS, K, VOCAB) if sampled_engine else None
    spec.decode_cudagraph_manager = _FullGraphs("sampled")
    spec.greedy_cudagraph_manager = _FullGraphs("greedy") if sampled_engine else None
    if states is not None:
        spec.attach_sampling_states(states)
    spec.supports_decode_metadata_update = False
    spec.frozen_options = SimpleNamespace(kv_guard=False)
    spec.frozen_stats = DraftStats()
    spec.rounds = []
    # What the round's graph replay would see: its manager and the logits sample_draft gets.
    spec._multi_step_decode = lambda *args: spec.rounds.append(
        (spec.decode_cudagraph_manager.name, spec.draft_logits is None)
    )
    return spec


def _propose(spec: Any, num_reqs: int, dummy_run: bool = False) -> None:
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    target_buffers = InputBuffers(MAX_REQS, MAX_TOKENS, torch.device("cpu"))
    batch = InputBatch.make_dummy(num_reqs, num_reqs * (K + 1), target_buffers, is_padding=True)
    spec.propose(
        batch,
        attn_metadata={},
        slot_mappings={},
        last_hidden_states=torch.randn(num_reqs * (K + 1), HIDDEN),
        aux_hidden_states=None,
        num_sampled=torch.ones(num_reqs, dtype=torch.int32),
        num_rejected=torch.zeros(num_reqs, dtype=torch.int32),
        last_sampled=torch.zeros(MAX_REQS, 1, dtype=torch.int64),
        next_prefill_tokens=torch.zeros(1, MAX_REQS, dtype=torch.int64),
        temperature=torch.zeros(MAX_REQS),
        seeds=torch.zeros(MAX_REQS, dtype=torch.int64),
        dummy_run=dummy_run,
    )


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

    from vllm_frozen_kv_mtp import frozen_kv

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
