#!/usr/bin/env bash
# Smoke test of sim/testbed.sh (needs root): input parsing with bad and hostile
# values, clear failures (not root, missing tool, bad N, half-built up), then
# three layouts with short tcp-bw runs between nodes, DNS, doctor, degrade and
# restore, a simulated crash, and teardown. Bands are generous: the machine may
# be a loaded 2-core VM, and a measurement out of band is retried once.
#
#   sudo sim/testbed-test.sh        # uses FABPERF_BIN, else builds target/release/fabperf
#
# Prints one line per check and "N passed, N failed" at the end; exit 1 on any failure.
# No `set -e`: a failed check is counted and the run goes on to the next one.
set -uo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$SIM_DIR/.." && pwd -P)
TB=$SIM_DIR/testbed.sh
# shellcheck source=sim/testbed/lib.sh
source "$SIM_DIR/testbed/lib.sh"
STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}
TOKEN=$STATE/token
SECS=${FABPERF_TESTBED_TEST_SECS:-3}

PASSED=0
FAILED=0
FAILS=()
ok() {
    PASSED=$((PASSED + 1))
    printf 'ok    %s\n' "$*"
}
bad() {
    FAILED=$((FAILED + 1))
    FAILS+=("$*")
    printf 'FAIL  %s\n' "$*"
}
section() { printf '\n== %s\n' "$*"; }

# expect_rc WANT NAME CMD...: CMD exits WANT; its output must not be empty
# when WANT != 0 (every failure of sim/testbed.sh says why; QUIET=1 lifts
# that for other programs). Output is kept in $OUT.
OUT=
QUIET=0
expect_rc() {
    local want=$1 name=$2 rc=0 quiet=$QUIET
    QUIET=0
    shift 2
    OUT=$("$@" 2>&1) || rc=$?
    if [[ $rc -ne $want ]]; then
        bad "$name: exit $rc, want $want; output: $(tail -n 3 <<<"$OUT" | tr '\n' ' ')"
        return 1
    fi
    if [[ $want -ne 0 && $quiet -eq 0 && -z $OUT ]]; then
        bad "$name: exit $rc without a word of explanation"
        return 1
    fi
    ok "$name (exit $rc)"
}
expect_out() { # NAME PATTERN: last expect_rc's output matches PATTERN (ERE)
    if grep -qE -- "$2" <<<"$OUT"; then ok "$1"; else bad "$1: output lacks /$2/: $(tail -n 3 <<<"$OUT" | tr '\n' ' ')"; fi
}

no_leftovers() { # NAME: no testbed namespace, resolv.conf or state remains
    local left
    left=$(ip netns list | awk '{print $1}' | grep -E "^(${TB_NODE_PREFIX}[0-9]+|${TB_SWITCH_NS})$" || true)
    left+=$(ls -d /etc/netns/${TB_NODE_PREFIX}* 2>/dev/null || true)
    [[ -e $STATE ]] && left+=" $STATE"
    if [[ -z $left ]]; then ok "$1: nothing left"; else bad "$1: left behind: $(tr -s ' \n' ' ' <<<"$left")"; fi
}

# bw NODE ADDR [ARGS...]: tcp-bw Gbit/s from NODE to ADDR (empty on failure).
bw() {
    local node=$1 addr=$2
    shift 2
    "$TB" exec "$node" fabperf tcp-bw "$addr" -t "$SECS" --json --token-file "$TOKEN" "$@" 2>/dev/null |
        jq -r 'select(has("stream") | not) | .bw_gbps' 2>/dev/null | head -n1
}
# in_band NAME LO HI NODE ADDR [ARGS...]: LO <= Gbit/s <= HI (HI may be inf); one retry.
LAST_BW=
in_band() {
    local name=$1 lo=$2 hi=$3 node=$4 addr=$5 try v
    shift 5
    for try in 1 2; do
        v=$(bw "$node" "$addr" "$@")
        LAST_BW=$v
        if [[ -n $v ]] && awk -v v="$v" -v lo="$lo" -v hi="$hi" 'BEGIN { exit !(v >= lo && (hi == "inf" || v <= hi)) }'; then
            ok "$name: $(printf '%.2f' "$v") Gbit/s in [$lo, $hi]$([[ $try -eq 2 ]] && echo ' (second try)')"
            return 0
        fi
        printf '      %s: try %d gave %s Gbit/s, outside [%s, %s]\n' "$name" "$try" "${v:-no result}" "$lo" "$hi"
    done
    bad "$name: ${v:-no result} Gbit/s outside [$lo, $hi] twice"
    return 1
}
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# dns_count NODE NAME: distinct A records NODE's resolver returns for NAME.
dns_count() {
    "$TB" exec "$1" getent ahostsv4 "$2" 2>/dev/null | awk '$2 == "STREAM" {print $1}' | sort -u | wc -l
}

