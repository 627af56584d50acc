# shellcheck shell=bash disable=SC2034 # the constants are used by the sourcing scripts
# Naming, addressing and input parsing for sim/testbed.sh. Sourced, never run.
# Pure functions (no root, no side effects) so sim/testbed-test.sh can test them
# with bad and hostile input before it builds anything.

# Everything the testbed creates carries this prefix: network namespaces
# fp-node1..fp-nodeN and fp-switch, /etc/netns/fp-node*/ (resolv.conf).
# Interface names live inside those namespaces only, so they cannot collide
# with the host's.
TB_NODE_PREFIX=fp-node
TB_SWITCH_NS=fp-switch
TB_MIN_NODES=2
TB_MAX_NODES=1021 # the hosts of a /22 minus the switch; a bridge takes 1024 ports
TB_NARROW_MAX=253 # up to this many nodes each network is a /24 (below)
TB_DEFAULT_NODES=4
TB_PORT=5301
TB_VXLAN_ID=4242
TB_VXLAN_PORT=4789
TB_VXLAN_OVERHEAD=50 # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
TB_MGMT_MTU=1500
TB_FABRIC_MTU=9000
TB_DEGRADE_BURST=20000 # bytes: above two 9000-byte frames, below a 64 KiB GSO packet
TB_DOMAIN=fabperf.test # RFC 6761 reserves .test: it never leaves this machine
TB_PATHS="host-mgmt host-fabric overlay"
TB_FAULT_KINDS="rate delay loss tx-half" # what 'inject' can apply

# Subnets, all inside 198.18.0.0/15 (RFC 2544, benchmarking): nothing on a real
# network uses them, and no route leads out of the testbed. Up to
# TB_NARROW_MAX nodes each network is a /24 (node K is .K, the switch .254);
# above, each is a /22 in 198.19.0.0/16 (node K is the K-th address, the
# switch the last host, .3.254): tb_set_scale N picks one.
TB_MGMT_NET=198.18.0
TB_FABRIC_NET=198.18.1
TB_OVERLAY_NET=198.18.2
TB_WIDE_BASE=198.19 # 198.19.0.0/22 mgmt, 198.19.4.0/22 fabric, 198.19.8.0/22 overlay
# The service addresses (up --service): virtual IPs no interface holds, which
# each member DNATs to overlay agents the way kube-proxy's iptables mode does
# for a ClusterIP Service. One per node with that node's overlay agent as its
# only endpoint (198.18.4.K, fp-nodeK.overlay.svc.fabperf.test: what
# `fabperf k8s render` writes for the service path), and one shared address
# in front of several agents, balanced per connection (198.18.3.1,
# overlay.svc.fabperf.test: the pitfall).
TB_SERVICE_NET=198.18.3
TB_SERVICE_HOST=1
TB_SERVICE_NAME=overlay.svc # <name>.fabperf.test
TB_NODE_SERVICE_NET=198.18.4 # a /24: up --service takes at most TB_NARROW_MAX nodes
TB_PREFIXLEN=24 # the service subnets'
# Set by tb_set_scale: the node networks' prefix length and the switch's host
# number on them (default gateway, DNS on mgmt; also its overlay member number).
TB_GW_HOST=254
TB_NODE_PREFIXLEN=24
TB_WIDE=0
# Rails (up --rails R, at most TB_NARROW_MAX nodes): rail I is railI in each
# node, on its own bridge br-railI, subnet 198.18.(10+I).0/24; one agent per
# node serves them all on TB_RAILS_PORT (every address of the node).
TB_MAX_RAILS=8
TB_RAIL_NET=198.18 # third octet 10 + rail number (10..17)
TB_RAILS_PORT=5302

