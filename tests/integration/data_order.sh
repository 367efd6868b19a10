#!/usr/bin/env bash
# `loom data order`: the ids a rank reads do not depend on the number of loader workers; the ranks
# of any world size together read the world-size-1 order; resuming with another world size
# continues it. Prints "data order OK" at the end.
# usage: data_order.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

common=(--samples 1000 --shard-samples 64 --block-size 100 --seed 17 --epoch 2)
order() { "$loom" data order "${common[@]}" "$@"; }

# Workers: the same rank-local sequence for K = 1 and K = 3 (batches walked worker by worker).
order --world 4 --rank 1 --workers 1 --batch 8 > "$tmp/k1"
order --world 4 --rank 1 --workers 3 --batch 8 > "$tmp/k3"
order --world 4 --rank 1 --workers 3 --batch 8 --by-worker > "$tmp/k3w"
[[ $(wc -l < "$tmp/k1") -eq 250 ]] || { echo "FAIL: rank 1 of 4 should read 250 ids"; exit 1; }
cmp -s "$tmp/k1" "$tmp/k3" || { echo "FAIL: --workers 3 changed the sequence"; exit 1; }
cut -d' ' -f1 "$tmp/k3w" | cmp -s - "$tmp/k1" || { echo "FAIL: --by-worker ids differ"; exit 1; }
grep -q "^[0-9]* worker 2$" "$tmp/k3w" || { echo "FAIL: no batch came from worker 2"; exit 1; }

# The global order, then the ranks of world 3 interleaved back: the same sequence (pad repeats
# the first two positions' ids).
order --world 1 --rank 0 > "$tmp/global"
[[ $(sort -n "$tmp/global" | uniq | wc -l) -eq 1000 ]] || { echo "FAIL: not a permutation"; exit 1; }
for r in 0 1 2; do order --world 3 --rank $r --workers 2 --batch 5 > "$tmp/w3.$r"; done
paste -d'\n' "$tmp/w3.0" "$tmp/w3.1" "$tmp/w3.2" | grep -v '^$' > "$tmp/w3"
{ cat "$tmp/global"; head -n 2 "$tmp/global"; } | cmp -s - "$tmp/w3" ||
  { echo "FAIL: world 3 does not interleave to the global order"; exit 1; }

# Resume: consumed 437 positions with world 3, continue with world 2.
for r in 0 1; do order --world 2 --rank $r --resume-from 437 > "$tmp/r2.$r"; done
paste -d'\n' "$tmp/r2.0" "$tmp/r2.1" | grep -v '^$' > "$tmp/resumed"
tail -n +438 "$tmp/global" | cmp -s - "$tmp/resumed" ||
  { echo "FAIL: resuming with world 2 does not continue the order"; exit 1; }

# --limit.
[[ $(order --world 2 --rank 0 --limit 7 | wc -l) -eq 7 ]] || { echo "FAIL: --limit"; exit 1; }
# --data: shard sizes from a packed dataset's index (120 small files in several shards).
mkdir -p "$tmp/src"
for i in $(seq 1 120); do head -c 300 /dev/zero > "$tmp/src/f$i.bin"; done
"$loom" data pack "$tmp/src" "$tmp/ds" --shard-mb 0.02 > /dev/null
[[ -f "$tmp/ds/shard-00001.lsh" ]] || { echo "FAIL: expected several shards"; exit 1; }
ids() { tr '\n' ' '; }
"$loom" data order --data "$tmp/ds" --block-size 16 --seed 5 > "$tmp/d1"
[[ "$(sort -n "$tmp/d1" | ids)" == "$(seq 0 119 | ids)" ]] ||
  { echo "FAIL: --data order is not a permutation of 0..119"; exit 1; }
[[ "$(ids < "$tmp/d1")" != "$(seq 0 119 | ids)" ]] || { echo "FAIL: --data order is not shuffled"; exit 1; }
"$loom" data order --data "$tmp/ds" --block-size 16 --seed 5 --workers 4 --batch 3 |
  cmp -s - "$tmp/d1" || { echo "FAIL: --data with 4 workers differs"; exit 1; }
[[ "$("$loom" data order --data "$tmp/ds" --shuffle none | ids)" == "$(seq 0 119 | ids)" ]] ||
  { echo "FAIL: --shuffle none is not file order"; exit 1; }
echo "data order OK"
