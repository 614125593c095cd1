#!/usr/bin/env bash
# Coverage-guided fuzzing of framing's decoders with libFuzzer (cargo-fuzz).
#
#   hack/fuzz.sh [TARGET ...] [-- SECONDS]     default: every target, 60 s each
#
# Targets live in framing/fuzz/fuzz_targets/ and call framing::fuzzing, which
# `cargo test` also runs on the stable toolchain (framing/tests/fuzz_smoke.rs).
# cargo-fuzz passes flags rustc only accepts on nightly; the machine has one
# (stable) toolchain, so RUSTC_BOOTSTRAP=1 unlocks them for this build only.
set -euo pipefail
cd "$(dirname "$0")/../framing/fuzz"

targets=()
seconds=60
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; seconds=${1:-60}; break ;;
    *) targets+=("$1") ;;
  esac
  shift
done
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^framing-fuzz$')
fi

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

export RUSTC_BOOTSTRAP=1

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "==> fuzzing $t for ${seconds}s"
  cargo fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
