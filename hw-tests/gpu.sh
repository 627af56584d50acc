#!/usr/bin/env bash
# Real-hardware acceptance test for GPU-memory verbs tests: fabperf against perftest built with
# CUDA, on a pair of GPU nodes with ConnectX NICs, host memory and GPU memory, on every rail.
#
# For each rail (a local NIC, the peer's NIC on the same rail, and the peer's address there) and
# for each of host memory and GPU memory (the GPU nearest each NIC, the same one for both tools:
# fabperf --mem cuda:<PCI address>, perftest --use_cuda_bus_id=<PCI address>; registered as a
# dma-buf where `fabperf detect` says the node can, like perftest --use_cuda_dmabuf, else through
# nvidia_peermem like plain --use_cuda):
#   - RDMA write bandwidth, FABPERF_HW_SIZE messages for FABPERF_HW_SECS seconds: fabperf's
#     average / ib_write_bw's average must be >= FABPERF_HW_MIN_RATIO;
#   - RDMA read latency, 2 bytes: fabperf's p50 / ib_read_lat's t_typical must be
#     <= FABPERF_HW_MAX_LAT_RATIO.
# Both tools run in the same invocation, one after the other, so a ratio compares like with like.
#
# Runs only when configured; otherwise prints why it skipped and exits 77 (ci/test.sh reports
# the step as SKIPPED, not passed).
# Configure:
#   FABPERF_HW_GPU_RAILS   the rails, space-separated, each LOCAL_DEV,PEER_DEV,PEER_ADDR, e.g.
#                          "mlx5_0,mlx5_0,10.1.0.2 mlx5_1,mlx5_1,10.1.1.2". PEER_ADDR is where the
#                          peer's `fabperf server` listens on that rail; start it there with
#                          MLX5_SCATTER_TO_CQE=0 in its environment (GPU-memory receives), e.g.
#                          MLX5_SCATTER_TO_CQE=0 fabperf server --bind 0.0.0.0 --token-file T
#   FABPERF_HW_SSH         ssh destination of the peer (perftest's servers are started there)
#   FABPERF_HW_TOKEN       token file for the agent (optional)
#   FABPERF_HW_SIZE        bandwidth message size (default 1M; perftest gets it in bytes)
#   FABPERF_HW_SECS        bandwidth duration, seconds (default 5)
#   FABPERF_HW_MIN_RATIO   bandwidth floor fabperf/perftest (default 0.95)
#   FABPERF_HW_MAX_LAT_RATIO  latency ceiling fabperf/perftest (default 1.10)
#   FABPERF_HW_PERFTEST_PORT  first TCP port for perftest (default 18515; one per run)
#   FABPERF_BIN            fabperf binary (default: fabperf on PATH); the peer runs `fabperf`
#                          and perftest from its PATH
# Exit status: 0 pass, 77 skipped (nothing ran), 1 a ratio missed its target, 2 a run failed.
set -euo pipefail

me=hw-tests/gpu.sh
skip() { echo "$me: skipped: $*"; exit 77; }
die() { echo "$me: run failed: $*" >&2; exit 2; }

[[ -n ${FABPERF_HW_GPU_RAILS:-} ]] || skip "FABPERF_HW_GPU_RAILS is not set (no GPU + ConnectX pair configured; see the header of this script)"
[[ -n ${FABPERF_HW_SSH:-} ]] || skip "FABPERF_HW_SSH is not set (perftest's servers are started on the peer over ssh)"
FABPERF=${FABPERF_BIN:-fabperf}
command -v "$FABPERF" >/dev/null || die "fabperf binary '$FABPERF' not found"
command -v jq >/dev/null || die "jq is needed"
for t in ib_write_bw ib_read_lat; do
    command -v $t >/dev/null || skip "perftest's $t is not installed"
done
ib_write_bw --help 2>&1 | grep -q -- --use_cuda_bus_id ||
    skip "this perftest was built without CUDA (ib_write_bw --help has no --use_cuda_bus_id)"
inv=$("$FABPERF" detect --json) || die "fabperf detect"
[[ $(jq '.gpus | length' <<<"$inv") -gt 0 ]] || skip "no NVIDIA GPU on this host (fabperf detect lists none)"
[[ $(jq '.rdma_devices | length' <<<"$inv") -gt 0 ]] || skip "no RDMA device on this host"
peer_inv=$(ssh -o BatchMode=yes "$FABPERF_HW_SSH" fabperf detect --json) ||
    die "ssh $FABPERF_HW_SSH fabperf detect --json"

SIZE=${FABPERF_HW_SIZE:-1M}
SECS=${FABPERF_HW_SECS:-5}
MIN_RATIO=${FABPERF_HW_MIN_RATIO:-0.95}
MAX_LAT_RATIO=${FABPERF_HW_MAX_LAT_RATIO:-1.10}
port=${FABPERF_HW_PERFTEST_PORT:-18515}
size_bytes=$(numfmt --from=iec "${SIZE%B}") || die "FABPERF_HW_SIZE=$SIZE is not a size"
export MLX5_SCATTER_TO_CQE=0
token=()
[[ -n ${FABPERF_HW_TOKEN:-} ]] && token=(--token-file "$FABPERF_HW_TOKEN")

