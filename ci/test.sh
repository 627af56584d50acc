#!/usr/bin/env bash
# fabperf's whole test suite. Run after ./ci/install-deps.sh (or ./install.sh).
#   ./ci/test.sh            # everything: doc links, lint, unit + loopback tests, manifests, namespace testbed, soft-RoCE guest
#   ./ci/test.sh --no-vm    # skip the soft-RoCE QEMU guest (about 10 minutes under TCG)
# Ends with a summary: each step PASSED, SKIPPED (with the reason: a step
# that exits 77 ran nothing) or FAILED. Stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
VM=1
for a in "$@"; do
  case "$a" in
    --no-vm) VM=0 ;;
    *) echo "usage: $0 [--no-vm]" >&2; exit 2 ;;
  esac
done

# Builds are made once here: incremental caches would only take disk space.
export CARGO_INCREMENTAL=0

# A full run from a clean clone builds about 6.3 GiB (test binaries 3.4, the
# release build 1.9, the fuzz targets 1.0); a disk that fills while the linker
# writes ends in a bus error that names nothing. Say it before building.
disk_check() {
  local target=${CARGO_TARGET_DIR:-target} need_gib=${FABPERF_CI_NEED_GIB:-7} have_kib used_kib
  mkdir -p "$target"
  have_kib=$(df -Pk "$target" | awk 'NR == 2 { print $4 }')
  used_kib=$({ du -sk "$target" fuzz/target 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }')
  # What is already built counts towards the need.
  if [ $((have_kib + used_kib)) -lt $((need_gib * 1024 * 1024)) ]; then
    echo "ci/test.sh: $((have_kib / 1048576)) GiB free on the filesystem of $target ($(df -P "$target" | awk 'NR == 2 { print $6 }')) and $((used_kib / 1048576)) GiB already built;" >&2
    echo "  a full run needs about $need_gib GiB. Free space there, or point CARGO_TARGET_DIR at a larger filesystem" >&2
    echo "  (FABPERF_CI_NEED_GIB overrides the estimate)." >&2
    exit 1
  fi
}
disk_check

SUMMARY=()
summary() {
  printf '\n==> summary\n'
  local line
  for line in "${SUMMARY[@]}"; do printf '  %s\n' "$line"; done
}

# step NAME CMD...: run CMD, record PASSED / SKIPPED (exit 77) / FAILED.
step() {
  local name=$1 rc=0 t0=$SECONDS log
  shift
  printf '\n==> %s\n' "$name"
  log=$(mktemp)
  "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  local secs=$((SECONDS - t0))
  case $rc in
    0) SUMMARY+=("PASSED   $name (${secs}s)") ;;
    77)
      local why
      why=$(grep -m1 -o 'skipped: .*' "$log" | sed 's/^skipped: //' || true)
      SUMMARY+=("SKIPPED  $name: ${why:-no reason given}")
      ;;
    *)
      SUMMARY+=("FAILED   $name (exit $rc, ${secs}s)")
      rm -f "$log"
      summary
      exit "$rc"
      ;;
  esac
  rm -f "$log"
}

step "Markdown links and the docs/*.md named in code resolve (ci/doc-links.sh)" ./ci/doc-links.sh
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets --locked -- -D warnings
step "rust-version is true for the locked dependencies" ./ci/rust-version.sh
step "cargo test --workspace (RDMA device tests are ignored here; the guest runs them)" \
  cargo test --workspace --locked --no-fail-fast
step "fuzzing (libFuzzer targets in fuzz/; FUZZ_SECONDS=${FUZZ_SECONDS:-8} per target)" ./ci/fuzz.sh
step "Kubernetes manifests against upstream schemas" ./ci/k8s-validate.sh
step "fabperf report: HTML in headless Chromium, OpenMetrics through a real parser, gates (ci/report-check.sh)" \
  ./ci/report-check.sh
step "real ConnectX pair (hw-tests; SKIPPED unless FABPERF_HW_PEER is set)" ./hw-tests/connectx.sh
step "GPU + ConnectX pairs, fabperf vs perftest --use_cuda per rail (hw-tests; SKIPPED unless FABPERF_HW_GPU_RAILS is set)" \
  ./hw-tests/gpu.sh
step "multi-node testbed: namespaces, shaped links, overlay, DNS, degrade (sim/testbed-test.sh)" \
  ./sim/testbed-test.sh
step "fabperf run on the testbed: mesh + incast, SIGKILL mid-run and resume, host vs overlay, HTTP via the overlay and a service address (sim/testbed-run-test.sh)" \
  ./sim/testbed-run-test.sh
step "pod-to-service on the testbed: each kind through a single-endpoint service 10 of 10, the balancing pitfall named, the pod-vs-service plan (sim/testbed-service-test.sh)" \
  ./sim/testbed-service-test.sh
step "mesh verdicts on the testbed: an edited plan's stale cells left out, a transmit-only fault named, failed re-tests unconfirmed until --retry-failed (sim/testbed-mesh-test.sh)" \
  ./sim/testbed-mesh-test.sh
step "rails on the testbed: 4 nodes x 4 rails, rail i paired with rail i at one start, a degraded node rail and a rail degraded on every node named by the mesh summary (sim/testbed-rails-test.sh, ~50 s)" \
  ./sim/testbed-rails-test.sh
step "6-node bidirectional incast on the testbed: one start, per-direction aggregates over the common interval within the shaped link (sim/testbed-incast-test.sh, ~15 s)" \
  ./sim/testbed-incast-test.sh
step "tuning levels and policy rules on the testbed, restore verified (sim/testbed-tune-test.sh)" \
  ./sim/testbed-tune-test.sh
step "fabperf mtu on the testbed: plain and VXLAN paths, a switch port below the interfaces' MTU, doctor's mtu-mismatch (sim/testbed-mtu-test.sh)" \
  ./sim/testbed-mtu-test.sh
# Fault localization at N = 32 (~5 min): rate and delay faults, the kinds the targets
# name; tx-half and loss are for runs by hand (docs/testbed.md#fault-localization).
localize() {
  if [ "${FABPERF_CI_LOCALIZE:-1}" = 0 ]; then
    echo "skipped: FABPERF_CI_LOCALIZE=0"
    return 77
  fi
  timeout "${LOCALIZE_TIMEOUT:-1200}" ./sim/testbed-localize-test.sh --nodes 32 --seeds "${LOCALIZE_SEEDS:-1}" \
    --kinds "${LOCALIZE_KINDS:-rate,delay}"
}
step "fault localization on the testbed: 32 nodes, 4 injected faults (rate /5, delay +1 ms), mesh-summary scored against the truth, precision and recall 1.0 (sim/testbed-localize-test.sh, ~5 min; FABPERF_CI_LOCALIZE=0 skips it; LOCALIZE_SEEDS, LOCALIZE_KINDS, LOCALIZE_TIMEOUT)" \
  localize
if [ "$VM" = 1 ]; then
  step "soft-RoCE guest: RDMA device tests, a two-rail rdma-bw/rdma-lat plan, fabperf vs perftest" ./sim/softroce.sh
else
  SUMMARY+=("SKIPPED  soft-RoCE guest: --no-vm")
fi
summary
echo "all steps passed or were skipped"
