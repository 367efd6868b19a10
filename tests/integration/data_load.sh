#!/usr/bin/env bash
# `loom data load`: pack the Fashion-MNIST test split, read it through the loader with each I/O
# engine and several workers, and check that a rank resuming mid-epoch reads exactly the rest of what
# `loom data order` says it reads.
# usage: data_load.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=${LOOM_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

"$loom" data pack "$src" "$tmp/ds" --split test > /dev/null
engines="pread mmap"
if "$loom" data load "$tmp/ds" --io uring --epochs 1 > /dev/null 2>&1; then engines="$engines uring"; fi
for io in $engines; do
  "$loom" data load "$tmp/ds" --io "$io" --workers 3 --batch 100 > "$tmp/$io.log"
  grep -q "^epoch 0: 100 batches, 10000 samples$" "$tmp/$io.log" || { cat "$tmp/$io.log"; echo "FAIL: $io"; exit 1; }
done
# Rank 1 of 2 resuming at global position 4000 reads (10000 - 4000) / 2 samples.
"$loom" data load "$tmp/ds" --world 2 --rank 1 --batch 50 --resume-from 4000 --seed 3 > "$tmp/r.log"
grep -q "^epoch 0: 60 batches, 3000 samples$" "$tmp/r.log" || { cat "$tmp/r.log"; echo "FAIL: resume"; exit 1; }
grep -q '"consumed":10000' "$tmp/r.log" || { cat "$tmp/r.log"; echo "FAIL: state"; exit 1; }
[[ $("$loom" data order --data "$tmp/ds" --seed 3 --world 2 --rank 1 --resume-from 4000 | wc -l) == 3000 ]] ||
  { echo "FAIL: data order disagrees"; exit 1; }
echo "engines: $engines"
echo "data load OK"
