#!/usr/bin/env bash
# `fabperf mtu` on the testbed (needs root): from fp-node1 to fp-node2 across
# the plain management path (MTU 1500), the fabric (9000) and the VXLAN
# overlay (1450: its 1500-byte underlay less VXLAN's 50 bytes), each measured
# both ways and by ICMP; then fp-node2's switch port is set to MTU 1400, below
# the 1500 both nodes' interfaces are configured for, and the mismatch must be
# measured (1400 crosses), shifted by the same 50 bytes on the overlay, and
# named by `fabperf doctor --mtu-results` as an mtu-mismatch finding. The
# plan sim/plans/mtu-plain-vxlan.toml stores the same figures through
# `fabperf run`.
#
#   sudo sim/testbed-mtu-test.sh      # uses FABPERF_BIN, else target/release/fabperf
#
# Prints one line per check and "N passed, N failed" at the end; exit 1 on any failure.
set -uo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$SIM_DIR/.." && pwd -P)
TB=$SIM_DIR/testbed.sh
# shellcheck source=sim/testbed/lib.sh
source "$SIM_DIR/testbed/lib.sh"
STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}

# shellcheck source=sim/testbed/harness.sh
source "$SIM_DIR/testbed/harness.sh"
tb_test_begin testbed-mtu-test

trap 'tb_test_finish; exit $?' EXIT
"$TB" down >/dev/null 2>&1 || true

section "testbed up"
if ! "$TB" up >"$WORK/up.log" 2>&1; then
    bad "testbed up: $(tail -n 3 "$WORK/up.log" | tr '\n' ' ')"
    exit 1
fi
ok "testbed up"

MGMT=$(tb_mgmt_ip 2)
FABRIC=$(tb_fabric_ip 2)
OVERLAY=$(tb_overlay_ip 2)
mtu() { # OUT HOST...: fabperf mtu --json from fp-node1 into OUT; its exit status
    local out=$1
    shift
    "$TB" exec "${TB_NODE_PREFIX}1" "$FABPERF" mtu "$@" --token-file "$STATE/token" --json >"$out" 2>"$out.err"
}
# FILE HOST FIELD: a field of the path to HOST (e.g. forward.mtu, interface.kind)
field() { python3 - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = [p for p in r["paths"] if p["target"] == sys.argv[2]]
v = p[0] if p else {}
for k in sys.argv[3].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else v)
PY
}
expect() { # FILE HOST FIELD VALUE
    local got
    got=$(field "$1" "$2" "$3")
    check "$2 $3 = $4 (got ${got:-nothing})" test "$got" = "$4"
}

section "every path carries its configured MTU"
if mtu "$WORK/clean.json" "$MGMT" "$FABRIC" "$OVERLAY"; then ok "fabperf mtu exits 0 (no mismatch)"; else bad "fabperf mtu: $(tail -n 3 "$WORK/clean.json.err" | tr '\n' ' ')"; fi
for d in forward reverse icmp; do
    expect "$WORK/clean.json" "$MGMT" "$d.mtu" "$TB_MGMT_MTU"
    expect "$WORK/clean.json" "$FABRIC" "$d.mtu" "$TB_FABRIC_MTU"
    expect "$WORK/clean.json" "$OVERLAY" "$d.mtu" $((TB_MGMT_MTU - TB_VXLAN_OVERHEAD))
done
expect "$WORK/clean.json" "$MGMT" forward.payload $((TB_MGMT_MTU - 28))
expect "$WORK/clean.json" "$OVERLAY" interface.kind vxlan
expect "$WORK/clean.json" "$OVERLAY" interface.overhead.bytes "$TB_VXLAN_OVERHEAD"
expect "$WORK/clean.json" "$OVERLAY" agent_interface.name vxlan0

