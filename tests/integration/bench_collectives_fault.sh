#!/usr/bin/env bash
# `loom bench collectives` bounds every configuration: a rank that hangs is stopped at the deadline
# (SIGKILL when it ignores SIGTERM), a rank that dies stops its peers at once, the table names the
# configuration and the reason, and the other configurations still report. The faults come from the
# sweep's test hook, LOOM_BENCH_TEST_FAULT (Note [sweep test hook] in bench/collective_sweep.h).
# usage: bench_collectives_fault.sh LOOM_BINARY loom|gloo
set -euo pipefail
loom=$1
case_name=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; tail -30 "$tmp/err"; exit 1; }

# The row of a size (bytes) in the table.
row() { grep -E "^ +$1 " "$tmp/out" || fail "no row for $1 bytes"; }

run() {
  status=0
  start=$SECONDS
  LOOM_BENCH_TEST_FAULT=$1 "$loom" bench collectives --np 2 --op allreduce --sizes 4K:64K --iters 3 \
    --repeats 2 "${@:2}" > "$tmp/out" 2> "$tmp/err" || status=$?
  elapsed=$((SECONDS - start))
}

case $case_name in
  loom)
    # Rank 1 stops before its 16 KiB allreduce; rank 0 waits in it. Only the deadline ends this.
    run loom:1:16K:hang --rounds 1 --deadline 10
    [[ $status == 1 ]] || fail "exit status $status, expected 1 (loom failed)"
    (( elapsed < 100 )) || fail "took $elapsed s with a 10 s deadline"
    grep -qx '  loom: FAILED (timeout after 10 s at 16K) in round 1' "$tmp/out" || fail "no failure row"
    row 8192 | grep -qE '^ +8192 +2048 +[a-z]+ +[0-9.]+ ' || fail "the sizes before the hang were lost"
    row 16384 | grep -qE '^ +16384 +4096 +- +- ' || fail "16K has a figure"
    echo "loom hang: stopped after ${elapsed} s"
    # Rank 1 exits before 8 KiB: rank 0, waiting in a collective with a 120 s timeout, is stopped
    # at once rather than left to it.
    run loom:1:8K:exit --rounds 1 --deadline 120
    [[ $status == 1 ]] || fail "exit status $status, expected 1"
    (( elapsed < 60 )) || fail "took $elapsed s: the peer was left waiting"
    # (A peer that failed in the same instant is named after it: "...; rank 0 exited with ...".)
    grep -q '^  loom: FAILED (rank 1 exited with status 5 at 8K (test fault: rank 1 exits at 8192 bytes in loom))' \
      "$tmp/out" || fail "no failure row naming rank 1"
    echo "loom exit: stopped after ${elapsed} s"
    ;;
  gloo)
    if [[ ! -x "$(dirname "$loom")/loom-anchor-gloo" ]]; then
      echo "SKIPPED: loom-anchor-gloo is not built"
      exit 0
    fi
    # ring: rank 1 spins at 16 KiB ignoring SIGTERM; bcube: rank 1 aborts at 8 KiB; ring_chunked
    # runs clean. Two rounds: the failed configurations are not run again.
    run ring:1:16K:stuck,bcube:1:8K:abort --rounds 2 --vs gloo --gloo-configs ring,bcube,ring_chunked \
      --deadline 15
    [[ $status == 3 ]] || fail "exit status $status, expected 3 (only anchor configurations failed)"
    (( elapsed < 150 )) || fail "took $elapsed s with a 15 s deadline"
    grep -qx '  gloo ring: FAILED (timeout after 15 s at 16K) in round 1' "$tmp/out" || fail "no row for ring"
    # Rank 0 may also have noticed the closed connection (exiting, or killed by SIGPIPE writing to
    # it) before the job collected the ranks: then the report names it after rank 1.
    grep -qE '^  gloo bcube: FAILED \(rank 1 was killed by SIGABRT at 8K \(test fault: rank 1 aborts at 8192 bytes in bcube\)(\)|; rank 0 (exited with status [0-9]+|was killed by SIGPIPE))' \
      "$tmp/out" || fail "no row for bcube"
    [[ $(grep -c 'FAILED' "$tmp/out") == 2 ]] || fail "a failed configuration was run again"
    # Every size still has loom's figure and Gloo's (ring_chunked at least).
    for b in 4096 8192 16384 32768 65536; do
      row $b | grep -qE "^ +$b +[0-9]+ +[a-z]+ +[0-9.]+ .* \| (ring|bcube|ring_chunked) +[0-9.]+ " \
        || fail "row $b lacks a figure"
    done
    row 65536 | grep -q '| ring_chunked ' || fail "ring_chunked did not report"
    grep -qE '^targets \(.*\): 0 met, 0 missed' "$tmp/out" || fail "no targets line"
    echo "gloo faults: run ended after ${elapsed} s"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "bench collectives fault $case_name OK"
