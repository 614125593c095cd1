#!/usr/bin/env bash
# Runs every check IOP has, the same way locally and in CI (.ci/run calls this).
#
#   hack/test.sh            everything
#   IOP_TEST_SKIP_LINT=1    skip fmt, clippy and doc (quick local iterations)
#   IOP_TEST_TIMEOUT=30m    the bound on each `cargo test` run (a hang fails
#                           with the hung test named instead of running on)
#
# Installs what it needs (curl) when missing; hack/openai-client-test.sh
# pip-installs its pinned Python packages into target/py-venv. Asserts no wall-clock speed:
# benches are compiled and run once in test mode; their numbers live in
# bench-results/ and come from `cargo bench`.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
# Each step names the seconds since the start, so a slow CI run shows where
# its time went (the cold-run goal is 30 min).
step() { printf '\n==> [%ss] %s\n' "$((SECONDS - started))" "$*"; }

need() {
  # need CMD DEBIAN_PACKAGE: install the package when CMD is missing.
  command -v "$1" >/dev/null 2>&1 && return 0
  step "installing $2 (for $1)"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "$2" >/dev/null
}
need curl curl

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
export RUST_BACKTRACE=1
# A one-shot run gains nothing from incremental state (3.5 GB of target/
# in a fresh clone), and CI runners' disks are not large. Locally,
# CARGO_INCREMENTAL=1 keeps it (and the workspace crates' builds shared
# with plain `cargo test`).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# A cold run grows target/ (and framing/fuzz/target) to about 5 GB. A full
# disk shows up late and obscurely (a linker's bus error), so say it first.
# (A df that cannot tell is no reason to stop the run.)
need_gb=6
free_gb=$(df -Pk . 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }') || free_gb=
if [ -n "$free_gb" ] && [ "$free_gb" -lt "$need_gb" ]; then
  printf 'warning: %s GB free here; a cold run of hack/test.sh needs about %s GB\n' \
    "$free_gb" "$need_gb" >&2
fi

if [ -z "${IOP_TEST_SKIP_LINT:-}" ]; then
  step "cargo fmt --check"
  cargo fmt --all -- --check

  step "cargo clippy (all targets, -D warnings)"
  cargo clippy --workspace --all-targets --locked -- -D warnings

  # Public docs must build without a warning (a link to a private item,
  # a broken link) so that they cannot rot.
  step "cargo doc (the workspace's crates, -D warnings)"
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

  # The benchmark scripts (peers, load tests) are not all run here: at
  # least they must parse.
  step "bash -n: every script under hack/"
  find hack -name '*.sh' -print0 | xargs -0 -n 1 bash -n
fi

step "cargo build (binaries the end-to-end tests start as processes)"
cargo build --workspace --bins --locked

# A test that hangs would otherwise hold the run until CI's own limit (90
# min) and say nothing; this step takes ~4 min cold, so a bound of
# IOP_TEST_TIMEOUT (default 30m) only ever stops a hang, and says so. The
# hung test is the one libtest named above as "running for over 60 seconds".
test_timeout=${IOP_TEST_TIMEOUT:-30m}
bounded() {
  local rc=0
  timeout --kill-after=30s "$test_timeout" "$@" || rc=$?
  # 124: stopped at the bound; 137: killed 30 s later, as it ignored TERM.
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    printf 'FAIL: `%s` did not finish within %s: a test hangs (libtest names it above, "has been running for over 60 seconds")\n' \
      "$*" "$test_timeout" >&2
  fi
  return "$rc"
}

step "cargo test (unit, integration, property, fuzz smoke; benches run once in test mode)"
bounded cargo test --workspace --all-targets --locked
bounded cargo test --workspace --doc --locked

step "mock provider answers curl -N (OpenAI SSE and Ollama NDJSON)"
hack/smoke-mock-provider.sh

step "the official openai Python client against Edge + Node + mock (perf/py)"
hack/openai-client-test.sh

# Bounded coverage-guided fuzzing of every decoder that reads the network
# (frames, SSE, HTTP heads, chunked bodies): IOP_FUZZ_SECONDS per target
# (default 45: 4 targets, ~3 min plus the first build); 0 only checks that
# the harness compiles. A crash, leak or hang fails the run.
fuzz_seconds=${IOP_FUZZ_SECONDS:-45}
if [ "$fuzz_seconds" = 0 ]; then
  step "fuzz harness compiles (IOP_FUZZ_SECONDS=0; see hack/fuzz.sh)"
  cargo check --quiet --manifest-path framing/fuzz/Cargo.toml --target-dir target/fuzz-check
else
  step "fuzz: every framing target for ${fuzz_seconds}s (hack/fuzz.sh)"
  IOP_FUZZ_SECONDS="$fuzz_seconds" hack/fuzz.sh
fi

# Fault scenarios across network namespaces (partition, SIGKILL of a node and
# of the Edge, 100-node reconnect herd, provider crash/stall, slow clients,
# 1k idle streams): about 2 min. Skipped, with a message, without root/netns.
step "chaos scenarios on a netns multi-host bed (hack/netns/chaos.sh)"
hack/netns/chaos.sh

step "k6 smoke: 10 s of streaming chat through Edge + Node, error rate 0 (hack/loadtest.sh smoke)"; hack/loadtest.sh smoke
step "k6 smoke, the link under mTLS: 5 s, error rate 0 (LINK_TLS=1 hack/loadtest.sh smoke 5s)"
LINK_TLS=1 hack/loadtest.sh smoke 5s
printf '\nall checks passed in %ss\n' "$((SECONDS - started))"
