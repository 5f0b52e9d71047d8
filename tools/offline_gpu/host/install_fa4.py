"""Install an unpacked FA4 archive (core/, fallback/, fallback.txt) into a --target style site dir.

usage: python3 install_fa4.py UNPACKED_DIR SITE_DIR

core/: copied into SITE_DIR. A package already in SITE_DIR under the same name but another version
(e.g. an apache-tvm-ffi that came with the base bundle) is removed first, by its RECORD, so that one
version stays. fallback/<name>/: copied only where neither SITE_DIR nor the image provides a version
that satisfies the requirement in fallback.txt.
"""

import importlib.metadata as md
import os
import re
import shutil
import sys


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_infos(site: str) -> dict[str, str]:
    out = {}
    for e in os.listdir(site):
        if e.endswith(".dist-info"):
            out[canon(e[: -len(".dist-info")].rsplit("-", 1)[0])] = e
    return out


def remove_dist(site: str, info: str) -> None:
    """Remove one installed distribution from site by its RECORD (never outside site)."""
    root = os.path.realpath(site)
    record = os.path.join(site, info, "RECORD")
    dirs = set()
    if os.path.exists(record):
        with open(record, encoding="utf-8") as f:
            for line in f:
                rel = line.rsplit(",", 2)[0].strip()
                path = os.path.realpath(os.path.join(site, rel))
                if not rel or not path.startswith(root + os.sep):
                    continue
                if os.path.isfile(path) or os.path.islink(path):
                    os.remove(path)
                dirs.add(os.path.dirname(path))
    shutil.rmtree(os.path.join(site, info), ignore_errors=True)
    for d in sorted(dirs, key=len, reverse=True):  # prune emptied folders, deepest first
        while d.startswith(root + os.sep) and os.path.isdir(d) and not os.listdir(d):
            os.rmdir(d)
            d = os.path.dirname(d)


def copy_tree(src: str, site: str) -> None:
    for e in os.listdir(src):
        s, t = os.path.join(src, e), os.path.join(site, e)
        if os.path.isdir(s):
            shutil.copytree(s, t, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(s, t)


def satisfied(req: str) -> tuple[bool, str]:
    name, spec = req.split(" ", 1)
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        return False, "missing"
    try:
        from packaging.requirements import Requirement
    except ImportError:
        try:
            from pip._vendor.packaging.requirements import (  # type: ignore[assignment]
                Requirement,
            )
        except ImportError:
            return True, f"{have} (not checked against {spec})"
    ok = Requirement(spec).specifier.contains(have, prereleases=True)
    return ok, have


def main() -> None:
    src, site = sys.argv[1], sys.argv[2]
    sys.path.insert(0, site)  # see what the bundle and the image provide
    installed = dist_infos(site)
    core = os.path.join(src, "core")
    for name, info in dist_infos(core).items():
        if name in installed and installed[name] != info:
            print(f"replacing {installed[name][:-10]} in {site} with {info[:-10]}")
            remove_dist(site, installed[name])
    copy_tree(core, site)
    print("FA4 core installed:", " ".join(sorted(i[:-10] for i in dist_infos(core).values())))
    with open(os.path.join(src, "fallback.txt"), encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    for line in lines:
        name = line.split(" ", 1)[0]
        ok, have = satisfied(line)
        if ok:
            print(f"kept {name} {have}")
            continue
        if name in installed:
            remove_dist(site, installed[name])
        copy_tree(os.path.join(src, "fallback", name), site)
        print(f"installed {name} (had {have}; needs {line.split(' ', 1)[1]})")


if __name__ == "__main__":
    main()
