#!/usr/bin/env bash
# Where one TCP stream's cycles go, for fabperf and the anchor tools, on the
# path bench/compare.sh measures: a veth pair between two network namespaces
# (or loopback), client on CPU 0, server on CPU 1, both SCHED_FIFO 20.
# For each tool it prints the rate and, over one second in the middle of the
# run (system-wide, both CPUs):
#   - wake-ups (sched:sched_wakeup) and reschedule IPIs received per CPU,
#     and per GB moved;
#   - data segments handed to the veth (net:net_dev_xmit, len > 1000) by
#     each CPU: the sender's own CPU or the CPU that processed an ACK;
#   - TCP retransmissions (tcp:tcp_retransmit_skb);
#   - a cpu-clock profile (perf record -a, 999 Hz, no call graphs): each
#     CPU's idle share and its five hottest kernel symbols.
# Software events only: this works in VMs without hardware PMU counters
# (there `perf stat -e instructions` says "not supported").
#
#   sudo bench/tcp-profile.sh [--path veth|loopback] [--secs S] [--fabperf PATH]
#                             [--tools "default copy iperf2 iperf3"]
#
# Needs: root, perf (linux-perf), iperf, iperf3, jq, util-linux, iproute2,
# and a release build of fabperf (built here unless --fabperf).

set -euo pipefail

PATH_KIND=veth
SECS=6
FABPERF=""
TOOLS="default copy iperf2 iperf3"
while [ $# -gt 0 ]; do
    case "$1" in
        --path) PATH_KIND="$2"; shift 2 ;;
        --secs) SECS="$2"; shift 2 ;;
        --fabperf) FABPERF="$2"; shift 2 ;;
        --tools) TOOLS="$2"; shift 2 ;;
        -h | --help) sed -n '2,/^$/p' "$0"; exit 0 ;;
        *) echo "tcp-profile.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
die() { echo "tcp-profile.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (namespaces, perf -a)"
case $PATH_KIND in veth | loopback) ;; *) die "--path takes veth or loopback" ;; esac
[[ $SECS =~ ^[3-9]$|^[1-9][0-9]+$ ]] || die "--secs wants whole seconds, at least 3"
for t in perf iperf iperf3 jq taskset chrt ip; do
    command -v "$t" >/dev/null || die "$t is missing: apt-get install -y linux-perf iperf iperf3 jq util-linux iproute2"
done
HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$FABPERF" ]; then
    (cd "$HERE" && cargo build --release -q -p fabperf) || die "cargo build failed"
    FABPERF="${CARGO_TARGET_DIR:-$HERE/target}/release/fabperf"
fi
[ -x "$FABPERF" ] || die "no fabperf binary at $FABPERF"

NS_A=fpprofA
NS_B=fpprofB
TMP=$(mktemp -d)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

if [ "$PATH_KIND" = veth ]; then
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    ip netns add "$NS_A"
    ip netns add "$NS_B"
    ip link add fppA type veth peer name fppB
    ip link set fppA netns "$NS_A"
    ip link set fppB netns "$NS_B"
    ip -n "$NS_A" addr add 10.199.78.1/24 dev fppA
    ip -n "$NS_B" addr add 10.199.78.2/24 dev fppB
    for n in "$NS_A" "$NS_B"; do ip -n "$n" link set lo up; done
    ip -n "$NS_A" link set fppA up
    ip -n "$NS_B" link set fppB up
    IP=10.199.78.2
    CLI=(ip netns exec "$NS_A")
    SRV=(ip netns exec "$NS_B")
    DEV=fppA
else
    IP=127.0.0.1
    CLI=()
    SRV=()
    DEV=lo
fi
P_FAB=$((20000 + RANDOM % 20000))
P_I3=$((P_FAB + 1))
P_I2=$((P_FAB + 2))
srv() { "${SRV[@]}" chrt -f 20 taskset -c 1 "$@" >/dev/null 2>&1 & PIDS+=($!); }
bind=(--bind "$IP" --port "$P_FAB" --quiet)
[ "$IP" != 127.0.0.1 ] && bind+=(--insecure)
srv "$FABPERF" server "${bind[@]}"
srv iperf3 -s -B "$IP" -p "$P_I3"
srv iperf -s -B "$IP" -p "$P_I2"
sleep 1

