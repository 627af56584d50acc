#!/usr/bin/env bash
# fabperf http-load vs wrk, side by side, in one run: same server (a fabperf
# agent with --http), same connections, threads, duration and response size.
# Prints every sample, the median per tool, the ratio of the medians and the
# spread of the per-round ratios.
#
#   bench/http-vs-wrk.sh [--where loopback|overlay|service] [--rounds N]
#       [--duration SECS] [--connections "10 100 1000"] [--threads T]
#       [--size BYTES] [--fabperf PATH] [--prio nice|rt|none]
#
# --where loopback (default): an agent on 127.0.0.1 that this script starts
#     and stops; client and server share the machine's CPUs, unpinned.
# --where overlay: the testbed (sim/testbed.sh up): clients in fp-node1,
#     the server is fp-node2's overlay agent (VXLAN), by address.
# --where service: the testbed's service address (sim/testbed.sh up
#     --service), from fp-node1: every connection DNAT'd to one of the
#     other nodes' overlay agents.
#
# Fairness: both tools run under the same priority (nice -n -10 by default;
# --prio rt: SCHED_FIFO 20 for both clients and for the server, so that other
# work on a shared machine does not decide the figures; on the testbed the
# target agent's threads are moved to SCHED_FIFO 20 for the run and back
# to SCHED_OTHER at the end; not with --where service),
# back to back, the order alternating every round; both use keep-alive
# connections with one request in flight each (wrk's default), the same
# URL (GET /bytes/SIZE), no warm-up (wrk has none: fabperf gets --warmup 0).
# The figure is requests/s: wrk's "Requests/sec" (every response, any
# status), fabperf's requests_per_s (responses with status < 400; errors are
# printed apart). Rows in which either tool had errors are marked and left
# out of the medians (a fabperf run that ended without a record counts as an
# error, its message on stderr).
#
# Output: every round (both tools' figures, their ratio, the load average),
# then the table of medians with the load average at the start and the end.
#
# Needs: wrk (Debian package wrk), jq, and a release build of fabperf (built
# here unless --fabperf); root for --where overlay|service (the testbed).
set -euo pipefail

WHERE=loopback
ROUNDS=5
DUR=5
CONNS="10 100 1000"
THREADS=2
SIZE=1024
FABPERF=""
PRIO=nice
PORT=5399

while [ $# -gt 0 ]; do
    case "$1" in
        --where) WHERE="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --duration) DUR="$2"; shift 2 ;;
        --connections) CONNS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --fabperf) FABPERF="$2"; shift 2 ;;
        --prio) PRIO="$2"; shift 2 ;;
        -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "http-vs-wrk.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "http-vs-wrk.sh: $*" >&2; exit 1; }
usage_die() { echo "http-vs-wrk.sh: $*" >&2; exit 2; }
case $WHERE in loopback | overlay | service) ;; *) usage_die "--where takes loopback, overlay or service" ;; esac
case $PRIO in nice | rt | none) ;; *) usage_die "--prio takes nice, rt or none" ;; esac
[[ $PRIO == rt && $WHERE == service ]] && usage_die "--prio rt is for loopback and overlay (the service's agents keep their priority)"
[[ $ROUNDS =~ ^[1-9][0-9]{0,2}$ ]] || usage_die "--rounds wants 1..999"
[[ $DUR =~ ^[1-9][0-9]{0,3}$ ]] || usage_die "--duration wants whole seconds, 1..9999"
[[ $THREADS =~ ^[1-9][0-9]{0,2}$ ]] || usage_die "--threads wants 1..999"
[[ $SIZE =~ ^[0-9]{1,10}$ ]] || usage_die "--size wants bytes (digits)"
for c in $CONNS; do
    [[ $c =~ ^[1-9][0-9]{0,5}$ ]] || usage_die "--connections wants numbers, got '$c'"
    ((c >= THREADS)) || usage_die "wrk needs at least as many connections as threads ($c < $THREADS)"
done
for t in wrk jq; do
    command -v "$t" >/dev/null || die "$t is missing: apt-get install -y wrk jq (or ci/install-deps.sh)"
done

HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$FABPERF" ]; then
    echo "building fabperf --release ..." >&2
    (cd "$HERE" && cargo build --release -q -p fabperf) || die "cargo build failed"
    FABPERF="${CARGO_TARGET_DIR:-$HERE/target}/release/fabperf"
fi
[ -x "$FABPERF" ] || die "no fabperf binary at $FABPERF"
FABPERF=$(realpath "$FABPERF")

PRIO_CMD=()
[ "$PRIO" = nice ] && PRIO_CMD=(nice -n -10)
[ "$PRIO" = rt ] && PRIO_CMD=(chrt -f 20)
WORK=$(mktemp -d)
SERVER_PID=""
RT_AGENT=""
cleanup() {
    [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
    [ -z "$RT_AGENT" ] || chrt -a -o -p 0 "$RT_AGENT" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Where the clients run and what they load.
RUN=()
case $WHERE in
    loopback)
        HOST=127.0.0.1
        ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
        "${PRIO_CMD[@]}" "$FABPERF" server --bind 127.0.0.1 --port "$PORT" --http -q &
        SERVER_PID=$!
        for _ in $(seq 50); do
            curl -fsS -o /dev/null "http://$HOST:$PORT/bytes/0" 2>/dev/null && break
            sleep 0.1
        done
        curl -fsS -o /dev/null "http://$HOST:$PORT/bytes/0" || die "the agent on $HOST:$PORT does not answer HTTP"
        ;;
    overlay | service)
        [ "$(id -u)" = 0 ] || die "--where $WHERE needs root (the testbed)"
        TB="$HERE/sim/testbed.sh"
        "$TB" status >/dev/null 2>&1 || die "no healthy testbed: sudo sim/testbed.sh up${WHERE/overlay/}${WHERE/service/ --service}"
        # shellcheck source=sim/testbed/lib.sh
        source "$HERE/sim/testbed/lib.sh"
        PORT=$TB_PORT
        if [ "$WHERE" = overlay ]; then HOST=$(tb_overlay_ip 2); else HOST=$(tb_service_ip); fi
        RUN=("$TB" exec fp-node1)
        "${RUN[@]}" curl -fsS -o /dev/null "http://$HOST:$PORT/bytes/0" ||
            die "no HTTP answer from $HOST:$PORT in fp-node1 (testbed agents serve HTTP; --where service needs 'up --service')"
        if [ "$PRIO" = rt ]; then
            RT_AGENT=$(pgrep -f -- "server --bind $HOST " | head -n1 || true)
            [ -n "$RT_AGENT" ] || die "--prio rt: no agent process bound to $HOST found"
            chrt -a -f -p 20 "$RT_AGENT" || die "--prio rt: cannot set SCHED_FIFO on agent $RT_AGENT"
        fi
        ;;
