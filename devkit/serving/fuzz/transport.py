"""Talking to the server: one case sent (plain or streamed, aborted mid-stream when the case
says so) and what came back, read into an :class:`Outcome`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import requests

from devkit.serving.fuzz.cases import Case


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


def error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    err = data.get("error", data) if isinstance(data, dict) else {}
    msg = err.get("message") or err.get("detail") if isinstance(err, dict) else None
    return str(msg or "")
