#!/usr/bin/env bash
# IOP next to what users would pick instead: the same mock provider and the
# same k6 scenario through each path, one after the other, in one run.
#
#   hack/peers.sh [SCENARIO...]      default: stream qps nonstream
#
# Scenarios as in hack/loadtest.sh (stream, bulk: S1's 64 KiB events, nonstream, qps, and open: oha,
# not k6, open loop at $RATE/s (default 5000) over $CONNECTIONS (default 64)
# keep-alive connections after a $WARMUP (default 3s) warm-up, latency from
# each request's scheduled start; its table adds each path's p99 minus the
# direct path's — k6 itself cannot offer 5,000/s on this box). Paths:
#   direct    k6 → mock provider (the physical limit here)
#   nginx     one-hop reverse proxy (Debian package; 1 worker, proxy_buffering
#             off, HTTP/1.1 upstream keepalive)
#   haproxy   one-hop reverse proxy (Debian package; 1 thread, http-no-delay)
#   rathole   two-process TCP tunnel, server + client: the same topology as
#             Edge + Node (crates.io; cargo install into target/peers/rathole)
#   litellm   LiteLLM proxy (PyPI, pinned; a venv in target/peers/litellm-venv)
#             pointed at the mock as an OpenAI-compatible provider
#   iop       Edge + Node, IOP_IO_DRIVER=uring and =epoll, for each model in
#             $IOP_MODELS (default "mock-chat mock-ollama": the raw provider
#             tunnel, then a normalized run where the Edge translates Ollama
#             NDJSON to OpenAI SSE); path names iop-DRIVER-MODEL. A model that
#             does not stream through the Node is skipped with a note.
# A peer that cannot be installed is skipped with a message (and a line in
# the result file), never a failure. Everything listens on 127.0.0.1 and is
# stopped on exit.
#
# Env: DURATION (k6/oha duration per path, default 10s), PEERS (default
# "direct nginx haproxy rathole litellm iop"), IOP_MODELS (IOP_MODEL: one), VUS, RATE,
# CONCURRENCY, WARMUP and CONNECTIONS (open), PROMPT_BYTES / PROMPT_TEXT /
# TOOLS (the request's shape, k6 scenarios: as hack/loadtest.sh), IOP_PROFILE / IOP_BIN_DIR / IOP_NO_BUILD / IOP_WORKERS /
# IOP_EDGE_ARGS / IOP_NODE_ARGS / IOP_EDGE_YAML (as hack/loadtest.sh; IOP_WORKERS=1 matches nginx's
# and haproxy's one worker), LINK_TLS=1 (the two-process paths' link under
# TLS, as across machines: IOP's Edge–Node link under mTLS, rathole's
# tunnel under its TLS transport; certificates made with openssl for the
# run; the one-hop paths are unchanged), PROVIDER_TLS=1 (the mock serves
# https:// with a certificate made with openssl for the run, and every path
# reaches it over TLS: direct and rathole carry k6's own TLS to the mock,
# end to end; nginx, haproxy, LiteLLM and IOP's Node open TLS to it, each
# on its kept-alive upstream connections; SSL_CERT_FILE names that CA for
# k6, oha and LiteLLM, and curl's probe is given it by name), STEAL_WARN (default 5: a path
# whose run the hypervisor took this % of the VM's CPU from is named in the
# notes; every row shows its figure), IOP_B_BIN_DIR / IOP_B_EDGE_ARGS /
# IOP_B_NODE_ARGS / IOP_B_EDGE_YAML (any one set: an A/B in the same run —
# iopb-DRIVER-MODEL paths run IOP again right after its own paths with
# these in place of IOP_BIN_DIR and the rest, each unset one as A's; their
# rows' "IOP ÷ row" columns are then A ÷ B), ROUNDS (default 1: every path runs
# this many times, the rounds interleaved — every path once, then again —
# so a slow phase of the host falls on all paths alike; each row shows the
# path's median round by the scenario's figure (MiB/s, tokens/s, QPS; for
# open the added p99), chosen among the rounds under STEAL_WARN when there
# are any, and a column lists every round's figure; an odd count has a
# true median).
# FLAMEGRAPH=1 (ROUNDS=1 only): perf records each path's own processes
# through its run and writes bench-results/flamegraphs/peers-SC-PATH-PROC.svg
# (and .folded.gz), and the report to bench-results/flamegraphs/
# peers-SCENARIOS.md instead of peers.md, with a table of the profiles
# (hack/lib/flame.sh; FLAME_HZ, FLAME_STACK).
# Writes bench-results/peers.md (one table per scenario, IOP's ratio to each
# path, and the CPU µs per request of the path's processes, the mock and k6,
# read from /proc around each k6 run), the k6 summaries to
# bench-results/k6/peers-*.json and oha's (open) to
# bench-results/oha/peers-open-*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_NAME=peers
# shellcheck source=hack/lib/bench.sh
. hack/lib/bench.sh

scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(stream qps nonstream)
PEERS=${PEERS:-"direct nginx haproxy rathole litellm iop"}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-1}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "peers: ROUNDS must be a whole number ≥ 1 (got '$ROUNDS')" >&2; exit 2; }
LITELLM_VERSION=1.106.12 # newer [proxy] extras need packages the registry lacks; 1.107.0 was reported compromised
RATHOLE_VERSION=0.5.0
command_line="hack/peers.sh $*"
[ "$ROUNDS" -eq 1 ] || command_line="ROUNDS=$ROUNDS $command_line"
[ "${PROVIDER_TLS:-}" != 1 ] || command_line="PROVIDER_TLS=1 $command_line"
[ "${LINK_TLS:-}" != 1 ] || command_line="LINK_TLS=1 $command_line"