# tb_set_scale N: the addressing for an N-node testbed (sourcing scripts call
# it before asking for an address when N may exceed TB_NARROW_MAX).
tb_set_scale() {
    if (($1 > TB_NARROW_MAX)); then
        TB_WIDE=1 TB_GW_HOST=1022 TB_NODE_PREFIXLEN=22
    else
        TB_WIDE=0 TB_GW_HOST=254 TB_NODE_PREFIXLEN=24
    fi
}
# tb_net_ip NET HOST: host number HOST of network NET (0 mgmt, 1 fabric, 2 overlay).
tb_net_ip() {
    if ((TB_WIDE)); then
        printf '%s.%d.%d' "$TB_WIDE_BASE" $((4 * $1 + $2 / 256)) $(($2 % 256))
    else
        case $1 in
            0) printf '%s.%d' "$TB_MGMT_NET" "$2" ;;
            1) printf '%s.%d' "$TB_FABRIC_NET" "$2" ;;
            2) printf '%s.%d' "$TB_OVERLAY_NET" "$2" ;;
        esac
    fi
}
tb_mgmt_ip() { tb_net_ip 0 "$1"; }
tb_fabric_ip() { tb_net_ip 1 "$1"; }
tb_overlay_ip() { tb_net_ip 2 "$1"; }
tb_mgmt_gw() { tb_net_ip 0 "$TB_GW_HOST"; }
tb_fabric_gw() { tb_net_ip 1 "$TB_GW_HOST"; }
tb_dns_ip() { tb_mgmt_gw; }
tb_service_ip() { printf '%s.%d' "$TB_SERVICE_NET" "$TB_SERVICE_HOST"; }
# Node K's own service address (its overlay agent the only endpoint).
tb_node_service_ip() { printf '%s.%d' "$TB_NODE_SERVICE_NET" "$1"; }
# kube-proxy's per-endpoint probability: 1/N with ten decimals (the i-th of
# N endpoints gets 1/(N-i) of what the rules before it left).
tb_probability() { awk -v n="$1" 'BEGIN { printf "%0.10f", 1 / n }'; }
tb_rail_ip() { printf '%s.%d.%d' "$TB_RAIL_NET" $((10 + $2)) "$1"; } # K RAIL
tb_node_ns() { printf '%s%d' "$TB_NODE_PREFIX" "$1"; }
# Deterministic MAC of node K's VXLAN device (locally administered, unicast).
tb_overlay_mac() { printf '02:fb:02:00:%02x:%02x' $(($1 / 256)) $(($1 % 256)); }

# Address of node K on a path (host-mgmt | host-fabric | overlay).
tb_path_ip() {
    case $2 in
        host-mgmt) tb_mgmt_ip "$1" ;;
        host-fabric) tb_fabric_ip "$1" ;;
        overlay) tb_overlay_ip "$1" ;;
        *) return 1 ;;
    esac
}
# DNS label of a path: <label>.agents.fabperf.test
tb_path_label() {
    case $1 in
        host-mgmt) echo mgmt ;;
        host-fabric) echo fabric ;;
        overlay) echo overlay ;;
        *) return 1 ;;
    esac
}

# Each parser prints the normalised value on success; on bad input it prints
# one line saying what is wrong and what is accepted, to stderr, and returns 1.