# Doctor inside a node: print the findings; assert on node-ip-slow-link only
# where the layout decides it (see docs/testbed.md).
#   doctor_check NODE expect-mgmt0-if-present | expect-absent
doctor_check() {
    local node=$1 mode=$2 json ids subj
    json=$("$TB" exec "$node" fabperf doctor --json 2>/dev/null) || true
    if ! jq -e '.findings' >/dev/null 2>&1 <<<"$json"; then
        bad "doctor in $node: no JSON findings: $(head -c 200 <<<"$json")"
        return
    fi
    ids=$(jq -r '.findings[] | "\(.severity) \(.id) [\(.subject)]"' <<<"$json")
    printf '      doctor in %s: %s\n' "$node" "$(tr '\n' ';' <<<"$ids")"
    subj=$(jq -r '.findings[] | select(.id == "node-ip-slow-link") | .subject' <<<"$json")
    case $mode in
        expect-mgmt0-if-present)
            if [[ -z $subj ]]; then
                ok "doctor in $node: node-ip-slow-link not reported (this fabperf does not see the tc-shaped rate)"
            elif [[ $subj == mgmt0 ]]; then
                ok "doctor in $node: node-ip-slow-link names mgmt0"
            else
                bad "doctor in $node: node-ip-slow-link names '$subj', want mgmt0"
            fi
            ;;
        expect-absent)
            if [[ -z $subj ]]; then ok "doctor in $node: no node-ip-slow-link (node address on the fabric)"; else bad "doctor in $node: node-ip-slow-link [$subj] with the node address on the fabric"; fi
            ;;
    esac
}

cleanup() { "$TB" down >/dev/null 2>&1 || true; }