# The GPU nearest an RDMA device in an inventory (PCI address), and how to register.
nearest_gpu() { jq -r --arg d "$2" '[.gpus[] | select(.nearest_rdma | index($d))][0].pci.address // empty' <<<"$1"; }
reg_of() { [[ $(jq -r '.gpudirect.dmabuf' <<<"$1") == true ]] && echo dmabuf || echo peermem; }
local_reg=$(reg_of "$inv")
peer_reg=$(reg_of "$peer_inv")
reg=$local_reg
[[ $local_reg == "$peer_reg" ]] || reg=peermem

# perftest: start the server on the peer, run the client here, print one figure
# ($1 tool, $2 column of the data row, $3 peer device, $4 peer address, then shared args and
# "--" then the local-only and peer-only CUDA args).
perftest() {
    local tool=$1 col=$2 pdev=$3 paddr=$4 ldev=$5 lcuda=$6 pcuda=$7; shift 7
    port=$((port + 1))
    ssh -o BatchMode=yes "$FABPERF_HW_SSH" "MLX5_SCATTER_TO_CQE=0 $tool -d $pdev $pcuda -p $port $*" >/dev/null 2>&1 &
    local srv=$!
    sleep 2
    local out
    out=$($tool -d "$ldev" $lcuda -p $port "$@" "$paddr" 2>&1) || { wait $srv || true; die "$tool -d $ldev $lcuda $* $paddr: $out"; }
    wait $srv || true
    awk -v c="$col" '/^ *#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print $c; exit }' <<<"$out"
}

status=0
printf '%-8s %-5s %-9s %-14s %12s %12s %7s\n' rail mem reg gpu fabperf perftest ratio
rail=0
for spec in $FABPERF_HW_GPU_RAILS; do
    IFS=, read -r ldev pdev paddr <<<"$spec"
    [[ -n $ldev && -n $pdev && -n $paddr ]] || die "rail '$spec' is not LOCAL_DEV,PEER_DEV,PEER_ADDR"
    lgpu=$(nearest_gpu "$inv" "$ldev")
    pgpu=$(nearest_gpu "$peer_inv" "$pdev")
    for mem in host cuda; do
        fmem=(--mem host) lcuda="" pcuda="" r=-
        if [[ $mem == cuda ]]; then
            [[ -n $lgpu && -n $pgpu ]] || die "no GPU near $ldev here or near $pdev on the peer"
            r=$reg
            fmem=(--mem "cuda:$lgpu" --remote-mem cuda --gpu-reg "$reg")
            lcuda="--use_cuda_bus_id=$lgpu" pcuda="--use_cuda_bus_id=$pgpu"
            if [[ $reg == dmabuf ]]; then lcuda+=" --use_cuda_dmabuf"; pcuda+=" --use_cuda_dmabuf"; fi
        fi
        fbw=$("$FABPERF" rdma-bw "$paddr" "${token[@]}" --device "$ldev" --op write --size "$SIZE" \
            --duration "$SECS" "${fmem[@]}" --json | jq -r 'select(.stream == null) | .bw_gbps') ||
            die "fabperf rdma-bw $paddr --device $ldev ${fmem[*]}"
        pbw=$(perftest ib_write_bw 4 "$pdev" "$paddr" "$ldev" "$lcuda" "$pcuda" \
            -s "$size_bytes" -D "$SECS" --report_gbits)
        ratio=$(awk -v a="$fbw" -v b="$pbw" 'BEGIN { printf "%.3f", a / b }')
        printf '%-8s %-5s %-9s %-14s %12s %12s %7s\n' "$rail:$ldev" "$mem" "$r" "${lgpu:--}" \
            "${fbw} Gb/s" "${pbw} Gb/s" "$ratio"
        awk -v x="$ratio" -v m="$MIN_RATIO" 'BEGIN { exit !(x >= m) }' || { echo "  MISSED (bandwidth >= $MIN_RATIO x perftest)"; status=1; }
        flat=$("$FABPERF" rdma-lat "$paddr" "${token[@]}" --device "$ldev" --op read --size 2 \
            --iterations 10000 "${fmem[@]}" --json | jq -r '.lat_us.p50') ||
            die "fabperf rdma-lat $paddr --device $ldev ${fmem[*]}"
        plat=$(perftest ib_read_lat 5 "$pdev" "$paddr" "$ldev" "$lcuda" "$pcuda" -s 2 -n 10000)
        lratio=$(awk -v a="$flat" -v b="$plat" 'BEGIN { printf "%.3f", a / b }')
        printf '%-8s %-5s %-9s %-14s %12s %12s %7s\n' "" "" "read lat" "" "${flat} us" "${plat} us" "$lratio"
        awk -v x="$lratio" -v m="$MAX_LAT_RATIO" 'BEGIN { exit !(x <= m) }' || { echo "  MISSED (latency <= $MAX_LAT_RATIO x perftest)"; status=1; }
    done
    rail=$((rail + 1))
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ $status == 0 ]] && echo "$me: PASS" || { echo "$me: FAIL: a ratio missed its target" >&2; exit 1; }
