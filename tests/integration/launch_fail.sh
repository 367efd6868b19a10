#!/usr/bin/env bash
# When one worker fails, the launcher stops the others at once, names the rank and how it failed,
# exits with its code, and leaves no worker behind.
# usage: launch_fail.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }

check_none_alive() {
  for f in "$tmp"/pid.*; do
    if kill -0 "$(cat "$f")" 2>/dev/null; then fail "worker $f (pid $(cat "$f")) is still alive"; fi
  done
}

# Rank 1 exits with 3 once every worker has written its pid file (pid.RANK).
start=$SECONDS
status=0
"$loom" launch --nproc 3 -- sh -c \
  'echo $$ > "'"$tmp"'/pid.$RANK"; if [ "$RANK" = 1 ]; then
     while [ $(ls "'"$tmp"'" | grep -c pid) -lt 3 ]; do sleep 0.05; done; exit 3
   fi; exec sleep 100' \
  > "$tmp/log" 2>&1 || status=$?
elapsed=$((SECONDS - start))
[[ $status == 3 ]] || fail "expected exit code 3, got $status"
(( elapsed < 15 )) || fail "took $elapsed s"
grep -qE '^\[loom launch\] rank 1 \(pid [0-9]+\) exited with code 3$' "$tmp/log" || fail "no failure line"
[[ $(ls "$tmp"/pid.* | wc -l) == 3 ]] || fail "not every worker started"
check_none_alive
echo "rank 1 failed with code 3: launcher exited with $status after ${elapsed}s, no worker left"

# Rank 0 is killed by SIGKILL once rank 1 ignores SIGTERM; rank 1 must then be SIGKILLed after the
# grace period.
rm -f "$tmp"/pid.*
start=$SECONDS
status=0
LOOM_LAUNCH_GRACE=1 "$loom" launch --nproc 2 -- sh -c \
  'if [ "$RANK" = 0 ]; then
     echo $$ > "'"$tmp"'/pid.0"; while [ ! -f "'"$tmp"'/pid.1" ]; do sleep 0.05; done; kill -9 $$
   fi; trap "" TERM; echo $$ > "'"$tmp"'/pid.1"; exec sleep 100' \
  > "$tmp/log" 2>&1 || status=$?
elapsed=$((SECONDS - start))
[[ $status == 137 ]] || fail "expected exit code 137, got $status"
(( elapsed < 10 )) || fail "took $elapsed s"
grep -qE '^\[loom launch\] rank 0 \(pid [0-9]+\) was killed by SIGKILL$' "$tmp/log" || fail "no kill line"
grep -q 'still running 1 s after the stop signal' "$tmp/log" || fail "no SIGKILL escalation line"
check_none_alive
echo "rank 0 killed by SIGKILL: launcher exited with $status after ${elapsed}s, no worker left"
