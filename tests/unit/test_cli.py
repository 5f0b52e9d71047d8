"""``frozen-kv-mtp``, run as users run it (a subprocess): ``check-config`` answers in its
last line (``ok: ...`` or ``error: ...`` with its fix, exit 2), one line without ``-v``, no
traceback; offline hub ids point at ``--shape``, whose suggested command works; the
README's check-config commands work as written. Real vLLM config objects under ``--full``;
no engine."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, pair

TRAINED = "devkit/fixtures/data/trained"
CLI = [sys.executable, "-m", "vllm_frozen_kv_mtp.frontend.cli"]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={k: v for k, v in full_env.items() if v != ""},  # "" unsets
    )


def check_config(*args: str) -> subprocess.CompletedProcess[str]:
    return _cli("check-config", *args)


def _spec(assistant: str | None, **extra: object) -> str:
    model = {"model": assistant} if assistant is not None else {}
    return json.dumps({"method": "frozen_kv_mtp", **model, **extra})


def _only_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def test_check_config_ok_is_one_line_and_quiet() -> None:
    target, assistant = pair("fp32")
    r = check_config(target, _spec(assistant, sliding_split_kv_max_rows=16))
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr  # no log, no warnings: the answer stands alone
    line = _only_line(r.stdout)
    assert line.startswith(f"ok: frozen_kv_mtp, assistant {assistant}, k=2, "), line
    assert "greedy and sampled (per batch) drafts, standard verification" in line
    assert "expert options sliding_split_kv_max_rows=16" in line


def test_check_config_plugin_checks_do_not_import_vllm() -> None:
    """What makes the default check take seconds: vLLM's import alone costs most of the
    ten seconds a full check takes."""
    code = (
        "import sys; from vllm_frozen_kv_mtp.frontend.cli import main; "
        f"rc = main(['check-config', {TRAINED + '/target'!r}, "
        f"{_spec(TRAINED + '/assistant')!r}]); "
        "print('vllm imported' if 'vllm' in sys.modules else 'vllm not imported'); "
        "sys.exit(rc)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "vllm not imported", r.stdout


def test_check_config_full_builds_vllms_engine_config_quietly() -> None:
    r = check_config("--full", f"{TRAINED}/target", _spec(f"{TRAINED}/assistant"))
    assert r.returncode == 0, r.stderr[-3000:]
    line = _only_line(r.stdout)
    assert line.startswith('ok: frozen_kv_mtp (runs as vLLM\'s "mtp"), assistant '), line
    assert "vLLM built the engine config" in line
    assert "INFO" not in r.stderr, r.stderr[-3000:]


def test_verbose_shows_the_log() -> None:
    r = check_config("-v", f"{TRAINED}/target", _spec(f"{TRAINED}/assistant"))
    assert r.returncode == 0, r.stderr
    assert "frozen_kv_mtp: num_speculative_tokens not set, using 2" in r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("ok: ")


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
    r = check_config(f"{TRAINED}/target", _spec(f"{TRAINED}/assistant", **extra))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    line = _only_line(r.stderr)
    assert line.startswith("error: frozen_kv_mtp:"), line
    assert message in line


@pytest.mark.parametrize("method", ["frozen-kv-mtp", "frozen_kv_mpt"])
def test_method_typo_suggests_frozen_kv_mtp(method: str) -> None:
    spec = json.dumps({"method": method, "model": f"{TRAINED}/assistant"})
    r = check_config(f"{TRAINED}/target", spec)
    assert r.returncode == 2
    line = _only_line(r.stderr)
    assert line == (
        f"error: frozen_kv_mtp: speculative method {method!r} is not a method vLLM knows. "
        'Fix: did you mean "method": "frozen_kv_mtp"?'
    ), line


def test_missing_model_names_the_assistant_of_the_target() -> None:
    r = check_config(f"{TRAINED}/target", _spec(None))
    assert r.returncode == 2
    line = _only_line(r.stderr)
    assert f'Fix: add "model": "{TRAINED}/assistant"' in line, line


def test_other_methods_are_not_checked_here() -> None:
    r = check_config(f"{TRAINED}/target", json.dumps({"method": "mtp"}))
    assert r.returncode == 2
    assert 'check-config checks "method": "frozen_kv_mtp" configs' in _only_line(r.stderr)


def test_hub_id_offline_is_one_line_whose_command_works() -> None:
    """HF_HUB_OFFLINE=1 and a hub id: one line naming the shape configs and a command
    that checks the same config offline; that command, run as printed, answers ok."""
    spec = _spec("google/gemma-4-E4B-it-assistant", num_speculative_tokens="auto")
    r = check_config("google/gemma-4-E4B-it", spec)
    assert r.returncode == 2, r.stderr[-2000:]
    line = _only_line(r.stderr)
    assert line.startswith("error: cannot read the target config google/gemma-4-E4B-it from "), line
    assert "HF_HUB_OFFLINE=1" in line and "shape configs" in line
    suggested = line.split("ship with the plugin: ", 1)[1]
    argv = shlex.split(suggested)
    assert argv[:3] == ["frozen-kv-mtp", "check-config", "--shape"], argv
    ok = check_config(*argv[2:])
    assert ok.returncode == 0, ok.stderr
    assert _only_line(ok.stdout).startswith(
        "ok: frozen_kv_mtp, assistant google/gemma-4-E4B-it-assistant, k chosen each step in 0..7"
    ), ok.stdout


def test_hub_id_without_network_is_one_line_in_seconds() -> None:
    """No HF_HUB_OFFLINE and no route to the hub (here: a closed local port as its
    endpoint): huggingface_hub would retry for about 25 s, logging each retry; one line."""
    env = {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "", "HF_ENDPOINT": "http://127.0.0.1:9"}
    spec = _spec("google/gemma-4-31B-it-assistant")
    t0 = time.monotonic()
    r = _cli("check-config", "google/gemma-4-31B-it", spec, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    line = _only_line(r.stderr)
    assert "(no connection to 127.0.0.1, and it is not in the local hub cache)" in line, line
    assert line.endswith(f"check-config --shape google/gemma-4-31B-it '{spec}'"), line
    assert time.monotonic() - t0 < 120  # not five retries with back-off per file


def test_shape_by_size_refuses_a_mismatched_assistant_naming_hub_ids() -> None:
    r = check_config("--shape", "E4B", _spec("google/gemma-4-31B-it-assistant"))
    assert r.returncode == 2
    line = _only_line(r.stderr)
    assert "backbone_hidden_size=5376 but the target hidden size is 2560" in line, line
    assert "/tmp" not in line and "frozen-kv-mtp-shapes" not in line, line


def test_shape_needs_a_published_size() -> None:
    r = check_config("--shape", f"{TRAINED}/target", _spec(f"{TRAINED}/assistant"))
    assert r.returncode == 2
    assert "--shape checks the published Gemma 4 sizes" in _only_line(r.stderr)


def test_missing_local_directory() -> None:
    r = check_config("models/no-such-target", _spec(f"{TRAINED}/assistant"))
    assert r.returncode == 2
    assert _only_line(r.stderr).startswith("error: no model directory at models/no-such-target")


def test_check_config_not_json() -> None:
    r = check_config(f"{TRAINED}/target", "{method: frozen_kv_mtp}")
    assert r.returncode == 2
    assert "is not JSON" in r.stderr


def test_full_hub_architecture_without_torchvision_is_one_line_with_a_hint() -> None:
    """On CPU installs (no torchvision) vLLM cannot inspect the hub's multimodal Gemma 4
    architecture: one error line whose hint points at --shape, no traceback."""
    try:
        import torchvision  # noqa: F401

        pytest.skip("torchvision is installed: vLLM can inspect the architecture here")
    except ImportError:
        pass
    target, assistant = pair("fp32-oracle-mm")
    r = check_config("--full", target, _spec(assistant))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    line = _only_line(r.stderr)
    assert line.startswith("error: vLLM refused the engine config: Model architectures"), line
    assert "--shape" in line


def test_readme_check_config_commands_work_as_written() -> None:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- check-config:begin -->", 1)[1].split("<!-- check-config:end -->")[0]
    commands = re.sub(r"\\\n\s*", " ", block.split("```bash\n", 1)[1].split("```")[0])
    lines = [ln.strip() for ln in commands.splitlines() if ln.strip()]
    assert len(lines) == 2 and all(ln.startswith(".venv/bin/frozen-kv-mtp ") for ln in lines)
    for line in lines:
        r = check_config(*shlex.split(line)[2:])
        assert r.returncode == 0, (line, r.stderr)
        assert _only_line(r.stdout).startswith("ok: frozen_kv_mtp, "), r.stdout


def test_options_lists_every_accepted_key_with_its_default() -> None:
    from vllm_frozen_kv_mtp.frontend.option_help import accepted_keys
    from vllm_frozen_kv_mtp.frontend.translate import UNSUPPORTED_KEYS

    r = _cli("options")
    assert r.returncode == 0, r.stderr
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ")}
    assert accepted_keys() | set(UNSUPPORTED_KEYS) <= listed
    assert 'draft_sample_method                    default "probabilistic"' in r.stdout


def test_options_into_a_closed_pipe_exits_quietly() -> None:
    cmd = " ".join(shlex.quote(a) for a in CLI) + " options | head -1"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("Keys of --speculative-config"), r.stdout
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_options_table_matches_the_parser_and_the_docs() -> None:
    """A key the parser accepts but the table lacks, or a key missing from the doc the
    table sends its reader to, fails here."""
    from vllm_frozen_kv_mtp.frontend.option_help import EXPERT_KEYS, USER_KEYS, accepted_keys

    assert set(USER_KEYS) | set(EXPERT_KEYS) == accepted_keys()
    for table in (USER_KEYS, EXPERT_KEYS):
        for key, h in table.items():
            text = (REPO / h.doc.partition("#")[0]).read_text()
            assert f"`{key}`" in text, f"{key} is not documented in {h.doc}"


def test_help_says_what_it_is_and_how_to_run_it() -> None:
    r = _cli("--help")
    assert r.returncode == 0
    for needle in ("frozen_kv_mtp", ".venv/bin/frozen-kv-mtp", "check-config", "--shape", "demo"):
        assert needle in r.stdout, needle
    r = _cli("check-config", "--help")
    assert r.returncode == 0 and "TARGET" in r.stdout and "SPEC" in r.stdout, r.stdout
    assert "--full" in r.stdout and "--shape" in r.stdout and "last line" in r.stdout
    r = _cli("check-config", "only-a-target")
    assert r.returncode == 2 and "SPEC" in r.stderr
    r = _cli("options", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
