# Sourced by the prep scripts: split_parts cuts an archive into equal chunks of at most
# PART_MAX_MIB (less 1 MiB for the scripts and the manifest), one per upload folder
# OUT_DIR/<prefix>a, <prefix>b, ..., each with the host scripts, join_chunks.sh and a manifest
# that names the version, the archive's SHA-256 and every chunk (what join_chunks checks).
#
#   split_parts ARCHIVE OUT_DIR PREFIX HOST_DIR MANIFEST VAR VERSION_KEY VERSION
#   e.g. split_parts "$W/fa4.tar.xz" "$OUT" fa4 "$HERE/host" fa4.manifest FA4 VLLM_VER 0.33.0
#   writes FA4_VLLM_VER=0.33.0, FA4_SHA256=..., FA4_CHUNKS="..." into each fa4?/fa4.manifest
split_parts() {
  local archive=$1 out=$2 prefix=$3 host=$4 manifest=$5 var=$6 vkey=$7 version=$8
  local work name size max n chunk sha names letters=abcdefghijklmnopqrstuvwxyz i=0 c p
  work=$(dirname "$archive"); name=$(basename "$archive")
  size=$(stat -c %s "$archive")
  max=$(( (PART_MAX_MIB << 20) - (1 << 20) ))
  n=$(( (size + max - 1) / max )); chunk=$(( (size + n - 1) / n ))
  rm -rf "$work/chunks" "$out/$prefix"?; mkdir -p "$work/chunks"
  split -b "$chunk" -d -a 2 "$archive" "$work/chunks/$name.part-"
  sha=$(sha256sum "$archive" | cut -d' ' -f1)
  local chunks=("$work/chunks/$name".part-*); names="${chunks[*]##*/}"
  for c in "${chunks[@]}"; do
    p="$out/$prefix${letters:i:1}"
    mkdir -p "$p"; mv "$c" "$p/"
    cp "$host"/*.sh "$(dirname "${BASH_SOURCE[0]}")/join_chunks.sh" "$p/"
    if compgen -G "$host/*.py" >/dev/null; then cp "$host"/*.py "$p/"; fi
    printf '%s_%s=%s\n%s_SHA256=%s\n%s_CHUNKS="%s"\n' "$var" "$vkey" "$version" "$var" "$sha" \
      "$var" "$names" > "$p/$manifest"
    i=$((i + 1))
  done
  echo "$name: $((size >> 20)) MiB in $n part(s):"; du -sh "$out/$prefix"?
}
