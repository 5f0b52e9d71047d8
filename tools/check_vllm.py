"""Check the plugin's vLLM surface against a given vLLM release, without installing it.

``python -m tools.check_vllm 0.33.0`` downloads the ``vllm`` wheel from PyPI (``--no-deps``)
into ``.vllm-src/<version>/``, extracts its Python sources there, checks that every
``vllm`` import of the plugin resolves in them, and runs tests/unit/test_vllm_surface.py
against them. Nothing is imported from that tree and no GPU is needed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tools.plugin_surface import import_problems, plugin_modules, vllm_imports
from tools.vllm_source import VLLM_SRC_ENV, VllmSource

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".vllm-src"


def fetch_sources(version: str, dest: Path) -> Path:
    """``vllm/**.py`` of the PyPI wheel under ``dest/src`` (downloaded and extracted once;
    the wheel itself is deleted afterwards: 300+ MB of compiled kernels)."""
    src = dest / "src"
    marker = src / ".extracted"
    if marker.is_file():
        return src
    wheel_dir = dest / "wheel"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "-q"]
    proc = subprocess.run([*cmd, "-d", str(wheel_dir)], capture_output=True, text=True)
    wheels = sorted(wheel_dir.glob(f"vllm-{version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        sys.exit(f"pip download vllm=={version} failed:\n{proc.stdout}{proc.stderr}")
    with zipfile.ZipFile(wheels[0]) as zf:
        names = [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(".py")]
        zf.extractall(src, members=names)
    marker.write_text(wheels[0].name)
    shutil.rmtree(wheel_dir)
    return src


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="vLLM release on PyPI, e.g. 0.33.0")
    args = parser.parse_args(argv)

    root = fetch_sources(args.version, CACHE / args.version)
    src = VllmSource(root)
    print(f"vLLM {src.version} sources: {root.relative_to(REPO)}")

    imports = vllm_imports(plugin_modules())
    problems = import_problems(src, imports)
    distinct = len({(i.module, i.name) for i in imports})
    print(f"static import check: {len(imports)} vllm imports ({distinct} distinct), "
          f"{len(problems)} unresolved")  # fmt: skip
    for p in problems:
        print(f"  {p}")

    env = {**os.environ, VLLM_SRC_ENV: str(root)}
    test = "tests/unit/test_vllm_surface.py"
    rc = subprocess.call([sys.executable, "-m", "pytest", test, "-q", "-rxs"], cwd=REPO, env=env)
    return 1 if problems or rc else 0


if __name__ == "__main__":
    sys.exit(main())
