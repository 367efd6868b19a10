#!/usr/bin/env bash
# Kill-and-resume: a `loom train` run interrupted by a signal (KILL, TERM or INT) and resumed with
# --resume ends with parameters bit-identical to an uninterrupted run with the same seed.
# usage: train_resume.sh LOOM_BINARY SIGNAL
set -euo pipefail
loom=$1
sig=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model mlp --schedule cosine --epochs 2 --train-samples 12000 --batch 64 --seed 7 --threads 1 --no-progress)

"$loom" train "${common[@]}" --save-final "$tmp/a.safetensors" > "$tmp/a.log"

"$loom" train "${common[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every 10 \
  --save-final "$tmp/b.safetensors" > "$tmp/b1.log" 2>&1 &
pid=$!
# Interrupt once a checkpoint past step 30 exists (the run has ~375 steps).
for _ in $(seq 1 1200); do
  if [[ -f "$tmp/ck/latest" ]] && [[ "$(cat "$tmp/ck/latest")" > "step-000000030" ]]; then break; fi
  sleep 0.02
done
kill "-$sig" "$pid"
status=0
wait "$pid" || status=$?
if grep -q "test accuracy" "$tmp/b1.log"; then
  echo "FAIL: the run finished before it was interrupted"; exit 1
fi
echo "interrupted run exited with status $status at $(cat "$tmp/ck/latest")"

"$loom" train "${common[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every 10 --resume \
  --save-final "$tmp/b.safetensors" > "$tmp/b2.log"
grep "resumed from" "$tmp/b2.log"
if cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors"; then
  echo "resumed run is bit-identical to the uninterrupted run"
else
  echo "FAIL: parameters differ"; exit 1
fi
