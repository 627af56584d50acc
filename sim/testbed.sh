#!/usr/bin/env bash
# N-node fabric on one machine, built from network namespaces: per node a
# 1 Gbit/s management link (carries the node address), an unshaped MTU 9000
# fabric link, a VXLAN overlay standing in for a CNI, three fabperf agents
# (host-mgmt, host-fabric, overlay; each also serves HTTP), DNS names for them
# served by dnsmasq, and with --service service addresses DNAT'd to the overlay
# agents as kube-proxy does for ClusterIP Services (one per node, and one
# balanced over several nodes).
# See docs/testbed.md.
set -euo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$SIM_DIR/.." && pwd -P)
# shellcheck source=sim/testbed/lib.sh
source "$SIM_DIR/testbed/lib.sh"

STATE=${FABPERF_TESTBED_DIR:-/run/fabperf-testbed}
PROG=sim/testbed.sh
if [[ ! $STATE =~ ^/[A-Za-z0-9._/-]*[A-Za-z0-9._-]$ || $STATE =~ (^|/)\.\.?(/|$) ]]; then
    printf 'testbed: error: FABPERF_TESTBED_DIR=%q must be an absolute path (letters, digits, . _ - /), not /, without . or .. parts or a trailing /\n' "$STATE" >&2
    exit 2
fi
LOCK="$STATE.lock"

log() { printf 'testbed: %s\n' "$*" >&2; }
# die CODE MESSAGE: 2 = usage, 1 = anything else.
die() {
    local code=$1
    shift
    printf 'testbed: error: %s\n' "$*" >&2
    exit "$code"
}

usage() {
    cat <<EOF
Usage: $PROG COMMAND [ARGS]

  up [--nodes N] [--node-ip mgmt|fabric] [--overlay-underlay auto|mgmt|fabric]
     [--mgmt-rate R] [--fabric-rate R] [--service] [--rails R] [--build]
        Build the testbed: N nodes (default $TB_DEFAULT_NODES, $TB_MIN_NODES..$TB_MAX_NODES), namespaces
        ${TB_NODE_PREFIX}1..${TB_NODE_PREFIX}N and $TB_SWITCH_NS (the two bridges, gateway, DNS).
        --node-ip      link of the default route, so of the address a default
                       kubelet advertises (default mgmt)
        --overlay-underlay
                       link the VXLAN overlay runs over: auto (default) = the
                       node address's link, as CNIs choose it; mgmt or fabric
                       pins it, as a CNI with an interface setting does
        --mgmt-rate    shaping of the management link (default 1gbit)
        --fabric-rate  shape every fabric link to R each way, a port rate
                       (default: unshaped, as fast as the CPU moves it)
        --service      service addresses, DNAT'd in every node as kube-proxy's
                       iptables mode does (needs iptables), TCP and UDP:
                       $(tb_node_service_ip 1)..N ($(tb_node_ns 1).$TB_SERVICE_NAME.$TB_DOMAIN, ...), each with
                       one node's overlay agent as its only endpoint, and
                       $(tb_service_ip):$TB_PORT ($TB_SERVICE_NAME.$TB_DOMAIN) in front of the
                       other nodes' overlay agents, balanced per connection
                       (at most $TB_NARROW_MAX nodes)
        --rails R      R more fabric links per node (0..$TB_MAX_RAILS, default 0): rail I is
                       railI in the node, on its own bridge br-railI, address
                       $TB_RAIL_NET.(10+I).K; one more agent per node
                       (path "rails") serves all its rails on every address,
                       port $TB_RAILS_PORT (docs/rails.md); at most $TB_NARROW_MAX nodes
        --build        run 'cargo build --release -p fabperf' when no fabperf
                       binary is found
  down  Stop everything and remove the testbed (idempotent; also cleans up
        after a crash or a half-built 'up').
  status
        Nodes, addresses, agents (pid, alive, listening), DNS, degraded links.
        Exit 0 all healthy, 1 something is dead, 3 no testbed.
  exec NODE CMD [ARGS...]
        Run CMD inside NODE (${TB_NODE_PREFIX}K, nodeK, K, or 'switch'), with the
        testbed's fabperf first on PATH; exits with CMD's status.
  degrade NODE [--rail I] [--rate R] [--delay D] [--loss P] [--egress-only]
        Shape NODE's fabric link in both directions: R bits/s (e.g. 200mbit),
        D added one way in each direction (e.g. 2ms), P percent lost per packet.
        --egress-only shapes only what NODE transmits (a transmit-side fault).
        --rail I shapes NODE's rail I instead of fab0 (up --rails).
  inject --seed S --faults K [--kinds rate,delay,loss,tx-half] [--out FILE]
         [--rate-factor F] [--delay D] [--loss P]
        Fault K random nodes or links (node-disjoint), chosen by seed S, on the
        fabric: rate = the link at 1/F of its rate (default 5), delay = D added
        each way (default 1ms), loss = P percent lost each way (default 5),
        tx-half = a node that drops half of what it transmits. A link is one
        pair of nodes: only their traffic to each other is faulted. Writes the
        faults (JSON) to FILE and to the state; replaces earlier faults.
  restore [NODE [--rail I]]
        Remove what degrade applied to NODE (to its rail I); without NODE,
        every degraded node and rail and every injected fault.

State, logs and the agents' token: $STATE (FABPERF_TESTBED_DIR).
fabperf binary: \$FABPERF_BIN, else target/release/fabperf, target/debug/fabperf
(under \$CARGO_TARGET_DIR when set), else fabperf on PATH.
EOF
}

# ------------------------------------------------------------------ checks

need_root() {
    if [[ $(id -u) -ne 0 ]]; then
        die 1 "$1 needs root (network namespaces, veth, tc): run 'sudo $PROG $1 ...'"
    fi
}

need_tools() {
    local missing=() t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        local pkgs=() m
        for m in "${missing[@]}"; do
            case $m in
                ip | tc | bridge | ss) pkgs+=(iproute2) ;;
                dnsmasq) pkgs+=(dnsmasq-base) ;;
                ethtool) pkgs+=(ethtool) ;;
                unshare | flock | setsid | nsenter) pkgs+=(util-linux) ;;
                getent) pkgs+=(libc-bin) ;;
                *) pkgs+=("$m") ;;
            esac
        done
        die 1 "missing tools: ${missing[*]}; install them with 'apt-get install -y $(printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' ')' (or run ci/install-deps.sh)"
    fi
}

take_lock() {
    mkdir -p "$(dirname "$LOCK")"
    exec 9>"$LOCK"
    if ! flock -w 30 9; then
        local holders
        holders=$(fuser "$LOCK" 2>/dev/null | tr -s ' ' || true)
        [[ -z $holders ]] || log "processes holding $LOCK:$holders"
        die 1 "another $PROG up/down/degrade holds $LOCK for more than 30 s; wait for it to finish"
    fi
}

find_fabperf() {
    local target_dir c
    target_dir=$(realpath -m "${CARGO_TARGET_DIR:-$REPO/target}")
    if [[ -n ${FABPERF_BIN:-} ]]; then
        [[ -x $FABPERF_BIN && -f $FABPERF_BIN ]] || die 1 "FABPERF_BIN=$FABPERF_BIN is not an executable file"
        realpath "$FABPERF_BIN"
        return
    fi
    for c in "$target_dir/release/fabperf" "$target_dir/debug/fabperf"; do
        if [[ -x $c ]]; then
            echo "$c"
            return
        fi
    done
    if c=$(command -v fabperf 2>/dev/null); then
        realpath "$c"
        return
    fi
    return 1
}

# ------------------------------------------------------------------ state

# Namespaces that belong to a testbed, found by name (also after a crash).
our_namespaces() {
    ip netns list 2>/dev/null | awk '{print $1}' |
        grep -E "^(${TB_NODE_PREFIX}[0-9]+|${TB_SWITCH_NS})$" || true
}

state_get() { # KEY -> value from $STATE/testbed.env
    local f=$STATE/testbed.env
    [[ -f $f ]] || return 1
    sed -n "s/^$1=//p" "$f" | head -n1
}

require_up() {
    if [[ ! -f $STATE/testbed.env ]]; then
        if [[ -n $(our_namespaces) ]]; then
            die 1 "leftovers of a testbed exist but its state ($STATE) is gone; run 'sudo $PROG down', then 'up'"
        fi
        die 1 "no testbed is up; start one with 'sudo $PROG up'"
    fi
    NODES=$(state_get nodes)
    RAILS=$(state_get rails || true)
    RAILS=${RAILS:-0}
    [[ $RAILS =~ ^[0-9]+$ ]] || die 1 "$STATE/testbed.env is damaged; run 'sudo $PROG down' and 'up' again"
    [[ $NODES =~ ^[0-9]+$ ]] || die 1 "$STATE/testbed.env is damaged; run 'sudo $PROG down' and 'up' again"
    tb_set_scale "$NODES"
    FABRIC_RATE=$(state_get fabric_rate)
}

