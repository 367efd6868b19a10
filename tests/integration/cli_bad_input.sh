#!/usr/bin/env bash
# A bad command-line value (or setting) fails at once with status 1 and a typed error that names the
# option and the value; nothing runs: no training step, no launched worker.
# usage: cli_bad_input.sh LOOM_BINARY EXPECTED_MESSAGE COMMAND [ARGS...]
set -uo pipefail
loom=$1
expected=$2
shift 2
out=$(timeout 60 "$loom" "$@" 2>&1)
status=$?
echo "$out"
[[ $status == 1 ]] || { echo "FAIL: expected exit status 1, got $status"; exit 1; }
grep -qE -- "Error: \[" <<< "$out" || { echo "FAIL: expected a typed error"; exit 1; }
grep -qF -- "$expected" <<< "$out" || { echo "FAIL: expected the message: $expected"; exit 1; }
if grep -qE '^(loom train: (mlp|cnn) |epoch [0-9]|\[loom launch\] starting)' <<< "$out"; then
  echo "FAIL: the command started working"; exit 1
fi
echo "rejected as expected"
