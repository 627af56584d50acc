#!/usr/bin/env bash
# fabperf vs the anchor tools (iperf2, iperf3, sockperf), side by side, in one run:
# on loopback and across a veth pair between two network namespaces that
# this script creates and removes. Prints every sample, medians and ratios.
#
#   sudo bench/compare.sh [--rounds N] [--duration SECS] [--only loopback|veth]
#                         [--fabperf PATH] [--iperf3 PATH] [--prio nice|rt|none] [--quick]
#
# Needs: root (namespaces), iperf (2.x), iperf3, sockperf, jq, taskset/chrt
# (util-linux), iproute2, and a release build of fabperf (built here unless
# --fabperf). --iperf3 PATH runs another iperf3 build (e.g. 3.16 or newer,
# which runs each -P stream on its own thread) instead of the one in PATH.
#
# Fairness rules (identical for every tool):
# - CPU placement (taskset), per test group, the same for both tools:
#     split : every client on CPU 0, every server on CPU 1 (one core per
#             side, like two hosts): tcp-bw -P 1, udp-bw;
#     none  : no pinning, both sides may use both cores: tcp-bw -P N>1
#             (the point of one thread per stream; iperf2 runs a thread per
#             stream too, iperf3 before 3.16 all -P streams in one thread);
#     same  : client and server on CPU 1: tcp-lat (on this kind of VM a
#             wake-up across CPUs costs a variable 5-15 us, which buries a
#             5 % comparison); the cross-CPU (split) figure is printed too.
# - priority: every client and server runs under `nice -n -10` (default;
#   --prio rt uses SCHED_FIFO 20, --prio none leaves it), so that other
#   work on a shared machine does not decide the figures;
# - each round runs the tools back to back and the order alternates every
#   round; the figure per tool is the median over the rounds;
# - same message size, stream count, duration and warm-up (-O / --omit).
#
# Targets:
#   tcp-bw  fabperf >= 1.10 x the better of iperf2 -P N and iperf3 -P N
#           (same N, 128 KiB writes; the better of the two tools' medians)
#   tcp-lat fabperf p50 <= 1.05 x sockperf ping-pong --tcp median (64 B)
#   udp-bw  fabperf max lossless rate >= iperf3 -u -b 0 delivered rate (1472 B)
#
# "Max lossless rate": the highest offered --rate at which fabperf udp-bw
# loses <= $LOSSLESS_PCT % of the datagrams sent in the measured interval
# (receiver's count): first --rate max; if that loses more, bisection
# between 0 and the rate the sender reached (6 steps). The figure is what
# the receiver got at that setting. iperf3's figure is its receiver's
# bits_per_second (end.sum_received) with -u -b 0, whatever it lost.
#
# iperf2's tcp-bw figure is its client's (bytes written over its interval,
# `-y C`, summed over the streams; iperf2 has no receiver-side total on the
# client and no warm-up option), which can only favour iperf2: bytes still
# queued at the end count, slow start is part of its interval either way.
#
# Output: every sample on stderr as it is measured (with the load average),
# then the ratio table on stdout, with the load average at the start and at
# the end.

set -euo pipefail

ROUNDS=3
DUR=5
OMIT=1
ONLY=""
PRIO=nice
FABPERF=""
IPERF3=iperf3
LOSSLESS_PCT=0.1
SIZE_BW=131072
STREAMS_LIST="1 2"

while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DUR="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --fabperf) FABPERF="$2"; shift 2 ;;
        --iperf3) IPERF3="$2"; shift 2 ;;
        --prio) PRIO="$2"; shift 2 ;;
        --quick) ROUNDS=1; DUR=2; shift ;;
        -h|--help) sed -n '2,/^$/p' "$0"; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "compare.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (network namespaces and veth need it)"
for t in iperf "$IPERF3" sockperf jq taskset chrt ip ss; do
    command -v "$t" >/dev/null || die "$t is missing: apt-get install -y iperf iperf3 sockperf jq util-linux iproute2"
done
[ "$(nproc)" -ge 2 ] || die "needs at least 2 CPUs"

HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$FABPERF" ]; then
    echo "building fabperf --release ..." >&2
    (cd "$HERE" && cargo build --release -q -p fabperf) || die "cargo build failed"
    FABPERF="${CARGO_TARGET_DIR:-$HERE/target}/release/fabperf"
fi
[ -x "$FABPERF" ] || die "no fabperf binary at $FABPERF"

