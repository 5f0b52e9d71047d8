"""``FrozenSeedProposer``: frozen-KV drafting on vLLM's V1 runner (also the CPU runner),
whatever the vLLM release.

The adapter's ``FrozenKVMTPProposer`` (``adapters/vllm_0_32/proposer.py``) puts this mixin
ahead of vLLM's ``Gemma4Proposer``, which keeps everything upstream already does right:
the Q-only ``Gemma4MTP`` model, weight loading, embedding sharing, KV sharing through
``kv_sharing_target_layer_name``, per-group block tables, the recurrent draft loop and
vLLM's ``RejectionSampler``. What changes:

* the first draft pass runs on one seed row per request (upstream runs it over
  every scheduled target token: the whole prompt on prefill, k+1 rows on decode);
* attention metadata is built once per round and reused by all k steps;
* the drafter is checked at load to read, and never own or write, target KV;
* centroid heads work off CUDA (upstream captures CUDA graphs unconditionally);
* drafter layers read an FP8 KV cache with the target layers' scales (upstream V1
  leaves them at 1.0, and acceptance collapses: vllm-project/vllm#41789);
* with ``draft_sample_method="probabilistic"``, drafts are sampled from the
  assistant's distribution after the request's temperature, top-k and top-p (vLLM's
  draft sampler applies the temperature only); vLLM hands that q to the rejection
  sampler. A centroid head's q is upstream's: 0 outside its candidate tokens.

Here: the plugin's state, its load-time checks and the helpers of a round. The
overrides that depend on upstream's private methods (the round itself, the metadata
reuse, the draft samplers, the centroid graphs) are the adapter's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.drafters.draft_q import mask_outside_top_k_top_p
from vllm_frozen_kv_mtp.drafters.kv_guard import target_kv_checksum
from vllm_frozen_kv_mtp.drafters.kv_readonly import (
    check_drafter_owns_no_kv,
    check_readonly_wiring,
    copy_target_kv_scales,
)
from vllm_frozen_kv_mtp.drafters.seed_metadata import PADDING_SLOT_ID
from vllm_frozen_kv_mtp.drafters.start import start_drafter
from vllm_frozen_kv_mtp.options import VLLM_SPLIT_KV_THRESHOLD as VLLM_DEFAULT
from vllm_frozen_kv_mtp.patches.target_softcap import mark_target_logits

if TYPE_CHECKING:
    # vLLM's Gemma4Proposer follows this mixin in the concrete class; mypy does not read
    # vLLM, so the parent is Any there as it is in the concrete class.
    _Gemma4Proposer = Any
else:
    _Gemma4Proposer = object

random_sample = active.proposer_helpers.random_sample

logger = logging.getLogger("vllm.frozen_kv_mtp")


def truncate_like_target(logits: torch.Tensor, sampling_metadata: Any) -> None:
    """Mask, in place, the draft logits that the request's top-k / top-p drop after its
    temperature, as vLLM's sampler truncates the target's (see draft_q.py)."""
    mask_outside_top_k_top_p(
        logits, sampling_metadata.temperature, sampling_metadata.top_k, sampling_metadata.top_p
    )


def redraw_seeded_rows(
    token_ids: torch.Tensor, probs: torch.Tensor, generators: dict[int, torch.Generator]
) -> None:
    """Redraw, in place, the drafts of seeded requests with their own generators: vLLM's
    draft sampler uses the global RNG, which would make a seeded request's output
    depend on the rest of its batch."""
    for row, generator in generators.items():
        token_ids[row] = random_sample(probs[row : row + 1].clone(), {0: generator})[0]


def draft_probs_bytes(k: int, vocab_size: int) -> int:
    """Bytes of one request's draft probabilities: k float32 rows over the vocabulary."""
    return k * vocab_size * 4


class FrozenSeedProposer(_Gemma4Proposer):
    """Gemma 4 MTP drafting from one seed row per request over read-only target KV."""

    def __init__(self, vllm_config: Any, device: torch.device, runner: Any = None) -> None:
        if vllm_config.speculative_config.rejection_sample_method == "block":
            from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

            # vLLM's V1 RejectionSampler has no block verification and would verify
            # with "standard" without a word; config time catches CPU and an explicit
            # VLLM_USE_V2_MODEL_RUNNER=0, this catches vLLM's own fallback to V1.
            raise FrozenKVMTPConfigError(
                "rejection_sample_method='block' needs Model Runner V2, but this engine "
                "runs the V1 runner (vLLM chose it; its start-up log says why).",
                "remove what keeps Model Runner V2 off, or drop rejection_sample_method.",
            )
        super().__init__(vllm_config, device, runner)
        options, self.frozen_stats = start_drafter(vllm_config)
        self.frozen_options = options
        self._no_write_slots = torch.full(
            (self.max_batch_size,), PADDING_SLOT_ID, dtype=torch.int64, device=device
        )
        self._round_attn_metadata: tuple[list[object], dict[str, object]] | None = None
        logger.info("frozen_kv_mtp: V1 proposer active (one seed row per request)")
        if self._enable_probabilistic_draft_probs:
            vocab = vllm_config.model_config.get_vocab_size()
            per_req = draft_probs_bytes(self.num_speculative_tokens, vocab)
            logger.info(
                "frozen_kv_mtp: sampled drafts for batches with a sampled request "
                "(draft_sample_method='probabilistic'); all-greedy batches draft greedily. "
                "The draft probabilities take k x vocab x 4 B = %.2f MiB per request, "
                "%.1f MiB at max_num_seqs=%d, in steps with a sampled request",
                per_req / 2**20,
                per_req * self.max_batch_size / 2**20,
                self.max_batch_size,
            )
        # Options that tune Model Runner V2 only: (name, set by the user, what V1 does)
        v2_only = (
            ("centroid_head", options.centroid_head not in ("auto", "upstream"),
             "already drafts with a sparse centroid argmax"),
            ("sliding_split_kv_max_rows", options.sliding_split_kv_max_rows != VLLM_DEFAULT,
             "keeps vLLM's split-KV choice"),
            ("draft_attention", options.draft_attention != "vllm",
             "keeps vLLM's attention kernels"),
            ("dense_head", options.dense_head != "upstream",
             "keeps vLLM's logits and argmax"),
        )  # fmt: skip
        for name, is_set, v1_does in v2_only:
            if is_set:
                logger.warning(
                    "frozen_kv_mtp: %s=%r applies to Model Runner V2 only; the V1 runner %s",
                    name,
                    getattr(options, name),
                    v1_does,
                )

    # ---- load-time guarantees -------------------------------------------------

    def load_model(self, target_model: Any) -> None:
        super().load_model(target_model)
        check_readonly_wiring(self.vllm_config, self._draft_attn_layer_names)
        if self.frozen_options.target_softcap != "vllm":
            mark_target_logits(target_model, self.frozen_options.target_softcap)
        copy_target_kv_scales(self.vllm_config, self._draft_attn_layer_names)

    def initialize_attn_backend(
        self, kv_cache_config: Any, kernel_block_sizes: list[int] | None = None
    ) -> None:
        super().initialize_attn_backend(kv_cache_config, kernel_block_sizes)
        check_drafter_owns_no_kv(kv_cache_config, self._draft_attn_layer_names)

    def _kv_checksum(self) -> str:
        return target_kv_checksum(self.vllm_config)
