"""The one method syntax of the vLLM benches (``bench.gpu``, ``bench.gpu_tokens``, their
plans and docs):

    METHOD[:K][:OPTION=VALUE[/OPTION=VALUE...]]

METHOD is what vLLM's ``speculative_config["method"]`` takes: ``none`` (no speculation),
``mtp`` (upstream) or ``frozen_kv_mtp``. K is ``num_speculative_tokens`` (an integer >= 1)
or ``sweep``: one engine built for every k up to the bench's ``--k-max``, whose rows pin k,
run vLLM's schedule or ``"auto"`` (``bench.gpu_tokens`` only). Without K a bench uses its
own ``--k``. OPTIONs are further ``speculative_config`` keys (the plugin's options, e.g.
``draft_attention=split``); integers and true/false are converted. Examples::

    none   mtp:4   mtp:sweep   frozen_kv_mtp:sweep   frozen_kv_mtp:4:draft_attention=split
    frozen_kv_mtp:centroid_head=dense/kv_guard=false          (k from --k)

The full method name is the one a user writes in ``speculative_config``, so a bench string
reads as the config it builds. ``frozen`` (older ``bench.gpu_tokens`` rows and commands)
is read as ``frozen_kv_mtp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

METHODS = ("none", "mtp", "frozen_kv_mtp")
#: older spellings, translated
ALIASES = {"frozen": "frozen_kv_mtp"}
SWEEP = "sweep"
#: keys the syntax itself sets: an option may not set them too
RESERVED = ("method", "model", "num_speculative_tokens")


class MethodError(ValueError):
    """A method string the syntax does not accept; the message names the fix."""


@dataclass(frozen=True)
class MethodSpec:
    """One parsed method string."""

    name: str
    #: num_speculative_tokens, ``"sweep"``, or None (the bench's default k)
    k: int | str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def speculative(self) -> bool:
        return self.name != "none"

    @property
    def sweep(self) -> bool:
        return self.k == SWEEP

    @property
    def options_text(self) -> str:
        """``OPTION=VALUE/...`` in the order given ('' without options)."""
        return "/".join(f"{key}={_show(value)}" for key, value in self.options.items())

    def text(self, k: int | str | None = None) -> str:
        """The canonical string; ``k`` fills in a draft length the string left out."""
        k = self.k if self.k is not None else k
        parts = [self.name]
        if self.speculative and k is not None:
            parts.append(str(k))
        if self.options:
            parts.append(self.options_text)
        return ":".join(parts)

    def without_k(self) -> str:
        """METHOD[:OPTIONS]: ``bench.gpu``'s row ``method`` (its rows keep k apart)."""
        return ":".join([self.name, self.options_text] if self.options else [self.name])


def parse(text: str) -> MethodSpec:
    """``text`` -> MethodSpec; MethodError names the fix for anything else."""
    name, _, rest = text.strip().partition(":")
    name = ALIASES.get(name, name)
    if name not in METHODS:
        raise MethodError(
            f"unknown method {name!r} in {text!r}: use one of {', '.join(METHODS)}, "
            "as METHOD[:K][:OPTION=VALUE/...], e.g. frozen_kv_mtp:4:draft_attention=split"
        )
    k: int | str | None = None
    head, colon, tail = rest.partition(":")
    if colon and not head:
        raise MethodError(f"{text!r}: an empty K; write METHOD:K:OPTIONS or METHOD:OPTIONS")
    if head and "=" not in head:  # the K field; options follow it
        k, rest = _k(head, text), tail
    elif tail and "=" not in tail.partition(":")[0]:
        raise MethodError(f"{text!r}: K comes before the options: METHOD:K:OPTION=VALUE")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split("/")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise MethodError(f"{text!r}: option {item!r} is not OPTION=VALUE")
        if key in RESERVED:
            raise MethodError(f"{text!r}: {key} is set by the syntax, not as an option")
        options[key] = _value(value)
    if name == "none" and (k is not None or options):
        raise MethodError(f"{text!r}: none takes no K and no options; write none")
    return MethodSpec(name, k, options)


def canonical(text: str, default_k: int | str | None = None) -> str:
    """The one spelling of ``text`` (e.g. ``frozen:4`` -> ``frozen_kv_mtp:4``); ``default_k``
    fills in a draft length the string left out."""
    return parse(text).text(default_k)


def row_engine(row: dict[str, Any]) -> str:
    """A ``bench.gpu_tokens`` row's ``engine`` (the method string it ran) in the one
    spelling: older rows say ``frozen:4``; another engine's rows (``sglang``) keep theirs."""
    text = str(row.get("engine", ""))
    try:
        return canonical(text)
    except MethodError:
        return text


def _k(text: str, whole: str) -> int | str:
    if text == SWEEP:
        return SWEEP
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise MethodError(f"{whole!r}: K is an integer >= 1 or {SWEEP!r}, not {text!r}")


def _value(text: str) -> Any:
    if text.lstrip("-").isdigit():
        return int(text)  # e.g. sliding_split_kv_max_rows=8
    return {"true": True, "false": False}.get(text.lower(), text)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
