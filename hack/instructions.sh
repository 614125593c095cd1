#!/usr/bin/env bash
# Instructions a small request costs the Edge and the Node, counted by
# callgrind: a figure this noisy 2-vCPU box cannot swing, for comparing two
# builds of the per-request path (bench-results/profiles.md, round 21).
#
#   hack/instructions.sh [REQUESTS]
#
# For each model (MODELS, default "mock-chat mock-ollama") and each process
# (the Edge, then the Node): the stack on loopback with the epoll driver
# (valgrind does not follow io_uring), the process under
# `valgrind --tool=callgrind` with instrumentation off, 400 warm-up requests,
# then instrumentation on for REQUESTS (default 2000) small non-streaming
# chats ("hi", the mock's 16 tokens) from 4 keep-alive clients, and a dump.
# The figure is the process's user-space instructions (all its threads)
# divided by REQUESTS; the kernel's share is not counted. Each thread is
# counted apart (`--separate-threads=yes`), so the Node's run-store thread
# is also reported on its own: under valgrind the threads take turns, and
# how much of the `SCHED_IDLE` store thread's work falls in the measured
# window moves the Node's total by up to ~7k a request from run to run,
# while the rest (the request path) agrees within ~1–3 % (how requests
# happen to batch on the link).
#
# Writes bench-results/instructions.md (the table and each run's heaviest
# functions, inclusive) and keeps the callgrind files in
# target/instructions/ for `callgrind_annotate`.
#
# Env: MODELS, IOP_BIN_DIR / IOP_NO_BUILD and LINK_TLS=1 (the link under
# mTLS; as hack/loadtest.sh),
# INSTRUCTIONS_OUT (default bench-results/instructions.md), PROMPT_BYTES (a
# prompt of that many bytes of text lines with quotes and a newline, as k6's
# PROMPT_TEXT=prose, instead of "hi", for the long-prompt path;
# e.g. `PROMPT_BYTES=100000 hack/instructions.sh 200`), API (`chat`, the
# default: Chat Completions; `responses`: Responses requests, the prompt as
# a string `input`, e.g. `API=responses MODELS=mock-ollama`), STREAM=1
# (streamed answers, read to their end, instead of whole ones), TOOLS=N (a
# chat is an agent's turn: a `tools` list of N, and after the prompt an
# assistant's `tool_calls` and the tool's answer, before the next question;
# past the first, each tool is a ~870-byte schema as a coding agent
# declares its tools),
# PROMPT_LINE (the line a long prompt repeats instead of k6's prose line;
# the client escapes every character past ASCII, as Python's json.dumps
# does by default: an emoji is a surrogate pair's two \u escapes),
# MESSAGES=N (the chat's history: N messages before the prompt, user and
# assistant by turns, ~300 bytes of prose each, as a chat client sends the
# whole conversation every turn),
# IMAGE_BYTES (the user message also carries an image of that many base64
# bytes as a data URL, as a vision client sends one; for the tunnel: a
# normalized run refuses images).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_NAME=instructions
# shellcheck source=hack/lib/bench.sh
. hack/lib/bench.sh

requests=${1:-2000}
models=${MODELS:-mock-chat mock-ollama}
api=${API:-chat}
case $api in
  chat | responses) ;;
  *) fail "API must be chat or responses" ;;
esac
prompt_bytes=${PROMPT_BYTES:-}
case $prompt_bytes in
  '' | *[!0-9]*) [ -z "$prompt_bytes" ] || fail "PROMPT_BYTES must be a number of bytes" ;;
esac
title="Instructions a small request (callgrind)" prompt_desc='"hi"'
if [ -n "$prompt_bytes" ]; then
  title="Instructions a request with a $prompt_bytes-byte prompt (callgrind)"
  prompt_desc="a prompt of $prompt_bytes bytes of 56-byte text lines with quotes and a newline, as k6's PROMPT_TEXT=prose"
