"""The seed rows' attention metadata on the V1 runner (also vLLM's CPU runner).

A frozen round drafts from one row per request: the target's post-norm hidden state at
the last accepted position and the bonus token, queried at that constant position over
the committed prefix for all k recurrent steps. That is a uniform one-row decode batch,
built here from the target step's (multi-row) metadata once per round.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

#: slot id that attention backends treat as "do not write"; the drafter writes nothing
PADDING_SLOT_ID = -1


def seed_row_indices(
    token_indices_to_sample: torch.Tensor | None, query_start_loc: torch.Tensor
) -> torch.Tensor:
    """Flat row index of each request's seed in the target's batch.

    After a verify step vLLM hands us ``token_indices_to_sample`` (row
    ``accept_len - 1`` of each request's block); after a prefill it is the last
    scheduled row of each request. Device-side only: no host sync.
    """
    if token_indices_to_sample is not None:
        return token_indices_to_sample
    return query_start_loc[1:] - 1


def committed_seq_lens(
    seq_lens: torch.Tensor, num_rejected_tokens: torch.Tensor | None
) -> torch.Tensor:
    """Length of the committed prefix per request (keys the seed row may attend to).

    The target's ``seq_lens`` count every verified slot, rejected drafts included;
    a new tensor is returned so the target's metadata is left untouched.
    """
    if num_rejected_tokens is None:
        return seq_lens.clone()
    return seq_lens - num_rejected_tokens.to(seq_lens.dtype)


def one_row_decode_metadata(
    cad: Any,
    num_rejected_tokens: torch.Tensor | None,
    query_start_loc: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> Any:
    """Turn the target's (multi-row) attention metadata into the drafter's one-row batch.

    ``query_start_loc`` must be ``arange(batch + 1)`` on the device and
    ``slot_mapping`` a ``[batch]`` tensor of :data:`PADDING_SLOT_ID` (no KV writes).
    Block tables are kept: per-KV-cache-group tables are swapped in by the proposer.
    """
    batch = cad.batch_size()
    return dataclasses.replace(
        cad,
        query_start_loc=query_start_loc[: batch + 1],
        query_start_loc_cpu=torch.arange(batch + 1, dtype=torch.int32),
        seq_lens=committed_seq_lens(cad.seq_lens, num_rejected_tokens),
        num_reqs=batch,
        num_actual_tokens=batch,
        max_query_len=1,
        slot_mapping=slot_mapping[:batch],
        causal=True,
        logits_indices_padded=None,
        num_logits_indices=None,
        max_logits_per_req=None,
        positions=None,
        is_prefilling=None,
        req_idx=None,
        _num_computed_tokens_cache=None,
        _token_to_req_indices_cache=None,
    )
