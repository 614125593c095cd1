#!/usr/bin/env bash
# Allocations a small request costs the Edge and the Node, by call site:
# each heap allocation counted by a uprobe on the allocator, not sampled,
# so the figure is a count this noisy box cannot swing (a companion to
# hack/instructions.sh, which counts instructions; bench-results/profiles.md,
# round 50).
#
#   hack/allocations.sh [REQUESTS]
#
# For each model (MODELS, default "mock-chat mock-ollama"): the stack on
# loopback (DRIVER, default uring), 2,000 warm-up chats from 4 keep-alive
# clients, then uprobes on jemalloc's `malloc`, `calloc` and `realloc` in
# both binaries (perf probe) and `perf record --call-graph dwarf` on both
# processes while REQUESTS (default 500) small non-streaming chats ("hi",
# the mock's 16 tokens) go one at a time over one connection. Every
# allocation's stack is read with its inlined frames and grouped by the
# product's calls above the allocator; a site is listed when it allocates
# at least 0.3 times a request. All threads of each process are counted,
# the Node's run-store thread too (its share moves with how many of its
# commits fall in the window).
#
# Needs perf with uprobes (root, or perf_event_paranoid ≤ 1 and a
# writable tracefs), and the binaries' debug info (the release profile
# keeps it). Writes bench-results/allocations.md.
#
# Env: MODELS, DRIVER (uring | epoll), IOP_BIN_DIR / IOP_NO_BUILD (as
# hack/loadtest.sh), ALLOCATIONS_OUT (default bench-results/allocations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_NAME=allocations
# shellcheck source=hack/lib/bench.sh
. hack/lib/bench.sh

requests=${1:-500}
case $requests in
  '' | *[!0-9]* | 0) fail "REQUESTS must be a number of requests" ;;
esac
models=${MODELS:-mock-chat mock-ollama}
driver=${DRIVER:-uring}
case $driver in
  uring | epoll) ;;
  *) fail "DRIVER must be uring or epoll" ;;
esac
out=${ALLOCATIONS_OUT:-bench-results/allocations.md}
command -v perf >/dev/null 2>&1 || fail "needs perf (apt-get install linux-perf)"
# A group of our own, so that a stale probe of another tool is never
# deleted, and ours always are.
group=iop_alloc

bench_init
bench_bins

remove_probes() { perf probe -q -d "$group:*" >/dev/null 2>&1 || true; }
# bench_cleanup reads the exit status first: keep it for it.
trap 'rc=$?; remove_probes; (exit "$rc"); bench_cleanup' EXIT

# client URL MODEL N CONNECTIONS: N small chats ("hi") over CONNECTIONS
# keep-alive connections (hack/lib/chat_client.py); fails on any answer
# that is not a 200.
client() {
  python3 hack/lib/chat_client.py "$1" "$2" "$3" "" chat 0 0 "" "" "$4"
}

