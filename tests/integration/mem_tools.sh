#!/usr/bin/env bash
# `loom mem`: the tools end to end, and their errors for damaged files.
#   flow              record -> replay --policy all -> snapshot -> viz; checks every output, that
#                     the page is self-contained and escapes what it shows, and (when chromium is
#                     installed) that its script draws the charts. Prints "mem tools OK".
#   corrupt_trace     truncated and inconsistent traces: exit status 1 and the DataError.
#   corrupt_snapshot  truncated and foreign snapshots: exit status 1 and the DataError.
#   train             real `loom train` runs: a profiled run's Chrome trace replayed; a run recorded
#                     with `loom mem record --train` (LOOM_MEM_RECORD) replayed and snapshotted, its
#                     blocks naming operators; the page's timeline in steps and its map at the
#                     peak (rendered with chromium when installed). Prints "mem train OK".
# usage: mem_tools.sh LOOM_BINARY [flow|corrupt_trace|corrupt_snapshot|train]
set -euo pipefail
loom=$1
mode=${2:-flow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Runs a command that must fail with status 1; prints its stderr.
expect_error() {
  local status=0
  "$@" > "$tmp/out" 2> "$tmp/err" || status=$?
  [[ $status -eq 1 ]] || { cat "$tmp/out" "$tmp/err"; fail "'$*' exited with $status, expected 1"; }
  cat "$tmp/err"
}

# Renders a page with chromium (when installed) into $tmp/dom.html; false when it is not installed.
render() {
  local chrome sandbox=()
  chrome=$(command -v chromium || command -v chromium-browser || true)
  [[ -n "$chrome" ]] || return 1
  [[ $(id -u) -eq 0 ]] && sandbox=(--no-sandbox)
  timeout 60 "$chrome" --headless --disable-gpu "${sandbox[@]}" --dump-dom "file://$1" \
    > "$tmp/dom.html" 2> /dev/null || true
  grep -q 'data-rendered="yes"' "$tmp/dom.html" || fail "the page's script did not finish in $chrome"
  echo "rendered $1 in $chrome"
}

if [[ "$mode" != train ]]; then
  "$loom" mem record "$tmp/trace.json" --steps 3 --seed 1 > "$tmp/record.out"
  grep -q "^recorded $tmp/trace.json" "$tmp/record.out" || { cat "$tmp/record.out"; fail "record output"; }
  head -c 80 "$tmp/trace.json" | grep -q '"format": "loom-alloc-trace", "version": 2' || fail "trace header"
fi

case "$mode" in
flow)
  cat "$tmp/record.out"
  "$loom" mem replay "$tmp/trace.json" --policy all > "$tmp/replay.out"
  cat "$tmp/replay.out"
  grep -q "peak allocated *peak reserved *rsv/alloc *frag@peak *malloc/free *map/unmap *OOMs *ns/event" \
    "$tmp/replay.out" || fail "replay table header"
  policies=$("$loom" mem replay --help | sed -n 's/.*Policies: //p')
  [[ -n "$policies" ]] || fail "no policies in loom mem replay --help"
  for p in $policies; do
    grep -Eq "^$p +[0-9.]+ [KMG]?i?B +[0-9.]+ [KMG]?i?B +[0-9.]+ +[0-9.]+ +[0-9]+/[0-9]+ +[0-9]+/[0-9]+ +0 +[0-9.]+$" "$tmp/replay.out" ||
      fail "no result row for policy $p"
  done

  grep -q "3 step markers" "$tmp/record.out" || { cat "$tmp/record.out"; fail "no step markers recorded"; }
  "$loom" mem snapshot "$tmp/snap.json" --trace "$tmp/trace.json" --policy default > "$tmp/snap.out"
  grep -q "wrote $tmp/snap.json: [1-9][0-9]* segments" "$tmp/snap.out" || { cat "$tmp/snap.out"; fail "snapshot"; }
  cat "$tmp/snap.out"
  grep -q "top operators by live bytes at the end:" "$tmp/snap.out" || fail "no operator summary"
  grep -Eq "^ +[0-9.]+ [KMG]?i?B +[0-9]+ blocks  loom::" "$tmp/snap.out" || fail "no operator in the summary"
  grep -q "top operators by live bytes at the peak (after [0-9]* steps\?, trace event" "$tmp/snap.out" || fail "no peak summary"
  "$loom" mem viz "$tmp/snap.json" -o "$tmp/snap.html" > /dev/null
  html=$tmp/snap.html
  grep -q "<svg id=\"timeline\"" "$html" || fail "no timeline <svg"
  grep -q "<svg id=\"segments\"" "$html" || fail "no segments <svg"
  for s in allocated_bytes reserved_bytes requested_bytes num_device_mallocs fragmentation \
      largest_free_block "trace event"; do
    grep -q "$s" "$html" || fail "the page lacks '$s'"
  done
  if grep -Eiq "(src|href)=[\"']?(https?:)?//" "$html"; then fail "the page loads something from the network"; fi

  # A context with markup in it must come out inert.
  sed 's|trace event 0 (|</script><img src=x onerror=alert(1)>\\"\&<b>|' "$tmp/snap.json" > "$tmp/evil.json"
  grep -q '</script><img' "$tmp/evil.json" || fail "could not plant markup in the snapshot"
  "$loom" mem viz "$tmp/evil.json" -o "$tmp/evil.html" > /dev/null
  if grep -q '<img\|</script><\|<b>' "$tmp/evil.html"; then fail "unescaped markup in the page"; fi
  grep -q '\\u003c/script\\u003e\\u003cimg' "$tmp/evil.html" || fail "the planted context is missing"

  if render "$html"; then
    grep -q '<path class="area-allocated"' "$tmp/dom.html" || fail "no timeline drawn"
    grep -q '<rect class="block block-allocated"' "$tmp/dom.html" || fail "no segment blocks drawn"
    grep -q '<text[^>]*class="xlabel"[^>]*>training step</text>' "$tmp/dom.html" || fail "no step axis"
  else
    echo "chromium is not installed: skipped the rendered-page check"
  fi
  echo "mem tools OK"
  ;;