client() { # tool -> runs the client, prints Gbit/s
    local c=("${CLI[@]}" chrt -f 20 taskset -c 0)
    case $1 in
        default) "${c[@]}" "$FABPERF" tcp-bw "$IP" -p "$P_FAB" -t "$SECS" --omit 1 --json | jq -s '.[0].bw_gbps' ;;
        copy) "${c[@]}" "$FABPERF" tcp-bw "$IP" -p "$P_FAB" -t "$SECS" --omit 1 --copy --json | jq -s '.[0].bw_gbps' ;;
        iperf3) "${c[@]}" iperf3 -c "$IP" -p "$P_I3" -l 128K -t "$((SECS + 1))" -O 1 -J | jq '.end.sum_received.bits_per_second / 1e9' ;;
        iperf2) "${c[@]}" iperf -c "$IP" -p "$P_I2" -l 128K -t "$SECS" -y C | awk -F, '{s += $9} END {print s / 1e9}' ;;
        *) die "unknown tool $1 (default, copy, iperf2, iperf3)" ;;
    esac
}

echo "# $PATH_KIND, $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) CPUs, tcp_congestion_control $(cat /proc/sys/net/ipv4/tcp_congestion_control), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$FABPERF" --version); $(iperf3 --version | head -1); $(iperf -v 2>&1 | head -1)"
# Bytes the client side's interface has sent so far.
txbytes() { "${CLI[@]}" awk -v d="$DEV:" '$1 == d {print $10}' /proc/net/dev; }

for tool in $TOOLS; do
    client "$tool" >"$TMP/rate" &
    cpid=$!
    # Wait for the stream (the tools' set-up takes a variable time on a
    # loaded machine), then past its warm-up.
    b0=$(txbytes)
    for _ in $(seq 100); do
        sleep 0.1
        b1=$(txbytes)
        [ $((b1 - b0)) -gt 20000000 ] && break
        b0=$b1
    done
    sleep 1
    b0=$(txbytes)
    t0=$(date +%s.%N)
    perf stat -a -A -x, -o "$TMP/stat" \
        -e sched:sched_wakeup,irq_vectors:reschedule_entry,tcp:tcp_retransmit_skb \
        -e net:net_dev_xmit --filter "len > 1000 && name == \"$DEV\"" -- sleep 1 >/dev/null 2>&1 ||
        die "perf stat failed (perf_event_paranoid? tracepoints?)"
    b1=$(txbytes)
    t1=$(date +%s.%N)
    sleep 0.2
    perf record -a -F 999 -o "$TMP/prof" -- sleep 1 >"$TMP/rec.log" 2>&1 || die "perf record failed: $(tail -n3 "$TMP/rec.log")"
    wait "$cpid"
    rate=$(cat "$TMP/rate")
    case $tool in default | copy) COMMS=fabperf-tcp-0 ;; iperf2) COMMS=iperf ;; iperf3) COMMS=iperf3 ;; esac
    gb=$(awk -v b="$((b1 - b0))" -v t0="$t0" -v t1="$t1" 'BEGIN {print b / (t1 - t0) / 1e9}') # GB/s through the interface
    echo
    echo "## $tool: $rate Gbit/s; $gb GB/s through $DEV while counting (load $(cut -d' ' -f1 /proc/loadavg))"
    awk -F, -v gb="$gb" '$1 ~ /^CPU/ {split($4, e, ":"); v[$1, e[2]] = $2; cpus[$1] = 1}
        END {
            for (c in cpus) {
                printf "   %s: wake-ups %d/s, reschedule IPIs %d/s, data segments sent %d/s, retransmits %d/s",
                    c, v[c, "sched_wakeup"], v[c, "reschedule_entry"], v[c, "net_dev_xmit"], v[c, "tcp_retransmit_skb"]
                if (gb > 0) printf "  (IPIs per GB %.0f)", v[c, "reschedule_entry"] / gb
                printf "\n"
            }
        }' "$TMP/stat" | sort
    for cpu in 0 1; do
        # Shares of this CPU's samples: the tool's threads (with the kernel
        # work done in them, softirqs included), ksoftirqd, idle, the rest.
        perf report -i "$TMP/prof" --cpu "$cpu" --sort comm --stdio 2>/dev/null |
            awk -v cpu="$cpu" '/^ +[0-9.]+%/ {
                    pct = $1; sub("%", "", pct); c = $NF
                    if (c ~ /^(fabperf-tcp-|iperf)/) tool += pct
                    else if (c ~ /^ksoftirqd/) ksi += pct
                    else if (c == "swapper") idle += pct
                    else other += pct
                }
                END {printf "   CPU%s samples: tool %.0f%%, ksoftirqd %.0f%%, idle %.0f%%, other processes %.0f%%\n", cpu, tool, ksi, idle, other}'
        perf report -i "$TMP/prof" --cpu "$cpu" --comms "$COMMS" --sort sym --stdio 2>/dev/null |
            awk -v cpu="$cpu" '/^ +[0-9.]+%/ && n < 6 {pct = $1; top = top sprintf(" %s %s", $NF, pct); n++}
                END {printf "   CPU%s hottest in the tool'"'"'s threads (%% of them):%s\n", cpu, top}'
    done
done