case "$PRIO" in
    nice) PRE=(nice -n -10) ;;
    rt) PRE=(chrt -f 20) ;;
    none) PRE=() ;;
    *) die "--prio must be nice, rt or none" ;;
esac

NS_A=fpbenchA
NS_B=fpbenchB
IP_A=10.199.77.1
IP_B=10.199.77.2
PIDS=()
TMP="$(mktemp -d)"

cleanup() {
    stop_servers
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    rm -rf "$TMP"
}
stop_servers() {
    local p
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    PIDS=()
}
trap cleanup EXIT INT TERM

# Ports free for TCP and UDP right now (other programs may hold any fixed number).
pick_port() {
    local p
    for _ in $(seq 1 200); do
        p=$((20000 + RANDOM % 30000))
        if [ -z "$(ss -Htuln "sport = :$p")" ]; then echo "$p"; return; fi
    done
    die "no free port found"
}

# Namespace prefixes (empty on the host). Plain exec chains
# (ip netns exec -> nice -> taskset -> tool), so $! of a server is the server.
NSC=()
NSS=()
IP=""

cpu_of() { # side placement -> taskset prefix words
    case "$2" in
        split) [ "$1" = client ] && echo "taskset -c 0" || echo "taskset -c 1" ;;
        same) echo "taskset -c 1" ;;
        none) echo "" ;;
    esac
}

start_servers() { # placement
    stop_servers
    local -a pin; read -r -a pin <<<"$(cpu_of server "$1")"
    P_FAB=$(pick_port); P_IPERF=$(pick_port); P_IPERF2=$(pick_port); P_SOCK=$(pick_port)
    local -a bind=(--bind "$IP" --port "$P_FAB" --quiet)
    [ "$IP" != 127.0.0.1 ] && bind+=(--insecure)
    "${NSS[@]}" "${PRE[@]}" "${pin[@]}" "$FABPERF" server "${bind[@]}" >"$TMP/fab-server.log" 2>&1 &
    PIDS+=($!)
    "${NSS[@]}" "${PRE[@]}" "${pin[@]}" "$IPERF3" -s -B "$IP" -p "$P_IPERF" >"$TMP/iperf-server.log" 2>&1 &
    PIDS+=($!)
    "${NSS[@]}" "${PRE[@]}" "${pin[@]}" iperf -s -B "$IP" -p "$P_IPERF2" >"$TMP/iperf2-server.log" 2>&1 &
    PIDS+=($!)
    "${NSS[@]}" "${PRE[@]}" "${pin[@]}" sockperf sr --tcp -i "$IP" -p "$P_SOCK" >"$TMP/sockperf-server.log" 2>&1 &
    PIDS+=($!)
    sleep 1
}

cli() { # placement cmd... : run a client in the client namespace
    local -a pin; read -r -a pin <<<"$(cpu_of client "$1")"; shift
    "${NSC[@]}" "${PRE[@]}" "${pin[@]}" "$@"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }

# --- one measurement each; print one number ------------------------------

