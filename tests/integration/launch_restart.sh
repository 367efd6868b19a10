#!/usr/bin/env bash
# --max-restarts: a group whose rank 1 fails on the first attempt is restarted with
# LOOM_RESTART_COUNT=1 and succeeds; a group that always fails gives up after R restarts.
# usage: launch_restart.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }

status=0
"$loom" launch --nproc 2 --max-restarts 1 -- sh -c \
  'echo "attempt $LOOM_RESTART_COUNT/$TORCHELASTIC_RESTART_COUNT"; if [ "$LOOM_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 4; fi; [ "$LOOM_RESTART_COUNT" = 0 ] && exec sleep 100; exit 0' \
  > "$tmp/log" 2>&1 || status=$?
[[ $status == 0 ]] || fail "expected exit 0 after one restart, got $status"
grep -q '^\[loom launch\] rank 1 (pid [0-9]*) exited with code 4$' "$tmp/log" || fail "no failure line"
grep -q '^\[loom launch\] restarting the group (1/1)$' "$tmp/log" || fail "no restart line"
for r in 0 1; do
  grep -q "^\[rank$r\]: attempt 1/1$" "$tmp/log" || fail "rank $r did not run with restart count 1"
done
echo "restarted once and succeeded"

# Rank 1 fails at once on every attempt (rank 0 may be stopped before it prints anything).
status=0
"$loom" launch --nproc 2 --max-restarts 2 -- sh -c \
  'echo "attempt $LOOM_RESTART_COUNT"; [ "$RANK" = 1 ] && exit 6; exec sleep 100' \
  > "$tmp/log" 2>&1 || status=$?
[[ $status == 6 ]] || fail "expected exit 6 when restarts run out, got $status"
grep -q 'restarting the group (2/2)' "$tmp/log" || fail "no second restart"
grep -q 'no restarts left (2 used)' "$tmp/log" || fail "no give-up line"
for k in 0 1 2; do grep -q "^\[rank1\]: attempt $k$" "$tmp/log" || fail "attempt $k missing"; done
grep -q "attempt 3" "$tmp/log" && fail "a fourth attempt ran"
echo "gave up after 2 restarts with the worker's code"
