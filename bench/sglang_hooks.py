"""A general SGLang plugin (entry point group ``sglang.srt.plugins``) for the benchmark:
SGLang runs ``register()`` in every process it starts, scheduler processes included.

SGLang reads ``SGLANG_SIMULATE_ACC_LEN`` once, when ``speculative/spec_utils.py`` is
imported, into the module global ``SIMULATE_ACC_LEN``; EAGLE's verify
(``eagle_utils.eagle_sample``, which FROZEN_KV_MTP inherits) imports that global inside
the function on every call. So setting the global in each scheduler process changes the
simulated acceptance from the next verify on, and one engine serves every profile:
``Engine.collective_rpc("bench_set_simulated_acc_len", value=...)`` calls the method
this plugin adds to the Scheduler, on every TP rank.

``bench.sglang_tokens`` makes the entry point visible (a ``.dist-info`` folder on the
path of the engine's processes); nothing here is imported by the plugin package.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ENTRY_GROUP = "sglang.srt.plugins"
ENTRY_NAME = "frozen_kv_mtp_bench"
RPC_SET_ACC_LEN = "bench_set_simulated_acc_len"


def set_simulated_acc_len(scheduler: Any, value: float) -> None:
    """The scheduler method: a mean acceptance length for SGLang's simulated verify
    (<= 0 turns the simulation off)."""
    from sglang.srt.speculative import spec_utils

    spec_utils.SIMULATE_ACC_LEN = float(value)


def log_jit_builds() -> None:
    """Name every SGLang JIT kernel this process compiles (a prebuilt one is loaded, not
    compiled): on an offline host each build costs device time, or fails without nvcc."""
    try:
        import tvm_ffi.cpp as cpp
    except ImportError:
        return
    for attr in ("load_inline", "load"):
        original = getattr(cpp, attr, None)
        if original is None or getattr(original, "_bench_logged", False):
            continue

        def logged(*a: Any, _original: Any = original, **k: Any) -> Any:
            name = k.get("name", a[0] if a else "?")
            t = time.time()
            print(f"[bench] SGLang JIT build: {name}", file=sys.stderr, flush=True)
            module = _original(*a, **k)
            print(f"[bench] ... built in {time.time() - t:.1f} s", file=sys.stderr, flush=True)
            return module

        logged._bench_logged = True  # type: ignore[attr-defined]
        setattr(cpp, attr, logged)


def register() -> None:
    from sglang.srt.managers.scheduler import Scheduler

    setattr(Scheduler, RPC_SET_ACC_LEN, set_simulated_acc_len)
    log_jit_builds()


def write_entry_point(folder: str | Path) -> Path:
    """A minimal distribution under ``folder`` whose entry point names ``register``;
    ``folder`` must be on the path of every SGLang process (sys.path and PYTHONPATH)."""
    from devkit.dist_info import entry_point_dist

    return entry_point_dist(
        folder,
        "frozen-kv-mtp-bench-hooks",
        ENTRY_GROUP,
        ENTRY_NAME,
        f"{__name__}:register",
        version="0",
    )
