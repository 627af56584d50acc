#!/usr/bin/env bash
# Install what building and testing fabperf needs on Debian 12 / Ubuntu 22.04+.
# Idempotent. Needs root (or sudo).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PKGS=(
  # build: sideway's bindings need cmake + clang; pkg-config for -sys crates
  build-essential cmake clang libclang-dev pkg-config git curl ca-certificates
  # RDMA userspace (the binary dlopens libibverbs; perftest is the reference tool)
  libibverbs-dev librdmacm-dev rdma-core ibverbs-providers ibverbs-utils perftest
  # socket anchors and network namespaces
  iperf3 sockperf iproute2 ethtool procps util-linux jq
  # multi-node namespace testbed (sim/testbed.sh): DNS server for the agents' names
  dnsmasq-base
  # the policy-rule model (fabperf-tune's per-pod nftables chains, `policies` plans)
  nftables
  # soft-RoCE guest (sim/softroce.sh): QEMU, rootfs builder, initramfs tools
  qemu-system-x86 mmdebstrap kmod cpio zstd xz-utils debian-archive-keyring
  # cni-bench tests: the reference CNI plugins (bridge, macvlan, host-device, host-local ...) in /usr/lib/cni
  containernetworking-plugins
  # manifest validation (ci/k8s-validate.sh); the OpenMetrics parser check (ci/report-check.sh)
  python3 python3-venv python3-pip
  # fabperf report's HTML checked in a headless browser (ci/report-check.sh)
  chromium
)

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "installing Rust with rustup (https://rustup.rs)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
cargo --version
