#!/bin/bash
# Runs CMD ARGS... in the peer "node" of the soft-RoCE guest: inside network
# namespace ns1 (rxe1, 10.77.0.2) in the two-namespace topology, or directly in
# the single-device topology (peer = rxe0, 10.77.0.1). Only meaningful inside
# the guest started by sim/softroce.sh, e.g.
#   sim/softroce.sh -- bash -c 'sim/guest/peer.sh ib_write_bw -d $FABPERF_RDMA_PEER_DEVICE -x 1 &
#                               sleep 2; ib_write_bw -d $FABPERF_RDMA_DEVICE -x 1 $FABPERF_RDMA_PEER'
if [[ $# -eq 0 ]]; then
    echo "usage: peer.sh CMD [ARGS...]  (runs CMD in the peer node of the soft-RoCE guest)" >&2
    exit 2
fi
if [[ -z ${FABPERF_SIM_TOPOLOGY:-} ]]; then
    echo "peer.sh: not inside the soft-RoCE guest (run it via sim/softroce.sh -- ...)" >&2
    exit 2
fi
if [[ -n ${FABPERF_SIM_PEER_NETNS:-} ]]; then
    exec ip netns exec "$FABPERF_SIM_PEER_NETNS" "$@"
fi
exec "$@"
