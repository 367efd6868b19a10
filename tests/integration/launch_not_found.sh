#!/usr/bin/env bash
# A worker command that cannot be run is reported clearly, with the shell's exit codes.
# usage: launch_not_found.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }

status=0
"$loom" launch --nproc 2 -- no-such-command-for-loom --flag > "$tmp/log" 2>&1 || status=$?
[[ $status == 127 ]] || fail "expected exit 127, got $status"
grep -qx "\[loom launch\] cannot run 'no-such-command-for-loom': No such file or directory" "$tmp/log" ||
  fail "no clear message"

printf 'not a program\n' > "$tmp/plain"
chmod -x "$tmp/plain"
status=0
"$loom" launch --nproc 1 -- "$tmp/plain" > "$tmp/log" 2>&1 || status=$?
[[ $status == 126 ]] || fail "expected exit 126 for a non-executable file, got $status"
grep -q "cannot run '$tmp/plain': Permission denied" "$tmp/log" || fail "no permission message"
echo "missing and non-executable commands reported"
