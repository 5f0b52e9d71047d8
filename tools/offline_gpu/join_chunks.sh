# Shipped in every upload by split_parts and sourced by its host setup script (join.sh,
# setup_fa4.sh, setup_sglang.sh): one stash-join-checksum for every recipe.
#
#   join_chunks PART_DIR VAR STASH JOINED
# keeps PART_DIR's chunks in STASH; once STASH holds every chunk the manifest's ${VAR}_CHUNKS
# names, joins them into JOINED, checks ${VAR}_SHA256 and empties STASH.
# Returns 0 joined, 1 chunks still to upload (said on stdout), 2 a copy or join failed,
# 3 the checksum did not match.
join_chunks() {
  local d=$1 var=$2 stash=$3 joined=$4 c missing=""
  local names_var="${var}_CHUNKS" sha_var="${var}_SHA256"
  local chunks=()
  mkdir -p "$stash" || return 2
  for c in "$d"/*.part-[0-9]*; do
    [ -f "$c" ] || continue
    cp "$c" "$stash/" || return 2
    echo "kept ${c##*/} in $stash"
  done
  for c in ${!names_var}; do
    chunks+=("$stash/$c")
    [ -f "$stash/$c" ] || missing="$missing $c"
  done
  if [ -n "$missing" ]; then
    echo "still to upload:$missing (upload the next part and run its setup script again)"
    return 1
  fi
  cat "${chunks[@]}" >"$joined" || return 2
  echo "${!sha_var}  $joined" | sha256sum -c --quiet - || {
    echo "bad join (chunks from different builds?): rm -rf $stash and upload every part again"
    return 3
  }
  rm -rf "$stash"
}

#   join_and_unpack PART_DIR VAR STASH DIR
# join_chunks into a fresh DIR, then unpack the joined .tar.xz there (and drop it).
# Returns join_chunks' codes; 2 also where the unpack fails.
join_and_unpack() {
  local d=$1 var=$2 stash=$3 dir=$4 rc
  rm -rf "$dir" && mkdir -p "$dir" || return 2
  join_chunks "$d" "$var" "$stash" "$dir/joined.tar.xz"
  rc=$?
  [ "$rc" = 0 ] || return "$rc"
  xz -dc "$dir/joined.tar.xz" | tar -C "$dir" -x && rm "$dir/joined.tar.xz" || return 2
}
