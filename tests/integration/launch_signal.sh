#!/usr/bin/env bash
# SIGTERM/SIGINT/SIGHUP sent to the launcher reach every worker; the launcher exits with 128+signo.
# usage: launch_signal.sh LOOM_BINARY SIGNAL EXPECTED_STATUS
set -euo pipefail
loom=$1
sig=$2
expected=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }

# Each worker traps the signal (before it writes up.RANK), writes got.RANK and exits; `sleep` runs in
# the background so that the shell handles the trap at once.
"$loom" launch --nproc 3 -- sh -c \
  'trap "echo got > \"'"$tmp"'/got.\$RANK\"; exit 0" '"$sig"'; touch "'"$tmp"'/up.$RANK"; sleep 100 & wait' \
  > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 500); do
  [[ $(ls "$tmp"/up.* 2>/dev/null | wc -l) == 3 ]] && break
  sleep 0.02
done
[[ $(ls "$tmp"/up.* 2>/dev/null | wc -l) == 3 ]] || fail "workers did not start"
start=$SECONDS
kill "-$sig" "$pid"
status=0
wait "$pid" || status=$?
elapsed=$((SECONDS - start))
[[ $status == "$expected" ]] || fail "expected exit status $expected, got $status"
(( elapsed < 8 )) || fail "took $elapsed s"
for r in 0 1 2; do [[ -f "$tmp/got.$r" ]] || fail "rank $r did not get SIG$sig"; done
grep -q "got SIG$sig, forwarding it to the workers" "$tmp/log" || fail "no forwarding line"
echo "SIG$sig reached all 3 workers; launcher exited with $status"