section "the plan: sim/plans/mtu-plain-vxlan.toml through fabperf run"
sed -e "s|/run/fabperf-testbed/token|$STATE/token|" "$REPO/sim/plans/mtu-plain-vxlan.toml" >"$WORK/mtu.toml"
if "$TB" exec switch "$FABPERF" run "$WORK/mtu.toml" --db "$WORK/mtu.db" --plain >"$WORK/run.log" 2>&1; then ok "mtu-plain-vxlan plan ran"; else bad "mtu-plain-vxlan: $(tail -n 5 "$WORK/run.log" | tr '\n' ' ')"; fi
stored() { # PATH: the distinct MTUs stored on that path, all directions and methods
    python3 - "$WORK/mtu.db" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = c.execute("SELECT DISTINCT m.mtu FROM measurements m JOIN cells c USING (run_id, cell_id) WHERE c.path = ? AND m.test = 'mtu'", (sys.argv[2],))
print(" ".join(str(r[0]) for r in rows))
PY
}
n=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT count(*) FROM measurements WHERE test = 'mtu'\").fetchone()[0])" "$WORK/mtu.db" 2>/dev/null)
check "18 records: 3 paths x 2 directions x forward, reverse, ICMP ($n)" test "${n:-0}" = 18
check "management path stored $TB_MGMT_MTU ($(stored mgmt))" test "$(stored mgmt)" = "$TB_MGMT_MTU"
check "fabric stored $TB_FABRIC_MTU ($(stored fabric))" test "$(stored fabric)" = "$TB_FABRIC_MTU"
check "overlay stored $((TB_MGMT_MTU - TB_VXLAN_OVERHEAD)) ($(stored overlay))" test "$(stored overlay)" = $((TB_MGMT_MTU - TB_VXLAN_OVERHEAD))

section "fp-node2's switch port at MTU 1400, its interfaces still at $TB_MGMT_MTU"
ip -n "$TB_SWITCH_NS" link set m-node2 mtu 1400
if mtu "$WORK/cut.json" "$MGMT" "$OVERLAY"; then bad "fabperf mtu exits 0 despite the mismatch"; else ok "fabperf mtu exits 1 (mismatch)"; fi
expect "$WORK/cut.json" "$MGMT" forward.mtu 1400
expect "$WORK/cut.json" "$MGMT" forward.limited_by path
expect "$WORK/cut.json" "$MGMT" icmp.mtu 1400
# Into fp-node1 the veth lets a VLAN tag's 4 bytes more in; whatever the plain
# path carries, the overlay carries 50 bytes less.
rev=$(field "$WORK/cut.json" "$MGMT" reverse.mtu)
orev=$(field "$WORK/cut.json" "$OVERLAY" reverse.mtu)
check "reverse cut below $TB_MGMT_MTU ($rev)" test "${rev:-9999}" -lt "$TB_MGMT_MTU"
check "the overlay carries $TB_VXLAN_OVERHEAD bytes less than its underlay path ($orev = $rev - $TB_VXLAN_OVERHEAD)" test "${orev:-0}" = $((${rev:-0} - TB_VXLAN_OVERHEAD))
n=$(python3 -c "import json,sys; print(sum(len(p.get('mismatches', [])) for p in json.load(open(sys.argv[1]))['paths']))" "$WORK/cut.json")
check "mismatches reported ($n)" test "${n:-0}" -ge 2
"$TB" exec "${TB_NODE_PREFIX}1" "$FABPERF" doctor --mtu-results "$WORK/cut.json" --json >"$WORK/doctor.json" 2>&1
finding=$(python3 - "$WORK/doctor.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for f in r["findings"]:
    if f["id"] == "mtu-mismatch" and f["subject"] == "mgmt0" and "1400" in f["summary"]:
        print(f["severity"], "|".join(e["value"] for e in f["evidence"]))
PY
)
echo "      doctor: ${finding:-no finding}"
check "doctor: mtu-mismatch on mgmt0 with the measured 1400 as evidence" grep -q "^error .*1500|largest packet that crossed: 1400 bytes" <<<"$finding"
"$TB" exec "${TB_NODE_PREFIX}1" "$FABPERF" doctor --mtu-results "$WORK/clean.json" --json >"$WORK/doctor-clean.json" 2>&1
check "doctor: no mtu-mismatch from the clean measurement" python3 -c "import json,sys; sys.exit(any(f['id'] == 'mtu-mismatch' for f in json.load(open(sys.argv[1]))['findings']))" "$WORK/doctor-clean.json"
ip -n "$TB_SWITCH_NS" link set m-node2 mtu "$TB_MGMT_MTU"
