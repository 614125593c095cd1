#!/usr/bin/env bash
# Normalized-run benchmark: events/s through the Edge and a real Node.
#
# Builds the release `iop-run-load` and `iop-node`, then per I/O driver runs
# `iop-run-load --driver D --adapter both --json`: the mock provider and the
# Edge (EDGE_WORKERS monoio workers) in the tool's process, `iop-node` as a
# child with IOP_IO_DRIVER=D, CONCURRENCY runs in flight for DURATION s per
# adapter (openai_compat, then ollama; 1 s warm-up each), every run
# streaming TOKENS tokens with no delay, one token per provider event.
# Prints a markdown table (also in $OUT/summary.md); per driver the tool's
# summary (.txt) and report (.json) land in $OUT. About 25 s per driver.
#
# Env: DRIVERS ("uring epoll"), DURATION (10), CONCURRENCY (16),
#      TOKENS (1000), EDGE_WORKERS (1), OUT (target/bench-runs).
set -euo pipefail

cd "$(dirname "$0")/.."
drivers="${DRIVERS:-uring epoll}"
duration="${DURATION:-10}"
concurrency="${CONCURRENCY:-16}"
tokens="${TOKENS:-1000}"
edge_workers="${EDGE_WORKERS:-1}"
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
out="${OUT:-$target_dir/bench-runs}"
bin="$target_dir/release"

say() { echo "bench-runs: $*" >&2; }
command -v jq >/dev/null || { echo "bench-runs: FAIL: jq is needed" >&2; exit 1; }

say "building release binaries"
cargo build --quiet --release -p perf -p node-runner --bins

mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (tree has uncommitted changes)')"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "loadavg before: $(cat /proc/loadavg)"
} >"$out/machine.txt"
cat "$out/machine.txt" >&2

status=0
for driver in $drivers; do
    say "[$driver] $concurrency runs in flight, $tokens tokens each, ${duration} s per adapter"
    if ! "$bin/iop-run-load" --driver "$driver" --adapter both --json \
        --duration-s "$duration" --concurrency "$concurrency" --tokens "$tokens" \
        --edge-workers "$edge_workers" >"$out/$driver.json" 2>"$out/$driver.txt"; then
        say "[$driver] FAILED (see $out/$driver.txt)"
        status=1
    fi
    cat "$out/$driver.txt" >&2
done

{
    echo "| driver | adapter | runs/s | **events/s** | tokens/s | first delta p50 / p99 (ms) | run p50 / p99 (ms) | CPU % node | CPU % edge | CPU % mock | CPU % submit side | CPU µs/event node / edge | node RSS (MiB) | failed |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for driver in $drivers; do
        [[ -s "$out/$driver.json" ]] || continue
        jq -r '.driver as $d | .adapters[] |
            def ms: . / 1000 | (. * 10 | round) / 10;
            "| \($d) | \(.adapter) | \(.runs_per_s) | **\(.events_per_s)** | \(.tokens_per_s) | \(.first_delta_us.p50 | ms) / \(.first_delta_us.p99 | ms) | \(.run_us.p50 | ms) / \(.run_us.p99 | ms) | \(.cpu_pct.node) | \(.cpu_pct.edge) | \(.cpu_pct.mock) | \(.cpu_pct.driver) | \(.cpu_us_per_event.node) / \(.cpu_us_per_event.edge) | \(.node_rss_kib / 1024 | (. * 10 | round) / 10) | \(.runs_failed) |"' \
            "$out/$driver.json"
    done
    echo
    echo "loadavg after: $(cat /proc/loadavg)"
} >"$out/summary.md"
cat "$out/summary.md"
exit "$status"
