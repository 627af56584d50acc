#!/usr/bin/env bash
# Fault localization measured (needs root): bring up an N-node testbed with a
# shaped fabric, inject K faults chosen by a seed (sim/testbed.sh inject), run
# a mesh plan over the fabric (tcp-bw both ways, tcp-lat one way, short
# cells, re-tests on), and compare what `fabperf mesh-summary --json` names
# (confirmed SUSPECT NODEs and LINKs) with the injected truth:
#   precision  named nodes/links that were faulty / everything named
#   recall     faulty nodes/links that were named / every fault
# per fault kind (a false positive counts against every kind) and per seed.
#
#   sudo sim/testbed-localize-test.sh                       # N = 32, seed 1, 4 faults: rate, delay, tx-half
#   sudo sim/testbed-localize-test.sh --nodes 64 --seeds "1 2 3"
#   sudo sim/testbed-localize-test.sh --nodes 32 --kinds rate,delay,loss,tx-half --rule clusterkit
#
# Options: --nodes N, --seeds "S ...", --faults K (default N/8, at least 2),
# --kinds LIST (default rate,delay,tx-half), --rule median|clusterkit (the
# summary's rule, default: the plan's, i.e. median), --fabric-rate R
# (default 2gbit / (N/2), at most 100mbit: what the 2 cores can carry for
# N/2 concurrent flows), --bw-secs S, --lat-secs S (cell durations),
# --expect P (exit 1 unless precision and recall of every kind reach P,
# default 1.0), --results FILE (append one JSON line per seed).
# Uses FABPERF_BIN, else target/release/fabperf (built when missing).
set -uo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
TB=$SIM_DIR/testbed.sh
# shellcheck source=sim/testbed/lib.sh
source "$SIM_DIR/testbed/lib.sh"
STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}

NODES=32 SEEDS=1 FAULTS='' KINDS=rate,delay,tx-half RULE='' FRATE='' BW_SECS=0.5 LAT_SECS=0.3 EXPECT=1.0 RESULTS=''
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) NODES=${2:?}; shift 2 ;;
        --seeds) SEEDS=${2:?}; shift 2 ;;
        --faults) FAULTS=${2:?}; shift 2 ;;
        --kinds) KINDS=${2:?}; shift 2 ;;
        --rule) RULE=${2:?}; shift 2 ;;
        --fabric-rate) FRATE=${2:?}; shift 2 ;;
        --bw-secs) BW_SECS=${2:?}; shift 2 ;;
        --lat-secs) LAT_SECS=${2:?}; shift 2 ;;
        --expect) EXPECT=${2:?}; shift 2 ;;
        --results) RESULTS=${2:?}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "testbed-localize-test: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
NODES=$(tb_parse_nodes "$NODES") || exit 2
[[ $SEEDS =~ ^[0-9]+( [0-9]+)*$ ]] || { echo "--seeds wants numbers separated by spaces, got '$SEEDS'" >&2; exit 2; }
[[ -z $RULE || $RULE == median || $RULE == clusterkit ]] || { echo "--rule wants median or clusterkit, got '$RULE'" >&2; exit 2; }
[[ -n $FAULTS ]] || FAULTS=$((NODES / 8 < 2 ? 2 : NODES / 8))
if [[ -z $FRATE ]]; then
    FRATE=$((2000 / (NODES / 2)))
    ((FRATE <= 100)) || FRATE=100
    FRATE=${FRATE}mbit
fi
tb_set_scale "$NODES"

# shellcheck source=sim/testbed/harness.sh
source "$SIM_DIR/testbed/harness.sh"
tb_test_begin testbed-localize-test
T0=$SECONDS
trap 'tb_test_finish; exit $?' EXIT
"$TB" down >/dev/null 2>&1 || true

PLAN=$WORK/localize.toml
RULE_LINE=
[[ -z $RULE ]] || RULE_LINE="suspect_rule = \"$RULE\""
{
    printf 'name = "localize"\ntoken_file = "%s"\ntimeout = "5s"\nretries = 1\nretry_delay = "0.5s"\n' "$STATE/token"
    for ((k = 1; k <= NODES; k++)); do
        printf '[[agents]]\nname = "%s"\naddr = "%s"\npath = "fabric"\n' "$(tb_node_ns "$k")" "$(tb_fabric_ip "$k")"
    done
    cat <<EOF
[[tests]]
name = "bw"
kind = "tcp-bw"
pattern = "mesh"
duration = "${BW_SECS}s"
params = { omit_s = 0.2 }
retest = 2
$RULE_LINE

[[tests]]
name = "lat"
kind = "tcp-lat"
pattern = "mesh"
duration = "${LAT_SECS}s"
retest = 2
# a ping-pong measures the round trip: one cell per pair
ordered = false
$RULE_LINE
EOF
} >"$PLAN"
fp() { "$TB" exec switch "$FABPERF" "$@"; }

