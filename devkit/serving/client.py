"""A small async client for vLLM's OpenAI endpoints (completions and chat), and /metrics.

It returns the generated token ids as well as the text (``return_token_ids``), so callers
can compare outputs exactly, and it can drop a stream after a few chunks to act like a
client that disconnects mid-response.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Completion:
    """One request's outcome. ``status`` is None when no HTTP status arrived."""

    status: int | None = None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    #: whether the client gave up on purpose (stream dropped / request cancelled)
    aborted: bool = False
    error: str | None = None
    latency_s: float = 0.0
    #: time to the first streamed token (streams only)
    ttft_s: float | None = None
    chunks: int = 0

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.aborted and self.error is None

    def key(self) -> tuple[tuple[int, ...], str, str | None]:
        """What greedy runs must agree on."""
        return tuple(self.token_ids), self.text, self.finish_reason


def _endpoint(chat: bool) -> str:
    return "/v1/chat/completions" if chat else "/v1/completions"


def body(
    model: str,
    prompt: str,
    *,
    chat: bool = False,
    stream: bool = False,
    max_tokens: int = 32,
    **params: Any,
) -> dict[str, Any]:
    """A greedy request body (``params`` override, e.g. ``stop=[...]``)."""
    b: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": stream,
        "return_token_ids": True,
    }
    if chat:
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    if stream:
        b["stream_options"] = {"include_usage": True}
    b.update(params)
    return b


def _choice_text(choice: dict[str, Any], chat: bool, stream: bool) -> str:
    if not chat:
        return choice.get("text") or ""
    msg = choice.get("delta" if stream else "message") or {}
    return msg.get("content") or ""


async def request(
    session: aiohttp.ClientSession,
    base_url: str,
    payload: dict[str, Any],
    *,
    abort_after_chunks: int | None = None,
    timeout_s: float = 300.0,
) -> Completion:
    """Send one request; streams are reassembled. ``abort_after_chunks`` drops the stream."""
    chat = "messages" in payload
    stream = bool(payload.get("stream"))
    out = Completion()
    t0 = time.perf_counter()

    async def send() -> None:
        async with session.post(base_url + _endpoint(chat), json=payload) as resp:
            out.status = resp.status
            if resp.status != 200:
                out.error = (await resp.text())[:500]
            elif not stream:
                data = await resp.json()
                choice = data["choices"][0]
                out.text = _choice_text(choice, chat, stream=False)
                out.token_ids = list(choice.get("token_ids") or [])
                out.finish_reason = choice.get("finish_reason")
            else:
                await _read_stream(resp, out, chat, t0, abort_after_chunks)

    try:
        await asyncio.wait_for(send(), timeout_s)
    except asyncio.TimeoutError:
        out.error = f"timeout after {timeout_s}s"
    except aiohttp.ClientError as e:
        out.error = f"{type(e).__name__}: {e}"
    out.latency_s = time.perf_counter() - t0
    return out


async def _read_stream(
    resp: aiohttp.ClientResponse,
    out: Completion,
    chat: bool,
    t0: float,
    abort_after_chunks: int | None,
) -> None:
    async for raw in resp.content:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            out.error = json.dumps(event["error"])[:500]
            return
        for choice in event.get("choices") or []:
            piece = _choice_text(choice, chat, stream=True)
            ids = choice.get("token_ids") or []
            if piece or ids:
                if out.ttft_s is None:
                    out.ttft_s = time.perf_counter() - t0
                out.chunks += 1
            out.text += piece
            out.token_ids.extend(ids)
            if choice.get("finish_reason") is not None:
                out.finish_reason = choice["finish_reason"]
        if abort_after_chunks is not None and out.chunks >= abort_after_chunks:
            # Closing the response closes the TCP connection: the server sees a
            # client disconnect mid-stream and must abort the request.
            out.aborted = True
            resp.close()
            return


async def cancel_after(
    session: aiohttp.ClientSession, base_url: str, payload: dict[str, Any], seconds: float
) -> Completion:
    """Send a request and give up after ``seconds`` (a client timeout/disconnect)."""
    task = asyncio.ensure_future(request(session, base_url, payload))
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        return task.result()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return Completion(aborted=True, latency_s=seconds)


def new_session(concurrency: int = 64) -> aiohttp.ClientSession:
    # No keep-alive reuse across aborted streams matters here: a dropped stream
    # closes its own connection; the limit bounds open sockets.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))


async def requests_concurrently(
    base_url: str, payloads: list[dict[str, Any]], concurrency: int = 32
) -> list[Completion]:
    """Send ``payloads`` with at most ``concurrency`` in flight; results keep their order."""
    sem = asyncio.Semaphore(concurrency)
    async with new_session(concurrency) as session:

        async def one(p: dict[str, Any]) -> Completion:
            async with sem:
                return await request(session, base_url, p)

        return list(await asyncio.gather(*(one(p) for p in payloads)))


class Metrics(dict[tuple[str, frozenset[tuple[str, str]]], float]):
    """Prometheus samples keyed by (name, labels); ``*_created`` samples are dropped."""

    def sum(self, name: str, **labels: str) -> float:
        """Sum of ``name`` over the label sets that contain ``labels``."""
        want = set(labels.items())
        return float(sum(v for (n, lab), v in self.items() if n == name and want <= lab))

    def names(self) -> set[str]:
        return {n for n, _ in self}


def parse_metrics(text: str) -> Metrics:
    out = Metrics()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        if name.endswith("_created"):
            continue
        labels = frozenset(
            (k.strip(), v.strip().strip('"'))
            for k, _, v in (pair.partition("=") for pair in rest.rstrip("}").split('",') if pair)
        )
        try:
            out[(name.strip(), labels)] = float(value)
        except ValueError:
            continue
    return out


def scrape_metrics(base_url: str, timeout: float = 10.0) -> Metrics:
    with urllib.request.urlopen(base_url + "/metrics", timeout=timeout) as r:
        return parse_metrics(r.read().decode())


def spec_counters(metrics: Metrics) -> dict[str, float]:
    """vLLM's speculative-decoding counters, without the ``vllm:spec_decode_`` prefix."""
    prefix = "vllm:spec_decode_"
    return {n[len(prefix) :]: metrics.sum(n) for n in metrics.names() if n.startswith(prefix)}


def wait_idle(base_url: str, timeout: float = 60.0) -> Metrics:
    """Poll /metrics until no request runs or waits and the KV cache is empty.

    Returns the last scrape; the caller asserts on it (it may still be busy on timeout).
    """
    deadline = time.monotonic() + timeout
    m = scrape_metrics(base_url)
    while time.monotonic() < deadline:
        busy = (
            m.sum("vllm:num_requests_running")
            + m.sum("vllm:num_requests_waiting")
            + m.sum("vllm:kv_cache_usage_perc")
        )
        if busy == 0.0:
            return m
        time.sleep(0.5)
        m = scrape_metrics(base_url)
    return m