# ------------------------------------------------------------------ parsing
section "input parsing (sim/testbed/lib.sh)"
parse_ok() { # FUNC INPUT WANT [ARGS]
    local f=$1 in=$2 want=$3 got
    shift 3
    if got=$("$f" "$in" "$@" 2>/dev/null) && [[ $got == "$want" ]]; then
        ok "$f '$in' -> $want"
    else bad "$f '$in': got '${got:-error}', want '$want'"; fi
}
parse_bad() { # FUNC INPUT [ARGS]
    local f=$1 in=$2 got err
    shift 2
    if got=$("$f" "$in" "$@" 2>/tmp/fabperf-testbed-test.err); then
        bad "$f accepted '$in' as '$got'"
    else
        err=$(cat /tmp/fabperf-testbed-test.err)
        if [[ -n $err ]]; then ok "$f rejects '$in'"; else bad "$f rejects '$in' without a message"; fi
    fi
}
parse_ok tb_parse_nodes 4 4
parse_ok tb_parse_nodes 2 2
parse_ok tb_parse_nodes 64 64
parse_ok tb_parse_nodes 1021 1021
parse_ok tb_parse_nodes 016 16
# shellcheck disable=SC2016 # hostile input, kept literal on purpose
for v in 1 0 1022 -3 abc '' 4x ' 4' 99999999999999999999 '$(reboot)' '4;rm -rf /'; do parse_bad tb_parse_nodes "$v"; done
parse_ok tb_parse_node fp-node3 3 4
parse_ok tb_parse_node node2 2 4
parse_ok tb_parse_node 4 4 4
for v in fp-node0 fp-node5 0 5 '' fp-switch ../fp-node1 'fp-node1 ' 'fp-node1;id' fp-node01x -1; do parse_bad tb_parse_node "$v" 4; done
parse_ok tb_parse_rails 0 0
parse_ok tb_parse_rails 2 2
parse_ok tb_parse_rails 08 8
# shellcheck disable=SC2016 # hostile input, kept literal on purpose
for v in 9 -1 '' abc 1x 9999 '2;id' '$(id)'; do parse_bad tb_parse_rails "$v"; done
parse_ok tb_parse_rail 0 0 2
parse_ok tb_parse_rail 1 1 2
for v in 2 -1 '' x 1.0 '1;id'; do parse_bad tb_parse_rail "$v" 2; done
parse_bad tb_parse_rail 0 0
parse_ok tb_parse_rate 1gbit 1000000000
parse_ok tb_parse_rate 2.5Gbit 2500000000
parse_ok tb_parse_rate 200mbit 200000000
parse_ok tb_parse_rate 100M 100000000
parse_ok tb_parse_rate 8kbit 8000
parse_ok tb_parse_rate 1tbit 1000000000000
for v in 0 7kbit 1.5tbit 999999999tbit 1e9 -1gbit gbit '' 1gbps '1gbit;id' 18446744073709551617 '1 gbit'; do parse_bad tb_parse_rate "$v"; done
parse_ok tb_parse_delay 2ms 2000
parse_ok tb_parse_delay 0.5ms 500
parse_ok tb_parse_delay 10s 10000000
for v in 0us 11s 5 ms -1ms 1e3ms 999999999s '' '2ms;id'; do parse_bad tb_parse_delay "$v"; done
parse_ok tb_parse_loss 0.5 5000
parse_ok tb_parse_loss 2% 20000
parse_ok tb_parse_loss 100 1000000
parse_ok tb_parse_loss 0.0001 1
for v in 0 0.00001 100.0001 101 -1 abc '' 1e2 '50%%' '1;id' 1000; do parse_bad tb_parse_loss "$v"; done
parse_ok tb_fmt_loss 5000 0.5%
parse_ok tb_fmt_loss 1000000 100%
parse_ok tb_fmt_rate 200000000 200mbit
parse_ok tb_loss_bytecode 1000000 "1,6 0 0 4294967295"
parse_ok tb_loss_bytecode 5000 "4,32 0 0 4294963256,53 0 1 21474836,6 0 0 0,6 0 0 4294967295"
parse_ok tb_overlay_mac 3 02:fb:02:00:00:03
# Addressing: /24s up to 253 nodes, /22s in 198.19.0.0/16 above.
scaled() { tb_set_scale "$1" && "$2" "$1" && printf ' /%s gw %s' "$TB_NODE_PREFIXLEN" "$(tb_fabric_gw)"; }
parse_ok scaled 253 "198.18.1.253 /24 gw 198.18.1.254" tb_fabric_ip
parse_ok scaled 254 "198.19.4.254 /22 gw 198.19.7.254" tb_fabric_ip
parse_ok scaled 1021 "198.19.11.253 /22 gw 198.19.7.254" tb_overlay_ip
parse_ok scaled 300 "198.19.1.44 /22 gw 198.19.7.254" tb_mgmt_ip
parse_ok tb_parse_kinds rate,delay "rate delay"
parse_ok tb_parse_kinds tx-half,rate,tx-half "tx-half rate"
# shellcheck disable=SC2016 # hostile input, kept literal on purpose
for v in '' rate, ,rate 'rate delay' jitter 'rate;id' '$(id)' RATE; do parse_bad tb_parse_kinds "$v"; done

# ------------------------------------------------------------------ preconditions
if [[ $(id -u) -ne 0 ]]; then
    echo "testbed-test: the testbed part needs root: sudo $0" >&2
    printf '\n%d passed, %d failed\n' "$PASSED" "$((FAILED + 1))"
    exit 1
fi
for t in ip tc jq getent setpriv; do
    command -v "$t" >/dev/null || {
        echo "testbed-test: $t is missing (run ci/install-deps.sh)" >&2
        exit 1
    }
done
if [[ -e $STATE/testbed.env ]]; then
    echo "testbed-test: a testbed is up; this test builds its own: run 'sudo sim/testbed.sh down' first" >&2
    exit 1
fi
if [[ -z ${FABPERF_BIN:-} ]]; then
    echo "testbed-test: building fabperf (cargo build --release -p fabperf)"
    if ! (cd "$REPO" && cargo build --release --locked -p fabperf); then
        echo "testbed-test: cargo build failed" >&2
        exit 1
    fi
    export FABPERF_BIN="${CARGO_TARGET_DIR:-$REPO/target}/release/fabperf"
fi
trap cleanup EXIT
cleanup

