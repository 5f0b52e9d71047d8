"""A seeded, bounded request fuzzer for vLLM's OpenAI server with ``frozen_kv_mtp``.

Random completions and chat requests (sampling knobs, output controls, odd prompts,
streams dropped mid-response) go to a speculating server, several in flight so that
mixed sampling parameters share batches (the shape of the past ``top_k`` crash). Pass:

* no engine death: ``/health`` and a final plain request answer after the run;
* no 5xx, no dropped connection but our own aborts, every refusal a 4xx with a message;
* each case's expectation holds: valid cases are served, deliberately invalid ones refused;
* greedy outputs equal a no-speculation server's for the same request (see
  :func:`greedy_comparable` for which requests are compared);
* ``vllm:kv_cache_usage_perc`` is back to 0 once the server is idle.

Only loopback URLs are accepted. ``python -m vllm_frozen_kv_mtp.serving.fuzz --help``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import requests

from vllm_frozen_kv_mtp.fixtures.prompts import CODE_PROMPTS
from vllm_frozen_kv_mtp.serving import client

#: the outcomes a run may contain and pass ("upstream:" ones are named vLLM bugs, see below)
PASSING = frozenset({"ok", "refused_4xx", "client_abort", "upstream:grammar_stop_token_dead_end"})

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


# ----------------------------------------------------------------------------- generator


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
    p: dict[str, Any] = {"temperature": rng.choice([0.0] * 4 + [0.3, 0.7, 1.0, 1.0, 1.5, 2.0])}
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


# ----------------------------------------------------------------------------- transport


@dataclass
class Choice:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    has_logprobs: bool = False


@dataclass
class Outcome:
    """What came back for one case. ``status`` is None when no HTTP status arrived."""

    status: int | None = None
    body: str = ""
    choices: dict[int, Choice] = field(default_factory=dict)
    aborted: bool = False
    transport_error: str | None = None
    #: an ``{"error": ...}`` event inside a 200 stream
    stream_error: dict[str, Any] | None = None
    done: bool = False
    chunks: int = 0
    has_prompt_logprobs: bool = False
    latency_s: float = 0.0

    def key(self) -> list[tuple[tuple[int, ...], str, str | None]]:
        """What greedy runs must agree on, choice by choice."""
        return [
            (tuple(c.token_ids), c.text, c.finish_reason) for _, c in sorted(self.choices.items())
        ]


def _absorb(out: Outcome, event: dict[str, Any], chat: bool, stream: bool) -> None:
    # chat puts prompt_logprobs on the response, completions on each choice
    if event.get("prompt_logprobs") is not None:
        out.has_prompt_logprobs = True
    for raw in event.get("choices") or []:
        c = out.choices.setdefault(int(raw.get("index", 0)), Choice())
        if chat:
            msg = raw.get("delta" if stream else "message") or {}
            piece = msg.get("content") or ""
        else:
            piece = raw.get("text") or ""
        ids = raw.get("token_ids") or []
        if piece or ids:
            out.chunks += 1
        c.text += piece
        c.token_ids.extend(ids)
        c.has_logprobs |= raw.get("logprobs") is not None
        out.has_prompt_logprobs |= raw.get("prompt_logprobs") is not None
        if raw.get("finish_reason") is not None:
            c.finish_reason = raw["finish_reason"]


def check_url(url: str) -> str:
    """Refuse anything but a loopback http URL (the fuzzer must never reach out)."""
    u = urlparse(url)
    if u.scheme != "http" or u.hostname != "127.0.0.1" or not u.port:
        raise ValueError(f"fuzz targets must be http://127.0.0.1:<port>, got {url!r}")
    return url.rstrip("/")


def send(base_url: str, case: Case, timeout_s: float = 120.0) -> Outcome:
    path = "/v1/chat/completions" if case.chat else "/v1/completions"
    out = Outcome()
    t0 = time.perf_counter()
    try:
        with requests.post(
            base_url + path, json=case.payload, stream=case.stream, timeout=(10, timeout_s)
        ) as r:
            out.status = r.status_code
            if r.status_code != 200:
                out.body = r.text[:1000]
            elif not case.stream:
                _absorb(out, r.json(), case.chat, stream=False)
                out.done = True
            else:
                _read_stream(r, out, case)
    except (requests.RequestException, ValueError) as e:
        out.transport_error = f"{type(e).__name__}: {e}"[:500]
    out.latency_s = time.perf_counter() - t0
    return out


def _read_stream(r: requests.Response, out: Outcome, case: Case) -> None:
    for line in r.iter_lines():
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            out.done = True
            return
        event = json.loads(data)
        if "error" in event:
            out.stream_error = event["error"]
            return
        _absorb(out, event, case.chat, stream=True)
        if case.abort_after_chunks is not None and out.chunks >= case.abort_after_chunks:
            out.aborted = True  # leaving the ``with`` closes the socket mid-stream
            return


# ----------------------------------------------------------------------------- checker


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    err = data.get("error", data) if isinstance(data, dict) else {}
    msg = err.get("message") or err.get("detail") if isinstance(err, dict) else None
    return str(msg or "")


def prompt_text_leaks(case: Case, c: Choice) -> bool:
    """Upstream (vLLM 0.32 detokenizer), named ``detok_prompt_leak``: when a token-id prompt
    decodes to text ending in U+FFFD (a cut UTF-8 sequence), the first output text starts
    with the prompt's text; the token ids are right. Reproduction: completions with
    ``prompt=[81, 254]``, ``max_tokens=2``, temperature 0 on the tiny trained pair return
    ``token_ids=[17, 202]`` (".\\n") but ``text="n\ufffd.\\n"``. Seen as U+FFFD in the text."""
    return isinstance(case.payload.get("prompt"), list) and "\ufffd" in c.text


def _structured_violation(case: Case, c: Choice) -> str | None:
    """A finished (``stop``) constrained output that breaks its constraint."""
    p = case.payload
    if c.finish_reason != "stop" or p.get("stop") or p.get("stop_token_ids"):
        return None  # a stop string or stop token may end it inside the grammar
    so = p.get("structured_outputs") or {}
    text = c.text
    if prompt_text_leaks(case, c):
        if "choice" not in so and "regex" not in so:
            return None  # JSON strings may hold U+FFFD themselves: no clean cut
        text = text.rsplit("\ufffd", 1)[1]  # choices and REGEX have no U+FFFD
    if "choice" in so and text not in so["choice"]:
        return f"{text!r} is not one of {so['choice']}"
    if "regex" in so and not re.fullmatch(so["regex"], text):
        return f"{text!r} does not match {so['regex']!r}"
    if "json" in so or "response_format" in p:
        try:
            json.loads(text)
        except ValueError:
            return f"{text!r} is not JSON"
    return None


def _ok_violation(case: Case, out: Outcome) -> str | None:
    """Why a 200 answer is wrong, or None."""
    p = case.payload
    if not out.done:
        return "stream ended without [DONE]"
    n = p.get("n") or 1
    if sorted(out.choices) != list(range(n)):
        return f"choices {sorted(out.choices)} for n={n}"
    max_tokens = p.get("max_tokens")
    for i, c in out.choices.items():
        if c.finish_reason not in ("stop", "length"):
            return f"choice {i}: finish_reason {c.finish_reason!r}"
        if max_tokens is not None and len(c.token_ids) > max_tokens:
            return f"choice {i}: {len(c.token_ids)} tokens > max_tokens={max_tokens}"
        if (
            max_tokens is not None
            and c.finish_reason == "length"
            and len(c.token_ids) != max_tokens
            and "near_max" not in " ".join(case.tags)
        ):
            return f"choice {i}: 'length' after {len(c.token_ids)} of {max_tokens} tokens"
        if p.get("logprobs") not in (None, False) and c.text and not c.has_logprobs:
            return f"choice {i}: logprobs requested, none returned"
        if bad := _structured_violation(case, c):
            return f"choice {i}: {bad}"
    if p.get("prompt_logprobs") is not None and not out.has_prompt_logprobs:
        return "prompt_logprobs requested, none returned"
    return None


def grammar_stop_token_dead_end(case: Case, code: int | None) -> bool:
    """Upstream (vLLM 0.32), named ``grammar_stop_token_dead_end``: a request's
    ``stop_token_ids`` become xgrammar's ``override_stop_tokens``, so a stop token that the
    constraint needs as content leaves no allowed token; the all-masked row samples token 0,
    the scheduler's ``accept_tokens`` fails ("grammar rejected tokens [0]") and the request
    ends FINISHED_ERROR, a 500. The engine lives on. Reproduction without speculation:
    completions ``prompt="x"``, temperature 0, ``structured_outputs={"choice": ["yes"]}``,
    ``stop_token_ids=[86]`` (86 is "s", the last token of "yes" on the tiny trained pair).
    Matched as: a 500 on a request with both a grammar and ``stop_token_ids``."""
    p = case.payload
    grammar = p.get("structured_outputs") or p.get("response_format")
    return code == 500 and bool(grammar) and bool(p.get("stop_token_ids"))


def classify(case: Case, out: Outcome) -> tuple[str, str | None]:
    """(outcome, detail). Outcomes outside :data:`PASSING` fail the run."""
    if out.aborted:
        return "client_abort", None
    if out.transport_error is not None:
        return "dropped", out.transport_error
    if out.status is None:
        return "dropped", "no status"
    code = out.status if out.stream_error is None else out.stream_error.get("code")
    if grammar_stop_token_dead_end(case, code if isinstance(code, int) else None):
        return "upstream:grammar_stop_token_dead_end", None
    if out.status >= 500:
        return "server_error_5xx", f"{out.status}: {out.body[:300]}"
    if out.stream_error is not None:
        if isinstance(code, int) and 400 <= code < 500 and out.stream_error.get("message"):
            detail = f"{code}: {out.stream_error['message']}"
            return _against_expectation(case, "refused_4xx", detail)
        return "stream_error", json.dumps(out.stream_error)[:300]
    if 400 <= out.status < 500:
        msg = _error_message(out.body)
        if not msg:
            return "refused_without_message", f"{out.status}: {out.body[:300]}"
        return _against_expectation(case, "refused_4xx", f"{out.status}: {msg[:300]}")
    if out.status != 200:
        return "unexpected_status", f"{out.status}: {out.body[:300]}"
    if bad := _ok_violation(case, out):
        return "invalid_response", bad
    return _against_expectation(case, "ok", None)


def _against_expectation(case: Case, got: str, detail: str | None) -> tuple[str, str | None]:
    if case.expect == "ok" and got != "ok":
        return "unexpected_refusal", detail
    if case.expect == "refuse" and got == "ok":
        return "unexpected_accept", f"tags {case.tags}"
    return got, detail


# ----------------------------------------------------------------------------- runner


def run_cases(
    base_url: str,
    cases: Sequence[Case],
    *,
    concurrency: int = 8,
    deadline: float | None = None,
    timeout_s: float = 120.0,
) -> list[Outcome | None]:
    """Send ``cases`` (``concurrency`` in flight); None for those left when time ran out."""

    def one(case: Case) -> Outcome | None:
        if deadline is not None and time.monotonic() > deadline:
            return None
        return send(base_url, case, timeout_s)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, cases))


def end_checks(base_url: str, model: str, idle_timeout_s: float = 60.0) -> dict[str, Any]:
    """/health, one plain request, and the KV cache gauge once idle."""
    res: dict[str, Any] = {}
    try:
        res["health"] = requests.get(base_url + "/health", timeout=10).status_code
    except requests.RequestException as e:
        res["health"] = f"{type(e).__name__}"
    final = Case(
        -1,
        False,
        False,
        {"model": model, "prompt": "def f(", "max_tokens": 4, "return_token_ids": True},
    )
    out = send(base_url, final, timeout_s=60)
    res["final_request"] = classify(final, out)[0]
    try:
        m = client.wait_idle(base_url, timeout=idle_timeout_s)
        res["kv_cache_usage_perc"] = m.sum("vllm:kv_cache_usage_perc")
        res["requests_running"] = m.sum("vllm:num_requests_running")
        res["requests_waiting"] = m.sum("vllm:num_requests_waiting")
    except OSError as e:
        res["kv_cache_usage_perc"] = None
        res["metrics_error"] = f"{type(e).__name__}: {e}"
    res["engine_alive"] = res["health"] == 200 and res["final_request"] == "ok"
    return res


def fuzz(
    spec_url: str,
    plain_url: str | None,
    model: str,
    *,
    n: int = 100,
    seed: int = 0,
    concurrency: int = 8,
    max_seconds: float = 600.0,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """One run; returns the JSON summary (``passed`` says whether every check held)."""
    spec_url = check_url(spec_url)
    t0 = time.monotonic()
    cases = generate(n, model, seed=seed, limits=limits)
    outs = run_cases(spec_url, cases, concurrency=concurrency, deadline=t0 + max_seconds)
    outcomes: Counter[str] = Counter()
    per_mode: dict[str, Counter[str]] = defaultdict(Counter)
    failures = []
    refusals: Counter[str] = Counter()
    for case, out in zip(cases, outs, strict=True):
        kind, detail = ("not_sent", None) if out is None else classify(case, out)
        outcomes[kind] += 1
        if kind == "refused_4xx" and detail:
            refusals[re.sub(r"\d+", "N", detail.split("(parameter")[0])[:90].strip()] += 1
        per_mode[case.mode][kind] += 1
        if kind not in PASSING | {"not_sent"}:
            failures.append(
                {
                    "index": case.index,
                    "outcome": kind,
                    "detail": detail,
                    "tags": list(case.tags),
                    "payload": _short(case.payload),
                }
            )
    mismatches: list[dict[str, Any]] = []
    compared = 0
    if plain_url is not None:
        compared, mismatches = _compare_greedy(check_url(plain_url), cases, outs, concurrency)
    end = end_checks(spec_url, model)
    summary = {
        "requests": n,
        "seed": seed,
        "sent": n - outcomes["not_sent"],
        "elapsed_s": round(time.monotonic() - t0, 1),
        "outcomes": dict(sorted(outcomes.items())),
        "per_mode": {m: dict(sorted(c.items())) for m, c in sorted(per_mode.items())},
        "engine_deaths": 0 if end["engine_alive"] else 1,
        "server_errors_5xx": outcomes["server_error_5xx"],
        "tolerated_upstream": {k: v for k, v in outcomes.items() if k.startswith("upstream:")},
        "greedy_compared": compared,
        "mismatch_count": len(mismatches),
        "mismatches": mismatches[:5],
        "refusal_reasons": dict(refusals.most_common()),
        "failure_count": len(failures),
        "failures": failures[:10],
        "end": end,
    }
    summary["passed"] = passed(summary)
    return summary


def passed(summary: dict[str, Any]) -> bool:
    end = summary["end"]
    return (
        summary["engine_deaths"] == 0
        and summary["failure_count"] == 0
        and summary["mismatch_count"] == 0
        and set(summary["outcomes"]) <= PASSING | {"not_sent"}
        and end.get("kv_cache_usage_perc") == 0.0
    )


def _compare_greedy(
    plain_url: str, cases: Sequence[Case], outs: Sequence[Outcome | None], concurrency: int
) -> tuple[int, list[dict[str, Any]]]:
    picked = [i for i, c in enumerate(cases) if greedy_comparable(c) and outs[i] is not None]
    ref = run_cases(plain_url, [cases[i] for i in picked], concurrency=concurrency)
    mismatches = []
    for i, r in zip(picked, ref, strict=True):
        s = outs[i]
        assert s is not None and r is not None
        ks, kr = classify(cases[i], s)[0], classify(cases[i], r)[0]
        if ks != kr or (ks == "ok" and s.key() != r.key()):
            mismatches.append(
                {
                    "index": i,
                    "spec": [ks, s.key()[:1]],
                    "plain": [kr, r.key()[:1]],
                    "payload": _short(cases[i].payload),
                }
            )
    return len(picked), mismatches


def _short(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with long prompts elided, for reports."""
    out = dict(payload)
    for k in ("prompt", "messages"):
        v = json.dumps(out.get(k), ensure_ascii=False)
        if k in out and len(v) > 200:
            out[k] = v[:120] + f"... ({len(v)} chars)"
    return out