bench_init
for sc in "${scenarios[@]}"; do
  if [ "$sc" = open ]; then bench_oha; else bench_k6; fi
done
case " ${scenarios[*]} " in
  *" open "*) BENCH_LOADGEN="${K6:+k6 $K6_VERSION; }oha $OHA_VERSION for open" ;;
esac
bench_bins
flame=${FLAMEGRAPH:-}
if [ -n "$flame" ]; then
  [ "$ROUNDS" -eq 1 ] || fail "FLAMEGRAPH=1 profiles one round: unset ROUNDS"
  # shellcheck source=hack/lib/flame.sh
  . hack/lib/flame.sh
  flame_init
  out_dir=$BENCH_WORK/results
else
  out_dir=$bench_root/bench-results
fi
mkdir -p "$out_dir/k6" "$out_dir/oha"
peers_dir=$bench_target/peers
mkdir -p "$peers_dir"
skipped=()

apt_install() {
  # apt_install CMD PACKAGE: 0 when CMD is there (installing PACKAGE if need
  # be); on a failed install, the peer is listed as skipped.
  bench_apt_install "$1" "$2" && return 0
  skipped+=("$2: $BENCH_APT_WHY")
  say "skipping $2: apt-get install failed"
  return 1
}

# --- installs (each may fail: that peer is skipped) -------------------------------
have=()
for p in $PEERS; do
  case "$p" in
    direct | iop) have+=("$p") ;;
    nginx) apt_install nginx nginx && have+=(nginx) ;;
    haproxy) apt_install haproxy haproxy && have+=(haproxy) ;;
    rathole)
      rathole=$peers_dir/rathole/bin/rathole
      free_kb=$(df -Pk "$bench_target" | awk 'NR==2{print $4}')
      if [ ! -x "$rathole" ] && [ "${free_kb:-0}" -lt 2097152 ]; then
        echo "needs ~2 GiB free for the build; $((free_kb / 1024)) MiB free on the disk of $bench_target" >"$BENCH_WORK/rathole-install.log"
      elif [ ! -x "$rathole" ]; then
        # Not --locked: rathole 0.5.0's lockfile pins a `time` that current
        # rustc rejects. Takes ~4 minutes on 2 cores.
        say "installing rathole $RATHOLE_VERSION (cargo install into $peers_dir/rathole; a few minutes)"
        cargo install --quiet rathole --version "$RATHOLE_VERSION" --root "$peers_dir/rathole" \
          --target-dir "$peers_dir/rathole-build" >"$BENCH_WORK/rathole-install.log" 2>&1 || true
      fi
      if [ -x "$rathole" ]; then have+=(rathole); else
        skipped+=("rathole: cargo install rathole $RATHOLE_VERSION failed ($(tail -n 1 "$BENCH_WORK/rathole-install.log"))")
        say "skipping rathole: cargo install failed"
      fi
      ;;
    litellm)
      lvenv=$peers_dir/litellm-venv
      if ! "$lvenv/bin/python" -c "import litellm, sys; from importlib.metadata import version; sys.exit(version('litellm') != '$LITELLM_VERSION')" 2>/dev/null; then
        say "installing LiteLLM $LITELLM_VERSION (pip install 'litellm[proxy]==$LITELLM_VERSION' into $lvenv)"
        rm -rf "$lvenv"
        { python3 -m venv "$lvenv" && "$lvenv/bin/pip" install --quiet --disable-pip-version-check "litellm[proxy]==$LITELLM_VERSION"; } \
          >"$BENCH_WORK/litellm-install.log" 2>&1 || true
      fi
      if [ -x "$lvenv/bin/litellm" ]; then have+=(litellm); else
        skipped+=("litellm: pip install 'litellm[proxy]==$LITELLM_VERSION' failed ($(tail -n 1 "$BENCH_WORK/litellm-install.log" 2>/dev/null))")
        say "skipping litellm: pip install failed"
      fi
      ;;
    *) fail "unknown peer $p" ;;
  esac
done

# --- one path at a time --------------------------------------------------------------
# start_path PATH: starts PATH in front of $MOCK_ADDR; sets PATH_URL, PATH_MODEL,
# PATH_KEY and PATH_DESC. Returns 1 (with a message in skipped) when it
# does not come up.
wait_http() {
  # wait_http URL SECONDS [KEY]: until a chat request through URL answers 200.
  local url=$1 n=$(($2 * 10)) key=${3:-} _ ca=()
  # curl reads no SSL_CERT_FILE: the CA of PROVIDER_TLS=1 by name.
  [ -z "${SSL_CERT_FILE:-}" ] || ca=(--cacert "$SSL_CERT_FILE")
  for _ in $(seq 1 "$n"); do
    if curl -fsS -m 5 -o /dev/null "${ca[@]}" "$url/v1/chat/completions" -H 'content-type: application/json' \
      ${key:+-H "authorization: Bearer $key"} -d '{"model":"mock-model","messages":[{"role":"user","content":"hi"}]}' 2>/dev/null; then
      return 0
    fi
    # a peer that exits is skipped, not a failure of the whole run
    local i
    for i in "${!procs_pids[@]}"; do
      kill -0 "${procs_pids[$i]}" 2>/dev/null ||
        { PATH_WHY="${procs_names[$i]} exited: $(tail -n 1 "$BENCH_WORK/${procs_names[$i]}.log")"; return 1; }
    done
    sleep 0.1
  done
  PATH_WHY="did not answer a chat request through it within $2 s"
  return 1
}

