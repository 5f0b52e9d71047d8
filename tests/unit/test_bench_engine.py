"""The benches' one method syntax (bench/method.py) and one engine factory (bench/engine.py):
every method string the plans, the GPU session script and the docs run parses, is already in
the one spelling, and builds the engine arguments its bench builds. Pure: ``llm_kwargs``
builds the ``LLM(...)`` arguments without starting an engine."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from bench.engine import (
    EngineSettings,
    compilation_kwargs,
    draft_length,
    llm_kwargs,
    speculative_config,
)
from bench.method import MethodError, MethodSpec, canonical, parse
from tests.conftest import REPO

CHAT = (0.84, 0.60, 0.39, 0.27, 0.18, 0.12, 0.08)


def _tokens(text: str, **kw: Any) -> EngineSettings:
    """bench.gpu_tokens's settings: K or sweep required, synthetic acceptance."""
    return EngineSettings(parse(text), synthetic_rates=CHAT, **kw)


def _gpu(text: str, **kw: Any) -> EngineSettings:
    """bench.gpu's settings: --k 3 where the string gives no K, no sweep engines."""
    return EngineSettings(parse(text), default_k=3, allow_sweep=False, **kw)


# ---- the syntax ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "k", "options"),
    [
        ("none", "none", None, {}),
        ("mtp:4", "mtp", 4, {}),
        ("mtp:sweep", "mtp", "sweep", {}),
        ("frozen_kv_mtp", "frozen_kv_mtp", None, {}),
        ("frozen_kv_mtp:sweep", "frozen_kv_mtp", "sweep", {}),
        ("frozen_kv_mtp:4:draft_attention=split", "frozen_kv_mtp", 4, {"draft_attention": "split"}),
        (
            "frozen_kv_mtp:centroid_head=fused/kv_guard=false/sliding_split_kv_max_rows=-1",
            "frozen_kv_mtp",
            None,
            {"centroid_head": "fused", "kv_guard": False, "sliding_split_kv_max_rows": -1},
        ),
    ],
)
def test_method_strings_parse_into_name_k_and_typed_options(
    text: str, name: str, k: Any, options: dict[str, Any]
) -> None:
    spec = parse(text)
    assert (spec.name, spec.k, spec.options) == (name, k, options)
    assert spec.text() == text  # already the one spelling


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("frozen:4", "frozen_kv_mtp:4"),
        ("frozen:sweep", "frozen_kv_mtp:sweep"),
        ("frozen:4:target_softcap=vllm", "frozen_kv_mtp:4:target_softcap=vllm"),
        (
            "frozen:sweep:centroid_head=upstream/target_softcap=vllm",
            "frozen_kv_mtp:sweep:centroid_head=upstream/target_softcap=vllm",
        ),
        ("frozen_kv_mtp:kv_guard=False", "frozen_kv_mtp:kv_guard=false"),
    ],
)
def test_older_spellings_are_translated(old: str, new: str) -> None:
    assert canonical(old) == new


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("eagle9", "use one of none, mtp, frozen_kv_mtp"),
        ("frozen-kv-mtp:4", "use one of"),
        ("mtp:0", "K is an integer >= 1 or 'sweep'"),
        ("mtp:four", "K is an integer >= 1"),
        ("frozen_kv_mtp:draft_attention", "K is an integer"),  # no '=': read as K
        ("frozen_kv_mtp:a=b:4", "K comes before the options"),
        ("frozen_kv_mtp::a=b", "an empty K"),
        ("frozen_kv_mtp:4:split", "is not OPTION=VALUE"),
        ("frozen_kv_mtp:4:num_speculative_tokens=5", "set by the syntax"),
        ("none:4", "none takes no K"),
        ("none:a=b", "none takes no K"),
    ],
)
def test_bad_method_strings_name_their_fix(text: str, fix: str) -> None:
    with pytest.raises(MethodError, match=re.escape(fix)):
        parse(text)


