"""Greedy draft tokens without a full-vocabulary logits tensor (Model Runner V2).

Options ``centroid_head`` (E2B/E4B assistants, whose head is centroid-masked) and
``dense_head`` (31B/26B-A4B, a dense head): the speculator's ``sample_draft`` asks here
for the token vLLM's greedy draft would pick, and falls back to vLLM's own head where
none applies. The head choice happens per batch size, so it is fixed per CUDA graph.
Per-call and per-round timings: docs/tuning.md (`centroid_head`, `dense_head`).

Centroid heads. Upstream's ``Gemma4MTPMaskedEmbedder`` picks each row's top centroids,
copies the candidate tokens' embedding rows (``[T, top_k * vocab/centroids, D]``) and
scores them with a batched dot product; Model Runner V2 then scatters those scores into
a full-vocabulary tensor and takes its argmax every draft step, a large share of a draft
round. The heads here pick V2's token from the same candidates, without that tensor:

* ``sparse``: upstream's row gather and batched dot, then an argmax over the
  candidates only;
* ``dense``: one GEMM of the rows against the whole embedding table, then a gather of
  the candidates' scores. It reads the table once per step whatever the batch size,
  instead of copying the candidates' rows, so it pays off at larger batches. The dot
  products are the same; only the summation order differs, which can flip a near-tie.
  Drafts are verified, so output is lossless either way;
* ``fused``: Triton kernels that select each row's top centroids in one launch, then
  read each selected centroid's embedding rows once and keep only the best (score,
  token id), so neither the gathered rows nor a score tensor is ever written
  (``kernels/centroid_kernel.py``);
* ``auto`` (the default): ``fused`` where its kernels run (Triton present, power-of-two
  clusters, no failed launch); otherwise ``dense`` from ``AUTO_DENSE_MIN_ROWS`` rows and
  upstream's head below (see ``head_for_rows``).

Dense heads: ``build_dense_head`` prepares ``kernels/dense_head.py``'s two-launch argmax
from the loaded assistant (``fused``: its weights as loaded; ``fp8``: an FP8 copy).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from vllm_frozen_kv_mtp.kernels import centroid_kernel
from vllm_frozen_kv_mtp.kernels.centroid_kernel import (
    fused_head_supported,
    fused_top_centroids,
    fused_top_tokens,
)
from vllm_frozen_kv_mtp.kernels.dense_head import FP8_MAX_ROWS, DenseHead, quantize_rows_fp8

logger = logging.getLogger("vllm.frozen_kv_mtp")

#: Where "fused" cannot run, "auto" scores with "dense" from this many rows up and
#: leaves smaller batches to upstream's head: the dense head reads the whole table, so
#: it loses at a few rows and wins from this many (docs/tuning.md, `centroid_head`).
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


def build_dense_head(model: Any, mode: str, tp_size: int = 1) -> DenseHead | None:
    """The head ``mode`` asks for, prepared from a loaded ``Gemma4MTP``; None for
    "upstream", for centroid assistants (option ``centroid_head`` serves those) and for
    vocabulary-parallel heads (TP > 1), which keep upstream's."""
    if mode == "upstream" or getattr(model, "masked_embedding", None) is not None:
        return None
    if tp_size > 1:
        logger.info(
            "frozen_kv_mtp: dense_head=%r runs on one GPU per drafter; with tensor "
            "parallelism %d the head stays upstream's",
            mode,
            tp_size,
        )
        return None
    weight = table = model.lm_head.weight
    vocab = int(getattr(model.logits_processor, "org_vocab_size", weight.shape[0]))
    scale = None
    if mode == "fp8":
        weight, scale = quantize_rows_fp8(weight.detach())
    suppress = getattr(model, "_suppress_idx", None)
    logger.info(
        "frozen_kv_mtp: dense_head=%r drafts from a %d x %d head in two launches%s",
        mode,
        vocab,
        weight.shape[1],
        f" (FP8 E4M3 weights, one scale per row, for batches of up to {FP8_MAX_ROWS} rows)"
        if scale is not None
        else "",
    )
    return DenseHead(
        weight=weight,
        scale=scale,
        vocab=vocab,
        suppress=suppress,
        table=table if scale is not None else None,
    )
