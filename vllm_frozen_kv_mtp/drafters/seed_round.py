"""``FrozenRound``: frozen-KV drafting on Model Runner V2 (the GPU default), whatever the
vLLM release.

The adapter's ``FrozenKVMTPSpeculator`` (``adapters/vllm_0_32/speculator.py``) puts this
mixin ahead of vLLM's ``Gemma4Speculator``, which keeps model loading, KV sharing,
KV-scale copying (FP8), per-group block tables, attention backends and the rejection
sampler. What changes:

* no draft "prefill" over the target's tokens: the round starts from one seed row
  per request (target post-norm hidden at the last accepted position, bonus token);
* the seed step is step 0 of the uniform one-row decode loop, so attention
  metadata is refreshed once per round and the whole round (seed step, k-1
  recurrent steps, logits/top-k) is one CUDA-graph replay per batch-size bucket;
* no draft-prefill CUDA graphs are captured (they would never run).

Sampled drafts (``draft_sample_method="probabilistic"``) and block verification
(``rejection_sample_method="block"``) are vLLM's own: the parent Gumbel-samples each
step's draft at the request's temperature and caches its logits, which vLLM's rejection
sampler reads as q. The sampling key advances per step (``sample_src_positions``) even
though the attention position stays constant, so each step draws fresh noise.

vLLM decides sampled drafts per engine on this runner. Here the choice is made per
batch, as vLLM's V1 runner makes it: a batch whose requests are all greedy drafts
greedily (centroid or dense head, no draft logits) and hands the rejection sampler no
q, so greedy traffic pays nothing for an engine that also serves sampled requests.
Each family has its own whole-round graphs.

Here: the plugin's state, its load-time checks, the round families, the seed rows and
the greedy heads. The round itself (``propose`` and the decode loops, which copy
upstream's control flow), the graph capture and the graph managers are the adapter's:
they name upstream's private methods and change with each release.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vllm_frozen_kv_mtp.drafters.heads import build_dense_head, head_for_rows, top_tokens
from vllm_frozen_kv_mtp.drafters.kv_guard import target_kv_checksum
from vllm_frozen_kv_mtp.drafters.kv_readonly import (
    attention_layers,
    check_drafter_owns_no_kv,
    check_readonly_wiring,
)
from vllm_frozen_kv_mtp.drafters.seed_rows import SeedBuffers, SeedInputs, load_seed_rows
from vllm_frozen_kv_mtp.drafters.start import start_drafter
from vllm_frozen_kv_mtp.kernels.centroid_kernel import fused_head_supported
from vllm_frozen_kv_mtp.kernels.dense_head import DenseHead
from vllm_frozen_kv_mtp.patches.sliding_split_kv import set_sliding_split_kv_max_rows
from vllm_frozen_kv_mtp.patches.target_softcap import mark_target_logits

if TYPE_CHECKING:
    # vLLM's Gemma4Speculator follows this mixin in the concrete class; mypy does not
    # read vLLM, so the parent is Any there as it is in the concrete class.
    _Gemma4Speculator = Any
else:
    _Gemma4Speculator = object

logger = logging.getLogger("vllm.frozen_kv_mtp")
#: (option, head) pairs already logged: say once which head "auto" resolved to
_LOGGED_HEADS: set[tuple[str, str]] = set()


class FrozenRound(_Gemma4Speculator):
    """Gemma 4 MTP drafting from one seed row per request, whole round in one graph."""

    #: option dense_head's prepared head (load_model), None for upstream's
    frozen_dense_head: DenseHead | None = None
    #: the model runner's per-request sampling states, read on the host to pick each
    #: batch's drafts: handed over at load by the patch on ``GPUModelRunner.load_model``
    #: (vLLM 0.32/0.33), or before the first round by ``prepare_propose`` (0.34)
    frozen_sampling_states: Any = None
    #: whole-round graphs of the round family running now (vLLM's attribute; swapped
    #: for ``greedy_cudagraph_manager`` during a greedy round)
    decode_cudagraph_manager: Any
    #: whole-round graphs of greedy rounds, in an engine that also samples drafts
    greedy_cudagraph_manager: Any = None
    #: vLLM's draft-logits buffer (``draft_sample_method="probabilistic"``), else None
    _draft_logits_buffer: torch.Tensor | None = None
    #: the latest round drafted greedily: its verification must see no q
    _greedy_round: bool = False

    @property  # type: ignore[override]
    def draft_logits(self) -> torch.Tensor | None:
        """vLLM's draft logits, or None after a greedy round: the model runner passes
        this to the rejection sampler, which then checks the drafts as greedy ones.
        ``_generate_draft`` passes it to ``sample_draft``, which then drafts greedily."""
        return None if self._greedy_round else self._draft_logits_buffer

    @draft_logits.setter
    def draft_logits(self, value: torch.Tensor | None) -> None:
        self._draft_logits_buffer = value

    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        super().__init__(vllm_config, device)
        options, self.frozen_stats = start_drafter(vllm_config)
        self.frozen_options = options
        logger.info("frozen_kv_mtp: Model Runner V2 speculator active (one seed row per request)")
        buffer = self._draft_logits_buffer
        if buffer is not None:  # vLLM 0.32/0.33 allocate it here; 0.34 in load_model
            self._log_sampled_drafts(buffer)

    def _log_sampled_drafts(self, buffer: torch.Tensor) -> None:
        """Say once, where vLLM allocates the draft logits, what sampled drafts cost."""
        options = self.frozen_options
        # vLLM's probabilistic path: each step's logits are cached (pre-temperature)
        # for the rejection sampler's q, and drafts are Gumbel-sampled from them.
        logger.info(
            "frozen_kv_mtp: sampled drafts for batches with a sampled request "
            "(draft_sample_method='probabilistic'); all-greedy batches draft greedily. "
            "The draft logits take max_num_seqs x k x vocab = %s %s, %.1f MiB, "
            "allocated at start-up; sampled rounds compute full-vocabulary logits",
            " x ".join(str(n) for n in buffer.shape),
            str(buffer.dtype).removeprefix("torch."),
            buffer.numel() * buffer.element_size() / 2**20,
        )
        for name, is_set in (
            ("centroid_head", options.centroid_head not in ("auto", "upstream")),
            ("dense_head", options.dense_head != "upstream"),
        ):
            if is_set:
                logger.info(
                    "frozen_kv_mtp: %s=%r scores greedy rounds only: sampled drafts "
                    "come from vLLM's full-vocabulary logits",
                    name,
                    getattr(options, name),
                )

    # ---- load-time guarantees -------------------------------------------------

    def load_model(self, target_model: Any) -> None:
        super().load_model(target_model)
        check_readonly_wiring(self.vllm_config, self.draft_attn_layer_names)
        if self.frozen_options.target_softcap != "vllm":
            mark_target_logits(target_model, self.frozen_options.target_softcap)
        if self.frozen_options.draft_attention == "split":
            self._install_split_decode_attention()
        self.frozen_dense_head = build_dense_head(
            self.model,
            self.frozen_options.dense_head,
            self.vllm_config.parallel_config.tensor_parallel_size,
        )

    def _install_split_decode_attention(self) -> None:
        from vllm_frozen_kv_mtp.patches.split_decode import install_split_decode_attention

        layers = attention_layers(self.vllm_config)
        names = set(self.draft_attn_layer_names)
        switched = install_split_decode_attention(
            {n: layer for n, layer in layers.items() if n in names},
            self.max_num_reqs,
            self.device,
        )
        if len(switched) < len(names):
            logger.warning(
                "frozen_kv_mtp: draft_attention='split' needs TRITON_ATTN; drafter layers %s "
                "keep their backend",
                sorted(names - set(switched)),
            )

    def set_attn(self, model_state: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> None:
        super().set_attn(model_state, kv_cache_config, *args, **kwargs)
        check_drafter_owns_no_kv(kv_cache_config, self.draft_attn_layer_names)
        # Before any metadata is built or graph captured: both read the threshold.
        set_sliding_split_kv_max_rows(
            self.attn_groups, self.frozen_options.sliding_split_kv_max_rows
        )

    # ---- round families: greedy or sampled drafts, per batch --------------------

    @contextmanager
    def _draft_family(self, greedy: bool) -> Iterator[None]:
        """Run or capture a greedy or a sampled round; the choice outlives the round,
        since the next step's verification reads ``draft_logits``."""
        sampled = self.decode_cudagraph_manager
        if greedy and self.greedy_cudagraph_manager is not None:
            self.decode_cudagraph_manager = self.greedy_cudagraph_manager
        self._greedy_round = greedy
        try:
            yield
        finally:
            self.decode_cudagraph_manager = sampled

    def _drafts_greedily(self, input_batch: Any) -> bool:
        """A batch drafts greedily unless one of its requests samples (vLLM's V1 rule,
        ``all_greedy``). Host arrays only: no device sync."""
        if self._draft_logits_buffer is None:
            return True
        states = self.frozen_sampling_states
        if states is None:
            return False
        rows = input_batch.idx_mapping_np[: input_batch.num_reqs]
        return not bool(np.any(states.temperature.np[rows] != 0.0))

    def attach_sampling_states(self, sampling_states: Any) -> None:
        self.frozen_sampling_states = sampling_states

    # ---- one draft round --------------------------------------------------------

    def _load_seed(
        self,
        input_batch: Any,
        hidden_states: torch.Tensor,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        last_sampled: torch.Tensor,
        next_prefill_tokens: torch.Tensor,
    ) -> None:
        """Write one seed row per request into the decode buffers (one device launch)."""
        buffers = self.input_buffers
        load_seed_rows(
            SeedInputs(
                num_reqs=input_batch.num_reqs,
                query_start_loc=input_batch.query_start_loc,
                positions=input_batch.positions,
                seq_lens=input_batch.seq_lens,
                idx_mapping=input_batch.idx_mapping,
                hidden_states=hidden_states,
                num_sampled=num_sampled,
                num_rejected=num_rejected,
                # Both are indexed by request-state slot; their leading storage row is
                # the one vLLM's own prepare kernel reads ([max_reqs, 1], [lookahead, max_reqs]).
                last_sampled=last_sampled,
                next_prefill_tokens=next_prefill_tokens,
            ),
            SeedBuffers(
                input_ids=buffers.input_ids,
                positions=buffers.positions,
                seq_lens=buffers.seq_lens,
                query_start_loc=buffers.query_start_loc,
                hidden_states=self.hidden_states,
                sample_src_positions=self.sample_src_positions,
                draft_step=self.current_draft_step,
            ),
        )

    # ---- draft tokens from a centroid head -------------------------------------

    def _frozen_greedy_draft(
        self, hidden_states: torch.Tensor, draft_logits: torch.Tensor | None
    ) -> torch.Tensor | None:
        """A greedy round's draft tokens without the full-vocabulary logits tensor
        upstream builds just to argmax it: from a centroid head (option centroid_head)
        or a dense one (option dense_head). None: upstream's ``sample_draft`` drafts."""
        me = getattr(self.model, "masked_embedding", None)
        head = head_for_rows(
            self.frozen_options.centroid_head,
            hidden_states.shape[0],
            fused_ok=me is not None and fused_head_supported(me.vocab_size_per_centroid),
        )
        if me is not None and (self.frozen_options.centroid_head, head) not in _LOGGED_HEADS:
            _LOGGED_HEADS.add((self.frozen_options.centroid_head, head))
            logger.info(
                "frozen_kv_mtp: centroid_head=%r scores greedy drafts with the %r head",
                self.frozen_options.centroid_head,
                head,
            )
        if (
            head != "upstream"
            and draft_logits is None
            and self.acceptance_estimator is None
            and me is not None
        ):
            return top_tokens(self.model, hidden_states, head)
        if (
            self.frozen_dense_head is not None
            and draft_logits is None
            and self.acceptance_estimator is None
        ):
            tokens = self.frozen_dense_head.top_tokens(hidden_states)
            if tokens is not None:
                return tokens
        return None

    @staticmethod
    def _padding_rows_draft_token_zero(
        tokens: torch.Tensor, idx_mapping: torch.Tensor
    ) -> torch.Tensor:
        """Draft tokens with every graph-padding row (``idx_mapping`` -1) set to token 0.

        The whole round runs in one graph over the padded batch, so a padding row's draft
        is the next step's input id. vLLM 0.32's Triton split-KV attention writes NaN into
        padding rows (0.33 skips them), and the Triton argmax of Gumbel sampling returns
        the vocabulary size for an all-NaN row: the next step's embedding lookup would
        then index out of bounds, a device assert that ends the engine. Real rows are
        untouched; one elementwise kernel a step."""
        return tokens.masked_fill(idx_mapping[: tokens.shape[0]] < 0, 0)

    def _kv_checksum(self) -> str:
        return target_kv_checksum(self.vllm_config)
