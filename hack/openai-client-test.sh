#!/usr/bin/env bash
# The official `openai` Python client against a real Edge + Node + mock
# provider: perf/py/test_openai_client.py (pytest).
#
#   hack/openai-client-test.sh              run every test
#   hack/openai-client-test.sh -k tunnel    extra arguments go to pytest
#
# Starts its OWN stack on kernel-chosen loopback ports (so it runs next to
# hack/up.sh or anything else): iop-mock-provider on 127.0.0.1:0, iop-edge
# with a temp edge.yaml derived from the embedded default config (listeners
# on port 0, provider base_url pointed at the mock), and one iop-node with
# the dev token. Everything it started is stopped on exit.
#
# Binaries: target/debug (hack/test.sh builds them); built when missing, or
# always with IOP_REBUILD=1; IOP_BIN_DIR=DIR uses the ones in DIR instead.
# Python: a venv in target/py-venv with the pinned perf/py/requirements.txt,
# created once and reused while the pins match. Needs curl and python3 >= 3.9
# (python3-venv is apt-installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

say() { printf 'openai-client-test: %s\n' "$*"; }
fail() { printf 'openai-client-test: FAIL: %s\n' "$*" >&2; exit 1; }

command -v curl >/dev/null 2>&1 || fail "needs curl"
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1 || ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  # Debian splits venv/ensurepip out of python3.
  say "installing python3 and python3-venv"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq python3 python3-venv >/dev/null
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || fail "needs python 3.9 or newer"

# --- binaries ---------------------------------------------------------------
target_dir=${CARGO_TARGET_DIR:-$root/target}
bin_dir=${IOP_BIN_DIR:-$target_dir/debug}
bins=(iop-mock-provider iop-edge iop-node)
missing=0
for b in "${bins[@]}"; do [ -x "$bin_dir/$b" ] || missing=1; done
if [ -n "${IOP_BIN_DIR:-}" ]; then
  [ "$missing" = 0 ] || fail "IOP_BIN_DIR=$IOP_BIN_DIR lacks one of: ${bins[*]}"
  say "using the binaries in $bin_dir"
elif [ "$missing" = 1 ] || [ -n "${IOP_REBUILD:-}" ]; then
  say "building the debug binaries"
  cargo build --workspace --bins --locked
else
  say "using the binaries in $bin_dir (IOP_REBUILD=1 rebuilds them first)"
fi

# --- python venv --------------------------------------------------------------
venv=$target_dir/py-venv
reqs=$root/perf/py/requirements.txt
if ! cmp -s "$reqs" "$venv/.requirements.txt" 2>/dev/null || [ ! -x "$venv/bin/python" ]; then
  say "creating $venv (pip install -r perf/py/requirements.txt)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
  cp "$reqs" "$venv/.requirements.txt"
fi

# --- the stack ----------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/iop-openai-test.XXXXXX")
PROCS_LOGS=$work
PROCS_WAIT_S=15
# shellcheck source=hack/lib/procs.sh
. "$root/hack/lib/procs.sh"
pytest_pid=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$pytest_pid" ]; then
    kill "$pytest_pid" 2>/dev/null || true
    wait "$pytest_pid" 2>/dev/null || true
  fi
  procs_stop_all
  if [ "$rc" -ne 0 ]; then procs_tail_logs 30; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. mock provider on a kernel-chosen port; it prints the bound address.
procs_start mock-provider "$bin_dir/iop-mock-provider" --listen 127.0.0.1:0
mock_line() { grep -q '^iop-mock-provider listening on ' "$work/mock-provider.log"; }
procs_wait_for "the mock provider's address" mock_line
mock=$(sed -n 's/^iop-mock-provider listening on //p' "$work/mock-provider.log" | head -n 1)

# 2. the Edge with the default config, re-pointed: listeners on port 0,
#    providers at the mock. Substitutions are checked, so a changed default
#    config fails loudly here instead of testing the wrong thing.
default_config=$root/edge-proxy/src/config/default.yaml
for s in 'ingress: 127.0.0.1:8080' 'nodes: 127.0.0.1:7070' 'base_url: http://127.0.0.1:8000'; do
  grep -qF "$s" "$default_config" || fail "default config has no \`$s\`: update this script"
done
sed -e 's#ingress: 127\.0\.0\.1:8080#ingress: 127.0.0.1:0#' \
  -e 's#nodes: 127\.0\.0\.1:7070#nodes: 127.0.0.1:0#' \
  -e "s#base_url: http://127\\.0\\.0\\.1:8000#base_url: http://$mock#" \
  "$default_config" >"$work/edge.yaml"
procs_start edge "$bin_dir/iop-edge" --config "$work/edge.yaml" --log-format json
procs_wait_for "the edge's edge_started line" grep -q '"edge_started"' "$work/edge.log"
started=$(grep -m 1 '"edge_started"' "$work/edge.log")
ingress=$(sed -n 's/.*"ingress":"\([^"]*\)".*/\1/p' <<<"$started")
node_socket=$(sed -n 's/.*"node_socket":"\([^"]*\)".*/\1/p' <<<"$started")
[ -n "$ingress" ] && [ -n "$node_socket" ] || fail "no ingress/node_socket in: $started"

# 3. one node with the dev token.
procs_start node env IOP_NODE_TOKEN=iop-dev-token "$bin_dir/iop-node" --edge "$node_socket" \
  --data-dir "$work/node-data" --log-format json
procs_wait_for "GET /readyz = 200" curl -fsS -o /dev/null "http://$ingress/readyz"
say "stack up: mock http://$mock, edge ingress http://$ingress, node socket $node_socket"

# --- the tests ----------------------------------------------------------------
# In the background + `wait`, so a signal to this script runs its cleanup at
# once instead of after pytest.
IOP_BASE_URL="http://$ingress/v1" IOP_MOCK_URL="http://$mock" PYTHONDONTWRITEBYTECODE=1 \
  timeout 300 "$venv/bin/python" -m pytest -p no:cacheprovider -q -rxXfE \
  "$root/perf/py/test_openai_client.py" "$@" &
pytest_pid=$!
status=0
wait "$pytest_pid" || status=$?
pytest_pid=
# A crash during the tests is a failure even when every test passed.
procs_alive
[ "$status" -eq 0 ] || fail "pytest exited with status $status"
say "passed"
