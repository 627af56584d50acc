#!/bin/bash
# clock-ab.sh [ROUNDS]: fabperf against perftest on the soft-RoCE link under
# the TSC clocksource and under HPET, switched by hand in one boot, so the
# cost of a slow system clock shows as a ratio. Run it in the guest:
#   ./sim/softroce.sh -- sim/guest/clock-ab.sh 3
# Each round: for tsc, then hpet: write and send latency (2 B x 1000, p50 /
# t_typical) and 64 KiB write bandwidth (fabperf --warmup 1 --duration 3 vs
# ib_write_bw -D 5), the tool order alternating by round. At the end, what
# fabperf says about the clock under hpet (its record's warning). The
# clocksource is put back to what it was.
set -u
ROUNDS=${1:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "usage: clock-ab.sh [ROUNDS]" >&2; exit 2; }
CS=/sys/devices/system/clocksource/clocksource0/current_clocksource
for c in tsc hpet; do
    grep -qw "$c" "${CS%current_clocksource}available_clocksource" ||
        { echo "clock-ab: clocksource $c not available here" >&2; exit 2; }
done
ORIG=$(cat "$CS")
trap 'echo "$ORIG" >"$CS"' EXIT
G=$(dirname "$(readlink -f "$0")")
PEER=$FABPERF_RDMA_PEER DEV=$FABPERF_RDMA_DEVICE PDEV=$FABPERF_RDMA_PEER_DEVICE
port=21000 N=1000

pt_lat() {
    port=$((port + 1))
    "$G/peer.sh" "ib_$1_lat" -d "$PDEV" -x 1 -p $port -F -s 2 -n $N >/tmp/clock-ab.srv 2>&1 &
    sleep 0.5
    "ib_$1_lat" -d "$DEV" -x 1 -p $port -F -s 2 -n $N "$PEER" 2>&1 | awk '$1 == 2 && NF >= 5 { print $5 }'
    wait
}
fb_lat() {
    fabperf rdma-lat "$PEER" --device "$DEV" --gid-index 1 --op "$1" --size 2 --iterations $N --json 2>/dev/null |
        jq -r 'select(.stream == null) | .lat_us.p50'
}
pt_bw() {
    port=$((port + 1))
    "$G/peer.sh" ib_write_bw -d "$PDEV" -x 1 -p $port -F -s 65536 -D 5 >/tmp/clock-ab.srv 2>&1 &
    sleep 0.5
    ib_write_bw -d "$DEV" -x 1 -p $port -F -s 65536 -D 5 "$PEER" 2>&1 |
        awk '$1 == 65536 && NF >= 5 { printf "%.4f", $4 * 1048576 * 8 / 1e9 }'
    wait
}
fb_bw() {
    fabperf rdma-bw "$PEER" --device "$DEV" --gid-index 1 --op write --size 65536 --warmup 1 --duration 3 --json 2>/dev/null |
        jq -r 'select(.stream == null) | .bw_gbps'
}
pair() { # name perftest-cmd fabperf-cmd: both, in the round's order, and the ratio
    local name=$1 a b
    if ((r % 2)); then a=$($2); b=$($3); else b=$($3); a=$($2); fi
    printf 'round %d %-4s %-9s perftest %8s fabperf %8.4f ratio %s\n' "$r" "$cs" "$name" "$a" "$b" \
        "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "?" }')"
}
for ((r = 1; r <= ROUNDS; r++)); do
    for cs in tsc hpet; do
        echo "$cs" >"$CS"
        pair write-lat "pt_lat write" "fb_lat write"
        pair send-lat "pt_lat send" "fb_lat send"
        pair write-bw pt_bw fb_bw
    done
done
echo hpet >"$CS"
echo "fabperf under hpet says:"
fabperf rdma-lat "$PEER" --device "$DEV" --gid-index 1 --op write --size 2 --iterations 300 --json 2>/dev/null |
    jq -r 'select(.stream == null) | .warnings[]'