train)
  common=(--train-samples 2048 --batch 64 --threads 1 --workers 0)
  # A profiled run: its Chrome trace (gzip) carries the caching allocator's events.
  "$loom" train "${common[@]}" --max-steps 8 --no-progress --profile "$tmp/p.json.gz" --profile-steps 1,1,4 \
    > "$tmp/train.log" 2>&1 || [[ $? -eq 3 ]] || { cat "$tmp/train.log"; fail "loom train --profile"; }
  "$loom" mem replay "$tmp/p.json.gz" --policy all > "$tmp/replay_p.out" || { cat "$tmp/replay_p.out"; fail "replay of a profile"; }
  cat "$tmp/replay_p.out"
  grep -q "source: profiler trace $tmp/p.json.gz: [1-9][0-9]* allocator events" "$tmp/replay_p.out" || fail "profile source"
  grep -q "[1-9][0-9]* step markers" "$tmp/replay_p.out" || fail "no steps in the profile's trace"
  grep -Eq "^default +[0-9.]+ [KMG]?i?B" "$tmp/replay_p.out" || fail "no replay row for the profile"
  grep -q "allocations name their operator" "$tmp/replay_p.out" || fail "no operators in the profile's trace"
  # A profile without allocator events says how to get them.
  "$loom" train "${common[@]}" --max-steps 3 --no-progress --profile "$tmp/q.json" --profile-steps 0,0,2 \
    > "$tmp/train_q.log" 2>&1 || [[ $? -eq 3 ]] || { cat "$tmp/train_q.log"; fail "loom train --profile (2)"; }
  python3 - "$tmp/q.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") != "memory" and e.get("ph") != "C"]
json.dump(d, open(sys.argv[1], "w"))
PY
  expect_error "$loom" mem replay "$tmp/q.json"
  grep -q "DataError: \[alloc trace\] $tmp/q.json is a profiler trace without allocator events.*loom train --profile" "$tmp/err" ||
    fail "no DataError for a profile without allocator events"

  # A real run recorded through LOOM_MEM_RECORD by `loom mem record --train`.
  "$loom" mem record "$tmp/train.json" --train --steps 6 -- "${common[@]}" > "$tmp/rec.out" 2> "$tmp/rec.err" ||
    { cat "$tmp/rec.out" "$tmp/rec.err"; fail "loom mem record --train"; }
  cat "$tmp/rec.out"
  grep -q "^recorded $tmp/train.json" "$tmp/rec.out" || fail "record --train output"
  grep -q "source: loom mem record --train: loom train --max-steps 6" "$tmp/rec.out" || fail "record --train source"
  grep -q "  6 step markers" "$tmp/rec.out" || fail "record --train: not one marker per optimizer step"
  grep -q "allocations name their operator" "$tmp/rec.out" || fail "record --train: no operators"
  grep -q "stopped at step 6" "$tmp/rec.err" || { cat "$tmp/rec.err"; fail "the train output is not on stderr"; }
  "$loom" mem replay "$tmp/train.json" > "$tmp/replay_t.out" || fail "replay of the recorded run"
  grep -Eq "^default +[0-9.]+ [KMG]?i?B" "$tmp/replay_t.out" || { cat "$tmp/replay_t.out"; fail "no replay row"; }
  # The same setting works on any loom program directly.
  LOOM_MEM_RECORD="$tmp/direct-%p.json" "$loom" mem record "$tmp/inner.json" --steps 1 --hidden 32 > /dev/null
  ls "$tmp"/direct-[0-9]*.json > /dev/null 2>&1 || fail "LOOM_MEM_RECORD wrote no trace (with %p)"

  "$loom" mem snapshot "$tmp/snap.json" --trace "$tmp/train.json" > "$tmp/snap.out" || { cat "$tmp/snap.out"; fail "snapshot"; }
  cat "$tmp/snap.out"
  grep -Eq "^ +[0-9.]+ [KMG]?i?B +[0-9]+ blocks  loom::" "$tmp/snap.out" || fail "no operator holds memory"
  python3 - "$tmp/snap.json" <<'PY' || fail "the snapshot's blocks do not name operators"
