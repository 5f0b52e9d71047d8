"""``frozen-kv-mtp`` command: small helpers around the plugin.

frozen-kv-mtp options                    every --speculative-config key, its default
frozen-kv-mtp check-config TARGET '{"method":"frozen_kv_mtp",...}'
                                         validate a speculative config (no engine)
frozen-kv-mtp demo [--pair trained]      run the CPU demo
frozen-kv-mtp fixtures --out models      build the tiny Gemma 4 fixtures
"""

from __future__ import annotations

import argparse
import json
import sys


def _check_config(target: str, spec_json: str) -> int:
    """0 and a summary for a good config; 2 and the error (with its fix) for a bad one."""
    import vllm_frozen_kv_mtp
    from vllm_frozen_kv_mtp.config import FrozenKVMTPConfigError

    try:
        spec_dict = json.loads(spec_json)
    except json.JSONDecodeError as e:
        print(f"error: the speculative config is not JSON ({e}): {spec_json}", file=sys.stderr)
        return 2
    vllm_frozen_kv_mtp.register()
    from vllm.engine.arg_utils import EngineArgs

    try:
        cfg = EngineArgs(
            model=target, speculative_config=spec_dict, skip_tokenizer_init=True
        ).create_engine_config()
    except FrozenKVMTPConfigError as e:  # ours name their fix
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # vLLM's config checks (pydantic's ValidationError among them)
        print(f"error: vLLM refused the engine config: {_first_reason(e)}", file=sys.stderr)
        hint = _inspection_hint(str(e))
        if hint:
            print(hint, file=sys.stderr)
        return 2
    from vllm_frozen_kv_mtp.config import describe_draft_length, describe_draft_sample_method

    spec = cfg.speculative_config
    options = cfg.additional_config.get("frozen_kv_mtp") or {}
    draft_length = describe_draft_length(
        options.get("k_policy", "static"),
        spec.num_speculative_tokens,
        spec.num_speculative_tokens_per_batch_size,
    )
    drafts = describe_draft_sample_method(spec.draft_sample_method)
    print(
        f"ok: method {spec.method} (frozen_kv_mtp), {draft_length}, {drafts} drafts, "
        f"{spec.rejection_sample_method} verification, assistant {spec.model}; options {options}"
    )
    return 0


def _first_reason(e: Exception) -> str:
    """The line of a (pydantic) validation error that says what is wrong."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Value error,"):
            return line.removeprefix("Value error,").split(" [type=")[0].strip()
    return lines[0] if lines else type(e).__name__


def _inspection_hint(message: str) -> str | None:
    """Why vLLM could not inspect a hub Gemma 4 checkpoint here, and what to do."""
    if "failed to be inspected" not in message or "Gemma4ForConditionalGeneration" not in message:
        return None
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return (
            "hint: the hub's Gemma 4 checkpoints are Gemma4ForConditionalGeneration, whose "
            "vLLM module needs torchvision, which CPU installs remove (README). Check the "
            "config on a GPU install, or here against a text-only config of the same shape: "
            "`python -m vllm_frozen_kv_mtp.fixtures.shapes --out models/shapes --sizes 31B`, "
            "then TARGET models/shapes/gemma-4-31B-it-shape and assistant "
            "models/shapes/gemma-4-31B-it-assistant-shape."
        )
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="frozen-kv-mtp", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("options", help="every --speculative-config key, its default and meaning")
    check = sub.add_parser(
        "check-config",
        help="validate a speculative config against a target (no engine, no GPU)",
        description="Build vLLM's engine config for TARGET with SPEC, as `vllm serve` "
        "would, and print what frozen_kv_mtp will run, or the error with its fix (exit 2).",
    )
    check.add_argument("target", metavar="TARGET", help="the target model (path or hub id)")
    check.add_argument("spec", metavar="SPEC", help="the --speculative-config JSON")
    # demo and fixtures parse their own flags (`frozen-kv-mtp demo --help`)
    sub.add_parser("demo", help="run the CPU demo (--help for its flags)", add_help=False)
    sub.add_parser("fixtures", help="build the tiny Gemma 4 fixtures", add_help=False)
    args, rest = p.parse_known_args(argv)
    if args.command == "demo":
        from vllm_frozen_kv_mtp.demo import main as demo

        demo(rest)
        return 0
    if args.command == "fixtures":
        from vllm_frozen_kv_mtp.fixtures.build import main as build

        build(rest)
        return 0
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "options":
        from vllm_frozen_kv_mtp.option_help import render

        print(render())
        return 0
    return _check_config(args.target, args.spec)


if __name__ == "__main__":
    raise SystemExit(main())
