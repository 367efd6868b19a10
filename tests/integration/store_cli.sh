#!/usr/bin/env bash
# `loom store`: start a server on a free port, check it with `loom store --check` (with the right
# and a wrong token), stop it with SIGTERM and read its stats line.
# usage: store_cli.sh LOOM_BINARY
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
pid=
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$loom" store --port 0 --token t0ken > "$tmp/out" 2> "$tmp/err" &
pid=$!
for _ in $(seq 1 200); do
  grep -q "listening on" "$tmp/out" && break
  sleep 0.05
done
line=$(head -n 1 "$tmp/out")
echo "$line"
port=${line##*:}
[[ "$port" =~ ^[0-9]+$ ]] || { echo "FAIL: no port in '$line'"; exit 1; }

"$loom" store --check "127.0.0.1:$port" --token t0ken --timeout 5
if "$loom" store --check "127.0.0.1:$port" --token wrong --timeout 5 2> "$tmp/check_err"; then
  echo "FAIL: a wrong token was accepted"; exit 1
fi
cat "$tmp/check_err"

kill -TERM "$pid"
wait "$pid"
pid=
tail -n 2 "$tmp/out"
cat "$tmp/err"
