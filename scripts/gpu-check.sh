#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build loom with every core, then run what needs the GPU — the
# build's self-check kernel, the `cuda`-labelled tests, compute-sanitizer over the CUDA tests, the
# device stage and the GPU trace — and `loom info`; then `loom bench gpu` against PyTorch on the same
# GPU (loom-anchor-gpu, installed beside loom, runs the `python3` on PATH). Writes logs to $OUT (or
# ./gpu-check-out) so a remote run can bring them back. Then `loom bench compile` (its GPU rows
# run generated NVRTC kernels), `loom bench gpt` (GPT training steps and fused attention against
# PyTorch) and torch.compile's figures for the same chain.
# Usage: scripts/gpu-check.sh [--no-sanitizer] [extra ctest args]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=build-gpu
jobs=$(nproc)
sanitizer=1
if [ "${1:-}" = "--no-sanitizer" ]; then sanitizer=0; shift; fi
{
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; nvcc --version | tail -2
  tests=ON
  if ! [ -e /usr/include/gtest/gtest.h ] && ! ls /usr/lib/*/cmake/GTest >/dev/null 2>&1; then
    echo "(GoogleTest not installed here: building without the gtest suites)"; tests=OFF
  fi
  echo "== configure"
  cmake -S . -B "$build" -G Ninja -DLOOM_CUDA=ON -DLOOM_ANCHORS=OFF -DLOOM_BUILD_TESTS=$tests 2>&1 | grep -E 'loom:|Error|error' || true
  echo "== build ($jobs jobs)"
  start=$(date +%s)
  cmake --build "$build" -- -j"$jobs" >"$out/build.log" 2>&1
  status=$?
  echo "build status $status in $(( $(date +%s) - start )) s"
  if [ $status -ne 0 ]; then grep -E -A25 'FAILED|error' "$out/build.log" | head -80; fi
  echo "== loom info"; "$build/loom" info 2>&1 | head -20
  echo "== loom topo (GPUs and NVLinks through NVML)"; "$build/loom" topo 2>&1 | tee "$out/topo.txt" | tail -25
  "$build/loom" topo --xml --out "$out/topo.xml"
  echo "== loom info --cuda-check"; "$build/loom" info --cuda-check; echo "status $?"
  echo "== loom ops --missing cuda"; "$build/loom" ops --missing cuda | tail -5
  if [ "$tests" = ON ]; then
    echo "== ctest -L cuda (full log: ctest-cuda.log)"
    start=$(date +%s)
    ctest --test-dir "$build" -L cuda --output-on-failure "$@" >"$out/ctest-cuda.log" 2>&1
    echo "ctest status $? in $(( $(date +%s) - start )) s"
    grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Exception" "$out/ctest-cuda.log" | head -60
    if [ $sanitizer = 1 ] && command -v compute-sanitizer >/dev/null; then
      echo "== compute-sanitizer memcheck (test_cuda; log: sanitizer.log)"
      timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/test_cuda" \
        --gtest_filter='-*BeyondTwoGigabytes*:*2To26*:CudaProfiler*:CudaTrain*' >"$out/sanitizer.log" 2>&1
      echo "memcheck status $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/sanitizer.log" | tail -5
      echo "== compute-sanitizer racecheck (copies, device stage)"
      timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$build/tests/test_cuda" \
        --gtest_filter='CudaCopy*:CudaDeviceStage*:CudaSoftmax*:CudaReduce.Ties*' >>"$out/sanitizer.log" 2>&1
      echo "racecheck status $?"; grep -E "ERROR SUMMARY|RACE" "$out/sanitizer.log" | tail -5
    fi
  fi
  fm=${LOOM_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  if [ -d "$fm" ]; then
    echo "== loom data load --device cuda (pinned, then pageable)"
    "$build/loom" data pack "$fm" "$build/fm-shards" >/dev/null 2>&1 || true
    "$build/loom" data load "$build/fm-shards" --device cuda --workers 4 --epochs 2 2>&1 | grep -E "samples/s|device stage"
    "$build/loom" data load "$build/fm-shards" --device cuda --workers 4 --epochs 2 --no-pin 2>&1 | grep -E "samples/s|device stage"
  fi
  echo "== loom trace record --gpu"; "$build/loom" trace record "$out/trace.json" --gpu --steps 2 2>&1 | tail -6
  echo "== loom bench gpu --rounds 3 (table: bench-gpu.txt, JSON: bench-gpu.json)"
  python3 -c 'import torch; print("anchor: python3", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1
  "$build/loom" bench gpu --rounds 3 --json "$out/bench-gpu.json" 2>&1 | tee "$out/bench-gpu.txt"
  echo "bench status ${PIPESTATUS[0]}"
  echo "== loom bench compile --rounds 3 (its GPU rows: NVRTC kernels; table: bench-compile.txt)"
  "$build/loom" bench compile --rounds 3 2>&1 | tee "$out/bench-compile.txt"
  echo "== loom bench gpt --rounds 3 (GPT steps and attention vs torch; table: bench-gpt.txt)"
  "$build/loom" bench gpt --rounds 3 --json "$out/bench-gpt.json" 2>&1 | tee "$out/bench-gpt.txt"
  echo "bench status ${PIPESTATUS[0]}"
  echo "== torch.compile on the same chain (scripts/torch_compile_chain.py)"
  timeout 300 python3 scripts/torch_compile_chain.py 2>&1 | grep -vE "^\s*$" | tail -8
} 2>&1 | tee "$out/gpu-check.log"
