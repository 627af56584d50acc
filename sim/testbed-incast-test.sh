#!/usr/bin/env bash
# A 6-node incast of tcp-bw in both directions on the testbed (needs root):
# five senders into fp-node1, whose fabric link is shaped to 1 Gbit/s each
# way, all started at one instant. Checks that each direction's aggregate
# (over the flows' common interval) is no larger than that link carries,
# that every flow's measured interval is recorded in Unix time with its
# progress counts, that the intervals overlap, and prints the start skew.
#
#   sudo sim/testbed-incast-test.sh      # uses FABPERF_BIN, else target/release/fabperf
#
# Prints one line per check and "N passed, N failed" at the end; exit 1 on any failure.
set -uo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
TB=$SIM_DIR/testbed.sh
# shellcheck source=sim/testbed/lib.sh
source "$SIM_DIR/testbed/lib.sh"
STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}
# shellcheck source=sim/testbed/harness.sh
source "$SIM_DIR/testbed/harness.sh"
tb_test_begin testbed-incast-test
DB=$WORK/incast.db
RATE_GBPS=1.0
sed -e 's/duration = "3s"/duration = "2s"/' -e "s|/run/fabperf-testbed/token|$STATE/token|" \
    "$SIM_DIR/plans/incast-bidir.toml" >"$WORK/plan.toml"

trap 'tb_test_finish; exit $?' EXIT
"$TB" down >/dev/null 2>&1 || true

section "6 nodes, fp-node1's fabric link shaped to ${RATE_GBPS} Gbit/s each way"
t0=$SECONDS
if ! "$TB" up --nodes 6 >"$WORK/up.log" 2>&1; then
    bad "testbed up: $(tail -n 3 "$WORK/up.log" | tr '\n' ' ')"
    exit 1
fi
ok "testbed up ($((SECONDS - t0)) s)"
check "shape fp-node1" "$TB" degrade fp-node1 --rate 1gbit

sql() { python3 - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
for row in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PY
}

section "bidirectional incast into fp-node1"
t0=$SECONDS
if "$TB" exec switch "$FABPERF" run "$WORK/plan.toml" --db "$DB" --plain >"$WORK/run.log" 2>&1; then
    ok "the incast ran ($((SECONDS - t0)) s)"
else
    bad "fabperf run: $(tail -n 5 "$WORK/run.log" | tr '\n' ' ')"
fi
sed 's/^/      /' "$WORK/run.log" | grep -v "^      $" | tail -n 4
check "one cell, done" test "$(sql "SELECT count(*) FROM cells WHERE state = 'done'")" = 1
# Per sender one forward and one reverse flow (not their total as well).
check "10 flow rows: 5 senders x 2 directions ($(sql "SELECT count(*) FROM measurements WHERE role = 'flow'"))" \
    test "$(sql "SELECT count(*) FROM measurements WHERE role = 'flow'")" = 10
check "no bidir total stored for a flow" \
    test "$(sql "SELECT count(*) FROM measurements WHERE role = 'flow' AND json_extract(record, '$.direction') = 'bidir'")" = 0
nointerval=$(sql "SELECT count(*) FROM measurements WHERE role = 'flow' AND (json_extract(record, '$.interval.start_s') IS NULL OR json_extract(record, '$.interval.end_s') IS NULL OR json_extract(record, '$.interval.progress') IS NULL OR json_extract(record, '$.interval.sent_from_s') IS NULL)")
check "every flow's interval recorded in Unix time, with its progress (missing: $nointerval)" test "$nointerval" = 0
sql "SELECT m.src, json_extract(m.record, '$.direction'), round(m.bw_gbps, 3), printf('%.3f', json_extract(m.record, '$.interval.start_s')), printf('%.3f', json_extract(m.record, '$.interval.end_s')) FROM measurements m WHERE role = 'flow' ORDER BY 2, 1" |
    awk -F'|' '{printf "      flow %-9s %-8s %6s Gbit/s  interval %s .. %s\n", $1, $2, $3, $4, $5}'
for dir in forward reverse; do
    row=$(sql "SELECT round(bw_gbps, 3), round(json_extract(record, '$.flows.overlap_pct'), 1), round(json_extract(record, '$.flows.start_skew_s') * 1000, 2), round(json_extract(record, '$.duration_s'), 3), json_extract(record, '$.flows.count') FROM measurements WHERE role = 'aggregate' AND json_extract(record, '$.direction') = '$dir'")
    IFS='|' read -r agg overlap skew secs count <<<"$row"
    sum=$(sql "SELECT round(sum(bw_gbps), 3) FROM measurements WHERE role = 'flow' AND json_extract(record, '$.direction') = '$dir'")
    echo "      $dir: aggregate ${agg:-?} Gbit/s over the common ${secs:-?} s of ${count:-?} flows (sum of their own rates ${sum:-?}); overlap ${overlap:-?} %; start skew ${skew:-?} ms"
    check "$dir aggregate no larger than the ${RATE_GBPS} Gbit/s link (${agg:-none})" \
        python3 -c "import sys; sys.exit(not 0.3 < float('${agg:-0}') <= $RATE_GBPS * 1.03)"
    check "$dir flows overlap for at least 90 % (${overlap:-none} %)" python3 -c "import sys; sys.exit(not float('${overlap:-0}') >= 90)"
    check "$dir start skew measured (${skew:-none} ms)" python3 -c "import sys; sys.exit(not 0 <= float('${skew:--1}') < 100)"
done
