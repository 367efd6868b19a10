#!/usr/bin/env bash
# `loom launch` gives each worker torchrun's environment and prefixes its output with the rank.
# usage: launch_env.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$tmp/out"; exit 1; }

# One node, 3 workers: RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/GROUP_RANK/MASTER_ADDR/MASTER_PORT/
# LOOM_RESTART_COUNT/TORCHELASTIC_RESTART_COUNT/LOOM_RUN_ID.
"$loom" launch --nproc 3 -- sh -c \
  'echo "env $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$GROUP_RANK/$MASTER_ADDR/$MASTER_PORT/$LOOM_RESTART_COUNT/$TORCHELASTIC_RESTART_COUNT/$LOOM_RUN_ID"' \
  > "$tmp/out"
[[ $(grep -c '^\[rank[0-9]\]: env ' "$tmp/out") == 3 ]] || fail "expected 3 prefixed env lines"
for r in 0 1 2; do
  [[ $(grep -cE "^\[rank$r\]: env $r/3/$r/3/0/127\.0\.0\.1/[0-9]+/0/0/[0-9a-f]+$" "$tmp/out") == 1 ]] ||
    fail "rank $r: missing or wrong environment"
done
ports=$(sed -E 's|.*/127\.0\.0\.1/([0-9]+)/.*|\1|' "$tmp/out" | sort -u)
[[ $(echo "$ports" | wc -l) == 1 && $ports -gt 0 ]] || fail "MASTER_PORT differs between ranks: $ports"
[[ $(awk -F/ '{print $NF}' "$tmp/out" | sort -u | wc -l) == 1 ]] || fail "LOOM_RUN_ID differs between ranks"

# Node 1 of 2 with 2 workers each: global ranks 2 and 3 of 4, default port 29500, explicit address
# and run id.
"$loom" launch --nproc 2 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --run-id job7 -- sh -c \
  'echo "env $RANK/$WORLD_SIZE/$LOCAL_RANK/$GROUP_RANK/$MASTER_ADDR:$MASTER_PORT/$LOOM_RUN_ID"' > "$tmp/out"
for r in 2 3; do
  [[ $(grep -c "^\[rank$r\]: env $r/4/$((r - 2))/1/10.1.2.3:29500/job7$" "$tmp/out") == 1 ]] ||
    fail "rank $r of node 1: missing or wrong environment"
done
[[ $(wc -l < "$tmp/out") == 2 ]] || fail "expected exactly 2 lines"
echo "launch environment ok"
