# Background processes of a hack/ script: start, watch, wait for, stop
# (sourced, not run). One copy for hack/up.sh, hack/openai-client-test.sh and
# hack/lib/bench.sh (loadtest, peers).
#
#   PROCS_LOGS=DIR              where NAME.log files go (set before procs_start)
#   procs_start NAME CMD...     CMD in the background, output to $PROCS_LOGS/NAME.log
#   procs_pid NAME              the pid of NAME
#   procs_alive                 fail (via `fail`) when any started process exited
#   procs_wait_for WHAT CMD...  retry CMD every 0.1 s for PROCS_WAIT_S (30) seconds
#                               while everything lives; fail after that
#   procs_stop_all              TERM everything, KILL what is left after 5 s
#   procs_tail_logs LINES       the last LINES of every log, to stderr
#
# Processes are stopped by pid, never by name. The caller defines `fail MSG`
# (print and exit non-zero); a plain one is defined here when it has none.
# shellcheck shell=bash

declare -F fail >/dev/null || fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

procs_pids=()
procs_names=()

procs_start() {
  local name=$1
  shift
  # Emptied here, not by the background job's redirection: a waiter that
  # reads NAME's log right after this must not find an earlier process's.
  : >"$PROCS_LOGS/$name.log"
  "$@" >>"$PROCS_LOGS/$name.log" 2>&1 &
  procs_pids+=($!)
  procs_names+=("$name")
}

procs_pid() {
  local i
  for i in "${!procs_names[@]}"; do
    [ "${procs_names[$i]}" = "$1" ] && { echo "${procs_pids[$i]}"; return 0; }
  done
  return 1
}

procs_alive() {
  local i
  for i in "${!procs_pids[@]}"; do
    kill -0 "${procs_pids[$i]}" 2>/dev/null \
      || fail "${procs_names[$i]} exited early; last lines of $PROCS_LOGS/${procs_names[$i]}.log:
$(tail -n 20 "$PROCS_LOGS/${procs_names[$i]}.log" 2>/dev/null)"
  done
}

procs_wait_for() {
  local what=$1 _
  shift
  for _ in $(seq 1 $((${PROCS_WAIT_S:-30} * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    procs_alive
    sleep 0.1
  done
  fail "timed out after ${PROCS_WAIT_S:-30} s waiting for $what (logs in $PROCS_LOGS)"
}

procs_stop_all() {
  [ ${#procs_pids[@]} -gt 0 ] || return 0
  kill "${procs_pids[@]}" 2>/dev/null || true
  local _
  for _ in $(seq 1 50); do
    kill -0 "${procs_pids[@]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "${procs_pids[@]}" 2>/dev/null || true
  wait "${procs_pids[@]}" 2>/dev/null || true
  procs_pids=()
  procs_names=()
}

procs_tail_logs() {
  local log
  for log in "$PROCS_LOGS"/*.log; do
    [ -f "$log" ] || continue
    printf '\n--- last lines of %s ---\n' "$(basename "$log")" >&2
    tail -n "${1:-20}" "$log" >&2
  done
}
