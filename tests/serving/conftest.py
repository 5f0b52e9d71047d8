"""Shared OpenAI servers for tests/serving: one pair (no speculation / frozen_kv_mtp) per
tiny fixture variant, started together once per module that uses them and stopped after
it (so they do not hold memory while Ray tests run); the teardown checks that no process
of either server is left behind.

* ``fp32``: random weights; drafts are (almost) always rejected (the rollback path).
* ``fp32-oracle``: every draft is accepted, so steps commit k+1 tokens at once and stop
  strings, ``max_tokens`` and streaming must cut inside multi-token commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devkit.serving import client
from devkit.serving.openai_server import ServerProcess, start_server
from tests.conftest import REPO, pair

CHAT_TEMPLATE = str(REPO / "configs" / "tiny-chat-template.jinja")
K = 3
VARIANTS = ("fp32", "fp32-oracle")


def spec_config(assistant: str, k: int = K) -> dict[str, Any]:
    return {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k}


@dataclass
class Servers:
    variant: str
    target: str
    assistant: str
    plain: ServerProcess
    spec: ServerProcess

    @property
    def model(self) -> str:
        """The served model name (vLLM serves ``--model`` under its own path)."""
        return self.target

    @property
    def oracle(self) -> bool:
        return "oracle" in self.variant

    def run(self, url: str, payloads: list[dict[str, Any]]) -> list[client.Completion]:
        """All ``payloads`` concurrently (up to 32 in flight) against ``url``."""
        return asyncio.run(client.requests_concurrently(url, payloads, concurrency=32))


def start_pair(variant: str, log_dir: Any) -> Servers:
    target, assistant = pair(variant)
    common: dict[str, Any] = dict(chat_template=CHAT_TEMPLATE)
    plain = start_server(target, log_path=log_dir / f"{variant}-plain.log", **common)
    spec = start_server(
        target, log_path=log_dir / f"{variant}-spec.log", spec=spec_config(assistant), **common
    )
    try:
        for s in (plain, spec):  # both boot at the same time; wait for each in turn
            s.wait_ready(timeout=600)
    except BaseException:
        plain.stop(timeout=30)
        spec.stop(timeout=30)
        raise
    return Servers(variant, target, assistant, plain, spec)


@pytest.fixture(scope="module", params=VARIANTS)
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    s = start_pair(request.param, tmp_path_factory.mktemp("servers"))
    yield s
    leftovers = s.plain.stop() + s.spec.stop()
    assert not leftovers, f"processes outlived the {s.variant} servers: {leftovers}"


@pytest.fixture(scope="module")
def trained_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The committed trained pair (drafts are often accepted, so sampled requests commit
    several tokens per step), with and without frozen_kv_mtp."""
    from devkit.fixtures.trained import trained_pair_paths

    target, assistant = (str(p) for p in trained_pair_paths())
    log_dir = tmp_path_factory.mktemp("trained-servers")
    common: dict[str, Any] = dict(chat_template=CHAT_TEMPLATE)
    plain = start_server(target, log_path=log_dir / "trained-plain.log", **common)
    spec = start_server(
        target, log_path=log_dir / "trained-spec.log", spec=spec_config(assistant), **common
    )
    try:
        for s in (plain, spec):
            s.wait_ready(timeout=600)
    except BaseException:
        plain.stop(timeout=30)
        spec.stop(timeout=30)
        raise
    yield Servers("trained", target, assistant, plain, spec)
    leftovers = plain.stop() + spec.stop()
    assert not leftovers, f"processes outlived the trained servers: {leftovers}"
