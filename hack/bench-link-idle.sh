#!/usr/bin/env bash
# Idle-link benchmark: what 10,000 connected, idle nodes cost the Edge.
#
# Builds the release `iop-edge` and `iop-link-load`, writes an edge.yaml with
# one record per simulated node, and for each I/O driver starts
# `iop-edge --workers 2` on a free loopback port, then runs
# `iop-link-load run --edge-pid <edge>`: it connects the nodes (register +
# ready, at most CONCURRENCY handshakes in flight), keeps them idle through two
# 30 s heartbeat periods while sampling the Edge's /proc entry (VmRSS, VmData,
# utime+stime, per-thread schedstat), then makes every node send one
# WARM_BYTES tunnel frame and samples the Edge's RSS once more. Then, per
# driver, `iop-link-load heap` runs the Edge in-process under a counting
# allocator and breaks its live heap per node down by allocation size.
#
# Output: target/bench-link-idle/ (override with OUT=): per driver the Edge
# log, the load tool's summary (.txt) and full report (.json), the heap
# breakdown (heap-<driver>.md), plus machine.txt and summary.md. About 100 s
# per driver; not part of hack/test.sh.
#
# Env: NODES (10000), DRIVERS ("uring epoll"), WORKERS (2), CONCURRENCY (256),
#      WARM_BYTES (60000; 0 skips the warm phase), HEAP (1; 0 skips the heap
#      breakdown), OUT.
set -euo pipefail

cd "$(dirname "$0")/.."
nodes="${NODES:-10000}"
drivers="${DRIVERS:-uring epoll}"
workers="${WORKERS:-2}"
concurrency="${CONCURRENCY:-256}"
warm_bytes="${WARM_BYTES:-60000}"
heap="${HEAP:-1}"
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
out="${OUT:-$target_dir/bench-link-idle}"
bin="$target_dir/release"

fail() { echo "bench-link-idle: FAIL: $*" >&2; exit 1; }
say() { echo "bench-link-idle: $*" >&2; }

# Each process holds one socket per node (the Edge: plus listeners and the
# ring; the load tool: plus its runtime).
need=$((nodes + 256))
if (( $(ulimit -n) < need )); then
    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fi
(( $(ulimit -n) >= need )) || fail "open files limit $(ulimit -n) (hard $(ulimit -Hn)) < $need: raise it"

say "building release binaries"
cargo build --quiet --release -p edge-proxy -p perf --bin iop-edge --bin iop-link-load

mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (tree has uncommitted changes)')"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "mem: $(free -m | awk '/^Mem:/ {print $2 " MiB"}')"
    echo "open files limit: $(ulimit -n)"
    echo "io_uring_disabled: $(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo n/a)"
    echo "loadavg before: $(cat /proc/loadavg)"
} >"$out/machine.txt"

"$bin/iop-link-load" gen-config --nodes "$nodes" --nodes-addr 127.0.0.1:0 --out "$out/edge.yaml"

