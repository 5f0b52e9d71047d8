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
* ``fused``: Triton kernels that select each row's top centroids in one launch, then
  read each selected centroid's embedding rows once and keep only the best (score,
  token id), so neither the gathered rows nor a score tensor is ever written
  (``centroid_kernel.py``);
* ``auto`` (the default): ``fused`` where its kernels run (Triton present, power-of-two
  clusters, no failed launch); otherwise ``dense`` from ``AUTO_DENSE_MIN_ROWS`` rows and
  upstream's head below (see ``head_for_rows``).

Measured on the H200 (BENCHMARKS.md, E4B shape). Each head alone under a CUDA graph
(``bench.micro.heads_gpu``), us per call at 1 / 8 / 32 / 128 rows: upstream 43.5 /
71.8 / 165.7 / 521.4, dense 89.5 / 106.2 / 123.5 / 150.4, fused 25.2 / 26.5 / 52.1 / 90.0
(15.3 / 17.9 / 32.3 / 71.9 with today's launch shape and top-k kernel), all
picking upstream's token.
Whole decode steps (median of 5): the draft round with ``fused`` is 0.51 / 0.54 /
0.70 / 0.91 ms at c=1 / 8 / 32 / 128, against 0.69 / 0.80 / 1.17 / 2.39 for upstream
``mtp``.
"""

from __future__ import annotations

from typing import Any

import torch

from vllm_frozen_kv_mtp.kernels import centroid_kernel
from vllm_frozen_kv_mtp.kernels.centroid_kernel import (
    fused_head_supported,
    fused_top_centroids,
    fused_top_tokens,
)

#: Where "fused" cannot run, "auto" scores with "dense" from this many rows up and
#: leaves smaller batches to upstream's head. On the H200 (E4B) the dense
#: head was slower than upstream's at <=8 rows (it reads the whole table) and faster
#: from 32 rows (124 vs 166 us per call; 151 vs 522 at 128 rows).
AUTO_DENSE_MIN_ROWS = 32


def head_for_rows(head: str, rows: int, fused_ok: bool = False) -> str:
    """The head that scores a batch of ``rows`` draft rows; ``fused_ok`` says whether
    the fused kernels can run (``fused_head_supported``). ``rows`` is a Python int (a
    CUDA-graph bucket size), so the choice is fixed per captured graph."""
    if head != "auto":
        return head
    if fused_ok:  # "fused": the fastest head at every row count measured (1-128)
        return "fused"
    return "dense" if rows >= AUTO_DENSE_MIN_ROWS else "upstream"


def top_centroids(
    masked_embedding: Any, hidden_states: torch.Tensor, ordered: bool = True
) -> torch.Tensor:
    """``[T, top_k]`` each row's top centroids, in upstream's order, or in any order with
    ``ordered=False``. On CUDA ``torch.topk`` selects the same set either way and
    ``sorted=True`` only adds a sort kernel per step."""
    me = masked_embedding
    scores = me.centroids(hidden_states)
    return torch.topk(scores, k=me.centroid_intermediate_top_k, dim=-1, sorted=ordered)[1]


def fused_head_centroids(masked_embedding: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """Each row's top centroids for the fused head, in any order (its pick does not
    depend on it): one Triton launch, or ``torch.topk`` with ``CENTROID_TOPK="torch"`` or
    if that launch failed."""
    me = masked_embedding
    if centroid_kernel.CENTROID_TOPK == "triton":
        top = fused_top_centroids(me.centroids(hidden_states), me.centroid_intermediate_top_k)
        if top is not None:
            return top
    return top_centroids(me, hidden_states, ordered=not hidden_states.is_cuda)


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
    batched dot), "dense" (one GEMM over the whole table) or "fused" (three Triton
    launches, see centroid_kernel.py; "dense" where Triton or its layout is missing)."""
    me = model.masked_embedding
    weight = model._get_full_lm_head_weight()
    suppress = getattr(model, "_suppress_idx", None)
    if head == "fused" and fused_head_supported(me.vocab_size_per_centroid):
        picked = fused_top_tokens(
            hidden_states,
            weight,
            me.token_ordering,
            fused_head_centroids(me, hidden_states),
            me.vocab_size_per_centroid,
            suppress,
        )
        if picked is not None:
            return picked
    if head in ("dense", "fused"):  # fused kernels without Triton or layout
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
