"""Ray Serve LLM (``ray.serve.llm``) with ``frozen_kv_mtp``.

Speculation is an engine argument, so a frozen_kv_mtp deployment is a plain
``LLMConfig`` whose ``engine_kwargs`` carry ``speculative_config``::

    LLMConfig(
        model_loading_config={"model_id": "gemma-4-31B-it",
                              "model_source": "google/gemma-4-31B-it"},
        engine_kwargs={
            "tensor_parallel_size": 2,
            "speculative_config": {"method": "frozen_kv_mtp",
                                   "model": "google/gemma-4-31B-it-assistant",
                                   "num_speculative_tokens": 4},
        },
    )

The replica builds vLLM's ``AsyncEngineArgs`` from it, and ``EngineArgs.__post_init__``
calls vLLM's ``load_general_plugins()``, which loads this plugin through its entry point
and validates the request there. So the plugin must be installed wherever the replica and
vLLM's workers run (cluster image, or ``runtime_env={"pip": [...]}``).

On GPUs Ray Serve runs vLLM with Ray's executor. vLLM refuses that executor on CPU;
``accelerator_config={"kind": "cpu"}`` makes Ray Serve use vLLM's multiprocessing
executor, so the whole engine runs inside the replica (how the tests run it).

``ray.serve.llm`` imports pyarrow, which ``ray[serve]`` does not pull, and ``ray[llm]``
pins an older vLLM; install ``ray[serve]`` and ``pyarrow`` next to a supported vLLM.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vllm_frozen_kv_mtp.identity import METHOD

#: the Ray Serve LLM app builder our YAML configs use as ``import_path``
OPENAI_APP = "ray.serve.llm:build_openai_app"
#: Ray picks the host's routable address even for a local cluster; with cluster mode off
#: it uses loopback. Read when ``ray`` is first imported.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def frozen_kv_mtp_llm_config(
    model_id: str,
    model_source: str,
    assistant: str,
    *,
    num_speculative_tokens: int | None = None,
    tensor_parallel_size: int = 1,
    cpu: bool = False,
    engine_kwargs: Mapping[str, Any] | None = None,
    **llm_config: Any,
) -> dict[str, Any]:
    """An ``LLMConfig`` as a dict: pass it to ``LLMConfig(**d)`` or a serve YAML."""
    spec: dict[str, Any] = {"method": METHOD, "model": assistant}
    if num_speculative_tokens is not None:
        spec["num_speculative_tokens"] = num_speculative_tokens
    kwargs = {"tensor_parallel_size": tensor_parallel_size, **(engine_kwargs or {})}
    kwargs["speculative_config"] = spec
    cfg: dict[str, Any] = {
        "model_loading_config": {"model_id": model_id, "model_source": model_source},
        "engine_kwargs": kwargs,
        **llm_config,
    }
    if cpu:
        cfg["accelerator_config"] = {"kind": "cpu"}
    return cfg


def llm_configs_from_yaml(path: str | Path) -> list[dict[str, Any]]:
    """The ``llm_configs`` of every ``build_openai_app`` application in a serve YAML."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    out: list[dict[str, Any]] = []
    for app in doc.get("applications") or []:
        if app.get("import_path") == OPENAI_APP:
            out.extend((app.get("args") or {}).get("llm_configs") or [])
    return out


def without_speculation(cfg: Mapping[str, Any], model_id: str) -> dict[str, Any]:
    """The same deployment without speculation, served as ``model_id`` (a reference)."""
    out = copy.deepcopy(dict(cfg))
    out["engine_kwargs"].pop("speculative_config", None)
    out["model_loading_config"]["model_id"] = model_id
    return out


def resolve_paths(cfg: Mapping[str, Any], root: str | Path) -> dict[str, Any]:
    """Make relative local paths (model, assistant, chat template) absolute under ``root``.

    Replicas run in worker processes whose working directory is not the caller's.
    """
    out = copy.deepcopy(dict(cfg))
    root = Path(root)

    def fix(value: str) -> str:
        p = root / value
        return str(p) if not os.path.isabs(value) and p.exists() else value

    mlc = out["model_loading_config"]
    if isinstance(mlc.get("model_source"), str):
        mlc["model_source"] = fix(mlc["model_source"])
    ek = out.setdefault("engine_kwargs", {})
    if isinstance(ek.get("speculative_config"), dict) and "model" in ek["speculative_config"]:
        ek["speculative_config"]["model"] = fix(ek["speculative_config"]["model"])
    if isinstance(ek.get("chat_template"), str):
        ek["chat_template"] = fix(ek["chat_template"])
    return out


