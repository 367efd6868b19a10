#!/usr/bin/env bash
# Output handling: stdout and stderr lines get "[rankR]: ", partial lines are joined until the newline
# (or flushed at exit), lines of busy workers never mix, --log-dir keeps each rank's raw output.
# usage: launch_output.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$loom" launch --nproc 2 --log-dir "$tmp/logs" -- sh -c \
  'printf "abc"; sleep 0.3; printf "def\n"; echo "to stderr $RANK" >&2; printf "no newline $RANK"' \
  > "$tmp/out" 2> "$tmp/err"
for r in 0 1; do
  grep -qx "\[rank$r\]: abcdef" "$tmp/out" || fail "rank $r: partial line not joined"
  grep -qx "\[rank$r\]: no newline $r" "$tmp/out" || fail "rank $r: last partial line lost"
  grep -qx "\[rank$r\]: to stderr $r" "$tmp/err" || fail "rank $r: stderr line not on stderr"
  grep -qx "abcdef" "$tmp/logs/attempt_0/rank_$r.stdout" || fail "rank $r: log file lacks stdout"
  grep -qx "to stderr $r" "$tmp/logs/attempt_0/rank_$r.stderr" || fail "rank $r: log file lacks stderr"
done
[[ $(wc -l < "$tmp/out") == 4 ]] || { cat "$tmp/out"; fail "expected 4 stdout lines"; }
grep -q '^\[loom launch\] starting 2 worker' "$tmp/err" || fail "launcher message missing"

# 4 workers each write 3000 long lines as fast as they can, in small pieces.
"$loom" launch --nproc 4 -- sh -c \
  'i=0; while [ $i -lt 3000 ]; do printf "%s-" "$RANK" "$RANK" "$RANK" "$RANK"; echo "$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK"; i=$((i+1)); done' \
  > "$tmp/busy"
[[ $(wc -l < "$tmp/busy") == 12000 ]] || fail "expected 12000 lines, got $(wc -l < "$tmp/busy")"
bad=$(grep -cvE '^\[rank([0-3])\]: (\1-){4}\1{30}$' "$tmp/busy" || true)
[[ $bad == 0 ]] || { grep -vE '^\[rank([0-3])\]: (\1-){4}\1{30}$' "$tmp/busy" | head -3; fail "$bad mixed lines"; }
for r in 0 1 2 3; do
  [[ $(grep -c "^\[rank$r\]: " "$tmp/busy") == 3000 ]] || fail "rank $r: lines missing"
done
echo "launch output ok"
