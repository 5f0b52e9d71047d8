"""The request fuzzer: its checker on hand-made outcomes (no server), then a short seeded run
against the OpenAI server with frozen_kv_mtp on the trained pair, greedy outputs compared
with the same server without speculation. ``make fuzz`` runs a longer one.

The two upstream vLLM behaviours the fuzzer tolerates by name are pinned here against the
server without speculation, so the tolerance goes once vLLM fixes them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import requests

from devkit.serving import client, fuzz
from devkit.serving.fuzz import Case, Choice, Outcome
from tests.serving.conftest import Servers

MODEL = "m"
SHORT_N = 100


def _case(expect: str = "ok", **payload: Any) -> Case:
    body = {"model": MODEL, "prompt": "def f(", "max_tokens": 4, **payload}
    return Case(0, False, bool(payload.get("stream")), body, expect)


def _ok(*texts: str, n_tokens: int = 4, finish: str = "length") -> Outcome:
    choices = {i: Choice(t, list(range(n_tokens)), finish) for i, t in enumerate(texts)}
    return Outcome(status=200, choices=choices, done=True)


# ----------------------------------------------------------------------------- checker


def test_checker_passes_a_good_answer_and_a_refusal() -> None:
    assert fuzz.classify(_case(), _ok("abc")) == ("ok", None)
    refused = Outcome(status=400, body='{"error": {"message": "top_p must be in (0, 1]"}}')
    kind, detail = fuzz.classify(_case("refuse", top_p=0.0), refused)
    assert kind == "refused_4xx" and detail is not None and "top_p" in detail
    assert fuzz.classify(_case(stream=True), Outcome(status=200, aborted=True))[0] == (
        "client_abort"
    )


@pytest.mark.parametrize(
    "outcome, want",
    [
        (Outcome(status=500, body='{"error": {"message": "Internal server error"}}'), "5xx"),
        (Outcome(status=503, body=""), "5xx"),
        (Outcome(transport_error="ConnectionError: reset by peer"), "dropped"),
        (Outcome(), "dropped"),
        (Outcome(status=400, body="<html>bad</html>"), "refused_without_message"),
        (Outcome(status=422, body='{"error": {"message": ""}}'), "refused_without_message"),
        (Outcome(status=200, stream_error={"code": 500, "message": "boom"}), "stream_error"),
        (Outcome(status=302), "unexpected_status"),
    ],
    ids=["500", "503-empty", "reset", "no-status", "4xx-html", "4xx-empty", "sse-500", "302"],
)
def test_checker_fails_5xx_drops_and_refusals_without_a_message(
    outcome: Outcome, want: str
) -> None:
    kind, detail = fuzz.classify(_case("any"), outcome)
    assert want in kind and kind not in fuzz.PASSING, (kind, detail)


@pytest.mark.parametrize(
    "case, outcome, want",
    [
        (_case(), Outcome(status=400, body='{"error": {"message": "no"}}'), "unexpected_refusal"),
        (_case("refuse", top_p=0.0), _ok("abc"), "unexpected_accept"),
        (_case(), Outcome(status=200, choices={0: Choice("a", [1], "length")}), "invalid"),
        (_case(), _ok("abc", n_tokens=5), "invalid_response"),
        (_case(), _ok("abc", n_tokens=3), "invalid_response"),
        (_case(n=2), _ok("abc"), "invalid_response"),
        (_case(), _ok("abc", finish="abort"), "invalid_response"),
        (_case(logprobs=2), _ok("abc"), "invalid_response"),
        (_case(structured_outputs={"choice": ["yes"]}), _ok("yup", finish="stop"), "invalid"),
        (_case(structured_outputs={"regex": "[a-z]+"}), _ok("A1", finish="stop"), "invalid"),
        (_case(structured_outputs={"json": {}}), _ok("{", finish="stop"), "invalid"),
    ],
    ids=[
        "valid-refused",
        "invalid-accepted",
        "no-done",
        "over-max-tokens",
        "short-length",
        "missing-choice",
        "finish-abort",
        "no-logprobs",
        "choice",
        "regex",
        "json",
    ],
)
def test_checker_fails_broken_answers(case: Case, outcome: Outcome, want: str) -> None:
    kind, detail = fuzz.classify(case, outcome)
    assert kind.startswith(want) and kind not in fuzz.PASSING, (kind, detail)


def test_upstream_tolerances_are_narrow() -> None:
    grammar = {"structured_outputs": {"choice": ["yes"]}}
    err = Outcome(status=500, body='{"error": {"message": "Internal server error"}}')
    dead_end = _case(stop_token_ids=[86], **grammar)
    assert fuzz.classify(dead_end, err)[0] == "upstream:grammar_stop_token_dead_end"
    assert fuzz.classify(_case(**grammar), err)[0] == "server_error_5xx"  # no stop tokens
    assert fuzz.classify(_case(stop_token_ids=[86]), err)[0] == "server_error_5xx"  # no grammar
    # the detokenizer's prompt leak: only token-id prompts, only the U+FFFD-cut prefix
    leaked = _ok("n\ufffdyes", finish="stop")
    assert fuzz.classify(_case(prompt=[81, 254], **grammar), leaked)[0] == "ok"
    assert fuzz.classify(_case(**grammar), leaked)[0] == "invalid_response"  # text prompt
    wrong = _ok("n\ufffdyup", finish="stop")
    assert fuzz.classify(_case(prompt=[81, 254], **grammar), wrong)[0] == "invalid_response"


def test_summary_fails_on_any_bad_count() -> None:
    good: dict[str, Any] = {
        "engine_deaths": 0,
        "failure_count": 0,
        "mismatch_count": 0,
        "outcomes": {"ok": 3, "refused_4xx": 1, "client_abort": 1},
        "end": {"kv_cache_usage_perc": 0.0},
    }
    assert fuzz.passed(good)
    for key, value in [
        ("engine_deaths", 1),
        ("failure_count", 1),
        ("mismatch_count", 1),
        ("outcomes", {"ok": 3, "server_error_5xx": 1}),
        ("end", {"kv_cache_usage_perc": 0.01}),
        ("end", {"kv_cache_usage_perc": None}),
    ]:
        assert not fuzz.passed({**good, key: value}), key


@pytest.mark.parametrize(
    "url",
    ["http://0.0.0.0:8000", "http://10.0.0.1:8000", "https://127.0.0.1:8000", "http://127.0.0.1"],
)
def test_only_loopback_targets(url: str) -> None:
    with pytest.raises(ValueError, match="127.0.0.1"):
        fuzz.check_url(url)


# ----------------------------------------------------------------------------- generator


def test_generator_is_seeded_and_covers_the_brief() -> None:
    a, b = fuzz.generate(1000, MODEL, seed=7), fuzz.generate(1000, MODEL, seed=7)
    assert a == b and a != fuzz.generate(1000, MODEL, seed=8)
    tags = Counter(t for c in a for t in c.tags)
    for kind in ("code", "unicode", "empty", "one_token", "token_ids", "near_max", "past_max"):
        assert tags[f"prompt:{kind}"] >= 5, kind
    assert sum(v for t, v in tags.items() if t.startswith("invalid:")) >= 50
    assert Counter(c.mode for c in a).keys() == {
        "completions",
        "completions-stream",
        "chat",
        "chat-stream",
    }
    ps = [c.payload for c in a]

    def seen(pred: Any) -> int:
        return sum(1 for p in ps if pred(p))

    assert seen(lambda p: p.get("temperature") == 0.0) >= 200
    assert seen(lambda p: 0 < p.get("temperature", 0) < 1) and seen(lambda p: p["temperature"] > 1)
    for k in (-1, 1, 64, 10**6):
        assert seen(lambda p, k=k: p.get("top_k") == k), k
    for key in ("top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        assert seen(lambda p, key=key: key in p), key
    for key in ("logit_bias", "seed", "stop", "stop_token_ids", "logprobs", "prompt_logprobs"):
        assert seen(lambda p, key=key: key in p), key
    assert {p.get("n") for p in ps} >= {1, 2, 3}
    assert seen(lambda p: p.get("max_tokens") == 1) and seen(lambda p: p.get("max_tokens") == 0)
    assert seen(lambda p: (p.get("max_tokens") or 0) > 10**6)
    assert seen(lambda p: "response_format" in p)
    for kind in ("json", "regex", "choice"):
        assert seen(lambda p, kind=kind: kind in (p.get("structured_outputs") or {})), kind
    assert sum(c.abort_after_chunks is not None for c in a) >= 50
    assert all(c.stream for c in a if c.abort_after_chunks is not None)


def test_greedy_comparison_rule() -> None:
    assert fuzz.greedy_comparable(_case(temperature=0.0, top_k=64, stop=["\n"]))
    assert fuzz.greedy_comparable(_case(temperature=0.0, structured_outputs={"regex": "a+"}))
    for extra in (
        {"temperature": 0.7},
        {"temperature": 0.0, "presence_penalty": 0.5},
        {"temperature": 0.0, "frequency_penalty": -0.5},
        {"temperature": 0.0, "repetition_penalty": 1.2},
        {"temperature": 0.0, "logit_bias": {"5": 1.0}},
        {"temperature": 0.0, "min_p": 0.2},
    ):
        assert not fuzz.greedy_comparable(_case(**extra)), extra
    assert not fuzz.greedy_comparable(_case("refuse", temperature=0.0))
    aborted = Case(0, False, True, {"temperature": 0.0, "stream": True}, "ok", 2)
    assert not fuzz.greedy_comparable(aborted)


# ----------------------------------------------------------------------------- server


@pytest.mark.serving
def test_short_fuzz_run(trained_servers: Servers) -> None:
    s = trained_servers
    summary = fuzz.fuzz(
        s.spec.url, s.plain.url, s.model, n=SHORT_N, seed=0, concurrency=8, max_seconds=240
    )
    print(summary)  # noqa: T201 - shown with -s
    assert summary["sent"] == SHORT_N, "ran out of time"
    assert summary["engine_deaths"] == 0, summary["end"]
    assert summary["server_errors_5xx"] == 0, summary["failures"]
    assert summary["failure_count"] == 0, summary["failures"]
    assert summary["mismatch_count"] == 0, summary["mismatches"]
    assert summary["end"]["kv_cache_usage_perc"] == 0.0, summary["end"]
    assert summary["passed"]
    out = summary["outcomes"]
    assert out["ok"] >= SHORT_N // 2 and out["refused_4xx"] >= 5 and out["client_abort"] >= 3
    assert summary["greedy_compared"] >= 10
    assert len(summary["per_mode"]) == 4
    # the speculating server drafted for these requests
    m = client.scrape_metrics(s.spec.url)
    assert m.sum("vllm:spec_decode_num_draft_tokens_total") > 0
    assert s.spec.proc.poll() is None and s.plain.proc.poll() is None


def _post(url: str, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(url + path, json=body, timeout=60)


@pytest.mark.serving
def test_upstream_grammar_stop_token_dead_end_is_still_a_500(trained_servers: Servers) -> None:
    """vLLM 0.32 without speculation: a stop token the choice needs as content -> 500.
    When this fails, vLLM fixed it: drop ``fuzz.grammar_stop_token_dead_end``."""
    s = trained_servers
    assert _post(s.plain.url, "/detokenize", {"model": s.model, "tokens": [86]}).json() == {
        "prompt": "s"
    }
    body = {"model": s.model, "prompt": "x", "temperature": 0, "max_tokens": 5}
    body |= {"structured_outputs": {"choice": ["yes"]}, "return_token_ids": True}
    ok = _post(s.plain.url, "/v1/completions", body)
    assert ok.status_code == 200 and ok.json()["choices"][0]["token_ids"][-2] == 86
    for url in (s.plain.url, s.spec.url):
        r = _post(url, "/v1/completions", {**body, "stop_token_ids": [86]})
        assert r.status_code == 500, r.text
        assert requests.get(url + "/health", timeout=10).status_code == 200


@pytest.mark.serving
def test_upstream_detok_prompt_leak_is_still_there(trained_servers: Servers) -> None:
    """vLLM 0.32 without speculation: a token-id prompt ending in a cut UTF-8 sequence leaks
    its text into the output. When this fails, drop ``fuzz.prompt_text_leaks``."""
    s = trained_servers
    body = {"model": s.model, "prompt": [81, 254], "temperature": 0, "max_tokens": 2}
    choice = _post(s.plain.url, "/v1/completions", {**body, "return_token_ids": True}).json()[
        "choices"
    ][0]
    ids = choice["token_ids"]
    alone = _post(s.plain.url, "/detokenize", {"model": s.model, "tokens": ids}).json()["prompt"]
    assert choice["text"] == "n\ufffd" + alone, (choice["text"], alone)
