#!/usr/bin/env bash
# Coverage-guided fuzzing of framing's decoders with libFuzzer (cargo-fuzz).
#
#   hack/fuzz.sh [TARGET ...] [-- SECONDS]     default: every target, 60 s each
#                                               (or $IOP_FUZZ_SECONDS each)
#
# Bounded: each target runs for SECONDS of wall time; one input taking over
# 10 s counts as a hang, and the run fails on the first crash, leak or hang
# (libFuzzer writes the input to framing/fuzz/artifacts/<target>/; add it to
# framing/fuzz/seeds/<target>/ once fixed, where framing/tests/fuzz_smoke.rs
# replays it on every `cargo test`). hack/test.sh calls this with a short
# budget so the targets cannot rot.
#
# Targets live in framing/fuzz/fuzz_targets/ and call framing::fuzzing, which
# `cargo test` also runs on the stable toolchain (framing/tests/fuzz_smoke.rs).
# cargo-fuzz passes flags rustc only accepts on nightly; the machine has one
# (stable) toolchain, so RUSTC_BOOTSTRAP=1 unlocks them for this build only.
set -euo pipefail
cd "$(dirname "$0")/../framing/fuzz"

targets=()
seconds=${IOP_FUZZ_SECONDS:-60}
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; seconds=${1:-$seconds}; break ;;
    *) targets+=("$1") ;;
  esac
  shift
done
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^framing-fuzz$')
fi

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
# A fresh clone has no corpus/ (git ignores it): libFuzzer needs the
# directory to exist; seeds/ is checked in and read-only to the run.

export RUSTC_BOOTSTRAP=1

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "==> fuzzing $t for ${seconds}s"
  cargo fuzz run "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
