"""vLLM's OpenAI server with frozen_kv_mtp, on 127.0.0.1, against the same server without
speculation: greedy outputs, streaming, stop strings, max_tokens, metrics, client aborts,
and a bounded load (``slow``).

Every comparison is on token ids as well as text (``return_token_ids``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from devkit.serving import client, load
from tests.serving.conftest import K, Servers
from tests.utils.engine import PROMPTS

pytestmark = pytest.mark.serving


def _assert_all_ok(results: list[client.Completion]) -> None:
    bad = [(i, r.status, r.error) for i, r in enumerate(results) if not r.ok]
    assert not bad, f"failed requests: {bad}"


def _assert_same(a: list[client.Completion], b: list[client.Completion], what: str) -> None:
    diff = [
        (i, x.key(), y.key())
        for i, (x, y) in enumerate(zip(a, b, strict=True))
        if x.key() != y.key()
    ]
    assert not diff, f"{what}: {len(diff)} outputs differ, first: {diff[0]}"


def _payloads(s: Servers, *, chat: bool, stream: bool, **params: Any) -> list[dict[str, Any]]:
    return [
        client.body(s.model, p, chat=chat, stream=stream, max_tokens=16 + 4 * (i % 8), **params)
        for i, p in enumerate(PROMPTS)
    ]


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_concurrent_greedy_outputs_match_no_speculation(servers: Servers, chat: bool) -> None:
    payloads = _payloads(servers, chat=chat, stream=False)
    assert len(payloads) >= 16
    plain = servers.run(servers.plain.url, payloads)
    spec = servers.run(servers.spec.url, payloads)
    _assert_all_ok(plain)
    _assert_all_ok(spec)
    _assert_same(plain, spec, "frozen_kv_mtp vs no speculation")
    for p, r in zip(payloads, spec, strict=True):
        assert r.token_ids, "empty completion"
        assert len(r.token_ids) <= p["max_tokens"]
        if r.finish_reason == "length":
            assert len(r.token_ids) == p["max_tokens"]


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_streaming_matches_non_streaming(servers: Servers, chat: bool) -> None:
    # Streamed and whole requests go out together, so they also share batches.
    payloads = _payloads(servers, chat=chat, stream=False)
    payloads += _payloads(servers, chat=chat, stream=True)
    n = len(PROMPTS)
    runs = {
        name: servers.run(s.url, payloads)
        for name, s in (("plain", servers.plain), ("spec", servers.spec))
    }
    for name, res in runs.items():
        _assert_all_ok(res)
        _assert_same(res[:n], res[n:], f"{name}: streaming vs non-streaming")
    _assert_same(runs["plain"], runs["spec"], "frozen_kv_mtp vs no speculation")

    if servers.oracle:  # every draft accepted: each step streams up to k+1 tokens at once
        # (vLLM may also merge steps into one chunk when the client lags, never split them)
        chunks = sum(r.chunks for r in runs["spec"][n:])
        tokens = sum(len(r.token_ids) for r in runs["spec"][n:])
        assert chunks <= tokens / (K + 1) + 2 * len(PROMPTS), (chunks, tokens)


def _stop_string(text: str) -> str | None:
    """A short printable piece of ``text`` that first occurs a few characters in."""
    for i in range(3, len(text) - 2):
        piece = text[i : i + 2]
        if piece.isascii() and piece.strip() == piece and piece.isprintable():
            if text.find(piece) == i:
                return piece
    return None


def test_stop_strings_and_max_tokens(servers: Servers) -> None:
    refs = servers.run(servers.plain.url, _payloads(servers, chat=False, stream=False))
    _assert_all_ok(refs)
    cases: list[tuple[dict[str, Any], str | None]] = []  # (payload, expected text)
    for prompt, ref in zip(PROMPTS, refs, strict=True):
        stop = _stop_string(ref.text)
        if stop is None:
            continue
        for stream in (False, True):
            body = client.body(servers.model, prompt, stream=stream, max_tokens=48, stop=[stop])
            cases.append((body, ref.text[: ref.text.index(stop)]))
    assert len(cases) >= 16, "too few references with a usable stop string"
    # max_tokens that do not divide by k+1 end inside a multi-token commit (oracle pair)
    for i, prompt in enumerate(PROMPTS):
        for stream in (False, True):
            body = client.body(
                servers.model, prompt, stream=stream, max_tokens=1 + i % 7, ignore_eos=True
            )
            cases.append((body, None))
    payloads = [c[0] for c in cases]
    plain = servers.run(servers.plain.url, payloads)
    spec = servers.run(servers.spec.url, payloads)
    _assert_all_ok(plain)
    _assert_all_ok(spec)
    _assert_same(plain, spec, "frozen_kv_mtp vs no speculation")
    for (body, expected), r in zip(cases, spec, strict=True):
        if expected is not None:
            assert (r.text, r.finish_reason) == (expected, "stop"), body
        else:
            assert (len(r.token_ids), r.finish_reason) == (body["max_tokens"], "length"), body


def test_spec_decode_counters_move(servers: Servers) -> None:
    payloads = _payloads(servers, chat=False, stream=False)
    before = client.scrape_metrics(servers.spec.url)
    results = servers.run(servers.spec.url, payloads)
    _assert_all_ok(results)
    after = client.scrape_metrics(servers.spec.url)
    d = {
        k: v - client.spec_counters(before).get(k, 0.0)
        for k, v in client.spec_counters(after).items()
    }
    assert d["num_drafts_total"] > 0
    assert d["num_draft_tokens_total"] == K * d["num_drafts_total"]
    assert 0 <= d["num_accepted_tokens_total"] <= d["num_draft_tokens_total"]
    if servers.oracle:
        assert d["num_accepted_tokens_total"] >= 0.9 * d["num_draft_tokens_total"], d
    # every generated token is counted once, however many a step commits
    generated = after.sum("vllm:generation_tokens_total") - before.sum(
        "vllm:generation_tokens_total"
    )
    assert generated == sum(len(r.token_ids) for r in results)

    # the plugin's steps per k: steps at the server's k, as many as vLLM's drafts say at
    # most (a step verifies one draft per running request), none at another k but 0
    steps = {
        k: after.sum("frozen_kv_mtp:steps_total", k=str(k))
        - before.sum("frozen_kv_mtp:steps_total", k=str(k))
        for k in range(K + 1)
    }
    assert 0 < steps[K] <= d["num_drafts_total"], steps
    assert all(steps[k] == 0 for k in range(1, K)), steps

    plain = client.scrape_metrics(servers.plain.url)
    assert not client.spec_counters(plain), "the reference server must not speculate"
    assert "frozen_kv_mtp:steps_total" not in plain.names()
    assert re.search(r"frozen_kv_mtp: .*proposer active", servers.spec.log_text())


async def _abort_while_serving(
    s: Servers, normal: list[dict[str, Any]], n_abort: int
) -> tuple[list[client.Completion], list[client.Completion]]:
    long = client.body(s.model, "import torch\n", stream=True, max_tokens=400, ignore_eos=True)
    async with client.new_session(64) as session:
        aborted = [
            client.request(session, s.spec.url, long, abort_after_chunks=2) for _ in range(n_abort)
        ]
        served = [client.request(session, s.spec.url, p) for p in normal]
        results = await asyncio.gather(*aborted, *served)
    return list(results[:n_abort]), list(results[n_abort:])


def test_client_disconnect_mid_stream(servers: Servers) -> None:
    normal = _payloads(servers, chat=False, stream=True)[:8]
    normal += _payloads(servers, chat=True, stream=False)[:8]
    expected = servers.run(servers.plain.url, normal)
    before = client.scrape_metrics(servers.spec.url)

    aborted, served = asyncio.run(_abort_while_serving(servers, normal, n_abort=8))
    assert all(r.aborted and r.status == 200 for r in aborted)
    _assert_all_ok(served)
    _assert_same(expected, served, "requests served next to aborted streams")

    idle = client.wait_idle(servers.spec.url, timeout=120)
    assert idle.sum("vllm:num_requests_running") == 0
    assert idle.sum("vllm:num_requests_waiting") == 0
    assert idle.sum("vllm:kv_cache_usage_perc") == 0, "KV blocks held after the aborts"
    # The engine saw the disconnects: the dropped streams stopped long before 400 tokens
    # each (vLLM counts no client abort in /metrics, so bound the tokens generated).
    generated = idle.sum("vllm:generation_tokens_total") - before.sum(
        "vllm:generation_tokens_total"
    )
    aborted_tokens = generated - sum(len(r.token_ids) for r in served)
    assert 8 * 2 <= aborted_tokens < 8 * 400 / 2, aborted_tokens

    again = servers.run(servers.spec.url, normal)  # and it keeps serving
    _assert_all_ok(again)
    _assert_same(expected, again, "requests after the aborts")


N_REQUESTS = 200
CONCURRENCY = 32


@pytest.mark.slow
def test_load_with_client_aborts(servers: Servers) -> None:
    """~200 requests at concurrency 32 with random client aborts: no 5xx, identical greedy
    outputs for the requests both runs completed, an empty KV cache afterwards."""
    reqs = load.plan(N_REQUESTS, servers.model, seed=1, abort_fraction=0.15)
    summaries = {}
    results = {}
    for name, srv in (("plain", servers.plain), ("spec", servers.spec)):
        before = client.scrape_metrics(srv.url)
        res, wall = load.run(srv.url, reqs, concurrency=CONCURRENCY, timeout_s=900)
        idle = client.wait_idle(srv.url, timeout=120)
        s = load.summarize(res, wall, before, idle)
        summaries[name], results[name] = s, res
        print(name, s)  # noqa: T201 - shown with -s
        assert s["server_errors_5xx"] == 0, [r.error for r in res if (r.status or 0) >= 500]
        assert s["other_errors"] == 0, [r.error for r in res if r.error and not r.aborted]
        assert s["completed"] + s["client_aborts"] == N_REQUESTS
        assert s["client_aborts"] > 0
        assert idle.sum("vllm:num_requests_running") == 0
        assert idle.sum("vllm:num_requests_waiting") == 0
        assert idle.sum("vllm:kv_cache_usage_perc") == 0, f"{name}: KV blocks leaked"
    assert summaries["spec"]["spec_drafts"] > 0
    both = sum(a.ok and b.ok for a, b in zip(results["plain"], results["spec"], strict=True))
    assert both >= 0.7 * N_REQUESTS
    diff = load.mismatches(results["plain"], results["spec"])
    assert not diff, f"{len(diff)} of {both} completed outputs differ; first: {diff[0]}"
