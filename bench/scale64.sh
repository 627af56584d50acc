#!/usr/bin/env bash
# Control-plane figures at N = 64 on the namespace testbed (BENCHMARKS.md, "Runs at N = 64"):
# bring 64 nodes up, check the DNS answer for the agents' name is larger than a UDP answer
# holds (so discovery goes through the resolver's TCP fallback), run an incast of 63 senders
# into fp-node1 with its port shaped to RECV_RATE (default 10gbit) and a bisection, check
# each aggregate is within the receiver's port and its flows overlap for at least 90 %, then
# a bandwidth mesh (port unshaped again); keep each run's JSON outcome, log and store, tear
# down. Exits 1 when a check fails.
#
#   sudo flock /run/fabperf-testbed.shared.lock bench/scale64.sh [OUT_DIR]   (default /tmp/scale64)
#   MESH_DURATION=4.5s RECV_RATE=10gbit bench/scale64.sh ...   (the mesh cells' measured time, the incast's port)
#
# Needs root and what sim/testbed.sh needs, and a release build (cargo build --release -p fabperf).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
OUT=${1:-/tmp/scale64}
N=64
RECV_RATE=${RECV_RATE:-10gbit}
RECV_GBPS=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+(?:\.\d+)?)([gm])bit', sys.argv[1]); sys.exit(f'RECV_RATE={sys.argv[1]}: use Ngbit or Nmbit') if not m else print(float(m[1]) / (1 if m[2] == 'g' else 1000))" "$RECV_RATE")
FAILED=0
mkdir -p "$OUT"
tb() { "$REPO/sim/testbed.sh" "$@"; }
trap 'tb down >/dev/null 2>&1 || true' EXIT

t0=$(date +%s.%N)
tb up --nodes "$N" >"$OUT/up.log" 2>&1
t1=$(date +%s.%N)
echo "up --nodes $N: $(echo "$t1 - $t0" | bc) s"

# The A records of fabric.agents.fabperf.test: over UDP without EDNS (truncated?), then over TCP.
tb exec switch /usr/bin/python3 - <<'PY'
import socket, struct
def query(name):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for l in name.split("."):
        q += bytes([len(l)]) + l.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)
q = query("fabric.agents.fabperf.test")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
u.sendto(q, ("198.18.0.254", 53)); r, _ = u.recvfrom(65535)
tc = bool(r[2] & 0x02); an = struct.unpack(">H", r[6:8])[0]
t = socket.create_connection(("198.18.0.254", 53), 3)
t.sendall(struct.pack(">H", len(q)) + q)
n = struct.unpack(">H", t.recv(2, socket.MSG_WAITALL))[0]
rt = t.recv(n, socket.MSG_WAITALL)
print(f"DNS fabric.agents.fabperf.test: UDP answer {len(r)} bytes, TC={int(tc)}, {an} records; "
      f"TCP answer {len(rt)} bytes, {struct.unpack('>H', rt[6:8])[0]} records")
PY

run() {
    local name=$1 plan=$2
    local s=$(date +%s.%N)
    [[ $plan == /* ]] || plan=$REPO/sim/plans/$plan
    tb exec switch fabperf run "$plan" --db "$OUT/$name.db" --plain --json \
        >"$OUT/$name.json" 2>"$OUT/$name.log" || echo "$name: fabperf run exited with $?"
    echo "$name: $(echo "$(date +%s.%N) - $s" | bc) s; $(grep -E 'agents .* reachable|inside tests|wall time:|failed' "$OUT/$name.log" | tr '\n' ' ')"
}
tb degrade fp-node1 --rate "$RECV_RATE" >/dev/null
run incast scale64-incast.toml
tb restore fp-node1 >/dev/null
tb exec switch fabperf export --db "$OUT/incast.db" --format jsonl >"$OUT/incast-export.jsonl" 2>&1 || true
# Each concurrent-flow cell: its aggregate, its flows' overlap, and (the incast) the aggregate
# within fp-node1's shaped port.
python3 - "$OUT/incast.db" "$RECV_GBPS" <<'PY' || FAILED=1
import json, sqlite3, sys
db, port = sys.argv[1], float(sys.argv[2])
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
bad = 0
for pattern, state, err in c.execute("SELECT pattern, state, error FROM cells ORDER BY seq"):
    if state != "done":
        print(f"{pattern}: cell {state}: {err}"); bad = 1
for pattern, rec in c.execute(
        "SELECT c.pattern, m.record FROM measurements m JOIN cells c USING (run_id, cell_id) "
        "WHERE m.role = 'aggregate' ORDER BY c.seq"):
    r = json.loads(rec); f = r["flows"]
    line = (f"{pattern}: {f['count']} flows, aggregate {r['bw_gbps']:.2f} Gbit/s over {r['duration_s']:.2f} s, "
            f"overlap {f['overlap_pct']:.1f} %, senders started {f['start_skew_s'] * 1e3:.1f} ms apart")
    ok = f["overlap_pct"] >= 90
    if pattern == "incast":
        line += f"; receiver port {port:g} Gbit/s"
        ok = ok and r["bw_gbps"] <= port * 1.03
    print(line + ("" if ok else "  <- FAILED")); bad |= not ok
sys.exit(bad)
PY
# MESH_DURATION (default the plan's 2s) sets the mesh cells' measured time: the share of the
# wall time inside the intervals grows with it (each round costs about 0.26 s besides them).
if [[ -n ${MESH_DURATION:-} ]]; then
    [[ $MESH_DURATION =~ ^[0-9]+(\.[0-9]+)?s$ ]] || { echo "MESH_DURATION wants seconds like 4.5s, got '$MESH_DURATION'" >&2; exit 2; }
    sed "s/^duration = \"2s\"$/duration = \"$MESH_DURATION\"/" "$REPO/sim/plans/scale64-mesh.toml" >"$OUT/scale64-mesh.toml"
    grep -q "^duration = \"$MESH_DURATION\"$" "$OUT/scale64-mesh.toml" || { echo "scale64-mesh.toml has no duration = \"2s\" line to change" >&2; exit 2; }
    run mesh "$OUT/scale64-mesh.toml"
else
    run mesh scale64-mesh.toml
fi
tb exec switch fabperf mesh-summary --db "$OUT/mesh.db" >"$OUT/mesh-summary.txt" 2>&1 || true

t2=$(date +%s.%N)
tb down >"$OUT/down.log" 2>&1
t3=$(date +%s.%N)
echo "down: $(echo "$t3 - $t2" | bc) s"
exit "$FAILED"
