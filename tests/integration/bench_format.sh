#!/usr/bin/env bash
# Every generic `loom bench` suite prints one verdict format: a verdict column, "no anchor
# (reason)" where the anchor has no figure (never nan), a legend of its units, and a final
# "targets: N met, M missed" line; its JSON is strict (null, never NaN). An anchor that hangs or
# dies is stopped and named, and the run still ends with its table.
# `loom bench gpu` where no GPU is visible names the reason in every row and still exits 0 with its
# table; its anchor script answers nan to every name where torch or a CUDA device is missing.
# usage: bench_format.sh LOOM_BINARY mem|prof|fake_anchor|anchor_hang|anchor_dies|gpu|gpu_anchor|compile
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
  gpu)
    "$loom" bench gpu --quick --anchor none --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" || status=$?
    [[ $status == 0 ]] || fail "exit status $status"
    check_format
    check_json "$tmp/r.json"
    row eager_add_overhead | grep -qE ' <=0\.5x +(ok|MISS|not judged)' || fail "eager_add_overhead's target"
    row eager_add_overhead_py | grep -qE ' <=3 +(ok|MISS|not judged)' || fail "eager_add_overhead_py's target"
    row h2d_loader_of_pinned | grep -qE ' >=0\.9 +(ok|MISS|not judged)' || fail "h2d_loader_of_pinned's target"
    if grep -q '^gpu: none: no CUDA device is visible (' "$tmp/out"; then gpu=0; else gpu=1; fi
    # Every row is there; without a GPU none has a figure and each says why, with one each has loom's.
    python3 - "$tmp/r.json" "$gpu" <<'PY' || fail "gpu rows"
import json, sys
doc = json.load(open(sys.argv[1]))
gpu = sys.argv[2] == "1"
rows = {r["name"]: r for r in doc["results"]}
expected = ["eager_add_overhead", "eager_add_out_overhead", "eager_add_overhead_py", "copy_256m", "add_256m", "exp_256m", "sum_256m",
            "add_256m_of_copy", "exp_256m_of_copy", "sum_256m_of_copy", "softmax_fwd_bwd",
            "layer_norm_fwd_bwd", "gemm_bf16_8192", "gemm_tf32_8192", "conv2d_fwd", "mlp_step",
            "cnn_step", "h2d_pinned_copy", "h2d_loader", "h2d_loader_of_pinned"]
assert sorted(rows) == sorted(expected), sorted(rows)
assert doc["machine"]["gpu"].startswith("none: no CUDA device is visible") != gpu, doc["machine"]
for name, r in rows.items():
    if gpu:
        assert r["loom"] is not None and r["loom"] > 0, r
        assert r["anchor_missing"] == "not run: --anchor none", r
    else:
        assert r["loom"] is None and r["loom_rounds"] == [], r
        assert r["anchor_missing"] == "not run: no CUDA device is visible", r
        assert r["verdict"] in ("not judged", "no target"), r
PY
    if [[ $gpu == 0 ]]; then
      row cnn_step | grep -qE ' - +no anchor +- .*\(not run: no CUDA device is visible\)$' || fail "cnn_step row"
    fi
    ;;
  compile)
    "$loom" bench compile --quick --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" || status=$?
    [[ $status == 0 ]] || fail "exit status $status"
    check_format
    check_json "$tmp/r.json"
    row guard_16_inputs | grep -qE ' <=1 +(ok|MISS)' || fail "guard_16_inputs' target"
    row chain_16m_compiled_of_eager | grep -qE ' >=1 +(ok|MISS)' || fail "the fused chain's target"
    row dynamic_40_lengths | grep -qE ' (2|40) +no anchor .*<=2 +(ok|MISS)' || fail "dynamic_40_lengths"
    grep -qE '^  of eager +the compiled row' "$tmp/out" || fail "of eager legend"
    ;;
  gpu_anchor)
    anchor=$(dirname "$loom")/loom-anchor-gpu
    [[ -x $anchor ]] || fail "$anchor is not installed beside loom"
    printf 'eager_add_overhead 1 1\nno_such_row 1 1\n\nh2d_loader_of_pinned 1 1\n' \
      | "$anchor" serve gpu > "$tmp/out" 2> "$tmp/err" || status=$?
    [[ $status == 0 ]] || fail "anchor exit status $status"
    # One answer per request, in order; nan for unknown names (and for all where torch or CUDA is missing).
    [[ $(wc -l < "$tmp/out") == 3 ]] || fail "expected 3 answers"
    sed -n 1p "$tmp/out" | grep -qE '^eager_add_overhead ([0-9.e+-]+|nan)$' || fail "first answer"
    sed -n 2p "$tmp/out" | grep -qx 'no_such_row nan' || fail "unknown name"
    sed -n 3p "$tmp/out" | grep -qE '^h2d_loader_of_pinned nan$' || fail "a fraction without its parts"
    if ! grep -q '^anchor: torch .* on ' "$tmp/err"; then
      grep -qE '^anchor: (torch is not installed|torch .* sees no CUDA device)' "$tmp/err" || fail "no reason for nan"
      grep -qx 'eager_add_overhead nan' "$tmp/out" || fail "a figure without a GPU"
    fi
    "$anchor" > /dev/null 2>&1 && fail "no usage error without 'serve'"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo "bench format $case_name OK"
