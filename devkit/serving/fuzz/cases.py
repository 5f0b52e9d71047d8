"""The fuzzer's requests: seeded cases (prompts, sampling knobs, output controls, one
deliberately invalid field now and then), each with the answer it must get, and which
greedy ones the plain server must reproduce."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devkit.fixtures.prompts import CODE_PROMPTS

UNICODE_PROMPTS = (
    "emoji 🙂🚀 family 👩‍👩‍👧 flag 🇩🇪",
    "RTL: שלום עולם / مرحبا بالعالم ‏mixed‎ ltr",
    "combining: e\u0301\u0302\u0303 Z\u0324\u0354\u0367\u0311 a\u20dd",
    "zero width a\u200bb\u200cc\u200dd\ufeff",
    "CJK 日本語のテキスト 한국어 中文",
    "control \u0000 \u0007 \u001b[31m",
)

JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
    "required": ["name", "n"],
    "additionalProperties": False,
}
REGEX = r"[a-z]{2,6}_[0-9]{1,3}"
CHOICES = ["yes", "no", "maybe"]
#: Gemma 4's recommended sampling (its model cards), what most sampled traffic will send
GEMMA_RECOMMENDED: dict[str, Any] = {"temperature": 1.0, "top_p": 0.95, "top_k": 64}


@dataclass(frozen=True)
class Limits:
    """What the server was started with (the generator aims inside and outside them)."""

    vocab_size: int = 512
    max_model_len: int = 512
    max_logprobs: int = 20


@dataclass(frozen=True)
class Case:
    index: int
    chat: bool
    stream: bool
    payload: dict[str, Any]
    #: "ok" (must be served), "refuse" (must get a 4xx) or "any" (either)
    expect: str = "ok"
    #: close the connection after this many content chunks (streams only)
    abort_after_chunks: int | None = None
    #: what the case exercises, e.g. ("prompt:unicode", "invalid:top_p")
    tags: tuple[str, ...] = ()

    @property
    def mode(self) -> str:
        return ("chat" if self.chat else "completions") + ("-stream" if self.stream else "")


def _prompt(rng: random.Random, lim: Limits, chat: bool) -> tuple[Any, str, str]:
    """(prompt, kind, expect) for completions; chat callers take the text of it."""
    kind = rng.choices(
        ["code", "unicode", "empty", "one_token", "token_ids", "near_max", "past_max", "oov"],
        weights=[30, 12, 4, 6, 10 if not chat else 0, 5, 3, 3 if not chat else 0],
    )[0]
    if kind == "code":
        return rng.choice(CODE_PROMPTS) * rng.choice([1, 1, 2, 8]), kind, "ok"
    if kind == "unicode":
        return " ".join(rng.sample(UNICODE_PROMPTS, rng.randint(1, 3))), kind, "ok"
    if kind == "empty":  # completions refuse an empty prompt; chat renders the template
        return ("" if chat else rng.choice(["", []])), kind, ("ok" if chat else "refuse")
    if kind == "one_token":
        return ("x" if chat else [rng.randrange(3, lim.vocab_size)]), kind, "ok"
    if kind == "token_ids":
        return [rng.randrange(lim.vocab_size) for _ in range(rng.randint(1, 64))], kind, "ok"
    if kind == "near_max":  # the server shortens max_tokens to what fits
        n = lim.max_model_len - rng.randint(1, 8)
        if chat:
            return "ab " * ((n - 40) // 2), kind, "any"  # template and BPE make it inexact
        return [rng.randrange(3, lim.vocab_size) for _ in range(n)], kind, "ok"
    if kind == "past_max":
        n = lim.max_model_len + rng.choice([0, 1, 100])
        if chat:
            return "ab " * (2 * n), kind, "refuse"
        return [rng.randrange(3, lim.vocab_size) for _ in range(n)], kind, "refuse"
    ids = [rng.randrange(lim.vocab_size) for _ in range(rng.randint(1, 8))]
    ids.insert(rng.randrange(len(ids) + 1), lim.vocab_size + rng.choice([0, 1, 10_000]))
    return ids, kind, "refuse"


def _sampling(rng: random.Random, lim: Limits) -> dict[str, Any]:
    if rng.random() < 0.1:
        p: dict[str, Any] = dict(GEMMA_RECOMMENDED)
        if rng.random() < 0.3:
            p["n"] = rng.randint(2, 3)
        if rng.random() < 0.4:
            p["seed"] = rng.randrange(-(2**31), 2**31)
        return p
    p = {"temperature": rng.choice([0.0] * 4 + [0.3, 0.7, 1.0, 1.0, 1.5, 2.0])}
    greedy = p["temperature"] == 0.0
    if rng.random() < 0.5:
        p["top_p"] = rng.choice([0.01, 0.5, 0.9, 0.95, 1.0])
    if rng.random() < 0.6:
        p["top_k"] = rng.choice([-1, 0, 1, 2, 20, 64, lim.vocab_size, lim.vocab_size + 1, 10**6])
    if rng.random() < 0.12:
        p["min_p"] = rng.choice([0.0, 0.05, 0.2, 0.9])
    if rng.random() < 0.2:
        p["presence_penalty"] = rng.choice([-2.0, -0.5, 0.5, 2.0])
    if rng.random() < 0.2:
        p["frequency_penalty"] = rng.choice([-2.0, -0.5, 0.5, 2.0])
    if rng.random() < 0.2:
        p["repetition_penalty"] = rng.choice([0.5, 1.0, 1.2, 2.0])
    if rng.random() < 0.06:
        ids = rng.sample(range(lim.vocab_size), rng.randint(1, 8))
        p["logit_bias"] = {str(i): rng.choice([-100.0, -5.0, 5.0, 100.0]) for i in ids}
    if not greedy and rng.random() < 0.4:
        p["n"] = rng.randint(1, 3)
    if rng.random() < 0.4:
        p["seed"] = rng.randrange(-(2**31), 2**31)
    return p


def _controls(rng: random.Random, lim: Limits, chat: bool, stream: bool) -> dict[str, Any]:
    p: dict[str, Any] = {
        "max_tokens": rng.choice([1, 1, 2, 3, 5, 8, 16, 32, 64, None]),
    }
    if rng.random() < 0.3:
        p["stop"] = rng.sample(["\n", "):", "self", " ", "e", "return", "\n\n"], rng.randint(1, 3))
    if rng.random() < 0.2:
        p["stop_token_ids"] = rng.sample(range(lim.vocab_size), rng.randint(1, 4))
    if rng.random() < 0.25:
        k = rng.randint(0, 5)
        p.update({"logprobs": True, "top_logprobs": k} if chat else {"logprobs": k})
    if not stream and rng.random() < 0.15:
        p["prompt_logprobs"] = rng.randint(0, 3)
    if rng.random() < 0.2:
        which = rng.choice(["response_format", "json", "regex", "choice"])
        if which == "response_format":
            p["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "obj", "schema": JSON_SCHEMA},
            }
        else:
            value = {"json": JSON_SCHEMA, "regex": REGEX, "choice": CHOICES}[which]
            p["structured_outputs"] = {which: value}
    if rng.random() < 0.1:
        p["ignore_eos"] = True
    if stream and rng.random() < 0.5:
        p["stream_options"] = {"include_usage": True}
    return p


#: one deliberately invalid field each: (tag, field updates); such a case must be refused
INVALID: tuple[tuple[str, Callable[[Limits], dict[str, Any]]], ...] = (
    ("temperature_high", lambda lim: {"temperature": 3.5}),
    ("temperature_negative", lambda lim: {"temperature": -0.5}),
    ("top_p_zero", lambda lim: {"top_p": 0.0}),
    ("top_p_high", lambda lim: {"top_p": 1.5}),
    ("top_k_negative", lambda lim: {"top_k": -5}),
    ("min_p_high", lambda lim: {"min_p": 1.5}),
    ("n_zero", lambda lim: {"n": 0}),
    ("n_greedy", lambda lim: {"n": 3, "temperature": 0.0}),
    ("max_tokens_zero", lambda lim: {"max_tokens": 0}),
    ("max_tokens_huge", lambda lim: {"max_tokens": 10**7}),
    ("max_tokens_negative", lambda lim: {"max_tokens": -1}),
    ("logprobs_high", lambda lim: {"logprobs": lim.max_logprobs + 10}),
    ("logit_bias_oov", lambda lim: {"logit_bias": {str(lim.vocab_size + 3): 1.0}}),
    ("stop_token_oov", lambda lim: {"stop_token_ids": [lim.vocab_size + 7]}),
    ("repetition_penalty_zero", lambda lim: {"repetition_penalty": 0.0}),
    ("prompt_logprobs_stream", lambda lim: {"prompt_logprobs": 1, "stream": True}),
)


def generate(n: int, model: str, *, seed: int = 0, limits: Limits | None = None) -> list[Case]:
    """``n`` seeded cases: about 80% valid ones, the rest refusals of some kind."""
    lim = limits or Limits()
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        chat = rng.random() < 0.4
        stream = rng.random() < 0.45
        prompt, kind, expect = _prompt(rng, lim, chat)
        tags = [f"prompt:{kind}"]
        payload: dict[str, Any] = {"model": model, "return_token_ids": True}
        if chat:
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            payload["messages"] = [{"role": "user", "content": text}]
        else:
            payload["prompt"] = prompt
        payload.update(_sampling(rng, lim))
        payload.update(_controls(rng, lim, chat, stream))
        if expect == "ok" and spec_refuses(payload):
            expect = "refuse"
            tags.append("spec_unsupported:min_p_logit_bias")
        elif expect == "ok" and rng.random() < 0.12:
            tag, make = rng.choice(INVALID)
            upd = make(lim)
            if chat and tag == "logprobs_high":
                upd = {"logprobs": True, "top_logprobs": lim.max_logprobs + 10}
            payload.update(upd)
            expect, stream = "refuse", bool(payload.get("stream", stream))
            tags.append(f"invalid:{tag}")
        if all(payload.get(k) == v for k, v in GEMMA_RECOMMENDED.items()):
            tags.append("sampling:gemma_recommended")
        payload["stream"] = stream
        if not stream:
            payload.pop("stream_options", None)
        abort = rng.randint(1, 4) if stream and expect != "refuse" and rng.random() < 0.2 else None
        if abort:
            tags.append("abort")
        cases.append(Case(i, chat, stream, payload, expect, abort, tuple(tags)))
    return cases


def spec_refuses(payload: dict[str, Any]) -> bool:
    """vLLM 0.32 refuses ``logit_bias``, and ``min_p`` > 0 unless greedy (greedy resets it to
    0 first), under any speculative method (400: "not yet supported with speculative
    decoding"): an upstream limit, expected as such."""
    sampled = (payload.get("temperature") or 0.0) >= 1e-5
    return bool(payload.get("logit_bias")) or (sampled and (payload.get("min_p") or 0.0) > 1e-5)


def greedy_comparable(case: Case) -> bool:
    """Whether the speculating server must reproduce the plain server's output exactly.

    Temperature 0 and nothing that edits logits (penalties, ``logit_bias``, ``min_p``):
    vLLM applies those per verified position, and the rule keeps the comparison to what
    the rejection sampler guarantees bit-for-bit. Aborted and refused cases are out.
    Structured outputs are in: the grammar masks the same logits either way.
    """
    p = case.payload
    if case.expect == "refuse" or case.abort_after_chunks is not None:
        return False
    if p.get("temperature") != 0.0:
        return False
    editing = ("presence_penalty", "frequency_penalty", "logit_bias", "min_p")
    if any(p.get(k) for k in editing):
        return False
    return p.get("repetition_penalty") in (None, 1.0)
