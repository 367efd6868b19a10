#!/usr/bin/env bash
# `loom train --model gpt` checkpoints and exact resume, and gradient accumulation, with real
# processes on the CPU (Note [GPT training] in src/train/gpt_job.cpp):
# 1. a run stopped at step 12 (--max-steps writes a checkpoint) and resumed with --resume prints the
#    same losses as an uninterrupted run from step 13 on and ends with bit-identical parameters;
# 2. the same after a SIGKILL, resumed from the last periodic checkpoint;
# 3. --grad-accum 2 with --batch 8 has the steps and the losses of --batch 16 (to float rounding);
# 4. --activation-checkpointing trains to bit-identical parameters;
# 5. a checkpoint refuses a resume with another --grad-accum;
# 6. --precision f16 checkpoints its loss scaler (scale, growth tracker): stopped at 7 and resumed,
#    bit-identical to the uninterrupted run; a bf16 run refuses the f16 checkpoint.
# usage: train_gpt_resume.sh LOOM_BINARY
set -euo pipefail
loom=$1
export LOOM_CACHE_DIR=$(mktemp -d)
tmp=$LOOM_CACHE_DIR
trap 'rm -rf "$tmp"' EXIT
common=(train --model gpt --epochs 1 --vocab 512 --seq-len 32 --seed 3 --sample 0 --no-val
        --no-progress --schedule cosine --warmup 5)
accum=(--batch 8 --grad-accum 2)
run() {  # run EXPECTED_STATUS LOG ARGS...: runs loom, checks its exit status
  local want=$1 log=$2; shift 2
  local rc=0
  "$loom" "${common[@]}" "$@" > "$log" 2>&1 || rc=$?
  [[ $rc -eq $want ]] || { echo "FAIL: exit status $rc (expected $want): $*"; cat "$log"; exit 1; }
}
losses_from() {  # losses_from LOG FIRST_STEP: the "step N/T: loss X" of steps >= FIRST_STEP
  grep -oE '^step [0-9]+/[0-9]+: loss [0-9.]+' "$1" | awk -v f="$2" '{split($2, s, "/"); if (s[1] + 0 >= f) print}'
}

# The uninterrupted run: 60 steps (--max-steps ends it early: status 3).
run 3 "$tmp/a.log" "${accum[@]}" --max-steps 60 --save-final "$tmp/a"
grep -q "2 micro-batches of 8 windows a step" "$tmp/a.log" || { echo "FAIL: no accumulation line"; cat "$tmp/a.log"; exit 1; }

# 1. Stopped at step 12 with a checkpoint, then resumed for 48 more steps.
run 3 "$tmp/b1.log" "${accum[@]}" --max-steps 12 --checkpoint-dir "$tmp/ckb" --checkpoint-every 5
grep -q "checkpoint: step 12 written" "$tmp/b1.log" || { echo "FAIL: no checkpoint at the stop"; cat "$tmp/b1.log"; exit 1; }
run 3 "$tmp/b2.log" "${accum[@]}" --max-steps 48 --checkpoint-dir "$tmp/ckb" --resume --save-final "$tmp/b"
grep -q "resumed from .*step-0*12 (epoch 1, step 12)" "$tmp/b2.log" || { echo "FAIL: not resumed at 12"; cat "$tmp/b2.log"; exit 1; }
[[ -n "$(losses_from "$tmp/b2.log" 13)" && "$(losses_from "$tmp/a.log" 13)" == "$(losses_from "$tmp/b2.log" 13)" ]] || {
  echo "FAIL: resumed losses differ"; losses_from "$tmp/a.log" 13; echo ---; losses_from "$tmp/b2.log" 13; exit 1; }
cmp "$tmp/a/model.safetensors" "$tmp/b/model.safetensors" || { echo "FAIL: parameters differ after resume"; exit 1; }
echo "stopped at 12 and resumed: bit-identical to the uninterrupted run"

# 2. Killed (SIGKILL) after a periodic checkpoint past step 8, resumed from it.
"$loom" "${common[@]}" "${accum[@]}" --max-steps 60 --checkpoint-dir "$tmp/ckc" --checkpoint-every 4 > "$tmp/c1.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  if [[ -f "$tmp/ckc/latest" ]] && [[ "$(cat "$tmp/ckc/latest")" > "step-000000008" ]]; then break; fi
  sleep 0.02
