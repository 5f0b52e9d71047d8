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

from typing import Any

import pytest
import torch

from tests.utils.v2_speculator import FullGraphs, dummy_batch, propose, stand_in_speculator

K = 2
MAX_REQS = 16
CAPTURE_SIZES = (1, 2, 4, 8, 16)
#: a DP=2 step: rank 0 serves 3 requests; rank 1 is idle and runs a dummy batch
BUSY_REQS = 3
PADDED_REQS = 4  # the FULL graph both ranks' target batches padded to


def _speculator(dp_rank: int) -> Any:
    return stand_in_speculator(K, MAX_REQS, FullGraphs(CAPTURE_SIZES), dp_size=2, dp_rank=dp_rank)


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
    return propose(spec, batch, sync, dummy_run=dummy_run)


def _batch(num_reqs: int, num_tokens: int) -> Any:
    return dummy_batch(num_reqs, num_tokens, MAX_REQS)


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
