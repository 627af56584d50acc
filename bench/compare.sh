#!/usr/bin/env bash
# fabperf vs the anchor tools (iperf3, sockperf), side by side, in one run:
# on loopback and across a veth pair between two network namespaces that
# this script creates and removes. Prints medians and ratios.
#
#   sudo bench/compare.sh [--rounds N] [--duration SECS] [--only loopback|veth]
#                         [--fabperf PATH] [--no-pin] [--no-rt] [--quick]
#
# Needs: root (namespaces), iperf3, sockperf, jq, taskset (util-linux), and a
# release build of fabperf (built here unless --fabperf is given).
#
# Fairness rules (identical for every tool):
# - the server side of every tool runs pinned to CPU $SERVER_CPU and the
#   client side to CPU $CLIENT_CPU (taskset), unless --no-pin;
# - both sides of every tool run at SCHED_FIFO priority 20 (chrt -f 20),
#   unless --no-rt, so that other work on a shared machine (builds) does
#   not decide the figures; the kernel's RT throttling still leaves 5 %;
# - each round runs the tools back to back and the order alternates every
#   round (fabperf first in odd rounds, the anchor first in even rounds);
# - the figure per tool is the median over the rounds;
# - same message size, same stream count, same duration and warm-up.
#
# Targets (issue 2):
#   tcp-bw  fabperf >= 1.10 x iperf3 -P N  (same N, 128 KiB writes)
#   tcp-lat fabperf p50 <= 1.05 x sockperf ping-pong --tcp median (64 B)
#   udp-bw  fabperf max lossless rate >= iperf3 -u -b 0 delivered rate (1472 B)
#
# "Max lossless rate": the highest offered --rate at which fabperf udp-bw
# loses <= $LOSSLESS_PCT % of the datagrams sent in the measured interval
# (receiver's count), found by bisection between 0 and the rate fabperf's
# sender reaches with --rate max; we report the rate the receiver got at
# that setting. iperf3's figure is its receiver's bits_per_second with
# -u -b 0 (whatever it loses on the way).

set -euo pipefail

ROUNDS=3
DUR=5
OMIT=1
ONLY=""
PIN=1
RT=1
FABPERF=""
CLIENT_CPU=0
SERVER_CPU=1
LOSSLESS_PCT=0.1
SIZE_BW=131072
STREAMS_LIST="1 2"

while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DUR="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --fabperf) FABPERF="$2"; shift 2 ;;
        --no-pin) PIN=0; shift ;;
        --no-rt) RT=0; shift ;;
        --quick) ROUNDS=1; DUR=2; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "compare.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (network namespaces and veth need it)"
for t in iperf3 sockperf jq taskset chrt ip; do
    command -v "$t" >/dev/null || die "$t is missing: apt-get install -y iperf3 sockperf jq util-linux iproute2"
done
[ "$(nproc)" -ge 2 ] || { echo "only one CPU: pinning disabled" >&2; PIN=0; }

HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$FABPERF" ]; then
    echo "building fabperf --release ..." >&2
    (cd "$HERE" && cargo build --release -q -p fabperf) || die "cargo build failed"
    FABPERF="${CARGO_TARGET_DIR:-$HERE/target}/release/fabperf"
fi
[ -x "$FABPERF" ] || die "no fabperf binary at $FABPERF"

NS_A=fpbenchA
NS_B=fpbenchB
IP_A=10.199.77.1
IP_B=10.199.77.2
P_FAB=15301
P_IPERF=15201
P_SOCK=15401
PIDS=()
TMP="$(mktemp -d)"