edge_pid=""
cleanup() {
    if [[ -n "$edge_pid" ]]; then kill "$edge_pid" 2>/dev/null || true; wait "$edge_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

status=0
for driver in $drivers; do
    log="$out/edge-$driver.log"
    say "[$driver] starting iop-edge --workers $workers"
    IOP_IO_DRIVER="$driver" "$bin/iop-edge" --config "$out/edge.yaml" --workers "$workers" \
        --log-format json 2>"$log" &
    edge_pid=$!
    started=""
    # Loading and validating a 10k-node edge.yaml takes a few seconds.
    for _ in $(seq 1 1200); do
        started="$(grep -m1 '"edge_started"' "$log" || true)"
        [[ -n "$started" ]] && break
        kill -0 "$edge_pid" 2>/dev/null || break
        sleep 0.05
    done
    if [[ -z "$started" ]]; then
        if [[ "$driver" == uring ]] && grep -q "io_uring is refused" "$log"; then
            say "[$driver] skipped: io_uring is refused on this machine"
            edge_pid=""
            continue
        fi
        fail "[$driver] iop-edge did not start: $(tail -5 "$log")"
    fi
    grep -q "\"driver\":\"$driver\"" <<<"$started" || fail "[$driver] edge runs another driver: $started"
    addr="$(sed -n 's/.*"node_socket":"\([^"]*\)".*/\1/p' <<<"$started")"
    say "[$driver] edge pid $edge_pid, node socket $addr"

    if ! "$bin/iop-link-load" run --edge "$addr" --nodes "$nodes" --concurrency "$concurrency" \
        --edge-pid "$edge_pid" --label "$driver" --warm-bytes "$warm_bytes" \
        --json "$out/link-idle-$driver.json" | tee "$out/link-idle-$driver.txt"; then
        say "[$driver] not every node connected and stayed connected"
        status=1
    fi
    kill "$edge_pid" 2>/dev/null || true
    wait "$edge_pid" 2>/dev/null || true
    edge_pid=""

    if [[ "$heap" == 1 ]]; then
        say "[$driver] live heap per node (in-process edge, counting allocator)"
        "$bin/iop-link-load" heap --nodes "$nodes" --edge-driver "$driver" --workers "$workers" \
            --warm-bytes "$warm_bytes" >"$out/heap-$driver.md" 2>"$out/heap-$driver.log" \
            || { say "[$driver] heap breakdown failed: $(tail -3 "$out/heap-$driver.log")"; status=1; }
        cat "$out/heap-$driver.md"
    fi
done
echo "loadavg after: $(cat /proc/loadavg)" >>"$out/machine.txt"

# One table over every driver that ran.
{
    echo "| | $(for d in $drivers; do [[ -f "$out/link-idle-$d.json" ]] && printf '%s | ' "$d"; done)"
    echo "|---|$(for d in $drivers; do [[ -f "$out/link-idle-$d.json" ]] && printf -- '---|'; done)"
    row() {
        local name="$1" filter="$2"
        printf '| %s |' "$name"
        for d in $drivers; do
            [[ -f "$out/link-idle-$d.json" ]] && printf ' %s |' "$(jq -r "$filter" "$out/link-idle-$d.json")"
        done
        echo
    }
    row "nodes ready / failed" '"\(.connect.ready) / \(.connect.failed)"'
    row "connect + register + ready, all nodes (s)" '.connect.elapsed_ms / 1000 | . * 100 | round / 100'
    row "handshake p50 / p99 / max (ms)" '"\(.connect.handshake_us.p50 / 1000 | round) / \(.connect.handshake_us.p99 / 1000 | round) / \(.connect.handshake_us.max / 1000 | round)"'
    row "Edge CPU while connecting (µs per node)" '.edge.connect_cpu_us_per_node | round'
    row "Edge RSS before / ready / idle (MiB)" '"\(.edge.rss_before_kib / 1024 | . * 10 | round / 10) / \(.edge.rss_ready_kib / 1024 | . * 10 | round / 10) / \(.edge.rss_idle_kib / 1024 | . * 10 | round / 10)"'
    row "**Edge RSS per idle node (bytes)**" '.edge.rss_per_node_bytes | round'
    row "Edge VmData per node (bytes reserved, touched or not)" '.edge.data_per_node_bytes | round'
    row "Edge RSS after one ${warm_bytes} B frame per node (MiB)" '.edge.rss_warm_kib / 1024 | . * 10 | round / 10'
    row "Edge RSS per node after that frame (bytes)" '.edge.warm_rss_per_node_bytes | round'
    row "Edge CPU, no node (% of a core) / wakeups per s" '"\(.edge.cpu_empty_pct | . * 100 | round / 100) / \(.edge.wakeups_empty_per_sec | round)"'
    row "Edge CPU, 10k idle, no ping due (%)" '.edge.quiet.cpu_pct // "n/a" | if type == "number" then (. * 100 | round / 100) else . end'
    row "Edge CPU per heartbeat (µs)" '.edge.cpu_us_per_heartbeat // "n/a" | if type == "number" then (. * 10 | round / 10) else . end'
    row "Edge wakeups per heartbeat" '.edge.wakeups_per_heartbeat // "n/a" | if type == "number" then (. * 100 | round / 100) else . end'
    row "**Edge CPU, steady idle over 60 s incl. heartbeats (% of a core)**" '.edge.steady.cpu_pct | . * 100 | round / 100'
    row "pings in the steady window" '.edge.steady.pings'
    row "load tool RSS idle (MiB) / per node (bytes)" '"\(.tool.rss_idle_kib / 1024 | . * 10 | round / 10) / \(.tool.rss_per_node_bytes | round)"'
    row "load tool CPU, steady (% of a core)" '.tool.steady_cpu_pct | . * 100 | round / 100'
    row "machine busy, steady (% of a core, all processes)" '.system.steady_busy_pct | . * 10 | round / 10'
    row "kernel slab growth when ready (MiB, both ends, machine-wide)" '((.system.slab_ready_kib // 0) - (.system.slab_before_kib // 0)) / 1024 | . * 10 | round / 10'
    row "closed by the Edge / io errors" '"\(.idle.closed_by_edge) / \(.idle.io_errors)"'
} >"$out/summary.md"
cat "$out/summary.md"
say "results in $out"
exit "$status"
