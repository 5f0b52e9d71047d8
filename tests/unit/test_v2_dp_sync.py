"""``FrozenKVMTPSpeculator.propose`` under data parallelism (DP=2), at the speculator level.

vLLM 0.33 made ``DPSyncState.num_reqs`` the largest *real* request count on any rank
(0.32: the padded FULL-graph count). An idle rank's dummy batch still takes the padded
count, so a draft round of that size trips ``_build_uniform_batch_dp_sync``'s assert
unless ``propose`` shrinks it as upstream's ``TargetDependentARSpeculator.propose`` does.

Real vLLM pieces: ``DPSyncState``, ``InputBuffers``, ``InputBatch.make_dummy``,
``BatchExecutionDescriptor``, ``dispatch_cg_and_sync_dp``, the parent's
``_build_uniform_batch_dp_sync`` and ``_copy_request_inputs``, our ``_load_seed``. Stand-ins:
the speculator's state (no model, no engine) and a decode graph manager with FULL graphs
at a few batch sizes; the round itself is recorded instead of run.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from vllm_frozen_kv_mtp.frozen_kv import DraftStats

K = 2
MAX_REQS = 16
MAX_TOKENS = 64
HIDDEN = 8
CAPTURE_SIZES = (1, 2, 4, 8, 16)
#: a DP=2 step: rank 0 serves 3 requests; rank 1 is idle and runs a dummy batch
BUSY_REQS = 3
PADDED_REQS = 4  # the FULL graph both ranks' target batches padded to


class _FullGraphs:
    """Decode graph manager stand-in: FULL graphs at CAPTURE_SIZES, one token per row."""

    def dispatch(
        self, num_reqs: int, num_tokens: int, uniform_token_count: int | None, **_: Any
    ) -> Any:
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        size = min(s for s in CAPTURE_SIZES if s >= num_tokens)
        return BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=size,
            num_reqs=size,
            uniform_token_count=uniform_token_count,
        )

    def specialize_spec_tokens(self, batch_desc: Any, num_spec_tokens: int) -> Any:
        return batch_desc


def _speculator(dp_rank: int) -> Any:
    from vllm.v1.worker.gpu.input_batch import InputBuffers

    from vllm_frozen_kv_mtp.v2.speculator import FrozenKVMTPSpeculator

    spec: Any = object.__new__(FrozenKVMTPSpeculator)  # not the registry's dispatching __new__
    spec.num_speculative_steps = K
    spec.vllm_config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=128))
    if not isinstance(getattr(FrozenKVMTPSpeculator, "max_model_len", None), property):
        spec.max_model_len = 128  # 0.32: an attribute; 0.33: a property over vllm_config
    spec.dp_size, spec.dp_rank = 2, dp_rank
    spec.draft_tokens = torch.zeros(MAX_REQS, K, dtype=torch.int64)
    spec.temperature = torch.zeros(MAX_REQS)
    spec.seeds = torch.zeros(MAX_REQS, dtype=torch.int64)
    spec.idx_mapping = torch.zeros(MAX_REQS, dtype=torch.int32)
    spec.input_buffers = InputBuffers(MAX_REQS, MAX_TOKENS, torch.device("cpu"))
    spec.hidden_states = torch.zeros(MAX_TOKENS, HIDDEN)
    spec.sample_src_positions = torch.zeros(MAX_REQS, dtype=torch.int64)
    spec.current_draft_step = torch.zeros((), dtype=torch.int32)
    spec.decode_cudagraph_manager = _FullGraphs()
    spec.supports_decode_metadata_update = False
    spec.frozen_options = SimpleNamespace(kv_guard=False)
    spec.frozen_stats = DraftStats()
    spec.rounds = []
    spec._multi_step_decode = lambda *args: spec.rounds.append(args)
    return spec


def _target_sync(num_reqs: int) -> Any:
    """The target step's DPSyncState: uniform decode of K+1 tokens, FULL graph at 4 rows."""
    from vllm.v1.worker.gpu.dp_utils import DPSyncState

    return DPSyncState(
        num_tokens_across_dp=torch.full((2,), PADDED_REQS * (K + 1), dtype=torch.int32),
        uniform_token_count=K + 1,
        eager=False,
        num_reqs=num_reqs,
    )


