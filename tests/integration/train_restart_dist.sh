#!/usr/bin/env bash
# Data-parallel fault tolerance: `loom train --nproc 2 --max-restarts 1` with one worker killed by
# SIGKILL mid-run. The launcher stops the other worker, restarts the group, the workers resume from
# the last checkpoint, and the final parameters are bit-identical to an uninterrupted 2-process run.
# usage: train_restart_dist.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--nproc 2 --model mlp --epochs 1 --train-samples 12000 --batch 64 --seed 3 --threads 1 --no-progress)

"$loom" train "${common[@]}" --save-final "$tmp/a.safetensors" > "$tmp/a.log" 2>&1

"$loom" train "${common[@]}" --max-restarts 1 --checkpoint-dir "$tmp/ck" --checkpoint-every 10 \
  --save-final "$tmp/b.safetensors" > "$tmp/b.log" 2>&1 &
launcher=$!
for _ in $(seq 1 1500); do
  if [[ -f "$tmp/ck/latest" ]] && [[ "$(cat "$tmp/ck/latest")" > "step-000000040" ]]; then break; fi
  sleep 0.02
done
victim=$(pgrep -P "$launcher" | tail -n 1)
kill -KILL "$victim"
status=0
wait "$launcher" || status=$?
cat "$tmp/b.log" | grep -E "loom launch|resumed from|test accuracy" || true
if [[ $status -ne 0 ]]; then echo "FAIL: the restarted run exited with $status"; exit 1; fi
grep -q "restarting the group (1/1)" "$tmp/b.log" || { echo "FAIL: no restart"; exit 1; }
grep -q "resumed from" "$tmp/b.log" || { echo "FAIL: the restarted group did not resume"; exit 1; }
if cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors"; then
  echo "restarted data-parallel run is bit-identical to the uninterrupted run"
else
  echo "FAIL: parameters differ"; exit 1
fi