esac
URL="http://$HOST:$PORT/bytes/$SIZE"

run_wrk() { # CONNS -> "rps errors"
    local c=$1 out rps errs
    out=$("${RUN[@]}" sh -c 'ulimit -n 65536 2>/dev/null || true; exec "$@"' sh \
        "${PRIO_CMD[@]}" wrk -t "$THREADS" -c "$c" -d "${DUR}s" "$URL" 2>&1) || true
    echo "$out" >>"$WORK/wrk.log"
    rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
    errs=$(echo "$out" | awk '/Socket errors:/ {gsub(",", ""); s += $4 + $6 + $8 + $10} /Non-2xx/ {s += $NF} END {print s + 0}')
    echo "${rps:-0} ${errs:-0}"
}

run_fabperf() { # CONNS -> "rps errors"
    local c=$1 out rps errs
    out=$("${RUN[@]}" "${PRIO_CMD[@]}" "$FABPERF" http-load "$HOST" -p "$PORT" -c "$c" \
        --threads "$THREADS" -t "$DUR" --warmup 0 -l "$SIZE" --json 2>>"$WORK/fabperf.err") || true
    echo "$out" >>"$WORK/fabperf.log"
    rps=$(echo "$out" | jq -r '.requests_per_s // empty' 2>/dev/null | head -n1)
    errs=$(echo "$out" | jq -r '[.errors[]?] | add // 0' 2>/dev/null | head -n1)
    if [ -z "$rps" ]; then
        # No record: the run failed as a whole; count it as an error.
        echo "fabperf http-load -c $c failed: $(tail -n1 "$WORK/fabperf.err")" >&2
        rps=0 errs=1
    fi
    echo "${rps:-0} ${errs:-0}"
}

median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "# fabperf http-load vs wrk: $WHERE, $URL"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# $(date -u '+%a %d %b %Y %H:%M UTC'), $(nproc) CPUs, load average $LOAD_START"
echo "# wrk $(wrk --version 2>&1 | head -n1 | awk '{print $2}'), fabperf $("$FABPERF" --version | awk '{print $2}')"
echo "# $ROUNDS rounds x ${DUR} s, $THREADS threads, priority $PRIO, order alternating"
echo
printf '%-7s %-5s %-22s %-22s %-7s %s\n' conns round "wrk req/s (errors)" "fabperf req/s (errors)" "ratio" "load"
summary=()
for c in $CONNS; do
    : >"$WORK/w" && : >"$WORK/f" && : >"$WORK/r"
    for r in $(seq 1 "$ROUNDS"); do
        if ((r % 2)); then
            read -r w we < <(run_wrk "$c")
            read -r f fe < <(run_fabperf "$c")
        else
            read -r f fe < <(run_fabperf "$c")
            read -r w we < <(run_wrk "$c")
        fi
        ratio=$(awk -v f="$f" -v w="$w" 'BEGIN {if (w > 0) printf "%.3f", f / w; else print "nan"}')
        mark=""
        [[ $we == 0 && $fe == 0 ]] || mark="  (errors)"
        printf '%-7s %-5s %-22s %-22s %-7s %s%s\n' "$c" "$r" "$(printf '%.0f (%s)' "$w" "$we")" \
            "$(printf '%.0f (%s)' "$f" "$fe")" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)" "$mark"
        # Rounds in which either tool had errors stay out of the medians.
        if [ -z "$mark" ]; then
            echo "$w" >>"$WORK/w"
            echo "$f" >>"$WORK/f"
            echo "$ratio" >>"$WORK/r"
        fi
    done
    mw=$(median <"$WORK/w")
    mf=$(median <"$WORK/f")
    mr=$(grep -v nan "$WORK/r" | median)
    lo=$(grep -v nan "$WORK/r" | sort -g | head -n1)
    hi=$(grep -v nan "$WORK/r" | sort -g | tail -n1)
    summary+=("$(printf '%-7s %-12.0f %-12.0f %-16s %-10s %s' "$c" "$mw" "$mf" \
        "$(awk -v f="$mf" -v w="$mw" 'BEGIN {if (w > 0) printf "%.3f", f / w; else print "nan"}')" \
        "$mr" "$lo-$hi")")
done
echo
echo "# $WHERE, medians of $ROUNDS rounds; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-12s %-12s %-16s %-10s %s\n' conns "wrk median" "fabperf med." "ratio of medians" "median of" "ratio range"
printf '%-7s %-12s %-12s %-16s %-10s %s\n' "" "" "" "" "ratios" ""
printf '%s\n' "${summary[@]}"
