#!/usr/bin/env bash
# GPU host: install a bundle repacked by two_uploads.sh into SITE (default /tmp/site).
# up1 keeps its half in /tmp; up2 joins both, checks the SHA-256, unpacks the kernel library
# and the rest of vLLM into SITE, loads one kernel, and prints the vLLM version.
D=$(cd "$(dirname "$0")" && pwd)
SITE=${1:-/tmp/site}
KEEP=/tmp/$(basename "$SITE").bundle.tar.0
if [ -f "$D/bundle.tar.0" ]; then
  cp "$D/bundle.tar.0" "$KEEP" || exit 2
  echo "first half kept in $KEEP: upload up2 next and run its join.sh $SITE"
  exit 0
fi
test -f "$KEEP" || { echo "first half missing: run up1/join.sh $SITE again"; exit 3; }
W=$(mktemp -d) && cat "$KEEP" "$D/bundle.tar.1" > "$W/bundle.tar" || exit 2
echo "$(cat "$D/bundle.sha256")  $W/bundle.tar" | sha256sum -c --quiet - || { echo "bad join: upload up1 again"; exit 3; }
mkdir -p "$SITE" && tar -C "$W" -xf "$W/bundle.tar" && tar -C "$SITE" -xJf "$W/vllm-C.tar.xz" \
  && tar -C "$SITE" -xJf "$W/site.tar.xz" || exit 2
rm -rf "$W" "$KEEP"
SITE=$SITE bash "$D/check_kernels.sh"
cd /tmp && PYTHONPATH=$SITE python3 -c 'import vllm; print("vllm", vllm.__version__, "ready in '"$SITE"'")'