section "testbed up: $NODES nodes, fabric shaped to $FRATE"
t=$SECONDS
if ! "$TB" up --nodes "$NODES" --fabric-rate "$FRATE" >"$WORK/up.log" 2>&1; then
    bad "testbed up: $(tail -n 3 "$WORK/up.log" | tr '\n' ' ')"
    exit 1
fi
ok "testbed up ($((SECONDS - t)) s)"

ALL_OK=1
for seed in $SEEDS; do
    section "seed $seed: $FAULTS faults of $KINDS"
    truth=$WORK/truth-$seed.json
    if ! "$TB" inject --seed "$seed" --faults "$FAULTS" --kinds "$KINDS" --out "$truth" >"$WORK/inject-$seed.log" 2>&1; then
        bad "inject: $(tail -n 3 "$WORK/inject-$seed.log" | tr '\n' ' ')"
        ALL_OK=0
        continue
    fi
    sed -n 's/^testbed: fault: /      fault: /p' "$WORK/inject-$seed.log"
    db=$WORK/localize-$seed.db
    t=$SECONDS
    fp run "$PLAN" --db "$db" --plain >"$WORK/run-$seed.log" 2>&1
    rc=$?
    wall=$((SECONDS - t))
    grep -E "cells done|re-testing|wall time" "$WORK/run-$seed.log" | sed 's/^/      /'
    check "the mesh ran (exit $rc, $wall s)" test "$rc" -le 1
    fp mesh-summary --db "$db" --json >"$WORK/summary-$seed.json" 2>"$WORK/summary-$seed.err"
    fp mesh-summary --db "$db" >"$WORK/summary-$seed.txt" 2>&1
    grep -E "SUSPECT|rule:|cleared" "$WORK/summary-$seed.txt" | sed 's/^/      /'
    if python3 - "$truth" "$WORK/summary-$seed.json" "$EXPECT" "$NODES" "$seed" "$wall" "$FRATE" "${RESULTS:-/dev/null}" <<'PY'; then
import json, sys
truth = json.load(open(sys.argv[1]))
groups = [g for a in json.load(open(sys.argv[2])) for g in a["groups"]]
expect, nodes, seed, wall, frate, results = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8]

def key(f):
    return ("node", f["node"]) if f["target"] == "node" else ("link",) + tuple(sorted(f["link"]))

faults = {key(f): f["kind"] for f in truth["faults"]}
named = {}  # target -> the tests that named it
for g in groups:
    for n in g["bad_nodes"]:
        named.setdefault(("node", n), set()).add(g["test"])
    for a, b in g["bad_links"]:
        named.setdefault(("link",) + tuple(sorted((a, b))), set()).add(g["test"])
unconfirmed = sorted({f["node"] for g in groups for f in g["node_findings"] if not f["confirmed"]})
fp = sorted(t for t in named if t not in faults)
row = {"nodes": nodes, "seed": seed, "faults": len(faults), "fabric_rate": frate, "mesh_wall_s": wall,
       "rules": sorted({(g.get("reference") or {}).get("rule", "none") for g in groups}), "false_positives": [" - ".join(t[1:]) for t in fp],
       "unconfirmed_nodes": unconfirmed, "kinds": {}}
ok = True
for kind in sorted(set(faults.values())):
    mine = [t for t, k in faults.items() if k == kind]
    hit = [t for t in mine if t in named]
    recall = len(hit) / len(mine)
    precision = len(hit) / (len(hit) + len(fp)) if hit or fp else 1.0
    row["kinds"][kind] = {"faults": len(mine), "named": len(hit), "precision": round(precision, 3), "recall": round(recall, 3),
                          "missed": [" - ".join(t[1:]) for t in mine if t not in named]}
    ok &= precision >= expect and recall >= expect
    print(f"      {kind:8} {len(hit)}/{len(mine)} named   precision {precision:.2f}   recall {recall:.2f}"
          + (f"   missed: {', '.join(row['kinds'][kind]['missed'])}" if row['kinds'][kind]['missed'] else ""))
if fp:
    print(f"      false positives: {', '.join(row['false_positives'])}")
if unconfirmed:
    print(f"      unconfirmed (not counted): {', '.join(unconfirmed)}")
with open(results, "a") as f:
    f.write(json.dumps(row) + "\n")
sys.exit(0 if ok else 1)
PY
        ok "seed $seed: precision and recall of every kind >= $EXPECT"
    else
        bad "seed $seed: precision or recall below $EXPECT (summary: $WORK/summary-$seed.txt)"
        ALL_OK=0
    fi
done
check "restore" "$TB" restore
echo "      localization test: $NODES nodes, seeds $SEEDS: $((SECONDS - T0)) s"
