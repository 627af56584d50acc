#!/bin/bash
# Runs inside the soft-RoCE guest (started by sim/guest/init): loads the RDMA
# modules, brings rxe up in the chosen topology, exports the FABPERF_RDMA_*
# variables, optionally starts a fabperf agent in the peer node, then runs the
# user's command (mode "cmd") or the self test (mode "selftest").
set -uo pipefail
# shellcheck source=/dev/null # written per run by sim/softroce.sh
. /sim/env
# fabperf runs from the guest's RAM, not from the 9p share: the share has no
# page cache (cache=none), so a binary run from it fetches pages through QEMU
# mid-measurement, host work that competes with the vCPUs on a small host.
mkdir -p /opt/sim-bin && cp /sim/bin/* /opt/sim-bin/ && export PATH=/opt/sim-bin:$PATH ||
    export PATH=/sim/bin:$PATH
GUEST_DIR=$FABPERF_SIM_REPO/sim/guest

say() { printf 'softroce-guest: %s\n' "$*" >&2; }
fail() { say "error: $*"; exit 2; }

for m in veth rdma_rxe ib_uverbs rdma_ucm ib_umad; do
    modprobe "$m" 2>/dev/null || fail "modprobe $m failed"
done
# rxe computes ICRCs with crc32: whichever module provides it in this kernel.
modprobe crc32_generic 2>/dev/null || modprobe crc32-cryptoapi 2>/dev/null || true
ip link set lo up

MTU=${FABPERF_SIM_MTU:-9000}
if [[ $FABPERF_SIM_TOPOLOGY == netns ]]; then
    # Two "nodes": rxe0 on veth0 in the initial namespace, rxe1 on veth1 in ns1.
    ip netns add ns1 || fail "ip netns add ns1"
    ip link add veth0 mtu "$MTU" type veth peer name veth1 mtu "$MTU" netns ns1 || fail "veth pair"
    ip addr add 10.77.0.1/24 dev veth0 && ip link set veth0 up
    ip -n ns1 addr add 10.77.0.2/24 dev veth1 && ip -n ns1 link set veth1 up && ip -n ns1 link set lo up
    rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 failed"
    ip netns exec ns1 rdma link add rxe1 type rxe netdev veth1 || fail "rdma link add rxe1 (ns1) failed"
    # Rail 1: a second link between the same two nodes on its own subnet,
    # rxe2 on veth2 and rxe3 on veth3 (ns1), as a node's second NIC on a
    # rail-optimized fabric (sim/guest/rails.sh runs a plan on both rails).
    ip link add veth2 mtu "$MTU" type veth peer name veth3 mtu "$MTU" netns ns1 || fail "veth pair (rail 1)"
    ip addr add 10.77.1.1/24 dev veth2 && ip link set veth2 up
    ip -n ns1 addr add 10.77.1.2/24 dev veth3 && ip -n ns1 link set veth3 up
    rdma link add rxe2 type rxe netdev veth2 || fail "rdma link add rxe2 failed"
    ip netns exec ns1 rdma link add rxe3 type rxe netdev veth3 || fail "rdma link add rxe3 (ns1) failed"
    export FABPERF_RDMA_DEVICE=rxe0 FABPERF_RDMA_PEER=10.77.0.2 FABPERF_RDMA_PEER_DEVICE=rxe1
    export FABPERF_RDMA_RAIL1_DEVICE=rxe2 FABPERF_RDMA_RAIL1_PEER=10.77.1.2 FABPERF_RDMA_RAIL1_PEER_DEVICE=rxe3
    export FABPERF_SIM_PEER_NETNS=ns1
else
    # One device: client and server both on rxe0 (the 6.1 kernel's rxe cannot
    # connect two devices in one guest).
    ip link add veth0 mtu "$MTU" type veth peer name veth1 mtu "$MTU" || fail "veth pair"
    ip addr add 10.77.0.1/24 dev veth0 && ip link set veth0 up && ip link set veth1 up
    rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 failed"
    export FABPERF_RDMA_DEVICE=rxe0 FABPERF_RDMA_PEER=10.77.0.1 FABPERF_RDMA_PEER_DEVICE=rxe0
    export FABPERF_RDMA_RAIL1_DEVICE= FABPERF_RDMA_RAIL1_PEER= FABPERF_RDMA_RAIL1_PEER_DEVICE=
    export FABPERF_SIM_PEER_NETNS=
fi
# Wait for the ports to become ACTIVE (rxe follows the netdev's carrier).
for dev in $FABPERF_RDMA_DEVICE $FABPERF_RDMA_PEER_DEVICE $FABPERF_RDMA_RAIL1_DEVICE $FABPERF_RDMA_RAIL1_PEER_DEVICE; do
    for _ in $(seq 50); do
        grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null && break
        sleep 0.2
    done
    grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" || fail "$dev port 1 is not ACTIVE"
done
say "kernel $(uname -r), topology $FABPERF_SIM_TOPOLOGY: client $FABPERF_RDMA_DEVICE 10.77.0.1," \
    "peer $FABPERF_RDMA_PEER_DEVICE $FABPERF_RDMA_PEER${FABPERF_SIM_PEER_NETNS:+ (netns $FABPERF_SIM_PEER_NETNS)}," \
    "active_mtu $(ibv_devinfo -d rxe0 | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')"
[[ -n $FABPERF_RDMA_RAIL1_DEVICE ]] &&
    say "rail 1: client $FABPERF_RDMA_RAIL1_DEVICE 10.77.1.1, peer $FABPERF_RDMA_RAIL1_PEER_DEVICE $FABPERF_RDMA_RAIL1_PEER"

# A fabperf agent in the peer node, for `fabperf rdma-bw $FABPERF_AGENT ...`.
export FABPERF_AGENT=
if [[ ${FABPERF_SIM_AGENT:-1} != 0 ]]; then
    "$GUEST_DIR/peer.sh" fabperf server --bind "$FABPERF_RDMA_PEER" --port 5301 --insecure \
        --rdma-device "$FABPERF_RDMA_PEER_DEVICE" --rdma-gid-index 1 >/tmp/agent.log 2>&1 &
    agent_pid=$!
    for _ in $(seq 100); do
        # ss rather than a probe connection, which the agent would log as a bad client.
        if [[ -n $("$GUEST_DIR/peer.sh" ss -Hltn "sport = :5301" 2>/dev/null) ]]; then
            export FABPERF_AGENT=$FABPERF_RDMA_PEER:5301
            break
        fi
        kill -0 "$agent_pid" 2>/dev/null || break
        sleep 0.2
    done
    if [[ -n $FABPERF_AGENT ]]; then
        say "fabperf agent serving at $FABPERF_AGENT on $FABPERF_RDMA_PEER_DEVICE (log /tmp/agent.log)"
    else
        say "warning: the fabperf agent did not start in the peer node: $(tail -n 3 /tmp/agent.log)"
    fi
fi

cd "$FABPERF_SIM_CWD" || fail "cannot cd to $FABPERF_SIM_CWD"
case $FABPERF_SIM_MODE in
    cmd)
        mapfile -d '' -t argv </sim/argv
        "${argv[@]}"
        exit $?
        ;;
    selftest)
        exec "$GUEST_DIR/selftest.sh"
        ;;
    *) fail "unknown mode $FABPERF_SIM_MODE" ;;
esac
