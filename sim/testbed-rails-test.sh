#!/usr/bin/env bash
# Rails on a 4-node testbed with 4 rails per node (needs root, ~60 s):
#  1. `up --rails 4`: rail0..rail3 in every node, each on its own bridge (a
#     leaf), one agent per node serving all four; `degrade --rail` refuses a
#     rail the testbed does not have;
#  2. fp-node2's rail 1 degraded to 100 Mbit/s (a cable): a tcp-bw mesh on
#     rails pairs rail i with rail i, the four rails of a round at one
#     start, every cell stored with its rail, and the mesh summary names
#     fp-node2/rail1 (confirmed by its re-tests) and nothing else, as does
#     `fabperf report` (a suspect-nodes gate fails on it);
#  3. rail 2 degraded on every node (a leaf): the summary names rail2 — the
#     rail, not its four nodes — and nothing else;
#  4. `restore` removes the shaping.
#
#   sudo sim/testbed-rails-test.sh     # uses FABPERF_BIN, else target/release/fabperf
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
tb_test_begin testbed-rails-test
T0=$SECONDS
NODES=4
RAILS=4

fp() { "$TB" exec switch "$FABPERF" "$@"; }

trap 'tb_test_finish; exit $?' EXIT
"$TB" down >/dev/null 2>&1 || true

section "testbed up with $RAILS rails"
if ! "$TB" up --nodes "$NODES" --rails "$RAILS" >"$WORK/up.log" 2>&1; then
    bad "testbed up --rails $RAILS: $(tail -n 3 "$WORK/up.log" | tr '\n' ' ')"
    exit 1
fi
ok "testbed up --nodes $NODES --rails $RAILS"
check "fp-node2 has rail1 at $(tb_rail_ip 2 1)" bash -c "ip -n fp-node2 -4 addr show dev rail1 | grep -q 'inet $(tb_rail_ip 2 1)/'"
check "rail1 is on its own bridge" bash -c "ip -n $TB_SWITCH_NS link show r1-node2 | grep -q 'master br-rail1'"
"$TB" status >"$WORK/status.txt" 2>&1
check "status shows the rails agents listening" test "$(grep -c "rails .*0.0.0.0:$TB_RAILS_PORT .*alive, listening" "$WORK/status.txt")" = "$NODES"
"$TB" degrade fp-node2 --rail "$RAILS" --rate 100mbit >"$WORK/bad-rail.txt" 2>&1
rc=$?
check "degrade --rail $RAILS is refused (rc $rc): $(head -n1 "$WORK/bad-rail.txt")" \
    bash -c "[[ $rc == 2 ]] && grep -q 'no rail $RAILS in this testbed: it has rails 0 to $((RAILS - 1))' '$WORK/bad-rail.txt'"

section "fp-node2's rail 1 degraded"
check "degrade fp-node2 --rail 1 --rate 100mbit" "$TB" degrade fp-node2 --rail 1 --rate 100mbit
check "both ends of rail 1 are shaped, fab0 and rail 0 are not" bash -c "
    tc -n fp-node2 qdisc show dev rail1 | grep -q tbf &&
    tc -n $TB_SWITCH_NS qdisc show dev r1-node2 | grep -q tbf &&
    ! tc -n fp-node2 qdisc show dev rail0 | grep -q tbf &&
    ! tc -n fp-node2 qdisc show dev fab0 | grep -q tbf"

PLAN=$WORK/rails.toml
RAIL_LIST=$(seq -s ', ' -f '"rail%g"' 0 $((RAILS - 1)))
{
    printf 'name = "rails"\ntoken_file = "%s"\ntimeout = "3s"\nretries = 1\nretry_delay = "0.5s"\n' "$STATE/token"
    for k in $(seq 1 "$NODES"); do
        printf '[[agents]]\nname = "%s"\naddr = "%s:%d"\npath = "rails"\n' "$(tb_node_ns "$k")" "$(tb_mgmt_ip "$k")" "$TB_RAILS_PORT"
    done
    cat <<'TOML'
[[tests]]
name = "rails"
kind = "tcp-bw"
pattern = "mesh"
rails = [RAIL_LIST]
duration = "1s"
params = { omit_s = 0.3 }
suspect_bw = 0.3
retest = 1
TOML
} | sed "s/RAIL_LIST/$RAIL_LIST/" >"$PLAN"
DB=$WORK/rails.db
fp run "$PLAN" --db "$DB" --plain >"$WORK/run.log" 2>&1
rc=$?
sed 's/^/      /' "$WORK/run.log" | tail -n 5
check "the run exits 0 (rc $rc)" test "$rc" = 0
PAIRS=$((NODES * (NODES - 1) * RAILS))
check "every ordered pair on every rail: $PAIRS mesh cells done, each with its rail, the $RAILS rails of a round in one batch" \
    python3 - "$DB" "$RAILS" "$PAIRS" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rails, pairs = int(sys.argv[2]), int(sys.argv[3])
