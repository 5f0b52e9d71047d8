"""The vLLM surface the plugin depends on, checked statically against a vLLM source tree.

Every check parses sources with ``ast`` (tools/vllm_source.py, tools/plugin_surface.py):
nothing is imported, so modules that need CUDA are read too, and so is a tree that is not
installed: ``FROZEN_KV_MTP_VLLM_SRC=/path/holding/vllm`` (``make check-vllm VLLM=0.33.0``
extracts a wheel there); unset, the installed vllm is read.

Derived from the plugin's sources (new code is covered without editing this file): its
``vllm`` imports, the patch registry's targets, the vLLM classes it subclasses, the methods
it overrides (upstream's parameters must still bind), the ``self.`` attributes it reads
from those parents, and its calls into parent methods and vLLM functions. Listed here by
hand: attributes and methods of vLLM objects it is handed (batches, configs, layers, the
model), and the upstream methods whose control flow it mirrors, pinned by hash.

The tables are per adapter (:data:`SURFACES`): a tree is checked against the adapter
that serves its release (``tools.plugin_surface.adapter_for_tree``; the newest for a tree
of another release), and only the plugin modules that adapter runs are read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tools.plugin_surface import (
    PACKAGE,
    PluginClass,
    adapter_for_tree,
    methods,
    override_problems,
    own_attrs,
    parent_calls,
    parent_method,
    plugin_classes,
    plugin_modules,
    self_reads,
    signature_of,
    vllm_imports,
)
from tools.plugin_surface import function_calls as vllm_function_calls
from tools.plugin_surface import import_problems as vllm_import_problems
from tools.vllm_source import ClassInfo, VllmSource, signature, source_sha256


@dataclass
class Surface:
    """What one adapter takes from the vLLM releases it serves."""

    #: releases reviewed for this adapter
    supported: tuple[str, ...]
    #: the Model Runner V2 speculator class, and the V1 proposer class (None: no V1 runner)
    v2: str
    v1: str | None
    mirrored: dict[tuple[str, str], tuple[str, dict[str, str]]] = field(default_factory=dict)
    written_for_parent: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reviewed_overrides: dict[tuple[str, str], str] = field(default_factory=dict)
    object_attrs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    object_calls: dict[tuple[str, str], tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    module_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    patched_signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)


SUPPORTED = ("0.32.0", "0.33.0")

V2 = "vllm_frozen_kv_mtp.adapters.vllm_0_32.speculator.FrozenKVMTPSpeculator"
V1: str | None = "vllm_frozen_kv_mtp.adapters.vllm_0_32.proposer.FrozenKVMTPProposer"

#: upstream code whose control flow plugin code copies or relies on, pinned per vLLM
#: version: (owner found from, method) -> (what to review, {version: sha256})
MIRRORED: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}

#: attributes the plugin writes for the parent to read (an upstream rename leaves them dead)
WRITTEN_FOR_PARENT = {
    V2: ("draft_max_seq_len",),
    "vllm_frozen_kv_mtp.adapters.vllm_0_32.proposer.FrozenKVMTPProposer": ("_centroids_sizes",),
}

#: override gaps reviewed and accepted: (plugin method, problem text) -> why it is safe
REVIEWED_OVERRIDES: dict[tuple[str, str], str] = {}

#: attributes and methods of vLLM objects the plugin is handed (not ``self``)
OBJECT_ATTRS: dict[str, tuple[str, ...]] = {
    # V2 speculator: the target batch, the drafter's buffers, DP agreement, graph dispatch
    "vllm.v1.worker.gpu.input_batch.InputBatch": (
        "num_reqs", "query_start_loc", "positions", "seq_lens", "idx_mapping",
        "idx_mapping_np", "seq_lens_cpu_upper_bound", "num_tokens_after_padding", "num_tokens",
    ),
    # Per-batch draft family: the runner's sampler states (patch 7; 0.34: handed to
    # prepare_propose), host temperatures
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner": ("load_model", "speculator", "sampler"),
    "vllm.v1.worker.gpu.sample.sampler.Sampler": ("sampling_states",),
    "vllm.v1.worker.gpu.sample.states.SamplingStates": ("temperature",),
    "vllm.v1.worker.gpu.buffer_utils.UvaBackedTensor": ("np",),
    "vllm.v1.worker.gpu.spec_decode.speculator.DraftModelSpeculator": ("draft_logits",),
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"
    ".TargetDependentARSpeculator": ("decode_cudagraph_manager", "init_cudagraph_manager"),
    "vllm.v1.worker.gpu.input_batch.InputBuffers": (
        "input_ids", "positions", "seq_lens", "query_start_loc",
    ),
    "vllm.v1.worker.gpu.dp_utils.DPSyncState": ("num_reqs", "num_tokens_across_dp", "eager"),
    "vllm.v1.worker.gpu.cudagraph_utils.BatchExecutionDescriptor": (
        "num_tokens", "num_reqs", "cg_mode", "uniform_token_count", "num_active_loras",
        "num_ubatches",
    ),
    "vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager": (
        "_init_candidates", "_candidates", "_capture_descs", "vllm_config", "dispatch",
        "cudagraph_mode",
    ),
    "vllm.config.compilation.CUDAGraphMode": ("FULL", "NONE"),
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils"
    ".SpeculatorCudaGraphManager": ("capture", "run_fullgraph", "specialize_spec_tokens"),
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils"
    ".SpeculatorBatchDescriptor": ("num_speculative_tokens",),
    "vllm.v1.worker.gpu.block_table.BlockTables": ("compute_slot_mappings",),
    "vllm.v1.worker.utils.AttentionGroup": ("kv_cache_spec", "metadata_builders", "layer_names"),
    "vllm.v1.kv_cache_interface.SlidingWindowSpec": ("sliding_window",),
    "vllm.v1.kv_cache_interface.KVCacheConfig": ("kv_cache_tensors",),
    "vllm.v1.kv_cache_interface.KVCacheTensor": ("layers",),
    "vllm.config.speculative.SpeculativeConfig": (
        "uses_dynamic_speculative_decoding", "use_gemma4_mtp", "method", "num_speculative_tokens",
    ),
    "vllm.engine.arg_utils.EngineArgs": (
        "create_speculative_config", "speculative_config", "additional_config", "scheduler_cls",
    ),
    # V1 proposer: the target's attention metadata, rewritten by dataclasses.replace
    "vllm.v1.attention.backend.CommonAttentionMetadata": (
        "batch_size", "query_start_loc", "query_start_loc_cpu", "seq_lens", "num_reqs",
        "num_actual_tokens", "max_query_len", "slot_mapping", "causal",
        "logits_indices_padded", "num_logits_indices", "max_logits_per_req", "positions",
        "is_prefilling", "req_idx", "_num_computed_tokens_cache",
        "_token_to_req_indices_cache",
    ),
    # Load-time checks and options: attention layers, builders, impls, logits processors
    "vllm.model_executor.layers.attention.attention.Attention": (
        "impl", "kv_sharing_target_layer_name", "num_kv_heads", "head_size", "_k_scale",
        "_v_scale", "_q_scale",
    ),
    "vllm.v1.attention.backends.triton_attn.TritonAttentionMetadataBuilder": (
        "seq_threshold_3D",
    ),
    "vllm.v1.attention.backends.triton_attn.TritonAttentionImpl": (
        "forward", "num_heads", "num_kv_heads", "head_size", "sliding_window",
        "kv_cache_dtype", "fp8_dtype", "alibi_slopes", "sinks", "attn_type",
        "_is_per_token_head_quant", "chunk_lookback", "use_td",
    ),
    "vllm.model_executor.layers.logits_processor.LogitsProcessor": (
        "forward", "_get_logits", "soft_cap", "scale", "logits_as_input", "org_vocab_size",
    ),
    # The Gemma 4 assistant: draft heads (centroid and dense)
    "vllm.model_executor.models.gemma4_mtp.Gemma4MTP": (
        "masked_embedding", "get_top_tokens", "lm_head", "logits_processor",
        "_get_full_lm_head_weight", "_suppress_idx",
    ),
    "vllm.model_executor.models.gemma4_mtp.Gemma4MTPMaskedEmbedder": (
        "centroids", "centroid_intermediate_top_k", "token_ordering", "num_centroids",
        "vocab_size_per_centroid", "vocab_size", "_select_and_score",
    ),
    # The front end's steps-per-k metric: each step's stats, handed to stat loggers
    "vllm.v1.metrics.stats.SchedulerStats": ("spec_decoding_stats",),
    "vllm.v1.metrics.stats.IterationStats": ("num_generation_tokens", "num_prompt_tokens"),
    "vllm.v1.spec_decode.metrics.SpecDecodingStats": ("num_drafts", "num_draft_tokens"),
    "vllm.config.model.ModelConfig": ("served_model_name",),
}  # fmt: skip

#: calls on vLLM objects the plugin is handed: (class, method) -> (positional count,
#: keywords) as the plugin passes them
OBJECT_CALLS: dict[tuple[str, str], tuple[int, tuple[str, ...]]] = {
    (
        "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils"
        ".SpeculatorCudaGraphManager",
        "capture",
    ): (6, ("progress_bar_desc", "specialize_spec_tokens")),
    (
        "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils"
        ".SpeculatorCudaGraphManager",
        "specialize_spec_tokens",
    ): (2, ()),
    ("vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager", "run_fullgraph"): (1, ()),
    ("vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager", "__init__"): (
        3,
        ("decode_query_len",),
    ),
    ("vllm.v1.worker.gpu.block_table.BlockTables", "compute_slot_mappings"): (4, ()),
    ("vllm.v1.attention.backend.CommonAttentionMetadata", "batch_size"): (0, ()),
    ("vllm.model_executor.layers.logits_processor.LogitsProcessor", "_get_logits"): (4, ()),
    ("vllm.engine.arg_utils.EngineArgs", "create_speculative_config"): (2, ()),
    ("vllm.model_executor.models.gemma4_mtp.Gemma4MTP", "get_top_tokens"): (1, ()),
    ("vllm.model_executor.models.gemma4_mtp.Gemma4MTPMaskedEmbedder", "_select_and_score"): (
        2,
        (),
    ),
}

#: module-level names the plugin reads through the module object (a patch body's
#: ``mod.X``, a lazily read env var): an import check does not see them
MODULE_NAMES: dict[str, tuple[str, ...]] = {
    # patches/graph_candidates.py swaps this name while _init_candidates runs
    "vllm.v1.worker.gpu.cudagraph_utils": (
        "CUDAGraphMode", "CudaGraphManager", "build_dynamic_sd_schedule_lookup",
    ),
    # _specialize_capture_descs reads the descriptor from the graph manager's module
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils": (
        "SpeculatorBatchDescriptor", "SpeculatorCudaGraphManager",
    ),
    # adapters/vllm_0_32/frontend.v1_runner_forced
    "vllm.envs": ("VLLM_USE_V2_MODEL_RUNNER",),
}  # fmt: skip

#: functions whose parameters a patch re-declares: their names must stay as upstream's
PATCHED_SIGNATURES = {
    "vllm.model_executor.layers.logits_processor.LogitsProcessor.forward": (
        "lm_head", "hidden_states", "embedding_bias", "skip_gather",
    ),
    "vllm.v1.sample.rejection_sampler.expand_batch_to_tokens": (
        "x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to",
    ),
    "vllm.engine.arg_utils.EngineArgs.create_speculative_config": (
        "target_model_config", "target_parallel_config",
    ),
}  # fmt: skip


def _mirror(
    owner: str,
    method: str,
    review: str,
    shas: dict[str, str],
    table: dict[tuple[str, str], tuple[str, dict[str, str]]] = MIRRORED,
) -> None:
    table[(owner, method)] = (review, shas)


_TDAR = "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator.TargetDependentARSpeculator"
_mirror(
    _TDAR, "propose",
    "FrozenKVMTPSpeculator.propose (adapters/vllm_0_32/speculator.py) copies its "
    "request-input copy, DP clamp and sync, graph dispatch and decode-step call",
    {
        "0.32.0": "584df111b4ab8769eda947b7be59dd23dc58b2b379c0e2d3b8e7bd3f71c81a0c",
        "0.33.0": "5dca6bf09ce3998cb6be3e626888ea55114578c49fe9aefe2e55dd06f0b15120",
    },
)  # fmt: skip
_mirror(
    _TDAR, "capture",
    "FrozenKVMTPSpeculator.capture copies its decode-graph capture (and skips the "
    "prefill graphs)",
    {
        "0.32.0": "3a88aea3cbeb204522dbf527d56b2b4f72bdd6d9b9aa286df132f339e53099c9",
        "0.33.0": "3a88aea3cbeb204522dbf527d56b2b4f72bdd6d9b9aa286df132f339e53099c9",
    },
)  # fmt: skip
_mirror(
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils"
    ".SpeculatorCudaGraphManager", "capture",
    "FrozenKVMTPSpeculator._specialize_capture_descs copies its specialize_spec_tokens "
    "block (one desc per k the engine may run, k = 1 kept) and writes _capture_descs",
    {
        "0.32.0": "df16bc9f86428eebe6e1e6dc590c32fe63445adfcb255445ed7c58c38c9149d7",
        "0.33.0": "df16bc9f86428eebe6e1e6dc590c32fe63445adfcb255445ed7c58c38c9149d7",
    },
)  # fmt: skip
_mirror(
    "vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager", "_init_candidates",
    "patches/graph_candidates.py relies on it: candidates keyed (token count, LoRA case), "
    "FULL descriptors ahead of PIECEWISE ones, _capture_descs by mode, and the module-level "
    "name build_dynamic_sd_schedule_lookup called once, its result read only as a set of k's",
    {
        "0.32.0": "b002dfdf6e851b003f0da75c0129dc0b5356363f7a5f75764966a9d901cd5153",
        "0.33.0": "b002dfdf6e851b003f0da75c0129dc0b5356363f7a5f75764966a9d901cd5153",
    },
)  # fmt: skip
_mirror(
    _TDAR, "_multi_step_decode",
    "FrozenKVMTPSpeculator._multi_step_decode copies it with the seed step as step 0",
    {
        "0.32.0": "1925c701d05ee3a3b8de5f9bfab09c51a9048ea849d635869a037fa66346cd5c",
        "0.33.0": "1925c701d05ee3a3b8de5f9bfab09c51a9048ea849d635869a037fa66346cd5c",
    },
)  # fmt: skip
_mirror(
    _TDAR, "_generate_fused_drafts",
    "FrozenKVMTPSpeculator._generate_fused_drafts copies it with the seed step as step 0",
    {
        "0.32.0": "eba8d3df150435e5eb99e63d4cc03ce155331d018228242580bb0e828576dcb1",
        "0.33.0": "eba8d3df150435e5eb99e63d4cc03ce155331d018228242580bb0e828576dcb1",
    },
)  # fmt: skip
_mirror(
    _TDAR, "_fused_multi_step_decode",
    "FrozenKVMTPSpeculator.propose calls it; it must still run _generate_fused_drafts",
    {
        "0.32.0": "073551f60dc3bd78b5a237486cf048187dc82ca1725a22c541b7b6028e4b448a",
        "0.33.0": "073551f60dc3bd78b5a237486cf048187dc82ca1725a22c541b7b6028e4b448a",
    },
)  # fmt: skip
_mirror(
    _TDAR, "_configure_decode_metadata_update",
    "FrozenKVMTPSpeculator._configure_decode_metadata_update skips it for "
    "DraftModelSpeculator's (keeps in-graph refresh at k=1)",
    {
        "0.32.0": "3fa4b10033e89e6e70f7bee88ea0c52e44dcd5cdca40e6850aef45ef62f40c68",
        "0.33.0": "3fa4b10033e89e6e70f7bee88ea0c52e44dcd5cdca40e6850aef45ef62f40c68",
    },
)  # fmt: skip
_mirror(
    "vllm.v1.spec_decode.gemma4.Gemma4Proposer", "propose",
    "FrozenKVMTPProposer.propose (adapters/vllm_0_32/proposer.py) hands it one seed row per "
    "request and relies on how it shifts ids, gathers rows and copies into its buffers",
    {
        "0.32.0": "7bab90c79213d17640a1dde65030e2f0db4aab51dac263d0ca275133c9c48ebd",
        "0.33.0": "7bab90c79213d17640a1dde65030e2f0db4aab51dac263d0ca275133c9c48ebd",
    },
)  # fmt: skip
_mirror(
    "vllm.model_executor.layers.logits_processor.LogitsProcessor", "forward",
    "patches/target_softcap.py re-implements its soft-cap branch over _get_logits",
    {
        "0.32.0": "3b73c195b5648832d907186240bf706f9eb64ab2156929231a1bfc6873641ba4",
        "0.33.0": "3b73c195b5648832d907186240bf706f9eb64ab2156929231a1bfc6873641ba4",
    },
)  # fmt: skip
_mirror(
    "vllm.v1.sample.rejection_sampler", "expand_batch_to_tokens",
    "patches/cpu_expand.py re-implements it with torch ops on CPU",
    {
        "0.32.0": "b4708fb306d4d9c5f887dd99c0cfc10faeefef6fd3c990083a6ce9d3fb6ea327",
        "0.33.0": "b4708fb306d4d9c5f887dd99c0cfc10faeefef6fd3c990083a6ce9d3fb6ea327",
    },
)  # fmt: skip


SURFACES: dict[str, Surface] = {
    "vllm_0_32": Surface(
        SUPPORTED,
        V2,
        V1,
        MIRRORED,
        WRITTEN_FOR_PARENT,
        REVIEWED_OVERRIDES,
        OBJECT_ATTRS,
        OBJECT_CALLS,
        MODULE_NAMES,
        PATCHED_SIGNATURES,
    )
}

# ---- vLLM 0.34 (adapters/vllm_0_34): no V1 runner; Model Runner V2's autoregressive base ----

_V2_034 = "vllm_frozen_kv_mtp.adapters.vllm_0_34.speculator.FrozenKVMTPSpeculator"
_AR = "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator.AutoRegressiveSpeculator"
_AR_GRAPHS = "vllm.v1.worker.gpu.spec_decode.autoregressive.cudagraph_utils"
_NOT_034 = (
    # patch 7 reads the runner's speculator and sampler; 0.34 hands the sampler to
    # prepare_propose (hook 2)
    "vllm.v1.worker.gpu.model_runner.GPUModelRunner",
    # the V1 proposer's attention metadata; the graph manager's 0.32/0.33 module
    "vllm.v1.attention.backend.CommonAttentionMetadata",
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils.SpeculatorCudaGraphManager",
    "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils.SpeculatorBatchDescriptor",
)
_SURFACE_034 = Surface(
    supported=("0.34.0",),
    v2=_V2_034,
    v1=None,
    written_for_parent={_V2_034: ("draft_max_seq_len",)},
    object_attrs={
        **{k: v for k, v in OBJECT_ATTRS.items() if k not in _NOT_034},
        # patch 6 does not apply: the candidates are not read
        "vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager": (
            "_capture_descs",
            "vllm_config",
            "dispatch",
            "cudagraph_mode",
            "max_num_reqs",
        ),
        f"{_AR_GRAPHS}.SpeculatorCudaGraphManager": (
            "capture",
            "run_fullgraph",
            "specialize_spec_tokens",
            "cudagraph_mode",
        ),
        f"{_AR_GRAPHS}.SpeculatorBatchDescriptor": ("num_speculative_tokens", "cg_mode"),
        # M3: the draft-logits cache (load_model logs its values' size)
        "vllm.v1.worker.gpu.spec_decode.draft_logits.DraftLogitsCache": (
            "values",
            "assign",
            "row_mapping",
        ),
        # C2 and patch 6b
        "vllm.config.vllm.VllmConfig": (
            "get_decode_cudagraph_query_lens",
            "get_draft_decode_cudagraph_request_sizes",
            "num_speculative_tokens",
            "scheduler_config",
            "speculative_config",
            "additional_config",
        ),
        # hook 1: the registered method and its options (options_of), its config class
        "vllm.config.speculative.SpeculativeConfig": (
            *OBJECT_ATTRS["vllm.config.speculative.SpeculativeConfig"],
            "custom_method",
            "speculator_options",
        ),
        "vllm.v1.worker.gpu.spec_decode.gemma4.config.Gemma4MTPSpeculatorConfig": (
            "base_method",
            "speculator_class",
            "supported_options",
            "supports_pcp",
        ),
        # M4: refused at config time
        "vllm.config.parallel.ParallelConfig": (
            "prefill_context_parallel_size",
            "pipeline_parallel_size",
            "tensor_parallel_size",
        ),
    },
    object_calls={
        **{k: v for k, v in OBJECT_CALLS.items() if k[0] not in _NOT_034 and k[1] != "__init__"},
        (f"{_AR_GRAPHS}.SpeculatorCudaGraphManager", "capture"): (6, ("progress_bar_desc",)),
        (f"{_AR_GRAPHS}.SpeculatorCudaGraphManager", "specialize_spec_tokens"): (2, ()),
        # C2: _new_round_graphs builds the manager as AutoRegressiveSpeculator does
        ("vllm.v1.worker.gpu.cudagraph_utils.CudaGraphManager", "__init__"): (
            3,
            ("decode_query_lens", "decode_request_sizes"),
        ),
        ("vllm.config.vllm.VllmConfig", "get_decode_cudagraph_query_lens"): (1, ()),
        ("vllm.config.vllm.VllmConfig", "get_draft_decode_cudagraph_request_sizes"): (0, ()),
    },
    module_names={
        # _specialize_capture_descs reads the descriptor from the graph manager's module
        _AR_GRAPHS: ("SpeculatorBatchDescriptor", "SpeculatorCudaGraphManager"),
        # patch 6b wraps a method of this class
        "vllm.config.vllm": ("VllmConfig",),
    },
    patched_signatures={
        **{
            k: v
            for k, v in PATCHED_SIGNATURES.items()
            if not k.startswith("vllm.v1.sample.rejection_sampler.")
        },
        "vllm.config.vllm.VllmConfig.get_decode_cudagraph_query_lens": ("decode_query_len",),
    },
)
SURFACES["vllm_0_34"] = _SURFACE_034
_m034 = _SURFACE_034.mirrored
_mirror(
    _TDAR, "propose",
    "FrozenKVMTPSpeculator.propose (adapters/vllm_0_34/speculator.py) replaces it: its "
    "request-input copy and, from _run_multi_step_decode on, the same calls; review what "
    "it gained (pcp_manager, EPLB) for the frozen round",
    {"0.34.0": "5cabb97a8f1bd4d146b8c62eab0fe5f906f1331832fcfed5d8cf818ab7541f8e"},
    _m034,
)  # fmt: skip
_mirror(
    _AR, "_run_multi_step_decode",
    "FrozenKVMTPSpeculator.propose calls it (hook 4): the DP clamp and sync, the graph "
    "dispatch, specialize_spec_tokens, then _prepare_decode_inputs with the clamped count "
    "(the seed rows), the begin/end hooks and _run_fused_multi_step_decode or "
    "_multi_step_decode",
    {"0.34.0": "289d88e4d5ec16280e269429870fa30e3787940c06bf89e13cd4d5822decd3d2"},
    _m034,
)  # fmt: skip
_mirror(
    _AR, "_run_fused_multi_step_decode",
    "the frozen round relies on it: a FULL graph replays after _map_kernel_block_tables; "
    "otherwise metadata is built once (step=1) and _fused_multi_step_decode runs, which "
    "the adapter overrides with the seed step as step 0",
    {"0.34.0": "043aa75da798ff891570ed8050b34728a13e80f1cd5e081ac9a74ef6356a53ff"},
    _m034,
)  # fmt: skip
_mirror(
    _AR, "_fused_multi_step_decode",
    "FrozenKVMTPSpeculator._fused_multi_step_decode runs the inherited "
    "_generate_fused_drafts (adapters/vllm_0_32/speculator.py), a copy of this loop with "
    "the seed step as step 0 and the metadata refreshed once",
    {"0.34.0": "3a06e96828b1e08f0d93c888a3646320c4c0a4b3ff0930901d89aca1f9bc612c"},
    _m034,
)  # fmt: skip
_mirror(
    _AR, "_multi_step_decode",
    "the inherited FrozenKVMTPSpeculator._multi_step_decode (adapters/vllm_0_32) copies it "
    "with the seed step as step 0 (metadata built once: positions constant)",
    {"0.34.0": "d1cce2cfe561f9d31033d13c42e390656d97031619440cef5b5f5b987a790d5e"},
    _m034,
)  # fmt: skip
_mirror(
    _AR, "capture",
    "the inherited FrozenKVMTPSpeculator.capture copies its decode-graph capture (no "
    "prefill graphs); _capture_prologue (adapters/vllm_0_34) copies its prologue",
    {"0.34.0": "8d856176a7ac2796289c73bbfe6221cac91096bd03a5ac03314d0ecc3e34188e"},
    _m034,
)  # fmt: skip
_mirror(
    _AR, "init_cudagraph_manager",
    "FrozenKVMTPSpeculator._new_round_graphs (adapters/vllm_0_34) builds the greedy "
    "family's manager (and the k = 1 one) as this builds the drafter's decode manager",
    {"0.34.0": "b23fbbd8bcae30b7d59197ced57a509f86ab524fdb19d0f38d096c7f4a385a3a"},
    _m034,
)  # fmt: skip
_mirror(
    f"{_AR_GRAPHS}.SpeculatorCudaGraphManager", "capture",
    "FrozenKVMTPSpeculator._specialize_capture_descs copies its specialize_spec_tokens "
    "block (one desc per k the engine may run, k = 1 kept) and writes _capture_descs; "
    "its forward_fn gets num_speculative_steps when decode_query_len is 1",
    {"0.34.0": "8941c38426597cef379a49cb1a42324ee724e42107e5bf0bebc0edd65659d502"},
    _m034,
)  # fmt: skip
_mirror(
    _TDAR, "_configure_decode_metadata_update",
    "FrozenKVMTPSpeculator._configure_decode_metadata_update skips it for "
    "DraftModelSpeculator's (keeps in-graph refresh at k=1)",
    {"0.34.0": "3fa4b10033e89e6e70f7bee88ea0c52e44dcd5cdca40e6850aef45ef62f40c68"},
    _m034,
)  # fmt: skip
_mirror(
    "vllm.v1.worker.gpu.spec_decode.speculator.DraftModelSpeculator", "prepare_propose",
    "FrozenKVMTPSpeculator.prepare_propose (adapters/vllm_0_34, hook 2) calls it, then "
    "takes sampler.sampling_states; it reads self.draft_logits, which a greedy round "
    "hides (M3: the cache is replicated, so its assign is a no-op)",
    {"0.34.0": "1fd874a7ce82e000cc3c754c81f765934a3c62e199ac5529387b242e2c3b0600"},
    _m034,
)  # fmt: skip
_mirror(
    "vllm.v1.worker.gpu.spec_decode.speculator_config", "get_speculator_config_class",
    "hook 1: a registered method's config (adapters/vllm_0_34/config.py) is used as it "
    "is, neither replaced by the config the assistant checkpoint declares nor specialised",
    {"0.34.0": "7519ca0b2edad573d38a4c2cdff99ee5ba22657dc1a2315d0c4a7aba6c1fe991"},
    _m034,
)  # fmt: skip
_mirror(
    "vllm.v1.worker.gpu.spec_decode", "init_speculator",
    "hook 1: the model runner builds the registered config's speculator_class with "
    "(vllm_config, device) (FrozenKVMTPSpeculator takes no req_states)",
    {"0.34.0": "15cdd9e83f28508da1cc34581829c42662a2f204de1d64f36e23e9a1fabd85f5"},
    _m034,
)  # fmt: skip
_mirror(
    "vllm.config.vllm.VllmConfig", "get_decode_cudagraph_query_lens",
    "patches/graph_candidates.py (patch 6b) replaces its answer under \"auto\": query "
    "lengths k + n for the new tokens n = decode_query_len - num_speculative_tokens",
    {"0.34.0": "665ea3a13b947ba6af31ad0e12039a1c9da0625e08f9d9d7424bc16d6607da7f"},
    _m034,
)  # fmt: skip
_mirror(
    "vllm.model_executor.layers.logits_processor.LogitsProcessor", "forward",
    "patches/target_softcap.py re-implements its soft-cap branch over _get_logits",
    {"0.34.0": "3b73c195b5648832d907186240bf706f9eb64ab2156929231a1bfc6873641ba4"},
    _m034,
)  # fmt: skip

#: the adapter serving the tree under check, and its tables
ADAPTER = adapter_for_tree(VllmSource().version)
_S = SURFACES[ADAPTER]
SUPPORTED, V2, V1 = _S.supported, _S.v2, _S.v1
MIRRORED, WRITTEN_FOR_PARENT, REVIEWED_OVERRIDES = (
    _S.mirrored,
    _S.written_for_parent,
    _S.reviewed_overrides,
)
OBJECT_ATTRS, OBJECT_CALLS = _S.object_attrs, _S.object_calls
MODULE_NAMES, PATCHED_SIGNATURES = _S.module_names, _S.patched_signatures


@pytest.fixture(scope="module")
def src() -> VllmSource:
    return VllmSource()


@pytest.fixture(scope="module")
def modules() -> dict[str, ast.Module]:
    return plugin_modules(adapter=ADAPTER)


def test_supported_version(src: VllmSource) -> None:
    assert src.version in SUPPORTED, (
        f"vLLM {src.version} is not in {SUPPORTED}: review the pinned methods and add it "
        "(docs/upstream.md lists what changed in the releases after them)"
    )


def test_vllm_imports_resolve(src: VllmSource, modules: dict[str, ast.Module]) -> None:
    imports = vllm_imports(modules)
    assert imports
    problems = vllm_import_problems(src, imports)
    assert not problems, f"vLLM {src.version}:\n" + "\n".join(problems)


def _patch_targets(version: str) -> list[tuple[str, str]]:
    """(module, symbol) of every Patch(...) in the registry that applies to the vLLM
    release ``version`` (its ``since`` and ``before``), read from its source. A tree of no
    release (``main@<commit>``) counts as the newest release reviewed for its adapter."""
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(Version(version.split("@")[0]).base_version)
    except InvalidVersion:
        release = Version(SUPPORTED[-1])
    tree = ast.parse((PACKAGE / "patches" / "__init__.py").read_text())
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Patch":
            kw = {k.arg: k.value for k in n.keywords}
            module, symbol = kw["module"], kw["symbol"]
            assert isinstance(module, ast.Constant) and isinstance(symbol, ast.Constant)
            since, before = (kw.get(b) for b in ("since", "before"))
            if isinstance(since, ast.Constant) and release < Version(str(since.value)):
                continue
            if isinstance(before, ast.Constant) and release >= Version(str(before.value)):
                continue
            out.append((str(module.value), str(symbol.value)))
    return out


def test_patch_targets_exist(src: VllmSource) -> None:
    targets = _patch_targets(src.version)
    assert len(targets) >= 5
    problems = []
    for module, symbol in targets:
        name, _, attr = symbol.partition(".")
        if not src.exists(f"{module}.{name}"):
            problems.append(f"patch target {module}.{name} is gone")
        elif attr and not attr.startswith(("__", "_frozen_kv_mtp")):
            if not src.exists(f"{module}.{symbol}"):
                problems.append(f"patch target {module}.{symbol} is gone")
    assert not problems, f"vLLM {src.version}:\n" + "\n".join(problems)


@pytest.mark.parametrize("module, names", sorted(MODULE_NAMES.items()))
def test_module_names_exist(src: VllmSource, module: str, names: tuple[str, ...]) -> None:
    assert src.module_file(module) is not None, f"vLLM {src.version} has no module {module}"
    missing = [n for n in names if src.resolve(module, n)[1] == "missing"]
    assert not missing, f"vLLM {src.version} {module} has no {missing}"


@pytest.mark.parametrize("dotted, names", sorted(PATCHED_SIGNATURES.items()))
def test_patched_signatures(src: VllmSource, dotted: str, names: tuple[str, ...]) -> None:
    holder, _, name = dotted.rpartition(".")
    if src.module_file(holder) is not None:
        fn = src.function(dotted)
        assert fn is not None, f"{dotted} is gone in vLLM {src.version}"
        sig = signature(fn, is_method=False)
    else:
        found = _method_or_none(src, holder, name)
        assert found is not None, f"{dotted} is gone in vLLM {src.version}"
        sig = signature_of(found[1])
    assert sig.positional == names, (
        f"vLLM {src.version} {dotted}{sig.positional}: the patch re-declares {names}"
    )


def _method_or_none(
    src: VllmSource, holder: str, name: str
) -> tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """``holder.name`` (a class's method), or None when the class or its module is gone."""
    try:
        return src.method(src.cls(holder), name)
    except LookupError:
        return None


def _missing_bases(src: VllmSource, c: PluginClass) -> list[str]:
    out = []
    for base in c.bases:
        try:
            src.cls(base)
        except LookupError:
            out.append(base)
    return out


def _with_bases(src: VllmSource, modules: dict[str, ast.Module]) -> list[PluginClass]:
    """Plugin classes whose vLLM bases all exist (a missing base is reported once, by
    test_subclassed_vllm_classes_exist, and does not hide the other classes' problems)."""
    return [c for c in plugin_classes(modules) if not _missing_bases(src, c)]


def test_subclassed_vllm_classes_exist(src: VllmSource, modules: dict[str, ast.Module]) -> None:
    classes = plugin_classes(modules)
    assert {V2} | ({V1} if V1 else set()) <= {c.where for c in classes}
    missing = [f"{c.where} subclasses {b}: gone" for c in classes for b in _missing_bases(src, c)]
    assert not missing, f"vLLM {src.version}:\n" + "\n".join(missing)


def test_overrides_accept_upstream_arguments(
    src: VllmSource, modules: dict[str, ast.Module]
) -> None:
    problems, count = [], 0
    for c in _with_bases(src, modules):
        for name, fn in methods(c.node).items():
            if name.startswith("__") and name != "__init__":
                continue
            found = parent_method(src, c, name)
            if found is None:
                continue
            count += 1
            owner, parent = found
            for p in override_problems(signature_of(fn), signature_of(parent)):
                if (f"{c.where}.{name}", p) not in REVIEWED_OVERRIDES:
                    problems.append(f"{c.where}.{name} overrides {owner.path}.{name}: {p}")
    assert count >= 15 or src.version not in SUPPORTED
    assert not problems, f"vLLM {src.version}:\n" + "\n".join(problems)


def test_parent_attributes_exist(src: VllmSource, modules: dict[str, ast.Module]) -> None:
    problems = []
    for c in _with_bases(src, modules):
        bases = [src.cls(b) for b in c.bases]
        needed = (self_reads(c.node) - own_attrs(c.node)) | set(WRITTEN_FOR_PARENT.get(c.where, ()))
        for attr in sorted(needed):
            if not any(src.member(b, attr) for b in bases):
                problems.append(f"{c.where} reads self.{attr}: no such attribute on {c.bases}")
    assert not problems, f"vLLM {src.version}:\n" + "\n".join(problems)


def test_calls_into_parents_bind(src: VllmSource, modules: dict[str, ast.Module]) -> None:
    problems, count = [], 0
    for c in _with_bases(src, modules):
        for name, call in parent_calls(c):
            if call.target.startswith(("self.", "super().")):
                found = parent_method(src, c, name)
            else:
                cls_path = c.imports[call.target.split(".")[0]]
                try:
                    found = src.method(src.cls(cls_path), name)
                except LookupError:
                    problems.append(f"{call.where} {call.target}(...): {cls_path} is gone")
                    continue
            if found is None:
                continue  # an attribute, not a method: test_parent_attributes_exist
            count += 1
            sig = signature_of(found[1])
            for p in sig.call_problems(call.n_positional, set(call.keywords), call.star):
                problems.append(f"{call.where} {call.target}(...) -> {found[0].path}: {p}")
    assert count >= 10 or src.version not in SUPPORTED
    assert not problems, f"vLLM {src.version}:\n" + "\n".join(problems)


def test_calls_of_vllm_functions_bind(src: VllmSource, modules: dict[str, ast.Module]) -> None:
    problems, count = [], 0
    for dotted, call in vllm_function_calls(modules):
        fn = src.function(dotted)
        if fn is None:
            continue  # a class or constant: imports and classes are checked elsewhere
        count += 1
        sig = signature(fn, is_method=False)
        for p in sig.call_problems(call.n_positional, set(call.keywords), call.star):
            problems.append(f"{call.where} {dotted}(...): {p}")
    assert count >= 3
    assert not problems, f"vLLM {src.version}:\n" + "\n".join(problems)


#: attributes the plugin reads that vLLM no longer has (bugs to fix in the plugin); the
#: test fails once vLLM has them again, so remove the entry when fixing
KNOWN_GONE: dict[str, str] = {}


def _object_attr_params() -> list[object]:
    return [
        pytest.param(
            cls_path,
            attrs,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_GONE[cls_path])]
            if cls_path in KNOWN_GONE
            else [],
        )
        for cls_path, attrs in sorted(OBJECT_ATTRS.items())
    ]


