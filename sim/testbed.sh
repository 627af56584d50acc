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
     [--mgmt-rate R] [--service] [--rails R] [--build]
        Build the testbed: N nodes (default $TB_DEFAULT_NODES, $TB_MIN_NODES..$TB_MAX_NODES), namespaces
        ${TB_NODE_PREFIX}1..${TB_NODE_PREFIX}N and $TB_SWITCH_NS (the two bridges, gateway, DNS).
        --node-ip      link of the default route, so of the address a default
                       kubelet advertises (default mgmt)
        --overlay-underlay
                       link the VXLAN overlay runs over: auto (default) = the
                       node address's link, as CNIs choose it; mgmt or fabric
                       pins it, as a CNI with an interface setting does
        --mgmt-rate    shaping of the management link (default 1gbit)
        --service      service addresses, DNAT'd in every node as kube-proxy's
                       iptables mode does (needs iptables), TCP and UDP:
                       $(tb_node_service_ip 1)..N ($(tb_node_ns 1).$TB_SERVICE_NAME.$TB_DOMAIN, ...), each with
                       one node's overlay agent as its only endpoint, and
                       $(tb_service_ip):$TB_PORT ($TB_SERVICE_NAME.$TB_DOMAIN) in front of the
                       other nodes' overlay agents, balanced per connection
        --rails R      R more fabric links per node (0..$TB_MAX_RAILS, default 0): rail I is
                       railI in the node, on its own bridge br-railI, address
                       $TB_RAIL_NET.(10+I).K; one more agent per node
                       (path "rails") serves all its rails on every address,
                       port $TB_RAILS_PORT (docs/rails.md)
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
  restore NODE [--rail I]
        Remove what degrade applied (to rail I).

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
    remove_state
}

