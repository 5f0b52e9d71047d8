"""``frozen-kv-mtp`` command: small helpers around the plugin.

frozen-kv-mtp demo [--pair trained]      run the CPU demo
frozen-kv-mtp fixtures --out models      build the tiny Gemma 4 fixtures
frozen-kv-mtp check-config TARGET '{"method":"frozen_kv_mtp",...}'
                                         validate a speculative config (no engine)
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
    except FrozenKVMTPConfigError as e:  # ours name their fix; vLLM's own errors propagate
        print(f"error: {e}", file=sys.stderr)
        return 2
    spec = cfg.speculative_config
    print(
        f"ok: method {spec.method} (frozen_kv_mtp), k={spec.num_speculative_tokens}, "
        f"assistant {spec.model}; options {cfg.additional_config.get('frozen_kv_mtp')}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="frozen-kv-mtp", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("command", choices=["demo", "fixtures", "check-config"])
    args, rest = p.parse_known_args(argv)
    if args.command == "demo":
        from vllm_frozen_kv_mtp.demo import main as demo

        demo(rest)
        return 0
    if args.command == "fixtures":
        from vllm_frozen_kv_mtp.fixtures.build import main as build

        build(rest)
        return 0
    if len(rest) != 2:
        p.error("check-config needs TARGET and a JSON speculative config")
    return _check_config(rest[0], rest[1])


if __name__ == "__main__":
    raise SystemExit(main())