# Node count: a decimal integer in TB_MIN_NODES..TB_MAX_NODES.
tb_parse_nodes() {
    local v=$1
    if [[ ! $v =~ ^[0-9]{1,6}$ ]]; then
        echo "--nodes wants a whole number from $TB_MIN_NODES to $TB_MAX_NODES, got '$v'" >&2
        return 1
    fi
    v=$((10#$v))
    if ((v < TB_MIN_NODES || v > TB_MAX_NODES)); then
        echo "--nodes $v is out of range: the testbed has $TB_MIN_NODES to $TB_MAX_NODES nodes (the hosts of a /22 per network but the switch's; three agents per node)" >&2
        return 1
    fi
    echo "$v"
}

# A node given as fp-nodeK, nodeK or K, with 1 <= K <= N: prints K.
tb_parse_node() {
    local v=$1 n=$2 k
    if [[ $v =~ ^(${TB_NODE_PREFIX}|node)?([0-9]{1,6})$ ]]; then
        k=$((10#${BASH_REMATCH[2]}))
        if ((k >= 1 && k <= n)); then
            echo "$k"
            return 0
        fi
        echo "no node '$v' in this testbed: it has ${TB_NODE_PREFIX}1 to ${TB_NODE_PREFIX}$n" >&2
        return 1
    fi
    echo "'$v' is not a node: name one as ${TB_NODE_PREFIX}K, nodeK or K (1 to $n)" >&2
    return 1
}

# Rails count for up --rails: 0 (none) to TB_MAX_RAILS.
tb_parse_rails() {
    local v=$1
    if [[ $v =~ ^[0-9]{1,3}$ ]] && ((10#$v <= TB_MAX_RAILS)); then
        echo $((10#$v))
        return 0
    fi
    echo "--rails wants a whole number from 0 to $TB_MAX_RAILS (fabric links per node besides fab0), got '$v'" >&2
    return 1
}

# A rail of this testbed for degrade/restore --rail: 0 to R-1.
tb_parse_rail() {
    local v=$1 r=$2
    if [[ $v =~ ^[0-9]{1,3}$ ]]; then
        if ((10#$v < r)); then
            echo $((10#$v))
            return 0
        fi
        if ((r == 0)); then
            echo "this testbed has no rails (bring it up with 'up --rails R')" >&2
        else
            echo "no rail $v in this testbed: it has rails 0 to $((r - 1))" >&2
        fi
        return 1
    fi
    echo "--rail wants a rail number (0 to $((r > 0 ? r - 1 : 0))), got '$v'" >&2
    return 1
}

# A rate in bits per second: NUMBER[UNIT], UNIT one of bit kbit mbit gbit tbit
# (case-insensitive; k m g t alone mean the same, and a bare number is bit/s).
# Prints whole bits per second. Accepts 8 kbit/s to 1 Tbit/s.
tb_parse_rate() {
    local v=$1 num unit mult lc
    lc=$(printf '%s' "$v" | tr '[:upper:]' '[:lower:]')
    if [[ ! $lc =~ ^([0-9]{1,9})(\.([0-9]{1,6}))?(bit|kbit|mbit|gbit|tbit|k|m|g|t)?$ ]]; then
        echo "rate '$v' is not NUMBER[UNIT] with UNIT bit|kbit|mbit|gbit|tbit (bits per second, e.g. 100mbit, 2.5gbit)" >&2
        return 1
    fi
    num=${BASH_REMATCH[1]}
    local frac=${BASH_REMATCH[3]}
    unit=${BASH_REMATCH[4]}
    case $unit in
        '' | bit) mult=1 ;;
        k | kbit) mult=1000 ;;
        m | mbit) mult=1000000 ;;
        g | gbit) mult=1000000000 ;;
        t | tbit) mult=1000000000000 ;;
    esac
    # Fixed point with 6 decimals so 2.5gbit stays exact in bash integers;
    # the range check comes first so nothing can overflow 64 bits.
    frac=${frac}000000
    frac=${frac:0:6}
    if ((10#$num > 1000000000000 / mult)); then
        echo "rate '$v' is out of range: give 8kbit to 1tbit" >&2
        return 1
    fi
    local bps=$((10#$num * mult + 10#$frac * mult / 1000000))
    if ((bps < 8000 || bps > 1000000000000)); then
        echo "rate '$v' is out of range: give 8kbit to 1tbit" >&2
        return 1
    fi
    echo "$bps"
}

# A one-way delay: NUMBER UNIT with UNIT us|ms|s. Prints microseconds (1 us to 10 s).
tb_parse_delay() {
    local v=$1 lc
    lc=$(printf '%s' "$v" | tr '[:upper:]' '[:lower:]')
    if [[ ! $lc =~ ^([0-9]{1,9})(\.([0-9]{1,6}))?(us|ms|s)$ ]]; then
        echo "delay '$v' is not NUMBER UNIT with UNIT us|ms|s (e.g. 500us, 2ms)" >&2
        return 1
    fi
    local num=${BASH_REMATCH[1]} frac=${BASH_REMATCH[3]}000000 unit=${BASH_REMATCH[4]} mult
    frac=${frac:0:6}
    case $unit in
        us) mult=1 ;;
        ms) mult=1000 ;;
        s) mult=1000000 ;;
    esac
    if ((10#$num > 10000000 / mult)); then
        echo "delay '$v' is out of range: give 1us to 10s" >&2
        return 1
    fi
    local us=$((10#$num * mult + 10#$frac * mult / 1000000))
    if ((us < 1 || us > 10000000)); then
        echo "delay '$v' is out of range: give 1us to 10s" >&2
        return 1
    fi
    echo "$us"
}

# A loss probability in percent: NUMBER[%], 0 < P <= 100, at most 4 decimals.
# Prints it in millionths (1% -> 10000, 0.0001% -> 1, 100% -> 1000000).
tb_parse_loss() {
    local v=$1
    if [[ ! $v =~ ^([0-9]{1,3})(\.([0-9]{1,4}))?%?$ ]]; then
        echo "loss '$v' is not a percentage NUMBER[%] (e.g. 0.5 or 2%)" >&2
        return 1
    fi
    local int=$((10#${BASH_REMATCH[1]})) f4=${BASH_REMATCH[3]}0000
    local ppm=$((int * 10000 + 10#${f4:0:4}))
    if ((ppm <= 0 || ppm > 1000000)); then
        echo "loss '$v' is out of range: give more than 0 and at most 100 percent" >&2
        return 1
    fi
    echo "$ppm"
}

# Millionths back to a percentage for people: 5000 -> 0.5%.
tb_fmt_loss() {
    local p=$(($1 / 10000)) f
    f=$(printf '%04d' $(($1 % 10000)))
    while [[ $f == *0 ]]; do f=${f%0}; done
    if [[ -n $f ]]; then echo "$p.$f%"; else echo "$p%"; fi
}

# Classic BPF for tc's cls_bpf that picks a packet with probability
# PPM/1e6 (ld rand; jge T; ret 0 = no match; ret -1 = the filter's class).
# Needs only cls_bpf, none of netem or act_gact.
tb_loss_bytecode() {
    local ppm=$1
    if ((ppm >= 1000000)); then
        echo "1,6 0 0 4294967295"
        return
    fi
    local t=$((ppm * 4294967296 / 1000000))
    # SKF_AD_OFF (-0x1000) + SKF_AD_RANDOM (56), as an unsigned 32-bit offset.
    echo "4,32 0 0 4294963256,53 0 1 $t,6 0 0 0,6 0 0 4294967295"
}

# Which link carries something: mgmt | fabric.
tb_parse_link() {
    case $1 in
        mgmt | fabric) echo "$1" ;;
        *)
            echo "'$1' is not a link: give mgmt or fabric" >&2
            return 1
            ;;
    esac
}

# Human form of bits per second (tc's own notation).
tb_fmt_rate() {
    local b=$1
    if ((b % 1000000000 == 0)); then
        echo "$((b / 1000000000))gbit"
    elif ((b % 1000000 == 0)); then
        echo "$((b / 1000000))mbit"
    elif ((b % 1000 == 0)); then
        echo "$((b / 1000))kbit"
    else
        echo "${b}bit"
    fi
}

# tbf bucket for a rate: 1 ms worth of bytes, at least two 9000-byte frames.
tb_tbf_burst() {
    local b=$(($1 / 8 / 1000))
    ((b < 18000)) && b=18000
    echo "$b"
}

# Fault kinds for 'inject --kinds': a comma-separated list of TB_FAULT_KINDS;
# prints them space-separated, each once, in the order given.
tb_parse_kinds() {
    local v=$1 k out=() seen=' ' ks
    if [[ ! $v =~ ^[a-z-]+(,[a-z-]+)*$ ]]; then
        echo "--kinds '$v' is not a comma-separated list of: ${TB_FAULT_KINDS// /, }" >&2
        return 1
    fi
    IFS=, read -r -a ks <<<"$v"
    for k in "${ks[@]}"; do
        if [[ " $TB_FAULT_KINDS " != *" $k "* ]]; then
            echo "--kinds: '$k' is not a fault kind; give some of: ${TB_FAULT_KINDS// /, }" >&2
            return 1
        fi
        [[ $seen == *" $k "* ]] && continue
        seen+="$k "
        out+=("$k")
    done
    echo "${out[*]}"
}
