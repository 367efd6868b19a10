#!/usr/bin/env bash
# SIGTERM/SIGINT to `loom launch` while rank 0 waits in allreduce #1 for rank 1, which sleeps
# outside any collective (Note [Stop signals]): both ranks stop at once by the signal, each writes
# its flight record, and the launcher exits with 128+signo long before its 10 s grace period would
# end in SIGKILL.
# usage: launch_signal_collective.sh LOOM_BINARY TEST_DIST_BINARY SIGNAL EXPECTED_STATUS
set -euo pipefail
loom=$1
worker=$2
sig=$3
expected=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }

LOOM_FLIGHT_DIR="$tmp/flight" LOOM_TEST_WORKER=signal LOOM_TEST_WORKER_DIR="$tmp" \
  "$loom" launch --nproc 2 -- "$worker" --gtest_also_run_disabled_tests \
  --gtest_filter=DistWorker.DISABLED_Run > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do
  [[ -f "$tmp/joined.0" && -f "$tmp/joined.1" ]] && break
  sleep 0.02
done
[[ -f "$tmp/joined.0" && -f "$tmp/joined.1" ]] || fail "the workers did not finish allreduce #0"
sleep 0.5  # rank 0 is in allreduce #1 by now
start=$SECONDS
kill "-$sig" "$pid"
status=0
wait "$pid" || status=$?
elapsed=$((SECONDS - start))
[[ $status == "$expected" ]] || fail "expected exit status $expected, got $status"
(( elapsed < 6 )) || fail "took $elapsed s"
grep -q "still running" "$tmp/log" && fail "the launcher had to SIGKILL a worker"
grep -qE "^\[rank0\]: \[dist\] allreduce\(float32\[1024\], count=1024, op=sum\) #1 in group 'world': rank 0: .* \[flight record: $tmp/flight/flight-world-rank0.json\]; exiting by SIG$sig$" \
  "$tmp/log" || fail "rank 0 did not name the collective it left"
grep -qE "^\[rank1\]: \[dist\] rank 1 of group 'world': aborted by SIG$sig outside a collective \[flight record: $tmp/flight/flight-world-rank1.json\]$" \
  "$tmp/log" || fail "rank 1 did not report its record"
for r in 0 1; do [[ -s "$tmp/flight/flight-world-rank$r.json" ]] || fail "no flight record of rank $r"; done
grep -q '"seq":1' "$tmp/flight/flight-world-rank0.json" || fail "rank 0's record lacks allreduce #1"
grep -E '^\[rank[01]\]: \[dist\]' "$tmp/log"
echo "SIG$sig: both ranks stopped with flight records; launcher exited with $status after ${elapsed}s"
