"""The reference drafter without vLLM: shapes, determinism, HF agreement, and the
committed trained pair's checksums and training/inference consistency."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from devkit.fixtures.reference import (
    draft_step,
    load_pair,
    reference_drafts,
    target_state,
    window_kv,
)
from devkit.fixtures.trained import (
    TRAINED_DIR,
    TrainedPairError,
    eval_prompts,
    trained_pair_paths,
    verify_checksums,
)
from tests.conftest import pair

WINDOW = 32


@pytest.fixture(scope="module")
def random_pair() -> tuple[Any, Any]:
    return load_pair(*pair("fp32"))


@pytest.fixture(scope="module")
def trained_pair() -> tuple[Any, Any]:
    return load_pair(*trained_pair_paths())


def _ids(n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 512, (n,), generator=g).tolist()


@pytest.mark.parametrize("length", [5, WINDOW + 20])
def test_shape_range_and_determinism(random_pair: tuple[Any, Any], length: int) -> None:
    target, assistant = random_pair
    committed, bonus = _ids(length), 77
    drafts = reference_drafts(target, assistant, committed, bonus, 3)
    assert len(drafts) == 3 and all(isinstance(t, int) and 0 <= t < 512 for t in drafts)
    assert reference_drafts(target, assistant, committed, bonus, 3) == drafts
    # the chain is recurrent: a shorter round is a prefix of a longer one
    assert reference_drafts(target, assistant, committed, bonus, 1) == drafts[:1]


def test_drafts_depend_on_bonus_and_context(random_pair: tuple[Any, Any]) -> None:
    target, assistant = random_pair
    committed = _ids(40)
    base = reference_drafts(target, assistant, committed, 77, 3)
    others = [reference_drafts(target, assistant, committed, b, 3) for b in (78, 200, 300)]
    others += [reference_drafts(target, assistant, _ids(40, s), 77, 3) for s in (1, 2)]
    assert any(o != base for o in others)


def test_step_matches_hf_assistant_forward(random_pair: tuple[Any, Any]) -> None:
    """Our single-query step equals HF's own assistant forward on the same window of KV."""
    target, assistant = random_pair
    committed = _ids(WINDOW + 9)
    p = len(committed) - 1
    state = target_state(target, torch.tensor([committed]))
    kv = window_kv(state.kv, p, WINDOW)
    token = torch.tensor([123])
    logits, hidden = draft_step(assistant, target, token, state.hidden[:, p], p, kv)
    with torch.no_grad():
        embeds = torch.cat(
            [target.model.embed_tokens(token[:, None]), state.hidden[:, p : p + 1]], -1
        )
        hf = assistant(inputs_embeds=embeds, position_ids=torch.tensor([[p]]), shared_kv_states=kv)
    torch.testing.assert_close(logits, hf.logits[:, 0])
    torch.testing.assert_close(hidden, hf.last_hidden_state[:, 0])


def test_train_objective_equals_reference_steps(random_pair: tuple[Any, Any]) -> None:
    """The parallel distillation forward reads what inference reads, at every query."""
    from devkit.fixtures.train import frozen_kv_forward

    target, assistant = random_pair
    k, ids = 3, torch.tensor([_ids(WINDOW + 24, seed=5)])
    with torch.no_grad():
        logits, _ = frozen_kv_forward(target, assistant, ids, 0, k)
    state = target_state(target, ids)
    for p in (0, 7, WINDOW - 1, WINDOW + 5, ids.shape[1] - k - 1):
        kv = window_kv(state.kv, p, WINDOW)
        hidden = state.hidden[:, p]
        for j in range(1, k + 1):
            step_logits, hidden = draft_step(assistant, target, ids[:, p + j], hidden, p, kv)
            torch.testing.assert_close(step_logits, logits[j - 1][:, p], atol=2e-4, rtol=1e-4)


def test_committed_checksums_match() -> None:
    verify_checksums(TRAINED_DIR)
    files = {p.relative_to(TRAINED_DIR).as_posix() for p in TRAINED_DIR.rglob("*") if p.is_file()}
    assert {"target/model.safetensors", "assistant/model.safetensors", "metrics.json"} <= files
    assert sum((TRAINED_DIR / f).stat().st_size for f in files) < 10 * 2**20


def test_corruption_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "trained"
    shutil.copytree(TRAINED_DIR, root)
    weights = root / "assistant" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(TrainedPairError, match="assistant/model.safetensors"):
        verify_checksums(root, prefixes=("target/", "assistant/"))


def test_trained_pair_loads_in_transformers(trained_pair: tuple[Any, Any]) -> None:
    target, assistant = trained_pair
    assert type(assistant).__name__ == "Gemma4AssistantForCausalLM"
    tc = target.config
    assert tc.sliding_window < min(len(p) for p in eval_prompts()[1:4])
    head_dims = {tc.per_layer_config[i].head_dim for i in range(tc.num_hidden_layers)}
    assert len(head_dims) == 2  # sliding head_dim != global_head_dim, as in real Gemma 4
    assert set(tc.layer_types) == {"sliding_attention", "full_attention"}
    assert assistant.config.backbone_hidden_size == tc.hidden_size
