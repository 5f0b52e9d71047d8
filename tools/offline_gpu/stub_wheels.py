"""Metadata-only wheels of packages the GPU image already has (torch, triton, ...).

``pip download --find-links DIR`` then resolves a bundle's dependencies against the
image's versions without downloading them: each stub has a name, a version and a
cp312 manylinux_2_35 tag (the host's), and no files. The offline-GPU recipes (vLLM, FA4,
SGLang) call it with their pins:

    python3.12 tools/offline_gpu/stub_wheels.py DIR torch:2.11.0 triton:3.6.0
"""

from __future__ import annotations

import sys
import zipfile

TAG = "cp312-cp312-manylinux_2_35_x86_64"


def write_stub(directory: str, name: str, version: str) -> str:
    path = f"{directory}/{name}-{version}-{TAG}.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    wheel = f"Wheel-Version: 1.0\nGenerator: stub\nRoot-Is-Purelib: false\nTag: {TAG}\n"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", metadata)
        z.writestr(f"{info}/WHEEL", wheel)
        z.writestr(f"{info}/RECORD", "")
    return path


def main(argv: list[str]) -> int:
    directory, pins = argv[0], argv[1:]
    for pin in pins:
        name, version = pin.split(":")
        write_stub(directory, name, version)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
