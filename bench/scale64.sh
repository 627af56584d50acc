#!/usr/bin/env bash
# Control-plane figures at N = 64 on the namespace testbed (BENCHMARKS.md, "Runs at N = 64"):
# bring 64 nodes up, check the DNS answer for the agents' name is larger than a UDP answer
# holds (so discovery goes through the resolver's TCP fallback), run an incast of 63 senders,
# a bisection and a bandwidth mesh, keep each run's JSON outcome, log and store, tear down.
#
#   sudo flock /run/fabperf-testbed.shared.lock bench/scale64.sh [OUT_DIR]   (default /tmp/scale64)
#
# Needs root and what sim/testbed.sh needs, and a release build (cargo build --release -p fabperf).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
OUT=${1:-/tmp/scale64}
N=64
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
    tb exec switch fabperf run "$REPO/sim/plans/$plan" --db "$OUT/$name.db" --plain --json \
        >"$OUT/$name.json" 2>"$OUT/$name.log" || echo "$name: fabperf run exited with $?"
    echo "$name: $(echo "$(date +%s.%N) - $s" | bc) s; $(grep -E 'agents .* reachable|inside tests|wall time:|failed' "$OUT/$name.log" | tr '\n' ' ')"
}
run incast scale64-incast.toml
run mesh scale64-mesh.toml
tb exec switch fabperf export --db "$OUT/incast.db" --format jsonl >"$OUT/incast-export.jsonl" 2>&1 || true
tb exec switch fabperf mesh-summary --db "$OUT/mesh.db" >"$OUT/mesh-summary.txt" 2>&1 || true

t2=$(date +%s.%N)
tb down >"$OUT/down.log" 2>&1
t3=$(date +%s.%N)
echo "down: $(echo "$t3 - $t2" | bc) s"