start_path() {
  local p=$1 port
  PATH_MODEL="mock-model"
  PATH_KEY=
  port=$(bench_free_port)
  PATH_URL=http://127.0.0.1:$port
  case "$p" in
    direct)
      PATH_URL=$up_scheme://$MOCK_ADDR
      PATH_DESC="$loadgen → mock${up_tls:+ (TLS to the mock)}"
      ;;
    nginx)
      mkdir -p "$BENCH_WORK/nginx"
      cat >"$BENCH_WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $BENCH_WORK/nginx/nginx.pid;
error_log $BENCH_WORK/nginx/error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 16000; }
http {
  access_log off;
  client_body_temp_path $BENCH_WORK/nginx/body;
  proxy_temp_path $BENCH_WORK/nginx/proxy;
  upstream mock { server $MOCK_ADDR; keepalive 512; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass $up_scheme://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 120s;
    }
  }
}
CONF
      procs_start nginx "$(command -v nginx || echo /usr/sbin/nginx)" -p "$BENCH_WORK/nginx" -c "$BENCH_WORK/nginx/nginx.conf"
      PATH_DESC="nginx $(nginx -v 2>&1 | sed 's#.*/##'), 1 worker${up_tls:+, https upstream (sessions reused, certificate not verified, the default of nginx)}"
      ;;
    haproxy)
      cat >"$BENCH_WORK/haproxy.cfg" <<CONF
global
  maxconn 9000
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  option http-no-delay
  http-reuse always
frontend f
  bind 127.0.0.1:$port
  default_backend b
backend b
  server mock $MOCK_ADDR maxconn 9000${up_tls:+ ssl verify none}
CONF
      procs_start haproxy "$(command -v haproxy || echo /usr/sbin/haproxy)" -db -f "$BENCH_WORK/haproxy.cfg"
      PATH_DESC="haproxy $(haproxy -v 2>&1 | head -n 1 | awk '{print $3}'), 1 thread${up_tls:+, https upstream (sessions reused, verify none)}"
      ;;
    rathole)
      local ctrl
      ctrl=$(bench_free_port)
      local server_tls="" client_tls="" desc_tls=""
      if [ "${LINK_TLS:-}" = 1 ]; then
        # rathole's TLS transport (native-tls: the system's OpenSSL).
        bench_link_pki
        server_tls=$(printf '[server.transport]\ntype = "tls"\n[server.transport.tls]\npkcs12 = "%s"\npkcs12_password = "bench"' "$BENCH_WORK/pki/edge.p12")
        client_tls=$(printf '[client.transport]\ntype = "tls"\n[client.transport.tls]\ntrusted_root = "%s"\nhostname = "%s"' "$BENCH_WORK/pki/ca.pem" "$BENCH_LINK_NAME")
        desc_tls=", TLS transport"
      fi
      cat >"$BENCH_WORK/rathole-server.toml" <<CONF
[server]
bind_addr = "127.0.0.1:$ctrl"
$server_tls
[server.services.mock]
token = "bench"
bind_addr = "127.0.0.1:$port"
CONF
      cat >"$BENCH_WORK/rathole-client.toml" <<CONF
[client]
remote_addr = "127.0.0.1:$ctrl"
$client_tls
[client.services.mock]
token = "bench"
local_addr = "$MOCK_ADDR"
CONF
      procs_start rathole-server "$rathole" --server "$BENCH_WORK/rathole-server.toml"
      procs_start rathole-client "$rathole" --client "$BENCH_WORK/rathole-client.toml"
      PATH_URL=$up_scheme://127.0.0.1:$port
      PATH_DESC="rathole $RATHOLE_VERSION, server + client$desc_tls${up_tls:+; the TLS of k6 carried to the mock end to end}"
      ;;
    litellm)
      cat >"$BENCH_WORK/litellm.yaml" <<CONF
model_list:
  - model_name: mock-model
    litellm_params:
      model: openai/mock-model
      api_base: $up_scheme://$MOCK_ADDR/v1
      api_key: sk-none
