#!/usr/bin/env bash
# Separate hosts emulated on one machine: each host a network namespace with its own address,
# joined through veth pairs to one bridge, each host's link shaped with tc.
#
#   scripts/emulated-hosts.sh up N [--rate 10gbit] [--delay 50us]
#   scripts/emulated-hosts.sh exec K CMD...   run CMD in host K (0-based), LOOM_SOCKET_ADDR set
#   scripts/emulated-hosts.sh addr K          host K's address
#   scripts/emulated-hosts.sh check           exit 0 when namespaces can be made here, else say why
#   scripts/emulated-hosts.sh down            remove every namespace, veth and the bridge
#
# Host K is namespace loom-host-K at 10.213.0.(K+1)/24 behind veth lh-K on bridge loom-br0. Ranks in
# different namespaces see different network namespaces, so loom names them different hosts
# (loom::dist::host_identity) and connects them over TCP; ranks of one namespace share memory.
# Shaping: --rate is a token bucket (tbf) on both directions of each host's link; --delay needs the
# kernel's netem qdisc, and where the kernel has none the script says so and goes on without delay.
# Needs root (or CAP_NET_ADMIN) and the ip and tc commands (iproute2).
#
# A two-host job with two ranks a host:
#   scripts/emulated-hosts.sh up 2 --rate 10gbit
#   for k in 0 1; do scripts/emulated-hosts.sh exec $k build/loom launch --nproc 2 --nnodes 2 \
#       --node-rank $k --master-addr 10.213.0.1 --master-port 29611 -- CMD & done; wait
#   scripts/emulated-hosts.sh down
set -euo pipefail

BRIDGE=loom-br0
PREFIX=10.213.0

die() { echo "emulated-hosts: $*" >&2; exit 1; }

check() {
  [ "$(id -u)" = 0 ] || { echo "emulated-hosts: needs root (network namespaces, veth, tc)"; return 1; }
  command -v ip >/dev/null || { echo "emulated-hosts: the ip command (iproute2) is missing"; return 1; }
  command -v tc >/dev/null || { echo "emulated-hosts: the tc command (iproute2) is missing"; return 1; }
  local probe="loom-probe-$$"
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "emulated-hosts: the kernel refused a network namespace: $err"; return 1
  fi
  ip netns del "$probe"
  if ! err=$(ip link add "lp-$$a" type veth peer name "lp-$$b" 2>&1); then
    echo "emulated-hosts: the kernel refused a veth pair: $err"; return 1
  fi
  ip link del "lp-$$a" 2>/dev/null || true
  return 0
}

shape() {  # shape DEV NETNS(or "") RATE DELAY
  local dev=$1 ns=$2 rate=$3 delay=$4
  local run=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  if [ -n "$delay" ]; then
    if "${run[@]}" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" 2>/dev/null; then
      [ -n "$rate" ] && "${run[@]}" tc qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" \
        burst 256kb latency 50ms
      return 0
    fi
    echo "emulated-hosts: $dev: delay $delay not applied (this kernel has no netem qdisc)" >&2
  fi
  if [ -n "$rate" ]; then
    "${run[@]}" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
  fi
}

up() {
  local n=${1:-}; shift || true
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: expected a host count (1..200), got '${n}'"
  local rate="" delay=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) rate=${2:?--rate needs a value like 10gbit}; shift 2 ;;
      --delay) delay=${2:?--delay needs a value like 50us}; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  check >&2 || exit 2
  down >/dev/null 2>&1 || true
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  for ((k = 0; k < n; k++)); do
    local ns="loom-host-$k"
    ip netns add "$ns"
    ip link add "lh-$k" type veth peer name "eth0-$k"
    ip link set "eth0-$k" netns "$ns"
    ip netns exec "$ns" ip link set "eth0-$k" name eth0
    ip netns exec "$ns" ip addr add "$PREFIX.$((k + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    ip link set "lh-$k" master "$BRIDGE"
    ip link set "lh-$k" up
    shape eth0 "$ns" "$rate" "$delay"   # what host k sends
    shape "lh-$k" "" "$rate" ""         # what host k receives
  done
  echo "emulated-hosts: $n host(s) up at $PREFIX.1..$PREFIX.$n${rate:+, $rate a link}${delay:+, delay $delay}"
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '/^loom-host-/{print $1}'); do ip netns del "$ns"; done
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^lh-' || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

cmd=${1:-}; shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  check) check ;;
  addr) echo "$PREFIX.$((${1:?addr K} + 1))" ;;
  exec)
    k=${1:?exec K CMD...}; shift
    ip netns exec "loom-host-$k" env LOOM_SOCKET_ADDR="$PREFIX.$((k + 1))" "$@" ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
     [ -z "$cmd" ] || die "unknown command '$cmd' (expected up, exec, addr, check or down)" ;;
esac
