#!/usr/bin/env bash
# Real-hardware acceptance test for fabperf's RDMA engine (ConnectX pair).
#
# Runs only when an RDMA NIC pair is configured; otherwise prints why it
# skipped and exits 77 (ci/test.sh reports the step as SKIPPED, not passed).
# Configure:
#   FABPERF_HW_PEER      host (or host:port) of a `fabperf server` on the other node,
#                        started there with its RDMA device, e.g.
#                        fabperf server --bind 0.0.0.0 --token-file T --rdma-device mlx5_0
#   FABPERF_HW_DEVICE    local RDMA device (e.g. mlx5_0); default: fabperf's rule
#   FABPERF_HW_TOKEN     token file for the agent (optional)
#   FABPERF_HW_MIN_GBPS  bandwidth floor at 64 KiB RDMA write (default 97.5: 100 GbE,
#                        IB MTU 4096 wire limit is 98.0)
#   FABPERF_HW_MAX_LAT_US  p50 ceiling for send/write latency (default 2.5; read gets +2)
#   FABPERF_BIN          fabperf binary (default: fabperf on PATH)
# Exit status: 0 pass, 77 skipped (nothing ran), 1 a figure missed its target,
# 2 a run failed.
set -euo pipefail

skip() { echo "hw-tests/connectx.sh: skipped: $*"; exit 77; }
fail() { echo "hw-tests/connectx.sh: FAIL: $*" >&2; exit 1; }

[[ -n ${FABPERF_HW_PEER:-} ]] || skip "FABPERF_HW_PEER is not set (no RDMA NIC pair configured; see the header of this script)"
FABPERF=${FABPERF_BIN:-fabperf}
command -v "$FABPERF" >/dev/null || { echo "fabperf binary '$FABPERF' not found" >&2; exit 2; }
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 2; }
[[ -d /sys/class/infiniband ]] && [[ -n $(ls /sys/class/infiniband 2>/dev/null) ]] ||
    skip "no RDMA device on this host (/sys/class/infiniband is empty)"

MIN_GBPS=${FABPERF_HW_MIN_GBPS:-97.5}
MAX_LAT=${FABPERF_HW_MAX_LAT_US:-2.5}
common=("$FABPERF_HW_PEER")
[[ -n ${FABPERF_HW_DEVICE:-} ]] && common+=(--device "$FABPERF_HW_DEVICE")
[[ -n ${FABPERF_HW_TOKEN:-} ]] && common+=(--token-file "$FABPERF_HW_TOKEN")

run() { # prints JSON lines; exits 2 on failure
    local out
    if ! out=$("$FABPERF" "$@" --json); then
        echo "hw-tests/connectx.sh: run failed: fabperf $*" >&2
        exit 2
    fi
    printf '%s\n' "$out"
}

status=0
bw=$(run rdma-bw "${common[@]}" --op write --size 65536 --qps 2 --duration 10 | jq -r 'select(.stream == null) | .bw_gbps')
echo "rdma-bw write 64 KiB, 2 QPs, 10 s: ${bw} Gbit/s (target >= ${MIN_GBPS})"
awk -v a="$bw" -v b="$MIN_GBPS" 'BEGIN { exit !(a >= b) }' || { echo "  MISSED"; status=1; }

for op in send write read; do
    limit=$MAX_LAT
    [[ $op == read ]] && limit=$(awk -v m="$MAX_LAT" 'BEGIN { print m + 2 }')
    p50=$(run rdma-lat "${common[@]}" --op "$op" --size 2 --iterations 100000 | jq -r '.lat_us.p50')
    echo "rdma-lat $op 2 B: p50 ${p50} us (target <= ${limit})"
    awk -v a="$p50" -v b="$limit" 'BEGIN { exit !(a <= b) }' || { echo "  MISSED"; status=1; }
done
[[ $status == 0 ]] && echo "hw-tests/connectx.sh: PASS" || fail "a figure missed its target"
