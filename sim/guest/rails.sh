#!/bin/bash
# Two rails in the soft-RoCE guest: rail 0 is rxe0 (veth0, 10.77.0.1) <->
# rxe1 (ns1, 10.77.0.2), rail 1 is rxe2 (veth2, 10.77.1.1) <-> rxe3 (ns1,
# 10.77.1.2), each pair on its own veth pair and subnet (sim/guest/main.sh).
# Starts one agent per node serving both rails (every address, port 5302,
# rails numbered by `fabperf server --rails`), runs PLAN (default
# sim/plans/softroce-rails.toml: rdma-bw and rdma-lat, rail i with rail i)
# with `fabperf run`, and checks every round (the cells of one pair, sweep
# point and rail shift): one cell per rail, each done with a figure,
# labelled with its rail (dims.rail, dims.rail_to) and sent and received on
# that rail's devices, and the rails at one start: the runner sets rdma-bw
# and rdma-lat up first (queue pairs connected, memory registered) and then
# starts the rails at one instant, so their senders' starts or first pings
# (interval.sent_from_s) must be within FABPERF_SIM_RAILS_SKEW seconds
# (default 1; both nodes share the guest's clock) and their measured
# intervals must overlap. The agents get --timeout 30: under TCG two rails'
# set-ups at once can outlast the default 10 s.
#
# Then (unless FABPERF_SIM_CROSS_RAILS=0) cross rails: the direct veth pairs
# route nothing between rails, so two more rails go through a third
# namespace, a "spine" with a bridge per rail and IP forwarding (rxe4/rxe5
# on 10.77.10.0/24, rxe6/rxe7 on 10.77.11.0/24, set up here and torn down at
# exit; rail 0 and rail 1 of the other tests stay as they are), another
# agent per node (port 5303), and CROSS_PLAN (default
# sim/plans/softroce-cross-rails.toml: rdma-bw with cross_rails = true) is
# run and checked the same way, rail 0 -> rail 1 and rail 1 -> rail 0
# included. Part of the default sim/softroce.sh run
# (sim/guest/selftest.sh); by hand:
#
#   sim/softroce.sh -- sim/guest/rails.sh
#
# Exits 1 when a run or a check failed, 2 on bad usage.
set -uo pipefail
GUEST_DIR=${FABPERF_SIM_REPO:-}/sim/guest
PLAN=${1:-${FABPERF_SIM_REPO:-}/sim/plans/softroce-rails.toml}
CROSS_PLAN=${2:-${FABPERF_SIM_REPO:-}/sim/plans/softroce-cross-rails.toml}
SKEW=${FABPERF_SIM_RAILS_SKEW:-1}
CROSS=${FABPERF_SIM_CROSS_RAILS:-1}
PORT=5302
say() { printf 'rails: %s\n' "$*"; }
if [[ $# -gt 2 ]]; then
    echo "usage: rails.sh [PLAN [CROSS_PLAN]]  (inside the soft-RoCE guest: sim/softroce.sh -- sim/guest/rails.sh)" >&2
    exit 2
fi
if [[ ${FABPERF_SIM_TOPOLOGY:-} != netns || -z ${FABPERF_RDMA_RAIL1_DEVICE:-} ]]; then
    echo "rails.sh: needs the guest's two-namespace topology with rail 1 (got '${FABPERF_SIM_TOPOLOGY:-not in the guest}')" >&2
    exit 2
fi
[[ -r $PLAN ]] || { echo "rails.sh: cannot read the plan $PLAN" >&2; exit 2; }
[[ $CROSS =~ ^[01]$ ]] || { echo "rails.sh: FABPERF_SIM_CROSS_RAILS must be 0 or 1, got '$CROSS'" >&2; exit 2; }
[[ $CROSS == 0 || -r $CROSS_PLAN ]] || { echo "rails.sh: cannot read the plan $CROSS_PLAN" >&2; exit 2; }
[[ $SKEW =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "rails.sh: FABPERF_SIM_RAILS_SKEW must be seconds, got '$SKEW'" >&2; exit 2; }
# Rail r's devices: node a's, node b's.
RAIL_DEVS=("$FABPERF_RDMA_DEVICE $FABPERF_RDMA_PEER_DEVICE" "$FABPERF_RDMA_RAIL1_DEVICE $FABPERF_RDMA_RAIL1_PEER_DEVICE")

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT
# start_agents PORT LABEL NODE_A_RAILS NODE_B_RAILS: one agent per node, on
# every address (the rails' too), its rails numbered; returns once both
# listen.
start_agents() {
    local port=$1 label=$2 node pre up
    fabperf server --bind 0.0.0.0 --port "$port" --insecure --timeout 30 --node-name node-a --path-label "$label" \
        --rails "$3" >"/tmp/$label-agent-a.log" 2>&1 &
    pids+=($!)
    "$GUEST_DIR/peer.sh" fabperf server --bind 0.0.0.0 --port "$port" --insecure --timeout 30 --node-name node-b \
        --path-label "$label" --rails "$4" >"/tmp/$label-agent-b.log" 2>&1 &
    pids+=($!)
    for node in a b; do
        pre=()
        [[ $node == b ]] && pre=("$GUEST_DIR/peer.sh")
        up=
        for _ in $(seq 100); do
            [[ -n $("${pre[@]}" ss -Hltn "sport = :$port" 2>/dev/null) ]] && { up=1; break; }
            sleep 0.2
        done
        if [[ -z $up ]]; then
            say "FAILED: node-$node's $label agent did not start: $(tail -n 3 "/tmp/$label-agent-$node.log")"
            return 1
        fi
    done
    say "agents on node-a (rails $3) and node-b (rails $4), port $port"
}
start_agents "$PORT" rails "$FABPERF_RDMA_DEVICE=0,$FABPERF_RDMA_RAIL1_DEVICE=1" \
    "$FABPERF_RDMA_PEER_DEVICE=0,$FABPERF_RDMA_RAIL1_PEER_DEVICE=1" || exit 1

run_plan() {
    local name=$1 plan=$2 db=/tmp/$1.db
    local devs=("$3" "$4")
    rm -f "$db" "$db"-*
    local rc=0 t0=$SECONDS
    fabperf run "$plan" --db "$db" --plain --json >"/tmp/$name-run.json" || rc=$?
    say "fabperf run exited with $rc after $((SECONDS - t0)) s"
    fabperf runs --db "$db" --cells
    fabperf export --db "$db" --format jsonl >"/tmp/$name.jsonl" || rc=1
    if [[ -n ${FABPERF_SIM_TARGET:-} ]]; then
        mkdir -p "$FABPERF_SIM_TARGET/softroce" && cp "$db" "$FABPERF_SIM_TARGET/softroce/$name.db" &&
            cp "/tmp/$name.jsonl" "$FABPERF_SIM_TARGET/softroce/$name.jsonl"
    fi
    local devs_json report rounds bad cells planned done failed want
    devs_json=$(printf '%s\n' "${devs[@]}" | jq -R 'split(" ")' | jq -s .)
    # Every kind the runner sets up before the common start (tcp-bw,
    # rdma-bw, rdma-lat) has its rails' starts checked; another would be
    # released together and set up after, so its skew is only printed.
    report=$(jq -rs --argjson devs "$devs_json" --argjson skew "$SKEW" '
      ($devs | length) as $n
      | def to: .dims.rail_to // .dims.rail;
        def shift: ((to - .dims.rail) + $n) % $n;
        def rdev: ((.placement_remote.rdma_port // "" | split(" ") | .[0]) // "?");
        def figure: if .bw_gbps then "\(.bw_gbps * 1000 | round / 1000) Gbit/s" else "p50 \(.lat_us.p50 * 10 | round / 10) us" end;
        def railname: if to == .dims.rail then "rail \(.dims.rail)" else "rail \(.dims.rail)->\(to)" end;
      map(select(.role == "total" and .stream == null))
      | group_by([.plan_test, .src_node, .dst_node, .repeat, shift, (.dims | del(.rail, .rail_to))])
      | .[]
      | sort_by(.dims.rail) as $c
      | ($c | map(.dims.rail)) as $rails
      | ($c | map(.interval.sent_from_s)) as $starts
      | (if ($starts | all(. != null)) then ($starts | max) - ($starts | min) else null end) as $sk
      | ($c | map(.interval.start_s) | max) as $m0
      | ($c | map(.interval.end_s) | min) as $m1
      | (if $m0 != null and $m1 != null then $m1 - $m0 else null end) as $ov
      | ($c[0].test | test("^(tcp-bw|rdma-bw|rdma-lat)$")) as $common
      | ($c[0].test | test("-lat$")) as $lat
      | [ (if $rails != [range(0; $n)] then "rails \($rails | map(tostring) | join(",")), not one cell on each of \($n)" else empty end),
          ($c[] | select(((.bw_gbps // .lat_us.p50 // 0) > 0) | not) | "\(railname): no figure"),
          ($c[] | select(.device as $d | ($devs[.dims.rail] // []) | index($d) | not)
                | "\(railname) sent from \(.device), not from \($devs[.dims.rail] // [] | join("/"))"),
          ($c[] | select(rdev != "?") | select(rdev as $d | ($devs[to] // []) | index($d) | not)
                | "\(railname) received on \(rdev), not on \($devs[to] // [] | join("/"))"),
          (if $sk == null or $ov == null then "a record without its interval"
           elif $common and $sk > $skew then "rails \(if $lat then "sent their first pings" else "started" end) \($sk * 1000 | round) ms apart (> \($skew * 1000) ms)"
           elif $common and $ov <= 0 then "the rails did not measure at the same time (\(-$ov * 1000 | round) ms between them)"
           else empty end)
        ] as $bad
      | "\($c[0].plan_test) \($c[0].src_node)->\($c[0].dst_node) \($c[0].op) \($c[0].size) B: "
        + ($c | map("\(railname) \(.device)->\(rdev) \(figure)") | join(", "))
        + (if $sk then ", \(if $lat then "first pings" else "started" end) \($sk * 1000 | round) ms apart" else "" end)
        + (if $ov == null then "" elif $ov > 0 then ", measured together for \($ov * 100 | round / 100) s"
           else ", measured \(-$ov * 100 | round / 100) s apart" end)
        + (if $common then "" else " (released together, set up after the release: start not checked)" end)
        + (if ($bad | length) == 0 then " ok" else " BAD: " + ($bad | join("; ")) end)
    ' "/tmp/$name.jsonl" 2>&1) || { say "FAILED: reading the records: $report"; return 1; }
    sed 's/^/rails: /' <<<"$report"
    rounds=$(grep -c . <<<"$report")
    bad=$(grep -c ' BAD: ' <<<"$report")
    cells=$(jq -s 'map(select(.role == "total" and .stream == null)) | length' "/tmp/$name.jsonl")
    # The run's cells (every rail of every round), done and failed.
    read -r planned done failed < <(jq -r '"\(.cells) \(.done) \(.failed)"' "/tmp/$name-run.json" 2>/dev/null) ||
        { say "FAILED: fabperf run printed no outcome (see above)"; return 1; }
    want=$((planned / ${#devs[@]}))
    say "the run: $planned cells, $done done, $failed failed"
    if [[ $rc != 0 ]]; then
        say "FAILED: fabperf run exited with $rc"
        return 1
    fi
    if [[ $failed != 0 || $done != "$planned" || $cells != "$planned" || $rounds != "$want" || $bad != 0 ]]; then
        say "FAILED: $cells cell(s) with a record in $rounds round(s), of $planned cells in $want rounds; $bad round(s) with a bad rail"
        return 1
    fi
    say "$cells rail cells in $rounds rounds: every rail with its figure, its label and its devices; the rails of every round started within $SKEW s and measured together"
}

run_plan rails "$PLAN" "${RAIL_DEVS[@]}" || exit 1
[[ $CROSS == 0 ]] && exit 0

# Cross rails need a fabric that routes between rails; the direct veth pairs
# above have none (rxe sends out of its own netdev and receives only its own
# GID: rail 0's packets for rail 1's address reach the peer's rail-0 device,
# which drops them). Two more rails through a third namespace, a "spine"
# with a bridge (leaf) per rail and IP forwarding between them, leave rail 0
# and rail 1 of the other tests as they are. Each node routes the other
# spine rail's subnet through its own rail's gateway, with a metric above
# the connected route's, so only lookups bound to a rail's netdev (rxe's)
# take it. Torn down at exit.
say "cross rails: a spine namespace routing between spine rails 0 (10.77.10.0/24) and 1 (10.77.11.0/24)"
MTU=$(cat /sys/class/net/veth0/mtu)
spine_up() {
    modprobe bridge || return 1
    ip netns add spine || return 1
    ip -n spine link set lo up &&
        ip netns exec spine sysctl -qw net.ipv4.ip_forward=1 || return 1
    local r
    for r in 0 1; do
        ip -n spine link add "br$r" type bridge &&
            ip -n spine addr add "10.77.1$r.254/24" dev "br$r" &&
            ip link add "spa$r" mtu "$MTU" type veth peer name "pa$r" mtu "$MTU" netns spine &&
            ip link add "spb$r" mtu "$MTU" netns ns1 type veth peer name "pb$r" mtu "$MTU" netns spine &&
            ip -n spine link set "pa$r" master "br$r" up &&
            ip -n spine link set "pb$r" master "br$r" up &&
            ip -n spine link set "br$r" up &&
            ip addr add "10.77.1$r.1/24" dev "spa$r" && ip link set "spa$r" up &&
            ip -n ns1 addr add "10.77.1$r.2/24" dev "spb$r" && ip -n ns1 link set "spb$r" up || return 1
    done
    # The other rail through this rail's gateway, above the connected route.
    ip route add 10.77.11.0/24 via 10.77.10.254 dev spa0 metric 1000 &&
        ip route add 10.77.10.0/24 via 10.77.11.254 dev spa1 metric 1000 &&
        ip -n ns1 route add 10.77.11.0/24 via 10.77.10.254 dev spb0 metric 1000 &&
        ip -n ns1 route add 10.77.10.0/24 via 10.77.11.254 dev spb1 metric 1000 || return 1
    rdma link add rxe4 type rxe netdev spa0 && rdma link add rxe6 type rxe netdev spa1 &&
        ip netns exec ns1 rdma link add rxe5 type rxe netdev spb0 &&
        ip netns exec ns1 rdma link add rxe7 type rxe netdev spb1 || return 1
    local dev
    for dev in rxe4 rxe5 rxe6 rxe7; do
        for _ in $(seq 50); do
            grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null && break
            sleep 0.2
        done
        grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" || { say "$dev port 1 is not ACTIVE"; return 1; }
    done
}
# The spine's forwarded IPv4 datagrams (/proc/net/snmp, Ip: ForwDatagrams).
spine_forwarded() {
    ip netns exec spine awk '/^Ip:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "ForwDatagrams") c = i; h = 1 } else print $c }' /proc/net/snmp
}
SPINE=0
spine_down() {
    [[ $SPINE == 1 ]] || return 0
    local d
    for d in rxe4 rxe6; do rdma link delete "$d" 2>/dev/null; done
    for d in rxe5 rxe7; do ip netns exec ns1 rdma link delete "$d" 2>/dev/null; done
    for d in spa0 spa1; do ip link del "$d" 2>/dev/null; done
    for d in spb0 spb1; do ip -n ns1 link del "$d" 2>/dev/null; done
    ip netns del spine 2>/dev/null
    if [[ -e /sys/class/infiniband/rxe4 || -e /sys/class/infiniband/rxe5 ]] || ip link show spa0 >/dev/null 2>&1 ||
        ip netns list | grep -qw spine; then
        say "warning: the spine was not fully torn down: $(ls /sys/class/infiniband | tr '\n' ' ')$(ip netns list | tr '\n' ' ')"
    else
        say "spine torn down: rxe4-rxe7, their veths and the spine namespace deleted"
    fi
}
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    spine_down
}
SPINE=1
if ! spine_up; then
    say "FAILED: setting the spine up"
    exit 1
fi
# What the routes give: the connected route for the other rail's address,
# the spine for a lookup bound to a rail's netdev (rxe's); rp_filter as set.
say "route to 10.77.11.2: $(ip -o route get 10.77.11.2 | head -n1 | sed 's/  */ /g; s/ *\\.*$//')"
say "route to 10.77.11.2 bound to spa0: $(ip -o route get 10.77.11.2 oif spa0 | head -n1 | sed 's/  */ /g; s/ *\\.*$//')"
say "rp_filter: all $(sysctl -n net.ipv4.conf.all.rp_filter), node-b all $(ip netns exec ns1 sysctl -n net.ipv4.conf.all.rp_filter)"
SPINE_DEVS=("rxe4 rxe5" "rxe6 rxe7")
start_agents 5303 spine "rxe4=0,rxe6=1" "rxe5=0,rxe7=1" || exit 1
fwd0=$(spine_forwarded)
run_plan cross-rails "$CROSS_PLAN" "${SPINE_DEVS[@]}" || exit 1
# Every flow, the same rail's too, went through the spine's bridges; only
# the cross ones were routed by it (the same rail's stay on one bridge).
fwd=$(($(spine_forwarded) - fwd0))
say "the spine forwarded $fwd IPv4 datagrams between its rails during the cross-rail plan"
if [[ $fwd -le 0 ]]; then
    say "FAILED: the cross-rail cells have figures but the spine routed nothing: they did not cross"
    exit 1
fi
