#!/usr/bin/env bash
# Run every libFuzzer target (fuzz/fuzz_targets/) for a bounded time each,
# starting from the committed seed corpus (fuzz/corpus/<target>/). New inputs
# found go to a scratch directory, not into the repository.
#   ./ci/fuzz.sh                        # every target, FUZZ_SECONDS (8) each
#   FUZZ_SECONDS=10 ./ci/fuzz.sh frame udp_datagrams
# A crash stops the script non-zero; the input is kept in
# fuzz/artifacts/<target>/ (reproduce: fuzz/target/x86_64-unknown-linux-gnu/release/<target> FILE,
# or `cargo fuzz run <target> FILE` where cargo-fuzz is installed).
#
# The targets are built with plain cargo and the coverage instrumentation
# cargo-fuzz adds (SanitizerCoverage through stable -C flags), without
# AddressSanitizer: the code under test is safe Rust, where what fuzzing
# finds is panics (overflow and debug assertions are on), and this keeps CI
# free of a cargo-fuzz install and a sanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
SECS="${FUZZ_SECONDS:-8}"
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
FLAGS=(
  -Cpasses=sancov-module
  -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
  -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares
  --cfg fuzzing
  -Cdebug-assertions
  -Coverflow-checks
  -Cforce-frame-pointers
)
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^fabperf-fuzz$')
fi
echo "building ${#targets[@]} fuzz targets"
# --target keeps the instrumentation off build scripts and proc macros.
RUSTFLAGS="${FLAGS[*]}" cargo build --manifest-path fuzz/Cargo.toml --locked --release \
  --target "$TRIPLE" $(printf -- '--bin %s ' "${targets[@]}")
bin=fuzz/target/$TRIPLE/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  echo "==> fuzz $t for ${SECS}s"
  mkdir -p "$work/$t" "fuzz/artifacts/$t"
  if ! "$bin/$t" "$work/$t" "fuzz/corpus/$t" -max_total_time="$SECS" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
    >"$work/$t.log" 2>&1; then
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|^error' "$work/$t.log" | head -20 >&2 || tail -20 "$work/$t.log" >&2
    echo "fuzz target $t failed; the input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$work/$t.log" || true
done
rmdir fuzz/artifacts/* fuzz/artifacts 2>/dev/null || true
echo "fuzzing: ${#targets[@]} targets, ${SECS}s each, no crash"
