"""The README's CPU server commands, run as written: the OpenAI server on the committed
trained pair, the ``openai`` client's request and the metrics line.

The commands come from README.md (between ``<!-- cpu-server:begin -->`` and
``<!-- cpu-server:end -->``), so the README and this test cannot drift. Two things are
swapped: the port (a free one, not 8000) and ``.venv/bin/python`` (this interpreter, which
is that one under ``make test``). The completion must equal what vLLM gives without
speculation for the same request, drafts must have been accepted, and SIGTERM must leave
no process behind.
"""

from __future__ import annotations

import ast
import gc
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devkit.serving.openai_server import free_port, start_server
from tests.conftest import REPO

pytestmark = pytest.mark.engine

BEGIN, END = "<!-- cpu-server:begin -->", "<!-- cpu-server:end -->"
#: a metrics line the README's grep keeps (vLLM's or the plugin's)
METRIC_LINE = r"^(vllm|frozen_kv_mtp):\S+ "


def readme_blocks() -> tuple[str, str]:
    """(the server command, the client script) of the README's CPU server section."""
    text = (REPO / "README.md").read_text()
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "README's CPU server section changed shape"
    server = re.sub(r"\\\n\s*", " ", blocks[0]).strip()  # fold line continuations
    assert "\n" not in server, server
    return server, blocks[1]


def localize(cmd: str, port: int) -> str:
    cmd = cmd.replace("--port 8000", f"--port {port}").replace(
        "127.0.0.1:8000", f"127.0.0.1:{port}"
    )
    return cmd.replace(".venv/bin/python", shlex.quote(sys.executable))


def completion_request(client: str) -> dict[str, Any]:
    """The keyword arguments of the script's ``client.completions.create(...)``."""
    script = client.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    calls = [
        node
        for node in ast.walk(ast.parse(script))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "client.completions.create"
    ]
    assert len(calls) == 1, script
    return {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords if kw.arg}


def no_speculation_text(target: str, request: dict[str, Any]) -> str:
    """The same greedy request through vLLM without speculation (in-process engine)."""
    from vllm import SamplingParams

    from devkit.demo import tiny_llm

    llm = tiny_llm(str(REPO / target), None, kv_cache_memory_bytes=256 << 20)
    params = SamplingParams(temperature=request["temperature"], max_tokens=request["max_tokens"])
    text = llm.generate([request["prompt"]], params, use_tqdm=False)[0].outputs[0].text
    del llm
    gc.collect()
    return str(text)


def counter(metrics: str, name: str) -> float:
    values = [float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name)]
    assert values, f"{name} missing from:\n{metrics}"
    return sum(values)


def test_readme_cpu_server_commands(tmp_path: Path) -> None:
    t0 = time.monotonic()
    server, client = readme_blocks()
    argv = shlex.split(localize(server, port := free_port()))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"], argv
    assert '"method": "frozen_kv_mtp"' in server
    request = completion_request(client)
    assert request["temperature"] == 0
    srv = start_server("", log_path=tmp_path / "server.log", argv=argv, port=port, cwd=REPO)
    try:
        # computed while the server starts up
        expected = no_speculation_text(argv[argv.index("--model") + 1], request)
        srv.wait_ready(timeout=600)
        out = subprocess.run(
            ["bash", "-c", localize(client, port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
        first = re.search(METRIC_LINE, out, flags=re.M)
        assert first is not None, out
        text, metrics = out[: first.start()], out[first.start() :]
        assert text.removesuffix("\n") == expected, (text, expected)
        assert len(expected.split()) >= 5, expected  # real text, not one token repeated
        drafted = counter(metrics, "vllm:spec_decode_num_draft_tokens_total")
        accepted = counter(metrics, "vllm:spec_decode_num_accepted_tokens_total")
        assert drafted > 0 and accepted > 0, metrics
        # the plugin's steps per k count the server's fixed k
        k = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"]
        steps = f'frozen_kv_mtp:steps_total{{engine="0",k="{k}",model_name="tiny-gemma4"}}'
        assert counter(metrics, steps) > 0
        assert re.search(r"frozen_kv_mtp: .*proposer active", srv.log_text())
        # the server, its engine core and the worker: the shutdown check below means something
        assert len(srv.tree()) >= 3, [p.name() for p in srv.tree()]
    finally:
        leftovers = srv.stop(timeout=90)
    assert not leftovers, f"processes outlived the server: {leftovers}"
    assert srv.proc.returncode == 0, srv.log_tail()
    print(  # noqa: T201 - shown with -s
        f"README server: {accepted:.0f}/{drafted:.0f} drafted tokens accepted, "
        f"{time.monotonic() - t0:.0f} s"
    )
