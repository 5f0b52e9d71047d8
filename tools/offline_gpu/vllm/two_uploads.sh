#!/usr/bin/env bash
# Repack a built bundle (part1 [+ part1b] + part2, from prep_vllm.sh) into two uploads of equal
# size, up1 and up2, so that a host gets vLLM in two calls instead of three. Each upload must
# leave room for the project's own files (about 12 MiB) under the 64 MiB limit:
#   tools/offline_gpu/vllm/two_uploads.sh .gpu034        # writes .gpu034/up1, .gpu034/up2
# On the host, in consecutive calls, with SITE the folder PYTHONPATH will name:
#   bash .gpu034/up1/join.sh /tmp/site034                # keeps the first half in /tmp
#   bash .gpu034/up2/join.sh /tmp/site034                # joins, unpacks, checks a kernel
set -euo pipefail
B=$(realpath "${1:?usage: two_uploads.sh BUNDLE_DIR}")
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cat "$B"/part1/vllm-C.tar.xz* "$B"/part1b/vllm-C.tar.xz.split-* 2>/dev/null > "$W/vllm-C.tar.xz"
xz -t "$W/vllm-C.tar.xz"
cp "$B/part2/site.tar.xz" "$W/"
tar -C "$W" -cf "$W/bundle.tar" vllm-C.tar.xz site.tar.xz
size=$(stat -c %s "$W/bundle.tar"); half=$(( (size + 1) / 2 ))
max=$(( 52 << 20 ))
[ "$half" -le "$max" ] || { echo "halves of $((half >> 20)) MiB exceed 52 MiB: keep the three parts" >&2; exit 2; }
rm -rf "$B/up1" "$B/up2"; mkdir -p "$B/up1" "$B/up2"
head -c "$half" "$W/bundle.tar" > "$B/up1/bundle.tar.0"
tail -c +$((half + 1)) "$W/bundle.tar" > "$B/up2/bundle.tar.1"
sha=$(sha256sum "$W/bundle.tar" | cut -d' ' -f1)
for u in up1 up2; do
  cp "$HERE/host/join.sh" "$HERE/host/check_kernels.sh" "$B/$u/"
  echo "$sha" > "$B/$u/bundle.sha256"
done
du -sh "$B/up1" "$B/up2"
