#!/usr/bin/env bash
# `loom train --compile` trains the same model as eager training, to the bit: the compiled forward
# pass replays the same kernels, so the final loss and the test accuracy print identically; and
# it says what the compiler did (graphs, the recompile for the last, smaller batch, the joint
# graph of the full batches).
# usage: train_compile.sh LOOM_BINARY
set -euo pipefail
loom=$1
args=(train --epochs 1 --train-samples 3000 --batch 128 --no-progress --no-val)
eager=$("$loom" "${args[@]}" | grep '^test accuracy')
compiled_out=$("$loom" "${args[@]}" --compile)
compiled=$(grep '^test accuracy' <<< "$compiled_out")
strip() { sed -E 's/ \| [0-9.]+ steps? in .*//; s/ in [0-9.]+ s.*//' <<< "$1"; }
[[ $(strip "$eager") == $(strip "$compiled") ]] || {
  echo "FAIL: compiled training differs from eager"; echo "eager:    $eager"; echo "compiled: $compiled"; exit 1; }
grep -qE '^compiled: loom train: forward and loss: 24 call\(s\), 2 capture\(s\), 2 graph\(s\), 0 graph break\(s\)' <<< "$compiled_out" || {
  echo "FAIL: no compile summary"; echo "$compiled_out" | tail -5; exit 1; }
grep -qE 'recompiled: graph 1: input 0: sizes \[128, 1, 28, 28\] -> \[56, 1, 28, 28\]' <<< "$compiled_out" || {
  echo "FAIL: the recompile is not named"; echo "$compiled_out" | tail -5; exit 1; }
grep -qE '^    joint graph: [0-9]+ node\(s\)' <<< "$compiled_out" || {
  echo "FAIL: the full batches' graph is not a joint graph"; echo "$compiled_out" | tail -8; exit 1; }
echo "train compile OK: $compiled"
