#!/usr/bin/env bash
# Brings the IOP stack up on loopback and keeps it in the foreground; Ctrl-C
# stops everything it started.
#
#   hack/up.sh
#
# What runs today: the mock provider (iop-mock-provider) on 127.0.0.1:8000.
# The Edge (iop-edge, 127.0.0.1:8080) and the Node (iop-node) are not built
# yet; this script says so plainly and will start them, with the embedded
# default config, once they exist. Logs go to .stack/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

MOCK_ADDR=${IOP_MOCK_ADDR:-127.0.0.1:8000}
mkdir -p .stack

echo "==> building release binaries"
cargo build --release --locked --bin iop-mock-provider

pids=()
stop() {
  trap - INT TERM EXIT
  if [ ${#pids[@]} -gt 0 ]; then
    echo
    echo "==> stopping ${#pids[@]} process(es)"
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
}
trap stop INT TERM EXIT

wait_http() {
  # wait_http NAME URL: poll until URL answers 200, or fail after 10 s.
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$2" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "error: $1 did not come up at $2; see .stack/$1.log" >&2
  exit 1
}

target/release/iop-mock-provider --listen "$MOCK_ADDR" >.stack/mock-provider.log 2>&1 &
pids+=($!)
wait_http mock-provider "http://$MOCK_ADDR/health"

cat <<MSG

started:
  mock provider   http://$MOCK_ADDR   (log: .stack/mock-provider.log)
not started (not built yet):
  iop-edge        would listen on 127.0.0.1:8080 (clients) and 127.0.0.1:7070 (nodes)
  iop-node        would dial the Edge and serve the mock provider

try the provider directly:
  curl -N http://$MOCK_ADDR/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"mock-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}'
  curl -N http://$MOCK_ADDR/api/chat -d '{"model":"mock-ollama","messages":[{"role":"user","content":"hi"}]}'

Ctrl-C stops everything.
MSG
wait