done
kill -KILL "$pid"
wait "$pid" || true
k=$(sed 's/^step-0*//' "$tmp/ckc/latest")
[[ $k -ge 12 && $k -lt 60 ]] || { echo "FAIL: killed at checkpoint $k (expected 12 to 56)"; cat "$tmp/c1.log"; exit 1; }
run 3 "$tmp/c2.log" "${accum[@]}" --max-steps $((60 - k)) --checkpoint-dir "$tmp/ckc" --resume --save-final "$tmp/c"
cmp "$tmp/a/model.safetensors" "$tmp/c/model.safetensors" || { echo "FAIL: parameters differ after SIGKILL at $k"; exit 1; }
echo "killed after the checkpoint of step $k and resumed: bit-identical"

# 3. Accumulation: 2 micro-batches of 8 are a batch of 16 (the loader's order does not depend on
# the batch size), so the steps and, to float rounding, the losses are the same.
run 3 "$tmp/d.log" --max-steps 60 --batch 16 --grad-accum 1
paste <(losses_from "$tmp/a.log" 1) <(losses_from "$tmp/d.log" 1) | awk '
  { n++; print "  " $0; if ($2 != $6) { print "FAIL: steps differ: " $0; bad = 1 }
    d = $4 - $8; if (d < 0) d = -d; if (d > 2e-3) { print "FAIL: losses differ: " $0; bad = 1 } }
  END { if (n < 2) { print "FAIL: only " n " losses"; bad = 1 }; exit bad }'
echo "--grad-accum 2 x --batch 8 gives the losses of --batch 16"

# 4. --activation-checkpointing recomputes the blocks in the backward: the same bits.
run 3 "$tmp/e.log" "${accum[@]}" --max-steps 60 --activation-checkpointing --save-final "$tmp/e"
grep -q "activation checkpointing of every block" "$tmp/e.log" || { echo "FAIL: no checkpointing line"; cat "$tmp/e.log"; exit 1; }
cmp "$tmp/a/model.safetensors" "$tmp/e/model.safetensors" || { echo "FAIL: parameters differ with --activation-checkpointing"; exit 1; }
echo "--activation-checkpointing: bit-identical parameters"

# 5. Another --grad-accum does not fit the checkpoint.
rc=0; out=$("$loom" "${common[@]}" --batch 8 --checkpoint-dir "$tmp/ckb" --resume 2>&1) || rc=$?
[[ $rc -eq 1 ]] && grep -qF "config.grad_accum" <<< "$out" || { echo "FAIL: resumed with another --grad-accum"; echo "$out"; exit 1; }
# 6. float16 with dynamic loss scaling: the scaler's state travels in the checkpoint.
f16=(--batch 8 --precision f16)
run 3 "$tmp/f.log" "${f16[@]}" --max-steps 20 --save-final "$tmp/f"
run 3 "$tmp/g1.log" "${f16[@]}" --max-steps 7 --checkpoint-dir "$tmp/ckg"
grep -q '"_growth_tracker": 7' "$tmp/ckg/step-000000007.json" || {
  echo "FAIL: no loss scaler state in the checkpoint"; cat "$tmp/ckg/step-000000007.json"; exit 1; }
run 3 "$tmp/g2.log" "${f16[@]}" --max-steps 13 --checkpoint-dir "$tmp/ckg" --resume --save-final "$tmp/g"
cmp "$tmp/f/model.safetensors" "$tmp/g/model.safetensors" || { echo "FAIL: f16 parameters differ after resume"; exit 1; }
rc=0; out=$("$loom" "${common[@]}" --batch 8 --precision bf16 --checkpoint-dir "$tmp/ckg" --resume 2>&1) || rc=$?
[[ $rc -eq 1 ]] && grep -qF "config.precision" <<< "$out" || { echo "FAIL: bf16 resumed an f16 checkpoint"; echo "$out"; exit 1; }
echo "--precision f16: the loss scaler resumes bit-identically"
echo "train gpt resume OK"
