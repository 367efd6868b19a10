#!/usr/bin/env bash
# `loom data pack`: pack a small directory of files (nested, with a symlink that is skipped) into
# several shards, then `loom data inspect` the result.
# usage: data_pack.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/src/a/b"
for i in $(seq 1 20); do
  head -c $((i * 997)) /dev/urandom > "$tmp/src/a/file$i.bin"
done
echo hello > "$tmp/src/a/b/hello.txt"
ln -s ../a/b/hello.txt "$tmp/src/link.txt"

"$loom" data pack "$tmp/src" "$tmp/out" --shard-mb 0.05 --zstd 3 > "$tmp/log"
cat "$tmp/log"
grep -Eq "^packed 21 samples into [0-9]+ shards? \([0-9.]+ MB\) in $tmp/out in [0-9.]+ s$" "$tmp/log" ||
  { echo "FAIL: unexpected final line"; exit 1; }
[[ -f "$tmp/out/index.json" && -f "$tmp/out/shard-00001.lsh" ]] ||
  { echo "FAIL: expected an index and at least two shards"; ls -l "$tmp/out"; exit 1; }

"$loom" data inspect "$tmp/out"
echo "data pack OK"