section "command line and preconditions"
expect_rc 2 "no command" "$TB"
expect_rc 2 "unknown command" "$TB" frobnicate
expect_rc 2 "up --nodes 1" "$TB" up --nodes 1 && expect_out "says the range" "2 to $TB_MAX_NODES"
expect_rc 2 "up --nodes $((TB_MAX_NODES + 1))" "$TB" up --nodes $((TB_MAX_NODES + 1))
expect_rc 2 "up --nodes abc" "$TB" up --nodes abc
expect_rc 2 "up --nodes (missing value)" "$TB" up --nodes
expect_rc 2 "up --overlay-underlay bogus" "$TB" up --overlay-underlay bogus
expect_rc 2 "up --mgmt-rate 1zbit" "$TB" up --mgmt-rate 1zbit
expect_rc 2 "up --unknown" "$TB" up --unknown
expect_rc 2 "down with an argument" "$TB" down now
expect_rc 1 "exec with no testbed" "$TB" exec fp-node1 true && expect_out "says how to start one" "sim/testbed.sh up"
expect_rc 3 "status with no testbed" "$TB" status
# shellcheck disable=SC2016 # hostile input, kept literal on purpose
for d in / /tmp/../etc relative /tmp/x/ '/tmp/a b' '/tmp/$(id)'; do
    expect_rc 2 "FABPERF_TESTBED_DIR='$d' refused" env FABPERF_TESTBED_DIR="$d" "$TB" status
done
FOREIGN=$(mktemp -d)
touch "$FOREIGN/precious"
expect_rc 1 "up refuses a state directory holding other files" env FABPERF_TESTBED_DIR="$FOREIGN" "$TB" up
expect_rc 0 "down leaves a foreign state directory alone" env FABPERF_TESTBED_DIR="$FOREIGN" "$TB" down
if [[ -f $FOREIGN/precious ]]; then ok "the foreign file survived"; else bad "down removed a file it did not write"; fi
rm -rf "$FOREIGN" "$FOREIGN.lock"
# Not root: a copy of the scripts that nobody can read, run as nobody.
NR=$(mktemp -d)
cp -a "$SIM_DIR/testbed.sh" "$NR/" && mkdir -p "$NR/testbed" && cp -a "$SIM_DIR/testbed/lib.sh" "$NR/testbed/"
chmod -R a+rX "$NR"
expect_rc 1 "up as a user" setpriv --reuid=nobody --regid=nogroup --clear-groups "$NR/testbed.sh" up &&
    expect_out "says to use root" "needs root.*sudo"
