"""The bounded-context attention benchmark's cut block tables: they make a paged kernel
read the sink and the recent window (to block granularity), and attention over the cut
table equals attention over exactly those keys of the whole table."""

from __future__ import annotations

import pytest
import torch

from bench.micro.bounded_attn_gpu import (
    BLOCK,
    bounded_blocks,
    kept_positions,
    kv_bytes,
    main,
    make_inputs,
)
from vllm_frozen_kv_mtp.kernels.decode_attention_kernel import decode_attention_reference


@pytest.mark.parametrize("context", [1, 16, 17, 200, 531, 532, 533, 1000, 32768])
@pytest.mark.parametrize("sink,window", [(0, 16), (4, 512), (16, 100), (40, 17)])
def test_cut_table_covers_sink_and_window(context: int, sink: int, window: int) -> None:
    p = context - 1
    kept = kept_positions(context, sink, window)
    want = {t for t in range(context) if t < sink or t > p - window}
    assert set(kept) >= want and kept == sorted(kept) and kept[-1] == p
    # block granularity: under one block of extra keys at each end of each range
    assert len(kept) - len(want) < 2 * BLOCK
    blocks, n = bounded_blocks(context, sink, window)
    assert n == len(kept) and blocks == sorted(set(blocks))


def test_short_context_keeps_the_whole_table() -> None:
    assert bounded_blocks(500, 4, 512) == (list(range(32)), 500)
    blocks, n = bounded_blocks(32768, 4, 512)
    assert blocks[0] == 0 and len(blocks) == 1 + 32 and n == 16 + 31 * 16 + 16
    with pytest.raises(ValueError):
        bounded_blocks(10, 4, 0)


def test_cut_table_attention_equals_attention_over_kept_keys() -> None:
    context, sink, window = 300, 4, 64
    q, k, v, table = make_inputs(3, context, 32, 4, 2, "cpu")
    blocks, n = bounded_blocks(context, sink, window)
    cut = table[:, torch.tensor(blocks)]
    got = decode_attention_reference(q, k, v, cut, torch.full((3,), n), 1.0)
    pos = torch.tensor(kept_positions(context, sink, window))
    for r in range(3):
        keys = k[table[r, pos // BLOCK].long(), pos % BLOCK].repeat_interleave(2, dim=1)
        vals = v[table[r, pos // BLOCK].long(), pos % BLOCK].repeat_interleave(2, dim=1)
        probs = torch.einsum("hd,thd->ht", q[r], keys).softmax(-1)
        torch.testing.assert_close(got[r], torch.einsum("ht,thd->hd", probs, vals))


def test_kv_bytes() -> None:
    # E4B's global layer: 2 KV heads x 512, bf16 K and V: 4 KiB per key
    assert kv_bytes(1, 32768, 2, 512) == 32768 * 4096


def test_cpu_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    main(
        [
            "--device",
            "cpu",
            "--shapes",
            "E4B",
            "--rows",
            "2",
            "--contexts",
            "100",
            "--bound",
            "4:32",
        ]
    )
    out = capsys.readouterr().out
    assert "| E4B | 100 | 2 |" in out