fab_tcp_bw() { # placement N [flag]
    cli "$1" "$FABPERF" tcp-bw "$IP" -p "$P_FAB" -P "$2" -l $SIZE_BW -t "$DUR" --omit $OMIT ${3:-} --json \
        | jq -s 'map(select(.stream == null))[0].bw_gbps'
}
iperf_tcp_bw() { # placement N
    cli "$1" "$IPERF3" -c "$IP" -p "$P_IPERF" -P "$2" -l $SIZE_BW -t "$DUR" -O $OMIT -J \
        | jq '.end.sum_received.bits_per_second / 1e9'
}
iperf2_tcp_bw() { # placement N: the streams' bits_per_second (CSV field 9), summed
    cli "$1" iperf -c "$IP" -p "$P_IPERF2" -P "$2" -l $SIZE_BW -t "$DUR" -y C 2>/dev/null \
        | awk -F, 'NF >= 9 && $6 != -1 {s += $9; n++} END {if (n) printf "%.4f\n", s / 1e9; else print "nan"}'
}
fab_tcp_lat() { # placement
    cli "$1" "$FABPERF" tcp-lat "$IP" -p "$P_FAB" -l 64 -t "$DUR" --json | jq '.lat_us.p50'
}
sockperf_tcp_lat() { # placement
    cli "$1" sockperf pp --tcp -i "$IP" -p "$P_SOCK" -m 64 -t "$DUR" 2>&1 \
        | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p'
}
iperf_udp_bw() { # placement
    cli "$1" "$IPERF3" -c "$IP" -p "$P_IPERF" -u -b 0 -l 1472 -t "$DUR" -O $OMIT -J 2>/dev/null \
        | jq '.end.sum_received.bits_per_second / 1e9'
}
# fabperf udp-bw at RATE: prints "delivered_gbps loss_pct offered_gbps"
fab_udp_at() { # placement RATE
    cli "$1" "$FABPERF" udp-bw "$IP" -p "$P_FAB" -l 1472 -b "$2" -t "$DUR" --omit $OMIT --json \
        | jq -r '"\(.bw_gbps) \(.udp.loss_pct) \(.udp.sent * .size * 8 / .duration_s / 1e9)"'
}
lossless() { awk -v l="$1" -v t="$LOSSLESS_PCT" 'BEGIN{exit !(l <= t)}'; }
# Max lossless rate; prints "delivered_gbps setting" (setting: max or Gbit/s).
fab_udp_lossless() { # placement
    local max offered loss
    max=$(fab_udp_at "$1" max)
    read -r _ loss offered <<<"$max"
    if lossless "$loss"; then
        echo "$(awk '{print $1}' <<<"$max") max"
        return
    fi
    local lo=0 hi="$offered" best=0 bestrate=0 mid r l
    for _ in 1 2 3 4 5 6; do
        mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN{printf "%.4f", (a+b)/2}')
        r=$(fab_udp_at "$1" "$(awk -v m="$mid" 'BEGIN{printf "%.0f", m*1e9}')")
        l=$(awk '{print $2}' <<<"$r")
        if lossless "$l"; then
            lo="$mid"; best=$(awk '{print $1}' <<<"$r"); bestrate="$mid"
        else
            hi="$mid"
        fi
    done
    echo "$best $bestrate"
}

record() { # scenario test fabperf anchor ratio target verdict [anchor name]
    printf '%-9s %-26s %10.3f %10.3f %7s  %-8s %-7s %s\n' "$@" >>"$TMP/table"
}
verdict() { # ratio op limit
    awk -v x="$1" -v l="$3" -v op="$2" 'BEGIN{ok = (op == ">=") ? (x >= l) : (x <= l); print ok ? "MET" : "MISSED"}'
}
ratio() { awk -v f="$1" -v a="$2" 'BEGIN{printf "%.3f", f/a}'; }
samples() { tr '\n' ' ' <"$1"; }

# alternate A B: run "A" then "B" in odd rounds, "B" then "A" in even rounds
alternate() { # round cmdA fileA cmdB fileB
    if [ $(($1 % 2)) = 1 ]; then
        eval "$2" >>"$3"; eval "$4" >>"$5"
    else
        eval "$4" >>"$5"; eval "$2" >>"$3"
    fi
}

