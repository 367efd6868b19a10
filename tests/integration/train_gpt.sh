#!/usr/bin/env bash
# `loom train --model gpt` on the CPU: a tiny GPT trained on Debian's fortunes for one epoch.
# The loss falls from about ln(vocab) at the first step to a validation perplexity far below the
# vocabulary's size, sampling prints text, --save-final writes Hugging Face's GPT-2 files, and the
# compiled run (a joint graph) computes the same losses as the eager one.
# usage: train_gpt.sh LOOM_BINARY
set -euo pipefail
loom=$1
export LOOM_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$LOOM_CACHE_DIR"' EXIT
args=(train --model gpt --epochs 1 --vocab 1024 --batch 64 --max-steps 120 --sample 40 --no-progress)
# --max-steps ends the run early: exit status 3.
rc=0; out=$("$loom" "${args[@]}" --save-final "$LOOM_CACHE_DIR/model") || rc=$?
[[ $rc -eq 3 ]] || { echo "FAIL: exit status $rc"; echo "$out"; exit 1; }
first=$(grep -oE '^step 1/[0-9]+: loss [0-9.]+' <<< "$out" | awk '{print $4}')
ppl=$(grep -oE 'validation perplexity [0-9.]+' <<< "$out" | tail -1 | awk '{print $3}')
[[ -n "$first" && -n "$ppl" ]] || { echo "FAIL: no loss or perplexity"; echo "$out"; exit 1; }
# ln(1024) = 6.93: the first loss is about uniform; after 120 steps the perplexity is under 300.
awk -v f="$first" 'BEGIN { exit !(f > 6.5 && f < 7.3) }' || { echo "FAIL: first loss $first"; exit 1; }
awk -v p="$ppl" 'BEGIN { exit !(p < 300) }' || { echo "FAIL: perplexity $ppl"; echo "$out"; exit 1; }
sample=$(sed -n '/^sample (40 tokens/,$p' <<< "$out" | grep -c '^  | ' || true)
[[ "$sample" -ge 1 ]] || { echo "FAIL: no sample"; echo "$out"; exit 1; }
# --save-final: Hugging Face's GPT-2 directory.
for f in model.safetensors config.json vocab.json merges.txt; do
  [[ -s "$LOOM_CACHE_DIR/model/$f" ]] || { echo "FAIL: --save-final wrote no $f"; exit 1; }
done
grep -q '"model_type": "gpt2"' "$LOOM_CACHE_DIR/model/config.json" || { echo "FAIL: config.json"; exit 1; }
grep -qa '"lm_head.weight"' "$LOOM_CACHE_DIR/model/model.safetensors" || {
  echo "FAIL: no lm_head.weight in model.safetensors"; exit 1; }
rc=0; compiled=$("$loom" "${args[@]}" --compile) || rc=$?
[[ $rc -eq 3 ]] || { echo "FAIL: exit status $rc (compiled)"; echo "$compiled"; exit 1; }
losses() { grep -oE '^step [0-9]+/[0-9]+: loss [0-9.]+' <<< "$1"; }
[[ "$(losses "$out")" == "$(losses "$compiled")" ]] || {
  echo "FAIL: compiled losses differ"; losses "$out"; losses "$compiled"; exit 1; }
grep -qE '^compiled: loom train: gpt loss: [0-9]+ call\(s\)' <<< "$compiled" || {
  echo "FAIL: no compile summary"; echo "$compiled" | tail -5; exit 1; }
echo "train gpt OK: first loss $first, validation perplexity $ppl"