CONF
      local verify=()
      [ -z "$up_tls" ] || verify=(SSL_VERIFY="$SSL_CERT_FILE")
      procs_start litellm env "${verify[@]}" LITELLM_MASTER_KEY=sk-bench LITELLM_LOCAL_MODEL_COST_MAP=True \
        LITELLM_TELEMETRY=False "$lvenv/bin/litellm" --config "$BENCH_WORK/litellm.yaml" \
        --host 127.0.0.1 --port "$port"
      PATH_KEY=sk-bench
      PATH_DESC="LiteLLM proxy $LITELLM_VERSION, 1 worker${up_tls:+, https upstream (the CA trusted)}"
      ;;
    iop-* | iopb-*)
      local rest=${p#iop*-}
      local driver=${rest%%-*} model=${rest#*-}
      if [[ $p == iopb-* ]]; then
        # The B build for an A/B: its binaries, flags and config, for this
        # call only (bash restores a function call's assignments; each
        # unset one = A's).
        BIN_DIR=${IOP_B_BIN_DIR:-$BIN_DIR} IOP_EDGE_ARGS=${IOP_B_EDGE_ARGS-${IOP_EDGE_ARGS-}} \
          IOP_NODE_ARGS=${IOP_B_NODE_ARGS-${IOP_NODE_ARGS-}} IOP_EDGE_YAML=${IOP_B_EDGE_YAML-${IOP_EDGE_YAML-}} \
          bench_iop "$driver" "$MOCK_ADDR"
      else
        bench_iop "$driver" "$MOCK_ADDR"
      fi
      PATH_URL=http://$IOP_INGRESS
      PATH_MODEL=$model
      PATH_DESC="Edge + Node, $driver, $model${iop_kind[$model]:+ ${iop_kind[$model]}}${LINK_TLS:+, mTLS link}${up_tls:+, https to the mock (the CA trusted)}"
      if [[ $p == iopb-* ]]; then
        PATH_DESC="B: $PATH_DESC; $b_desc"
      elif [ -n "$b_desc" ]; then
        PATH_DESC="A: $PATH_DESC"
      fi
      return 0
      ;;
  esac
  if ! wait_http "$PATH_URL" 60 "$PATH_KEY"; then
    skipped+=("$p: $PATH_WHY")
    return 1
  fi
}

# Which IOP models: each one is checked once (one streaming request) before
# its first path; one that does not stream is skipped with a note.
read -r -a iop_models <<<"${IOP_MODELS:-${IOP_MODEL:-mock-chat mock-ollama}}"
# An A/B of two IOP builds or settings in the same run: any IOP_B_* set
# adds iopb-DRIVER-MODEL paths next to IOP's, started with it.
b_desc=
if [ -n "${IOP_B_BIN_DIR+x}${IOP_B_EDGE_ARGS+x}${IOP_B_NODE_ARGS+x}${IOP_B_EDGE_YAML+x}" ]; then
  for b in iop-edge iop-node; do
    [ -x "${IOP_B_BIN_DIR:-$BIN_DIR}/$b" ] || fail "IOP_B_BIN_DIR: no ${IOP_B_BIN_DIR:-$BIN_DIR}/$b"
  done
  b_desc="binaries in ${IOP_B_BIN_DIR:-$BIN_DIR}"
  [ -z "${IOP_B_EDGE_ARGS+x}" ] || b_desc+=", Edge args \`${IOP_B_EDGE_ARGS}\`"
  [ -z "${IOP_B_NODE_ARGS+x}" ] || b_desc+=", Node args \`${IOP_B_NODE_ARGS}\`"
  [ -z "${IOP_B_EDGE_YAML+x}" ] || b_desc+=", Edge config \`${IOP_B_EDGE_YAML//$'\n'/ ⏎ }\`"
fi
declare -A iop_kind=([mock-chat]="(raw tunnel)" [mock-ollama]="(normalized)")
declare -A iop_ok
paths=()
for p in "${have[@]}"; do
  if [ "$p" = iop ]; then
    for m in "${iop_models[@]}"; do
      paths+=("iop-uring-$m" "iop-epoll-$m")
      [ -z "$b_desc" ] || paths+=("iopb-uring-$m" "iopb-epoll-$m")
    done
  else paths+=("$p"); fi
done

# path_procs PATH: the procs_start names of PATH's own processes (each is
# read with its descendants: nginx's worker, LiteLLM's children); none for
# direct.
path_procs() {
  case "$1" in
    nginx | haproxy | litellm) echo "$1" ;;
    rathole) echo rathole-server rathole-client ;;
    iop-* | iopb-*) echo edge node ;;
  esac
}

