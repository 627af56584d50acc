#!/bin/bash
# Two rails in the soft-RoCE guest: rail 0 is rxe0 (veth0, 10.77.0.1) <->
# rxe1 (ns1, 10.77.0.2), rail 1 is rxe2 (veth2, 10.77.1.1) <-> rxe3 (ns1,
# 10.77.1.2), each pair on its own veth pair and subnet (sim/guest/main.sh).
# Starts one agent per node serving both rails (every address, port 5302,
# rails numbered by `fabperf server --rails`), runs PLAN (default
# sim/plans/softroce-rails.toml: rdma-bw and rdma-lat, rail i with rail i)
# with `fabperf run`, and checks every round (the cells of one pair and
# sweep point): one cell per rail, each done with a figure, labelled with
# its rail (dims.rail) and sent and received on that rail's devices, and the
# rails at one start: for rdma-bw, whose flows the runner sets up first
# and then starts at one instant, their senders' starts
# (interval.sent_from_s) within FABPERF_SIM_RAILS_SKEW seconds (default 1;
# 8-105 ms in most rounds and 451 ms once, at host load 13-15; both nodes
# share the guest's clock) and their measured intervals overlapping. rdma-lat has
# no separate set-up in the runner (fabperf-run's drive `prepare`): it is
# released at one instant and sets its QPs up after it, so its first pings
# differ by the set-up time (0.8-3.7 s seen under load); that skew and the
# overlap are printed, not checked. The agents get --timeout 30: under TCG
# two rails' set-ups at once can outlast the default 10 s. Part of the
# default sim/softroce.sh run (sim/guest/selftest.sh); by hand:
#
#   sim/softroce.sh -- sim/guest/rails.sh
#
# Exits 1 when the run or a check failed, 2 on bad usage.
set -uo pipefail
GUEST_DIR=${FABPERF_SIM_REPO:-}/sim/guest
PLAN=${1:-${FABPERF_SIM_REPO:-}/sim/plans/softroce-rails.toml}
SKEW=${FABPERF_SIM_RAILS_SKEW:-1}
PORT=5302
say() { printf 'rails: %s\n' "$*"; }
if [[ $# -gt 1 ]]; then
    echo "usage: rails.sh [PLAN]  (inside the soft-RoCE guest: sim/softroce.sh -- sim/guest/rails.sh)" >&2
    exit 2
fi
if [[ ${FABPERF_SIM_TOPOLOGY:-} != netns || -z ${FABPERF_RDMA_RAIL1_DEVICE:-} ]]; then
    echo "rails.sh: needs the guest's two-namespace topology with rail 1 (got '${FABPERF_SIM_TOPOLOGY:-not in the guest}')" >&2
    exit 2
fi
[[ -r $PLAN ]] || { echo "rails.sh: cannot read the plan $PLAN" >&2; exit 2; }
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
# One agent per node, on every address (the rails' too), both rails numbered.
fabperf server --bind 0.0.0.0 --port "$PORT" --insecure --timeout 30 --node-name node-a --path-label rails \
    --rails "$FABPERF_RDMA_DEVICE=0,$FABPERF_RDMA_RAIL1_DEVICE=1" >/tmp/rails-agent-a.log 2>&1 &
pids+=($!)
"$GUEST_DIR/peer.sh" fabperf server --bind 0.0.0.0 --port "$PORT" --insecure --timeout 30 --node-name node-b --path-label rails \
    --rails "$FABPERF_RDMA_PEER_DEVICE=0,$FABPERF_RDMA_RAIL1_PEER_DEVICE=1" >/tmp/rails-agent-b.log 2>&1 &
pids+=($!)
for node in a b; do
    pre=()
    [[ $node == b ]] && pre=("$GUEST_DIR/peer.sh")
    up=
    for _ in $(seq 100); do
        [[ -n $("${pre[@]}" ss -Hltn "sport = :$PORT" 2>/dev/null) ]] && { up=1; break; }
        sleep 0.2
    done
    if [[ -z $up ]]; then
        say "FAILED: node-$node's rails agent did not start: $(tail -n 3 "/tmp/rails-agent-$node.log")"
        exit 1
    fi
done
say "agents on node-a (rail 0 ${RAIL_DEVS[0]%% *}, rail 1 ${RAIL_DEVS[1]%% *}) and node-b (rail 0 ${RAIL_DEVS[0]##* }, rail 1 ${RAIL_DEVS[1]##* }), port $PORT"

db=/tmp/rails.db
rm -f "$db" "$db"-*
rc=0
t0=$SECONDS
fabperf run "$PLAN" --db "$db" --plain --json >/tmp/rails-run.json || rc=$?
say "fabperf run exited with $rc after $((SECONDS - t0)) s"
fabperf runs --db "$db" --cells
fabperf export --db "$db" --format jsonl >/tmp/rails.jsonl || rc=1
if [[ -n ${FABPERF_SIM_TARGET:-} ]]; then
    mkdir -p "$FABPERF_SIM_TARGET/softroce" && cp "$db" "$FABPERF_SIM_TARGET/softroce/rails.db" &&
        cp /tmp/rails.jsonl "$FABPERF_SIM_TARGET/softroce/rails.jsonl"
fi

# Every round (a pair, op and size): its cells' total records by rail, one
# line per round ending in "ok" or "BAD: why".
devs_json=$(printf '%s\n' "${RAIL_DEVS[@]}" | jq -R 'split(" ")' | jq -s .)
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
  | ($c[0].test | test("-bw$")) as $common
  | [ (if $rails != [range(0; $n)] then "rails \($rails | map(tostring) | join(",")), not one cell on each of \($n)" else empty end),
      ($c[] | select(((.bw_gbps // .lat_us.p50 // 0) > 0) | not) | "\(railname): no figure"),
      ($c[] | select(.device as $d | ($devs[.dims.rail] // []) | index($d) | not)
            | "\(railname) sent from \(.device), not from \($devs[.dims.rail] // [] | join("/"))"),
      ($c[] | select(rdev != "?") | select(rdev as $d | ($devs[to] // []) | index($d) | not)
            | "\(railname) received on \(rdev), not on \($devs[to] // [] | join("/"))"),
      (if $sk == null or $ov == null then "a record without its interval"
       elif $common and $sk > $skew then "rails started \($sk * 1000 | round) ms apart (> \($skew * 1000) ms)"
       elif $common and $ov <= 0 then "the rails did not measure at the same time (\(-$ov * 1000 | round) ms between them)"
       else empty end)
    ] as $bad
  | "\($c[0].plan_test) \($c[0].src_node)->\($c[0].dst_node) \($c[0].op) \($c[0].size) B: "
    + ($c | map("\(railname) \(.device)->\(rdev) \(figure)") | join(", "))
    + (if $sk then ", \(if $common then "started" else "first pings" end) \($sk * 1000 | round) ms apart" else "" end)
    + (if $ov == null then "" elif $ov > 0 then ", measured together for \($ov * 100 | round / 100) s"
       else ", measured \(-$ov * 100 | round / 100) s apart" end)
    + (if $common then "" else " (released together, QPs set up after the release: start not checked)" end)
    + (if ($bad | length) == 0 then " ok" else " BAD: " + ($bad | join("; ")) end)
' /tmp/rails.jsonl 2>&1) || { say "FAILED: reading the records: $report"; exit 1; }
sed 's/^/rails: /' <<<"$report"
rounds=$(grep -c . <<<"$report")
bad=$(grep -c ' BAD: ' <<<"$report")
cells=$(jq -s 'map(select(.role == "total" and .stream == null)) | length' /tmp/rails.jsonl)
# The run's cells (every rail of every round), done and failed.
read -r planned done failed < <(jq -r '"\(.cells) \(.done) \(.failed)"' /tmp/rails-run.json 2>/dev/null) ||
    { say "FAILED: fabperf run printed no outcome (see above)"; exit 1; }
want=$((planned / ${#RAIL_DEVS[@]}))
say "the run: $planned cells, $done done, $failed failed"
if [[ $rc != 0 ]]; then
    say "FAILED: fabperf run exited with $rc"
    exit 1
fi
if [[ $failed != 0 || $done != "$planned" || $cells != "$planned" || $rounds != "$want" || $bad != 0 ]]; then
    say "FAILED: $cells cell(s) with a record in $rounds round(s), of $planned cells in $want rounds; $bad round(s) with a bad rail"
    exit 1
fi
say "$cells rail cells in $rounds rounds: every rail with its figure, its label and its devices; rdma-bw's rails started within $SKEW s and measured together"
