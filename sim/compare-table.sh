#!/bin/bash
# compare-table.sh TSV: the fabperf-vs-perftest ratio table (markdown) from the
# per-run TSV the soft-RoCE self test writes (round, test, tool, value, unit):
# medians over the rounds; BW fabperf / perftest (target >= 1.00), latency
# fabperf p50 / perftest t_typical (target <= 1.02). Used inside the guest (one
# boot) and on the host (the rounds of several boots merged). The header facts
# come from the environment: KERNEL TOPOLOGY MTU ACCEL, and ROUNDS_NOTE.
set -euo pipefail
TSV=$1
rounds=$(awk -F'\t' 'NR > 1 && !($1 in seen) { seen[$1] = 1; n++ } END { print n + 0 }' "$TSV")
awk -F'\t' -v rounds="$rounds" -v kernel="${KERNEL:-?}" -v topo="${TOPOLOGY:-?}" \
    -v mtu="${MTU:-?}" -v accel="${ACCEL:-?}" -v note="${ROUNDS_NOTE:-}" '
function median(key,    n, i, j, t, a) {
    n = cnt[key]
    for (i = 1; i <= n; i++) a[i] = val[key, i]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (n == 0) return ""
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
NR > 1 { k = $2 SUBSEP $3; cnt[k]++; val[k, cnt[k]] = $4; unit[$2] = $5 }
END {
    split("write-bw send-bw send-lat write-lat", names, " ")
    desc["write-bw"] = "`rdma-bw --op write` vs `ib_write_bw`, 64 KiB"
    desc["send-bw"] = "`rdma-bw --op send` vs `ib_send_bw`, 64 KiB"
    desc["send-lat"] = "`rdma-lat --op send` p50 vs `ib_send_lat` t_typical, 2 B"
    desc["write-lat"] = "`rdma-lat --op write` p50 vs `ib_write_lat` t_typical, 2 B"
    printf "Soft-RoCE (rdma_rxe, QEMU %s, kernel %s, topology %s, active_mtu %s), median of %d rounds%s\n\n", accel, kernel, topo, mtu, rounds, note
    printf "| test | perftest | fabperf | ratio | target | |\n|---|---:|---:|---:|---|---|\n"
    for (i = 1; i <= 4; i++) {
        n = names[i]; f = median(n SUBSEP "fabperf"); p = median(n SUBSEP "perftest")
        bw = (n ~ /bw$/)
        u = bw ? " Gbit/s" : " µs"
        if (f == "" || p == "" || p + 0 == 0) { r = "n/a"; verdict = "FAILED (missing runs)" }
        else {
            r = sprintf("%.3f", f / p)
            ok = bw ? (f / p >= 1.00) : (f / p <= 1.02)
            verdict = ok ? "met" : "MISSED"
        }
        printf "| %s | %s | %s | %s | %s | %s |\n", desc[n], (p == "" ? "-" : sprintf("%.3f%s", p, u)), \
            (f == "" ? "-" : sprintf("%.3f%s", f, u)), r, (bw ? ">= 1.00" : "<= 1.02"), verdict
    }
}' "$TSV"
