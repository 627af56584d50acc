#!/usr/bin/env bash
# Mesh verdicts on the 4-node testbed (needs root):
#  1. a plan edited between two runs (new cell ids): the report and the mesh
#     summary count only the current plan's cells and list the others;
#  2. fp-node3 degraded on transmit only (`tc` on the egress of its fabric
#     link): the mesh, measured both ways, names it as the node whose sends
#     fail — unconfirmed while its re-tests are off, and still unconfirmed
#     when its re-tests are made to fail (its agent's port rejected);
#  3. `fabperf run --retry-failed` runs the failed re-tests again, and the
#     node is confirmed: a `mesh suspect-nodes == 0` gate that passed on the
#     unconfirmed suspects (saying so) now fails.
#
#   sudo sim/testbed-mesh-test.sh     # uses FABPERF_BIN, else target/release/fabperf
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
tb_test_begin testbed-mesh-test
T0=$SECONDS

# plan NAME TEST_TOML: 4 static agents on the fabric (names stay the same
# when an agent cannot be reached).
plan() {
    local f=$WORK/$1.toml k
    {
        printf 'name = "%s"\ntoken_file = "%s"\ntimeout = "3s"\nretries = 1\nretry_delay = "0.5s"\n' "$1" "$STATE/token"
        for k in 1 2 3 4; do
            printf '[[agents]]\nname = "%s"\naddr = "%s"\npath = "fabric"\n' "$(tb_node_ns "$k")" "$(tb_fabric_ip "$k")"
        done
        printf '%s\n' "$2"
    } >"$f"
    echo "$f"
}
fp() { "$TB" exec switch "$FABPERF" "$@"; }

trap 'tb_test_finish; exit $?' EXIT
"$TB" down >/dev/null 2>&1 || true

section "testbed up"
if ! "$TB" up >"$WORK/up.log" 2>&1; then
    bad "testbed up: $(tail -n 3 "$WORK/up.log" | tr '\n' ' ')"
    exit 1
fi
ok "testbed up"

section "a plan edited between two runs"
LAT='[[tests]]
name = "lat"
kind = "tcp-lat"
pattern = "mesh"
retest = 0
duration = "0.3s"'
DB=$WORK/stale.db
p1=$(plan stale "$LAT")
check "first version runs" fp run "$p1" --db "$DB" --quiet
p2=$(plan stale "${LAT/0.3s/0.4s}")
check "edited version (another duration: new cell ids) runs" fp run "$p2" --db "$DB" --quiet
fp report --db "$DB" --format json -o "$WORK/stale.json" >/dev/null 2>&1
check "the report counts the current plan's 12 cells, one repeat per pair, and lists the 12 others" python3 - "$WORK/stale.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [x for x in r["rows"] if x.get("test") == "lat"]
# A mesh row shows its pairs as instances, each with its own repeats.
inst = [i for x in rows for i in (x.get("instances") or [])]
ns = sorted({i["stats"]["n"] for i in inst if i.get("stats")})
notes = [n for n in r["notes"] if "not part of its current plan" in n]
print(f"      cells done {r['run']['cells_done']}, {len(inst)} pairs, repeats per pair {ns}, note: {notes[0][:90] if notes else None}...")
sys.exit(not (r["run"]["cells_done"] == 12 and len(inst) == 12 and ns == [1] and notes and notes[0].startswith("12 stored cells")))
PY
fp mesh-summary --db "$DB" >"$WORK/stale-summary.txt" 2>&1
check "the mesh summary averages one repeat and lists the stale cells" \
    grep -q "mean of 1 repeat" "$WORK/stale-summary.txt"
check "  ... 12 of them" grep -q "12 stored cells are not part of the run's current plan" "$WORK/stale-summary.txt"
stale=$(fp runs --db "$DB" | awk 'NR == 2 {print $5 "/" $NF}')
check "fabperf runs counts 12 done and 12 stale ($stale)" test "$stale" = 12/12

