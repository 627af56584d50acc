#!/bin/bash
# Runs `fabperf run PLAN` inside the soft-RoCE guest between its two nodes:
# starts an agent on the root namespace's node (rxe0, 10.77.0.1) next to the
# peer node's (rxe1, 10.77.0.2, started by the guest), runs the plan into a
# store in the guest's /tmp (SQLite's WAL needs a local file system, not 9p),
# prints the cells and the records, and copies the store to
# $FABPERF_SIM_TARGET/softroce/run-plan.db on the host.
#   sim/softroce.sh -- sim/guest/run-plan.sh sim/plans/softroce-rdma.toml
set -uo pipefail
if [[ $# -ne 1 ]]; then
    echo "usage: run-plan.sh PLAN  (inside the soft-RoCE guest: sim/softroce.sh -- sim/guest/run-plan.sh PLAN)" >&2
    exit 2
fi
plan=$1
if [[ ${FABPERF_SIM_TOPOLOGY:-} != netns ]]; then
    echo "run-plan.sh: needs the guest's two-namespace topology (got '${FABPERF_SIM_TOPOLOGY:-not in the guest}')" >&2
    exit 2
fi
if [[ -z ${FABPERF_AGENT:-} ]]; then
    echo "run-plan.sh: the peer node's agent is not running (see /tmp/agent.log)" >&2
    exit 1
fi
fabperf server --bind 10.77.0.1 --port 5301 --insecure --rdma-device "$FABPERF_RDMA_DEVICE" \
    --rdma-gid-index 1 --node-name node-a --path-label rdma >/tmp/agent-a.log 2>&1 &
for _ in $(seq 100); do
    [[ -n $(ss -Hltn "src 10.77.0.1:5301" 2>/dev/null) ]] && break
    sleep 0.2
done
db=/tmp/run-plan.db
rc=0
fabperf run "$plan" --db "$db" --plain || rc=$?
fabperf runs --db "$db" --cells
fabperf export --db "$db" --format csv | cut -d, -f2-9,12-14,17,22,24,28
if [[ -n ${FABPERF_SIM_TARGET:-} ]]; then
    mkdir -p "$FABPERF_SIM_TARGET/softroce" && cp "$db" "$FABPERF_SIM_TARGET/softroce/run-plan.db" &&
        echo "store copied to $FABPERF_SIM_TARGET/softroce/run-plan.db"
fi
exit $rc
