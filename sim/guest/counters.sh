#!/bin/bash
# Inside the soft-RoCE guest (two-namespace topology): RDMA records explain
# what the fabric did. A clean rdma-bw must carry counter deltas (packets
# sent and received by rxe, the agent's veth) and no finding; the same test
# with `tc netem loss` on the client's fabric link (veth0) must carry the
# retransmit / sequence-error deltas of go-back-N recovery and the
# roce-packet-loss finding with its evidence. Prints both records' counters.
#   sim/softroce.sh -- sim/guest/counters.sh
# (also run by sim/guest/selftest.sh). LOSS (default 2%) sets the loss.
set -uo pipefail
LOSS=${FABPERF_SIM_LOSS:-2%}
if [[ ${FABPERF_SIM_TOPOLOGY:-} != netns || -z ${FABPERF_AGENT:-} ]]; then
    echo "counters.sh: needs the guest's two-namespace topology and its peer agent" \
        "(topology '${FABPERF_SIM_TOPOLOGY:-not in the guest}', agent '${FABPERF_AGENT:-}')" >&2
    exit 2
fi
FAILS=0
fail() { printf 'counters.sh: FAILED: %s\n' "$*" >&2; FAILS=$((FAILS + 1)); }
# One short write-bandwidth run; the record (JSON) on stdout.
bw() {
    fabperf rdma-bw "$FABPERF_AGENT" --device "$FABPERF_RDMA_DEVICE" --gid-index 1 \
        --op write --size 64K --warmup 0.5 --duration 2 --json
}
# Sum of the deltas of rdma_hw/rdma_port KEYs (a jq regex) on SIDE (local|remote).
deltas() { # RECORD SIDE KEYS
    jq -r --arg side "$2" --arg keys "$3" '[.counters[$side][]?
        | select(.source == "rdma_hw" or .source == "rdma_port")
        | .deltas | to_entries[] | select(.key | test("^(" + $keys + ")$")) | .value] | add // 0' <<<"$1"
}
show() { # RECORD
    jq -c '{bw_gbps, findings: [.findings[]? | {id, subject, summary}],
        local: [.counters.local[]? | select(.source | startswith("rdma")) | {source, subject, deltas}],
        remote: [.counters.remote[]? | {source, subject, deltas}],
        remote_missing: .counters.remote_missing}' <<<"$1"
}
LOSSY_KEYS='rcvd_seq_err|out_of_seq_request|completer_retry_err|retry_exceeded_err|duplicate_request'

modprobe sch_netem 2>/dev/null || true
tc qdisc del dev veth0 root 2>/dev/null

echo "--- clean rdma-bw"
clean=$(bw) || fail "clean rdma-bw exited with $?"
show "$clean"
[[ $(deltas "$clean" local 'sent_pkts') -gt 0 ]] || fail "clean run: no rxe sent_pkts delta on the client"
# The agent: rxe1's port counters when its namespace's sysfs shows them. A
# device in RDMA's shared netns mode has its port counters and hw_counters
# only in the sysfs of the namespace that owns it (here the initial one), so
# the agent in ns1 must say they are missing (remote_missing and the
# counters-incomplete warning) rather than report nothing; its netdev
# (veth1) counters are there either way.
if [[ $(deltas "$clean" remote 'rcvd_pkts') -gt 0 ]]; then
    echo "agent: rxe1 counters read"
else
    jq -e '(.counters.remote_missing // []) | any(test("rxe1/ports/1/hw_counters"))' <<<"$clean" >/dev/null ||
        fail "clean run: no rxe1 rcvd_pkts delta on the agent, and it does not say why"
    jq -e '[.warnings[]?.id] | index("counters-incomplete")' <<<"$clean" >/dev/null ||
        fail "clean run: the agent's missing counters carry no counters-incomplete warning"
    echo "agent: rxe1 counters not visible in ns1 (reported as missing)"
fi
rx=$(jq '[.counters.remote[]? | select(.source == "netdev") | .deltas.rx_packets // 0] | add // 0' <<<"$clean")
[[ $rx -gt 0 ]] || fail "clean run: no rx_packets delta on the agent's veth1"
n=$(jq '.findings // [] | length' <<<"$clean")
[[ $n == 0 ]] || fail "clean run has findings: $(jq -c '[.findings[].id]' <<<"$clean")"

echo "--- rdma-bw with netem loss $LOSS on veth0"
tc qdisc add dev veth0 root netem loss "$LOSS" || { fail "tc qdisc add netem"; exit 1; }
lossy=$(bw) || fail "rdma-bw under loss exited with $?"
tc -s qdisc show dev veth0 | sed -n '1,3p'
tc qdisc del dev veth0 root
show "$lossy"
loc=$(deltas "$lossy" local "$LOSSY_KEYS")
rem=$(deltas "$lossy" remote "$LOSSY_KEYS")
echo "loss counters: client +$loc, agent +$rem"
[[ $((loc + rem)) -gt 0 ]] || fail "loss injected but no retransmit/sequence-error deltas"
n=$(jq '[.findings[]? | select(.id == "roce-packet-loss")] | length' <<<"$lossy")
[[ $n -gt 0 ]] || fail "loss injected but no roce-packet-loss finding"
jq -r '.findings[]? | select(.id == "roce-packet-loss") | .evidence[] | "evidence: \(.path) \(.value // "")"' \
    <<<"$lossy" | head -n 6
[[ $FAILS == 0 ]] && echo "counters.sh: passed"
exit $((FAILS > 0))
