"""Judging one outcome: what it is (served, refused, dropped, a 5xx, a named upstream vLLM
bug) and whether it is what the case expected."""

from __future__ import annotations

import json
import re

from devkit.serving.fuzz.cases import Case
from devkit.serving.fuzz.transport import Choice, Outcome, error_message

#: the outcomes a run may contain and pass ("upstream:" ones are named vLLM bugs, see below)
PASSING = frozenset({"ok", "refused_4xx", "client_abort", "upstream:grammar_stop_token_dead_end"})


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
        msg = error_message(out.body)
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
