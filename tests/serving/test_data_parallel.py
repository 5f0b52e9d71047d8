"""Data parallel 2 on CPU: vLLM's OpenAI server with two engine cores, each running
frozen_kv_mtp, against a server without speculation.

The requests arrive unevenly (a burst, then a lone long request), so one rank runs while
the other has nothing to do. Every request must complete, greedy outputs must equal the
reference's, and both ranks must have drafted (vLLM labels its metrics per engine).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import pair
from tests.serving.conftest import CHAT_TEMPLATE, spec_config
from tests.utils.engine import PROMPTS
from vllm_frozen_kv_mtp.serving import client
from vllm_frozen_kv_mtp.serving.openai_server import ServerProcess, start_server

pytestmark = pytest.mark.serving


@pytest.fixture(scope="module")
def dp_servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, ServerProcess, ServerProcess]]:
    target, assistant = pair("fp32-oracle")
    logs = tmp_path_factory.mktemp("dp")
    plain = start_server(target, log_path=logs / "plain.log", chat_template=CHAT_TEMPLATE)
    dp = start_server(
        target,
        log_path=logs / "dp2.log",
        spec=spec_config(assistant),
        chat_template=CHAT_TEMPLATE,
        extra=["--data-parallel-size", "2"],
        # two engine cores share this machine's cores: no pinning, no busy-waiting
        env={"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_WAIT_POLICY": "PASSIVE"},
    )
    try:
        for s in (plain, dp):
            s.wait_ready(timeout=600)
        yield target, plain, dp
    finally:
        leftovers = plain.stop() + dp.stop()
        assert not leftovers, f"processes outlived the servers: {leftovers}"


def _run(url: str, payloads: list[dict[str, Any]]) -> list[client.Completion]:
    return asyncio.run(client.requests_concurrently(url, payloads, concurrency=32))


def _uneven(url: str, burst: list[dict[str, Any]], late: dict[str, Any]) -> list[Any]:
    """The burst at once, then (after it) one long request alone on one rank."""

    async def go() -> list[Any]:
        results = await client.requests_concurrently(url, burst, concurrency=32)
        async with client.new_session(1) as session:
            results.append(await client.request(session, url, late))
        return results

    return asyncio.run(go())


def test_data_parallel_2_greedy_identical_and_both_ranks_draft(
    dp_servers: tuple[str, ServerProcess, ServerProcess],
) -> None:
    model, plain, dp = dp_servers
    burst = [
        client.body(model, p, chat=False, stream=False, max_tokens=8 + 4 * (i % 6))
        for i, p in enumerate(PROMPTS * 2)
    ]
    late = client.body(model, PROMPTS[0], chat=True, stream=True, max_tokens=48)
    want = _run(plain.url, [*burst, late])
    got = _uneven(dp.url, burst, late)
    bad = [(i, r.status, r.error) for i, r in enumerate(got) if not r.ok]
    assert not bad, f"failed requests: {bad}\n{dp.log_tail()}"
    diff = [i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a.key() != b.key()]
    assert not diff, f"{len(diff)} outputs differ from no speculation, first #{diff[0]}"

    metrics = client.wait_idle(dp.url)
    per_rank = {e: metrics.sum("vllm:spec_decode_num_drafts_total", engine=e) for e in ("0", "1")}
    assert all(n > 0 for n in per_rank.values()), f"a rank never drafted: {per_rank}"
    accepted = metrics.sum("vllm:spec_decode_num_accepted_tokens_total")
    drafted = metrics.sum("vllm:spec_decode_num_draft_tokens_total")
    assert accepted >= 0.9 * drafted, (accepted, drafted)  # oracle pair: all accepted
    assert metrics.sum("vllm:kv_cache_usage_perc") == 0.0
    # the engine cores stay up after the lone request: the server still answers
    t0 = time.monotonic()
    again = _run(dp.url, burst[:4])
    assert all(r.ok for r in again) and time.monotonic() - t0 < 120