# cpu_figures PATH BEFORE AFTER REQUESTS: "proxy / mock / k6|all" in CPU µs
# per request from two readings "PROXY_PART... MOCK K6" (clock ticks); a
# two-process proxy shows its parts too: "57 (31 + 26)".
cpu_figures() {
  local b a n=$4 i proxy=0 parts=() sum=0 cell
  read -r -a b <<<"$2"
  read -r -a a <<<"$3"
  local last=$((${#b[@]} - 2))
  for ((i = 0; i < last; i++)); do
    parts+=("$(bench_cpu_per_request "${b[i]}" "${a[i]}" "$n")")
    proxy=$((proxy + a[i] - b[i]))
  done
  case "${#parts[@]}" in
    0) cell=- ;;
    1) cell=${parts[0]} ;;
    *) cell="$(bench_cpu_per_request 0 "$proxy" "$n") ($(printf '%s + ' "${parts[@]}" | sed 's/ + $//'))" ;;
  esac
  for ((i = 0; i < ${#b[@]}; i++)); do sum=$((sum + a[i] - b[i])); done
  echo "$cell / $(bench_cpu_per_request "${b[last]}" "${a[last]}" "$n") / $(bench_cpu_per_request "${b[last + 1]}" "${a[last + 1]}" "$n")|$(bench_cpu_per_request 0 "$sum" "$n")"
}

# peers_scenario NAME: bench_scenario, loadgen (k6, or oha for open) and
# the request's shape in k6_env (bench_request_env); fails for a scenario
# peers do not run.
peers_scenario() {
  if ! bench_scenario "$1" || [ "$script" = long-streams.js ]; then
    fail "scenario $1: use stream, bulk, qps, nonstream or open"
  fi
  loadgen=k6
  [ "$script" != oha ] || loadgen=oha
  bench_request_env
}

# peers_oha_headline OHA_JSON OFFERED: oha's summary as the `headline` the
# report reads from a k6 summary (QPS, p50/p99/p99.9 ms, error rate, and
# dropped = offered − sent: the requests oha never sent by the deadline).
peers_oha_headline() {
  local j=$1 sent bad
  sent=$(bench_oha_figure "$j" requests)
  bad=$(($(bench_oha_figure "$j" non200) + $(bench_oha_figure "$j" errors)))
  jq -n --argjson qps "$(bench_oha_figure "$j" qps)" --argjson p50 "$(bench_oha_figure "$j" 50)" \
    --argjson p99 "$(bench_oha_figure "$j" 99)" --argjson p999 "$(bench_oha_figure "$j" 99.9)" \
    --argjson sent "${sent:-0}" --argjson bad "$bad" --argjson offered "$2" \
    '{headline: {"QPS": $qps, "p50 ms": $p50, "p99 ms": $p99, "p99.9 ms": $p999,
      "dropped": ([$offered - $sent, 0] | max),
      "error rate": (if $sent > 0 then $bad / $sent else 0 end)}}'
}

# peers_key: the figure a scenario's rounds are ranked by (a headline key),
# and whether more of it is better: sets KEY_NAME, KEY_LABEL (its column's
# name), KEY_HIGHER (1 or 0) and KEY_DIGITS. For open, the rank is the added
# p99 (the row's p99 − the same round's direct p99).
peers_key() {
  KEY_HIGHER=1 KEY_DIGITS=0
  case "$script" in
    oha) KEY_NAME='p99 ms' KEY_LABEL='added p99 ms' KEY_HIGHER=0 KEY_DIGITS=3 ;;
    chat-stream.js)
      KEY_NAME='tokens/s (all streams)' KEY_LABEL=tokens/s
      [ "$sc" != bulk ] || KEY_NAME='MiB/s (all streams)' KEY_LABEL=MiB/s KEY_DIGITS=1
      ;;
    *) KEY_NAME=QPS KEY_LABEL=QPS ;;
  esac
}

