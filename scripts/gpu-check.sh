#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build loom with every core, then run what needs the GPU — the
# build's self-check kernel, the `cuda`-labelled tests — and `loom info`. Writes logs to $OUT (or
# ./gpu-check-out) so a remote run can bring them back.
# Usage: scripts/gpu-check.sh [extra ctest args]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build=build-gpu
jobs=$(nproc)
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
  echo "== loom info"; "$build/loom" info 2>&1 | head -16
  echo "== loom info --cuda-check"; "$build/loom" info --cuda-check; echo "status $?"
  if [ "$tests" = ON ]; then
    echo "== ctest -L cuda"; ctest --test-dir "$build" -L cuda --output-on-failure "$@" 2>&1 | tail -40
    echo "== device and stream tests"; "$build/tests/test_base" --gtest_filter='Device*:Stream*:Event*:FakeCuda*:BuildInfo*' 2>&1 | tail -5
  fi
} 2>&1 | tee "$out/gpu-check.log"
