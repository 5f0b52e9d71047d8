"""The one engine factory of the vLLM benches: a method string (``bench/method.py``) and a
run's settings -> ``speculative_config`` and ``LLM(...)`` keyword arguments, then the
in-process engine. ``bench.gpu``, ``bench.gpu_tokens`` and ``bench.micro.profile_draft_gpu``
build their engines here, so a method string means the same engine in each.

Two sources of weights: a real Gemma 4 shape with dummy weights (``model`` under
``shapes``: ``load_format="dummy"``, no tokenizer, the centroid head's ``token_ordering``
filled with a permutation), or a local pair (``target`` and ``assistant``, e.g. the committed
trained pair for a CPU smoke run: real weights, its tokenizer).

Compilation (``mode``): ``default`` is vLLM's own (torch.compile + CUDA graphs), ``graphs``
CUDA graphs without torch.compile (minutes less start-up; ``capture_sizes`` narrows them to
the batch sizes a run uses), ``eager`` neither.

``llm_kwargs`` and ``speculative_config`` are pure (no engine, no files), so the unit tests
check the engine every documented method string builds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench.method import MethodError, MethodSpec

MODES = ("default", "graphs", "eager")
#: ``--attention`` values: vLLM's choice, FA4 (FLASH_ATTN version 4), or a backend name
ATTENTION = ("default", "FA4", "TRITON_ATTN")


@dataclass(frozen=True)
class EngineSettings:
    """Everything an engine of a bench run depends on besides its prompts."""

    method: MethodSpec
    #: a Gemma 4 shape (E2B, E4B, 26B-A4B, 31B), written under ``shapes`` with dummy weights
    model: str = "E4B"
    shapes: str = "models/shapes"
    #: a local pair instead of the shape (both or neither)
    target: str | None = None
    assistant: str | None = None
    #: k for a method string without K (None: the string must give one)
    default_k: int | None = None
    #: the ceiling of a ``sweep`` engine
    k_max: int = 7
    #: synthetic acceptance: unconditional per-position rates (cut to the engine's k);
    #: None: the drafts are verified for real
    synthetic_rates: tuple[float, ...] | None = None
    #: whether the bench can run a sweep engine (one that changes k between runs)
    allow_sweep: bool = True
    mode: str = "default"
    capture_sizes: tuple[int, ...] | None = None
    attention: str = "default"
    dtype: str = "bfloat16"
    max_model_len: int = 1024
    max_num_seqs: int = 8
    gpu_memory_utilization: float = 0.85
    tensor_parallel_size: int = 1
    #: further ``LLM(...)`` arguments, applied last
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.target is not None


def draft_length(settings: EngineSettings) -> int:
    """The engine's k: K, the bench's default, the sweep ceiling, or 0 without speculation."""
    spec = settings.method
    if not spec.speculative:
        return 0
    if spec.sweep:
        if not settings.allow_sweep:
            raise MethodError(
                f"{spec.text()!r}: this bench times one k per engine; sweep engines are "
                f"bench.gpu_tokens's; give K, e.g. {MethodSpec(spec.name, 4, spec.options).text()}"
            )
        return settings.k_max
    if spec.k is None:
        if settings.default_k is None:
            raise MethodError(
                f"{spec.text()!r} needs a draft length here: {spec.name}:K or "
                f"{spec.name}:sweep, e.g. {spec.name}:4"
            )
        return settings.default_k
    return int(spec.k)


def speculative_config(settings: EngineSettings, assistant: str) -> dict[str, Any] | None:
    """The ``speculative_config`` of ``settings.method`` with ``assistant`` as drafter."""
    spec = settings.method
    k = draft_length(settings)
    if not spec.speculative:
        return None
    config: dict[str, Any] = {"method": spec.name, "model": assistant}
    if spec.sweep and spec.name == "mtp":
        # upstream's dynamic schedule over 0..k_max: vLLM captures a graph per k, and a row
        # pins k through the scheduler's per-step lookup
        from vllm_frozen_kv_mtp.draft_length.stand_in import graph_capture_schedule

        config["num_speculative_tokens"] = k
        config["num_speculative_tokens_per_batch_size"] = graph_capture_schedule(k)
    elif spec.sweep:
        config["num_speculative_tokens"] = "auto"
        config["max_num_speculative_tokens"] = k
    else:
        config["num_speculative_tokens"] = k
    config.update(spec.options)
    if settings.synthetic_rates is not None:
        config["rejection_sample_method"] = "synthetic"
        config["synthetic_acceptance_rates"] = list(settings.synthetic_rates[:k])
    return config


def compilation_kwargs(mode: str, capture_sizes: tuple[int, ...] | None = None) -> dict[str, Any]:
    """``LLM(...)`` arguments of a compilation mode (see the module docstring)."""
    if mode == "default":
        return {}
    if mode == "eager":
        return {"enforce_eager": True}
    if mode == "graphs":
        config: dict[str, Any] = {"mode": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"}
        if capture_sizes:
            config["cudagraph_capture_sizes"] = sorted(set(capture_sizes))
        return {"compilation_config": config}
    raise MethodError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")


def attention_kwargs(attention: str) -> dict[str, Any]:
    """``LLM(...)`` arguments of an attention backend choice."""
    if attention == "default":
        return {}
    # FA4 is what Hopper gets by default where it is installed; TRITON_ATTN is what Ampere
    # and Ada users get, and what a bundle without FA4 falls back to
    if attention == "FA4":
        return {"attention_config": {"backend": "FLASH_ATTN", "flash_attn_version": 4}}
    return {"attention_config": {"backend": attention}}


def llm_kwargs(settings: EngineSettings, target: str, assistant: str) -> dict[str, Any]:
    """Every ``LLM(...)`` argument of the engine (the pair's directories given)."""
    if (settings.target is None) != (settings.assistant is None):
        raise MethodError("a local pair needs both --target and --assistant")
    out: dict[str, Any] = {
        "model": target,
        "dtype": settings.dtype,
        "seed": 0,
        # dummy weights for a shape; a local pair's own weights and tokenizer
        "load_format": "auto" if settings.local else "dummy",
        "skip_tokenizer_init": not settings.local,
        "disable_log_stats": False,  # the benches read vLLM's spec-decode counters
        "speculative_config": speculative_config(settings, assistant),
        "max_model_len": settings.max_model_len,
        "max_num_seqs": settings.max_num_seqs,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "tensor_parallel_size": settings.tensor_parallel_size,
    }
    out.update(compilation_kwargs(settings.mode, settings.capture_sizes))
    out.update(attention_kwargs(settings.attention))
    out.update(settings.extra)
    return out


def pair(settings: EngineSettings) -> tuple[str, str]:
    """(target, assistant) directories: the local pair, or the shape's (written under
    ``shapes`` where missing or stale), with the dummy loader set up for it."""
    if settings.target is not None and settings.assistant is not None:
        return settings.target, settings.assistant
    from devkit.fixtures.dummy import fill_dummy_token_ordering
    from vllm_frozen_kv_mtp.frontend.published_sizes import ensure_shape_pair

    fill_dummy_token_ordering()
    target, assistant = ensure_shape_pair(settings.model, settings.shapes)
    return str(target), str(assistant)


@dataclass
class Built:
    """An engine the factory built, and how."""

    llm: Any
    #: its speculative_config (None without speculation)
    spec: dict[str, Any] | None
    #: the engine's k (0 without speculation; the ceiling for a sweep engine)
    k: int
    #: seconds ``LLM(...)`` took
    load_s: float


def build(settings: EngineSettings) -> Built:
    """The in-process ``LLM`` of ``settings`` (bad settings fail before any engine starts)."""
    k = draft_length(settings)  # a bad method fails before the pair is written
    import vllm_frozen_kv_mtp

    vllm_frozen_kv_mtp.register()  # the plugin may not be pip-installed on the host
    from vllm import LLM

    target, assistant = pair(settings)
    kw = llm_kwargs(settings, target, assistant)
    t0 = time.time()
    llm = LLM(**kw)
    return Built(llm, kw["speculative_config"], k, time.time() - t0)
