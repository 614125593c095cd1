#!/usr/bin/env bash
# Brings the whole IOP stack up on loopback with the embedded default config
# and keeps it in the foreground. Ctrl-C stops everything it started; so does
# any one of the processes dying.
#
#   hack/up.sh
#
# Builds the release binaries, then starts:
#   iop-mock-provider  127.0.0.1:8000  the providers (OpenAI and Ollama shapes)
#   iop-edge           127.0.0.1:8080  OpenAI ingress (models mock-chat, mock-ollama)
#                      127.0.0.1:7070  node socket (embedded default config)
#   iop-node           dials the Edge with the dev token `iop-dev-token`;
#                      its run store is a fresh temp dir
# and waits until GET http://127.0.0.1:8080/readyz answers 200.
# Logs go to .stack/*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

MOCK_ADDR=127.0.0.1:8000   # the providers' base_url in the embedded default config
INGRESS=127.0.0.1:8080     # from the embedded default config
NODE_SOCKET=127.0.0.1:7070 # from the embedded default config
LOGS=.stack
bin=target/release

command -v curl >/dev/null 2>&1 || { echo "hack/up.sh needs curl (apt-get install curl)" >&2; exit 1; }

# The default config's ports are fixed: say so plainly when one is taken.
busy=()
for addr in "$MOCK_ADDR" "$INGRESS" "$NODE_SOCKET"; do
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then busy+=("$addr"); fi
done
if [ ${#busy[@]} -gt 0 ]; then
  echo "error: already in use on loopback: ${busy[*]}" >&2
  echo "  hack/up.sh needs 127.0.0.1:8000 (mock provider), :8080 (Edge ingress) and :7070 (node socket)." >&2
  echo "  Another hack/up.sh may be running; stop it, or whatever holds the port (ss -ltnp)." >&2
  exit 1
fi

echo "==> building release binaries (cargo build --release --workspace --bins)"
cargo build --release --workspace --bins --locked

mkdir -p "$LOGS"
data_dir=$(mktemp -d "${TMPDIR:-/tmp}/iop-node-data.XXXXXX")

PROCS_LOGS=$LOGS
PROCS_WAIT_S=15
# shellcheck source=hack/lib/procs.sh
. hack/lib/procs.sh
fail() { echo "error: $*" >&2; exit 1; }
stop() {
  local rc=$?
  trap - INT TERM EXIT
  if [ ${#procs_pids[@]} -gt 0 ]; then
    echo
    echo "==> stopping ${procs_names[*]}"
    procs_stop_all
  fi
  echo "the node's run store stays in $data_dir (iop-node runs --data-dir $data_dir)"
  exit "$rc"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

procs_start mock-provider "$bin/iop-mock-provider" --listen "$MOCK_ADDR"
procs_wait_for "the mock provider" curl -fsS -o /dev/null "http://$MOCK_ADDR/health"

procs_start edge "$bin/iop-edge"
procs_wait_for "the Edge" grep -q edge_started "$LOGS/edge.log"

procs_start node env IOP_NODE_TOKEN=iop-dev-token "$bin/iop-node" --edge "$NODE_SOCKET" --data-dir "$data_dir"
procs_wait_for "GET http://$INGRESS/readyz = 200" curl -fsS -o /dev/null "http://$INGRESS/readyz"

cat <<MSG

IOP is up (default config, loopback only):
  mock provider   http://$MOCK_ADDR             log: $LOGS/mock-provider.log
  iop-edge        http://$INGRESS (OpenAI)      log: $LOGS/edge.log
                  node socket $NODE_SOCKET
  iop-node        node-1, ready                 log: $LOGS/node.log
                  run store $data_dir

Try it (mock-chat: raw tunnel to an OpenAI-compatible provider;
        mock-ollama: normalized run on an Ollama provider):

  curl http://$INGRESS/v1/models

  curl http://$INGRESS/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"mock-chat","messages":[{"role":"user","content":"hi"}]}'
  curl -N http://$INGRESS/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"mock-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}'

  curl http://$INGRESS/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"mock-ollama","messages":[{"role":"user","content":"hi"}]}'
  curl -N http://$INGRESS/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"mock-ollama","stream":true,"messages":[{"role":"user","content":"hi"}]}'

  curl -N http://$INGRESS/v1/responses -H 'content-type: application/json' \\
    -d '{"model":"mock-ollama","stream":true,"input":"hi"}'

  curl http://$INGRESS/metrics
  $bin/iop-node runs --data-dir $data_dir      # the Node's run records

Ctrl-C stops everything.
MSG

# Stay up until Ctrl-C or until one of the processes exits.
died=
code=0
wait -n -p died "${procs_pids[@]}" || code=$?
for i in "${!procs_pids[@]}"; do
  if [ "${procs_pids[$i]}" = "$died" ]; then
    echo "error: ${procs_names[$i]} exited (status $code); last lines of $LOGS/${procs_names[$i]}.log:" >&2
    tail -n 20 "$LOGS/${procs_names[$i]}.log" >&2
  fi
done
exit 1