# sites REQUESTS < perf script output: "total" and one line a site, each
# "<allocations a request>\t<the calls above the allocator>".
sites() {
  python3 -c '
import collections, re, sys
requests = int(sys.argv[1])
# Frames that say nothing of who allocates: the allocator, std and alloc
# plumbing, the runtime, generic glue.
skip = re.compile(r"^(imalloc|_rjem_|__rust_|__rdl|alloc$|alloc::alloc|alloc_impl|allocate|"
                  r"try_allocate|with_capacity|exchange_malloc|box_new|new_uninit|do_reserve|"
                  r"reserve|grow|finish_grow|RawVec|to_vec|to_owned|clone|from|into|new$|new<|"
                  r"collect|push|extend|spec_|from_iter|call_once|with_mut|poll|pin|map|"
                  r"and_then|\{closure|\{async|std::sys|core::|<|::|\[unknown\])")
def name(frame):
    frame = frame.replace(" (inlined)", "")
    # Generic arguments out, outermost last.
    while True:
        cut = re.sub(r"<[^<>]*>", "", frame)
        if cut == frame:
            return frame
        frame = cut
counts = collections.Counter()
def flush(frames):
    # At one address perf prints the function and what is inlined into it
    # there (innermost first), the function first or last: it goes after
    # its inlined callees, so that the whole stack reads innermost first.
    ordered, group, last = [], [], None
    for address, frame in frames + [(None, "")]:
        if address != last:
            inlined = [f for f in group if f.endswith("(inlined)")]
            ordered += inlined + [f for f in group if not f.endswith("(inlined)")]
            group, last = [], address
        group.append(frame)
    names = [n for n in map(name, ordered) if n and not skip.match(n)]
    if frames:
        counts[" ← ".join(dict.fromkeys(names[:5]))] += 1
frames = []
for line in sys.stdin:
    fields = line.split(None, 1)
    # A stack line is an address and a frame; anything else (a sample'"'"'s
    # event line, a blank) ends the stack before it.
    if len(fields) == 2 and re.fullmatch(r"[0-9a-f]+", fields[0]):
        frames.append((fields[0], fields[1].strip()))
        continue
    flush(frames)
    frames = []
flush(frames)
print(f"total\t{sum(counts.values()) / requests:.1f}")
for site, n in counts.most_common():
    if n / requests < 0.3:
        break
    label = site or "(the runtime)"
    print(f"{n / requests:.2f}\t{label}")
' "$1"
}

summary=() details=()
for model in $models; do
  say "$model: the stack ($driver), 2000 warm-up requests"
  bench_mock mock --tokens 16
  bench_iop "$driver" "$MOCK_ADDR"
  client "http://$IOP_INGRESS" "$model" 2000 4 || fail "warm-up requests failed"
  remove_probes
  pids=() datas=()
  for who in edge node; do
    bin=$BIN_DIR/iop-$who
    for fn in malloc calloc realloc; do
      perf probe -q -x "$bin" -a "$group:${who}_$fn=_rjem_$fn" >/dev/null 2>&1 ||
        fail "perf probe on _rjem_$fn in $bin failed (root, uprobes and debug info needed)"
    done
    data=$BENCH_WORK/$model-$who.data
    perf record -q -o "$data" -e "$group:${who}_*" --call-graph dwarf,8192 -p "$(procs_pid "$who")" \
      >"$BENCH_WORK/perf-$who.log" 2>&1 &
    pids+=("$!") datas+=("$data")
  done
  sleep 1
  say "$model: $requests requests, one at a time, allocations recorded"
  client "http://$IOP_INGRESS" "$model" "$requests" 1 || fail "measured requests failed"
  sleep 0.5
  kill -INT "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  remove_probes
  bench_stop
  i=0
  for who in edge node; do
    mapfile -t lines < <(perf script -i "${datas[$i]}" -F event,ip,sym --inline 2>/dev/null | sites "$requests")
    i=$((i + 1))
    total=${lines[0]#total$'\t'}
    summary+=("| $model | $who | $total |")
    details+=("" "### $model, the $who: $total allocations a request" ""
      "| a request | where (the product's calls above the allocator, innermost first) |" "|---|---|")
    for line in "${lines[@]:1}"; do
      details+=("| ${line%%$'\t'*} | \`${line#*$'\t'}\` |")
    done
    say "$model $who: $total allocations a request"
  done
done

{
  BENCH_LOADGEN="python3 http.client, one connection" bench_md_header \
    "Allocations a small request (uprobes on the allocator)" \
    "MODELS=\"$models\" DRIVER=$driver hack/allocations.sh $requests"
  cat <<MD
- **What is counted:** every call of jemalloc's \`malloc\`, \`calloc\` and \`realloc\` in each process (all its threads, the Node's run-store thread too), by a uprobe, while $requests non-streaming chats ("hi"; the mock answers 16 tokens) go one at a time over one keep-alive connection, after 2,000 warm-up requests; ÷ $requests. The $driver driver. A site is the product's calls above the allocator (inlined frames included, generic and plumbing frames left out); sites under 0.3 a request are not listed.

| model | process | allocations a request |
|---|---|---|
MD
  printf '%s\n' "${summary[@]}"
  printf '%s\n' "${details[@]}"
} >"$out"
say "wrote $out"
