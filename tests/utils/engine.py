"""Helpers for tests that drive a real in-process vLLM engine on CPU."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Iterator
from typing import Any

from devkit.instrument import drafter, model_runner, spec_metrics

__all__ = [
    "drafter",
    "engine",
    "engine_core",
    "model_runner",
    "outputs",
    "plugin_log",
    "spec_metrics",
]

ENGINE_DEFAULTS: dict[str, Any] = dict(
    max_model_len=512,
    max_num_seqs=8,
    enforce_eager=True,
    gpu_memory_utilization=float(os.environ.get("FROZEN_KV_MTP_TEST_MEM", "0.2")),
    # A small, fixed KV cache: fast start-up, little RAM, cheap KV checksums.
    kv_cache_memory_bytes=int(os.environ.get("FROZEN_KV_MTP_TEST_KV_BYTES", 128 << 20)),
    disable_log_stats=False,
    seed=0,
)


def make_llm(target: str, spec: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """An in-process ``LLM`` (VLLM_ENABLE_V1_MULTIPROCESSING=0 is set by conftest)."""
    from devkit.demo import tiny_llm

    return tiny_llm(target, spec, **{**ENGINE_DEFAULTS, **kwargs})


@contextlib.contextmanager
def engine(target: str, spec: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[Any]:
    llm = make_llm(target, spec, **kwargs)
    try:
        yield llm
    finally:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def engine_core(llm: Any) -> Any:
    return llm.llm_engine.engine_core.engine_core


def num_preemptions(llm: Any) -> int:
    """How many times the scheduler preempted a request (vLLM's counter)."""
    return sum(int(m.value) for m in llm.get_metrics() if m.name == "vllm:num_preemptions")


def outputs(results: list[Any]) -> list[tuple[list[int], str, str | None]]:
    """(token ids, text, finish reason) of each request's first completion."""
    return [
        (list(r.outputs[0].token_ids), r.outputs[0].text, r.outputs[0].finish_reason)
        for r in results
    ]


@contextlib.contextmanager
def record_drafts(llm: Any) -> Iterator[list[list[list[int]]]]:
    """Record the draft token ids of every round (host copies; tests only)."""
    d = drafter(llm)
    rounds: list[list[list[int]]] = []
    original = d.propose

    def propose(*args: Any, **kwargs: Any) -> Any:
        draft = original(*args, **kwargs)
        rounds.append(draft.cpu().tolist())
        return draft

    d.propose = propose
    try:
        yield rounds
    finally:
        del d.propose


PROMPTS = [
    "def forward(self, hidden_states):",
    "class Gemma4Model(nn.Module):",
    "import torch\n",
    "return hidden_states",
    "    def __init__(self, config):\n        super().__init__()",
    "# Copyright 2025 Google Inc.",
    "attention_mask = None",
    "from transformers import",
    "x = self.norm(x)\n" * 6,
    "if self.config.use_cache:\n    past_key_values = DynamicCache()",
    "logits = self.lm_head(hidden_states)",
    "for layer in self.layers:\n    hidden_states = layer(hidden_states)\n" * 3,
    "self.rotary_emb = Gemma4RotaryEmbedding(config=config)",
    '"""Gemma 4 model."""',
    "query_states = self.q_proj(hidden_states).view(hidden_shape)",
    "position_ids = cache_position.unsqueeze(0)\n" * 4,
    "@auto_docstring\nclass Gemma4ForCausalLM(Gemma4PreTrainedModel):",
    "    return self.embed_tokens(input_ids) * self.embed_scale",
]


def clear_margin_case(variant: str) -> tuple[str, str, list[Any], dict[str, Any]]:
    """(target, assistant, prompts, engine kwargs) of a pair whose greedy output does
    not hinge on logit near-ties: the committed trained pair (on its held-out
    prompts) or a fixture variant such as ``fp32-oracle`` (on PROMPTS)."""
    if variant == "trained":
        from devkit.fixtures.trained import eval_prompts, trained_pair_paths

        t, a = trained_pair_paths()
        prompts: list[Any] = [{"prompt_token_ids": p} for p in eval_prompts()]
        return str(t), str(a), prompts, {"dtype": "float32", "max_num_seqs": len(prompts)}
    from tests.conftest import pair

    t, a = pair(variant)
    return t, a, list(PROMPTS), {}


@contextlib.contextmanager
def plugin_log(level: int = logging.INFO) -> Iterator[list[str]]:
    """The plugin's log messages while the block runs. vLLM's logging config keeps them
    from pytest's caplog, and reapplying it (an engine starting) drops the handlers of
    loggers under "vllm", so this wraps the plugin logger's ``handle`` instead."""
    seen: list[str] = []
    log = logging.getLogger("vllm.frozen_kv_mtp")
    original = log.handle

    def handle(record: logging.LogRecord) -> None:
        if record.levelno >= level:
            seen.append(record.getMessage())
        original(record)

    log.handle = handle  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del log.handle
