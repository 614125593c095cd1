#!/usr/bin/env bash
# The multi-host test bed: every "host" (the Edge, each Node, each Node's
# mock provider) is its own network namespace, all joined by veth pairs to
# one Linux bridge that lives in a switch namespace of its own. Nothing is
# added to the caller's namespace; the only addresses are the bed's private
# 10.77.0.0/24 inside these namespaces (plus each namespace's loopback).
#
#   hack/netns/bed.sh available           exit 0 when root and `ip netns` work
#   hack/netns/bed.sh up RUN NODES        make the bed (NODES Nodes, 1..89)
#   hack/netns/bed.sh down RUN            delete every namespace of RUN
#   hack/netns/bed.sh sweep               delete beds whose owner pid is gone
#   hack/netns/bed.sh ns RUN HOST         the namespace name of HOST
#   hack/netns/bed.sh addr HOST           the address of HOST
#   hack/netns/bed.sh partition RUN HOST  HOST's switch port down (both ways)
#   hack/netns/bed.sh heal RUN HOST       HOST's switch port up again
#   hack/netns/bed.sh netem RUN HOST ARGS tc netem ARGS on HOST's link, both
#                                         directions (e.g. `delay 20ms loss 1%`);
#                                         exit 3 when the kernel has no sch_netem
#   hack/netns/bed.sh shape RUN HOST RATE tc tbf: HOST's link limited to RATE
#                                         (e.g. `2mbit`), both directions; the
#                                         queue adds delay (up to 200 ms)
#   hack/netns/bed.sh has-netem           exit 0 when netem is available
#   hack/netns/bed.sh clear RUN HOST      remove HOST's netem or shaping
#
# HOST is `edge`, `nI` (Node I) or `pI` (Node I's provider); addresses are
# edge 10.77.0.1, nI 10.77.0.(10+I), pI 10.77.0.(100+I).
#
# RUN names a bed and must start with the pid of the process that owns it
# (e.g. `$$` or `$$x`): namespaces are `iop-RUN-HOST`, so parallel runs never
# clash, and `sweep` removes the beds of owners that died without cleaning
# up. Owners delete their bed with `down` from an EXIT trap (hack/netns/lib.sh).
set -euo pipefail

die() { printf 'bed.sh: %s\n' "$*" >&2; exit 1; }

ns_of() { printf 'iop-%s-%s' "$1" "$2"; }

addr_of() {
  case "$1" in
    edge) echo 10.77.0.1 ;;
    n[0-9]*) echo "10.77.0.$((10 + ${1#n}))" ;;
    p[0-9]*) echo "10.77.0.$((100 + ${1#p}))" ;;
    *) die "unknown host $1 (edge, nI or pI)" ;;
  esac
}

# add_host RUN HOST: the namespace, its loopback, and a veth to the bridge.
add_host() {
  local run=$1 host=$2 sw ns
  sw=$(ns_of "$run" sw)
  ns=$(ns_of "$run" "$host")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$sw" link add "v-$host" type veth peer name eth0 netns "$ns"
  ip -n "$sw" link set "v-$host" master br0 up
  ip -n "$ns" addr add "$(addr_of "$host")/24" dev eth0
  ip -n "$ns" link set eth0 up
}

bed_up() {
  local run=$1 nodes=$2 i
  [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 89 ] || die "NODES must be 1..89"
  local sw
  sw=$(ns_of "$run" sw)
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  add_host "$run" edge
  for i in $(seq 1 "$nodes"); do
    add_host "$run" "n$i"
    add_host "$run" "p$i"
  done
}

bed_down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^iop-$1-" || true); do
    ip netns delete "$ns" 2>/dev/null || true
  done
}

bed_sweep() {
  local ns owner
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^iop-[0-9]+' || true); do
    owner=$(sed -E 's/^iop-([0-9]+).*/\1/' <<<"$ns")
    kill -0 "$owner" 2>/dev/null || ip netns delete "$ns" 2>/dev/null || true
  done
}

available() {
  [ "$(id -u)" -eq 0 ] || { echo "not root"; return 1; }
  command -v ip >/dev/null || { echo "no ip(8)"; return 1; }
  command -v tc >/dev/null || { echo "no tc(8)"; return 1; }
  local probe="iop-$$-probe"
  ip netns add "$probe" 2>/dev/null || { echo "ip netns add fails here"; return 1; }
  local ok=0
  ip -n "$probe" link add vp0 type veth peer name vp1 2>/dev/null || ok=1
  ip -n "$probe" link add br0 type bridge 2>/dev/null || ok=2
  ip netns delete "$probe"
  case $ok in
    1) echo "no veth support"; return 1 ;;
    2) echo "no bridge support"; return 1 ;;
  esac
}

# has_netem: some kernels (this project's CI machine among them) ship
# without sch_netem; delay and loss then cannot be emulated, shaping can.
has_netem() {
  local probe="iop-$$-probe" ok=0
  ip netns add "$probe" 2>/dev/null || return 1
  ip -n "$probe" link add vp0 type veth peer name vp1 2>/dev/null || ok=1
  ip netns exec "$probe" tc qdisc add dev vp0 root netem delay 1ms 2>/dev/null || ok=1
  ip netns delete "$probe"
  return $ok
}

# qdisc RUN HOST QDISC ARGS...: QDISC on both ends of HOST's link.
qdisc() {
  local run=$1 host=$2
  shift 2
  ip netns exec "$(ns_of "$run" "$host")" tc qdisc replace dev eth0 root "$@"
  ip netns exec "$(ns_of "$run" sw)" tc qdisc replace dev "v-$host" root "$@"
}

cmd=${1:-}
shift || true
case "$cmd" in
  available) available ;;
  up) [ $# -eq 2 ] || die "up RUN NODES"; bed_up "$1" "$2" ;;
  down) [ $# -eq 1 ] || die "down RUN"; bed_down "$1" ;;
  sweep) bed_sweep ;;
  ns) [ $# -eq 2 ] || die "ns RUN HOST"; addr_of "$2" >/dev/null; ns_of "$1" "$2"; echo ;;
  addr) [ $# -eq 1 ] || die "addr HOST"; addr_of "$1" ;;
  partition) [ $# -eq 2 ] || die "partition RUN HOST"; ip -n "$(ns_of "$1" sw)" link set "v-$2" down ;;
  heal) [ $# -eq 2 ] || die "heal RUN HOST"; ip -n "$(ns_of "$1" sw)" link set "v-$2" up ;;
  netem)
    [ $# -ge 3 ] || die "netem RUN HOST ARGS..."
    has_netem || { echo "bed.sh: this kernel has no sch_netem (no delay/loss emulation)" >&2; exit 3; }
    run=$1 host=$2
    shift 2
    qdisc "$run" "$host" netem "$@"
    ;;
  shape) [ $# -eq 3 ] || die "shape RUN HOST RATE"; qdisc "$1" "$2" tbf rate "$3" burst 32kbit latency 200ms ;;
  has-netem) has_netem ;;
  clear)
    [ $# -eq 2 ] || die "clear RUN HOST"
    ip netns exec "$(ns_of "$1" "$2")" tc qdisc del dev eth0 root 2>/dev/null || true
    ip netns exec "$(ns_of "$1" sw)" tc qdisc del dev "v-$2" root 2>/dev/null || true
    ;;
  *) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
