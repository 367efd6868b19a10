#!/usr/bin/env bash
# The compiled-kernel cache across real processes: four `loom explain` started at once on an empty
# cache each build or find the demo's fused kernel and load a complete file (atomic rename); no
# temporary file is left behind; a fifth process finds every kernel on disk without compiling.
# usage: kernel_cache.sh LOOM_BINARY
set -euo pipefail
loom=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export LOOM_CACHE_DIR=$dir
pids=()
for i in 1 2 3 4; do
  "$loom" explain > "$dir/out$i.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do
  wait "$p" || { echo "FAIL: a concurrent explain failed"; cat "$dir"/out*.txt; exit 1; }
done
for i in 1 2 3 4; do
  grep -q 'kernel fused_0: mul, add, sigmoid, mul' "$dir/out$i.txt" || {
    echo "FAIL: run $i shows no fused kernel"; cat "$dir/out$i.txt"; exit 1; }
done
leftover=$(find "$dir/compile" -name '*.tmp.*' -o -name '*.log.*' | wc -l)
[[ $leftover == 0 ]] || { echo "FAIL: temporary files left"; ls -la "$dir/compile"; exit 1; }
objects=$(find "$dir/compile" -name '*.so' | wc -l)
sources=$(find "$dir/compile" -name '*.cpp' | wc -l)
[[ $objects -ge 1 && $objects == "$sources" ]] || {
  echo "FAIL: $objects objects and $sources sources"; ls -la "$dir/compile"; exit 1; }
out=$("$loom" explain 2>&1)
built=$(grep -c 'built in' <<< "$out" || true)
hits=$(grep -c 'from the kernel cache' <<< "$out" || true)
[[ $built == 0 && $hits -ge 1 ]] || {
  echo "FAIL: a fifth process built $built kernel(s), found $hits"; echo "$out"; exit 1; }
echo "kernel cache OK: $objects kernel(s) built by 4 concurrent processes, found by a fifth"
