#!/usr/bin/env bash
# `loom mem`: the tools end to end, and their errors for damaged files.
#   flow              record -> replay --policy all -> snapshot -> viz; checks every output, that
#                     the page is self-contained and escapes what it shows, and (when chromium is
#                     installed) that its script draws the charts. Prints "mem tools OK".
#   corrupt_trace     truncated and inconsistent traces: exit status 1 and the DataError.
#   corrupt_snapshot  truncated and foreign snapshots: exit status 1 and the DataError.
# usage: mem_tools.sh LOOM_BINARY [flow|corrupt_trace|corrupt_snapshot]
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

"$loom" mem record "$tmp/trace.json" --steps 3 --seed 1 > "$tmp/record.out"
grep -q "^recorded $tmp/trace.json" "$tmp/record.out" || { cat "$tmp/record.out"; fail "record output"; }
head -c 80 "$tmp/trace.json" | grep -q '"format": "loom-alloc-trace", "version": 1' || fail "trace header"

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

  "$loom" mem snapshot "$tmp/snap.json" --trace "$tmp/trace.json" --policy default > "$tmp/snap.out"
  grep -q "wrote $tmp/snap.json: [1-9][0-9]* segments" "$tmp/snap.out" || { cat "$tmp/snap.out"; fail "snapshot"; }
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

  chrome=$(command -v chromium || command -v chromium-browser || true)
  if [[ -n "$chrome" ]]; then
    sandbox=()
    [[ $(id -u) -eq 0 ]] && sandbox=(--no-sandbox)
    timeout 60 "$chrome" --headless --disable-gpu "${sandbox[@]}" --dump-dom "file://$html" \
      > "$tmp/dom.html" 2> /dev/null || true
    grep -q 'data-rendered="yes"' "$tmp/dom.html" || fail "the page's script did not finish in $chrome"
    grep -q '<path class="area-allocated"' "$tmp/dom.html" || fail "no timeline drawn"
    grep -q '<rect class="block block-allocated"' "$tmp/dom.html" || fail "no segment blocks drawn"
    echo "checked the rendered page in $chrome"
  else
    echo "chromium is not installed: skipped the rendered-page check"
  fi
  echo "mem tools OK"
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