# measure_path SC PATH ROUND: one run of the load generator through PATH
# (already started); its summary and CPU figures go to fig[SC,PATH,ROUND,*].
measure_path() {
  local sc=$1 p=$2 round=$3 tag=$1-$2-r$3 json oha_json oha_body rc=0
  local cpu_pids=() cpu_before=() cpu_after=() cpu_k6_after host_before requests cpu n pid
  local oha_headers=()
  json=$BENCH_WORK/peers-$tag.json
  if [ "$script" = oha ]; then
    json=$BENCH_WORK/peers-$tag.headline.json
    oha_json=$BENCH_WORK/oha-peers-$tag.json
    oha_body=$BENCH_WORK/peers-$tag.body.json
    bench_oha_body "$oha_body" "$PATH_MODEL"
    oha_headers=(${PATH_KEY:+"authorization: Bearer $PATH_KEY"})
    bench_oha_run "$BENCH_WORK/peers-$tag.warmup.json" "$PATH_URL/v1/chat/completions" "$oha_body" \
      "$rate" "$warmup" "$connections" "${oha_headers[@]}" || skipped+=("$sc/$p: the warm-up's oha exited with status $?")
    fig[$sc,$p,$round,raw]=$oha_json
  fi
  # With FLAMEGRAPH=1, perf records the path's own processes (with their
  # workers) through the run.
  local flame_specs=()
  if [ -n "$flame" ]; then
    for n in $(path_procs "$p"); do
      flame_specs+=("$n=$(bench_pid_tree "$(procs_pid "$n")" | paste -sd,)")
    done
    [ ${#flame_specs[@]} -eq 0 ] || flame_start "peers-$sc-$p" "${flame_specs[@]}"
  fi
  # CPU ticks of the path's processes (with descendants) and the mock,
  # then k6's: the ticks of this shell's waited-for children (k6 is the
  # only one that ends during the run).
  for n in $(path_procs "$p") mock; do cpu_pids+=("$(procs_pid "$n")"); done
  for pid in "${cpu_pids[@]}"; do cpu_before+=("$(bench_cpu_ticks_tree "$pid")"); done
  cpu_before+=("$(bench_reaped_ticks $$)")
  host_before=$(bench_host_ticks)
  if [ "$script" = oha ]; then
    bench_oha_run "$oha_json" "$PATH_URL/v1/chat/completions" "$oha_body" "$rate" "$DURATION" \
      "$connections" "${oha_headers[@]}" || rc=$?
  else
    bench_k6_run "$script" "$json" "${k6_env[@]}" -e BASE_URL="$PATH_URL" -e MODEL="$PATH_MODEL" \
      -e API_KEY="$PATH_KEY" -e LABEL="$p" || rc=$?
  fi
  cpu_k6_after=$(bench_reaped_ticks $$)
  bench_steal_since "$host_before"
  fig[$sc,$p,$round,steal]=$BENCH_STEAL
  [ -z "$BENCH_STEAL_NOTE" ] || skipped+=("$sc/$p${round_tag:-}: $BENCH_STEAL_NOTE")
  for pid in "${cpu_pids[@]}"; do cpu_after+=("$(bench_cpu_ticks_tree "$pid")"); done
  cpu_after+=("$cpu_k6_after")
  if [ "$script" = oha ]; then
    requests=$(bench_oha_figure "$oha_json" requests 2>/dev/null || echo 0)
    peers_oha_headline "$oha_json" "$(bench_offered "$rate" "$DURATION")" >"$json" ||
      skipped+=("$sc/$p${round_tag:-}: no oha summary")
  else
    requests=$(jq -r '.metrics.http_reqs.values.count // 0' "$json" 2>/dev/null || echo 0)
  fi
  cpu=$(cpu_figures "$p" "${cpu_before[*]}" "${cpu_after[*]}" "${requests:-0}")
  fig[$sc,$p,$round,cpu]=${cpu%|*}
  fig[$sc,$p,$round,cpu_all]=${cpu#*|}
  [ "$rc" -eq 0 ] || skipped+=("$sc/$p${round_tag:-}: $loadgen exited with status $rc (k6's 99: a threshold failed: some requests failed; see the error rate)")
  fig[$sc,$p,$round,json]=$json
  # After the readings (the recorders are this shell's children: reaped
  # before cpu_k6_after, their CPU would count as k6's).
  [ ${#flame_specs[@]} -eq 0 ] || flame_end "$sc | $p"
}

# round_figure SC PATH ROUND: sets ROUND_FIG to the figure ROUND of PATH
# is ranked by (see peers_key; "" when the round has none) and ROUND_ADDED
# to 1 when it is an added p99 ("+0.123": open, with the same round's
# direct p99), else 0 (for open, then the plain p99). Call it directly, not
# in $(...).
round_figure() {
  local d
  ROUND_ADDED=0
  ROUND_FIG=$(bench_headline "${fig[$1,$2,$3,json]:-/dev/null}" "$KEY_NAME" 2>/dev/null || true)
  if [ "$script" = oha ] && [ "$2" != direct ] && [ -n "$ROUND_FIG" ]; then
    d=$(bench_headline "${fig[$1,direct,$3,json]:-/dev/null}" "$KEY_NAME" 2>/dev/null || true)
    if [ -n "$d" ]; then
      ROUND_FIG=$(bench_added_ms "$ROUND_FIG" "$d")
      ROUND_ADDED=1
    fi
  fi
}

# choose_round SC PATH: the round whose figures PATH's row shows, its
# median by round_figure (the worse of the middle two for an even count),
# among the rounds the host stole less than STEAL_WARN % from when there
# are any. Copies fig[SC,PATH,ROUND,*] to fig[SC,PATH,*], its summary to
# bench-results/, and lists every round's figure in fig[SC,PATH,rounds].
choose_round() {
  local sc=$1 p=$2 r quiet=() all=() pick list=() cell order=-g key
  local -A figure=() added=() high=()
  for ((r = 1; r <= ROUNDS; r++)); do
    round_figure "$sc" "$p" "$r"
    [ -n "$ROUND_FIG" ] || continue
    figure[$r]=$ROUND_FIG added[$r]=$ROUND_ADDED
    all+=("$ROUND_FIG $r")
    if bench_steal_high "${fig[$sc,$p,$r,steal]:-}"; then high[$r]=1; else quiet+=("$ROUND_FIG $r"); fi
  done
  [ ${#all[@]} -gt 0 ] || return 0
  [ ${#quiet[@]} -gt 0 ] || quiet=("${all[@]}")
  # Sorted worst first, the middle element is the median or the worse of
  # the middle two.
  [ "$KEY_HIGHER" = 1 ] || order=-gr
  pick=$(printf '%s\n' "${quiet[@]}" | sort $order -k1,1 | sed -n "$(((${#quiet[@]} + 1) / 2))p" | awk '{print $2}')
  for key in json cpu cpu_all steal raw; do fig[$sc,$p,$key]=${fig[$sc,$p,$pick,$key]:-}; done
  fig[$sc,$p,added]=-
  [ "${added[$pick]}" != 1 ] || fig[$sc,$p,added]=${figure[$pick]}
  if [ "$script" = oha ]; then
    cp "${fig[$sc,$p,raw]}" "$out_dir/oha/peers-$sc-$p.json"
  else
    cp "${fig[$sc,$p,json]}" "$out_dir/k6/peers-$sc-$p.json"
  fi
  for ((r = 1; r <= ROUNDS; r++)); do
    if [ -z "${figure[$r]:-}" ]; then
      cell=-
    elif [ "${added[$r]}" = 1 ]; then
      cell=${figure[$r]}
    else
      cell=$(printf "%.${KEY_DIGITS}f" "${figure[$r]}")
      [ "$script" != oha ] || cell="p99 $cell"
    fi
    [ "$r" != "$pick" ] || cell="**$cell**"
    [ -z "${high[$r]:-}" ] || cell+=" (steal ${fig[$sc,$p,$r,steal]} %)"
    list+=("$cell")
  done
  fig[$sc,$p,rounds]=$(printf '%s · ' "${list[@]}" | sed 's/ · $//')
}

# With PROVIDER_TLS=1 the mock speaks https only (bench_mock), and every
# path's client of it trusts the run's CA: IOP's Node by --provider-ca-file
# (bench_iop), k6, oha and LiteLLM by SSL_CERT_FILE (wait_http's curl by
# --cacert).
up_scheme=http up_tls=
if [ "${PROVIDER_TLS:-}" = 1 ]; then
  bench_provider_pki
  export SSL_CERT_FILE=$BENCH_WORK/provider-pki/ca.pem
  up_scheme=https up_tls=1
fi

declare -A fig
for sc in "${scenarios[@]}"; do
  peers_scenario "$sc"
  peers_key
  k6_env+=(-e DURATION="$DURATION")
  for ((round = 1; round <= ROUNDS; round++)); do
    round_tag=
    [ "$ROUNDS" -eq 1 ] || round_tag=" (round $round of $ROUNDS)"
    for p in "${paths[@]}"; do
      bench_stop
      bench_mock mock "${mock_flags[@]}"
      if [[ $p == iop-* || $p == iopb-* ]]; then
        m=${p#iop*-*-}
        if [ -z "${iop_ok[$m]:-}" ]; then
          bench_iop uring "$MOCK_ADDR"
          if bench_model_ok "http://$IOP_INGRESS" "$m"; then iop_ok[$m]=1; else
            iop_ok[$m]=0
            skipped+=("iop $m: $BENCH_MODEL_WHY — not run")
          fi
          bench_stop
          bench_mock mock "${mock_flags[@]}"
        fi
        [ "${iop_ok[$m]}" = 1 ] || continue
      fi
      start_path "$p" || continue
      say "$sc through $p ($PATH_DESC)$round_tag: $PATH_URL"
      fig[$sc,$p,desc]=$PATH_DESC
      measure_path "$sc" "$p" "$round"
    done
  done
  for p in "${paths[@]}"; do choose_round "$sc" "$p"; done
done
bench_stop

# --- the report ----------------------------------------------------------------------
ratio() {
  # ratio A B [INVERT]: A / B (or B / A with INVERT) with 2 decimals, "-" if unknown.
  python3 -c '
import sys
a, b, inv = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
try:
    a, b = float(a), float(b)
    r = (b / a) if inv else (a / b)
    print(f"{r:.2f}×")
except Exception:
    print("-")' "$1" "$2" "${3:-0}"
}
# A path whose error rate is over this share is not compared: its figures
# count failed requests (LiteLLM fails every bulk stream, for one).
RATIO_ERROR_MAX=0.01
over_error_max() {
  # over_error_max JSON: 0 when the run's error rate is over RATIO_ERROR_MAX.
  jq -e --argjson max "$RATIO_ERROR_MAX" '(.headline["error rate"] // 0) > $max' "$1" >/dev/null
}
md=$out_dir/peers.md
[ -z "$flame" ] || md=$FLAME_DIR/peers-$(IFS=-; echo "${scenarios[*]}").md
{
  bench_md_header "IOP and its peers, side by side${flame:+, under perf record}" "$command_line"
  echo "- **Each path:** the same \`iop-mock-provider\` (fresh per path, --workers = cores), then the load generator (k6; oha for open) for $DURATION; every proxy on 127.0.0.1"
  echo "- **CPU µs per request** (per stream for stream): the CPU time (utime + stime, all threads, clock ticks from /proc) each process used during the k6 run ÷ the requests k6 completed (\`http_reqs\`; for open, the oha run and the requests it sent); *proxy* sums the path's own processes and their descendants (nginx master + worker, haproxy, rathole server + client, LiteLLM and its children, Edge + Node; two processes also shown as their parts), *mock* is the mock provider, *k6* the load generator; *all* is the three together, so on these $(nproc) cores $(nproc)000000 ÷ *all* is roughly the most requests/s the path can complete while k6 runs on the same box"
  echo "- **Host steal %:** the share of this VM's CPU time (all vCPUs, /proc/stat) the hypervisor ran elsewhere during the path's measured run; a path measured while the host steals is slower with a longer tail for reasons outside it, so compare rows with similar figures (a row at or above STEAL_WARN=${STEAL_WARN:-5} % is named in the notes)"
  [ "$ROUNDS" -eq 1 ] || echo "- **Rounds:** every path ran $ROUNDS times, the rounds interleaved (every path once, then again), so a slow phase of the host falls on all paths alike. Each row is one run: the path's median round by the scenario's figure (MiB/s, tokens/s, QPS; for open the added p99 over the same round's direct p99), the worse of the middle two for an even count, chosen among the rounds under STEAL_WARN % host steal when there are any; the *each round* column lists every round's figure in order, the row's in bold. IOP's ratios are between the rows shown"
  [ -z "$b_desc" ] || echo "- **A/B:** the rows named \`iopb-…\` are IOP again, B: $b_desc; the \`iop-…\` rows (A) ran right before them in every round, with ${IOP_BIN_DIR:+binaries in $IOP_BIN_DIR and }the flags and config the IOP workers line names (none: the defaults). In B's rows the *IOP ÷ row* columns are A ÷ B: below 1× B is faster, above 1× A is"
  echo "- **IOP ÷ peer:** one pair of columns per IOP model: that model's io_uring figure divided by the row's — above 1× is better for IOP; for latency the ratio is row ÷ IOP, so above 1× is better for IOP too; *failed* where either path's error rate is over $RATIO_ERROR_MAX (its figures count failed requests)"
  echo
  for sc in "${scenarios[@]}"; do
    peers_scenario "$sc"
    peers_key
    refs=()
    for m in "${iop_models[@]}"; do
      [ -f "${fig[$sc,iop-uring-$m,json]:-}" ] && refs+=("$m")
    done
    if [ "$script" = oha ]; then
      echo "## $sc — oha $OHA_VERSION open loop at $rate/s over $connections connections (\`-q $rate --latency-correction -c $connections\`, $warmup warm-up then $DURATION), k6 chat-nonstream.js's body, mock \`${mock_flags[*]}\`"
      echo
      echo "Latency from each request's scheduled start (no coordinated omission). *Dropped* = offered − sent: requests oha had not sent by the deadline (their latency is missing from the percentiles). *Added p99* = the row's p99 − the direct path's p99 in the same round (issue 8: ≤ 0.5 ms at 5k QPS)."
    else
      echo "## $sc — perf/k6/$script, mock \`${mock_flags[*]}\`, k6 \`${k6_env[*]} -e DURATION=$DURATION\`"
    fi
    echo
    case "$script" in
      chat-stream.js)
        head="| path | streams/s | tokens/s | MiB/s | TTFB p50 / p99 ms | mean chunk gap p50 ms | error rate | CPU µs per stream: proxy / mock / k6 | CPU µs per stream, all | host steal % |"; rule="|---|---|---|---|---|---|---|---|---|---|"; k1=$KEY_NAME; k2='ttfb p50 ms'
        ;;
      oha) head="| path | QPS | p50 ms | p99 ms | p99.9 ms | added p99 ms | dropped | error rate | CPU µs per request: proxy / mock / oha | CPU µs per request, all | host steal % |"; rule="|---|---|---|---|---|---|---|---|---|---|---|"; k1=QPS; k2='p99 ms' ;;
      *) head="| path | QPS | p50 ms | p99 ms | p99.9 ms | dropped | error rate | CPU µs per request: proxy / mock / k6 | CPU µs per request, all | host steal % |"; rule="|---|---|---|---|---|---|---|---|---|---|"; k1=QPS; k2='p99 ms' ;;
    esac
    if [ "$ROUNDS" -gt 1 ]; then
      head+=" $KEY_LABEL each round |"
      rule+="---|"
    fi
    for m in "${refs[@]}"; do
      head+=" $m io_uring ÷ row (${k1%% (*}) | $m io_uring ÷ row (${k2% ms}) |"
      rule+="---|---|"
    done
    echo "$head"
    echo "$rule"
    for p in "${paths[@]}"; do
      j=${fig[$sc,$p,json]:-}
      if [ -z "$j" ] || [ ! -f "$j" ]; then continue; fi
      name="$p (${fig[$sc,$p,desc]})"
      case "$script" in
        chat-stream.js)
          row="| $name | $(bench_fmt "$j" 'streams/s' 0) | $(bench_fmt "$j" 'tokens/s (all streams)' 0) | $(bench_fmt "$j" 'MiB/s (all streams)' 1) | $(bench_fmt "$j" 'ttfb p50 ms') / $(bench_fmt "$j" 'ttfb p99 ms') | $(bench_fmt "$j" 'chunk gap p50 ms' 3) | $(bench_fmt "$j" 'error rate' 4) | ${fig[$sc,$p,cpu]:--} | ${fig[$sc,$p,cpu_all]:--} | ${fig[$sc,$p,steal]:--} |"
          ;;
        oha)
          row="| $name | $(bench_fmt "$j" QPS 0) | $(bench_fmt "$j" 'p50 ms' 3) | $(bench_fmt "$j" 'p99 ms' 3) | $(bench_fmt "$j" 'p99.9 ms' 3) | ${fig[$sc,$p,added]:--} | $(bench_fmt "$j" dropped 0) | $(bench_fmt "$j" 'error rate' 4) | ${fig[$sc,$p,cpu]:--} | ${fig[$sc,$p,cpu_all]:--} | ${fig[$sc,$p,steal]:--} |"
          ;;
        *)
          row="| $name | $(bench_fmt "$j" QPS 0) | $(bench_fmt "$j" 'p50 ms' 3) | $(bench_fmt "$j" 'p99 ms' 3) | $(bench_fmt "$j" 'p99.9 ms' 3) | $(bench_fmt "$j" dropped 0) | $(bench_fmt "$j" 'error rate' 4) | ${fig[$sc,$p,cpu]:--} | ${fig[$sc,$p,cpu_all]:--} | ${fig[$sc,$p,steal]:--} |"
          ;;
      esac
      [ "$ROUNDS" -eq 1 ] || row+=" ${fig[$sc,$p,rounds]:--} |"
      row_failed=
      ! over_error_max "$j" || row_failed=1
      for m in "${refs[@]}"; do
        r=${fig[$sc,iop-uring-$m,json]}
        if [ -n "$row_failed" ] || over_error_max "$r"; then
          row+=" failed | failed |"
        else
          row+=" $(ratio "$(bench_headline "$r" "$k1")" "$(bench_headline "$j" "$k1")") | $(ratio "$(bench_headline "$r" "$k2")" "$(bench_headline "$j" "$k2")" 1) |"
        fi
      done
      echo "$row"
    done
    echo
  done
  if [ -n "$flame" ]; then
    echo "## Flame graphs"
    echo
    echo "Every path's own processes, peers' included; the figures above are from these profiled runs, so compare the paths' profiles, not these figures with other tables."
    echo
    flame_md_report scenario path
    echo
  fi
  if [ ${#skipped[@]} -gt 0 ]; then
    echo "Notes:"
    echo
    printf -- '- %s\n' "${skipped[@]}"
  fi
} >"$md"
cat "$md" >&2
say "wrote $md"
