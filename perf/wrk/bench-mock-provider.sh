#!/usr/bin/env bash
# Benchmarks iop-mock-provider on this machine: small JSON req/s (wrk, c16 and
# c1), small SSE streams req/s, Ollama JSON req/s, and 64 KiB-event SSE
# throughput (curl). Prints one line per measurement; see
# bench-results/mock-provider.md for recorded numbers.
#
# Usage: perf/wrk/bench-mock-provider.sh [REPS] [DURATION] [WORKER-MODES...]
#   defaults: 3 reps, 10s, modes "--workers 1" "--workers 2"
# Before each run it waits (up to 2 min) for the machine to be >= 90% idle,
# because other work on a shared box skews numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."

reps="${1:-3}"
dur="${2:-10s}"
shift $(( $# > 2 ? 2 : $# ))
modes=("$@")
[[ ${#modes[@]} -gt 0 ]] || modes=("--workers 1" "--workers 2")

command -v wrk >/dev/null || { echo "needs wrk (apt-get install -y wrk)" >&2; exit 1; }
cargo build --quiet --release -p perf --bin iop-mock-provider
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
bin="$target_dir/release/iop-mock-provider"

wait_idle() {
    local a b
    for _ in $(seq 1 120); do
        read -r _ u n s i w q sq st _ < /proc/stat; a=$((u+n+s+i+w+q+sq+st)); b=$i
        sleep 1
        read -r _ u n s i w q sq st _ < /proc/stat
        if (( 100 * (i - b) / ((u+n+s+i+w+q+sq+st) - a) >= 90 )); then return 0; fi
    done
    echo "# warning: machine never became idle" >&2
}

port=18123
url="http://127.0.0.1:$port"
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true' EXIT

# CPU ticks (utime + stime) the server has used so far.
server_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }

wrk_line() { # label, wrk args...
    local label="$1"; shift
    wait_idle
    local out t0 t1 reqs
    t0="$(server_ticks)"
    out="$(wrk "$@")"
    t1="$(server_ticks)"
    reqs="$(awk '/requests in/ {print $1}' <<<"$out")"
    # Server CPU per request: a noise-robust cost figure on a shared box.
    printf '%s\t%s req/s\tp50 %s\tp99 %s\tserver %s us CPU/req\tload %s\n' "$label" \
        "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
        "$(awk '$1=="50%" {print $2}' <<<"$out")" \
        "$(awk '$1=="99%" {print $2}' <<<"$out")" \
        "$(awk -v t="$((t1 - t0))" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz * 1e6 / r}')" \
        "$(cut -d' ' -f1 /proc/loadavg)"
}

echo "# $(date -u +%FT%TZ) nproc=$(nproc) kernel=$(uname -r) cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for mode in "${modes[@]}"; do
    # shellcheck disable=SC2086
    "$bin" $mode --listen "127.0.0.1:$port" >/dev/null &
    pid=$!
    sleep 0.3
    echo "## iop-mock-provider $mode"
    for r in $(seq 1 "$reps"); do
        wrk_line "json c16 #$r" -t1 -c16 -d"$dur" --latency -s perf/wrk/chat.lua "$url/v1/chat/completions"
        wrk_line "json c1 #$r" -t1 -c1 -d"$dur" --latency -s perf/wrk/chat.lua "$url/v1/chat/completions"
        wrk_line "sse16 c16 #$r" -t1 -c16 -d"$dur" --latency -s perf/wrk/chat-stream.lua "$url/v1/chat/completions?tokens=16"
        wrk_line "ollama c16 #$r" -t1 -c16 -d"$dur" --latency -s perf/wrk/ollama-chat.lua "$url/api/chat"
        wait_idle
        curl -sN -o /dev/null -w "sse 64KiB x20000 #$r\t%{speed_download} B/s\t%{size_download} B\t%{time_total} s\n" \
            "$url/v1/chat/completions?tokens=20000&event-bytes=65536" \
            -d '{"model":"m","messages":[],"stream":true}'
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done