# True when every entry of $STATE is one that 'up' creates (or it is empty).
state_dir_is_ours() {
    local e
    for e in "$STATE"/* "$STATE"/.[!.]*; do
        [[ -e $e || -L $e ]] || continue
        case ${e##*/} in
            logs | pids | dns | batch | bin | degraded | tune-state | token | testbed.env) ;;
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
    rm -rf "${STATE:?}"/{logs,pids,dns,batch,bin,degraded,tune-state}
    rm -f "$STATE/token" "$STATE/testbed.env"
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
    ip -n "$ns" addr add "$(tb_mgmt_ip "$k")/$TB_PREFIXLEN" dev mgmt0
    shape_mgmt "$ns" mgmt0
    shape_mgmt "$sw" "m-node$k"
    # Fabric link: fab0 in the node, f-nodeK on br-fabric, MTU 9000, unshaped.
    ip link add fab0 netns "$ns" type veth peer name "f-node$k" netns "$sw"
    ip -n "$ns" link set fab0 mtu "$TB_FABRIC_MTU" up
    ip -n "$sw" link set "f-node$k" mtu "$TB_FABRIC_MTU" master br-fabric up
    ip -n "$ns" addr add "$(tb_fabric_ip "$k")/$TB_PREFIXLEN" dev fab0
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
    local k=$1 ns dev uip umtu j pip
    if ((k == TB_GW_HOST)); then
        ns=$TB_SWITCH_NS
        if [[ $OVERLAY_LINK == fabric ]]; then dev=br-fabric; else dev=br-mgmt; fi
    else
        ns=$(tb_node_ns "$k")
        if [[ $OVERLAY_LINK == fabric ]]; then dev=fab0; else dev=mgmt0; fi
    fi
    uip=$(overlay_underlay_ip "$k")
    if [[ $OVERLAY_LINK == fabric ]]; then umtu=$TB_FABRIC_MTU; else umtu=$TB_MGMT_MTU; fi
    ip -n "$ns" link add vxlan0 type vxlan id "$TB_VXLAN_ID" dstport "$TB_VXLAN_PORT" \
        local "$uip" dev "$dev" nolearning || return 1
    ip -n "$ns" link set vxlan0 address "$(tb_overlay_mac "$k")" mtu $((umtu - TB_VXLAN_OVERHEAD)) up
    ip -n "$ns" addr add "$(tb_overlay_ip "$k")/$TB_PREFIXLEN" dev vxlan0
    local fdb=$STATE/batch/$ns.fdb neigh=$STATE/batch/$ns.neigh
    : >"$fdb"
    : >"$neigh"
    for j in $(seq 1 "$NODES") "$TB_GW_HOST"; do
        ((j == k)) && continue
        pip=$(overlay_underlay_ip "$j")
        echo "fdb append 00:00:00:00:00:00 dev vxlan0 dst $pip" >>"$fdb"
        echo "fdb append $(tb_overlay_mac "$j") dev vxlan0 dst $pip self permanent" >>"$fdb"
        echo "neigh replace $(tb_overlay_ip "$j") lladdr $(tb_overlay_mac "$j") dev vxlan0 nud permanent" >>"$neigh"
    done
    bridge -n "$ns" -batch "$fdb"
    ip -n "$ns" -batch "$neigh"
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
                    echo "-A $chain -m statistic --mode random --probability $(tb_probability $((n - i))) -j $sep"
                else
                    echo "-A $chain -j $sep"
                fi
                echo "-A $sep -p $proto -m comment --comment \"$TB_SERVICE_NAME:$proto -> $(tb_node_ns "$j")\" -m $proto -j DNAT --to-destination $(tb_overlay_ip "$j"):$TB_PORT"
                i=$((i + 1))
            done
            for ((j = 1; j <= NODES; j++)); do
                chain=FABPERF-SVC-N$j-${proto^^}
                sep=FABPERF-SEP-N$j-${proto^^}
                echo "-A FABPERF-SERVICES -d $(tb_node_service_ip "$j")/32 -p $proto -m comment --comment \"$(tb_node_ns "$j").$TB_SERVICE_NAME:$proto cluster IP\" -m $proto --dport $TB_PORT -j $chain"
                echo "-A $chain -j $sep"
                echo "-A $sep -p $proto -m comment --comment \"$(tb_node_ns "$j").$TB_SERVICE_NAME:$proto -> $(tb_node_ns "$j")\" -m $proto -j DNAT --to-destination $(tb_overlay_ip "$j"):$TB_PORT"
            done
        done
        echo "COMMIT"
    } >"$f"
    ip netns exec "$ns" iptables-restore --noflush <"$f" || return 1
    ip -n "$ns" route add "$TB_SERVICE_NET.0/$TB_PREFIXLEN" dev vxlan0 src "$(tb_overlay_ip "$k")"
    ip -n "$ns" route add "$TB_NODE_SERVICE_NET.0/$TB_PREFIXLEN" dev vxlan0 src "$(tb_overlay_ip "$k")"
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
    local k sw=$TB_SWITCH_NS
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    ip netns exec "$sw" sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1
    ip -n "$sw" link add br-mgmt type bridge stp_state 0 mcast_snooping 0 ||
        die 1 "cannot create a bridge: the kernel needs bridge and veth support (modprobe bridge veth)"
    ip -n "$sw" link add br-fabric type bridge stp_state 0 mcast_snooping 0
    ip -n "$sw" link set br-mgmt mtu "$TB_MGMT_MTU" up
    ip -n "$sw" addr add "$(tb_mgmt_gw)/$TB_PREFIXLEN" dev br-mgmt
    ip -n "$sw" addr add "$(tb_fabric_gw)/$TB_PREFIXLEN" dev br-fabric
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
    for k in $(seq 1 "$NODES") "$TB_GW_HOST"; do
        build_overlay "$k" || die 1 "cannot create the VXLAN overlay: the kernel needs vxlan support (modprobe vxlan)"
    done
    if [[ $SERVICE == 1 ]]; then
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
    echo "management link shaped to $(tb_fmt_rate "$(state_get mgmt_rate)") each way; fabric MTU $TB_FABRIC_MTU unshaped"
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
    local ns=$1 dev=$2 rate=${3:-1000000000000} delay=$4 loss=$5
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

undegrade() { # K [RAIL]: both ends of node K's fabric link (or rail) back to no qdisc
    local dev peer what key
    link_of "$1" "${2:-}"
    tc -n "$(tb_node_ns "$1")" qdisc del dev "$dev" root 2>/dev/null || true
    tc -n "$TB_SWITCH_NS" qdisc del dev "$peer" root 2>/dev/null || true
    rm -f "$STATE/degraded/$key"
}

cmd_restore() {
    local rail=''
    if [[ $# -eq 3 && $2 == --rail ]]; then
        [[ $3 =~ ^[0-9]{1,3}$ ]] || die 2 "--rail wants a rail number, got '$3'"
        rail=$3
    elif [[ $# -ne 1 ]]; then
        die 2 "restore needs exactly one node (and --rail I for a rail): $PROG restore ${TB_NODE_PREFIX}2 [--rail 1]"
    fi
    need_root restore
    need_tools ip tc flock
    require_up
    local k ns dev peer what key
    k=$(tb_parse_node "$1" "$NODES") || exit 2
    if [[ -n $rail ]]; then rail=$(tb_parse_rail "$rail" "$RAILS") || exit 2; fi
    take_lock
    ns=$(tb_node_ns "$k")
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
    -h | --help | help) usage ;;
    *)
        usage >&2
        die 2 "unknown command '$cmd'"
        ;;
esac
