#!/usr/bin/env bash
# Brings the IOP stack up on loopback with the embedded default config and
# keeps it in the foreground; Ctrl-C stops everything it started.
#
#   hack/up.sh
#
# Starts, in order:
#   iop-mock-provider  127.0.0.1:8000  (OpenAI + Ollama shapes; the providers)
#   iop-edge           127.0.0.1:7070  (node socket; embedded default config)
#   iop-node           dials the Edge with the dev token `iop-dev-token`
# The Edge's OpenAI ingress (127.0.0.1:8080) is not built yet; the script says
# so. Logs go to .stack/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

MOCK_ADDR=${IOP_MOCK_ADDR:-127.0.0.1:8000}
NODE_SOCKET=127.0.0.1:7070 # from the embedded default config
mkdir -p .stack

command -v curl >/dev/null 2>&1 || { echo "hack/up.sh needs curl" >&2; exit 1; }

echo "==> building release binaries"
cargo build --release --locked --bin iop-mock-provider --bin iop-edge --bin iop-node

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

wait_for() {
  # wait_for NAME CHECK...: run CHECK until it succeeds, or fail after 10 s.
  local name=$1
  shift
  for _ in $(seq 1 100); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "error: $name did not come up; see .stack/$name.log" >&2
  exit 1
}

target/release/iop-mock-provider --listen "$MOCK_ADDR" >.stack/mock-provider.log 2>&1 &
pids+=($!)
wait_for mock-provider curl -fsS -o /dev/null "http://$MOCK_ADDR/health"

target/release/iop-edge >.stack/edge.log 2>&1 &
pids+=($!)
wait_for edge grep -q edge_started .stack/edge.log

IOP_NODE_TOKEN=iop-dev-token target/release/iop-node --edge "$NODE_SOCKET" --data-dir .stack/node-data \
  >.stack/node.log 2>&1 &
pids+=($!)
wait_for edge grep -q node_ready .stack/edge.log

cat <<MSG

started:
  mock provider   http://$MOCK_ADDR                (log: .stack/mock-provider.log)
  iop-edge        node socket $NODE_SOCKET        (log: .stack/edge.log)
  iop-node        node-1, linked and ready         (log: .stack/node.log)
not started (not built yet):
  OpenAI ingress  would listen on 127.0.0.1:8080; until then, call the provider directly:

  curl -N http://$MOCK_ADDR/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"mock-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}'
  curl -N http://$MOCK_ADDR/api/chat -d '{"model":"mock-ollama","messages":[{"role":"user","content":"hi"}]}'

watch the link: tail -f .stack/edge.log .stack/node.log
Ctrl-C stops everything.
MSG
wait
