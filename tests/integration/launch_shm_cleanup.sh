#!/usr/bin/env bash
# `loom launch` removes the shared-memory segments of workers that died while their group connected
# (Note [Orphaned segments]): rank 1 exits with 3 right after the rendezvous, and rank 0, waiting for
# it in group creation with its segment made, is stopped by the launcher. With SIGTERM ignored only
# the launcher's SIGKILL (after LOOM_LAUNCH_GRACE) ends it, which leaves the segment to the
# launcher's sweep; with SIGTERM handled it ends by that. Either way no segment of the run remains.
# usage: launch_shm_cleanup.sh LOOM_BINARY TEST_DIST_BINARY
set -euo pipefail
loom=$1
worker=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/log"; exit 1; }

for ignore_term in 1 0; do
  rm -f "$tmp"/pid.*
  status=0
  LOOM_LAUNCH_GRACE=1 LOOM_TEST_WORKER=connect LOOM_TEST_WORKER_DIR="$tmp" \
    LOOM_TEST_IGNORE_TERM=$ignore_term "$loom" launch --nproc 2 -- "$worker" \
    --gtest_also_run_disabled_tests --gtest_filter=DistWorker.DISABLED_Run > "$tmp/log" 2>&1 ||
    status=$?
  [[ $status == 3 ]] || fail "expected rank 1's exit code 3, got $status"
  pid0=$(cat "$tmp/pid.0")
  left=$(ls /dev/shm | grep -E "^loom-pg-[0-9]+-$pid0-" || true)
  [[ -z "$left" ]] || fail "segments of rank 0 (pid $pid0) remain: $left"
  if [[ $ignore_term == 1 ]]; then
    grep -q 'still running 1 s after the stop signal (LOOM_LAUNCH_GRACE); sending SIGKILL' "$tmp/log" ||
      fail "rank 0 was not killed by SIGKILL"
    grep -qE "^\[loom launch\] removed [0-9]+ shared-memory segment\(s\) left by dead processes: .*/dev/shm/loom-pg-[0-9]+-$pid0-" \
      "$tmp/log" || fail "no line about rank 0's removed segment"
    grep -E '^\[loom launch\] removed' "$tmp/log"
  fi
  echo "SIGTERM ignored=$ignore_term: launcher exited with $status, no segment of rank 0 (pid $pid0) left"
done
