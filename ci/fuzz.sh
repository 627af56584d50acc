#!/usr/bin/env bash
# Run every cargo-fuzz target (fuzz/fuzz_targets/) for a bounded time each,
# starting from the committed seed corpus (fuzz/corpus/<target>/). New
# inputs found go to a scratch directory, not into the repository.
#   ./ci/fuzz.sh                 # every target, 60 s each
#   FUZZ_SECONDS=10 ./ci/fuzz.sh frame udp_datagrams
# A crash stops the script non-zero; the input is kept in
# fuzz/artifacts/<target>/ (reproduce: cargo fuzz run <target> <file>).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
SECS="${FUZZ_SECONDS:-60}"
# cargo fuzz builds with sanitizer flags that are unstable; the stable
# toolchain accepts them when told it is bootstrapping.
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: run ./ci/install-deps.sh (or cargo install cargo-fuzz --locked)" >&2
  exit 1
fi
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  echo "==> fuzz $t for ${SECS}s"
  mkdir -p "$work/$t"
  if ! cargo fuzz run -O --debug-assertions "$t" "$work/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    >"$work/$t.log" 2>&1; then
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|^error' "$work/$t.log" | head -20 >&2 || tail -20 "$work/$t.log" >&2
    echo "fuzz target $t failed; the input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$work/$t.log" || true
done
echo "fuzzing: ${#targets[@]} targets, ${SECS}s each, no crash"
