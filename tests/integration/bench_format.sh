#!/usr/bin/env bash
# Every generic `loom bench` suite prints one verdict format: a verdict column, "no anchor
# (reason)" where the anchor has no figure (never nan), a legend of its units, and a final
# "targets: N met, M missed" line; its JSON is strict (null, never NaN). An anchor that hangs or
# dies is stopped and named, and the run still ends with its table.
# usage: bench_format.sh LOOM_BINARY mem|prof|fake_anchor|anchor_hang|anchor_dies
set -euo pipefail
loom=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; tail -20 "$tmp/err"; exit 1; }

# The format every table shares.
check_format() {
  grep -qE '^benchmark +unit +.* ratio +spread +target +verdict' "$tmp/out" || fail "no table header with a verdict column"
  grep -qE '^targets: [0-9]+ met, [0-9]+ missed' "$tmp/out" || fail "no targets line"
  grep -q '^units:$' "$tmp/out" || fail "no legend"
  if grep -Eiq '(^|[[:space:]])[-+]?nan([[:space:]]|$)' "$tmp/out"; then fail "a nan in the table"; fi
}

# Strict JSON (no NaN), every result with the schema's fields and a verdict.
check_json() {
  python3 - "$1" <<'PY' || fail "bad JSON"
import json, sys
def no_constants(name):
    raise ValueError("non-JSON constant " + name)
doc = json.load(open(sys.argv[1]), parse_constant=no_constants)
assert doc["results"], "no results"
for r in doc["results"]:
    for key in ("name", "unit", "loom", "anchor", "anchor_value", "ratio", "better", "target",
                "verdict", "spread"):
        assert key in r, (key, r)
    assert r["verdict"] in ("ok", "MISS", "no target", "not judged"), r
    assert (r["anchor_value"] is None) == (r["anchor_missing"] is not None), r
    assert r["anchor_value"] is not None or r["ratio"] is None, r
PY
}

# The row of one measurement.
row() { grep -E "^$1 " "$tmp/out" || fail "no row $1"; }

status=0
case $case_name in
  mem)
    "$loom" bench mem --quick --rounds 2 --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" || status=$?
    [[ $status == 0 ]] || fail "exit status $status"
    check_format
    check_json "$tmp/r.json"
    row alloc_free_pair_4k | grep -q 'no anchor .*no target *(this suite has none' || fail "alloc_free_pair_4k row"
    row replay_h4096_peak_ratio_expandable_share | grep -qE '<=1\.1 +(ok|MISS)' || fail "peak ratio target"
    grep -qE '^  ns/pair +nanoseconds per allocate \+ free pair; lower is better$' "$tmp/out" || fail "ns/pair legend"
    grep -qE '^  rsv/alloc ' "$tmp/out" || fail "rsv/alloc legend"
    ;;
  prof)
    "$loom" bench prof --quick --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" || status=$?
    [[ $status == 0 ]] || fail "exit status $status"
    check_format
    check_json "$tmp/r.json"
    row mlp_step_t1 | grep -qE '<=1\.03x +(ok|MISS)' || fail "mlp_step_t1 verdict"
    row add_8 | grep -q 'no target' || fail "add_8 verdict"
    grep -qE '^  ms/step +milliseconds per training step.*; lower is better$' "$tmp/out" || fail "ms/step legend"
    grep -q 'profiler overhead on the training step' "$tmp/out" || fail "overhead line"
    ;;
  fake_anchor)
    "$loom" bench mem --quick --rounds 2 --only alloc_free_pair_4k,glibc --anchor "$here/fake_anchor.sh" \
      --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" || status=$?
    [[ $status == 0 ]] || fail "exit status $status"
    check_format
    check_json "$tmp/r.json"
    # A figure and a ratio where the anchor answered, "no anchor (reason)" where it said nan.
    row alloc_free_pair_4k | grep -qE ' 100 +[0-9.e+-]+ ' || fail "alloc_free_pair_4k has no anchor figure"
    row glibc_malloc_free_4k | grep -qE "no anchor +- .*\(the anchor gave no figure for it \(its answer was 'nan'\)\)" \
      || fail "glibc row does not say why it has no anchor"
    grep -q '^fake anchor: serving mem' "$tmp/err" || fail "the anchor's stderr was not passed on"
    ;;
  anchor_hang|anchor_dies)
    if [[ $case_name == anchor_hang ]]; then mode=hang; else mode=die; fi
    start=$SECONDS
    FAKE_ANCHOR_MODE=$mode FAKE_ANCHOR_PIDS="$tmp/pids" "$loom" bench mem --quick --rounds 2 \
      --only alloc_free_pair_4k,glibc --anchor "$here/fake_anchor.sh" --deadline 3 \
      --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" || status=$?
    elapsed=$((SECONDS - start))
    [[ $status == 3 ]] || fail "exit status $status, expected 3 (the anchor failed)"
    check_format
    check_json "$tmp/r.json"
    if [[ $mode == hang ]]; then
      (( elapsed < 120 )) || fail "took $elapsed s with a 3 s deadline"
      row glibc_malloc_free_4k | grep -q 'no anchor .*(timeout after 3 s on glibc_malloc_free_4k (the anchor was stopped))' \
        || fail "glibc row does not name the timeout"
      # The anchor and its child ignored SIGTERM: both must be gone (SIGKILL to the group).
      for pid in $(cat "$tmp/pids"); do
        if kill -0 "$pid" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; then
          fail "anchor process $pid survived"
        fi
      done
    else
      row glibc_malloc_free_4k | grep -q 'no anchor .*(the anchor exited with status 7 during glibc_malloc_free_4k (fake anchor: giving up on glibc_malloc_free_4k))' \
        || fail "glibc row does not say how the anchor died"
    fi
    # The first round's answer before the failure is kept.
    row alloc_free_pair_4k | grep -qE ' 100 ' || fail "the figure before the failure was lost"
    grep -q '^anchor FAILED' "$tmp/out" || fail "no failure line"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "bench format $case_name OK"
