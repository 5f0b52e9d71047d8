"""A ``FrozenKVMTPSpeculator`` without a model or an engine, for tests of ``propose``'s
control flow on CPU (data-parallel agreement, the per-batch draft family).

Real vLLM pieces: ``InputBuffers``, ``InputBatch.make_dummy``, ``BatchExecutionDescriptor``,
``dispatch_cg_and_sync_dp`` and the parent's methods ``propose`` calls. Stand-ins: the
speculator's state and its decode graph managers; the round itself is recorded, not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch

from vllm_frozen_kv_mtp.drafters.stats import DraftStats

MAX_TOKENS = 64
HIDDEN = 8


class FullGraphs:
    """Decode graph manager stand-in: FULL graphs, one token per row, at the smallest of
    ``sizes`` that holds the batch (every size when ``sizes`` is None)."""

    def __init__(self, sizes: Sequence[int] | None = None, name: str = "") -> None:
        self.sizes, self.name = sizes, name

    def dispatch(
        self, num_reqs: int, num_tokens: int, uniform_token_count: int | None, **_: Any
    ) -> Any:
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        size = num_tokens if self.sizes is None else min(s for s in self.sizes if s >= num_tokens)
        return BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=size,
            num_reqs=size,
            uniform_token_count=uniform_token_count,
        )

    def specialize_spec_tokens(self, batch_desc: Any, num_spec_tokens: int) -> Any:
        return batch_desc


def upstream_class(cls: type) -> type:
    """The first vLLM class in ``cls``'s MRO: where the plugin's overrides call ``super()``
    to (the plugin's own mixin comes before it)."""
    return next(c for c in cls.__mro__ if c.__module__.split(".")[0] == "vllm")


def sampling_speculator(model: Any, **options: Any) -> Any:
    """A ``FrozenKVMTPSpeculator`` holding only what ``sample_draft`` reads: the options,
    no acceptance estimator, and ``model`` (its heads)."""
    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator
    from vllm_frozen_kv_mtp.options import FrozenKVOptions

    spec: Any = object.__new__(FrozenKVMTPSpeculator)  # not the registry's dispatching __new__
    spec.frozen_options = FrozenKVOptions(**options)
    spec.acceptance_estimator = None
    spec.model = model
    return spec


def stand_in_speculator(
    k: int, max_reqs: int, manager: Any, dp_size: int = 1, dp_rank: int = 0
) -> Any:
    """The speculator's state, with ``_multi_step_decode`` recording its arguments in
    ``rounds`` instead of running a round."""
    from vllm.v1.worker.gpu.input_batch import InputBuffers

    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator

    spec: Any = object.__new__(FrozenKVMTPSpeculator)  # not the registry's dispatching __new__
    spec.num_speculative_steps = k
    spec.vllm_config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=128))
    if not isinstance(getattr(FrozenKVMTPSpeculator, "max_model_len", None), property):
        spec.max_model_len = 128  # 0.32: an attribute; 0.33: a property over vllm_config
    spec.dp_size, spec.dp_rank = dp_size, dp_rank
    spec.draft_tokens = torch.zeros(max_reqs, k, dtype=torch.int64)
    spec.temperature = torch.zeros(max_reqs)
    spec.seeds = torch.zeros(max_reqs, dtype=torch.int64)
    spec.idx_mapping = torch.zeros(max_reqs, dtype=torch.int32)
    spec.input_buffers = InputBuffers(max_reqs, MAX_TOKENS, torch.device("cpu"))
    spec.hidden_states = torch.zeros(MAX_TOKENS, HIDDEN)
    spec.sample_src_positions = torch.zeros(max_reqs, dtype=torch.int64)
    spec.current_draft_step = torch.zeros((), dtype=torch.int32)
    spec.decode_cudagraph_manager = manager
    spec.supports_decode_metadata_update = False
    spec.frozen_options = SimpleNamespace(kv_guard=False)
    spec.frozen_stats = DraftStats()
    spec.rounds = []
    spec._multi_step_decode = lambda *args: spec.rounds.append(args)
    return spec


def dummy_batch(num_reqs: int, num_tokens: int, max_reqs: int) -> Any:
    """vLLM's own dummy target batch (``idx_mapping`` = 0..num_reqs-1)."""
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    target_buffers = InputBuffers(max_reqs, MAX_TOKENS, torch.device("cpu"))
    return InputBatch.make_dummy(num_reqs, num_tokens, target_buffers, is_padding=True)


def propose(spec: Any, batch: Any, sync: Any = None, dummy_run: bool = False) -> torch.Tensor:
    """``spec.propose`` over ``batch`` as the model runner calls it after a verify step."""
    n = batch.num_reqs
    max_reqs = spec.draft_tokens.shape[0]
    return spec.propose(
        batch,
        attn_metadata={},
        slot_mappings={},
        last_hidden_states=torch.randn(batch.num_tokens_after_padding, HIDDEN),
        aux_hidden_states=None,
        num_sampled=torch.ones(n, dtype=torch.int32),
        num_rejected=torch.zeros(n, dtype=torch.int32),
        last_sampled=torch.zeros(max_reqs, 1, dtype=torch.int64),
        next_prefill_tokens=torch.zeros(1, max_reqs, dtype=torch.int64),
        temperature=torch.zeros(max_reqs),
        seeds=torch.zeros(max_reqs, dtype=torch.int64),
        dp_sync_state=sync,
        dummy_run=dummy_run,
    )
