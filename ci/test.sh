#!/usr/bin/env bash
# fabperf's whole test suite. Run after ./ci/install-deps.sh (or ./install.sh).
#   ./ci/test.sh            # everything: lint, unit + loopback tests, manifests, namespace testbed, soft-RoCE guest
#   ./ci/test.sh --no-vm    # skip the soft-RoCE QEMU guest (about 10 minutes under TCG)
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
step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo test --workspace"
cargo test --workspace --locked --no-fail-fast
step "fuzzing (libFuzzer targets in fuzz/; FUZZ_SECONDS=${FUZZ_SECONDS:-30} per target)"
./ci/fuzz.sh
step "Kubernetes manifests against upstream schemas"
./ci/k8s-validate.sh
step "real ConnectX pair (hw-tests; skipped with the reason unless FABPERF_HW_PEER is set)"
./hw-tests/connectx.sh
step "multi-node testbed: namespaces, shaped links, overlay, DNS, degrade (sim/testbed-test.sh)"
./sim/testbed-test.sh
step "fabperf run on the testbed: mesh + incast, SIGKILL mid-run and resume, host vs overlay, HTTP via the overlay and a service address (sim/testbed-run-test.sh)"
./sim/testbed-run-test.sh
step "fabperf mtu on the testbed: plain and VXLAN paths, a switch port below the interfaces' MTU, doctor's mtu-mismatch (sim/testbed-mtu-test.sh)"
./sim/testbed-mtu-test.sh
if [ "$VM" = 1 ]; then
  step "soft-RoCE guest: RDMA tests and fabperf vs perftest"
  ./sim/softroce.sh
fi
step "all tests passed"
