#!/usr/bin/env bash
# Runs the fault scenarios (perf/tests/chaos_netns.rs) on a fresh
# network-namespace test bed (hack/netns/bed.sh): makes the bed, runs the
# test binary inside the bed's `edge` namespace one test at a time, and
# deletes the bed on exit, whatever happened (trap).
#
#   hack/netns/chaos.sh [TEST_FILTER]
#
# Env: IOP_CHAOS_HEAVY=1 (10k idle streams instead of 1k),
# IOP_CHAOS_IDLE_STREAMS=N, IOP_CHAOS_HERD=N (nodes in the reconnect herd,
# default 100). Needs root and `ip netns`: otherwise it says why and exits 0
# (skipped). Builds the debug binaries and the test first.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! why=$(hack/netns/bed.sh available); then
  echo "SKIPPED: chaos scenarios need root and ip netns ($why)"
  exit 0
fi

cargo build --quiet --workspace --bins --locked
test_bin=$(cargo test --quiet -p perf --test chaos_netns --locked --no-run --message-format=json \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "chaos_netns" and m.get("executable"):
        print(m["executable"])')
[ -x "$test_bin" ] || { echo "chaos.sh: no test binary" >&2; exit 1; }

run="$$c"
hack/netns/bed.sh sweep
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  hack/netns/bed.sh down "$run"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
hack/netns/bed.sh up "$run" 2
# Thousands of streams need thousands of descriptors (clients, Edge, Node).
ulimit -n 262144 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

echo "==> chaos scenarios on netns bed $run (Edge 10.77.0.1, nodes 10.77.0.11-12, providers 10.77.0.101-102)"
IOP_NETNS_RUN=$run IOP_NETNS_NODES=2 ip netns exec "iop-$run-edge" \
  "$test_bin" --test-threads=1 --nocapture ${1:+"$1"}
