#!/usr/bin/env bash
# Smoke test of the iop-mock-provider binary: build it, start it on a free
# loopback port, stream the OpenAI chat and Ollama chat shapes with curl and
# check their terminators, then stop it. Exits non-zero on any failure.
#
# Env: PROFILE=release to test the release build (default: dev, which
# `cargo test` has usually built already).
set -euo pipefail

cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
if [[ "$profile" == dev ]]; then bin="$target_dir/debug/iop-mock-provider"; else bin="$target_dir/$profile/iop-mock-provider"; fi

echo "smoke-mock-provider: building ($profile)"
cargo build --quiet --profile "$profile" -p perf --bin iop-mock-provider

log="$(mktemp)"
pid=""
cleanup() {
    if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -f "$log"
}
trap cleanup EXIT

fail() { echo "smoke-mock-provider: FAIL: $*" >&2; exit 1; }

# Port 0: the kernel picks a free port; the binary prints the bound address.
"$bin" --listen 127.0.0.1:0 --tokens 5 >"$log" 2>&1 &
pid=$!
addr=""
for _ in $(seq 1 100); do
    addr="$(sed -n 's/^iop-mock-provider listening on //p' "$log")"
    [[ -n "$addr" ]] && break
    kill -0 "$pid" 2>/dev/null || fail "server exited: $(cat "$log")"
    sleep 0.05
done
[[ -n "$addr" ]] || fail "server did not report its address"
base="http://$addr"
echo "smoke-mock-provider: server on $base"

curl_json() { curl -sS -N --max-time 10 -H 'content-type: application/json' "$@"; }

health="$(curl -sS --max-time 5 "$base/health")"
[[ "$health" == '{"status":"ok"}' ]] || fail "health: $health"

chat="$(curl_json "$base/v1/chat/completions" \
    -d '{"model":"smoke","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}')"
[[ "$(tail -c 15 <<<"$chat" | tr -d '\n')" == "data: [DONE]" ]] || fail "chat stream does not end with [DONE]: $chat"
grep -q '"object":"chat.completion.chunk"' <<<"$chat" || fail "no chat.completion.chunk"
[[ "$(grep -c '"delta":{"content":"tok "' <<<"$chat")" == 5 ]] || fail "expected 5 content chunks"
grep -q '"choices":\[\],"usage":{"prompt_tokens":1' <<<"$chat" || fail "no usage chunk"

ollama="$(curl_json "$base/api/chat" -d '{"model":"smoke","messages":[{"role":"user","content":"hi"}]}')"
[[ "$(wc -l <<<"$ollama")" == 6 ]] || fail "expected 6 NDJSON lines: $ollama"
tail -n 1 <<<"$ollama" | grep -q '"done":true' || fail "last NDJSON line lacks \"done\":true: $ollama"

# abort-after: curl must see a truncated chunked body (exit 18).
rc=0
curl -sS -N --max-time 10 -o /dev/null "$base/v1/chat/completions?abort-after=2" \
    -d '{"model":"smoke","messages":[],"stream":true}' 2>/dev/null || rc=$?
[[ "$rc" == 18 ]] || fail "abort-after: curl exit $rc, want 18 (partial transfer)"

stats="$(curl -sS --max-time 5 "$base/mock/stats")"
grep -q '"streams_completed":2' <<<"$stats" || fail "stats: $stats"
grep -q '"streams_aborted":1' <<<"$stats" || fail "stats: $stats"

echo "smoke-mock-provider: OK"
