"""The split decode-attention kernel computes what the torch reference computes.

The kernel runs in Triton's CPU interpreter (fp32: the interpreter's bf16 ``tl.dot`` is
wrong in Triton 3.6.0), in a subprocess with the Triton folder ``make install`` sets
aside (see test_seed_rows.py). The reference itself is checked against a dense softmax
over keys gathered by hand.
"""

from __future__ import annotations

import torch

from tests.utils.triton_interpreter import run_in_triton_interpreter
from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import (
    MAX_SPLITS,
    DecodeAttentionWorkspace,
    choose_splits,
    decode_attention_reference,
    default_splits,
    workspace_parts,
)

#: (head size, window, block size, softcap, KV scales, splits to force, (query heads, KV
#: heads)); groups of 2 and 4 as E4B's layers, 2 and 8 as 31B's (32 over 16 sliding, 32
#: over 4 full)
CASES = (
    (256, 40, 16, 0.0, False, (None, 1, 3, 16), (4, 2)),
    (512, 0, 16, 0.0, False, (None, 1, 4), (4, 2)),
    (256, 0, 32, 30.0, True, (None, 2), (4, 2)),
    (512, 0, 16, 0.0, False, (None, 1, 3), (8, 1)),
    (256, 40, 16, 0.0, False, (None, 2), (8, 4)),
)
MAX_Q_HEADS = 8
SEQ_LENS = (1, 17, 64, 100, 0)  # 0: a CUDA-graph padding row (zeros out)


