#!/usr/bin/env bash
# Lesson 3's failure reports, each reproduced by one `loom train --inject-fault` command on two local
# processes:
#   mismatch  rank 1 makes a collective the others do not: LOOM_DIST_DEBUG=detail names the ranks,
#             what each called and the fields that differ
#   hang      rank 1 stops before step 3: rank 0 times out (LOOM_DIST_TIMEOUT), every rank writes its
#             flight record to LOOM_FLIGHT_DIR, and `loom dist-debug` names rank 1 as the one missing
#   kill      rank 1 dies by SIGKILL: the launcher names it, stops rank 0, and `loom dist-debug`
#             names rank 1 from the survivor's record
# usage: train_faults.sh LOOM_BINARY mismatch|hang|kill
set -uo pipefail
loom=$1
kind=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }
common=(train --nproc 2 --epochs 1 --train-samples 1280 --batch 64 --threads 1 --no-progress --no-val
        --inject-fault "$kind" --rank 1 --step 3)

start=$SECONDS
case $kind in
  mismatch)
    LOOM_DIST_DEBUG=detail LOOM_DIST_TIMEOUT=60 timeout 300 "$loom" "${common[@]}" > "$tmp/log" 2>&1
    status=$?
    [[ $status != 0 && $status != 124 ]] || fail "expected a failure, got status $status"
    grep -q "injected fault: mismatch on rank 1 at step 3" "$tmp/log" || fail "the fault was not injected"
    grep -q "collective mismatch in group" "$tmp/log" || fail "no contract report"
    grep -qE "rank 1 called allreduce\(float64" "$tmp/log" || fail "the report does not say what rank 1 called"
    grep -q "Differing fields: " "$tmp/log" || fail "the report does not list the differing fields"
    ;;
  hang)
    LOOM_DIST_TIMEOUT=5 LOOM_FLIGHT_DIR="$tmp/flight" timeout 300 "$loom" "${common[@]}" > "$tmp/log" 2>&1
    status=$?
    [[ $status != 0 && $status != 124 ]] || fail "expected a failure, got status $status"
    grep -q "injected fault: hang on rank 1 at step 3" "$tmp/log" || fail "the fault was not injected"
    "$loom" dist-debug "$tmp/flight" > "$tmp/debug" 2>&1 || fail "dist-debug failed: $(cat "$tmp/debug")"
    cat "$tmp/debug"
    grep -qE "rank 1 (never|did not)" "$tmp/debug" || fail "dist-debug does not name rank 1"
    ;;
  kill)
    LOOM_FLIGHT_DIR="$tmp/flight" timeout 300 "$loom" "${common[@]}" > "$tmp/log" 2>&1
    status=$?
    [[ $status == 137 ]] || fail "expected status 137 (the killed rank's), got $status"
    grep -qE "rank 1 \(pid [0-9]+\) was killed by SIGKILL" "$tmp/log" || fail "the launcher does not name rank 1"
    "$loom" dist-debug "$tmp/flight" > "$tmp/debug" 2>&1 || fail "dist-debug failed: $(cat "$tmp/debug")"
    cat "$tmp/debug"
    grep -q "rank 1" "$tmp/debug" || fail "dist-debug does not name rank 1"
    ;;
  *) echo "usage: $0 LOOM mismatch|hang|kill"; exit 2 ;;
esac
cat "$tmp/log"
echo "fault $kind reported in $((SECONDS - start)) s"
