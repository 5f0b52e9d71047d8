"""One SGLang engine start, as its scheduler process makes it, on a CPU machine: the
``Scheduler`` of one engine ``bench.sglang_tokens`` plans, built with its ServerArgs on
meta_gpu's faked H100, with stub_kernels' kernels. That covers the model configs, the model
load (dummy weights), KV-pool sizing and allocation for target and draft, FROZEN_KV_MTP's
binding of the assistant to the target's KV, the attention backends, the warm-up forwards
of every CUDA graph capture (target decode or verify, the draft loop) and the radix cache.
The graphs themselves are not captured and no kernel runs (preflight.py runs this in a
process of its own per engine: SGLang's distributed state is per process).

Besides "it starts", ``start`` checks what a start on the GPU would not show until a
forward: each attention layer of the target and of the assistant (bound to the target
layer whose KV it reads) finds its KV buffer with its own KV heads, head size and kind
(sliding or full), and the full and sliding layers have the checkpoint's head sizes. It
reports which JIT kernels were asked for and whether a prebuilt copy was found, any
FlashInfer kernel asked for (none can be built from the bundle), any key of a Gemma 4 text
config that SGLang's Gemma 4 model reads with a default and did not find (no error, another
model: a missing ``swa_head_dim`` gave the full layers the sliding layers' head size), and
SGLang's own log of weights and pool sizes."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fake_hopper  # noqa: E402,F401

#: SGLang log lines worth repeating (weights, pools, captures)
_LOG_KEYS = ("Load weight end", "memory pool.", "mem usage:", "CUDA graph end", "cuda graph end")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if any(k in msg for k in _LOG_KEYS):
            self.lines.append(msg)


def _audit_config_misses(misses: set[tuple[str, str]]) -> None:
    """Record each attribute that code asks a transformers config for and that it lacks
    (hasattr and getattr with a default included)."""
    from transformers import PretrainedConfig

    original = PretrainedConfig.__getattribute__

    def audited(self: Any, key: str) -> Any:
        try:
            return original(self, key)
        except AttributeError:
            if not key.startswith("_"):
                misses.add((type(self).__name__, key))
            raise

    PretrainedConfig.__getattribute__ = audited  # type: ignore[method-assign]


def kv_problems(scheduler: Any, full_dim: int, sliding_dim: int) -> list[str]:
    """Layers whose KV buffer does not fit them (see the module doc)."""
    runner = scheduler.tp_worker.model_runner
    pool = runner.token_to_kv_pool
    layers = [("target", i, lay.self_attn.attn) for i, lay in enumerate(runner.model.model.layers)]
    outer = scheduler.draft_worker
    if outer is not None:
        inner = getattr(outer, "_draft_worker", outer)
        draft = inner.draft_model_runner.model
        layers += [("assistant", i, lay.self_attn.attn) for i, lay in enumerate(draft.model.layers)]
    out = []
    for who, i, attn in layers:
        k = pool.get_key_buffer(attn.layer_id)
        v = pool.get_value_buffer(attn.layer_id)
        want_k = (attn.tp_k_head_num, attn.qk_head_dim)
        want_v = (attn.tp_v_head_num, attn.v_head_dim)
        sliding = attn.sliding_window_size > 0
        mapping = getattr(pool, "layers_mapping", None)
        in_swa = mapping[attn.layer_id][1] if mapping else sliding
        dim = sliding_dim if sliding else full_dim
        if tuple(k.shape[-2:]) != want_k or tuple(v.shape[-2:]) != want_v:
            out.append(
                f"{who} layer {i} (KV of layer {attn.layer_id}): K/V heads x dim "
                f"{want_k}/{want_v}, its buffers {tuple(k.shape[-2:])}/{tuple(v.shape[-2:])}"
            )
        if in_swa != sliding:
            out.append(
                f"{who} layer {i} is {'sliding' if sliding else 'full'} but reads the "
                f"{'sliding' if in_swa else 'full'} pool (layer {attn.layer_id})"
            )
        if attn.qk_head_dim != dim:
            out.append(
                f"{who} layer {i} ({'sliding' if sliding else 'full'}): head size "
                f"{attn.qk_head_dim}, the checkpoint's is {dim}"
            )
    return out


def start(
    size: str, engine: dict[str, Any], env: dict[str, str | None], jit_dir: str | None
) -> dict[str, Any]:
    """Build the Scheduler of one engine of Gemma 4 ``size`` (in this process, once); what
    it found."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    # prebuilt JIT kernels are looked up there, as on the host (TVM_FFI_CACHE_DIR)
    os.environ["TVM_FFI_CACHE_DIR"] = jit_dir or tempfile.mkdtemp(prefix="no-jit-")
    import sglang.srt.distributed.bootstrap as bootstrap
    import sglang.srt.model_loader.loader as loader
    from meta_gpu import MetaGPU
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import PortArgs, ServerArgs
    from sglang.srt.utils import configure_logger
    from stub_kernels import StubKernels

    from vllm_frozen_kv_mtp.frontend.published_sizes import shape

    # one process, no NCCL: gloo for the (one-rank) groups
    bootstrap._resolve_backend = lambda **k: "gloo"  # type: ignore[attr-defined]
    # meta weights hold no values to draw; their shapes are what is checked
    loader.initialize_dummy_weights = lambda model, *a, **k: None  # type: ignore[attr-defined]
    load_plugins()
    sa = ServerArgs(**engine)
    sa.check_server_args()
    configure_logger(sa)
    lines = _Lines()
    logging.getLogger().addHandler(lines)
    misses: set[tuple[str, str]] = set()
    _audit_config_misses(misses)
    publish(sa, role="scheduler")
    t = time.time()
    report: dict[str, Any] = {"error": None, "kv": []}
    with MetaGPU() as gpu, StubKernels() as kernels:
        try:
            scheduler = Scheduler(sa, PortArgs.init_new(sa), 0, 0, 0, 0, 0, 0, None)
            hub = shape(size).target  # transformers' naming: global_* are the full layers'
            report["kv"] = kv_problems(scheduler, hub["global_head_dim"], hub["head_dim"])
            if scheduler.draft_worker is not None:
                inner = getattr(scheduler.draft_worker, "_draft_worker", scheduler.draft_worker)
                report["owners"] = dict(inner.kv_context.physical_layer_ids)
        except BaseException as e:  # reported by the caller
            import traceback

            report["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-6)}"
        report["peak_gb"] = gpu.peak / (1 << 30)
    report.update(
        seconds=time.time() - t,
        log=lines.lines,
        jit=kernels.jit,
        flashinfer=kernels.flashinfer,
        ops=sorted(kernels.ops),
        defaulted=sorted(
            a
            for c, a in misses
            # text configs only; text_config and config are probes for a wrapper
            if c == "Gemma4TextConfig" and a in _defaulted_reads() - {"text_config", "config"}
        ),
    )
    return report


def _defaulted_reads() -> set[str]:
    """Config attributes SGLang's Gemma 4 models read with a default (``getattr(cfg, name,
    default)``, ``hasattr``): a missing one does not fail, it changes the model (as a
    missing ``swa_head_dim`` gave the full layers the sliding layers' head size)."""
    import ast
    import importlib
    import inspect

    names: set[str] = set()
    for mod in ("sglang.srt.models.gemma4_causal", "sglang.srt.models.gemma4_mtp"):
        tree = ast.parse(inspect.getsource(importlib.import_module(mod)))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and (node.func.id == "hasattr" or len(node.args) == 3)
            ):
                names.add(str(node.args[1].value))
    return names