def vllm_engine_config(cfg: Mapping[str, Any]) -> Any:
    """Build the replica's vLLM config exactly as Ray Serve does, in this process.

    Runs Ray's own ``_get_vllm_engine_config`` (engine/front-end kwargs split, executor
    choice, ``AsyncEngineArgs(...).create_engine_config()``), so plugin validation errors
    surface as they would in a replica. Returns vLLM's ``VllmConfig``.
    """
    from ray.llm._internal.serve.engines.vllm.vllm_engine import _get_vllm_engine_config
    from ray.serve.llm import LLMConfig

    _, vllm_config = _get_vllm_engine_config(LLMConfig(**copy.deepcopy(dict(cfg))))
    return vllm_config


def build_app(llm_configs: Sequence[Mapping[str, Any]]) -> Any:
    """An OpenAI-compatible Ray Serve application serving ``llm_configs``."""
    from ray.serve.llm import LLMConfig, build_openai_app

    return build_openai_app({"llm_configs": [LLMConfig(**dict(c)) for c in llm_configs]})


@contextmanager
def local_serve(
    port: int,
    *,
    num_cpus: int = 8,
    object_store_bytes: int = 256 << 20,
    env_vars: Mapping[str, str] | None = None,
    log_to_driver: bool = True,
) -> Iterator[str]:
    """A private local Ray cluster on 127.0.0.1 with Serve's HTTP proxy on ``port``.

    Every Ray component talks over 127.0.0.1 (see :data:`LOOPBACK_ENV`; it only takes
    effect if ``ray`` was not imported before). Yields the base URL; shuts Serve and Ray
    down on exit.
    """
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    import ray
    from ray import serve

    ray.init(
        num_cpus=num_cpus,
        object_store_memory=object_store_bytes,  # LLM serving moves no large objects
        include_dashboard=False,
        runtime_env={"env_vars": dict(env_vars or {})},
        log_to_driver=log_to_driver,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def serve_yaml_apps(
    path: str | Path, root: str | Path, *, with_reference: bool = False
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(name, route prefix, llm_configs) of each app of a serve YAML, paths resolved.

    ``with_reference`` adds, next to every speculative deployment, the same deployment
    without speculation served as ``<model_id>-no-spec`` (to compare greedy outputs).
    """
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    apps = []
    for i, app in enumerate(doc.get("applications") or []):
        if app.get("import_path") != OPENAI_APP:
            raise ValueError(f"only {OPENAI_APP} applications are supported, got {app!r}")
        cfgs = [resolve_paths(c, root) for c in (app.get("args") or {}).get("llm_configs", [])]
        if with_reference:
            cfgs += [
                without_speculation(c, c["model_loading_config"]["model_id"] + "-no-spec")
                for c in cfgs
                if "speculative_config" in c.get("engine_kwargs", {})
            ]
        apps.append((app.get("name", f"app{i}"), app.get("route_prefix", "/"), cfgs))
    return apps


def main(argv: list[str] | None = None) -> None:
    """Run a serve YAML's LLM apps on a loopback-only local Ray cluster until SIGTERM/SIGINT.

    Like ``serve run CONFIG``, but every Ray component binds 127.0.0.1 and the process
    exits cleanly (Serve and Ray shut down) on SIGTERM. Prints ``READY <url>`` when the
    apps serve.
    """
    import argparse
    import signal
    import threading

    import yaml

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("config", help="a serve YAML (e.g. configs/ray_serve_cpu.yaml)")
    p.add_argument("--port", type=int, help="HTTP port (default: the YAML's http_options.port)")
    p.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local cluster")
    p.add_argument(
        "--with-reference",
        action="store_true",
        help="also serve each speculative model without speculation as <model_id>-no-spec",
    )
    args = p.parse_args(argv)
    doc = yaml.safe_load(Path(args.config).read_text())
    port = args.port or int((doc.get("http_options") or {}).get("port", 8000))
    apps = serve_yaml_apps(args.config, Path.cwd(), with_reference=args.with_reference)

    stop, ready = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if not ready.is_set():
            raise KeyboardInterrupt  # still deploying: leave serve.run, shut down below
        stop.set()

    with local_serve(port, num_cpus=args.num_cpus) as url:
        from ray import serve

        # after ray.init, whose own SIGTERM handler exits without serve.shutdown()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        for name, prefix, cfgs in apps:
            serve.run(build_app(cfgs), name=name, route_prefix=prefix)
        ready.set()
        print(f"READY {url}", flush=True)
        stop.wait()
        print("shutting down", flush=True)


if __name__ == "__main__":
    main()