fi
api_env= kind=non-streaming api_name=chat
if [ -n "$prompt_bytes" ] && [ -n "${PROMPT_LINE:-}" ]; then
  api_env="PROMPT_LINE=… "
  prompt_desc="a prompt of $prompt_bytes characters of the line $(printf '%q' "$PROMPT_LINE") (Python's json.dumps escaping every character past ASCII)"
fi
if [ "$api" = responses ]; then
  api_name=Responses
  api_env="API=responses MODELS=\"$models\" "
  title="$title, Responses requests"
  prompt_desc="$prompt_desc, as a Responses request's string \`input\`"
fi
tools=${TOOLS:-0}
case $tools in
  0) ;;
  '' | *[!0-9]*) fail "TOOLS must be a number of tools (0: none)" ;;
  *)
    [ "$api" = chat ] || fail "TOOLS is for API=chat"
    tools_desc="a \`tools\` list"
    [ "$tools" = 1 ] || tools_desc="a \`tools\` list of $tools (the others ~1 KB schemas, as a coding agent declares)"
    api_env="${api_env}TOOLS=$tools " title="$title, an agent's turn ($tools tool$([ "$tools" = 1 ] || echo s))"
    prompt_desc="$prompt_desc, in an agent's turn: $tools_desc, the prompt, an assistant's \`tool_calls\`, the tool's answer and a question"
    ;;
esac
history=${MESSAGES:-}
case $history in
  '') ;;
  *[!0-9]*) fail "MESSAGES must be a number of messages" ;;
  *)
    [ "$api" = chat ] && [ "$tools" = 0 ] || fail "MESSAGES is for API=chat without TOOLS"
    api_env="${api_env}MESSAGES=$history " title="$title, after a conversation of $history messages"
    prompt_desc="$prompt_desc, after a conversation of $history messages (user and assistant by turns, ~300 bytes of prose each), as a chat client sends its history"
    ;;
esac
image_bytes=${IMAGE_BYTES:-}
case $image_bytes in
  '') ;;
  *[!0-9]*) fail "IMAGE_BYTES must be a number of bytes" ;;
  *)
    [ "$api" = chat ] || fail "IMAGE_BYTES is for API=chat"
    api_env="${api_env}IMAGE_BYTES=$image_bytes " title="$title, with a $image_bytes-byte image"
    prompt_desc="$prompt_desc, with an \`image_url\` part of $image_bytes base64 bytes"
    ;;
esac
stream=${STREAM:-0}
case $stream in
  0) ;;
  1) api_env="${api_env}STREAM=1 " title="$title, streamed" kind=streamed ;;
  *) fail "STREAM must be 0 or 1" ;;
esac
out=${INSTRUCTIONS_OUT:-bench-results/instructions.md}
keep=$bench_target/instructions
# Valgrind starts a process ~50 times slower.
PROCS_WAIT_S=90

if ! command -v valgrind >/dev/null 2>&1; then
  say "installing valgrind (apt-get install valgrind)"
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq valgrind >/dev/null || fail "apt-get install valgrind failed"
  else
    sudo apt-get install -y -qq valgrind >/dev/null || fail "apt-get install valgrind failed"
  fi
fi

bench_init
bench_bins
mkdir -p "$keep"

# client URL MODEL N: N small chats from 4 keep-alive clients
# (hack/lib/chat_client.py); fails on any answer that is not a 200.
client() {
  python3 hack/lib/chat_client.py "$@" "$prompt_bytes" "$api" "$stream" "$tools" "$image_bytes" "$history"
}