import json, sys
s = json.load(open(sys.argv[1]))
peak = s["peak"]  # the end of a run has little live: its tensors are gone before the trace is written
assert peak["step"] >= 0 and peak["allocated"] == s["stats"]["allocated_bytes"]["peak"], peak["allocated"]
live = [b for seg in peak["segments"] for b in seg["blocks"] if b["allocated"]]
named = [b for b in live if b["op"].startswith("loom::")]
assert live and len(named) * 2 > len(live), (len(named), len(live))
assert any(e["kind"] == "step" for e in s["history"]), "no step events"
assert any(e["kind"] == "alloc" and e["op"].startswith("loom::") for e in s["history"]), "no ops in the history"
print("blocks live at the peak naming their operator:", len(named), "of", len(live), "; peak after", peak["step"], "steps")
PY
  "$loom" mem viz "$tmp/snap.json" -o "$tmp/snap.html" > /dev/null
  html=$tmp/snap.html
  grep -q '"unit":"training step"' "$html" || fail "the timeline is not in steps"
  grep -q '<svg id="segments-peak"' "$html" || fail "no map at the peak"
  grep -q '<button id="show-peak">at peak (after [0-9]* steps\?, ' "$html" || fail "no peak toggle"
  grep -q '<table class="stats ops" id="ops-end">' "$html" || fail "no operator table"
  grep -q '<table class="stats ops" id="ops-peak"' "$html" || fail "no operator table at the peak"
  if render "$html"; then
    grep -q '<text[^>]*class="xlabel"[^>]*>training step</text>' "$tmp/dom.html" || fail "no step axis drawn"
    python3 - "$tmp/dom.html" <<'PY' || fail "the map at the peak has no blocks"
import re, sys
dom = open(sys.argv[1]).read()
peak = re.search(r'<svg id="segments-peak".*?</svg>', dom, re.S)
assert peak and 'class="block block-allocated"' in peak.group(0)
PY
  else
    echo "chromium is not installed: skipped the rendered-page check"
  fi
  echo "mem train OK"
  ;;
corrupt_trace)
  head -c 200 "$tmp/trace.json" > "$tmp/truncated.json"
  expect_error "$loom" mem replay "$tmp/truncated.json" --policy all
  grep -q "loom mem replay: DataError: \[alloc trace\] $tmp/truncated.json: unexpected end of input.* at byte offset 200" \
    "$tmp/err" || fail "truncated trace"
  sed '0,/\["f", \([0-9]*\)\]/s//["f", 99999]/' "$tmp/trace.json" > "$tmp/unknown.json"
  expect_error "$loom" mem replay "$tmp/unknown.json"
  grep -q "DataError: \[alloc trace\] $tmp/unknown.json: event [0-9]*: free of id 99999 which was never allocated" \
    "$tmp/err" || fail "free of an unknown id"
  echo "corrupt traces OK"
  ;;
corrupt_snapshot)
  "$loom" mem snapshot "$tmp/snap.json" --trace "$tmp/trace.json" > /dev/null
  size=$(wc -c < "$tmp/snap.json")
  head -c $((size / 2)) "$tmp/snap.json" > "$tmp/truncated.json"
  expect_error "$loom" mem viz "$tmp/truncated.json" -o "$tmp/out.html"
  grep -q "loom mem viz: DataError: \[memory snapshot\] $tmp/truncated.json: .* at byte offset [0-9]* (file of $((size / 2)) bytes)" "$tmp/err" ||
    fail "truncated snapshot"
  [[ ! -e "$tmp/out.html" ]] || fail "a page was written for a truncated snapshot"
  expect_error "$loom" mem viz "$tmp/trace.json" -o "$tmp/out.html"
  grep -q "loom mem viz: DataError: .*$tmp/trace.json" "$tmp/err" || fail "a trace given as a snapshot"
  echo "corrupt snapshots OK"
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
