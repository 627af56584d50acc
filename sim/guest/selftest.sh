#!/bin/bash
# The default soft-RoCE run, inside the guest (started by sim/guest/main.sh
# with rxe up and FABPERF_RDMA_* exported):
#   1. every fabperf-rdma test binary listed in /sim/test-bins, with
#      --include-ignored: the RDMA device tests are #[ignore]d so that
#      `cargo test` on a host without RDMA reports them as ignored, and here,
#      with a device, every one of them must run;
#   1c. sim/guest/counters.sh: counter deltas and the roce-packet-loss
#      finding, clean and under netem loss (two-namespace topology);
#   1d. sim/guest/rails.sh: `fabperf run` of a two-rail plan (rdma-bw and
#      rdma-lat, rail i with rail i) through one agent per node serving
#      both rails, then of a cross-rail plan (rdma-bw, rail i -> rail j) on
#      two more rails routed through a spine namespace, every round checked
#      (two-namespace topology);
#   2. fabperf next to perftest on the same rxe link, FABPERF_SIM_ROUNDS rounds
#      of FABPERF_SIM_REPEATS runs per tool in mirrored order (A B B A,
#      which tool is A alternating by round), and a ratio table written to
#      /sim/out/compare.md (+ compare.tsv with every single run).
# Exits non-zero when anything failed.
set -uo pipefail
GUEST_DIR=$FABPERF_SIM_REPO/sim/guest
OUT=/sim/out
mkdir -p "$OUT" /tmp/st
ROUNDS=${FABPERF_SIM_ROUNDS:-6}
# Runs of each tool per test and round (mirrored order, see below).
REPEATS=${FABPERF_SIM_REPEATS:-2}
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { echo "FABPERF_SIM_REPEATS must be a positive number" >&2; exit 2; }
# Number of this boot's first round (sim/softroce.sh boots a fresh guest per round).
FIRST=${FABPERF_SIM_ROUND_FIRST:-1}
# Bandwidth runs are timed so a slow, busy host cannot stretch them: perftest
# -D N+2 measures between its default margins (D/4 = 1 s at each end; an
# explicit --margin switches perftest 4.5 to a different, erratic reporting
# path), fabperf --warmup 1 --duration N measures the same N seconds. Latency
# runs count iterations, since perftest reports t_typical only then.
BW_SIZE=65536 BW_SECS=${FABPERF_SIM_BW_SECONDS:-4}
[[ $BW_SECS =~ ^[0-9]+$ && $BW_SECS -ge 2 ]] || { echo "FABPERF_SIM_BW_SECONDS must be >= 2" >&2; exit 2; }
PT_D=$((BW_SECS + 2)) PT_M=$(((BW_SECS + 2) / 4))
FB_WARM=$PT_M FB_DUR=$((PT_D - 2 * PT_M))
LAT_SIZE=2 LAT_ITERS=${FABPERF_SIM_LAT_ITERS:-1000}
PEER=$FABPERF_RDMA_PEER DEV=$FABPERF_RDMA_DEVICE PDEV=$FABPERF_RDMA_PEER_DEVICE
GID=1 # ::ffff:10.77.0.x, RoCE v2, on every rxe device here
FAILURES=()

say() { printf '\n=== [%4ds] %s\n' "$SECONDS" "$*"; }
failed() { FAILURES+=("$*"); printf 'FAILED: %s\n' "$*"; }

# ------------------------------------------------------------ 1. test binaries
say "fabperf-rdma test binaries (device $DEV, peer $PDEV at $PEER, topology $FABPERF_SIM_TOPOLOGY)"
total_passed=0
COMPARE_ONLY=${FABPERF_SIM_COMPARE_ONLY:-0}
[[ $COMPARE_ONLY == 1 ]] && echo "skipped (FABPERF_SIM_COMPARE_ONLY=1)"
while read -r bin; do
    [[ -n $bin ]] || continue
    name=$(basename "$bin")
    printf -- '--- %s\n' "$name"
    "$bin" --include-ignored 2>&1 | tee "/tmp/st/$name.log"
    rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || failed "test binary $name exited with $rc"
    count() { # count WORD: the sum of "N WORD" in the binary's result lines
        awk -v w="$1" '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ "^" w) s += $(i-1) } END { print s + 0 }' \
            "/tmp/st/$name.log"
    }
    n=$(count passed)
    ign=$(count ignored)
    [[ $ign == 0 ]] || failed "test binary $name left $ign test(s) ignored in the guest"
    total_passed=$((total_passed + n))