rm -rf "$NR"
# A missing tool: a PATH with everything but dnsmasq.
FAKE=$(mktemp -d)
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
    for f in "$d"/*; do
        b=$(basename "$f")
        [[ $b == dnsmasq || -e $FAKE/$b ]] || ln -s "$f" "$FAKE/$b"
    done
done
expect_rc 1 "up without dnsmasq" env PATH="$FAKE" /bin/bash "$TB" up && expect_out "names the package" "dnsmasq-base"
rm -rf "$FAKE"
no_leftovers "after the refused ups"
expect_rc 1 "up with an agent that cannot start" env FABPERF_BIN=/bin/false "$TB" up &&
    expect_out "says it cleaned up" "removing the half-built testbed"
no_leftovers "after the half-built up"
rm -rf "$STATE.failed-logs"

# ------------------------------------------------------------------ layout 1
section "layout 1: 4 nodes, node address and overlay on the 1 Gbit/s management link"
expect_rc 0 "up" "$TB" up
expect_rc 1 "second up is refused" "$TB" up && expect_out "says down first" "down' first"
expect_rc 0 "status" "$TB" status && expect_out "12 agents listening" "fp-node4 +overlay .*alive, listening"
for label in mgmt fabric overlay; do
    n=$(dns_count fp-node3 "$label.agents.$TB_DOMAIN")
    if [[ $n -eq 4 ]]; then ok "DNS $label.agents.$TB_DOMAIN: 4 A records"; else bad "DNS $label.agents.$TB_DOMAIN: $n A records, want 4"; fi
done
expect_rc 0 "DNS per-node name" "$TB" exec 1 getent hosts fp-node2.fabric.agents.$TB_DOMAIN && expect_out "right address" "^$(tb_fabric_ip 2) "
expect_rc 0 "DNS node name" "$TB" exec 1 getent hosts fp-node4.nodes.$TB_DOMAIN && expect_out "node address" "^$(tb_mgmt_ip 4) "
QUIET=1 expect_rc 2 "DNS unknown name in the domain" "$TB" exec 1 getent hosts nosuch.agents.$TB_DOMAIN
QUIET=1 expect_rc 2 "DNS does not forward outside names" "$TB" exec 1 getent hosts debian.org
expect_rc 0 "exec runs in the node" "$TB" exec node2 hostname && expect_out "hostname is the node's" "^fp-node2$"
QUIET=1 expect_rc 3 "exec passes the exit status" "$TB" exec 2 sh -c 'exit 3'
# `exec` replaces itself with the command: a caller can signal the command by $!.
"$TB" exec 1 sleep 20 &
EP=$!
sleep 1
if [[ $(cat "/proc/$EP/comm" 2>/dev/null) == sleep ]]; then ok "exec: the caller's pid is the command's"; else bad "exec: pid $EP is '$(cat "/proc/$EP/comm" 2>/dev/null)', not the command"; fi
kill -9 "$EP" 2>/dev/null
wait "$EP" 2>/dev/null
expect_rc 0 "exec switch" "$TB" exec switch hostname && expect_out "hostname fp-switch" "^fp-switch$"
in_band "overlay    switch -> node4 (a controller on the overlay)" 0.3 1.05 switch "fp-node4.overlay.agents.$TB_DOMAIN"
expect_rc 2 "exec on a node that does not exist" "$TB" exec fp-node9 true
# Nothing leaves the testbed: the switch namespace (the nodes' gateway) has no
# route but its own subnets and does not forward.
expect_rc 0 "switch: no default route" ip -n "$TB_SWITCH_NS" -4 route show default && expect_out "empty" "^$"
expect_rc 0 "switch: forwarding off" ip netns exec "$TB_SWITCH_NS" sysctl -n net.ipv4.ip_forward && expect_out "0" "^0$"

in_band "host-mgmt  node1 -> node2 (1 Gbit/s link)" 0.5 1.05 fp-node1 "fp-node2.mgmt.agents.$TB_DOMAIN"
MGMT=$LAST_BW
in_band "host-mgmt  node2 -> node1, reverse" 0.5 1.05 fp-node1 "$(tb_mgmt_ip 2)" -R
in_band "host-fabric node1 -> node2 (unshaped)" 1.5 inf fp-node1 "fp-node2.fabric.agents.$TB_DOMAIN"
FAB=$LAST_BW
if [[ -n $MGMT && -n $FAB ]] && gt "$FAB" "$(awk -v m="$MGMT" 'BEGIN{print 2*m}')"; then ok "fabric ($FAB) > 2 x mgmt ($MGMT)"; else bad "fabric ($FAB) not above 2 x mgmt ($MGMT)"; fi
in_band "overlay    node1 -> node2 (VXLAN over mgmt)" 0.4 1.0 fp-node1 "fp-node2.overlay.agents.$TB_DOMAIN"
expect_rc 0 "overlay MTU = 1500 - 50" "$TB" exec 1 cat /sys/class/net/vxlan0/mtu && expect_out "1450" "^1450$"
doctor_check fp-node1 expect-mgmt0-if-present

# degrade / restore
expect_rc 2 "degrade without options" "$TB" degrade fp-node2
expect_rc 2 "degrade --rate abc" "$TB" degrade fp-node2 --rate abc
expect_rc 2 "degrade --loss 200" "$TB" degrade fp-node2 --loss 200
expect_rc 2 "degrade a node that does not exist" "$TB" degrade fp-node7 --rate 1gbit
expect_rc 2 "degrade a hostile node name" "$TB" degrade 'fp-node2;id' --rate 1gbit
expect_rc 0 "degrade fp-node2 --rate 200mbit --loss 0.1" "$TB" degrade fp-node2 --rate 200mbit --loss 0.1
expect_rc 0 "status shows it" "$TB" status && expect_out "degraded node listed" "fp-node2 .*rate 200mbit loss 0.1%"
in_band "degraded fabric node1 -> node2" 0.01 0.25 fp-node1 "$(tb_fabric_ip 2)"
in_band "degraded fabric node2 -> node1, reverse" 0.01 0.25 fp-node1 "$(tb_fabric_ip 2)" -R
in_band "other fabric links stay fast (node1 -> node3)" 1.0 inf fp-node1 "$(tb_fabric_ip 3)"
# Delay needs netem; kernels without it must refuse clearly and leave the link as it was.
if "$TB" degrade fp-node3 --delay 2ms >/tmp/fabperf-testbed-test.err 2>&1; then
    lat=$("$TB" exec 1 fabperf tcp-lat "$(tb_fabric_ip 3)" -t 1 --json --token-file "$TOKEN" 2>/dev/null |
        jq -r 'select(has("stream") | not) | .lat_us.p50' | head -n1)
    if [[ -n $lat ]] && gt "$lat" 1800; then ok "delay 2ms each way: half-RTT p50 ${lat} us"; else bad "delay 2ms each way: half-RTT p50 '${lat}' us, want > 1800"; fi
    "$TB" restore fp-node3 >/dev/null 2>&1
else
    if grep -q "netem" /tmp/fabperf-testbed-test.err; then ok "--delay refused on a kernel without netem, with the reason"; else bad "--delay failed: $(cat /tmp/fabperf-testbed-test.err)"; fi
    if [[ ! -e $STATE/degraded/fp-node3 ]] && ! tc -n fp-node3 qdisc show dev fab0 | grep -q tbf; then ok "failed degrade left fp-node3 undegraded"; else bad "failed degrade left qdiscs on fp-node3"; fi
fi
expect_rc 0 "restore fp-node2" "$TB" restore fp-node2
in_band "restored fabric node1 -> node2" 1.5 inf fp-node1 "$(tb_fabric_ip 2)"
expect_rc 0 "restore is idempotent" "$TB" restore fp-node2

# a crash: an agent killed, then the state lost
kill -9 "$(cat "$STATE/pids/fp-node3-host-fabric.pid")"
sleep 0.3
expect_rc 1 "status reports a dead agent" "$TB" status && expect_out "DEAD" "fp-node3 +host-fabric .*DEAD"
rm -rf "$STATE"
expect_rc 3 "status after the state is lost" "$TB" status && expect_out "names leftovers" "leftover namespaces"
expect_rc 1 "up refuses over leftovers" "$TB" up && expect_out "says down first" "down' first"
expect_rc 0 "down after a crash" "$TB" down
no_leftovers "after down"
expect_rc 0 "down again (idempotent)" "$TB" down

# ------------------------------------------------------------------ layout 2
section "layout 2: 16 nodes, node address on mgmt, overlay pinned to the fabric"
expect_rc 0 "up --nodes 16 --overlay-underlay fabric" "$TB" up --nodes 16 --overlay-underlay fabric
n=$(dns_count fp-node16 "overlay.agents.$TB_DOMAIN")
if [[ $n -eq 16 ]]; then ok "DNS overlay.agents.$TB_DOMAIN: 16 A records"; else bad "DNS overlay.agents.$TB_DOMAIN: $n A records, want 16"; fi
in_band "host-mgmt  node1 -> node16 (1 Gbit/s link)" 0.5 1.05 fp-node1 "$(tb_mgmt_ip 16)"
MGMT=$LAST_BW
in_band "overlay    node1 -> node16 (VXLAN over fabric)" 1.5 inf fp-node1 "fp-node16.overlay.agents.$TB_DOMAIN"
OVL=$LAST_BW
if [[ -n $MGMT && -n $OVL ]] && gt "$OVL" "$(awk -v m="$MGMT" 'BEGIN{print 2*m}')"; then ok "overlay on fabric ($OVL) > 2 x mgmt ($MGMT)"; else bad "overlay on fabric ($OVL) not above 2 x mgmt ($MGMT)"; fi
expect_rc 0 "overlay MTU = 9000 - 50" "$TB" exec 16 cat /sys/class/net/vxlan0/mtu && expect_out "8950" "^8950$"
doctor_check fp-node16 expect-mgmt0-if-present
expect_rc 0 "down" "$TB" down
no_leftovers "after down"

# ------------------------------------------------------------------ layout 3
section "layout 3: 2 nodes, node address (and so the overlay) on the fabric"
expect_rc 0 "up --nodes 2 --node-ip fabric" "$TB" up --nodes 2 --node-ip fabric
expect_rc 0 "detect sees the node address on fab0" "$TB" exec 1 fabperf detect && expect_out "node IP on fab0" "Node IP $(tb_fabric_ip 1) on fab0"
in_band "overlay    node1 -> node2 (VXLAN over fabric, by node address)" 1.5 inf fp-node1 "fp-node2.overlay.agents.$TB_DOMAIN"
in_band "host-mgmt  node1 -> node2 still capped" 0.5 1.05 fp-node1 "fp-node2.mgmt.agents.$TB_DOMAIN"
doctor_check fp-node2 expect-absent
expect_rc 0 "down" "$TB" down
no_leftovers "after down"
expect_rc 3 "status after down" "$TB" status

trap - EXIT
rm -f /tmp/fabperf-testbed-test.err
echo
if [[ $FAILED -gt 0 ]]; then
    printf 'failed: %s\n' "${FAILS[@]}"
fi
printf '%d passed, %d failed\n' "$PASSED" "$FAILED"
[[ $FAILED -eq 0 ]]