def _propose(spec: Any, batch: Any, sync: Any, dummy_run: bool) -> torch.Tensor:
    n = batch.num_reqs
    tokens = batch.num_tokens_after_padding
    return spec.propose(
        batch,
        attn_metadata={},
        slot_mappings={},
        last_hidden_states=torch.randn(tokens, HIDDEN),
        aux_hidden_states=None,
        num_sampled=torch.ones(n, dtype=torch.int32),
        num_rejected=torch.zeros(n, dtype=torch.int32),
        last_sampled=torch.zeros(MAX_REQS, 1, dtype=torch.int64),
        next_prefill_tokens=torch.zeros(1, MAX_REQS, dtype=torch.int64),
        temperature=torch.zeros(MAX_REQS),
        seeds=torch.zeros(MAX_REQS, dtype=torch.int64),
        dp_sync_state=sync,
        dummy_run=dummy_run,
    )


def _batch(num_reqs: int, num_tokens: int) -> Any:
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    target_buffers = InputBuffers(MAX_REQS, MAX_TOKENS, torch.device("cpu"))
    return InputBatch.make_dummy(num_reqs, num_tokens, target_buffers, is_padding=True)


def test_idle_rank_dummy_round_shrinks_to_real_request_count() -> None:
    """0.33 semantics: sync.num_reqs = 3 real requests; the idle rank's dummy batch has the
    padded 4. Both ranks must run a round of 3 requests at the same padded token count."""
    sync = _target_sync(num_reqs=BUSY_REQS)

    busy = _speculator(dp_rank=0)
    busy_batch = _batch(BUSY_REQS, BUSY_REQS * (K + 1))
    assert tuple(_propose(busy, busy_batch, sync, dummy_run=False).shape) == (BUSY_REQS, K)

    idle = _speculator(dp_rank=1)
    idle_batch = _batch(PADDED_REQS, PADDED_REQS * (K + 1))  # as execute_model's dummy run
    drafts = _propose(idle, idle_batch, sync, dummy_run=True)

    assert tuple(drafts.shape) == (BUSY_REQS, K)
    ((busy_reqs, _, busy_desc, busy_dp, *_),) = busy.rounds
    ((idle_reqs, _, idle_desc, idle_dp, *_),) = idle.rounds
    assert busy_reqs == idle_reqs == BUSY_REQS
    assert busy_desc == idle_desc  # same graph on both ranks
    assert idle_dp.tolist() == busy_dp.tolist() == [idle_desc.num_tokens] * 2
    # The dummy seed row past the shrunk batch is graph padding: empty query, no keys.
    qsl = idle.input_buffers.query_start_loc
    assert qsl[: BUSY_REQS + 1].tolist() == list(range(BUSY_REQS + 1))
    assert (qsl[BUSY_REQS + 1 :] == BUSY_REQS).all()
    assert (idle.input_buffers.seq_lens[BUSY_REQS:] == 0).all()
    assert idle.frozen_stats.rounds == 0  # dummy rounds are not counted


def test_padded_sync_keeps_the_dummy_batch() -> None:
    """0.32 semantics: sync.num_reqs is the padded FULL count; nothing shrinks."""
    idle = _speculator(dp_rank=1)
    batch = _batch(PADDED_REQS, PADDED_REQS * (K + 1))
    drafts = _propose(idle, batch, _target_sync(num_reqs=PADDED_REQS), dummy_run=True)
    assert tuple(drafts.shape) == (PADDED_REQS, K)
    ((num_reqs, *_),) = idle.rounds
    assert num_reqs == PADDED_REQS
    assert (idle.input_buffers.seq_lens[:PADDED_REQS] > 0).all()


def test_real_batch_is_never_shrunk() -> None:
    """Only dummy runs shrink; a real batch above the sync is a caller error, as upstream."""
    busy = _speculator(dp_rank=0)
    batch = _batch(PADDED_REQS, PADDED_REQS * (K + 1))
    with pytest.raises(AssertionError, match="does not cover"):
        _propose(busy, batch, _target_sync(num_reqs=BUSY_REQS), dummy_run=False)