done < <([[ $COMPARE_ONLY == 1 ]] || cat /sim/test-bins)
if [[ $total_passed == 0 && $COMPARE_ONLY != 1 ]]; then
    failed "the fabperf-rdma test binaries ran no test"
fi
printf 'fabperf-rdma tests passed in the guest: %d\n' "$total_passed"

# ------------------------------------------------------------ 1b. extra script
# FABPERF_SIM_EXTRA: a script of the caller's (e.g. one that regenerates the
# real outputs shown in the docs) run once, in the first guest, after the tests.
if [[ -n ${FABPERF_SIM_EXTRA:-} && $COMPARE_ONLY != 1 ]]; then
    say "extra script $FABPERF_SIM_EXTRA"
    "$FABPERF_SIM_EXTRA" || failed "the extra script $FABPERF_SIM_EXTRA exited with $?"
fi

# ------------------------------------------------------------ 1c. counters
# Records explain what the fabric did: counter deltas of a clean run, and
# sequence errors / retransmits with the roce-packet-loss finding under
# netem loss (sim/guest/counters.sh). Once, in the first guest.
if [[ $COMPARE_ONLY != 1 && $FABPERF_SIM_TOPOLOGY == netns && -n ${FABPERF_AGENT:-} ]]; then
    say "counter deltas and findings, clean and under netem loss"
    "$GUEST_DIR/counters.sh" || failed "sim/guest/counters.sh exited with $?"
fi

# ------------------------------------------------------------ 1d. rails
# Both rails of the two nodes (rxe0<->rxe1, rxe2<->rxe3, each its own veth
# pair and subnet) in one plan, then cross rails through a spine: every
# round has a figure per rail, each cell labelled with its rail, the rails
# started together. Once, in the first guest.
if [[ $COMPARE_ONLY != 1 && $FABPERF_SIM_TOPOLOGY == netns ]]; then
    say "two rails: fabperf run sim/plans/softroce-rails.toml and sim/plans/softroce-cross-rails.toml"
    "$GUEST_DIR/rails.sh" || failed "sim/guest/rails.sh exited with $?"
fi

# ------------------------------------------------------------ 2. comparison
# perftest ports: each run gets its own block of 10 (one per attempt); the
# counter lives in the caller because runs execute in $(...) subshells.
PORT_BASE=18600

# wait_listen PORT: until something in the peer node listens on TCP PORT.
wait_listen() {
    local _
    for _ in $(seq 100); do
        [[ -n $("$GUEST_DIR/peer.sh" ss -Hltn "sport = :$1" 2>/dev/null) ]] && return 0
        sleep 0.1
    done
    return 1
}

