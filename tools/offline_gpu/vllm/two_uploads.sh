#!/usr/bin/env bash
# Repack a built bundle (part1 [+ part1b] + part2, from prep_vllm.sh) into two uploads of equal
# size, upa and upb (split_parts, as the FA4 and SGLang recipes cut theirs), so that a host gets
# vLLM in two calls instead of three. Each leaves room for the project's own files (about
# 12 MiB) under the 64 MiB limit:
#   tools/offline_gpu/vllm/two_uploads.sh .gpu034        # writes .gpu034/upa, .gpu034/upb
# On the host, in consecutive calls, with SITE the folder PYTHONPATH will name:
#   bash .gpu034/upa/join.sh /tmp/site034                # keeps its chunk in /tmp
#   bash .gpu034/upb/join.sh /tmp/site034                # joins, unpacks, checks a kernel
set -euo pipefail
B=$(realpath "${1:?usage: two_uploads.sh BUNDLE_DIR}")
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cat "$B"/part1/vllm-C.tar.xz* "$B"/part1b/vllm-C.tar.xz.split-* 2>/dev/null > "$W/vllm-C.tar.xz"
xz -t "$W/vllm-C.tar.xz"
cp "$B/part2/site.tar.xz" "$W/"
version=$(tar -tJf "$W/site.tar.xz" | sed -n 's|^\./vllm-\([0-9.]*\)\.dist-info/$|\1|p' | head -1)
tar -C "$W" -cf "$W/bundle.tar" vllm-C.tar.xz site.tar.xz
rm -rf "$B/up1" "$B/up2"  # the earlier layout
# 53 MiB parts (52 MiB of chunk): two for vLLM 0.33/0.34, each under 64 MiB with the project.
. "$HERE/../split_parts.sh"
PART_MAX_MIB=53 split_parts "$W/bundle.tar" "$B" up "$HERE/host" bundle.manifest BUNDLE VLLM_VER "$version"
n=$(find "$B" -maxdepth 1 -name 'up?' | wc -l)
[ "$n" -le 2 ] || { echo "the bundle needs $n uploads, not two: keep the three parts" >&2; exit 2; }
