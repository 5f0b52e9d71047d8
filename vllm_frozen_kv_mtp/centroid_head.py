"""Draft-token heads for centroid-masked Gemma 4 assistants (E2B/E4B), same tokens as upstream.

Upstream's ``Gemma4MTPMaskedEmbedder`` picks each row's top centroids, copies the
candidate tokens' embedding rows (``[T, top_k * vocab/centroids, D]``, 4096 x 256 for
E4B) and scores them with a batched dot product. Model Runner V2 then scatters those
scores into a full-vocabulary tensor (``[T, 262144]``) and takes its argmax every
draft step. The H200 profile of a draft round (BENCHMARKS.md) puts about 40% of it
in that head. The heads here pick V2's token from the same candidates, without the
full-vocabulary tensor:

* ``sparse``: upstream's row gather and batched dot, then an argmax over the
  candidates only;
* ``dense``: one GEMM of the rows against the whole embedding table, then a gather of
  the candidates' scores. It reads the table once per step whatever the batch size,
  instead of copying ``T * 4096`` rows, so it should pay off at larger batches. The
  dot products are the same; only the summation order differs, which can flip a
  near-tie. Drafts are verified, so output is lossless either way;
* ``fused`` (opt-in, not yet measured on a GPU): Triton kernels that read each
  selected centroid's embedding rows once and keep only the best (score, token id),
  so neither the gathered rows nor a score tensor is ever written
  (``centroid_kernel.py``);
* ``auto`` (the default): ``dense`` for CUDA-graph buckets of at least
  ``AUTO_DENSE_MIN_ROWS`` rows, upstream's head below (see ``head_for_rows``).

Measured on the H200 (BENCHMARKS.md, run D, E4B shape): ``auto`` cuts the GPU time of
a whole decode step by 0.12 ms at c=32 and 1.07 ms at c=128 (profiled kernel sums;
the draft round goes 2.35 -> 1.21 ms at c=128) and leaves c<=8 on upstream's head.
Run C (one timed run after a short warm-up) had shown whole steps slower with
``dense``; run D (full-length warm-up, median of 3, profiled) does not reproduce it.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_frozen_kv_mtp.centroid_kernel import fused_head_supported, fused_top_tokens

#: "auto" scores with "dense" from this many rows up, and leaves smaller batches to
#: upstream's head. On the H200 (E4B, runs C and D) the dense round was longer at c<=8
#: (reading the whole table costs more than gathering a few rows' candidates) and
#: shorter from c=32 (1.02 vs 1.15 ms; 1.21 vs 2.35 at c=128).
AUTO_DENSE_MIN_ROWS = 32


def head_for_rows(head: str, rows: int) -> str:
    """The head that scores a batch of ``rows`` draft rows. ``rows`` is a Python int
    (a CUDA-graph bucket size), so the choice is fixed per captured graph."""
    if head == "auto":
        return "dense" if rows >= AUTO_DENSE_MIN_ROWS else "upstream"
    return head


def top_centroids(masked_embedding: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """``[T, top_k]`` each row's top centroids, in upstream's order."""
    me = masked_embedding
    return torch.topk(me.centroids(hidden_states), k=me.centroid_intermediate_top_k, dim=-1)[1]


def candidate_tokens(masked_embedding: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """``[T, top_k * tokens_per_centroid]`` token ids of each row's top centroids
    (upstream's candidate set and order, without scoring them)."""
    me = masked_embedding
    top = top_centroids(me, hidden_states)
    clusters = me.token_ordering.view(me.num_centroids, me.vocab_size_per_centroid)
    return clusters[top].reshape(hidden_states.shape[0], -1)


def top_tokens(model: Any, hidden_states: torch.Tensor, head: str) -> torch.Tensor:
    """Draft token ids as Model Runner V2's default picks them (full-vocabulary
    argmax of the centroid-masked logits, ``suppress_tokens`` excluded, lowest token
    id on exact ties), scored by ``head``: "sparse" (upstream's own row gather and
    batched dot), "dense" (one GEMM over the whole table) or "fused" (two Triton
    launches, see centroid_kernel.py; "dense" where Triton or its layout is missing)."""
    me = model.masked_embedding
    weight = model._get_full_lm_head_weight()
    suppress = getattr(model, "_suppress_idx", None)
    if head == "fused" and fused_head_supported(me.vocab_size_per_centroid):
        picked = fused_top_tokens(
            hidden_states,
            weight,
            me.token_ordering,
            top_centroids(me, hidden_states),
            me.vocab_size_per_centroid,
            suppress,
        )
        if picked is not None:
            return picked
    if head in ("dense", "fused"):  # "fused" without Triton or with odd cluster sizes
        cand = candidate_tokens(me, hidden_states)
        scores = torch.mm(hidden_states, weight[: me.vocab_size].t()).gather(1, cand)
    else:
        scores, cand = me._select_and_score(hidden_states, weight)
    if suppress is not None:
        # A vocabulary mask rather than torch.isin, whose sorting path can sync the
        # host (not allowed in a captured draft round).
        banned = torch.zeros(me.vocab_size, dtype=torch.bool, device=cand.device)
        banned.index_fill_(0, suppress, True)
        scores = scores.masked_fill(banned[cand], float("-inf"))
    best = scores.max(dim=-1, keepdim=True).values
    # Full-vocabulary argmax returns the lowest token id among equal maxima.
    picked = torch.where(scores == best, cand, me.vocab_size).min(dim=-1).values
    # A row with a NaN score matches no maximum and would yield the out-of-range
    # sentinel. Padded CUDA-graph rows carry stale hidden states, and the next draft
    # step embeds their tokens (an out-of-range id is a device-side assert), so
    # every row gets a real token id; real rows are finite and keep their pick.
    return torch.where(picked < me.vocab_size, picked, cand[:, 0])
