"""Data and tensor parallel 2 on CPU: vLLM's OpenAI server running frozen_kv_mtp on two
engine cores (``--data-parallel-size 2``) or on one engine core with two workers
(``--tensor-parallel-size 2``), against a server without speculation.

The requests arrive unevenly (a burst, then a lone long request), so under data parallel
one rank runs while the other has nothing to do. Every request must complete, greedy
outputs must equal the reference's, and every rank or worker must run the frozen drafter.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.serving import client
from devkit.serving.openai_server import ServerProcess, start_server
from tests.conftest import pair
from tests.serving.conftest import CHAT_TEMPLATE, spec_config
from tests.utils.engine import PROMPTS

pytestmark = pytest.mark.serving

PARALLEL = {"dp2": "--data-parallel-size", "tp2": "--tensor-parallel-size"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    target, _ = pair("fp32-oracle")
    plain = start_server(
        target, log_path=tmp_path_factory.mktemp("ref") / "plain.log", chat_template=CHAT_TEMPLATE
    )
    try:
        plain.wait_ready(timeout=600)
        yield plain
    finally:
        assert not plain.stop(), "processes outlived the reference server"


@pytest.fixture(scope="module", params=sorted(PARALLEL))
def parallel(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, ServerProcess]]:
    target, assistant = pair("fp32-oracle")
    server = start_server(
        target,
        log_path=tmp_path_factory.mktemp(request.param) / "server.log",
        spec=spec_config(assistant),
        chat_template=CHAT_TEMPLATE,
        # two processes share the cores: tests/conftest.py already turned pinning and
        # busy-waiting off in the environment the server inherits
        extra=[PARALLEL[request.param], "2"],
    )
    try:
        server.wait_ready(timeout=600)
        yield request.param, server
    finally:
        assert not server.stop(), f"processes outlived the {request.param} server"


def _burst_then_alone(url: str, burst: list[dict[str, Any]], late: dict[str, Any]) -> list[Any]:
    async def go() -> list[Any]:
        results = await client.requests_concurrently(url, burst, concurrency=32)
        async with client.new_session(1) as session:
            results.append(await client.request(session, url, late))
        return results

    return asyncio.run(go())


def test_parallel_2_greedy_identical_and_every_rank_drafts(
    reference: ServerProcess, parallel: tuple[str, ServerProcess]
) -> None:
    kind, server = parallel
    model, _ = pair("fp32-oracle")
    burst = [
        client.body(model, p, chat=False, stream=False, max_tokens=8 + 4 * (i % 6))
        for i, p in enumerate(PROMPTS * 2)
    ]
    late = client.body(model, PROMPTS[0], chat=True, stream=True, max_tokens=48)
    want = asyncio.run(client.requests_concurrently(reference.url, [*burst, late]))
    got = _burst_then_alone(server.url, burst, late)
    bad = [(i, r.status, r.error) for i, r in enumerate(got) if not r.ok]
    assert not bad, f"failed requests: {bad}\n{server.log_tail()}"
    diff = [i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a.key() != b.key()]
    assert not diff, f"{kind}: {len(diff)} outputs differ from no speculation, first #{diff[0]}"

    metrics = client.wait_idle(server.url)
    drafted = metrics.sum("vllm:spec_decode_num_draft_tokens_total")
    accepted = metrics.sum("vllm:spec_decode_num_accepted_tokens_total")
    assert drafted > 0 and accepted >= 0.9 * drafted, (accepted, drafted)  # oracle pair
    assert metrics.sum("vllm:kv_cache_usage_perc") == 0.0
    proposers = re.findall(
        r"\(Worker\S* pid=(\d+)\).*frozen_kv_mtp: V1 proposer active", server.log_text()
    )
    assert len(set(proposers)) == 2, f"{kind}: frozen drafter in workers {proposers}"
    if kind == "dp2":  # vLLM labels metrics per engine core
        per_rank = {e: metrics.sum("vllm:spec_decode_num_drafts_total", engine=e) for e in "01"}
        assert all(n > 0 for n in per_rank.values()), f"a rank never drafted: {per_rank}"
    # the server still serves after the lone request
    again = asyncio.run(client.requests_concurrently(server.url, burst[:4]))
    assert all(r.ok for r in again)
