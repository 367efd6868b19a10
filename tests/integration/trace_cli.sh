#!/usr/bin/env bash
# `loom train --profile` and `loom trace`: short profiled training runs write Chrome traces (gzip and
# plain) with a step breakdown; `loom trace summarize` and `loom trace diff` read them back; corrupt,
# truncated or missing traces give a DataError naming the file (exit status 1), never a crash.
# usage: trace_cli.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_in() { grep -q -- "$1" "$2" || { cat "$2"; fail "'$1' not in $2"; }; }

"$loom" train --epochs 1 --train-samples 2560 --no-progress --profile "$tmp/a.json.gz" --profile-steps 2,1,4 \
  > "$tmp/train_a.log" 2>&1 || { cat "$tmp/train_a.log"; fail "train --profile"; }
expect_in "trace written to $tmp/a.json.gz" "$tmp/train_a.log"
expect_in "Step breakdown" "$tmp/train_a.log"
expect_in "Dominated by: " "$tmp/train_a.log"
expect_in "test accuracy" "$tmp/train_a.log"
"$loom" train --epochs 1 --train-samples 2560 --workers 0 --no-progress --profile "$tmp/b.json" \
  --profile-steps 1,1,3 > "$tmp/train_b.log" 2>&1 || { cat "$tmp/train_b.log"; fail "train --profile (plain)"; }

"$loom" trace summarize --top 100 "$tmp/a.json.gz" > "$tmp/sum_a.log" || fail "summarize a"
expect_in " 4 step(s)" "$tmp/sum_a.log"
expect_in "loom::addmm" "$tmp/sum_a.log"
expect_in "data.wait" "$tmp/sum_a.log"
# One table per thread: the loader's worker decodes apart from the thread that runs the steps.
expect_in '(runs the steps)' "$tmp/sum_a.log"
expect_in 'Thread "loader worker 0"' "$tmp/sum_a.log"
expect_in "Dominated by: " "$tmp/sum_a.log"
"$loom" trace summarize --by-shapes --top 5 "$tmp/b.json" > "$tmp/sum_b.log" || fail "summarize b"
expect_in " 3 step(s)" "$tmp/sum_b.log"
expect_in "Input shapes" "$tmp/sum_b.log"
"$loom" trace diff "$tmp/a.json.gz" "$tmp/b.json" > "$tmp/diff.log" || fail "diff"
expect_in "self time per step (A: 4 steps, B: 3 steps)" "$tmp/diff.log"
expect_in "Change" "$tmp/diff.log"

# Bad input: the status is 1 and the message names the file.
check_bad() {  # FILE PATTERN COMMAND...
  local file=$1 pattern=$2
  shift 2
  set +e
  "$@" > "$tmp/bad.log" 2>&1
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat "$tmp/bad.log"; fail "status $rc for $file"; }
  grep -q -- "DataError: \[trace\] .*$file" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "no DataError naming $file"; }
  grep -q -- "$pattern" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "'$pattern' not in the error for $file"; }
}
head -c 3000 "$tmp/b.json" > "$tmp/cut.json"
check_bad "$tmp/cut.json" "truncated or corrupt" "$loom" trace summarize "$tmp/cut.json"
head -c 400 "$tmp/a.json.gz" > "$tmp/cut.json.gz"
check_bad "$tmp/cut.json.gz" "gzip" "$loom" trace summarize "$tmp/cut.json.gz"
echo '{"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "pid": 1, "tid": 1}]}' > "$tmp/nodur.json"
check_bad "$tmp/nodur.json" "has no 'dur'" "$loom" trace summarize "$tmp/nodur.json"
echo 'not json at all' > "$tmp/garbage.json"
check_bad "$tmp/garbage.json" "byte offset" "$loom" trace diff "$tmp/a.json.gz" "$tmp/garbage.json"
check_bad "$tmp/none.json" "cannot open" "$loom" trace diff "$tmp/none.json" "$tmp/b.json"
echo "trace cli OK"