# A process that exists and is not a zombie (an orphaned agent that died stays
# a zombie where PID 1 does not reap).
pid_alive() {
    local st
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $st && $st != Z && $st != X ]]
}

# ------------------------------------------------------------------ down

kill_ns_processes() { # NS: TERM, then KILL, every process inside it
    local ns=$1 pids i
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for i in $(seq 1 30); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [[ -n $pids ]] || return 0
        sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
}

teardown() {
    local ns d
    for ns in $(our_namespaces); do
        kill_ns_processes "$ns"
        ip netns del "$ns" 2>/dev/null || log "could not delete namespace $ns (still in use?)"
    done
    # resolv.conf files that 'ip netns exec' binds over /etc/resolv.conf.
    for d in /etc/netns/"$TB_NODE_PREFIX"* /etc/netns/"$TB_SWITCH_NS"; do
        [[ -d $d ]] || continue
        [[ $(basename "$d") =~ ^(${TB_NODE_PREFIX}[0-9]+|${TB_SWITCH_NS})$ ]] || continue
        if [[ -f $d/resolv.conf ]] && ! grep -q '^# fabperf testbed' "$d/resolv.conf"; then
            log "leaving $d alone: its resolv.conf was not written by $PROG"
            continue
        fi
        rm -f "$d/resolv.conf"
        rmdir "$d" 2>/dev/null || log "left $d: it holds files $PROG did not write"
    done
    rmdir /etc/netns 2>/dev/null || true
    restore_neigh_limits
    remove_state
}

# The kernel's neighbour (ARP) table is one for all namespaces, limited by
# the host's gc_thresh1/2/3 (128/512/1024 by default): an N-node mesh keeps
# up to about 2 N (N + 1) entries (every node's peers on two links, the
# switch's on both bridges). 'up' raises the limits when they are lower and
# 'down' puts the old values back (kept in $STATE/host-sysctl).
NEIGH_KEYS="net.ipv4.neigh.default.gc_thresh1 net.ipv4.neigh.default.gc_thresh2 net.ipv4.neigh.default.gc_thresh3"
raise_neigh_limits() {
    local need=$((2 * NODES * (NODES + 1))) t3 key
    t3=$(sysctl -n net.ipv4.neigh.default.gc_thresh3 2>/dev/null) || return 0
    ((need > t3)) || return 0
    for key in $NEIGH_KEYS; do
        echo "$key=$(sysctl -n "$key")"
    done >"$STATE/host-sysctl"
    sysctl -qw net.ipv4.neigh.default.gc_thresh1="$need" net.ipv4.neigh.default.gc_thresh2=$((2 * need)) \
        net.ipv4.neigh.default.gc_thresh3=$((4 * need)) ||
        die 1 "cannot raise the host's neighbour table limits (net.ipv4.neigh.default.gc_thresh*) to $need/$((2 * need))/$((4 * need)) for $NODES nodes"
    log "host neighbour table limits raised to $need/$((2 * need))/$((4 * need)) for $NODES nodes (were $(cut -d= -f2 "$STATE/host-sysctl" | tr '\n' / | sed 's,/$,,'); 'down' restores them)"
}
restore_neigh_limits() {
    local f=$STATE/host-sysctl line
    [[ -f $f ]] || return 0
    while IFS= read -r line; do
        [[ $line =~ ^net\.ipv4\.neigh\.default\.gc_thresh[123]=[0-9]+$ ]] || continue
        sysctl -qw "$line" || log "could not restore $line"
    done <"$f"
    rm -f "$f"
}

# True when every entry of $STATE is one that 'up' creates (or it is empty).
state_dir_is_ours() {
    local e
    for e in "$STATE"/* "$STATE"/.[!.]*; do
        [[ -e $e || -L $e ]] || continue
        case ${e##*/} in
            logs | pids | dns | batch | bin | degraded | inject | tune-state | token | testbed.env | host-sysctl) ;;
            *) return 1 ;;
        esac
    done
}

# Only what 'up' creates, so a mistyped FABPERF_TESTBED_DIR cannot cost files.
remove_state() {
    [[ -d $STATE ]] || return 0
    if ! state_dir_is_ours; then
        log "left $STATE alone: it holds files $PROG did not write"
        return 0
    fi
    rm -rf "${STATE:?}"/{logs,pids,dns,batch,bin,degraded,inject,tune-state}
    rm -f "$STATE/token" "$STATE/testbed.env" "$STATE/host-sysctl"
    rmdir "$STATE" 2>/dev/null || log "left $STATE: it holds files $PROG did not write"
}