# perftest_run TOOL ARGS... -> prints the result line's fields; retries when
# perftest's clock calibration fails under emulation (r^2 < 0.9, zero result).
perftest_run() {
    local tool=$1 attempt log srv col
    shift
    case $tool in *_bw) col=4 ;; *) col=5 ;; esac # BW average / t_typical
    for attempt in 1 2 3 4 5; do
        PORT=$((PORT_BASE + attempt))
        log=/tmp/st/$tool.$PORT
        "$GUEST_DIR/peer.sh" "$tool" -d "$PDEV" -x "$GID" -p "$PORT" -F "$@" >"$log.srv" 2>&1 &
        srv=$!
        if ! wait_listen "$PORT"; then
            kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
            echo "perftest $tool server did not start: $(tail -n 3 "$log.srv")" >"$log.err"
            continue
        fi
        timeout 300 "$tool" -d "$DEV" -x "$GID" -p "$PORT" -F "$@" "$PEER" >"$log" 2>&1
        local rc=$?
        timeout 20 tail --pid="$srv" -f /dev/null 2>/dev/null || kill "$srv" 2>/dev/null
        wait "$srv" 2>/dev/null
        local line val
        line=$(awk -v s="$SIZE" '$1 == s && NF >= 5 { l = $0 } END { print l }' "$log")
        val=$(awk -v c="$col" '{ print $c }' <<<"$line")
        if [[ $rc != 0 ]]; then
            echo "$tool exited with $rc: $(tail -n 3 "$log")" >"$log.err"
            continue
        fi
        # Only the client's clock matters: it measures and prints the result.
        if grep -q 'Correlation coefficient' "$log" ||
            ! awk -v v="$val" 'BEGIN { exit !(v + 0 > 0) }'; then
            echo "$tool: clock calibration failed under emulation (r^2 < 0.9 or zero result: '$val'), retrying" >&2
            echo "$tool: clock calibration failed in all 5 attempts" >"$log.err"
            continue
        fi
        case $tool in
            # MiB/s (4 significant digits; --report_gbits prints only 2 decimals) -> Gbit/s
            *_bw) awk -v v="$val" 'BEGIN { printf "%.6f\n", v * 1048576 * 8 / 1e9 }' ;;
            *) echo "$val" ;;
        esac
        return 0
    done
    cat "$log.err" >&2
    return 1
}

# fabperf_run TEST ARGS... -> prints BW (Gbit/s) or p50 (µs) of the total record.
fabperf_run() {
    local test=$1 log field
    log=/tmp/st/fabperf-$test.$PORT_BASE
    shift
    case $test in rdma-bw) field=.bw_gbps ;; *) field=.lat_us.p50 ;; esac
    if [[ -z $FABPERF_AGENT ]]; then
        echo "no fabperf agent is serving in the peer node (see the warning at boot)" >&2
        return 1
    fi
    timeout 300 fabperf "$test" "$PEER" --port "${FABPERF_AGENT##*:}" --device "$DEV" --gid-index "$GID" \
        --json "$@" >"$log" 2>"$log.err"
    local rc=$?
    if [[ $rc != 0 ]]; then
        echo "fabperf $test $* exited with $rc: $(tail -n 5 "$log.err")" >&2
        return 1
    fi
    local val
    val=$(jq -r "select(.stream == null) | $field // empty" "$log" 2>/dev/null | tail -n 1)
    if ! awk -v v="$val" 'BEGIN { exit !(v + 0 > 0) }'; then
        echo "fabperf $test $*: no $field in its JSON output: $(head -c 400 "$log") $(tail -n 3 "$log.err")" >&2
        return 1
    fi
    awk -v v="$val" -v t="$test" 'BEGIN { printf (t == "rdma-bw" ? "%.6f\n" : "%.3f\n"), v }'
}

