#!/usr/bin/env bash
# Bad `loom launch` input fails with status 1 and a ValueError naming the problem; nothing is started.
# usage: launch_bad_input.sh LOOM_BINARY EXPECTED_MESSAGE [LAUNCH_ARGS...]
set -uo pipefail
loom=$1
expected=$2
shift 2
out=$("$loom" launch "$@" 2>&1)
status=$?
echo "$out"
[[ $status == 1 ]] || { echo "FAIL: expected exit status 1, got $status"; exit 1; }
grep -qE -- "ValueError: \[(loom|config)" <<< "$out" || { echo "FAIL: expected a ValueError"; exit 1; }
grep -qF -- "$expected" <<< "$out" || { echo "FAIL: expected the message: $expected"; exit 1; }
if grep -q '^\[loom launch\] starting' <<< "$out"; then echo "FAIL: workers were started"; exit 1; fi
echo "rejected as expected"
