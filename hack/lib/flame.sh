# Flame graphs of processes under a load: the Edge and the Node, and in
# hack/peers.sh every path's own (sourced by hack/loadtest.sh and
# hack/peers.sh when FLAMEGRAPH=1; not run).
#
#   flame_init                  flame_tools, then FLAME_DIR (where the
#                               graphs and reports go) and an empty
#                               flame_rows for the caller's report
#   flame_tools                 perf (apt-get install linux-perf) and inferno
#                               (cargo install --locked into target/tools)
#                               when missing, or fail
#   flame_start NAME PROC=PID…  perf record each PROC's pids (comma-separated:
#                               all their threads, kernel and user stacks,
#                               DWARF unwinding) until flame_end
#   flame_end CELLS             stop the recorders, write FLAME_DIR/NAME-PROC.svg
#                               and its collapsed stacks (NAME-PROC.folded.gz,
#                               for inferno-diff-folded) for each PROC, and
#                               append to flame_rows one markdown row a PROC
#                               after CELLS (the caller's leading cells, "a |
#                               b"): the CPU time sampled, the kernel's share
#                               (and its copies' and wake-ups'), the heaviest
#                               frames by self time; nothing when nothing
#                               records
#   flame_md_report COLUMN…     how the rows were recorded, what the columns
#                               mean, and the table of flame_rows under the
#                               caller's leading COLUMN names

# Sampling: FLAME_HZ (default 499) samples a second a thread, each with
# FLAME_STACK (default 16384) bytes of user stack for unwinding. The profiled
# run is slower than an unprofiled one (perf wakes on every sample and copies
# the stack), so its figures are not the scenario's.
# shellcheck shell=bash

INFERNO_VERSION=0.12.3
FLAME_HZ=${FLAME_HZ:-499}
FLAME_STACK=${FLAME_STACK:-16384}
flame_recorders=()
flame_procs=()
flame_name=

flame_init() {
  flame_tools
  FLAME_DIR=$bench_root/bench-results/flamegraphs
  flame_rows=()
}

flame_tools() {
  bench_apt_install perf linux-perf || fail "perf: $BENCH_APT_WHY"
  perf record -e cpu-clock -o /dev/null -- true 2>/dev/null ||
    fail "perf record does not run here (kernel.perf_event_paranoid is $(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo ?))"
  local root=$bench_target/tools
  INFERNO_COLLAPSE=$root/bin/inferno-collapse-perf
  INFERNO_FLAMEGRAPH=$root/bin/inferno-flamegraph
  if [ ! -x "$INFERNO_FLAMEGRAPH" ] || ! "$INFERNO_FLAMEGRAPH" --version 2>/dev/null | grep -q " $INFERNO_VERSION\$"; then
    say "installing inferno $INFERNO_VERSION (cargo install --locked into $root; under a minute on 2 cores)"
    env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR cargo install --quiet inferno --version "$INFERNO_VERSION" \
      --locked --root "$root" || fail "cargo install inferno@$INFERNO_VERSION failed"
  fi
}