mesh = db.execute("select batch, dims from cells where pattern = 'mesh' and state = 'done'").fetchall()
batches = {}
for batch, dims in mesh:
    batches.setdefault(batch, []).append(json.loads(dims)["rail"])
bad = {b: r for b, r in batches.items() if sorted(set(r)) != list(range(rails))}
print(f"      {len(mesh)} mesh cells in {len(batches)} batches; batches without every rail: {bad}")
sys.exit(not (len(mesh) == pairs and not bad))
PY
fp mesh-summary --db "$DB" >"$WORK/summary.txt" 2>&1
sed 's/^/      /' "$WORK/summary.txt"
check "the summary has the nodes' rails as rows and columns" grep -q "fp-node1/rail0" "$WORK/summary.txt"
check "fp-node2's rail 1 is named, confirmed by its re-tests" grep -q "^  SUSPECT NODE fp-node2/rail1" "$WORK/summary.txt"
check "no other node or rail is named" test "$(grep -c 'SUSPECT' "$WORK/summary.txt")" = 1

fp report --db "$DB" --gate "mesh suspect-nodes == 0" >"$WORK/report.txt" 2>&1
rc=$?
check "the report's mesh has the rails too, and gate mesh suspect-nodes == 0 fails naming the rail (rc $rc)" \
    bash -c "[[ $rc == 1 ]] && grep -q 'fp-node2/rail1' '$WORK/report.txt' && grep -q 'measured 1 (fp-node2/rail1)' '$WORK/report.txt'"

check "restore fp-node2 --rail 1" "$TB" restore fp-node2 --rail 1
check "rail 1 is unshaped again" bash -c "! tc -n fp-node2 qdisc show dev rail1 | grep -q tbf && ! tc -n $TB_SWITCH_NS qdisc show dev r1-node2 | grep -q tbf"

section "rail 2 degraded on every node (its leaf)"
for k in $(seq 1 "$NODES"); do
    check "degrade $(tb_node_ns "$k") --rail 2 --rate 100mbit" "$TB" degrade "$(tb_node_ns "$k")" --rail 2 --rate 100mbit
done
DB2=$WORK/rails-leaf.db
fp run "$PLAN" --db "$DB2" --plain >"$WORK/run2.log" 2>&1
rc=$?
sed 's/^/      /' "$WORK/run2.log" | tail -n 3
check "the run exits 0 (rc $rc)" test "$rc" = 0
fp mesh-summary --db "$DB2" >"$WORK/summary2.txt" 2>&1
grep -E 'SUSPECT|rule:' "$WORK/summary2.txt" | sed 's/^/      /'
check "rail2 is named, confirmed by its re-tests" grep -q "^  SUSPECT RAIL rail2: every one of its $NODES nodes fails on it" "$WORK/summary2.txt"
check "no node and no link is named, only the rail" test "$(grep -c 'SUSPECT' "$WORK/summary2.txt")" = 1
fp mesh-summary --db "$DB2" --json >"$WORK/summary2.json" 2>/dev/null
fp report --db "$DB2" --gate "mesh suspect-rails == 0" --gate "mesh suspect-nodes == 0" >"$WORK/report2.txt" 2>&1
rc=$?
check "gate mesh suspect-rails == 0 fails naming rail2, and the path summary names the rail (rc $rc)" \
    bash -c "[[ $rc == 1 ]] && grep -q 'measured 1 (rail2)' '$WORK/report2.txt' && grep -q 'rail(s) rail2' '$WORK/report2.txt'"
check "the JSON lists rail2 in bad_rails and no bad node" python3 -c "
import json, sys
a = json.load(open(sys.argv[1]))
gs = [g for m in (a if isinstance(a, list) else [a]) for g in m['groups']]
sys.exit(not (any(g.get('bad_rails') == ['rail2'] for g in gs) and all(not g['bad_nodes'] for g in gs)))" "$WORK/summary2.json"

section "restore"
check "restore (every node's rail 2)" "$TB" restore
check "rail 2 is unshaped again" bash -c "! tc -n fp-node3 qdisc show dev rail2 | grep -q tbf && ! tc -n $TB_SWITCH_NS qdisc show dev r2-node3 | grep -q tbf"
echo "      rails test: $((SECONDS - T0)) s"