# name | fabperf test | fabperf args | perftest tool | perftest args | unit | size
PAIRS=(
    "write-bw|rdma-bw|--op write --size $BW_SIZE --warmup $FB_WARM --duration $FB_DUR|ib_write_bw|-s $BW_SIZE -D $PT_D|Gbit/s|$BW_SIZE"
    "send-bw|rdma-bw|--op send --size $BW_SIZE --warmup $FB_WARM --duration $FB_DUR|ib_send_bw|-s $BW_SIZE -D $PT_D|Gbit/s|$BW_SIZE"
    "send-lat|rdma-lat|--op send --size $LAT_SIZE --iterations $LAT_ITERS|ib_send_lat|-s $LAT_SIZE -n $LAT_ITERS|us|$LAT_SIZE"
    "write-lat|rdma-lat|--op write --size $LAT_SIZE --iterations $LAT_ITERS|ib_write_lat|-s $LAT_SIZE -n $LAT_ITERS|us|$LAT_SIZE"
)
TSV=$OUT/compare.tsv
printf 'round\ttest\ttool\tvalue\tunit\n' >"$TSV"
say "fabperf vs perftest on $DEV -> $PDEV ($PEER), $ROUNDS round(s) x $REPEATS runs per tool, BW ${BW_SIZE} B (perftest -D $PT_D, fabperf --warmup $FB_WARM --duration $FB_DUR), lat ${LAT_SIZE} B x $LAT_ITERS"
for ((r = FIRST; r < FIRST + ROUNDS; r++)); do
    for pair in "${PAIRS[@]}"; do
        IFS='|' read -r name ftest fargs ptool pargs unit SIZE <<<"$pair"
        # Each tool REPEATS times in a mirrored order (A B B A with 2), so
        # drift within the round (a busy host) weighs on both tools alike;
        # which tool is A alternates by round.
        a=fabperf b=perftest
        ((r % 2 == 0)) && a=perftest b=fabperf
        order=()
        for ((k = 0; k < REPEATS; k++)); do
            if ((k % 2 == 0)); then order+=("$a" "$b"); else order+=("$b" "$a"); fi
        done
        for tool in "${order[@]}"; do
            PORT_BASE=$((PORT_BASE + 10))
            if [[ $tool == fabperf ]]; then
                # shellcheck disable=SC2086 # word splitting of the argument lists is intended
                v=$(fabperf_run "$ftest" $fargs) || { failed "round $r: fabperf $ftest $fargs"; continue; }
            else
                # shellcheck disable=SC2086
                v=$(perftest_run "$ptool" $pargs) || { failed "round $r: $ptool $pargs"; continue; }
            fi
            printf '[%4ds] round %d  %-9s %-8s %10s %s\n' "$SECONDS" "$r" "$name" "$tool" "$v" "$unit"
            printf '%d\t%s\t%s\t%s\t%s\n' "$r" "$name" "$tool" "$v" "$unit" >>"$TSV"
        done
    done
done

# Ratio table: each round's fabperf/perftest ratio (means of its runs), the
# median over the rounds; BW target >= 1.00, latency (p50 / t_typical) <= 1.02.
# The clocksource at the end of the round (the watchdog may have switched it).
# The same facts go to facts.tsv (key, value) for the host, which merges the
# rounds of several guests into one table.
CLOCKSOURCE=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')
ACTIVE_MTU=$(ibv_devinfo -d "$DEV" | awk '/active_mtu/ { print $2; exit }')
printf 'active_mtu\t%s\nclocksource\t%s\n' "${ACTIVE_MTU:-?}" "$CLOCKSOURCE" >"$OUT/facts.tsv"
CLOCKSOURCE=$CLOCKSOURCE KERNEL=$(uname -r) TOPOLOGY=$FABPERF_SIM_TOPOLOGY ACCEL=$FABPERF_SIM_ACCEL \
    MTU=${ACTIVE_MTU:-?} "$FABPERF_SIM_REPO/sim/compare-table.sh" "$TSV" >"$OUT/compare.md"
say "ratio table"
cat "$OUT/compare.md"
if grep -q 'MISSED' "$OUT/compare.md"; then
    if [[ ${FABPERF_SIM_ENFORCE_TARGETS:-0} == 1 ]]; then
        failed "a ratio missed its target (FABPERF_SIM_ENFORCE_TARGETS=1)"
    else
        echo "note: a ratio missed its target (reported only; FABPERF_SIM_ENFORCE_TARGETS=1 makes it fail)"
    fi
fi

# Every run's raw output, for a look after the fact (copied to the target dir).
cp -r /tmp/st "$OUT/logs" 2>/dev/null

say "summary"
if [[ ${#FAILURES[@]} -gt 0 ]]; then
    printf 'FAILED: %s\n' "${FAILURES[@]}"
    printf 'soft-RoCE self test: %d failure(s)\n' "${#FAILURES[@]}"
    exit 1
fi
echo "soft-RoCE self test: all passed"
