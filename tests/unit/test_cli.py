"""``frozen-kv-mtp check-config``, run as users run it (a subprocess): a summary for a
good config; for a bad one, exit 2 and the error with its fix, no traceback. Real vLLM
config objects, no engine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import pair


def check_config(target: str, spec: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_frozen_kv_mtp.cli", "check-config", target, spec],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _spec(assistant: str, **extra: object) -> str:
    return json.dumps({"method": "frozen_kv_mtp", "model": assistant, **extra})


def test_check_config_ok() -> None:
    target, assistant = pair("fp32")
    r = check_config(target, _spec(assistant, sliding_split_kv_max_rows=16))
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("ok: method mtp (frozen_kv_mtp), k=2"), last
    assert "greedy and sampled (per batch) drafts, standard verification" in last
    assert "'sliding_split_kv_max_rows': 16" in last


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sliding_split_kv_max_rows": -2}, "Fix: pass -1"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"centroid_head": "fastest"}, 'Fix: pass one of "upstream"'),
    ],
)
def test_check_config_bad_option_exits_2_with_the_fix(
    extra: dict[str, object], message: str
) -> None:
    target, assistant = pair("fp32")
    r = check_config(target, _spec(assistant, **extra))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: frozen_kv_mtp:"), last
    assert message in last
    assert "Traceback" not in r.stderr


def test_check_config_not_json() -> None:
    target, _ = pair("fp32")
    r = check_config(target, "{method: frozen_kv_mtp}")
    assert r.returncode == 2
    assert "is not JSON" in r.stderr


def test_check_config_hub_architecture_without_torchvision_exits_2_with_a_hint() -> None:
    """On CPU installs (no torchvision) vLLM cannot inspect the hub's multimodal Gemma 4
    architecture: one error line and a hint that names a way to check it, no traceback."""
    try:
        import torchvision  # noqa: F401

        pytest.skip("torchvision is installed: vLLM can inspect the architecture here")
    except ImportError:
        pass
    target, assistant = pair("fp32-oracle-mm")
    r = check_config(target, _spec(assistant))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert lines[-2].startswith("error: vLLM refused the engine config: Model architectures")
    assert lines[-1].startswith("hint: the hub's Gemma 4 checkpoints")
    assert "fixtures.shapes" in lines[-1]
    assert "Traceback" not in r.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_frozen_kv_mtp.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_options_lists_every_accepted_key_with_its_default() -> None:
    from vllm_frozen_kv_mtp.config import UNSUPPORTED_KEYS
    from vllm_frozen_kv_mtp.option_help import accepted_keys

    r = _cli("options")
    assert r.returncode == 0, r.stderr
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ")}
    assert accepted_keys() | set(UNSUPPORTED_KEYS) <= listed
    assert 'draft_sample_method                    default "probabilistic"' in r.stdout


def test_options_table_matches_the_parser_and_the_docs() -> None:
    """A key the parser accepts but the table lacks, or a key missing from the doc the
    table sends its reader to, fails here."""
    from pathlib import Path

    from vllm_frozen_kv_mtp.option_help import EXPERT_KEYS, USER_KEYS, accepted_keys

    assert set(USER_KEYS) | set(EXPERT_KEYS) == accepted_keys()
    root = Path(__file__).resolve().parents[2]
    for table in (USER_KEYS, EXPERT_KEYS):
        for key, h in table.items():
            text = (root / h.doc.partition("#")[0]).read_text()
            assert f"`{key}`" in text, f"{key} is not documented in {h.doc}"


def test_subcommands_have_their_own_help() -> None:
    r = _cli("check-config", "--help")
    assert r.returncode == 0 and "TARGET" in r.stdout and "SPEC" in r.stdout, r.stdout
    r = _cli("check-config", "only-a-target")
    assert r.returncode == 2 and "SPEC" in r.stderr
    r = _cli("options", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
