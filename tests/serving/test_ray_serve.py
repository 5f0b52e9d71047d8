"""Ray Serve LLM with frozen_kv_mtp.

* The shipped CPU config, deployed as the README documents (a loopback-only local Ray
  cluster, the vLLM engine inside the LLMServer replica), next to the same deployment
  without speculation: greedy outputs over HTTP are identical, and the replica built our
  drafter. SIGTERM stops Serve and Ray and leaves no process behind.
* The GPU config and the README's ``LLMConfig`` snippet go through Ray's own
  replica-side config code (``_get_vllm_engine_config``) on real-shape, config-only models.
* A bad speculative config fails in that code with the plugin's message.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from devkit.serving import client, load, ray_serve
from devkit.serving.openai_server import free_port, start_server
from tests.conftest import REPO, pair
from tests.utils.engine import PROMPTS
from vllm_frozen_kv_mtp.frontend.published_sizes import hub_to_local

pytestmark = pytest.mark.serving


@pytest.fixture(autouse=True)
def _needs_ray_serve_llm() -> None:
    pytest.importorskip("ray.serve.llm", reason="needs `pip install -e '.[ray]' pyarrow`")


CPU_YAML = REPO / "configs" / "ray_serve_cpu.yaml"
GPU_YAML = REPO / "configs" / "ray_serve_gpu.yaml"


def _readme_section() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("<!-- serving:begin -->", 1)[1].split("<!-- serving:end -->", 1)[0]


def _readme_ray_command() -> list[str]:
    lines = [ln.split("#", 1)[0].strip() for ln in _readme_section().splitlines()]
    cmds = [ln for ln in lines if "devkit.serving.ray_serve" in ln]
    assert len(cmds) == 1, "README must show one CPU Ray Serve command"
    argv = shlex.split(cmds[0])
    assert argv[0] == ".venv/bin/python" and "configs/ray_serve_cpu.yaml" in argv
    return [sys.executable, *argv[1:]]


def _wait_ready(srv: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"ray serve driver exited early:\n{srv.log_tail(80)}")
        if "READY http://127.0.0.1" in srv.log_text():
            return
        time.sleep(2)
    raise TimeoutError(f"Ray Serve app not ready after {timeout:.0f}s:\n{srv.log_tail(80)}")


def test_cpu_yaml_on_ray_serve_matches_no_speculation(tmp_path: Path) -> None:
    port = free_port()
    argv = _readme_ray_command() + ["--port", str(port), "--with-reference"]
    srv = start_server("", log_path=tmp_path / "ray.log", argv=argv, port=port, cwd=REPO)
    try:
        _wait_ready(srv, timeout=900)
        url = srv.url
        models = urllib.request.urlopen(url + "/v1/models", timeout=30).read().decode()
        assert "tiny-gemma4-no-spec" in models and '"tiny-gemma4"' in models
        runs = {}
        for model in ("tiny-gemma4", "tiny-gemma4-no-spec"):
            payloads = [
                client.body(model, p, chat=i % 2 == 1, stream=i % 3 == 0, max_tokens=16 + i % 9)
                for i, p in enumerate(PROMPTS)
            ]
            runs[model] = asyncio.run(client.requests_concurrently(url, payloads, 32))
            bad = [(r.status, r.error) for r in runs[model] if not r.ok]
            assert not bad, bad
        a, b = runs["tiny-gemma4"], runs["tiny-gemma4-no-spec"]
        diff = load.mismatches(a, b)
        assert not diff, f"Ray Serve: frozen_kv_mtp differs from no speculation: {diff[0]}"
        log = srv.log_text()
        assert re.search(r"frozen_kv_mtp: assistant .*trained/assistant", log)
        assert re.search(r"frozen_kv_mtp: .*proposer active", log), "replica built no drafter"
        assert len(srv.tree()) >= 6, "expected Ray's daemons, replicas and vLLM workers"
    finally:
        # Ray's agents poll for their raylet and need up to a minute to notice it is gone
        leftovers = srv.stop(timeout=240)
    assert not leftovers, f"processes outlived Ray Serve: {leftovers}"
    assert "shutting down" in srv.log_text()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return hub_to_local(tmp_path_factory.mktemp("shapes"))


def _on_shapes(cfg: dict[str, Any], hub: dict[str, str]) -> dict[str, Any]:
    """The config with hub ids swapped for shape dirs, no tokenizer, and vLLM's mp executor.

    Ray's GPU path would pick vLLM's Ray executor, which vLLM refuses on CPU, so the
    accelerator is switched to CPU; everything else is the shipped config.
    """
    cfg = {**cfg, "accelerator_config": {"kind": "cpu"}}
    cfg.pop("accelerator_type", None)
    mlc = dict(cfg["model_loading_config"])
    mlc["model_source"] = hub[mlc["model_source"]]
    ek = dict(cfg["engine_kwargs"], skip_tokenizer_init=True)
    ek["speculative_config"] = {
        **ek["speculative_config"],
        "model": hub[ek["speculative_config"]["model"]],
    }
    return {**cfg, "model_loading_config": mlc, "engine_kwargs": ek}


def test_gpu_yaml_validates_in_rays_replica_code(hub: dict[str, str]) -> None:
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(__import__("yaml").safe_load(GPU_YAML.read_text()))
    cfgs = ray_serve.llm_configs_from_yaml(GPU_YAML)
    assert len(cfgs) == 2
    for cfg in cfgs:
        vc = ray_serve.vllm_engine_config(_on_shapes(cfg, hub))
        ek = cfg["engine_kwargs"]
        assert vc.speculative_config.use_gemma4_mtp()
        assert (
            vc.speculative_config.num_speculative_tokens
            == ek["speculative_config"]["num_speculative_tokens"]
        )
        assert vc.speculative_config.num_speculative_tokens == 4
        assert vc.parallel_config.tensor_parallel_size == ek["tensor_parallel_size"]


def test_readme_llmconfig_snippet(hub: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python snippet builds an app whose LLMConfig validates (serve.run stubbed)."""
    from ray import serve

    blocks = re.findall(r"```python\n(.*?)```", _readme_section(), flags=re.S)
    assert len(blocks) == 1
    apps: list[Any] = []
    monkeypatch.setattr(serve, "run", lambda app, **kw: apps.append(app))
    captured: list[Any] = []
    import ray.serve.llm as rsl

    real_build = rsl.build_openai_app
    monkeypatch.setattr(
        rsl,
        "build_openai_app",
        lambda args: captured.extend(args["llm_configs"]) or real_build(args),
    )
    exec(compile(blocks[0], "README.md", "exec"), {})  # noqa: S102 - our own docs
    assert len(apps) == 1 and len(captured) == 1
    cfg = captured[0].model_dump(exclude_unset=True)
    vc = ray_serve.vllm_engine_config(_on_shapes(cfg, hub))
    assert vc.speculative_config.use_gemma4_mtp()
    assert vc.parallel_config.tensor_parallel_size == 2


def test_bad_config_fails_in_the_replica_with_our_message() -> None:
    target, assistant = pair("fp32")
    cfg = ray_serve.frozen_kv_mtp_llm_config(
        "tiny",
        target,
        assistant,
        num_speculative_tokens=99,
        cpu=True,
        engine_kwargs={"dtype": "float32", "max_model_len": 512},
    )
    with pytest.raises(
        RuntimeError, match="frozen_kv_mtp: num_speculative_tokens=99 is out of range. Fix:"
    ):
        ray_serve.vllm_engine_config(cfg)


def test_cpu_yaml_paths_resolve() -> None:
    ((name, prefix, cfgs),) = ray_serve.serve_yaml_apps(CPU_YAML, REPO, with_reference=True)
    assert prefix == "/" and [c["model_loading_config"]["model_id"] for c in cfgs] == [
        "tiny-gemma4",
        "tiny-gemma4-no-spec",
    ]
    spec = cfgs[0]["engine_kwargs"]["speculative_config"]
    assert spec["method"] == "frozen_kv_mtp" and Path(spec["model"]).is_absolute()
    assert "speculative_config" not in cfgs[1]["engine_kwargs"]
