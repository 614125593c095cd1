#!/usr/bin/env bash
# Soak: bounded mixed load on the multi-host netns bed (hack/netns/bed.sh)
# with random faults, then an invariant table.
#
#   SOAK_SECONDS=600 hack/soak.sh
#
# The bed: the Edge (iop-edge, production heartbeat), two Nodes and their
# mock providers, each in its own network namespace. The load
# (hack/netns/soak.js, k6 inside the Edge's namespace): SOAK_VUS (16) users
# in a closed loop, a random mix of streaming / non-streaming chats on the
# raw tunnel (`chat`) and normalized runs (`ollama`). Every SOAK_FAULT_EVERY
# (20) seconds one random fault, then its repair:
#   node-kill       SIGKILL a node, restart it 3 s later (re-registers)
#   provider-crash  SIGKILL a mock provider, restart it 3 s later
#   provider-stall  restart a provider with --stall-after 4 for 8 s (its
#                   stall watchdog is 2 s), then normal again
#   partition       a node's link down for 3-8 s (shorter than the 30 s / 45 s
#                   heartbeat: the link survives, its streams pause)
# After the load the faults stop, everything is repaired, and the table is
# checked: terminals = requests (none hung, none doubled), Edge requests on
# /metrics = requests, outstanding leases 0, queue empty, Edge RSS growth
# under SOAK_RSS_BOUND_KIB (65536), no Edge fd growth (SOAK_FD_SLACK, 8).
# Exit 1 when an invariant fails.
#
# Env: SOAK_SECONDS (600), SOAK_VUS, SOAK_FAULT_EVERY, SOAK_SEED (random),
# IOP_PROFILE=debug|release (debug: no release build on a shared machine),
# IOP_NO_BUILD=1, SOAK_OUT (bench-results/soak.md; `-` = don't write).
# Needs root and `ip netns`; otherwise says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_NAME=soak
# shellcheck source=hack/lib/bench.sh
. hack/lib/bench.sh

seconds=${SOAK_SECONDS:-600}
vus=${SOAK_VUS:-16}
every=${SOAK_FAULT_EVERY:-20}
seed=${SOAK_SEED:-$RANDOM}
rss_bound=${SOAK_RSS_BOUND_KIB:-65536}
fd_slack=${SOAK_FD_SLACK:-8}
out=${SOAK_OUT:-bench-results/soak.md}
export IOP_PROFILE=${IOP_PROFILE:-debug}
RANDOM=$seed

if ! why=$(hack/netns/bed.sh available); then
  echo "SKIPPED: the soak needs root and ip netns ($why)"
  exit 0
fi

run="$$s"
work=$(mktemp -d "${TMPDIR:-/tmp}/iop-soak.XXXXXX")
BENCH_WORK=$work
declare -A pid=()