def test_each_bench_asks_for_what_it_needs() -> None:
    with pytest.raises(MethodError, match=r"frozen_kv_mtp:K or frozen_kv_mtp:sweep"):
        draft_length(_tokens("frozen_kv_mtp"))  # bench.gpu_tokens has no default k
    with pytest.raises(MethodError, match=r"give K, e\.g\. mtp:4"):
        draft_length(_gpu("mtp:sweep"))  # bench.gpu times one k
    assert draft_length(_gpu("frozen_kv_mtp")) == 3
    assert draft_length(_gpu("frozen_kv_mtp:5")) == 5  # K over --k
    assert draft_length(_tokens("frozen_kv_mtp:sweep", k_max=6)) == 6
    assert draft_length(_tokens("none")) == 0


def test_bench_gpu_refuses_a_bad_method_before_any_engine() -> None:
    from bench.gpu import parse_method

    assert parse_method("frozen_kv_mtp:sliding_split_kv_max_rows=8").options == {
        "sliding_split_kv_max_rows": 8
    }
    for bad in ("eagle9", "frozen_kv_mtp:sweep"):
        with pytest.raises(SystemExit, match="--method: "):
            parse_method(bad)


# ---- the factory ---------------------------------------------------------------------


def test_bench_gpu_engine_on_a_shape() -> None:
    """What bench.gpu built before the factory: bf16 dummy weights, no tokenizer, the
    method's options beside k, CUDA graphs without torch.compile in --mode graphs."""
    settings = _gpu(
        "frozen_kv_mtp:centroid_head=dense",
        mode="graphs",
        max_model_len=1216,
        max_num_seqs=128,
        gpu_memory_utilization=0.85,
    )
    assert llm_kwargs(settings, "T", "A") == {
        "model": "T",
        "dtype": "bfloat16",
        "seed": 0,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "disable_log_stats": False,
        "speculative_config": {
            "method": "frozen_kv_mtp",
            "model": "A",
            "num_speculative_tokens": 3,
            "centroid_head": "dense",
        },
        "max_model_len": 1216,
        "max_num_seqs": 128,
        "gpu_memory_utilization": 0.85,
        "tensor_parallel_size": 1,
        "compilation_config": {"mode": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"},
    }
    default = llm_kwargs(_gpu("none"), "T", "A")
    assert default["speculative_config"] is None
    assert not {"compilation_config", "enforce_eager", "attention_config"} & set(default)


def test_bench_gpu_tokens_engines() -> None:
    """What bench.gpu_tokens built before the factory, engine by engine."""
    sweep = speculative_config(_tokens("frozen_kv_mtp:sweep", k_max=7), "A")
    assert sweep == {
        "method": "frozen_kv_mtp",
        "model": "A",
        "num_speculative_tokens": "auto",
        "max_num_speculative_tokens": 7,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": list(CHAT),
    }
    upstream = speculative_config(_tokens("mtp:sweep", k_max=3), "A")
    assert upstream is not None
    assert upstream["num_speculative_tokens"] == 3
    assert upstream["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 3], [2, 2, 2], [3, 3, 1], [4, 4, 0]
    ]  # fmt: skip
    assert upstream["synthetic_acceptance_rates"] == list(CHAT[:3])
    static = speculative_config(_tokens("frozen_kv_mtp:4:draft_attention=split"), "A")
    assert static == {
        "method": "frozen_kv_mtp",
        "model": "A",
        "num_speculative_tokens": 4,
        "draft_attention": "split",
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": list(CHAT[:4]),
    }
    real = EngineSettings(parse("mtp:4"), target="t", assistant="a", dtype="float32")
    kw = llm_kwargs(real, "t", "a")
    assert kw["speculative_config"] == {"method": "mtp", "model": "a", "num_speculative_tokens": 4}
    assert (kw["load_format"], kw["skip_tokenizer_init"], kw["dtype"]) == ("auto", False, "float32")
    assert speculative_config(_tokens("none"), "A") is None


def test_compilation_and_attention_choices() -> None:
    assert compilation_kwargs("eager") == {"enforce_eager": True}
    assert compilation_kwargs("default") == {}
    assert compilation_kwargs("graphs", (8, 4, 8))["compilation_config"] == {
        "mode": 0,
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "cudagraph_capture_sizes": [4, 8],
    }
    fa4 = llm_kwargs(_tokens("none", attention="FA4"), "T", "A")["attention_config"]
    assert fa4 == {"backend": "FLASH_ATTN", "flash_attn_version": 4}
    triton = llm_kwargs(_tokens("none", attention="TRITON_ATTN"), "T", "A")
    assert triton["attention_config"] == {"backend": "TRITON_ATTN"}
    with pytest.raises(MethodError, match="unknown mode"):
        compilation_kwargs("fast")
    with pytest.raises(MethodError, match="both --target and --assistant"):
        llm_kwargs(EngineSettings(parse("none"), target="t"), "t", "a")


# ---- every documented method string --------------------------------------------------

#: the files whose commands run the benches
DOCUMENTED = [
    "BENCHMARKS.md",
    "README.md",
    *(f"docs/{p.name}" for p in sorted((REPO / "docs").glob("*.md"))),
    *(f"tools/plans/{p.name}" for p in sorted((REPO / "tools/plans").glob("*.plan"))),
    "tools/remote_gpu_session.sh",
    "bench/gpu.py",
    "bench/gpu_tokens.py",
    "bench/micro/profile_draft_gpu.py",
]
_FLAG = re.compile(r"--(method|engine)s?[ =]\"?([^\s\"'`\]\)]+)")
_ENV = re.compile(r"(?:E4B|B31)_METHODS(?:=|:-)\"?([^\s\"'`}]+)")
#: a kernel profile of the session script: METHOD@CONCURRENCY
_PROFILES = re.compile(r"PROFILES=\"([^\"]+)\"")
#: a method string or list quoted or in backticks in prose, e.g. `mtp:sweep`
_NAME = r"(?:none|mtp|frozen_kv_mtp|frozen)"
_QUOTED = re.compile(rf"[\"`]({_NAME}(?::[^\"`\s]+|(?:,[^\"`\s,]+)+)(?:,[^\"`\s,]+)*)[\"`]")


def documented_methods() -> list[tuple[str, str, str]]:
    """(file:line, bench, method string) of every method a command in DOCUMENTED gives:
    bench is "tokens" (bench.gpu_tokens), "gpu" (bench.gpu, its session variables and
    profile_draft_gpu) or "" where the line names no bench."""
    found = []
    for name in DOCUMENTED:
        for n, line in enumerate((REPO / name).read_text().splitlines(), 1):
            where = f"{name}:{n}"
            bench = (
                "tokens"
                if "bench.gpu_tokens" in line
                else "gpu"
                if re.search(r"bench\.gpu\b|profile_draft_gpu|(E4B|B31)_METHODS", line)
                else ""
            )
            values = [(m.group(2), bench) for m in _FLAG.finditer(line)]
            values += [(m.group(1), "gpu") for m in _ENV.finditer(line)]
            for m in _PROFILES.finditer(line):
                items = [item.rpartition("@") for item in m.group(1).split()]
                values += [(text, "gpu") for text, _, c in items if c.isdigit()]
            if not name.endswith(".py"):  # in code, quoted strings are row labels too
                values += [(m.group(1), bench) for m in _QUOTED.finditer(line)]
            for value, kind in dict(reversed(values)).items():  # the first finding's bench
                if "$" in value or value.startswith("-"):  # a shell variable, not a method
                    continue
                if value.endswith("_total"):  # a Prometheus counter's name, not a method
                    continue
                for text in value.split(","):
                    # the session script fills @ATTN with bench.micro.attn_gpu's row count
                    found.append((where, kind, text.replace("@ATTN", "8")))
    return found


def test_the_documented_commands_are_found() -> None:
    """The search below cannot pass by finding nothing."""
    found = documented_methods()
    files = {where.split(":")[0] for where, _, _ in found}
    assert {
        "BENCHMARKS.md",
        "docs/tuning.md",
        "tools/plans/long_context.plan",
        "tools/plans/peers_e4b.plan",
        "tools/remote_gpu_session.sh",
    } <= files
    texts = {text for _, _, text in found}
    assert {
        "none",
        "mtp:4",
        "frozen_kv_mtp:sweep",
        "frozen_kv_mtp:4:draft_attention=split",
    } <= texts
    assert "frozen_kv_mtp:draft_attention=split/dense_head=fp8" in texts
    assert len(found) >= 40


@pytest.mark.parametrize(("where", "bench", "text"), documented_methods())
def test_every_documented_method_is_in_the_one_syntax_and_builds(
    where: str, bench: str, text: str
) -> None:
    try:
        spec = parse(text)
    except MethodError as e:
        pytest.fail(f"{where}: {e}")
    assert spec.text() == text, f"{where}: write {spec.text()!r}, the one spelling"
    settings = {"tokens": [_tokens], "gpu": [_gpu], "": [_tokens, _gpu]}[bench]
    built = []
    for make in settings:
        try:
            built.append(llm_kwargs(make(text), "T", "A"))
        except MethodError as e:
            if bench:
                pytest.fail(f"{where}: {e}")
    assert built, f"{where}: {text!r} builds no bench's engine"
    for kw in built:
        config = kw["speculative_config"]
        assert (config is None) == (spec.name == "none")
        if config is not None:
            assert config["method"] == spec.name and config["model"] == "A"
            assert spec.options.items() <= config.items()


_COMMAND = re.compile(r"-m (bench\.gpu_tokens|bench\.gpu) ((?:run|all|report)(?=\s|$)[^`#&|;>\\]*)")
_VARIABLE = re.compile(r'^\s*([A-Z]+)="([^"]*)"\s*$')


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(file:line, module, argv) of every one-line ``python -m bench.gpu[_tokens]`` command
    in DOCUMENTED, with the shell variables the file sets (``F="..."``) filled in."""
    found = []
    for name in DOCUMENTED:
        variables = {"LABEL": "label", "Q": "/tmp/queue"}
        for n, line in enumerate((REPO / name).read_text().splitlines(), 1):
            if m := _VARIABLE.match(line):
                variables[m.group(1)] = m.group(2)
            for m in _COMMAND.finditer(line):
                text = m.group(2)
                for var, value in variables.items():
                    text = text.replace(f"${var}", value)
                text = re.sub(r"\$\([^)]*\)", "x", text)  # e.g. $(date -u +%F-%H%M)
                if "$" not in text:  # a variable set elsewhere: the method test covers it
                    found.append((f"{name}:{n}", m.group(1), shlex.split(text)))
    return found


def test_the_documented_command_lines_are_found() -> None:
    found = documented_commands()
    assert len({where.split(":")[0] for where, _, _ in found}) >= 4
    assert sum(module == "bench.gpu_tokens" for _, module, _ in found) >= 25
    assert any(module == "bench.gpu" for _, module, _ in found)


@pytest.mark.parametrize(("where", "module", "argv"), documented_commands())
def test_every_documented_command_parses(where: str, module: str, argv: list[str]) -> None:
    """Each command line through its bench's own argument checks (no engine starts)."""
    import importlib

    arguments = importlib.import_module(module).arguments
    try:
        args = arguments(argv)
    except SystemExit as e:
        pytest.fail(f"{where}: {' '.join(argv)!r} exits {e.code}")
    assert args.cmd == argv[0]


def test_older_flag_names_and_spellings_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    """bench.gpu_tokens took ``--engine``/``--engines`` and ``frozen:K``: still read, and
    ``all`` hands each engine to ``run`` as ``--method`` without the list flag."""
    from bench.gpu_tokens import arguments, without_flag

    assert arguments(["run", "--engine", "frozen:sweep"]).method == "frozen:sweep"
    assert arguments(["all", "--engines", "none,frozen:4"]).methods == "none,frozen:4"
    argv = ["--engines", "a,b", "--model", "E4B", "--methods=c", "--tp", "1"]
    assert without_flag(without_flag(argv, "--engines"), "--methods") == [
        "--model", "E4B", "--tp", "1"
    ]  # fmt: skip
    for argv, fix in (
        (["run", "--method", "frozen_kv_mtp"], "frozen_kv_mtp:K or frozen_kv_mtp:sweep"),
        (["all", "--methods", "none,eagle:4"], "unknown method 'eagle'"),
        (["run", "--method", "none", "--target", "t"], "--target and --assistant go together"),
    ):
        with pytest.raises(SystemExit) as e:
            arguments(argv)
        assert e.value.code == 2 and fix in capsys.readouterr().err


def test_default_method_lists_build() -> None:
    from bench import gpu_tokens
    from bench.method import METHODS

    for text in gpu_tokens.DEFAULT_METHODS.split(","):
        assert llm_kwargs(_tokens(text), "T", "A")["model"] == "T"
    for text in METHODS:
        assert llm_kwargs(_gpu(text), "T", "A")["model"] == "T"


def _committed_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted((REPO / "bench/results").glob("*.json")):
        data = json.loads(path.read_text())
        rows += [r for r in (data if isinstance(data, list) else []) if isinstance(r, dict)]
    return rows


def test_committed_rows_read_in_the_one_syntax() -> None:
    """bench.gpu_tokens rows name their engine (older ones ``frozen:4``), bench.gpu rows
    their method without K: every one reads as a method string."""
    rows = _committed_rows()
    # peers rows (bench/peers.py) name the engine family instead: vllm or sglang
    engines = {r["engine"] for r in rows if isinstance(r.get("engine"), str)} - {"sglang", "vllm"}
    methods = {
        r["method"]
        for r in rows
        if isinstance(r.get("method"), str) and "engine" not in r and "variant" not in r
    }
    assert "frozen:sweep" in engines and "frozen_kv_mtp:centroid_head=dense" in methods
    for text in engines:
        assert canonical(text).split(":")[0] in ("none", "mtp", "frozen_kv_mtp")
    for text in methods:
        assert parse(text).k is None, text  # bench.gpu keeps k apart


def test_acceptance_variants_are_method_strings() -> None:
    from bench.acceptance_gpu import parse_variants

    one = "mtp:draft_sample_method=probabilistic/rejection_sample_method=block"
    assert parse_variants(one) == [("mtp", "probabilistic", "block")]
    assert parse_variants("frozen_kv_mtp:greedy:standard") == [
        ("frozen_kv_mtp", "greedy", "standard")
    ]  # the older method:draft:rejection
    for bad, fix in (
        ("mtp:draft_sample_method=greedy", "is not METHOD:draft_sample_method=D"),
        ("mtp:4:draft_sample_method=greedy/rejection_sample_method=block", "(k is --k)"),
        ("none", "is not METHOD"),
        ("eagle:greedy:standard", "unknown method"),
        (one + "/centroid_head=dense", "only draft_sample_method and"),
    ):
        with pytest.raises(SystemExit, match=re.escape(fix)):
            parse_variants(bad)


def test_the_one_syntax_round_trips() -> None:
    spec = MethodSpec("frozen_kv_mtp", None, {"kv_guard": True, "rows": 8})
    assert spec.text(4) == "frozen_kv_mtp:4:kv_guard=true/rows=8"
    assert parse(spec.text(4)) == MethodSpec("frozen_kv_mtp", 4, spec.options)
    assert spec.without_k() == "frozen_kv_mtp:kv_guard=true/rows=8"
    assert MethodSpec("none").text(4) == "none"


def test_the_factory_is_pure_until_build() -> None:
    """No engine, no files: llm_kwargs on a shape writes nothing under its shapes dir."""
    missing = Path("/nonexistent/shapes")
    kw = llm_kwargs(_gpu("frozen_kv_mtp", shapes=str(missing)), "T", "A")
    assert kw["model"] == "T" and not missing.exists()