# total FILE...: the files' instruction total.
total() {
  local file sum=0 n
  for file in "$@"; do
    n=$(callgrind_annotate "$file" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    sum=$((sum + ${n:-0}))
  done
  echo "$sum"
}

# store_threads FILE...: those of the per-thread files that are the Node's
# run-store thread: its writer's loop and LMDB run there and nowhere else
# (a window may catch the thread inside one LMDB call only).
store_threads() {
  grep -l -E '^c?fn=\([0-9]+\) .*(StoreWriter::spawn_gated|mdb_)' "$@" 2>/dev/null || true
}

# heaviest FILE...: functions by inclusive instructions a request, summed
# over the files (one a thread), the heaviest 12 of the product's own
# (edge_proxy::, node_runner::, framing::).
heaviest() {
  local file
  for file in "$@"; do
    callgrind_annotate --inclusive=yes --auto=no "$file" 2>/dev/null \
      | grep -E ':(edge_proxy|node_runner|framing)::[A-Za-z_:<>]+' \
      | grep -v -E 'block_on|::run_connection|serve_core|Counted<F>' \
      | sed -E 's#^ *([0-9,]+) \([ 0-9.]+%\) +[^:]*:([^ ]+).*#\1 \2#' \
      | awk '!seen[$2]++ { gsub(",", "", $1); print $1, $2 }' \
      || true # a thread of none of the product's functions (grep finds none)
  done | awk -v n="$requests" '{ sum[$2] += $1 } END { for (f in sum) printf "%d %s\n", sum[f] / n, f }' \
    | sort -k1,1nr | head -n 12 | awk '{ printf "| `%s` | %d |\n", $2, $1 }'
}

rows=() details=()
for model in $models; do
  for who in edge node; do
    file=$keep/$model-$who.out
    rm -f "$file" "$file".*
    wrap="valgrind --tool=callgrind --callgrind-out-file=$file --separate-threads=yes --dump-instr=no --instr-atstart=no -q"
    say "$model: the $who under callgrind, $requests requests"
    bench_mock mock --tokens 16
    if [ "$who" = edge ]; then
      IOP_EDGE_WRAP=$wrap bench_iop epoll "$MOCK_ADDR"
    else
      IOP_NODE_WRAP=$wrap bench_iop epoll "$MOCK_ADDR"
    fi
    client "http://$IOP_INGRESS" "$model" 400 || fail "warm-up requests failed"
    pid=$(procs_pid "$who")
    callgrind_control -i on "$pid" >/dev/null 2>&1
    client "http://$IOP_INGRESS" "$model" "$requests" || fail "measured requests failed"
    callgrind_control -d "$pid" >/dev/null 2>&1
    bench_stop
    dumps=("$file".1-*)
    [ -s "${dumps[0]}" ] || fail "callgrind wrote no dump ($file.1-*)"
    instructions=$(total "${dumps[@]}")
    per=$((instructions / requests))
    mapfile -t store < <(store_threads "${dumps[@]}")
    store_per=0
    [ "${#store[@]}" -eq 0 ] || store_per=$(($(total "${store[@]}") / requests))
    rows+=("| $model | $who | $per | $((per - store_per)) | $store_per | $instructions |")
    details+=("" "### $model, the $who: $per instructions a request" "" "| function (inclusive) | instructions a request |" "|---|---|")
    while IFS= read -r line; do details+=("$line"); done < <(heaviest "${dumps[@]}")
    say "$model $who: $per instructions a request ($store_per on the run store's thread)"
  done
done

{
  BENCH_LOADGEN="python3 http.client, 4 keep-alive clients" bench_md_header \
    "$title" "$api_env${prompt_bytes:+PROMPT_BYTES=$prompt_bytes }hack/instructions.sh $requests"
  cat <<MD
- **What is counted:** user-space instructions of the process under callgrind (all its threads, the Node's run-store thread included, each counted apart) while $requests $kind $api_name requests ($prompt_desc; the mock answers 16 tokens) pass through, after 400 warm-up requests; ÷ $requests. Epoll driver (valgrind does not follow io_uring). The kernel's work is not counted. The run store's thread commits every 100 ms, and whether a commit falls in the measured window moves the Node's total by up to ~7k a request from run to run (under valgrind the threads take turns, and the \`SCHED_IDLE\` store thread runs when it can); without it (the request path) runs of one build agree within ~1–3 %.
- **Callgrind files:** \`target/instructions/\`, one a thread (\`callgrind_annotate --inclusive=yes FILE.1-01\`)

| model | process | instructions a request | of it, the request path | of it, the run store's thread | instructions in all |
|---|---|---|---|---|---|
MD
  printf '%s\n' "${rows[@]}"
  printf '%s\n' "${details[@]}"
} >"$out"
say "wrote $out"
