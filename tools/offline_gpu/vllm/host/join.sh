#!/usr/bin/env bash
# GPU host: install a bundle repacked by two_uploads.sh into SITE (default /tmp/site). Every
# upload (upa, upb) carries this script and the manifest; each run keeps its chunk in a stash,
# and the run that completes the set joins the chunks, checks the SHA-256, unpacks the kernel
# library and the rest of vLLM into SITE, loads one kernel and prints the vLLM version.
D=$(cd "$(dirname "$0")" && pwd)
SITE=${1:-/tmp/site}
STASH=/tmp/$(basename "$SITE").chunks
# shellcheck source=/dev/null
. "$D/bundle.manifest"
mkdir -p "$STASH" || exit 2
for c in "$D"/bundle.tar.part-*; do cp "$c" "$STASH/" || exit 2; echo "kept $(basename "$c") in $STASH"; done
chunks=(); missing=""
for c in $BUNDLE_CHUNKS; do chunks+=("$STASH/$c"); test -f "$STASH/$c" || missing="$missing $c"; done
[ -z "$missing" ] || { echo "still to upload:$missing (upload the next part and run its join.sh $SITE)"; exit 0; }
W=$(mktemp -d) && cat "${chunks[@]}" > "$W/bundle.tar" || exit 2
echo "$BUNDLE_SHA256  $W/bundle.tar" | sha256sum -c --quiet - ||
  { echo "bad join (chunks from different builds?): rm -rf $STASH and upload both parts again"; exit 3; }
mkdir -p "$SITE" && tar -C "$W" -xf "$W/bundle.tar" && tar -C "$SITE" -xJf "$W/vllm-C.tar.xz" \
  && tar -C "$SITE" -xJf "$W/site.tar.xz" || exit 2
rm -rf "$W" "$STASH"
SITE=$SITE bash "$D/check_kernels.sh"
cd /tmp && PYTHONPATH=$SITE python3 -c 'import vllm; print("vllm", vllm.__version__, "ready in '"$SITE"'")'
