#!/usr/bin/env bash
# Hierarchical allreduce across hosts emulated on this machine (scripts/emulated-hosts.sh): two
# network namespaces joined by a bridge, links shaped to 10 Gbit/s, one `loom launch --nnodes 2
# --node-rank K --nproc 2` in each. Every rank checks its sums (DistWorker.DISABLED_Run, mode
# allreduce); each must see one peer over shared memory and two over TCP, and run the algorithm
# forced by LOOM_ALGO (hier, hier_tree) or chosen by the cost model. Skips (77) with the reason
# where the kernel or the user may not make namespaces.
# usage: emulated_hosts.sh LOOM_BINARY TEST_DIST_BINARY
set -euo pipefail
loom=$1
worker=$2
hosts="$(cd "$(dirname "$0")/../.." && pwd)/scripts/emulated-hosts.sh"
if ! why=$(bash "$hosts" check 2>&1); then
  echo "SKIP: $why"
  exit 77
fi
tmp=$(mktemp -d)
trap 'bash "$hosts" down; rm -rf "$tmp"' EXIT
bash "$hosts" up 2 --rate 10gbit
master=$(bash "$hosts" addr 0)
fail() { echo "FAIL: $*"; tail -n 30 "$tmp"/log.*; exit 1; }

port=$((29700 + RANDOM % 200))
for algo in hier hier_tree model; do
  port=$((port + 1))
  pids=()
  for k in 0 1; do
    bash "$hosts" exec $k env LOOM_ALGO=$algo LOOM_LOGS=algo LOOM_DIST_TIMEOUT=60 \
      LOOM_TEST_WORKER=allreduce LOOM_TEST_WORKER_DIR="$tmp" \
      "$loom" launch --nproc 2 --nnodes 2 --node-rank $k --master-addr "$master" \
      --master-port $port -- "$worker" --gtest_also_run_disabled_tests \
      --gtest_filter=DistWorker.DISABLED_Run > "$tmp/log.$k" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "$algo: a launcher failed"; done
  ok=$(cat "$tmp"/log.* | grep -cE 'allreduce OK; .*: shm x1, tcp x2' || true)
  [[ $ok == 4 ]] || fail "$algo: expected 4 ranks with one shared-memory and two TCP peers, got $ok"
  if [[ $algo != model ]]; then
    grep -q "last allreduce: $algo " "$tmp/log.0" || fail "$algo: not the algorithm used"
  else
    grep -q 'cost model over 2 host(s)' "$tmp/log.0" || fail "model: the group did not see 2 hosts"
    grep -E '\[dist\] allreduce of 1048588 bytes on 4 ranks \(2 host\(s\)\): ' "$tmp"/log.0 |
      sed "s/ by the cost model.*//" | head -3 || true
  fi
  echo "$algo: 4 ranks on 2 emulated hosts, sums correct"
done
echo "emulated hosts OK"
