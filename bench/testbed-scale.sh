#!/usr/bin/env bash
# Testbed figures per size (docs/testbed.md, "Scale"): for each N, time `sim/testbed.sh up
# --nodes N`, then with every agent idle read each agent's RSS and PSS (smaps_rollup) and
# open file descriptors, the kernel's neighbour-table limits and the bridges' port counts,
# then time `down`. One line per N on stdout (a table row), details in OUT_DIR.
#
#   sudo flock /run/fabperf-testbed.shared.lock bench/testbed-scale.sh [--nodes "64 128 256"] [--out DIR]
#
# Needs root and what sim/testbed.sh needs; uses FABPERF_BIN, else target/release/fabperf.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
SIZES="64 128 256" OUT=/tmp/testbed-scale
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) SIZES=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "testbed-scale: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ $SIZES =~ ^[0-9]+( [0-9]+)*$ ]] || { echo "--nodes wants numbers separated by spaces, got '$SIZES'" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "testbed-scale: needs root (network namespaces)" >&2; exit 1; }
STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}
mkdir -p "$OUT"
tb() { "$REPO/sim/testbed.sh" "$@"; }
trap 'tb down >/dev/null 2>&1 || true' EXIT
now() { date +%s.%N; }

echo "| N | \`up\` | agents | idle agent RSS (PSS), median | all agents RSS (PSS) | fds per agent | \`down\` |"
echo "|---|---|---|---|---|---|---|"
for n in $SIZES; do
    t0=$(now)
    if ! tb up --nodes "$n" >"$OUT/up-$n.log" 2>&1; then
        echo "up --nodes $n failed; its log: $OUT/up-$n.log" >&2
        tail -n 5 "$OUT/up-$n.log" >&2
        exit 1
    fi
    t1=$(now)
    sleep 2
    # Every agent's pid file names its `ip netns exec` process, which exec'd the agent.
    : >"$OUT/agents-$n.tsv"
    for pidf in "$STATE"/pids/*.pid; do
        pid=$(cat "$pidf")
        [[ -r /proc/$pid/smaps_rollup ]] || { echo "agent $(basename "$pidf" .pid) (pid $pid) is gone" >&2; exit 1; }
        rss=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
        pss=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup")
        fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
        printf '%s\t%s\t%s\t%s\n' "$(basename "$pidf" .pid)" "$rss" "$pss" "$fds" >>"$OUT/agents-$n.tsv"
    done
    {
        sysctl net.ipv4.neigh.default.gc_thresh1 net.ipv4.neigh.default.gc_thresh2 net.ipv4.neigh.default.gc_thresh3
        # The networks' bridges live in the switch's namespace.
        for br in $(ip -n fp-switch -o link show type bridge | awk -F': ' '{print $2}' | cut -d@ -f1); do
            echo "bridge $br: $(ip -n fp-switch -o link show master "$br" | wc -l) ports"
        done
        echo "host open files: $(cut -f1 /proc/sys/fs/file-nr) of $(cat /proc/sys/fs/file-max)"
    } >"$OUT/limits-$n.txt" 2>&1
    t2=$(now)
    tb down >"$OUT/down-$n.log" 2>&1
    t3=$(now)
    python3 - "$OUT/agents-$n.tsv" "$n" "$(echo "$t1 - $t0" | bc)" "$(echo "$t3 - $t2" | bc)" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
n, up, down = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
rss = [int(r[1]) for r in rows]; pss = [int(r[2]) for r in rows]; fds = [int(r[3]) for r in rows]
mib = lambda kb: kb / 1024
print(f"| {n} | {up:.0f} s | {len(rows)} | {mib(statistics.median(rss)):.1f} MiB ({mib(statistics.median(pss)):.2f} MiB) "
      f"| {mib(sum(rss)):.0f} MiB ({mib(sum(pss)):.0f} MiB) | {min(fds)}-{max(fds)} | {down:.0f} s |")
PY
done
