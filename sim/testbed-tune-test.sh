#!/usr/bin/env bash
# Tuning levels and policy scale on a 2-node testbed (needs root): runs short
# versions of sim/plans/tuning-levels.toml (the eight levels) and
# sim/plans/policy-scale.toml (0-200 nftables rules), checks that every cell
# ran under its level / rule count, that what a level could not set is in the
# records' warnings, and that every value the levels and rules touch is back
# on both nodes afterwards (restore verified); prints the figures per level and
# per rule count.
#
#   sudo sim/testbed-tune-test.sh      # uses FABPERF_BIN, else target/release/fabperf
#
# Prints one line per check and "N passed, N failed" at the end; exit 1 on any failure.
set -uo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$SIM_DIR/.." && pwd -P)
TB=$SIM_DIR/testbed.sh
STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}
SECS=${FABPERF_TUNE_TEST_SECS:-1}

# shellcheck source=sim/testbed/harness.sh
source "$SIM_DIR/testbed/harness.sh"
tb_test_begin testbed-tune-test
command -v nft >/dev/null || { echo "testbed-tune-test: nft missing (Debian package nftables; ci/install-deps.sh)" >&2; exit 1; }

# Every value the levels and the rules touch, on one node.
snapshot() { # NODE
    "$TB" exec "$1" sh -c 'for k in core/somaxconn core/rmem_max core/wmem_max ipv4/tcp_rmem ipv4/tcp_wmem \
        ipv4/tcp_window_scaling ipv4/tcp_timestamps ipv4/tcp_sack ipv4/tcp_fastopen ipv4/tcp_fin_timeout \
        ipv4/tcp_max_syn_backlog ipv4/tcp_max_tw_buckets; do echo "$k $(cat /proc/sys/net/$k)"; done
        ip -o link show fab0 | grep -o "mtu [0-9]*"
        ethtool -k fab0 | grep -E "^(generic-receive-offload|large-receive-offload|tcp-segmentation-offload):"
        nft list tables'
}
# The plans with short cells and this state directory's token.
shorten() { # PLAN OUT
    sed -e "s/duration = \"[0-9]*s\"/duration = \"${SECS}s\"/; s/repeats = 2/repeats = 1/" \
        -e "s|/run/fabperf-testbed/token|$STATE/token|" \
        -e "s|\"\.\./profiles/|\"$REPO/sim/profiles/|" "$1" >"$2"
}
sql() { python3 - "$1" "$2" <<'PY'
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
for row in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PY
}

trap 'tb_test_finish; exit $?' EXIT
"$TB" down >/dev/null 2>&1 || true

section "testbed up (2 nodes; agents with --allow-tune all)"
if ! "$TB" up --nodes 2 >"$WORK/up.log" 2>&1; then
    bad "testbed up: $(tail -n 3 "$WORK/up.log" | tr '\n' ' ')"
    exit 1
fi
ok "testbed up"
snapshot fp-node1 >"$WORK/before1"
snapshot fp-node2 >"$WORK/before2"

section "eight tuning levels, ${SECS} s cells"
shorten "$REPO/sim/plans/tuning-levels.toml" "$WORK/levels.toml"
if "$TB" exec switch "$FABPERF" run "$WORK/levels.toml" --db "$WORK/levels.db" --plain >"$WORK/levels.log" 2>&1; then
    ok "tuning-levels plan ran"
else
    bad "tuning-levels: $(tail -n 5 "$WORK/levels.log" | tr '\n' ' ')"
fi
DB=$WORK/levels.db
check "16 cells, all done" test "$(sql "$DB" "SELECT count(*) FROM cells WHERE state = 'done'")" = 16
check "8 levels per test" test "$(sql "$DB" "SELECT count(DISTINCT json_extract(dims, '\$.profile')) FROM cells")" = 8
warn_of() { sql "$DB" "SELECT count(*) FROM measurements m JOIN cells c USING (run_id, cell_id) WHERE m.role = 'total' AND json_extract(c.dims, '\$.profile') = '$1' AND m.record LIKE '%$2%'"; }
check "level 2's host-wide netdev_max_backlog is reported, not skipped" test "$(warn_of algebra-2-kernel 'net.core.netdev_max_backlog = 2000 not applied')" -ge 1
check "level 3's LRO and rings on a veth are reported" test "$(warn_of algebra-3-kernel-nic 'fab0/rings')" -ge 1
check "level 4's CPU settings are named as outside fabperf" test "$(warn_of tuned-accelerator-performance 'not applied by fabperf')" -ge 1
check "the run log names what was not applied" grep -q "not applied" "$WORK/levels.log"
check "the agents restored after every cell" test "$(grep -ch "tune: restored (end of the cell)" "$STATE"/logs/fp-node*-fabric.log | awk '{ s += $1 } END { print s + 0 }')" -ge 16
echo "      level                          tcp-bw Gbit/s  tcp-lat p50 us"
sql "$DB" "SELECT json_extract(c.dims, '\$.profile'), round(avg(m.bw_gbps), 2), round(avg(json_extract(m.record, '\$.lat_us.p50')), 2)
           FROM measurements m JOIN cells c USING (run_id, cell_id) WHERE m.role = 'total'
           GROUP BY 1 ORDER BY min(c.seq)" |
    awk -F'|' '{ printf "      %-30s %13s  %14s\n", $1, $2, $3 }'

section "0-200 policy rules, ${SECS} s cells"
shorten "$REPO/sim/plans/policy-scale.toml" "$WORK/policy.toml"
if "$TB" exec switch "$FABPERF" run "$WORK/policy.toml" --db "$WORK/policy.db" --plain >"$WORK/policy.log" 2>&1; then
    ok "policy-scale plan ran"
else
    bad "policy-scale: $(tail -n 5 "$WORK/policy.log" | tr '\n' ' ')"
fi
DB=$WORK/policy.db
check "12 cells, all done" test "$(sql "$DB" "SELECT count(*) FROM cells WHERE state = 'done'")" = 12
echo "      rules  tcp-bw Gbit/s  tcp-lat p50 us  udp-lat p50 us   (nftables per-pod chain model)"
sql "$DB" "SELECT json_extract(c.dims, '\$.policies'),
                  round(avg(CASE c.test WHEN 'bw' THEN m.bw_gbps END), 2),
                  round(avg(CASE c.test WHEN 'lat' THEN json_extract(m.record, '\$.lat_us.p50') END), 2),
                  round(avg(CASE c.test WHEN 'udp-lat' THEN json_extract(m.record, '\$.lat_us.p50') END), 2)
           FROM measurements m JOIN cells c USING (run_id, cell_id) WHERE m.role = 'total' GROUP BY 1 ORDER BY 1" |
    awk -F'|' '{ printf "      %5s  %13s  %14s  %14s\n", $1, $2, $3, $4 }'

section "restore verified"
snapshot fp-node1 >"$WORK/after1"
snapshot fp-node2 >"$WORK/after2"
check "fp-node1: every value as before" diff -u "$WORK/before1" "$WORK/after1"
check "fp-node2: every value as before" diff -u "$WORK/before2" "$WORK/after2"
check "no journal left" test -z "$(find "$STATE/tune-state" -name '*.journal' 2>/dev/null)"