scenario() { # name NS_CLIENT NS_SERVER SERVER_IP
    local name="$1" r n f a c
    NSC=(); NSS=()
    [ -n "$2" ] && NSC=(ip netns exec "$2")
    [ -n "$3" ] && NSS=(ip netns exec "$3")
    IP="$4"
    echo "== $name: client ${2:-host} -> server ${3:-host} $IP; $ROUNDS rounds x $DUR s (+$OMIT s warm-up); priority: ${PRE[*]:-default}" >&2

    # tcp-bw: P=1 split, P>1 unpinned; fabperf default, fabperf --copy,
    # iperf3, iperf2; the anchor is the better of iperf2 and iperf3.
    for n in $STREAMS_LIST; do
        local place=split i2 best bestname
        [ "$n" -gt 1 ] && place=none
        start_servers "$place"
        : >"$TMP/f"; : >"$TMP/c"; : >"$TMP/a"; : >"$TMP/a2"
        for r in $(seq 1 "$ROUNDS"); do
            alternate "$r" "fab_tcp_bw $place $n; fab_tcp_bw $place $n --copy >>$TMP/c" "$TMP/f" \
                "iperf_tcp_bw $place $n; iperf2_tcp_bw $place $n >>$TMP/a2" "$TMP/a"
            echo "   tcp-bw -P $n round $r: fabperf $(tail -n1 "$TMP/f") --copy $(tail -n1 "$TMP/c") iperf3 $(tail -n1 "$TMP/a") iperf2 $(tail -n1 "$TMP/a2") Gbit/s; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        done
        echo "   tcp-bw -P $n ($place) Gbit/s  fabperf: $(samples "$TMP/f")| fabperf --copy: $(samples "$TMP/c")| iperf3: $(samples "$TMP/a")| iperf2: $(samples "$TMP/a2")" >&2
        f=$(median <"$TMP/f"); c=$(median <"$TMP/c"); a=$(median <"$TMP/a"); i2=$(median <"$TMP/a2")
        best=$a; bestname=iperf3
        if awk -v x="$i2" -v y="$a" 'BEGIN{exit !(x > y)}'; then best=$i2; bestname=iperf2; fi
        record "$name" "tcp-bw -P $n Gbit/s" "$f" "$best" "$(ratio "$f" "$best")" ">=1.10" "$(verdict "$(ratio "$f" "$best")" ">=" 1.10)" "$bestname"
        record "$name" "tcp-bw -P $n --copy Gbit/s" "$c" "$best" "$(ratio "$c" "$best")" "(info)" "-" "$bestname"
        record "$name" "  iperf3 -P $n (median)" "$a" "$best" "$(ratio "$a" "$best")" "(info)" "-" "$bestname"
        record "$name" "  iperf2 -P $n (median)" "$i2" "$best" "$(ratio "$i2" "$best")" "(info)" "-" "$bestname"
    done

    # tcp-lat: same CPU (target) and split (information)
    local pl
    for pl in same split; do
        start_servers "$pl"
        : >"$TMP/f"; : >"$TMP/a"
        for r in $(seq 1 "$ROUNDS"); do
            alternate "$r" "fab_tcp_lat $pl" "$TMP/f" "sockperf_tcp_lat $pl" "$TMP/a"
        done
        echo "   tcp-lat 64 B ($pl CPU) p50 us  fabperf: $(samples "$TMP/f")| sockperf: $(samples "$TMP/a")" >&2
        f=$(median <"$TMP/f"); a=$(median <"$TMP/a")
        if [ "$pl" = same ]; then
            record "$name" "tcp-lat 64B p50 us" "$f" "$a" "$(ratio "$f" "$a")" "<=1.05" "$(verdict "$(ratio "$f" "$a")" "<=" 1.05)" sockperf
        else
            record "$name" "tcp-lat p50 us cross-CPU" "$f" "$a" "$(ratio "$f" "$a")" "(info)" "-" sockperf
        fi
    done

    # udp-bw 1472 B, split
    start_servers split
    : >"$TMP/f"; : >"$TMP/a"; : >"$TMP/m"
    for r in $(seq 1 "$ROUNDS"); do
        alternate "$r" "fab_udp_lossless split" "$TMP/f" "iperf_udp_bw split" "$TMP/a"
        fab_udp_at split max >>"$TMP/m"
    done
    echo "   udp-bw 1472 B lossless fabperf (Gbit/s @setting): $(tr '\n' ';' <"$TMP/f") | iperf3 -u -b 0 received: $(samples "$TMP/a")" >&2
    echo "   udp-bw fabperf -b max (received Gbit/s, loss %, offered Gbit/s): $(tr '\n' ';' <"$TMP/m")" >&2
    f=$(awk '{print $1}' "$TMP/f" | median); a=$(median <"$TMP/a")
    record "$name" "udp-bw 1472B Gbit/s" "$f" "$a" "$(ratio "$f" "$a")" ">=1.00" "$(verdict "$(ratio "$f" "$a")" ">=" 1.00)" iperf3
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

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "fabperf: $("$FABPERF" --version) ($FABPERF); $("$IPERF3" --version | head -1); $(iperf -v 2>&1 | head -1); $(sockperf --version 2>&1 | head -1)" >&2
echo "kernel $(uname -r), $(nproc) CPUs, tcp_congestion_control $(cat /proc/sys/net/ipv4/tcp_congestion_control), load $LOAD_START" >&2
: >"$TMP/table"
if [ -z "$ONLY" ] || [ "$ONLY" = loopback ]; then
    scenario loopback "" "" 127.0.0.1
fi
if [ -z "$ONLY" ] || [ "$ONLY" = veth ]; then
    setup_veth
    scenario veth "$NS_A" "$NS_B" "$IP_B"
fi
echo
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); medians of $ROUNDS rounds x $DUR s; priority: ${PRE[*]:-default}; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# anchor: the better of iperf2 and iperf3 (medians) for tcp-bw, iperf3 for udp-bw, sockperf for tcp-lat"
printf '%-9s %-26s %10s %10s %7s  %-8s %-7s %s\n' scenario test fabperf anchor ratio target verdict anchor
cat "$TMP/table"
