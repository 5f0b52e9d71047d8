"""configs/ and the README's GPU command validate through vLLM with the plugin.

No weights and no hub: real-shape, config-only model dirs stand in for the published
checkpoints (vllm_frozen_kv_mtp/frontend/published_sizes.py) and the hub ids are swapped for them.
vLLM's own ``--config`` parser reads each YAML, and ``create_engine_config()`` runs the
plugin's front-end validation (assistant/target shapes, k, keys). TP=2 validates on this
CPU machine as well (config only; no worker starts), so the shipped TP is kept.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from vllm_frozen_kv_mtp.frontend.published_sizes import SHAPES, hub_to_local, shape

CONFIGS = REPO / "configs"
SIZE_FILES = {size: CONFIGS / f"gemma4-{size.lower()}.yaml" for size in SHAPES}
#: the KV owners (sliding, full) each drafter layer type reads, per size (research §1)
OWNERS = {"E2B": (13, 14), "E4B": (22, 23), "26B-A4B": (28, 29), "31B": (58, 59)}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return hub_to_local(tmp_path_factory.mktemp("shapes"))


def _swap(value: str, hub: dict[str, str]) -> str:
    if value not in hub:
        raise AssertionError(f"{value!r} is not a known Gemma 4 hub id: {sorted(hub)}")
    return hub[value]


def _engine_config_from_argv(argv: list[str], hub: dict[str, str]) -> Any:
    """Parse ``argv`` with the OpenAI server's parser, swap hub ids, build the VllmConfig."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # vLLM 0.33 moved the server's CLI args out of entrypoints.launchers
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:  # vLLM 0.32
        from vllm.entrypoints.launchers.cli_args import make_arg_parser

    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    ns.model = _swap(ns.model, hub)
    ns.speculative_config = {
        **ns.speculative_config,
        "model": _swap(ns.speculative_config["model"], hub),
    }
    ns.skip_tokenizer_init = True  # config-only dirs: no tokenizer, no hub
    return AsyncEngineArgs.from_cli_args(ns).create_engine_config()


def _check(cfg: Any, size: str, tp: int, max_model_len: int) -> None:
    spec = shape(size)
    sc = cfg.speculative_config
    assert sc.method == "mtp" and sc.use_gemma4_mtp()  # translated to vLLM's Gemma 4 MTP
    assert sc.num_speculative_tokens == spec.k
    assert sc.draft_model_config.hf_config.model_type == "gemma4_mtp"
    assert cfg.parallel_config.tensor_parallel_size == tp
    assert cfg.model_config.max_model_len == max_model_len


def test_every_size_has_a_config() -> None:
    assert sorted(p.name for p in CONFIGS.glob("gemma4-*.yaml")) == sorted(
        p.name for p in SIZE_FILES.values()
    )


@pytest.mark.parametrize("size", list(SHAPES))
def test_config_holds_the_recommended_settings(size: str) -> None:
    spec = shape(size)
    doc = yaml.safe_load(SIZE_FILES[size].read_text())
    assert doc["model"] == spec.hub_id
    assert doc["tensor-parallel-size"] == spec.tp
    assert doc["max-model-len"] == spec.max_model_len
    assert doc["speculative-config"] == {
        "method": "frozen_kv_mtp",
        "model": spec.assistant_hub_id,
        "num_speculative_tokens": spec.k,
    }
    # the published recipe: k=2 for E2B, 4 otherwise; TP 1 for E2B/E4B, 2 for 26B/31B
    assert (spec.k, spec.tp) == {"E2B": (2, 1), "E4B": (4, 1)}.get(size, (4, 2))


@pytest.mark.parametrize("size", list(SHAPES))
def test_config_validates_through_vllm(size: str, hub: dict[str, str]) -> None:
    spec = shape(size)
    cfg = _engine_config_from_argv(["--config", str(SIZE_FILES[size])], hub)
    _check(cfg, size, spec.tp, spec.max_model_len)


@pytest.mark.parametrize("size", list(SHAPES))
def test_shape_pairs_read_the_expected_target_layers(size: str, hub: dict[str, str]) -> None:
    from transformers import AutoConfig

    from vllm_frozen_kv_mtp.frontend.layer_shapes import kv_owner_layers, text_config
    from vllm_frozen_kv_mtp.frontend.pair import validate_pair

    spec = shape(size)
    target = AutoConfig.from_pretrained(hub[spec.hub_id])
    assistant = AutoConfig.from_pretrained(hub[spec.assistant_hub_id])
    validate_pair(target, assistant, spec.assistant_hub_id)
    owners = kv_owner_layers(text_config(target))
    assert (owners["sliding_attention"], owners["full_attention"]) == OWNERS[size]


def test_mismatched_sizes_are_refused(hub: dict[str, str]) -> None:
    from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

    argv = ["--config", str(SIZE_FILES["E4B"])]
    argv += [
        "--speculative-config",
        '{"method": "frozen_kv_mtp", "model": "google/gemma-4-31B-it-assistant"}',
    ]
    with pytest.raises(FrozenKVMTPConfigError, match="backbone_hidden_size"):
        _engine_config_from_argv(argv, hub)


def _ray_llm_configs(name: str) -> list[dict[str, Any]]:
    from devkit.serving.ray_serve import llm_configs_from_yaml

    cfgs = llm_configs_from_yaml(CONFIGS / name)
    assert cfgs, f"{name} has no ray.serve.llm:build_openai_app application"
    return cfgs


def test_ray_serve_gpu_yaml_engine_kwargs_validate(hub: dict[str, str]) -> None:
    """What each GPU replica hands to vLLM (model + engine_kwargs) validates on real shapes."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    for c in _ray_llm_configs("ray_serve_gpu.yaml"):
        ek = dict(c["engine_kwargs"])
        source = c["model_loading_config"]["model_source"]
        size = next(s for s, sp in SHAPES.items() if sp.hub_id == source)
        assert ek["speculative_config"]["model"] == shape(size).assistant_hub_id
        ek["speculative_config"] = {
            **ek["speculative_config"],
            "model": hub[ek["speculative_config"]["model"]],
        }
        args = AsyncEngineArgs(model=hub[source], skip_tokenizer_init=True, **ek)
        _check(args.create_engine_config(), size, ek["tensor_parallel_size"], ek["max_model_len"])


def _readme_commands(prefix: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("<!-- serving:begin -->", 1)[1].split("<!-- serving:end -->", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", section)  # fold shell line continuations
    return [line.strip() for line in joined.splitlines() if line.strip().startswith(prefix)]


def test_readme_gpu_serve_commands_validate(hub: dict[str, str]) -> None:
    """Every `vllm serve` line in the README's serving section parses and validates."""
    commands = _readme_commands("vllm serve")
    assert commands, "README serving section has no `vllm serve` example"
    for cmd in commands:
        argv = shlex.split(cmd.split("#", 1)[0])[2:]
        if argv and not argv[0].startswith("-"):
            argv = ["--model", argv[0], *argv[1:]]  # `vllm serve MODEL` positional
        argv = [str(REPO / a) if a.startswith("configs/") else a for a in argv]
        cfg = _engine_config_from_argv(argv, hub)
        size = next(s for s, sp in SHAPES.items() if hub[sp.hub_id] == cfg.model_config.model)
        _check(cfg, size, shape(size).tp, shape(size).max_model_len)


def test_shape_dirs_are_config_only(hub: dict[str, str]) -> None:
    for path in hub.values():
        assert sorted(p.name for p in Path(path).iterdir()) == ["config.json"]
