"""A metadata-only distribution that declares one entry point.

vLLM and SGLang find plugins through entry points. A server started from a checkout (no
pip install) finds ours through a ``<name>-<version>.dist-info`` folder on its path that
holds only ``METADATA`` and ``entry_points.txt``: all ``importlib.metadata`` reads."""

from __future__ import annotations

from pathlib import Path


def entry_point_dist(
    directory: str | Path, dist: str, group: str, name: str, target: str, version: str = "0.0.0"
) -> Path:
    """Write distribution ``dist`` under ``directory``, declaring ``name = target`` in
    entry-point ``group``; the ``.dist-info`` folder."""
    info = Path(directory) / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {target}\n")
    return info
