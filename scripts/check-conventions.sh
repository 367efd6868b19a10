#!/usr/bin/env bash
# Conventions kept by tools, not memory. Fails (listing every offender) when:
#   1. a C++ or CUDA file differs from what clang-format makes of it (.clang-format);
#   2. a LOOM_* environment variable is read with a bare getenv instead of a declared setting
#      (include/loom/config.h; only the registry itself, src/base/config.cpp, calls getenv on them;
#      tests and the benchmark anchors, separate programs that do not link loom, are exempt);
#   3. an error is thrown with a raw `throw SomeError(...)` instead of the checking macros
#      (LOOM_CHECK, LOOM_CHECK_AS, LOOM_THROW in include/loom/error.h, which implements them).
# Usage: scripts/check-conventions.sh [--fix]   (--fix formats the files in place)
set -euo pipefail
cd "$(dirname "$0")/.."

files=()
while IFS= read -r f; do files+=("$f"); done < <(git ls-files -co --exclude-standard \
  'src/*.cpp' 'src/*.h' 'src/*.cu' 'include/*.h' 'tools/*.cpp' 'tools/*.h' 'bench/*.cpp' 'bench/*.h' \
  'tests/*.cpp' 'tests/*.h' 'examples/*.cpp' | while read -r f; do [ -f "$f" ] && echo "$f"; done)

status=0
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
else
  unformatted=()
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then unformatted+=("$f"); fi
  done
  if [ ${#unformatted[@]} -gt 0 ]; then
    echo "conventions: ${#unformatted[@]} file(s) are not formatted (run scripts/check-conventions.sh --fix):"
    printf '  %s\n' "${unformatted[@]}"
    status=1
  fi
fi

# getenv of a LOOM_* name, or of a name not spelled out, outside the settings registry. Tests set and
# read their own harness variables; a library line that reads another program's variable through a
# name in a variable, or a program that does not link loom, says why in a comment "bare getenv: ...".
bad_getenv=$(grep -nE 'getenv\(' "${files[@]}" | grep -vE '^(src/base/config.cpp|tests/|bench/anchors/)' |
  grep -v 'bare getenv:' |
  grep -E 'getenv\((\"LOOM_|[^")])' | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
if [ -n "$bad_getenv" ]; then
  echo "conventions: LOOM_* settings must be declared in the config registry (config::IntSetting etc.), not read with getenv:"
  echo "$bad_getenv" | sed 's/^/  /'
  status=1
fi

# Raw throws of loom's error types in loom's code (tests throw them on purpose to test propagation).
bad_throw=$(grep -nE '\bthrow +(::)?(loom::)?[A-Za-z]*Error *[({]' "${files[@]}" |
  grep -vE '^(include/loom/error.h|src/base/error.cpp|tests/[^:]*):' | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
if [ -n "$bad_throw" ]; then
  echo "conventions: throw loom's errors through LOOM_CHECK / LOOM_CHECK_AS / LOOM_THROW (include/loom/error.h):"
  echo "$bad_throw" | sed 's/^/  /'
  status=1
fi

if [ $status -eq 0 ]; then echo "conventions: ${#files[@]} files formatted; settings and errors through their macros"; fi
exit $status
