"""``frozen-kv-mtp``: the plugin's command line (argument parsing only; each command
lives in its own module)."""

from __future__ import annotations

import argparse
import json
import os
import sys

DESCRIPTION = """\
Helpers for vllm_frozen_kv_mtp, the vLLM plugin that adds the speculative-decoding
method "frozen_kv_mtp" for Gemma 4 targets and their MTP assistants. Serving needs no
command from here: pass --speculative-config '{"method": "frozen_kv_mtp", ...}' to vLLM.

After `make demo` or `make test` this command is .venv/bin/frozen-kv-mtp
(or run `. .venv/bin/activate` once to put it on PATH). The CPU demo and the test
fixtures live in the repository, beside the plugin: `make demo`, `make fixtures`."""

EPILOG = """\
examples:
  frozen-kv-mtp check-config google/gemma-4-E4B-it \\
      '{"method":"frozen_kv_mtp","model":"google/gemma-4-E4B-it-assistant"}'
  frozen-kv-mtp check-config --shape google/gemma-4-31B-it \\
      '{"method":"frozen_kv_mtp","model":"google/gemma-4-31B-it-assistant","num_speculative_tokens":"auto"}'
  frozen-kv-mtp options          # every key of --speculative-config, with its default"""

CHECK_DESCRIPTION = """\
Check SPEC (the --speculative-config JSON) for TARGET without starting an engine.
The answer is the last line: "ok: ..." (exit 0) or "error: <problem> Fix: <fix>" (exit 2).

By default it runs the plugin's checks (seconds): the key names and values, the
assistant against the target (model type, hidden size, vocabulary, KV shapes), k and
its policy, exactly as `vllm serve` runs them before its engine starts. --full also
builds vLLM's whole engine config on this install, as `vllm serve` does (vLLM's own
checks; about ten seconds, most of it importing vLLM)."""

CHECK_EPILOG = """\
TARGET and the assistant in SPEC are local directories or hub ids. Offline (no network,
or HF_HUB_OFFLINE=1), --shape checks the published Gemma 4 sizes against their
config-only shapes, which ship with the plugin: TARGET google/gemma-4-{E2B,E4B,26B-A4B,31B}-it
(or just E2B, E4B, 26B-A4B, 31B) and "model" google/gemma-4-<size>-it-assistant."""


def _program() -> str:
    """How the user ran us, so suggested commands paste back as typed."""
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0 if os.path.basename(argv0) == "frozen-kv-mtp" else "frozen-kv-mtp"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="frozen-kv-mtp",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "options",
        help="every --speculative-config key, its default and meaning",
        description="Print every --speculative-config key of frozen_kv_mtp with its "
        "default, the expert knobs, and the keys refused at config time.",
    )
    check = sub.add_parser(
        "check-config",
        help="check a speculative config against a target (no engine, no GPU; seconds)",
        description=CHECK_DESCRIPTION,
        epilog=CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("target", metavar="TARGET", help="the target model (directory or hub id)")
    check.add_argument("spec", metavar="SPEC", help="the --speculative-config JSON")
    check.add_argument(
        "--full",
        action="store_true",
        help="also build vLLM's engine config on this install, as `vllm serve` does",
    )
    check.add_argument(
        "--shape",
        action="store_true",
        help="check hub ids of the published Gemma 4 sizes against their config-only "
        "shapes (offline)",
    )
    check.add_argument(
        "-v", "--verbose", action="store_true", help="show vLLM's and the plugin's log"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """The console script; exits quietly when its reader goes away (``options | head``)."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # Python would print a traceback while flushing stdout at exit: point it at
        # /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.command == "options":
        from vllm_frozen_kv_mtp.frontend.option_help import render

        print(render())
        return 0
    from vllm_frozen_kv_mtp.frontend.check_config import REFUSED, Request, run

    try:
        spec = json.loads(args.spec)
    except json.JSONDecodeError as e:
        print(f"error: the speculative config is not JSON ({e}): {args.spec}", file=sys.stderr)
        return REFUSED
    if not isinstance(spec, dict):
        print(f"error: the speculative config must be a JSON object: {args.spec}", file=sys.stderr)
        return REFUSED
    return run(
        Request(
            target=args.target,
            spec=spec,
            spec_json=args.spec,
            shape=args.shape,
            full=args.full,
            verbose=args.verbose,
            program=_program(),
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
