#!/bin/bash
# compare-table.sh TSV: the fabperf-vs-perftest ratio table (markdown) from the
# per-run TSV the soft-RoCE self test writes (round, test, tool, value, unit).
# The ratio is paired: per round, the mean of fabperf's runs over the mean of
# perftest's runs (same guest, mirrored run order); the table gives the median
# of those per-round ratios and their range, next to each tool's median run.
# Targets: BW fabperf / perftest >= 1.00, latency fabperf p50 / perftest
# t_typical <= 1.02. Used inside the guest (one boot) and on the host (the
# rounds of several boots merged). Header facts come from the environment:
# KERNEL TOPOLOGY MTU ACCEL CLOCKSOURCE, and ROUNDS_NOTE.
set -euo pipefail
TSV=$1
awk -F'\t' -v kernel="${KERNEL:-?}" -v topo="${TOPOLOGY:-?}" \
    -v mtu="${MTU:-?}" -v accel="${ACCEL:-?}" -v clock="${CLOCKSOURCE:-?}" -v note="${ROUNDS_NOTE:-}" '
# median of a[1..n] (sorts a)
function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (n == 0) return ""
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
# median of every run of test-and-tool key k
function run_median(k,    a, j) {
    for (j = 1; j <= cnt[k]; j++) a[j] = val[k, j]
    return median(a, cnt[k])
}
NR > 1 {
    if (!($1 in seen)) { seen[$1] = 1; nr++; rid[nr] = $1 }
    k = $2 SUBSEP $3; cnt[k]++; val[k, cnt[k]] = $4
    rk = $1 SUBSEP $2 SUBSEP $3; rsum[rk] += $4; rcnt[rk]++
}
END {
    split("write-bw send-bw send-lat write-lat", names, " ")
    desc["write-bw"] = "`rdma-bw --op write` vs `ib_write_bw`, 64 KiB"
    desc["send-bw"] = "`rdma-bw --op send` vs `ib_send_bw`, 64 KiB"
    desc["send-lat"] = "`rdma-lat --op send` p50 vs `ib_send_lat` t_typical, 2 B"
    desc["write-lat"] = "`rdma-lat --op write` p50 vs `ib_write_lat` t_typical, 2 B"
    printf "Soft-RoCE (rdma_rxe, QEMU %s, kernel %s, topology %s, active_mtu %s, clocksource %s): %d round(s)%s; ", accel, kernel, topo, mtu, clock, nr, note
    printf "ratio = median over the rounds of (mean fabperf run / mean perftest run) within the round\n\n"
    printf "| test | perftest | fabperf | ratio | rounds (min-max) | target | |\n|---|---:|---:|---:|---|---|---|\n"
    for (i = 1; i <= 4; i++) {
        n = names[i]; bw = (n ~ /bw$/); u = bw ? " Gbit/s" : " µs"
        p = run_median(n SUBSEP "perftest"); f = run_median(n SUBSEP "fabperf")
        delete a; m = 0
        for (j = 1; j <= nr; j++) {
            kf = rid[j] SUBSEP n SUBSEP "fabperf"; kp = rid[j] SUBSEP n SUBSEP "perftest"
            if (rcnt[kf] == 0 || rcnt[kp] == 0 || rsum[kp] == 0) continue
            a[++m] = (rsum[kf] / rcnt[kf]) / (rsum[kp] / rcnt[kp])
        }
        if (m == 0) { r = "n/a"; range = "-"; verdict = "FAILED (missing runs)" }
        else {
            q = median(a, m) # sorts a: a[1] and a[m] are the range
            r = sprintf("%.3f", q); range = sprintf("%.3f-%.3f (%d)", a[1], a[m], m)
            ok = bw ? (q >= 1.00) : (q <= 1.02)
            verdict = ok ? "met" : "MISSED"
        }
        printf "| %s | %s | %s | %s | %s | %s | %s |\n", desc[n], (p == "" ? "-" : sprintf("%.3f%s", p, u)), \
            (f == "" ? "-" : sprintf("%.3f%s", f, u)), r, range, (bw ? ">= 1.00" : "<= 1.02"), verdict
    }
}' "$TSV"
