"""Reference frozen-KV drafting in plain PyTorch on transformers' Gemma 4 classes.

Independent of vLLM and of the plugin (no vLLM import): tests compare the
plugin's draft tokens against :func:`reference_drafts` token for token.

Convention (vLLM's and SGLang's, not HF's candidate generator, which queries one
slot later): for committed tokens ``c_0..c_p`` and the bonus token ``b`` (the
target's token after ``c_p``), every draft step queries position ``p`` over the
target's K/V of keys ``0..p`` (the last ``sliding_window`` of them on sliding
layers). Step 1 reads ``[target_embed(b) * sqrt(D), h_p]`` where ``h_p`` is the
target's post-norm final hidden at ``p``; step ``j`` reads the previous draft
token and the previous step's ``post_projection`` output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: per layer type: (K, V), each [batch, kv_heads, keys, head_dim], post k_norm/v_norm/RoPE
KV = dict[str, tuple[torch.Tensor, torch.Tensor]]


@dataclass
class TargetState:
    """What the drafter reads from the target for a committed prefix."""

    #: [batch, tokens, backbone] post-final-norm hidden states
    hidden: torch.Tensor
    #: K/V of the target's last non-KV-shared layer of each type (HF's ``shared_kv_states``)
    kv: KV


@torch.no_grad()
def target_state(target: Any, input_ids: torch.Tensor) -> TargetState:
    """Run the target over ``input_ids`` [batch, tokens] without a cache."""
    out = target.model(input_ids=input_ids, use_cache=False, return_shared_kv_states=True)
    return TargetState(hidden=out.last_hidden_state, kv=dict(out.shared_kv_states))


def window_kv(kv: KV, position: int, sliding_window: int | None) -> KV:
    """Keys a query at ``position`` may read: ``0..position``, windowed on sliding layers."""
    end = position + 1
    out: KV = {}
    for layer_type, (k, v) in kv.items():
        start = 0
        if layer_type == "sliding_attention" and sliding_window is not None:
            start = max(0, end - sliding_window)
        out[layer_type] = (k[:, :, start:end], v[:, :, start:end])
    return out


def assistant_logits(assistant: Any, h: torch.Tensor) -> torch.Tensor:
    """Draft logits from the assistant's post-norm hidden (dense or centroid-masked head)."""
    if assistant.config.use_ordered_embeddings:
        return assistant.masked_embedding(h, assistant.lm_head.weight)
    return assistant.lm_head(h)


def assistant_layers(
    assistant: Any, z: torch.Tensor, position_ids: torch.Tensor, kv: KV, masks: dict[str, Any]
) -> torch.Tensor:
    """The assistant's decoder layers + final norm on ``z`` [batch, q, hidden], reading ``kv``."""
    out = assistant.model(
        inputs_embeds=z,
        position_ids=position_ids,
        attention_mask=masks,  # a dict bypasses HF's own (bidirectional) mask building
        shared_kv_states=dict(kv),
        use_cache=False,
    )
    return out.last_hidden_state


@torch.no_grad()
def draft_step(
    assistant: Any, target: Any, token: torch.Tensor, hidden: torch.Tensor, position: int, kv: KV
) -> tuple[torch.Tensor, torch.Tensor]:
    """One draft step for one query per row: returns (logits [batch, vocab], next hidden).

    ``token`` [batch], ``hidden`` [batch, backbone]; ``kv`` already cut to the keys
    the query may read (see :func:`window_kv`), so no mask is needed.
    """
    embed = target.model.embed_tokens(token[:, None])  # includes the sqrt(backbone) scale
    x = torch.cat([embed, hidden[:, None].to(embed.dtype)], dim=-1)
    z = assistant.pre_projection(x)
    pos = torch.full((token.shape[0], 1), position, dtype=torch.long, device=token.device)
    h = assistant_layers(assistant, z, pos, kv, {"full_attention": None, "sliding_attention": None})
    return assistant_logits(assistant, h)[:, 0], assistant.post_projection(h)[:, 0]


@torch.no_grad()
def reference_drafts(
    target: Any, assistant: Any, committed: Sequence[int], bonus: int, k: int
) -> list[int]:
    """The ``k`` greedy draft tokens for ``committed`` (prompt + accepted) and ``bonus``."""
    if not committed:
        raise ValueError("need at least one committed token")
    device = target.device
    ids = torch.tensor([list(committed)], dtype=torch.long, device=device)
    state = target_state(target, ids)
    p = len(committed) - 1
    window = getattr(target.config.get_text_config(), "sliding_window", None)
    kv = window_kv(state.kv, p, window)
    token = torch.tensor([bonus], dtype=torch.long, device=device)
    hidden = state.hidden[:, p]
    drafts: list[int] = []
    for _ in range(k):
        logits, hidden = draft_step(assistant, target, token, hidden, p, kv)
        token = logits.argmax(-1)
        drafts.append(int(token.item()))
    return drafts


def load_pair(
    target_dir: str | Path, assistant_dir: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any]:
    """Load a target and its assistant with transformers, in eval mode."""
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    target = Gemma4ForCausalLM.from_pretrained(str(target_dir), dtype=dtype).eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(str(assistant_dir), dtype=dtype).eval()
    return target, assistant
