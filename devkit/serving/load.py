"""A bounded, seeded HTTP load against an OpenAI server, with random client aborts.

The same :func:`plan` (same seed) sent to a server with and without speculation gives
request-by-request comparable greedy outputs; :func:`summarize` turns one run into
latency/throughput/acceptance numbers. Used by tests/serving/test_openai_server.py and
bench.serving.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from devkit.serving import client

#: code-like prompts (the tiny fixtures' tokenizer was trained on Python sources)
PROMPTS = (
    "def forward(self, hidden_states):",
    "class Gemma4Model(nn.Module):",
    "import torch\n",
    "    def __init__(self, config):\n        super().__init__()",
    "# Copyright 2025 Google Inc.",
    "attention_mask = None",
    "from transformers import",
    "logits = self.lm_head(hidden_states)",
    "for layer in self.layers:\n    hidden_states = layer(hidden_states)\n",
    "query_states = self.q_proj(hidden_states).view(hidden_shape)",
    "@auto_docstring\nclass Gemma4ForCausalLM(Gemma4PreTrainedModel):",
    "    return self.embed_tokens(input_ids) * self.embed_scale",
)


@dataclass(frozen=True)
class LoadRequest:
    index: int
    payload: dict[str, Any]
    #: drop the stream after this many chunks (a client disconnect mid-stream)
    abort_after_chunks: int | None = None
    #: give up on a request after this many seconds (a client timeout)
    cancel_after_s: float | None = None


def plan(
    n: int,
    model: str,
    *,
    seed: int = 0,
    abort_fraction: float = 0.15,
    chat_fraction: float = 0.3,
    stream_fraction: float = 0.5,
    max_tokens: tuple[int, int] = (8, 64),
) -> list[LoadRequest]:
    """``n`` greedy requests; about ``abort_fraction`` of them are abandoned by the client."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = PROMPTS[i % len(PROMPTS)] + f" # {i}"
        chat = rng.random() < chat_fraction
        stream = rng.random() < stream_fraction
        payload = client.body(
            model, prompt, chat=chat, stream=stream, max_tokens=rng.randint(*max_tokens)
        )
        abort_after = cancel_after = None
        if rng.random() < abort_fraction:
            if stream:
                abort_after = rng.randint(1, 4)
            else:
                cancel_after = rng.uniform(0.05, 0.5)
        out.append(LoadRequest(i, payload, abort_after, cancel_after))
    return out


async def _run(base_url: str, reqs: list[LoadRequest], concurrency: int) -> list[client.Completion]:
    sem = asyncio.Semaphore(concurrency)
    async with client.new_session(concurrency) as session:

        async def one(r: LoadRequest) -> client.Completion:
            async with sem:
                if r.cancel_after_s is not None:
                    return await client.cancel_after(session, base_url, r.payload, r.cancel_after_s)
                return await client.request(
                    session, base_url, r.payload, abort_after_chunks=r.abort_after_chunks
                )

        return list(await asyncio.gather(*(one(r) for r in reqs)))


def run(
    base_url: str, reqs: list[LoadRequest], concurrency: int = 32, timeout_s: float = 900.0
) -> tuple[list[client.Completion], float]:
    """Send ``reqs`` with ``concurrency`` in flight. Returns (results in order, wall seconds)."""
    t0 = time.perf_counter()
    results = asyncio.run(asyncio.wait_for(_run(base_url, reqs, concurrency), timeout_s))
    return results, time.perf_counter() - t0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def summarize(
    results: list[client.Completion],
    wall_s: float,
    before: client.Metrics | None = None,
    after: client.Metrics | None = None,
) -> dict[str, Any]:
    """Counts, latency percentiles, throughput and (from /metrics deltas) acceptance.

    Latency and throughput count completed requests only (aborted ones are excluded);
    TTFT comes from the completed streams.
    """
    done = [r for r in results if r.ok]
    lat = sorted(r.latency_s for r in done)
    ttft = sorted(r.ttft_s for r in done if r.ttft_s is not None)
    out_tokens = sum(len(r.token_ids) for r in done)
    s: dict[str, Any] = {
        "requests": len(results),
        "completed": len(done),
        "client_aborts": sum(r.aborted for r in results),
        "server_errors_5xx": sum(1 for r in results if r.status is not None and r.status >= 500),
        "other_errors": sum(
            1
            for r in results
            if not r.aborted and r.error is not None and not (r.status or 0) >= 500
        ),
        "wall_s": round(wall_s, 3),
        "latency_p50_s": _round(_pct(lat, 50)),
        "latency_p90_s": _round(_pct(lat, 90)),
        "ttft_p50_s": _round(_pct(ttft, 50)),
        "output_tokens": out_tokens,
        "throughput_tok_s": round(out_tokens / wall_s, 2) if wall_s > 0 else None,
    }
    if before is not None and after is not None:
        d = {
            k: after_v - client.spec_counters(before).get(k, 0.0)
            for k, after_v in client.spec_counters(after).items()
        }
        drafts, drafted = d.get("num_drafts_total", 0.0), d.get("num_draft_tokens_total", 0.0)
        accepted = d.get("num_accepted_tokens_total", 0.0)
        s["spec_drafts"] = int(drafts)
        s["acceptance_rate"] = round(accepted / drafted, 4) if drafted else None
        s["mean_acceptance_length"] = round(1 + accepted / drafts, 3) if drafts else None
    return s


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def mismatches(
    a: list[client.Completion], b: list[client.Completion]
) -> list[tuple[int, Any, Any]]:
    """Indices where both runs completed a request but disagree on its output."""
    return [
        (i, ra.key(), rb.key())
        for i, (ra, rb) in enumerate(zip(a, b, strict=True))
        if ra.ok and rb.ok and ra.key() != rb.key()
    ]