cleanup() {
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# Command prefixes that pin the client and the servers (empty with --no-pin).
CLI=()
SRV=()
if [ "$RT" = 1 ]; then
    CLI=(chrt -f 20)
    SRV=(chrt -f 20)
fi
# Latency (target row): the client on the servers' CPU. On this kind of
# VM a wake-up across CPUs costs a variable 5-15 us (idle CPU, IPI), which
# buries a 5 % comparison; on one CPU the ping-pong is a plain context
# switch. The cross-CPU figure is printed too, as information.
LAT=("${CLI[@]}")
if [ "$PIN" = 1 ]; then
    CLI+=(taskset -c "$CLIENT_CPU")
    SRV+=(taskset -c "$SERVER_CPU")
    LAT+=(taskset -c "$SERVER_CPU")
fi

# Prefixes that run a command in the client's / server's namespace (empty
# on the host). Plain exec chains (ip netns exec -> taskset -> tool), so $!
# of a backgrounded server is the server itself.
NSC=()
NSS=()
set_ns() { # NS_CLIENT NS_SERVER
    NSC=(); NSS=()
    [ -n "$1" ] && NSC=(ip netns exec "$1")
    [ -n "$2" ] && NSS=(ip netns exec "$2")
    return 0
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }

start_servers() { # NS_SERVER IP
    local ip="$2"
    local bindflags=(--bind "$ip" --port "$P_FAB" --quiet)
    [ "$ip" != 127.0.0.1 ] && bindflags+=(--insecure)
    "${NSS[@]}" "${SRV[@]}" "$FABPERF" server "${bindflags[@]}" >"$TMP/fab-server.log" 2>&1 &
    PIDS+=($!)
    "${NSS[@]}" "${SRV[@]}" iperf3 -s -B "$ip" -p $P_IPERF >"$TMP/iperf-server.log" 2>&1 &
    PIDS+=($!)
    "${NSS[@]}" "${SRV[@]}" sockperf sr --tcp -i "$ip" -p $P_SOCK >"$TMP/sockperf-server.log" 2>&1 &
    PIDS+=($!)
    sleep 1
}

stop_servers() {
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    PIDS=()
    sleep 0.5
}

# --- one measurement each; print a single number -------------------------

fab_tcp_bw() { # NS IP N [extra fabperf flag]
    "${NSC[@]}" "${CLI[@]}" "$FABPERF" tcp-bw "$2" -p $P_FAB -P "$3" -l $SIZE_BW -t "$DUR" --omit $OMIT ${4:-} --json \
        | jq -s 'map(select(.stream == null))[0].bw_gbps'
}
iperf_tcp_bw() { # NS IP N
    "${NSC[@]}" "${CLI[@]}" iperf3 -c $2 -p $P_IPERF -P $3 -l $SIZE_BW -t $DUR -O $OMIT -J \
        | jq '.end.sum_received.bits_per_second / 1e9'
}
fab_tcp_lat() { # NS IP same|split
    local -a pre=("${CLI[@]}"); [ "$3" = same ] && pre=("${LAT[@]}")
    "${NSC[@]}" "${pre[@]}" "$FABPERF" tcp-lat "$2" -p $P_FAB -l 64 -t "$DUR" --json | jq '.lat_us.p50'
}
sockperf_tcp_lat() { # NS IP same|split
    local -a pre=("${CLI[@]}"); [ "$3" = same ] && pre=("${LAT[@]}")
    "${NSC[@]}" "${pre[@]}" sockperf pp --tcp -i $2 -p $P_SOCK -m 64 -t $DUR 2>&1 \
        | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p'
}
iperf_udp_bw() { # NS IP
    "${NSC[@]}" "${CLI[@]}" iperf3 -c $2 -p $P_IPERF -u -b 0 -l 1472 -t $DUR -O $OMIT -J \
        | jq '.end.sum_received.bits_per_second / 1e9'
}
# fabperf udp-bw at RATE ("max" or bits/s): prints "delivered_gbps loss_pct offered_gbps"
fab_udp_at() { # NS IP RATE
    "${NSC[@]}" "${CLI[@]}" "$FABPERF" udp-bw "$2" -p $P_FAB -l 1472 -b "$3" -t "$DUR" --omit $OMIT --json \
        | jq -r '"\(.bw_gbps) \(.udp.loss_pct) \(.udp.sent * .size * 8 / .duration_s / 1e9)"'
}
# Bisection for the max lossless rate; prints "gbps_delivered rate_setting_gbps".
fab_udp_lossless() { # NS IP
    local max; max=$(fab_udp_at "$1" "$2" max)
    local offered; offered=$(echo "$max" | awk '{print $3}')
    local loss; loss=$(echo "$max" | awk '{print $2}')
    if awk -v l="$loss" -v t="$LOSSLESS_PCT" 'BEGIN{exit !(l <= t)}'; then
        echo "$(echo "$max" | awk '{print $1}') max"
        return
    fi
    local lo=0 hi="$offered" best=0 bestrate=0 i
    for i in 1 2 3 4 5 6; do
        local mid; mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN{printf "%.4f", (a+b)/2}')
        local bps; bps=$(awk -v m="$mid" 'BEGIN{printf "%.0f", m*1e9}')
        local r; r=$(fab_udp_at "$1" "$2" "$bps")
        local l; l=$(echo "$r" | awk '{print $2}')
        if awk -v l="$l" -v t="$LOSSLESS_PCT" 'BEGIN{exit !(l <= t)}'; then
            lo="$mid"; best=$(echo "$r" | awk '{print $1}'); bestrate="$mid"
        else
            hi="$mid"
        fi
    done
    echo "$best $bestrate"
}

RESULTS="$TMP/results"
: >"$RESULTS"

record() { # scenario test fabperf anchor ratio target verdict
    printf '%-9s %-22s %10.3f %10.3f %7s  %-8s %s\n' "$@" | tee -a "$RESULTS"
}

scenario() { # name NS_CLIENT NS_SERVER SERVER_IP
    local name="$1" nc="$2" ns="$3" ip="$4"
    set_ns "$nc" "$ns"
    echo "== $name: client ${nc:-host} -> server ${ns:-host} $ip; pinning: $([ $PIN = 1 ] && echo "client CPU $CLIENT_CPU, servers CPU $SERVER_CPU" || echo none); $ROUNDS rounds x $DUR s" >&2
    start_servers "$ns" "$ip"
    local r n
    for n in $STREAMS_LIST; do
        : >"$TMP/f"; : >"$TMP/a"; : >"$TMP/c"
        for r in $(seq 1 "$ROUNDS"); do
            if [ $((r % 2)) = 1 ]; then
                fab_tcp_bw "$nc" "$ip" "$n" >>"$TMP/f"; fab_tcp_bw "$nc" "$ip" "$n" --copy >>"$TMP/c"
                iperf_tcp_bw "$nc" "$ip" "$n" >>"$TMP/a"
            else
                iperf_tcp_bw "$nc" "$ip" "$n" >>"$TMP/a"
                fab_tcp_bw "$nc" "$ip" "$n" --copy >>"$TMP/c"; fab_tcp_bw "$nc" "$ip" "$n" >>"$TMP/f"
            fi
        done
        echo "   tcp-bw P=$n Gbit/s fabperf: $(tr '\n' ' ' <"$TMP/f")| fabperf --copy: $(tr '\n' ' ' <"$TMP/c")| iperf3: $(tr '\n' ' ' <"$TMP/a")" >&2
        local f a c; f=$(median <"$TMP/f"); a=$(median <"$TMP/a"); c=$(median <"$TMP/c")
        local ratio; ratio=$(awk -v f="$f" -v a="$a" 'BEGIN{printf "%.3f", f/a}')
        record "$name" "tcp-bw P=$n Gbit/s" "$f" "$a" "$ratio" ">=1.10" \
            "$(awk -v x="$ratio" 'BEGIN{print (x>=1.10)?"MET":"MISSED"}')"
        ratio=$(awk -v f="$c" -v a="$a" 'BEGIN{printf "%.3f", f/a}')
        record "$name" "tcp-bw P=$n --copy" "$c" "$a" "$ratio" "(info)" "-"
    done
    local f a ratio pl
    for pl in same split; do
        [ "$PIN" = 0 ] && [ "$pl" = split ] && continue
        : >"$TMP/f"; : >"$TMP/a"
        for r in $(seq 1 "$ROUNDS"); do
            if [ $((r % 2)) = 1 ]; then
                fab_tcp_lat "$nc" "$ip" $pl >>"$TMP/f"; sockperf_tcp_lat "$nc" "$ip" $pl >>"$TMP/a"
            else
                sockperf_tcp_lat "$nc" "$ip" $pl >>"$TMP/a"; fab_tcp_lat "$nc" "$ip" $pl >>"$TMP/f"
            fi
        done
        echo "   tcp-lat ($pl CPU) p50 us fabperf: $(tr '\n' ' ' <"$TMP/f")| sockperf: $(tr '\n' ' ' <"$TMP/a")" >&2
        f=$(median <"$TMP/f"); a=$(median <"$TMP/a")
        ratio=$(awk -v f="$f" -v a="$a" 'BEGIN{printf "%.3f", f/a}')
        if [ $pl = same ]; then
            record "$name" "tcp-lat 64B p50 us" "$f" "$a" "$ratio" "<=1.05" \
                "$(awk -v x="$ratio" 'BEGIN{print (x<=1.05)?"MET":"MISSED"}')"
        else
            record "$name" "tcp-lat p50 cross-CPU" "$f" "$a" "$ratio" "(info)" "-"
        fi
    done
    : >"$TMP/f"; : >"$TMP/a"; : >"$TMP/fm"
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then
            fab_udp_lossless "$nc" "$ip" >>"$TMP/f"; iperf_udp_bw "$nc" "$ip" >>"$TMP/a"
        else
            iperf_udp_bw "$nc" "$ip" >>"$TMP/a"; fab_udp_lossless "$nc" "$ip" >>"$TMP/f"
        fi
        fab_udp_at "$nc" "$ip" max >>"$TMP/fm"
    done
    echo "   udp-bw lossless fabperf (gbps rate): $(tr '\n' ';' <"$TMP/f") | iperf3 -b 0 delivered: $(tr '\n' ' ' <"$TMP/a")" >&2
    echo "   udp-bw fabperf -b max (delivered loss% offered): $(tr '\n' ';' <"$TMP/fm")" >&2
    f=$(awk '{print $1}' "$TMP/f" | median); a=$(median <"$TMP/a")
    ratio=$(awk -v f="$f" -v a="$a" 'BEGIN{printf "%.3f", f/a}')
    record "$name" "udp-bw 1472B Gbit/s" "$f" "$a" "$ratio" ">=1.00" \
        "$(awk -v x="$ratio" 'BEGIN{print (x>=1.00)?"MET":"MISSED"}')"
    stop_servers
}

setup_veth() {
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    ip netns add "$NS_A"
    ip netns add "$NS_B"
    ip link add fpbA type veth peer name fpbB
    ip link set fpbA netns "$NS_A"
    ip link set fpbB netns "$NS_B"
    ip -n "$NS_A" addr add "$IP_A/24" dev fpbA
    ip -n "$NS_B" addr add "$IP_B/24" dev fpbB
    ip -n "$NS_A" link set lo up
    ip -n "$NS_B" link set lo up
    ip -n "$NS_A" link set fpbA up
    ip -n "$NS_B" link set fpbB up
}

echo "fabperf: $("$FABPERF" --version) ($FABPERF); $(iperf3 --version | head -1); $(sockperf --version 2>&1 | head -1)" >&2
echo "kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
printf '%-9s %-22s %10s %10s %7s  %-8s %s\n' scenario test fabperf anchor ratio target verdict
if [ -z "$ONLY" ] || [ "$ONLY" = loopback ]; then
    scenario loopback "" "" 127.0.0.1
fi
if [ -z "$ONLY" ] || [ "$ONLY" = veth ]; then
    setup_veth
    scenario veth "$NS_A" "$NS_B" "$IP_B"
fi
echo "(anchor = iperf3 3.x for tcp-bw/udp-bw, sockperf for tcp-lat; medians of $ROUNDS rounds; load at end $(cut -d' ' -f1-3 /proc/loadavg))"