stop_pid() {
  local p=${pid[$1]:-}
  [ -n "$p" ] || return 0
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  pid[$1]=
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local k
  for k in "${!pid[@]}"; do stop_pid "$k"; done
  hack/netns/bed.sh down "$run"
  if [ "$rc" -ne 0 ]; then
    for k in "$work"/*.log; do [ -f "$k" ] && { echo "--- $k" >&2; tail -n 5 "$k" >&2; }; done
  fi
  [ -n "${SOAK_KEEP:-}" ] || rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ulimit -n 262144 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

bench_bins
bench_k6
hack/netns/bed.sh sweep
hack/netns/bed.sh up "$run" 2
ns() { echo "iop-$run-$1"; }
edge_ip=10.77.0.1
ingress=$edge_ip:8080

# start NAME HOST CMD...: CMD in HOST's namespace, log to $work/NAME.log.
start() {
  local name=$1 host=$2
  shift 2
  ip netns exec "$(ns "$host")" "$@" >>"$work/$name.log" 2>&1 &
  pid[$name]=$!
}

provider() { # provider I [extra mock flags]
  local i=$1
  shift
  start "p$i" "p$i" "$BIN_DIR/iop-mock-provider" --listen "10.77.0.$((100 + i)):8000" --workers 1 \
    --models m --tokens 32 --delay-ms 10 "$@"
  local _
  for _ in $(seq 1 100); do
    ip netns exec "$(ns "p$i")" bash -c "exec 3<>/dev/tcp/10.77.0.$((100 + i))/8000" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "provider p$i did not come up"
}

node() { # node I
  start "n$1" "n$1" env IOP_NODE_TOKEN="tok-$1" "$BIN_DIR/iop-node" --edge "$edge_ip:7070" \
    --data-dir "$work/n$1-data" --log-format json --admin-addr off --workers 1
}

edge_curl() { ip netns exec "$(ns edge)" curl "$@"; }
metric_in_edge() {
  edge_curl -fsS -m 5 "http://$ingress/metrics" 2>/dev/null | awk -v f="$1" \
    '$1 == f || index($1, f "{") == 1 { s += $2 } END { printf "%d\n", s }'
}
wait_nodes_ready() {
  local _
  for _ in $(seq 1 600); do
    [ "$(metric_in_edge iop_nodes_ready)" = 2 ] && return 0
    sleep 0.1
  done
  fail "the nodes did not get ready (iop_nodes_ready=$(metric_in_edge iop_nodes_ready))"
}

cat >"$work/edge.yaml" <<YAML
listen:
  ingress: $ingress
  nodes: $edge_ip:7070
nodes:
YAML
for i in 1 2; do
  cat >>"$work/edge.yaml" <<YAML
  - id: n$i
    token: tok-$i
    providers:
      - { id: oa$i, kind: openai_compat, base_url: "http://10.77.0.$((100 + i)):8000", targets: [m], response_stall_timeout_ms: 2000 }
      - { id: ol$i, kind: ollama, base_url: "http://10.77.0.$((100 + i)):8000", targets: [m], response_stall_timeout_ms: 2000 }
YAML
done
cat >>"$work/edge.yaml" <<YAML
model_groups:
  - { name: chat, target: m, providers: [oa1, oa2] }
  - { name: ollama, target: m, providers: [ol1, ol2] }
queue: { max_waiting: 1000, timeout_ms: 5000 }
YAML

provider 1
provider 2
start edge edge "$BIN_DIR/iop-edge" --config "$work/edge.yaml" --log-format json --workers 2
for _ in $(seq 1 300); do grep -q edge_started "$work/edge.log" 2>/dev/null && break; sleep 0.1; done
grep -q edge_started "$work/edge.log" || fail "the Edge did not start"
node 1
node 2
wait_nodes_ready

edge_pid=${pid[edge]}
rss() { awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# Warm-up (10 s of the same load), then the idle baseline.
say "warm-up: 10 s of load"
ip netns exec "$(ns edge)" env K6_NO_USAGE_REPORT=true "$K6" run --quiet --no-color \
  -e BASE_URL="http://$ingress" -e VUS="$vus" -e DURATION=10s -e SUMMARY_JSON="$work/warmup.json" \
  hack/netns/soak.js >"$work/k6-warmup.log" 2>&1 || fail "warm-up k6 failed: $(tail -n 5 "$work/k6-warmup.log")"
sleep 2
requests_before=$(metric_in_edge iop_requests_total)
rss0=$(rss "$edge_pid")
fds0=$(fds "$edge_pid")
say "baseline: Edge RSS ${rss0} KiB, ${fds0} fds; soak ${seconds} s, ${vus} users, a fault every ${every} s (seed $seed)"

ip netns exec "$(ns edge)" env K6_NO_USAGE_REPORT=true "$K6" run --quiet --no-color \
  -e BASE_URL="http://$ingress" -e VUS="$vus" -e DURATION="${seconds}s" -e SUMMARY_JSON="$work/soak.json" \
  hack/netns/soak.js >"$work/k6-soak.log" 2>&1 &
k6_pid=$!
pid[k6]=$k6_pid

declare -A faults=([node-kill]=0 [provider-crash]=0 [provider-stall]=0 [partition]=0)
rss_max=$rss0
t_end=$((SECONDS + seconds))
while [ $((SECONDS + every)) -lt "$t_end" ] && kill -0 "$k6_pid" 2>/dev/null; do
  sleep "$every"
  r=$(rss "$edge_pid")
  [ "$r" -gt "$rss_max" ] && rss_max=$r
  i=$((RANDOM % 2 + 1))
  kinds=(node-kill provider-crash provider-stall partition)
  kind=${kinds[$((RANDOM % 4))]}
  faults[$kind]=$((faults[$kind] + 1))
  printf '%5ds %s on %s\n' "$((seconds - (t_end - SECONDS)))" "$kind" "$i" >>"$work/faults.log"
  case $kind in
    node-kill) stop_pid "n$i"; sleep 3; node "$i" ;;
    provider-crash) stop_pid "p$i"; sleep 3; provider "$i" ;;
    provider-stall) stop_pid "p$i"; provider "$i" --stall-after 4; sleep 8; stop_pid "p$i"; provider "$i" ;;
    partition) hack/netns/bed.sh partition "$run" "n$i"; sleep $((3 + RANDOM % 6)); hack/netns/bed.sh heal "$run" "n$i" ;;
  esac
done
say "faults done; waiting for the load to end"
wait "$k6_pid" || true
pid[k6]=
wait_nodes_ready
sleep 3

# --- the invariant table ---------------------------------------------------------
j=$work/soak.json
[ -f "$j" ] || fail "no k6 summary: $(tail -n 20 "$work/k6-soak.log")"
c() { jq -r ".$1" "$j"; }
requests=$(c requests)
terminals=$(($(c term_done) + $(c term_error_event) + $(c term_http_error) + $(c term_cut)))
edge_requests=$(($(metric_in_edge iop_requests_total) - requests_before))
leases=$(metric_in_edge iop_provider_leases)
queue=$(metric_in_edge iop_queue_waiting)
rss1=$(rss "$edge_pid")
fds1=$(fds "$edge_pid")
growth=$((rss1 - rss0))

failed=0
rows=()
row() { # row NAME VALUE OK
  local verdict=PASS
  [ "$3" = 1 ] || { verdict=FAIL; failed=1; }
  rows+=("| $1 | $2 | $verdict |")
}
row "terminals = requests (done + error event + HTTP error + cut)" "$terminals = $requests" $([ "$terminals" = "$requests" ] && echo 1 || echo 0)
row "hung requests (no end within 30 s)" "$(c hung)" $([ "$(c hung)" = 0 ] && echo 1 || echo 0)
row "requests with two terminals" "$(c term_double)" $([ "$(c term_double)" = 0 ] && echo 1 || echo 0)
row "Edge iop_requests_total delta = requests" "$edge_requests = $requests" $([ "$edge_requests" = "$requests" ] && echo 1 || echo 0)
row "outstanding leases (iop_provider_leases)" "$leases" $([ "$leases" = 0 ] && echo 1 || echo 0)
row "queue (iop_queue_waiting)" "$queue" $([ "$queue" = 0 ] && echo 1 || echo 0)
row "Edge RSS growth (bound $rss_bound KiB)" "$rss0 → $rss1 KiB ($growth KiB; peak $rss_max)" $([ "$growth" -lt "$rss_bound" ] && echo 1 || echo 0)
row "Edge fds (slack $fd_slack)" "$fds0 → $fds1" $([ "$fds1" -le $((fds0 + fd_slack)) ] && echo 1 || echo 0)

table=$(
  echo "| invariant | value | |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
)
breakdown="done $(c term_done), error event $(c term_error_event), HTTP error $(c term_http_error), cut $(c term_cut)"
statuses=$(jq -r 'to_entries | map(select((.key | startswith("http_")) and .value > 0)) | map("\(.key | ltrimstr("http_")): \(.value)") | join(", ")' "$j")
fault_line="node-kill ${faults[node-kill]}, provider-crash ${faults[provider-crash]}, provider-stall ${faults[provider-stall]}, partition ${faults[partition]}"
printf '\n%s\n\nterminals: %s\nHTTP errors by status: %s\nfaults: %s\n' "$table" "$breakdown" "${statuses:-none}" "$fault_line"

if [ "$out" != - ]; then
  {
    bench_md_header "Soak: ${seconds} s of mixed load with random faults on the netns bed" \
      "SOAK_SECONDS=$seconds SOAK_SEED=$seed hack/soak.sh" | sed 's/(everything on loopback)/(in the Edge'"'"'s network namespace)/'
    cat <<MD
- **Profile:** $IOP_PROFILE binaries; Edge (2 workers, production heartbeat 30 s / 45 s), 2 Nodes, 2 mock providers, each in its own network namespace on one bridge; k6 in the Edge's namespace
- **Load:** $vus users, closed loop; 70 % streaming; half \`chat\` (raw tunnel), half \`ollama\` (normalized); mock: 32 tokens, 10 ms apart
- **Faults:** one every $every s: $fault_line
- **Terminals:** $breakdown
- **HTTP errors by status:** ${statuses:-none}

$table

Fault log (seconds into the soak):

\`\`\`
$(cat "$work/faults.log" 2>/dev/null)
\`\`\`
MD
  } >"$out"
  say "wrote $out"
fi
[ "$failed" = 0 ] || fail "an invariant failed (table above)"
say "all invariants hold"