flame_start() {
  local name=$1 spec proc pid
  shift
  flame_name=$name
  flame_recorders=()
  flame_procs=()
  for spec in "$@"; do
    proc=${spec%%=*}
    pid=${spec#*=}
    # cpu-clock: the VM may have no hardware counters; it samples on-CPU time.
    perf record --quiet -e cpu-clock -F "$FLAME_HZ" --call-graph "dwarf,$FLAME_STACK" -p "$pid" \
      -o "$BENCH_WORK/$name-$proc.perf.data" >"$BENCH_WORK/$name-$proc.perf.log" 2>&1 &
    flame_recorders+=($!)
    flame_procs+=("$proc")
  done
  # perf attaches after it has read the targets' maps; a load sent before
  # that would not be sampled.
  sleep 1
}

flame_end() {
  [ ${#flame_recorders[@]} -gt 0 ] || return 0
  local pid
  for pid in "${flame_recorders[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${flame_recorders[@]}"; do wait "$pid" 2>/dev/null || true; done
  flame_recorders=()
  say "rendering the flame graphs of $1 (perf script, inferno)"
  flame_render "$flame_name" "$1"
}

# flame_render NAME CELLS: flame_end's graphs and rows.
flame_render() {
  local name=$1 cells=$2 out=$FLAME_DIR proc data folded why
  mkdir -p "$out"
  for proc in "${flame_procs[@]}"; do
    data=$BENCH_WORK/$name-$proc.perf.data
    folded=$BENCH_WORK/$name-$proc.folded
    why=
    if [ ! -s "$data" ]; then
      why="no samples: $(tail -n 1 "$BENCH_WORK/$name-$proc.perf.log" 2>/dev/null || true)"
    # --no-inline: resolving inlined frames from line tables takes minutes
    # on these binaries; a function inlined into its caller shows as the caller.
    elif ! perf script --no-inline -i "$data" 2>"$BENCH_WORK/$name-$proc.script.log" |
      "$INFERNO_COLLAPSE" --all >"$folded" || [ ! -s "$folded" ]; then
      why="perf script | inferno-collapse-perf failed: $(tail -n 1 "$BENCH_WORK/$name-$proc.script.log")"
    elif ! "$INFERNO_FLAMEGRAPH" --title "$name: $proc" --subtitle "$(flame_subtitle)" --minwidth 0.2 \
      <"$folded" >"$out/$name-$proc.svg"; then
      why="inferno-flamegraph failed"
    fi
    # A failed profile is a row that says why, not the end of a sitting.
    if [ -n "$why" ]; then
      say "$name $proc: $why"
      flame_rows+=("| $cells | $proc | ${why//|//} | | | | |")
      continue
    fi
    gzip -9 -n -c "$folded" >"$out/$name-$proc.folded.gz"
    flame_rows+=("| $cells | [$proc]($name-$proc.svg) | $(flame_summary "$folded") |")
  done
}

flame_md_report() {
  local columns
  columns=$(printf '%s | ' "$@")
  echo "- **Recorder:** \`perf record -e cpu-clock -F $FLAME_HZ --call-graph dwarf,$FLAME_STACK -p PID\` for each process (with its workers) through the measured run; \`perf script --no-inline | inferno-collapse-perf --all | inferno-flamegraph\` (inferno $INFERNO_VERSION; \`perf/README.md\`, \"Flame graphs\"). A function inlined into its caller shows as the caller; kernel frames end in \`_[k]\`. A run under the recorder is slower than an unprofiled one: its figures are not the scenario's."
  echo "- **Columns:** shares of each process's CPU sampled. *Kernel copies*: \`_copy_to_iter\` / \`_copy_from_iter\` (bytes into and out of the process). *Wake-ups and switches*: samples at \`_raw_spin_unlock_irq(restore)\` and \`finish_task_switch\`, where the kernel turns interrupts back on after waking a thread or switching tasks (a \`cpu-clock\` sample cannot land while they are off, so that time shows there)."
  echo
  echo "| ${columns}process (flame graph) | CPU s sampled | kernel | kernel copies | wake-ups and switches | heaviest frames by self time |"
  echo "|$(printf -- '---|%.0s' "$@")---|---|---|---|---|---|"
  printf '%s\n' "${flame_rows[@]}"
}

flame_subtitle() {
  printf 'commit %s, %s, perf record -e cpu-clock -F %s --call-graph dwarf,%s' \
    "$(git -C "$bench_root" rev-parse --short HEAD 2>/dev/null || echo ?)" "$(date -u +%FT%TZ)" "$FLAME_HZ" "$FLAME_STACK"
}

# flame_summary FOLDED: "CPU SECONDS | KERNEL % | COPIES % | IRQ-OFF % | the
# heaviest frames by self time" of a collapsed profile (inferno marks
# kernel frames with _[k]; a cpu-clock sample weighs its period, in
# nanoseconds). COPIES: the kernel copying bytes to or from user memory;
# IRQ-OFF: samples that land where the kernel turns interrupts back on
# after a wake-up or a task switch (perf/README.md, "Reading them").
flame_summary() {
  python3 - "$1" <<'PY'
import collections, sys
COPIES = ("_copy_to_iter", "_copy_from_iter", "copy_user_enhanced_fast_string", "rep_movs_alternative")
IRQ_ON = ("_raw_spin_unlock_irqrestore", "_raw_spin_unlock_irq", "finish_task_switch.isra.0", "finish_task_switch")
total = kernel = copies = irq_on = 0
leaf = collections.Counter()
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    if not n.isdigit():
        continue
    n = int(n)
    frame = stack.rsplit(";", 1)[-1]
    total += n
    if frame.endswith("_[k]"):
        frame = frame.removesuffix("_[k]")
        kernel += n
        copies += n * (frame in COPIES)
        irq_on += n * (frame in IRQ_ON)
    leaf[frame] += n
if not total:
    print("0 | - | - | - | -")
    sys.exit()
pct = lambda n: f"{100 * n / total:.0f} %"
top = ", ".join(f"`{f[:60].replace('|', '/')}` {100 * n / total:.1f} %" for f, n in leaf.most_common(8))
print(f"{total / 1e9:.2f} | {pct(kernel)} | {pct(copies)} | {pct(irq_on)} | {top}")
PY
}
