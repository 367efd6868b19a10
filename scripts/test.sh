#!/usr/bin/env bash
# Sets up, builds and runs loom's tests. Usage: scripts/test.sh [ctest args...]
#   LOOM_SANITIZE=address|thread|undefined scripts/test.sh   builds in build-<sanitizer> with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Formatting, settings and error macros: a tool keeps the conventions (fails listing offenders).
bash scripts/check-conventions.sh
build=build
extra=()
if [ -n "${LOOM_SANITIZE:-}" ]; then
  build="build-${LOOM_SANITIZE}"
  # Tests that ask for more memory than exists expect OutOfMemoryError; ASan would abort instead.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1}"
  extra+=("-DLOOM_SANITIZE=${LOOM_SANITIZE}" "-DCMAKE_BUILD_TYPE=RelWithDebInfo")
fi
cmake -S . -B "$build" -G Ninja "${extra[@]}" >/dev/null
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j2 "$@"