def make_case(
    head: int, block_size: int, seed: int, q_heads: int = 4, kv_heads: int = 2
) -> tuple[torch.Tensor, ...]:
    """Query heads over KV heads, paged caches with shuffled blocks, a strided q."""
    g = torch.Generator().manual_seed(seed)
    rows = len(SEQ_LENS)
    per_row = -(-max(SEQ_LENS) // block_size)
    num_blocks = rows * per_row + 3
    k = torch.randn(num_blocks, block_size, kv_heads, head, generator=g)
    v = torch.randn(num_blocks, block_size, kv_heads, head, generator=g)
    table = (torch.randperm(num_blocks - 1, generator=g)[: rows * per_row] + 1).to(torch.int32)
    wide = torch.randn(rows, q_heads, head + 8, generator=g)
    q = wide[:, :, :head]  # strided rows, as vLLM's q views are
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    return q, k, v, table.view(rows, per_row), seq_lens


def check() -> None:
    """Run inside the interpreter subprocess."""
    from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import (
        DecodeAttentionWorkspace,
        decode_attention,
    )

    # one workspace for every call, sized for the largest (as the engine shares one)
    rows = len(SEQ_LENS)
    shared = DecodeAttentionWorkspace.allocate(rows, MAX_Q_HEADS, MAX_SPLITS, 512, "cpu")
    assert not shared.fits(rows + 1, MAX_Q_HEADS, MAX_SPLITS, 512)
    for i, (head, window, block_size, softcap, scaled, splits, heads) in enumerate(CASES):
        q, k, v, table, seq_lens = make_case(head, block_size, i, *heads)
        ks, vs = (2.0, 0.5) if scaled else (1.0, 1.0)
        want = decode_attention_reference(q, k, v, table, seq_lens, 0.125, window, softcap, ks, vs)
        for n in splits:
            out = torch.full_like(q, float("nan"))
            decode_attention(
                q, k, v, table, seq_lens, out, 0.125, window, softcap,
                torch.tensor([ks]) if scaled else None, torch.tensor([vs]) if scaled else None,
                num_splits=n, workspace=shared if n and n % 2 else None,
            )  # fmt: skip
            err = float((out - want).abs().max())
            assert err < 1e-4, (head, window, n, heads, err)
            assert torch.equal(out[-1], torch.zeros_like(out[-1])), "padding row"
    # other launch shapes (bench.micro.attn_gpu sweeps them): tiles of one block and of two
    q, k, v, table, seq_lens = make_case(256, 16, 9)
    want = decode_attention_reference(q, k, v, table, seq_lens, 0.125, 40)
    for tile, warps, mma in ((16, 2, True), (32, 8, True), (32, 8, False), (16, 4, False)):
        out = torch.full_like(q, float("nan"))
        decode_attention(q, k, v, table, seq_lens, out, 0.125, 40, num_splits=2, tile=tile,
                         num_warps=warps, mma=mma)  # fmt: skip
        assert float((out - want).abs().max()) < 1e-4, (tile, warps, mma)
    print("decode attention kernel matches the reference")


def test_kernel_matches_the_reference() -> None:
    out = run_in_triton_interpreter(
        "from tests.unit.test_decode_attention_kernel import check; check()"
    )
    assert "decode attention kernel matches the reference" in out


def test_reference_is_a_windowed_softmax() -> None:
    q, k, v, table, seq_lens = make_case(16, 4, 7)
    out = decode_attention_reference(q, k, v, table, seq_lens, 0.5, window=9)
    r, n = 3, int(seq_lens[3])  # 64 keys, the window keeps the last 9
    keys = [(int(table[r, t // 4]), t % 4) for t in range(n - 9, n)]
    for h in range(4):
        kk = torch.stack([k[b, s, h // 2] for b, s in keys])
        vv = torch.stack([v[b, s, h // 2] for b, s in keys])
        p = torch.softmax(kk @ q[r, h] * 0.5, dim=0)
        assert torch.allclose(out[r, h], p @ vv, atol=1e-5)
    assert torch.equal(out[4], torch.zeros_like(out[4]))


def test_splits_fill_the_gpu_within_bounds() -> None:
    # 256 programs: 128 rows x 2 KV heads fill them without a split (no merge launch)
    assert choose_splits(128, 2, 256, 64) == 1
    assert choose_splits(64, 2, 256, 64) == 2
    assert choose_splits(32, 2, 4096, 64) == 4
    assert choose_splits(1, 2, 100_000, 64) == MAX_SPLITS
    assert choose_splits(1, 2, 40, 64) == 1  # one tile of keys: no split
    assert choose_splits(512, 2, 512, 32) == 1


def test_workspace_does_not_grow_with_max_num_seqs() -> None:
    # Sized per batch: batches that fill the GPU take one split and need no room, so the
    # 31B full layer (32 query heads over 4 KV heads, head 512) needs the same few MiB for
    # 128 rows as for 4096; the old sizing (rows x heads x 16 splits) took 4 GiB at 4096.
    parts = workspace_parts(128, 32, 4, 512, 0)
    assert parts == workspace_parts(4096, 32, 4, 512, 0)
    assert 0 < parts * 512 * 4 < 16 * 2**20
    assert parts >= max(
        n * 32 * (1 << (default_splits(n, 4, 512, 0) - 1).bit_length())
        for n in range(1, 64)
        if default_splits(n, 4, 512, 0) > 1
    )
    ws = DecodeAttentionWorkspace.of_parts(parts, 512, "cpu")
    assert all(ws.fits(n, 32, default_splits(n, 4, 512, 0), 512) for n in range(1, 4097))
    assert workspace_parts(4096, 4, 2, 256, 1) == 0  # one key per row: never split


def check_bench_call() -> None:
    """Run inside the interpreter subprocess: bench.micro.attn_gpu's "frozen" call."""
    from bench.micro.attn_gpu import attention_call

    cases = (
        (256, 24, "frozen", 4, 2),
        (512, None, "frozen", 4, 2),
        (256, 24, "frozen:2", 4, 2),
        (512, None, "frozen", 8, 1),  # a 31B-like group of 8 query heads per KV head
    )
    for head, window, kind, q_heads, kv_heads in cases:
        call = attention_call(3, 40, head, window, kind, "cpu", q_heads, kv_heads)
        out = call(None)
        q, k, v, table, seq_lens = call.inputs
        want = decode_attention_reference(q, k, v, table, seq_lens, 1.0, window or 0)
        assert float((out - want).abs().max()) < 1e-4, (head, window)
    print("bench call matches the reference")


def test_bench_call_matches_the_reference() -> None:
    out = run_in_triton_interpreter(
        "from tests.unit.test_decode_attention_kernel import check_bench_call; check_bench_call()"
    )
    assert "bench call matches the reference" in out