@pytest.mark.parametrize("cls_path, attrs", _object_attr_params())
def test_object_attributes(src: VllmSource, cls_path: str, attrs: tuple[str, ...]) -> None:
    info = src.cls(cls_path)
    missing = [a for a in attrs if src.member(info, a) is None]
    assert not missing, f"vLLM {src.version} {cls_path} has no {missing}"


@pytest.mark.parametrize("key", sorted(OBJECT_CALLS), ids=lambda k: f"{k[0]}.{k[1]}")
def test_object_calls_bind(src: VllmSource, key: tuple[str, str]) -> None:
    cls_path, name = key
    n_positional, keywords = OBJECT_CALLS[key]
    found = src.method(src.cls(cls_path), name)
    assert found is not None, f"vLLM {src.version} {cls_path}.{name} is gone"
    problems = signature_of(found[1]).call_problems(n_positional, set(keywords), star=False)
    assert not problems, f"vLLM {src.version} {found[0].path}.{name}: {problems}"


@pytest.mark.parametrize("key", sorted(MIRRORED), ids=lambda k: f"{k[0].rpartition('.')[2]}.{k[1]}")
def test_mirrored_upstream_unchanged(src: VllmSource, key: tuple[str, str]) -> None:
    holder, name = key
    review, shas = MIRRORED[key]
    if src.module_file(holder) is not None:  # a module-level function
        fn, where = src.function(f"{holder}.{name}"), holder
    else:
        found = _method_or_none(src, holder, name)
        fn, where = (found[1], found[0].path) if found else (None, holder)
    assert fn is not None, f"vLLM {src.version} {holder}.{name} is gone; review: {review}"
    got = source_sha256(fn)
    # Code identical to a reviewed version keeps that review, whatever the release.
    reviewed = [v for v, sha in shas.items() if sha == got]
    want = shas.get(src.version)
    assert got == want or reviewed, (
        f"vLLM {src.version}: {where}.{name} differs from every reviewed version "
        f"({', '.join(shas)}; sha256 {got}).\n"
        f"Review: {review}.\nThen pin the new hash for {src.version} in {Path(__file__).name}."
    )