# ----------------------------------------------------------------------------- CLI


def _serve_pair(log_dir: Path, k: int) -> tuple[Any, Any, str]:
    """Start a speculating and a plain server on loopback with the committed trained pair."""
    from vllm_frozen_kv_mtp.fixtures.trained import trained_pair_paths
    from vllm_frozen_kv_mtp.serving.openai_server import start_server

    target, assistant = (str(p) for p in trained_pair_paths())
    template = Path(__file__).resolve().parents[2] / "configs" / "tiny-chat-template.jinja"
    common: dict[str, Any] = {"chat_template": str(template)} if template.is_file() else {}
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}
    s = start_server(target, log_path=log_dir / "spec.log", spec=spec, **common)
    p = start_server(target, log_path=log_dir / "plain.log", **common)
    for srv in (s, p):
        srv.wait_ready(timeout=600)
    return s, p, target


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100, help="number of requests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=600.0, help="stop sending after this")
    ap.add_argument("--spec-url", help="a running frozen_kv_mtp server (else one is started)")
    ap.add_argument("--plain-url", help="its no-speculation twin, for the greedy comparison")
    ap.add_argument("--model", help="served model name (with --spec-url)")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens of a started server")
    ap.add_argument("--log-dir", type=Path, help="server logs of a started pair")
    ap.add_argument("--out", type=Path, help="also write the summary here")
    a = ap.parse_args(argv)
    servers: tuple[Any, ...] = ()
    if a.spec_url:
        if not a.model:
            ap.error("--model is required with --spec-url")
        spec_url, plain_url, model = a.spec_url, a.plain_url, a.model
    else:
        log_dir = a.log_dir or Path(tempfile.mkdtemp(prefix="fuzz-"))
        s, p, model = _serve_pair(log_dir, a.k)
        servers, spec_url, plain_url = (s, p), s.url, p.url
    try:
        summary = fuzz(
            spec_url,
            plain_url,
            model,
            n=a.n,
            seed=a.seed,
            concurrency=a.concurrency,
            max_seconds=a.max_seconds,
        )
    finally:
        leftovers = [x for srv in servers for x in srv.stop()]
    if servers:
        summary["leftover_processes"] = leftovers
        summary["passed"] = summary["passed"] and not leftovers
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    print(text)  # noqa: T201 - the CLI's output
    if a.out:
        a.out.write_text(text + "\n")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