cmd_down() {
    [[ $# -eq 0 ]] || die 2 "down takes no arguments"
    need_root down
    need_tools ip flock
    take_lock
    local had
    had=$(our_namespaces | wc -l)
    teardown
    if [[ -n $(our_namespaces) ]]; then
        die 1 "namespaces remain: $(our_namespaces | tr '\n' ' '); see 'ip netns pids NS' for what holds them"
    fi
    if ((had > 0)); then log "testbed removed ($had namespaces)"; else log "no testbed was up; nothing to remove"; fi
}

# ------------------------------------------------------------------ up

start_agent() { # K PATH
    local k=$1 path=$2 ip name log pidf pid i port=$TB_PORT
    if [[ $path == rails ]]; then
        # Every rail of the node (and its other addresses), one agent.
        ip=0.0.0.0 port=$TB_RAILS_PORT
    else
        ip=$(tb_path_ip "$k" "$path")
    fi
    name="$(tb_node_ns "$k")-$path"
    log=$STATE/logs/$name.log
    pidf=$STATE/pids/$name.pid
    # shellcheck disable=SC2016 # expanded by the inner sh
    setsid ip netns exec "$(tb_node_ns "$k")" unshare --uts -- \
        sh -c 'hostname "$1" && shift && exec "$@"' sh "$(tb_node_ns "$k")" \
        "$FABPERF" server --bind "$ip" --port "$port" --token-file "$STATE/token" --path-label "$path" --http \
        --allow-tune all --state-dir "$STATE/tune-state" \
        </dev/null >"$log" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$pidf"
    AGENT_PIDS+=("$pid:$k:$ip:$name:$port")
}

wait_agents() {
    local entry pid k ip name i port
    for entry in "${AGENT_PIDS[@]}"; do
        IFS=: read -r pid k ip name port <<<"$entry"
        for i in $(seq 1 100); do
            if ! pid_alive "$pid"; then
                local st=0
                wait "$pid" || st=$?
                die 1 "agent $name ($FABPERF server --bind $ip) exited at start with status $st: $(tail -n 5 "$STATE/logs/$name.log" | tr '\n' ' ')"
            fi
            if ip netns exec "$(tb_node_ns "$k")" ss -Htln "src $ip:$port" 2>/dev/null | grep -q .; then
                break
            fi
            ((i < 100)) || die 1 "agent $name does not listen on $ip:$port after 20 s; its log: $STATE/logs/$name.log"
            sleep 0.2
        done
    done
}

write_dns() {
    local k label path f=$STATE/dns/hosts
    mkdir -p "$STATE/dns"
    {
        echo "# fabperf testbed names (sim/testbed.sh), served by dnsmasq on $(tb_dns_ip)"
        echo "$(tb_dns_ip) dns.$TB_DOMAIN"
        for path in $TB_PATHS; do
            label=$(tb_path_label "$path")
            for ((k = 1; k <= NODES; k++)); do
                echo "$(tb_path_ip "$k" "$path") $label.agents.$TB_DOMAIN $(tb_node_ns "$k").$label.agents.$TB_DOMAIN"
            done
        done
        for ((k = 1; k <= NODES; k++)); do
            echo "$(node_ip "$k") $(tb_node_ns "$k").nodes.$TB_DOMAIN"
        done
        if [[ $SERVICE == 1 ]]; then
            echo "$(tb_service_ip) $TB_SERVICE_NAME.$TB_DOMAIN"
            for ((k = 1; k <= NODES; k++)); do
                echo "$(tb_node_service_ip "$k") $(tb_node_ns "$k").$TB_SERVICE_NAME.$TB_DOMAIN"
            done
        fi
    } >"$f"
    chmod 0644 "$f"
}

node_ip() { # K: the node address (default-route link)
    if [[ $NODE_IP_LINK == fabric ]]; then tb_fabric_ip "$1"; else tb_mgmt_ip "$1"; fi
}

start_dns() {
    local log=$STATE/logs/dnsmasq.log i
    : >"$log"
    chmod 0644 "$log"
    # No config file, no upstream, no /etc/hosts, no DHCP (no dhcp-range):
    # only the testbed's names, only on the testbed address.
    setsid ip netns exec "$TB_SWITCH_NS" dnsmasq --keep-in-foreground --conf-file=/dev/null \
        --no-resolv --no-poll --no-hosts --addn-hosts="$STATE/dns/hosts" \
        --bind-interfaces --listen-address="$(tb_dns_ip)" --except-interface=lo --port=53 \
        --local="/$TB_DOMAIN/" --domain-needed --bogus-priv --local-ttl=5 \
        --pid-file= --log-facility="$log" --log-queries \
        </dev/null >>"$STATE/logs/dnsmasq.stderr" 2>&1 9>&- &
    echo $! >"$STATE/pids/dnsmasq.pid"
    for i in $(seq 1 50); do
        pid_alive "$(cat "$STATE/pids/dnsmasq.pid")" ||
            die 1 "dnsmasq exited at start: $(cat "$STATE/logs/dnsmasq.stderr" "$log" | tail -n 5 | tr '\n' ' ')"
        if ip netns exec "$TB_SWITCH_NS" ss -Hluna "src $(tb_dns_ip):53" 2>/dev/null | grep -q .; then
            return 0
        fi
        sleep 0.1
    done
    die 1 "dnsmasq does not listen on $(tb_dns_ip):53 after 5 s; its log: $log"
}

shape_mgmt() { # NS DEV: the management link's rate on DEV's egress
    local burst
    burst=$(tb_tbf_burst "$MGMT_RATE")
    tc -n "$1" qdisc replace dev "$2" root handle 1: tbf rate "${MGMT_RATE}bit" burst "$burst" latency 20ms
}

shape_fabric() { # NS DEV: the fabric's port rate (up --fabric-rate) on DEV's egress, if any
    [[ -n $FABRIC_RATE ]] || return 0
    tc -n "$1" qdisc replace dev "$2" root handle 1: tbf rate "${FABRIC_RATE}bit" \
        burst "$(tb_tbf_burst "$FABRIC_RATE")" latency 20ms
}

build_node() { # K
    local k=$1 ns sw=$TB_SWITCH_NS
    ns=$(tb_node_ns "$k")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1
    # Management link: mgmt0 in the node, m-nodeK on br-mgmt, 1 Gbit/s each way.
    ip link add mgmt0 netns "$ns" type veth peer name "m-node$k" netns "$sw"
    ip -n "$ns" link set mgmt0 mtu "$TB_MGMT_MTU" up
    ip -n "$sw" link set "m-node$k" mtu "$TB_MGMT_MTU" master br-mgmt up
    ip -n "$ns" addr add "$(tb_mgmt_ip "$k")/$TB_NODE_PREFIXLEN" dev mgmt0
    shape_mgmt "$ns" mgmt0
    shape_mgmt "$sw" "m-node$k"
    # Fabric link: fab0 in the node, f-nodeK on br-fabric, MTU 9000, unshaped.
    ip link add fab0 netns "$ns" type veth peer name "f-node$k" netns "$sw"
    ip -n "$ns" link set fab0 mtu "$TB_FABRIC_MTU" up
    ip -n "$sw" link set "f-node$k" mtu "$TB_FABRIC_MTU" master br-fabric up
    ip -n "$ns" addr add "$(tb_fabric_ip "$k")/$TB_NODE_PREFIXLEN" dev fab0
    shape_fabric "$ns" fab0
    shape_fabric "$sw" "f-node$k"
    # Rails: railI in the node, rI-nodeK on br-railI, MTU 9000, unshaped.
    local r
    for ((r = 0; r < RAILS; r++)); do
        ip link add "rail$r" netns "$ns" type veth peer name "r$r-node$k" netns "$sw"
        ip -n "$ns" link set "rail$r" mtu "$TB_FABRIC_MTU" up
        ip -n "$sw" link set "r$r-node$k" mtu "$TB_FABRIC_MTU" master "br-rail$r" up
        ip -n "$ns" addr add "$(tb_rail_ip "$k" "$r")/$TB_PREFIXLEN" dev "rail$r"
    done
    # The default route decides the node address (kubelet without --node-ip).
    if [[ $NODE_IP_LINK == fabric ]]; then
        ip -n "$ns" route add default via "$(tb_fabric_gw)" dev fab0
    else
        ip -n "$ns" route add default via "$(tb_mgmt_gw)" dev mgmt0
    fi
    write_resolv_conf "$ns"
}

# resolv.conf for 'ip netns exec NS' (bound over /etc/resolv.conf).
write_resolv_conf() {
    mkdir -p "/etc/netns/$1"
    cat >"/etc/netns/$1/resolv.conf" <<EOF
# fabperf testbed (sim/testbed.sh); 'sim/testbed.sh down' removes this file
nameserver $(tb_dns_ip)
search agents.$TB_DOMAIN
options timeout:1 attempts:2
EOF
}

# vxlan0 over the chosen underlay with static peers (as flannel programs them):
# members are the nodes (K = 1..N, overlay address .K) and the switch (host
# number 254), where a controller can run with a leg in every network.
build_overlay() { # K | 254
    local k=$1 ns dev uip umtu j
    if ((k == TB_GW_HOST)); then
        ns=$TB_SWITCH_NS
        if [[ $OVERLAY_LINK == fabric ]]; then dev=br-fabric; else dev=br-mgmt; fi
    else
        ns=$(tb_node_ns "$k")
        if [[ $OVERLAY_LINK == fabric ]]; then dev=fab0; else dev=mgmt0; fi
    fi
    uip=${OV_UIP[k]}
    if [[ $OVERLAY_LINK == fabric ]]; then umtu=$TB_FABRIC_MTU; else umtu=$TB_MGMT_MTU; fi
    ip -n "$ns" link add vxlan0 type vxlan id "$TB_VXLAN_ID" dstport "$TB_VXLAN_PORT" \
        local "$uip" dev "$dev" nolearning || return 1
    ip -n "$ns" link set vxlan0 address "${OV_MAC[k]}" mtu $((umtu - TB_VXLAN_OVERHEAD)) up
    ip -n "$ns" addr add "${OV_IP[k]}/$TB_NODE_PREFIXLEN" dev vxlan0
    # Every other member's entries, from the tables (no process per entry:
    # the N x N entries of a 256-node overlay were most of 'up').
    local fdb=$STATE/batch/$ns.fdb neigh=$STATE/batch/$ns.neigh f="" n=""
    for j in "${!OV_IP[@]}"; do
        ((j == k)) && continue
        f+="fdb append 00:00:00:00:00:00 dev vxlan0 dst ${OV_UIP[j]}"$'\n'
        f+="fdb append ${OV_MAC[j]} dev vxlan0 dst ${OV_UIP[j]} self permanent"$'\n'
        n+="neigh replace ${OV_IP[j]} lladdr ${OV_MAC[j]} dev vxlan0 nud permanent"$'\n'
    done
    printf '%s' "$f" >"$fdb"
    printf '%s' "$n" >"$neigh"
    bridge -n "$ns" -batch "$fdb"
    ip -n "$ns" -batch "$neigh"
}

# The overlay members' underlay, MAC and overlay addresses by member number
# (nodes 1..N, then the switch), computed once for every build_overlay.
OV_UIP=() OV_MAC=() OV_IP=()
overlay_tables() {
    local j
    for j in $(seq 1 "$NODES") "$TB_GW_HOST"; do
        OV_UIP[j]=$(overlay_underlay_ip "$j")
        OV_MAC[j]=$(tb_overlay_mac "$j")
        OV_IP[j]=$(tb_overlay_ip "$j")
    done
}

# The service addresses in member K (a node, or 254: the switch), with the
# rules kube-proxy's iptables mode writes for a ClusterIP Service
# (pkg/proxy/iptables/proxier.go: OUTPUT jumps to a services chain; each
# service *port* — TCP and UDP apart — has its own chain, which picks an
# endpoint with 'statistic --mode random --probability 1/(n-i)' (no match
# for the last one, and none at all for a single endpoint), and each
# endpoint of each port its own chain that DNATs), loaded with
# iptables-restore:
# - the shared address (several endpoints: the other nodes' overlay agents,
#   as for a client pod on node K whose server pods run elsewhere), where
#   every TCP connection and every UDP flow picks its own endpoint;
# - one address per node J with J's overlay agent as its only endpoint.
# Conntrack keeps each connection and UDP flow on the endpoint its first
# packet chose. Routes send the service subnets out of vxlan0 with the
# overlay address as source, the address a pod would use.
build_service() { # K | 254
    local k=$1 ns f j i n proto eps=() chain sep
    if ((k == TB_GW_HOST)); then ns=$TB_SWITCH_NS; else ns=$(tb_node_ns "$k"); fi
    for ((j = 1; j <= NODES; j++)); do
        ((j == k)) || eps+=("$j")
    done
    n=${#eps[@]}
    f=$STATE/batch/$ns.nat
    {
        echo "*nat"
        echo ":FABPERF-SERVICES - [0:0]"
        for proto in tcp udp; do
            echo ":FABPERF-SVC-OVERLAY-${proto^^} - [0:0]"
            for j in "${eps[@]}"; do echo ":FABPERF-SEP-OVERLAY-N$j-${proto^^} - [0:0]"; done
            for ((j = 1; j <= NODES; j++)); do
                echo ":FABPERF-SVC-N$j-${proto^^} - [0:0]"
                echo ":FABPERF-SEP-N$j-${proto^^} - [0:0]"
            done
        done
        echo "-A OUTPUT -m comment --comment \"fabperf testbed service portals\" -j FABPERF-SERVICES"
        for proto in tcp udp; do
            chain=FABPERF-SVC-OVERLAY-${proto^^}
            echo "-A FABPERF-SERVICES -d $(tb_service_ip)/32 -p $proto -m comment --comment \"$TB_SERVICE_NAME:$proto cluster IP\" -m $proto --dport $TB_PORT -j $chain"
            i=0
            for j in "${eps[@]}"; do
                sep=FABPERF-SEP-OVERLAY-N$j-${proto^^}
                if ((i < n - 1)); then
                    echo "-A $chain -m statistic --mode random --probability ${SVC_PROB[n - i]} -j $sep"
                else
                    echo "-A $chain -j $sep"
                fi
                echo "-A $sep -p $proto -m comment --comment \"$TB_SERVICE_NAME:$proto -> ${NODE_NS[j]}\" -m $proto -j DNAT --to-destination ${OV_IP[j]}:$TB_PORT"
                i=$((i + 1))
            done
            for ((j = 1; j <= NODES; j++)); do
                chain=FABPERF-SVC-N$j-${proto^^}
                sep=FABPERF-SEP-N$j-${proto^^}
                echo "-A FABPERF-SERVICES -d ${SVC_IP[j]}/32 -p $proto -m comment --comment \"${NODE_NS[j]}.$TB_SERVICE_NAME:$proto cluster IP\" -m $proto --dport $TB_PORT -j $chain"
                echo "-A $chain -j $sep"
                echo "-A $sep -p $proto -m comment --comment \"${NODE_NS[j]}.$TB_SERVICE_NAME:$proto -> ${NODE_NS[j]}\" -m $proto -j DNAT --to-destination ${OV_IP[j]}:$TB_PORT"
            done
        done
        echo "COMMIT"
    } >"$f"
    ip netns exec "$ns" iptables-restore --noflush <"$f" || return 1
    ip -n "$ns" route add "$TB_SERVICE_NET.0/$TB_PREFIXLEN" dev vxlan0 src "${OV_IP[k]}"
    ip -n "$ns" route add "$TB_NODE_SERVICE_NET.0/$TB_PREFIXLEN" dev vxlan0 src "${OV_IP[k]}"
}

# What build_service writes for every member, computed once: the nodes'
# namespace names and service addresses, and kube-proxy's probabilities
# 1/m for m = 2..N (one awk each, not one per rule).
NODE_NS=() SVC_IP=() SVC_PROB=()
service_tables() {
    local j
    for ((j = 1; j <= NODES; j++)); do
        NODE_NS[j]=$(tb_node_ns "$j")
        SVC_IP[j]=$(tb_node_service_ip "$j")
        ((j < 2)) || SVC_PROB[j]=$(tb_probability "$j")
    done
}

overlay_underlay_ip() { # K | 254: the VXLAN endpoint address of a member
    if [[ $OVERLAY_LINK == fabric ]]; then tb_fabric_ip "$1"; else tb_mgmt_ip "$1"; fi
}

UP_DONE=0
on_up_exit() {
    local rc=$?
    if [[ $UP_DONE -ne 1 ]]; then
        ((rc != 0)) || rc=1
        log "up failed: removing the half-built testbed"
        local keep=$STATE.failed-logs
        rm -rf "$keep"
        if [[ -d $STATE/logs ]] && cp -a "$STATE/logs" "$keep" 2>/dev/null; then
            log "the logs of this attempt are kept in $keep"
        fi
        teardown || true
        log "removed; fix the error above and run 'sudo $PROG up' again"
    fi
    exit "$rc"
}

cmd_up() {
    NODES=$TB_DEFAULT_NODES
    NODE_IP_LINK=mgmt
    OVERLAY_CHOICE=auto
    MGMT_RATE=1000000000
    FABRIC_RATE=
    SERVICE=0
    RAILS=0
    local build=0
    while [[ $# -gt 0 ]]; do
        case $1 in
            --nodes | -n)
                [[ $# -ge 2 ]] || die 2 "--nodes needs a number"
                NODES=$(tb_parse_nodes "$2") || exit 2
                shift 2
                ;;
            --node-ip)
                [[ $# -ge 2 ]] || die 2 "--node-ip needs mgmt or fabric"
                NODE_IP_LINK=$(tb_parse_link "$2") || exit 2
                shift 2
                ;;
            --overlay-underlay)
                [[ $# -ge 2 ]] || die 2 "--overlay-underlay needs auto, mgmt or fabric"
                if [[ $2 == auto ]]; then OVERLAY_CHOICE=auto; else OVERLAY_CHOICE=$(tb_parse_link "$2") || exit 2; fi
                shift 2
                ;;
            --mgmt-rate)
                [[ $# -ge 2 ]] || die 2 "--mgmt-rate needs a rate such as 1gbit"
                MGMT_RATE=$(tb_parse_rate "$2") || exit 2
                shift 2
                ;;
            --fabric-rate)
                [[ $# -ge 2 ]] || die 2 "--fabric-rate needs a rate such as 100mbit"
                FABRIC_RATE=$(tb_parse_rate "$2") || exit 2
                shift 2
                ;;
            --service)
                SERVICE=1
                shift
                ;;
            --rails)
                [[ $# -ge 2 ]] || die 2 "--rails needs a number of rails (0..$TB_MAX_RAILS)"
                RAILS=$(tb_parse_rails "$2") || exit 2
                shift 2
                ;;
            --build)
                build=1
                shift
                ;;
            *) die 2 "up: unknown argument '$1' (see '$PROG --help')" ;;
        esac
    done
    if [[ $OVERLAY_CHOICE == auto ]]; then OVERLAY_LINK=$NODE_IP_LINK; else OVERLAY_LINK=$OVERLAY_CHOICE; fi
    tb_set_scale "$NODES"
    if ((RAILS > 0 && NODES > TB_NARROW_MAX)); then
        die 2 "up: --rails takes at most $TB_NARROW_MAX nodes (each rail is a /24); drop --rails or use fewer nodes"
    fi
    if ((SERVICE && NODES > TB_NARROW_MAX)); then
        die 2 "up: --service takes at most $TB_NARROW_MAX nodes (each node's service address is in $TB_NODE_SERVICE_NET.0/24); drop --service or use fewer nodes"
    fi

    need_root up
    need_tools ip tc bridge ss dnsmasq unshare setsid flock sysctl
    [[ $SERVICE == 0 ]] || need_tools iptables-restore
    if ! FABPERF=$(find_fabperf); then
        if [[ $build -eq 1 ]]; then
            need_tools cargo
            log "no fabperf binary found: building it (cargo build --release -p fabperf)"
            (cd "$REPO" && cargo build --release --locked -p fabperf) || die 1 "cargo build failed"
            FABPERF=$(find_fabperf) || die 1 "cargo build finished but no fabperf binary is in target/release"
        else
            die 1 "no fabperf binary: build one ('cargo build --release -p fabperf'), set FABPERF_BIN, or pass --build"
        fi
    fi
    take_lock
    if [[ -e $STATE/testbed.env ]]; then
        die 1 "a testbed is already up ($(state_get nodes) nodes); run 'sudo $PROG down' first"
    fi
    if [[ -n $(our_namespaces) ]]; then
        die 1 "leftovers of an earlier testbed exist ($(our_namespaces | tr '\n' ' ')); run 'sudo $PROG down' first"
    fi

    trap on_up_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if [[ -d $STATE ]] && ! state_dir_is_ours; then
        die 1 "$STATE holds files that are not a testbed's; point FABPERF_TESTBED_DIR at a new or empty directory"
    fi
    remove_state
    rm -rf "${STATE:?}.failed-logs"
    mkdir -p "$STATE"/{logs,pids,dns,batch,bin,degraded}
    chmod 0755 "$STATE" "$STATE/logs" "$STATE/dns"
    # The agents' shared secret: 32 random bytes, hex, readable by root only.
    (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$STATE/token" && echo >>"$STATE/token")
    ln -s "$FABPERF" "$STATE/bin/fabperf"

    log "building $NODES nodes (node address on $NODE_IP_LINK, overlay over $OVERLAY_LINK)"
    raise_neigh_limits
    local k sw=$TB_SWITCH_NS
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip netns exec "$sw" sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1
    ip -n "$sw" link add br-mgmt type bridge stp_state 0 mcast_snooping 0 ||
        die 1 "cannot create a bridge: the kernel needs bridge and veth support (modprobe bridge veth)"
    ip -n "$sw" link add br-fabric type bridge stp_state 0 mcast_snooping 0
    ip -n "$sw" link set br-mgmt mtu "$TB_MGMT_MTU" up
    ip -n "$sw" addr add "$(tb_mgmt_gw)/$TB_NODE_PREFIXLEN" dev br-mgmt
    ip -n "$sw" addr add "$(tb_fabric_gw)/$TB_NODE_PREFIXLEN" dev br-fabric
    for ((k = 0; k < RAILS; k++)); do
        ip -n "$sw" link add "br-rail$k" type bridge stp_state 0 mcast_snooping 0
    done
    write_resolv_conf "$sw"
    for ((k = 1; k <= NODES; k++)); do
        build_node "$k"
    done
    ip -n "$sw" link set br-fabric mtu "$TB_FABRIC_MTU" up
    for ((k = 0; k < RAILS; k++)); do
        ip -n "$sw" link set "br-rail$k" mtu "$TB_FABRIC_MTU" up
    done
    overlay_tables
    for k in $(seq 1 "$NODES") "$TB_GW_HOST"; do
        build_overlay "$k" || die 1 "cannot create the VXLAN overlay: the kernel needs vxlan support (modprobe vxlan)"
    done
    if [[ $SERVICE == 1 ]]; then
        service_tables
        for k in $(seq 1 "$NODES") "$TB_GW_HOST"; do
            build_service "$k" || die 1 "cannot install the service address's NAT rules: the kernel needs netfilter NAT (nf_nat, xt_statistic, xt_comment; iptables-nft also nf_tables)"
        done
    fi

    cat >"$STATE/testbed.env" <<EOF
nodes=$NODES
node_ip=$NODE_IP_LINK
overlay_underlay=$OVERLAY_LINK
overlay_mtu=$(( $([[ $OVERLAY_LINK == fabric ]] && echo "$TB_FABRIC_MTU" || echo "$TB_MGMT_MTU") - TB_VXLAN_OVERHEAD ))
mgmt_rate=$MGMT_RATE
fabric_rate=$FABRIC_RATE
service=$SERVICE
rails=$RAILS
fabperf=$FABPERF
EOF

    write_dns
    start_dns
    AGENT_PIDS=()
    local path
    for ((k = 1; k <= NODES; k++)); do
        for path in $TB_PATHS; do
            start_agent "$k" "$path"
        done
        ((RAILS == 0)) || start_agent "$k" rails
    done
    wait_agents
    UP_DONE=1
    trap - EXIT INT TERM
    log "up: $NODES nodes, $((NODES * 3)) agents on port $TB_PORT (fabperf and HTTP), DNS on $(tb_dns_ip)"
    ((RAILS == 0)) || log "rails: $RAILS per node (railI, $TB_RAIL_NET.(10+I).K); their agents on port $TB_RAILS_PORT, path \"rails\""
    [[ $SERVICE == 0 ]] || log "service addresses: $(tb_node_service_ip 1)-$NODES:$TB_PORT (${TB_NODE_PREFIX}K.$TB_SERVICE_NAME.$TB_DOMAIN) -> node K's overlay agent alone; $(tb_service_ip):$TB_PORT ($TB_SERVICE_NAME.$TB_DOMAIN) -> the other nodes' overlay agents, balanced per connection"
    log "token file for clients: $STATE/token"
    log "try: sudo $PROG exec ${TB_NODE_PREFIX}1 fabperf tcp-bw ${TB_NODE_PREFIX}2.fabric.agents.$TB_DOMAIN -t 3 --token-file $STATE/token"
}

# ------------------------------------------------------------------ status

cmd_status() {
    [[ $# -eq 0 ]] || die 2 "status takes no arguments"
    need_root status
    need_tools ip ss getent
    if [[ ! -f $STATE/testbed.env ]]; then
        local left
        left=$(our_namespaces | tr '\n' ' ')
        if [[ -n $left ]]; then
            echo "no testbed state in $STATE, but leftover namespaces: $left(run 'sudo $PROG down')"
        else
            echo "no testbed is up (start one with 'sudo $PROG up')"
        fi
        exit 3
    fi
    require_up
    local node_ip_link overlay_link bad=0 k path ip pid st ns
    node_ip_link=$(state_get node_ip)
    overlay_link=$(state_get overlay_underlay)
    echo "fabperf testbed: $NODES nodes; node address on $node_ip_link; overlay VXLAN $TB_VXLAN_ID over $overlay_link, MTU $(state_get overlay_mtu)"
    echo "management link shaped to $(tb_fmt_rate "$(state_get mgmt_rate)") each way; fabric MTU $TB_FABRIC_MTU $(
        if [[ -n $FABRIC_RATE ]]; then echo "shaped to $(tb_fmt_rate "$FABRIC_RATE") each way"; else echo unshaped; fi
    )"
    echo "state $STATE   token $STATE/token   fabperf $(state_get fabperf)"
    echo
    printf '%-10s %-16s %-16s %-16s %s\n' NODE "MGMT" "FABRIC" "OVERLAY" "FABRIC DEGRADED"
    for ((k = 1; k <= NODES; k++)); do
        ns=$(tb_node_ns "$k")
        local deg=-
        [[ -f $STATE/degraded/$ns ]] && deg=$(cat "$STATE/degraded/$ns")
        local m f
        m=$(tb_mgmt_ip "$k") f=$(tb_fabric_ip "$k")
        if [[ $node_ip_link == fabric ]]; then f="$f*"; else m="$m*"; fi
        printf '%-10s %-16s %-16s %-16s %s\n' "$ns" "$m" "$f" "$(tb_overlay_ip "$k")" "$deg"
        if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
            echo "  namespace $ns is missing"
            bad=1
        fi
    done
    printf '%-10s %-16s %-16s %-16s %s\n' "$TB_SWITCH_NS" "$(tb_mgmt_gw)" "$(tb_fabric_gw)" "$(tb_overlay_ip "$TB_GW_HOST")" \
        "(bridges, gateway, DNS; a controller can run here: exec switch)"
    echo "(* = node address: the default-route link)"
    if ((RAILS > 0)); then
        echo "rails: $RAILS per node, railI = $TB_RAIL_NET.(10+I).K on br-railI, MTU $TB_FABRIC_MTU"
        local f
        for f in "$STATE"/degraded/*-rail*; do
            [[ -f $f ]] && echo "  ${f##*/} degraded: $(cat "$f")"
        done
    fi
    echo
    printf '%-10s %-12s %-21s %-8s %s\n' NODE PATH ADDRESS PID STATE
    for ((k = 1; k <= NODES; k++)); do
        ns=$(tb_node_ns "$k")
        for path in $TB_PATHS; do
            ip=$(tb_path_ip "$k" "$path")
            pid=$(cat "$STATE/pids/$ns-$path.pid" 2>/dev/null || echo -)
            if pid_alive "$pid"; then
                if ip netns exec "$ns" ss -Htln "src $ip:$TB_PORT" 2>/dev/null | grep -q .; then
                    st="alive, listening"
                else
                    st="alive, NOT listening"
                    bad=1
                fi
            else
                st="DEAD (log: $STATE/logs/$ns-$path.log)"
                bad=1
            fi
            printf '%-10s %-12s %-21s %-8s %s\n' "$ns" "$path" "$ip:$TB_PORT" "$pid" "$st"
        done
        if ((RAILS > 0)); then
            pid=$(cat "$STATE/pids/$ns-rails.pid" 2>/dev/null || echo -)
            if pid_alive "$pid" && ip netns exec "$ns" ss -Htln "sport = :$TB_RAILS_PORT" 2>/dev/null | grep -q .; then
                st="alive, listening"
            else
                st="DEAD or not listening (log: $STATE/logs/$ns-rails.log)"
                bad=1
            fi
            printf '%-10s %-12s %-21s %-8s %s\n' "$ns" rails "0.0.0.0:$TB_RAILS_PORT" "$pid" "$st"
        fi
    done
    echo
    pid=$(cat "$STATE/pids/dnsmasq.pid" 2>/dev/null || echo -)
    if pid_alive "$pid"; then st=alive; else
        st="DEAD (log: $STATE/logs/dnsmasq.log)"
        bad=1
    fi
    echo "DNS: dnsmasq pid $pid $st on $(tb_dns_ip):53 in $TB_SWITCH_NS (nodes' resolv.conf: /etc/netns/${TB_NODE_PREFIX}K/resolv.conf)"
    local label n
    for path in $TB_PATHS; do
        label=$(tb_path_label "$path")
        n=$(ip netns exec "$(tb_node_ns 1)" getent ahostsv4 "$label.agents.$TB_DOMAIN" 2>/dev/null |
            awk '$2 == "STREAM" {print $1}' | sort -u | wc -l)
        printf '  %-32s %d A records (from %s)\n' "$label.agents.$TB_DOMAIN" "$n" "$(tb_node_ns 1)"
        ((n == NODES)) || bad=1
    done
    echo "  per node: ${TB_NODE_PREFIX}K.{mgmt,fabric,overlay}.agents.$TB_DOMAIN, ${TB_NODE_PREFIX}K.nodes.$TB_DOMAIN"
    if [[ $(state_get service) == 1 ]]; then
        n=$(ip netns exec "$(tb_node_ns 1)" getent ahostsv4 "$TB_SERVICE_NAME.$TB_DOMAIN" 2>/dev/null |
            awk '$2 == "STREAM" {print $1}' | sort -u | tr '\n' ' ')
        local eps
        eps=$(ip netns exec "$(tb_node_ns 1)" iptables -t nat -S FABPERF-SVC-OVERLAY-TCP 2>/dev/null | grep -c '^-A' || true)
        echo "service: $(tb_service_ip):$TB_PORT = $TB_SERVICE_NAME.$TB_DOMAIN (resolves to: ${n:-nothing}); $eps endpoints in ${TB_NODE_PREFIX}1 (the other nodes' overlay agents), balanced per connection"
        [[ $n == "$(tb_service_ip) " && $eps == $((NODES - 1)) ]] || bad=1
        local single=0 want k
        for ((k = 1; k <= NODES; k++)); do
            want=$(tb_node_service_ip "$k")
            n=$(ip netns exec "$(tb_node_ns 1)" getent ahostsv4 "$(tb_node_ns "$k").$TB_SERVICE_NAME.$TB_DOMAIN" 2>/dev/null |
                awk '$2 == "STREAM" {print $1}' | sort -u | tr '\n' ' ')
            eps=$(ip netns exec "$(tb_node_ns 1)" iptables -t nat -S "FABPERF-SVC-N$k-UDP" 2>/dev/null | grep -c '^-A' || true)
            if [[ $n == "$want " && $eps == 1 ]]; then single=$((single + 1)); else bad=1; fi
        done
        echo "  one service per node: $single of $NODES resolve to $TB_NODE_SERVICE_NET.K with one endpoint (${TB_NODE_PREFIX}K.$TB_SERVICE_NAME.$TB_DOMAIN)"
    fi
    return $bad
}

# ------------------------------------------------------------------ exec

cmd_exec() {
    [[ $# -ge 2 ]] || die 2 "exec needs a node and a command: $PROG exec ${TB_NODE_PREFIX}1 CMD [ARGS...]"
    need_root exec
    need_tools ip unshare
    require_up
    local node=$1
    shift
    export PATH="$STATE/bin:$PATH"
    export FABPERF_TESTBED_TOKEN="$STATE/token"
    export FABPERF_TESTBED_NODE
    if [[ $node == switch || $node == "$TB_SWITCH_NS" ]]; then
        FABPERF_TESTBED_NODE=$TB_SWITCH_NS
    else
        local k
        k=$(tb_parse_node "$node" "$NODES") || exit 2
        FABPERF_TESTBED_NODE=$(tb_node_ns "$k")
    fi
    # exec all the way down: the caller's pid for this command is CMD's own
    # (kill -9 on it hits CMD).
    # shellcheck disable=SC2016 # expanded by the inner sh
    exec ip netns exec "$FABPERF_TESTBED_NODE" unshare --uts -- \
        sh -c 'hostname "$1" && shift && exec "$@"' sh "$FABPERF_TESTBED_NODE" "$@"
}

# ------------------------------------------------------------------ degrade

cmd_degrade() {
    [[ $# -ge 1 ]] || die 2 "degrade needs a node: $PROG degrade ${TB_NODE_PREFIX}2 --rate 200mbit [--delay 1ms] [--loss 0.5] [--egress-only]"
    local node=$1 rate='' delay='' loss='' egress_only=0 rail=''
    shift
    while [[ $# -gt 0 ]]; do
        case $1 in
            --rail)
                [[ $# -ge 2 ]] || die 2 "--rail needs a rail number"
                [[ $2 =~ ^[0-9]{1,3}$ ]] || die 2 "--rail wants a rail number, got '$2'"
                rail=$2
                shift 2
                ;;
            --rate)
                [[ $# -ge 2 ]] || die 2 "--rate needs a value such as 200mbit"
                rate=$(tb_parse_rate "$2") || exit 2
                shift 2
                ;;
            --delay)
                [[ $# -ge 2 ]] || die 2 "--delay needs a value such as 2ms"
                delay=$(tb_parse_delay "$2") || exit 2
                shift 2
                ;;
            --loss)
                [[ $# -ge 2 ]] || die 2 "--loss needs a percentage such as 0.5"
                loss=$(tb_parse_loss "$2") || exit 2
                shift 2
                ;;
            --egress-only)
                egress_only=1
                shift
                ;;
            *) die 2 "degrade: unknown argument '$1' (give --rate, --delay and/or --loss, --egress-only, --rail I)" ;;
        esac
    done
    [[ -n $rate$delay$loss ]] || die 2 "degrade needs at least one of --rate R, --delay D, --loss P"
    need_root degrade
    need_tools ip tc flock
    require_up
    local k
    k=$(tb_parse_node "$node" "$NODES") || exit 2
    if [[ -n $rail ]]; then rail=$(tb_parse_rail "$rail" "$RAILS") || exit 2; fi
    take_lock
    local ns sw=$TB_SWITCH_NS dev peer what key
    ns=$(tb_node_ns "$k")
    link_of "$k" "$rail"
    # The node's end shapes what it transmits, the switch's end what it
    # receives; --egress-only leaves the switch's end unshaped.
    if [[ $egress_only -eq 1 ]]; then
        tc -n "$sw" qdisc del dev "$peer" root 2>/dev/null || true
    fi
    if ! degrade_dev "$ns" "$dev" "$rate" "$delay" "$loss" ||
        { [[ $egress_only -eq 0 ]] && ! degrade_dev "$sw" "$peer" "$rate" "$delay" "$loss"; }; then
        undegrade "$k" "$rail"
        die 1 "could not degrade $ns's $what (see above); it is now not degraded at all"
    fi
    local desc=() way="each way" both="both ways"
    if [[ $egress_only -eq 1 ]]; then
        way="on transmit"
        both="on transmit only"
    fi
    [[ -z $rate ]] || desc+=("rate $(tb_fmt_rate "$rate")")
    [[ -z $delay ]] || desc+=("delay ${delay}us $way")
    [[ -z $loss ]] || desc+=("loss $(tb_fmt_loss "$loss") $way")
    [[ $egress_only -eq 0 ]] || desc+=("(transmit only)")
    echo "${desc[*]}" >"$STATE/degraded/$key"
    log "$ns $what degraded $both: ${desc[*]} (undo: $PROG restore $ns${rail:+ --rail $rail})"
}

# NODE's fabric link is shaped on the egress of both veth ends:
#   tbf 1: (the rate; without --rate a 1 Tbit/s ceiling nothing here reaches;
#          its bucket is below 64 KiB, so tbf cuts segmentation-offload
#          super-packets into wire-size packets before its child sees them)
#    `- htb 10: (only with --delay/--loss)
#        |- 10:1 default: netem delay (--delay) or pfifo
#        `- 10:2 pfifo limit 0 (drops everything), chosen per packet with
#                probability P by a classic-BPF random classifier (--loss)
# so loss and delay act per packet in each direction, as on a real link.
degrade_dev() { # NS DEV RATE_BPS DELAY_US LOSS_PPM
    local ns=$1 dev=$2 rate=${3:-${FABRIC_RATE:-1000000000000}} delay=$4 loss=$5
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "${rate}bit" \
        burst "$TB_DEGRADE_BURST" latency 100ms || return 1
    [[ -n $delay || -n $loss ]] || return 0
    tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: htb default 1 || return 1
    tc -n "$ns" class add dev "$dev" parent 10: classid 10:1 htb rate 1tbit quantum 20000 || return 1
    if [[ -n $delay ]]; then
        if ! tc -n "$ns" qdisc add dev "$dev" parent 10:1 handle 11: netem delay "${delay}us" limit 100000; then
            log "--delay needs the kernel's netem qdisc (sch_netem, CONFIG_NET_SCH_NETEM), which this kernel lacks: try 'modprobe sch_netem', or degrade with --rate/--loss only"
            return 1
        fi
    fi
    if [[ -n $loss ]]; then
        tc -n "$ns" class add dev "$dev" parent 10: classid 10:2 htb rate 1tbit quantum 20000 || return 1
        tc -n "$ns" qdisc add dev "$dev" parent 10:2 handle 12: pfifo limit 0 || return 1
        if ! tc -n "$ns" filter add dev "$dev" parent 10: protocol all prio 1 \
            bpf bytecode "$(tb_loss_bytecode "$loss")" classid 10:2; then
            log "--loss needs the kernel's BPF classifier (cls_bpf, CONFIG_NET_CLS_BPF): try 'modprobe cls_bpf'"
            return 1
        fi
    fi
}

# link_of K [RAIL]: node K's fabric link (fab0), or its rail RAIL: sets dev
# (in the node), peer (in the switch), what (in words) and key (its file in
# $STATE/degraded).
link_of() {
    if [[ -n ${2:-} ]]; then
        dev=rail$2 peer=r$2-node$1 what="rail $2 (rail$2)" key=$(tb_node_ns "$1")-rail$2
    else
        dev=fab0 peer=f-node$1 what="fabric link" key=$(tb_node_ns "$1")
    fi
}

# undegrade K [RAIL]: both ends of node K's fabric link (or rail) back to as
# 'up' left them (the fabric link shaped to --fabric-rate, a rail unshaped).
undegrade() {
    local dev peer what key
    link_of "$1" "${2:-}"
    tc -n "$(tb_node_ns "$1")" qdisc del dev "$dev" root 2>/dev/null || true
    tc -n "$TB_SWITCH_NS" qdisc del dev "$peer" root 2>/dev/null || true
    if [[ -z ${2:-} ]]; then
        shape_fabric "$(tb_node_ns "$1")" fab0 || true
        shape_fabric "$TB_SWITCH_NS" "f-node$1" || true
    fi
    rm -f "$STATE/degraded/$key"
}

cmd_restore() {
    local rail=''
    if [[ $# -eq 3 && $2 == --rail ]]; then
        [[ $3 =~ ^[0-9]{1,3}$ ]] || die 2 "--rail wants a rail number, got '$3'"
        rail=$3
    elif [[ $# -gt 1 ]]; then
        die 2 "restore takes at most one node (and --rail I for a rail): $PROG restore ${TB_NODE_PREFIX}2 [--rail 1], or no node: everything"
    fi
    need_root restore
    need_tools ip tc flock
    require_up
    if [[ $# -eq 0 ]]; then
        take_lock
        restore_all
        return
    fi
    local k ns dev peer what key
    k=$(tb_parse_node "$1" "$NODES") || exit 2
    if [[ -n $rail ]]; then rail=$(tb_parse_rail "$rail" "$RAILS") || exit 2; fi
    take_lock
    ns=$(tb_node_ns "$k")
    if [[ -z $rail && -f $STATE/inject/nodes ]] && grep -qx "$ns" "$STATE/inject/nodes"; then
        die 1 "$ns carries injected faults ($STATE/inject/truth.json); 'sudo $PROG restore' without a node removes them all"
    fi
    link_of "$k" "$rail"
    local was
    was=$(cat "$STATE/degraded/$key" 2>/dev/null || true)
    undegrade "$k" "$rail"
    if [[ -n $was ]]; then
        log "$ns $what restored (was: $was)"
    else
        log "$ns $what was not degraded; nothing to restore"
    fi
}

# ------------------------------------------------------------------ inject

# A seeded generator, the same on every machine and bash version: an LCG
# modulo 2^31 (glibc's constants), its high bits used.
RNG=0
rng_next() { # MAX: sets R to a number in 0..MAX-1
    RNG=$(((RNG * 1103515245 + 12345) & 0x7fffffff))
    R=$(((RNG >> 7) % $1))
}

# The faults `inject` applies, each on one node's fabric link or on one link
# (a pair of nodes: only their traffic to each other):
#   rate     a node's link both ways (tbf, as degrade), a link's frames through
#            a fault line shaped the same way
#   delay    D each way: the frames through a fault line and the delay line
#            (sim/testbed/delayline.py; netem is not needed)
#   loss     P percent each way (cls_bpf random drop, as degrade)
#   tx-half  a node that drops half of what it transmits (its own end only)
# A fault line is a veth pair in the switch, fl-I (a bridge port that neither
# learns nor floods) and fr-I: tc on the switch ports' ingress redirects the
# faulted frames out of fl-I, through fl-I's qdiscs (rate, loss), to fr-I,
# where the delay line (delay) or a tc hairpin (otherwise) sends them back
# out of fr-I, so they enter the bridge through fl-I.

cmd_inject() {
    local seed='' faults='' kinds=$TB_FAULT_KINDS out='' factor=5 delay=1000 loss=50000
    while [[ $# -gt 0 ]]; do
        case $1 in
            --seed)
                [[ $# -ge 2 && $2 =~ ^[0-9]{1,9}$ ]] || die 2 "--seed needs a whole number from 0 to 999999999"
                seed=$((10#$2))
                shift 2
                ;;
            --faults)
                [[ $# -ge 2 && $2 =~ ^[0-9]{1,4}$ ]] && (($((10#$2)) >= 1)) || die 2 "--faults needs a whole number of faults, at least 1"
                faults=$((10#$2))
                shift 2
                ;;
            --kinds)
                [[ $# -ge 2 ]] || die 2 "--kinds needs a list such as rate,delay"
                kinds=$(tb_parse_kinds "$2") || exit 2
                shift 2
                ;;
            --out)
                [[ $# -ge 2 && -n $2 ]] || die 2 "--out needs a file name"
                out=$2
                shift 2
                ;;
            --rate-factor)
                [[ $# -ge 2 && $2 =~ ^[0-9]{1,4}$ ]] && (($((10#$2)) >= 2 && $((10#$2)) <= 1000)) ||
                    die 2 "--rate-factor needs a whole number from 2 to 1000 (the faulted link runs at 1/F of its rate)"
                factor=$((10#$2))
                shift 2
                ;;
            --delay)
                [[ $# -ge 2 ]] || die 2 "--delay needs a value such as 1ms"
                delay=$(tb_parse_delay "$2") || exit 2
                shift 2
                ;;
            --loss)
                [[ $# -ge 2 ]] || die 2 "--loss needs a percentage such as 5"
                loss=$(tb_parse_loss "$2") || exit 2
                shift 2
                ;;
            *) die 2 "inject: unknown argument '$1' (see '$PROG --help')" ;;
        esac
    done
    [[ -n $seed ]] || die 2 "inject needs --seed S (the same seed picks the same faults)"
    [[ -n $faults ]] || die 2 "inject needs --faults K (how many nodes or links to fault)"
    need_root inject
    need_tools ip tc bridge flock python3
    require_up
    ((2 * faults <= NODES)) || die 2 "--faults $faults needs up to $((2 * faults)) distinct nodes (a link takes two) and the testbed has $NODES; give at most $((NODES / 2))"
    if [[ -n $out ]]; then
        local od
        od=$(dirname -- "$out")
        [[ -d $od && -w $od ]] || die 1 "--out $out: the directory $od does not exist or is not writable"
    fi
    take_lock
    restore_all >/dev/null 2>&1
    local base=${FABRIC_RATE:-} frate
    if [[ -z $base ]]; then
        log "the fabric is unshaped (up without --fabric-rate): a rate fault shapes the link to 1/$factor of a veth's nominal 10gbit, which may not be below what the CPU moves on a healthy link"
        base=10000000000
    fi
    frate=$((base / factor))
    ((frate >= 8000)) || frate=8000

    # Pick: nodes in a seeded random order, kinds in turn from a seeded start,
    # a node or a link by a seeded coin (tx-half is a node's fault).
    RNG=$(((seed ^ 0x2545F491) & 0x7fffffff))
    local pool=() i j t kind_list
    for ((i = 1; i <= NODES; i++)); do pool+=("$i"); done
    for ((i = NODES - 1; i > 0; i--)); do
        rng_next $((i + 1))
        j=$R
        t=${pool[i]}
        pool[i]=${pool[j]}
        pool[j]=$t
    done
    read -r -a kind_list <<<"$kinds"
    rng_next ${#kind_list[@]}
    local off=$R next=0 kind target a b specs=()
    for ((i = 0; i < faults; i++)); do
        kind=${kind_list[$(((off + i) % ${#kind_list[@]}))]}
        rng_next 2
        if [[ $kind == tx-half || $R -eq 0 ]]; then
            target=node a=${pool[next]} b=0
            next=$((next + 1))
        else
            target=link a=${pool[next]} b=${pool[next + 1]}
            next=$((next + 2))
            if ((a > b)); then t=$a a=$b b=$t; fi
        fi
        specs+=("$kind:$target:$a:$b")
    done

    mkdir -p "$STATE/inject"
    local spec line=0 lines_delay=() steer=$STATE/batch/inject.tc json=() ns desc
    : >"$steer"
    : >"$STATE/inject/nodes"
    for spec in "${specs[@]}"; do
        IFS=: read -r kind target a b <<<"$spec"
        line=$((line + 1))
        local r='' d='' l='' egress_only=0
        case $kind in
            rate) r=$frate ;;
            delay) d=$delay ;;
            loss) l=$loss ;;
            tx-half) l=500000 egress_only=1 ;;
        esac
        if [[ $target == node && $kind != delay ]]; then
            ns=$(tb_node_ns "$a")
            degrade_dev "$ns" fab0 "$r" "" "$l" || die_inject "$kind on $ns"
            if ((egress_only == 0)); then
                degrade_dev "$TB_SWITCH_NS" "f-node$a" "$r" "" "$l" || die_inject "$kind on $ns"
            fi
        else
            fault_line "$line" "$r" "$d" "$l" || die_inject "$kind on fault line $line"
            [[ -z $d ]] || lines_delay+=("fr-$line:$d")
            if [[ $target == node ]]; then
                steer_node "$line" "$a" >>"$steer"
            else
                steer_link "$line" "$a" "$b" >>"$steer"
            fi
        fi
        desc="injected $kind"
        case $kind in
            rate) desc+=" $(tb_fmt_rate "$r") (1/$factor) each way" ;;
            delay) desc+=" ${d}us each way" ;;
            loss) desc+=" $(tb_fmt_loss "$l") each way" ;;
            tx-half) desc+=" (loss 50% on transmit only)" ;;
        esac
        if [[ $target == node ]]; then
            echo "$desc" >"$STATE/degraded/$(tb_node_ns "$a")"
            echo "$(tb_node_ns "$a")" >>"$STATE/inject/nodes"
            json+=("$(printf '{"kind": "%s", "target": "node", "node": "%s"%s}' "$kind" "$(tb_node_ns "$a")" "$(inject_json_params "$kind" "$r" "$d" "$l")")")
        else
            echo "$desc on the link to $(tb_node_ns "$b")" >"$STATE/degraded/$(tb_node_ns "$a")"
            echo "$desc on the link to $(tb_node_ns "$a")" >"$STATE/degraded/$(tb_node_ns "$b")"
            printf '%s\n%s\n' "$(tb_node_ns "$a")" "$(tb_node_ns "$b")" >>"$STATE/inject/nodes"
            json+=("$(printf '{"kind": "%s", "target": "link", "link": ["%s", "%s"]%s}' "$kind" "$(tb_node_ns "$a")" "$(tb_node_ns "$b")" "$(inject_json_params "$kind" "$r" "$d" "$l")")")
        fi
    done
    if [[ -s $steer ]]; then
        tc -n "$TB_SWITCH_NS" -batch "$steer" || die_inject "the steering filters"
    fi
    if [[ ${#lines_delay[@]} -gt 0 ]]; then
        start_delayline "${lines_delay[@]}" || die_inject "the delay line"
    fi
    local truth=$STATE/inject/truth.json
    {
        printf '{\n  "seed": %d,\n  "nodes": %d,\n  "fabric_rate_bps": %s,\n  "kinds": [%s],\n  "faults": [\n' \
            "$seed" "$NODES" "${FABRIC_RATE:-null}" "$(printf '"%s", ' $kinds | sed 's/, $//')"
        local n=${#json[@]}
        for ((i = 0; i < n; i++)); do
            printf '    %s%s\n' "${json[i]}" "$([[ $((i + 1)) -lt $n ]] && echo ,)"
        done
        printf '  ]\n}\n'
    } >"$truth"
    chmod 0644 "$truth"
    if [[ -n $out ]]; then
        cp -- "$truth" "$out.tmp.$$" && mv -f -- "$out.tmp.$$" "$out" || die 1 "cannot write $out (the faults stay applied; 'sudo $PROG restore' removes them)"
    fi
    for spec in "${specs[@]}"; do
        IFS=: read -r kind target a b <<<"$spec"
        if [[ $target == node ]]; then
            log "fault: $kind on node $(tb_node_ns "$a")"
        else
            log "fault: $kind on link $(tb_node_ns "$a") - $(tb_node_ns "$b")"
        fi
    done
    log "$faults fault(s) injected (seed $seed); truth in $truth${out:+ and $out}; undo: sudo $PROG restore"
}

die_inject() {
    log "could not inject $1 (see above): removing every injected fault"
    restore_all >/dev/null 2>&1 || true
    die 1 "inject failed; the testbed has no injected fault"
}

inject_json_params() { # KIND RATE DELAY LOSS
    case $1 in
        rate) printf ', "rate_bps": %d' "$2" ;;
        delay) printf ', "delay_us": %d' "$3" ;;
        loss) printf ', "loss_pct": %s' "$(tb_fmt_loss "$4" | tr -d %)" ;;
        tx-half) printf ', "loss_pct": 50, "transmit_only": true' ;;
    esac
}

# fault_line I RATE DELAY LOSS: the veth pair fl-I (bridge port) / fr-I, with
# the rate or loss on fl-I's egress and, without a delay, a hairpin on fr-I.
fault_line() {
    local i=$1 r=$2 d=$3 l=$4 sw=$TB_SWITCH_NS
    ip -n "$sw" link add "fl-$i" mtu "$TB_FABRIC_MTU" type veth peer name "fr-$i" mtu "$TB_FABRIC_MTU" || return 1
    ip -n "$sw" link set "fl-$i" master br-fabric up || return 1
    bridge -n "$sw" link set dev "fl-$i" learning off flood off mcast_flood off bcast_flood off || return 1
    ip -n "$sw" link set "fr-$i" up || return 1
    if [[ -n $r$l ]]; then
        degrade_dev "$sw" "fl-$i" "$r" "" "$l" || return 1
    fi
    if [[ -z $d ]]; then
        tc -n "$sw" qdisc add dev "fr-$i" clsact || return 1
        tc -n "$sw" filter add dev "fr-$i" ingress protocol all prio 1 u32 match u32 0 0 \
            action mirred egress redirect dev "fr-$i" || return 1
    fi
}

# Steering (tc -batch lines for the switch): into fault line I, on the
# switch ports' ingress (frames a node sent).
steer_node() { # I K: everything node K sends, and everything sent to it
    local i=$1 k=$2 j
    for ((j = 1; j <= NODES; j++)); do
        echo "qdisc replace dev f-node$j clsact"
        if ((j == k)); then
            echo "filter add dev f-node$j ingress protocol ip prio $i u32 match u32 0 0 action mirred egress redirect dev fl-$i"
        else
            echo "filter add dev f-node$j ingress protocol ip prio $i u32 match ip dst $(tb_fabric_ip "$k")/32 action mirred egress redirect dev fl-$i"
        fi
    done
}
steer_link() { # I A B: what A sends to B and B to A
    local i=$1 a=$2 b=$3
    echo "qdisc replace dev f-node$a clsact"
    echo "filter add dev f-node$a ingress protocol ip prio $i u32 match ip dst $(tb_fabric_ip "$b")/32 action mirred egress redirect dev fl-$i"
    echo "qdisc replace dev f-node$b clsact"
    echo "filter add dev f-node$b ingress protocol ip prio $i u32 match ip dst $(tb_fabric_ip "$a")/32 action mirred egress redirect dev fl-$i"
}

start_delayline() { # fr-I:US ...
    local log=$STATE/logs/delayline.log i
    setsid ip netns exec "$TB_SWITCH_NS" python3 "$SIM_DIR/testbed/delayline.py" "$@" \
        </dev/null >"$log" 2>&1 9>&- &
    echo $! >"$STATE/pids/delayline.pid"
    for i in $(seq 1 100); do
        grep -q '^ready$' "$log" 2>/dev/null && return 0
        pid_alive "$(cat "$STATE/pids/delayline.pid")" || {
            log "the delay line exited: $(tail -n 3 "$log" | tr '\n' ' ')"
            return 1
        }
        sleep 0.1
    done
    log "the delay line is not ready after 10 s; its log: $log"
    return 1
}

# Every injected fault and every degraded node back to as 'up' left them.
restore_all() {
    local sw=$TB_SWITCH_NS pid dev f k n=0
    pid=$(cat "$STATE/pids/delayline.pid" 2>/dev/null || true)
    if pid_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/pids/delayline.pid"
    for dev in $(ip -n "$sw" -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^fl-[0-9]+$'); do
        ip -n "$sw" link del "$dev" 2>/dev/null || true
    done
    if [[ -d $STATE/inject ]]; then
        for ((k = 1; k <= NODES; k++)); do
            echo "qdisc del dev f-node$k clsact"
        done >"$STATE/batch/restore.tc"
        tc -n "$sw" -force -batch "$STATE/batch/restore.tc" 2>/dev/null || true
    fi
    for f in "$STATE"/degraded/*; do
        [[ -f $f ]] || continue
        k=${f##*/}
        k=${k#"$TB_NODE_PREFIX"}
        if [[ $k =~ ^([0-9]+)-rail([0-9]+)$ ]]; then
            undegrade "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
        elif [[ $k =~ ^[0-9]+$ ]]; then
            undegrade "$k"
        else
            continue
        fi
        n=$((n + 1))
    done
    rm -rf "${STATE:?}/inject"
    log "restored: no injected fault, no degraded link ($n node(s) were)"
}

# ------------------------------------------------------------------ main

[[ $# -ge 1 ]] || {
    usage >&2
    exit 2
}
cmd=$1
shift
case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    exec) cmd_exec "$@" ;;
    degrade) cmd_degrade "$@" ;;
    restore) cmd_restore "$@" ;;
    inject) cmd_inject "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        die 2 "unknown command '$cmd'"
        ;;
esac