section "fp-node3 degraded on transmit only"
check "degrade fp-node3 --rate 100mbit --egress-only" "$TB" degrade fp-node3 --rate 100mbit --egress-only
check "only its own end is shaped" bash -c "tc -n fp-node3 qdisc show dev fab0 | grep -q tbf && ! tc -n $TB_SWITCH_NS qdisc show dev f-node3 | grep -q tbf"
BW='[[tests]]
name = "mesh"
kind = "tcp-bw"
pattern = "mesh"
duration = "1s"
params = { omit_s = 0.3 }
suspect_bw = 0.3
retest = RETEST'
DB=$WORK/mesh.db
m0=$(plan mesh "${BW/RETEST/0}")
fp run "$m0" --db "$DB" --plain >"$WORK/mesh0.log" 2>&1
check "mesh (both directions, 12 cells) done" grep -q "12 cells done, 0 failed" "$WORK/mesh0.log"
fp mesh-summary --db "$DB" >"$WORK/summary0.txt" 2>&1
sed 's/^/      /' "$WORK/summary0.txt"
check "its sends are named, unconfirmed without re-tests" grep -q "unconfirmed SUSPECT NODE fp-node3: its sends fail" "$WORK/summary0.txt"
check "no node is confirmed" test "$(grep -c '^  SUSPECT NODE' "$WORK/summary0.txt")" = 0

section "re-tests made to fail: fp-node3's agent port rejected"
reject() { ip netns exec fp-node3 iptables "$1" INPUT -p tcp --dport "$TB_PORT" -j REJECT --reject-with tcp-reset; }
check "reject fp-node3:$TB_PORT" reject -I
m1=$(plan mesh "${BW/RETEST/1}")
fp run "$m1" --db "$DB" --plain >"$WORK/mesh1.log" 2>&1
rc=$?
check "the run exits 1: its re-tests failed (rc $rc)" test "$rc" = 1
check "  ... and says re-tests ran" grep -qE "re-testing [0-9]+ suspect cell" "$WORK/mesh1.log"
fp mesh-summary --db "$DB" >"$WORK/summary1.txt" 2>&1
sed 's/^/      /' "$WORK/summary1.txt"
check "the suspects are unconfirmed, their re-tests failed" grep -q "unconfirmed fp-node3 -> .* 1 re-test failed" "$WORK/summary1.txt"
check "  ... with the way to run them again" grep -q "retry-failed" "$WORK/summary1.txt"
check "  ... and nothing is confirmed" test "$(grep -c '^  SUSPECT NODE' "$WORK/summary1.txt")" = 0
fp report --db "$DB" --gate "mesh suspect-nodes == 0" >"$WORK/gate1.txt" 2>&1
check "gate mesh suspect-nodes == 0 passes on unconfirmed suspects ..." grep -q "^PASS mesh suspect-nodes == 0" "$WORK/gate1.txt"
check "  ... and says how many it left out" grep -q "note: .*1 more not counted, unconfirmed .*: fp-node3" "$WORK/gate1.txt"

section "--retry-failed runs the failed re-tests again"
check "accept fp-node3:$TB_PORT again" reject -D
fp run "$m1" --db "$DB" --plain --retry-failed >"$WORK/mesh2.log" 2>&1
check "the run exits 0" test $? = 0
fp mesh-summary --db "$DB" >"$WORK/summary2.txt" 2>&1
sed 's/^/      /' "$WORK/summary2.txt"
check "fp-node3 is confirmed as the node whose sends fail" grep -q "^  SUSPECT NODE fp-node3: its sends fail" "$WORK/summary2.txt"
check "no other node is named" test "$(grep -c 'SUSPECT NODE' "$WORK/summary2.txt")" = 1
fp report --db "$DB" --gate "mesh suspect-nodes == 0" >"$WORK/gate2.txt" 2>&1
check "gate mesh suspect-nodes == 0 now fails, naming fp-node3" grep -q "measured 1 (fp-node3)" "$WORK/gate2.txt"
echo "      mesh test: $((SECONDS - T0)) s"
