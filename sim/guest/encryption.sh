#!/bin/bash
# Plain vs encrypted overlays between the soft-RoCE guest's two nodes (the
# root namespace and namespace ns1, veth0 10.77.0.1 <-> veth1 10.77.0.2):
#   wireguard  wg0 10.78.1.1 <-> 10.78.1.2, endpoints on the veth, UDP 51820,
#              MTU underlay - 80 (what Cilium and flannel reserve)
#   ipsec      ESP tunnel mode, AES-GCM-128 (rfc4106(gcm(aes)), Cilium's
#              default), 10.78.2.1 <-> 10.78.2.2 carried between the veth
#              addresses, set with `ip xfrm` (static keys, no IKE daemon)
# then one fabperf agent per node and path, `fabperf run` of the plan (default
# sim/plans/encryption.toml), and a table per path: Gbit/s, each end's data
# threads' CPU, and the whole guest's CPU per Gbit/s (sampled from /proc/stat
# during each cell: encryption runs in kernel workers and softirqs that no
# test thread is charged for).
#
#   sim/softroce.sh -- sim/guest/encryption.sh [PLAN]
set -uo pipefail
plan=${1:-sim/plans/encryption.toml}
if [[ ${FABPERF_SIM_TOPOLOGY:-} != netns ]]; then
    echo "encryption.sh: needs the guest's two-namespace topology (got '${FABPERF_SIM_TOPOLOGY:-not in the guest}')" >&2
    exit 2
fi
fail() { echo "encryption.sh: $*" >&2; exit 1; }
P() { ip netns exec ns1 "$@"; }
MTU=$(cat /sys/class/net/veth0/mtu)

# --- WireGuard
modprobe wireguard 2>/dev/null
command -v wg >/dev/null || fail "wg missing (the guest rootfs needs wireguard-tools)"
umask 077
wg genkey >/tmp/wg-a.key && wg pubkey </tmp/wg-a.key >/tmp/wg-a.pub
wg genkey >/tmp/wg-b.key && wg pubkey </tmp/wg-b.key >/tmp/wg-b.pub
ip link add wg0 type wireguard || fail "no WireGuard in this kernel"
P ip link add wg0 type wireguard || fail "no WireGuard in ns1"
wg set wg0 listen-port 51820 private-key /tmp/wg-a.key peer "$(cat /tmp/wg-b.pub)" \
    endpoint 10.77.0.2:51820 allowed-ips 10.78.1.2/32 || fail "wg set (node a)"
P wg set wg0 listen-port 51820 private-key /tmp/wg-b.key peer "$(cat /tmp/wg-a.pub)" \
    endpoint 10.77.0.1:51820 allowed-ips 10.78.1.1/32 || fail "wg set (node b)"
ip addr add 10.78.1.1/24 dev wg0 && ip link set wg0 mtu $((MTU - 80)) up
P ip addr add 10.78.1.2/24 dev wg0 && P ip link set wg0 mtu $((MTU - 80)) up

# --- IPsec: ESP tunnel mode between the veth addresses
key=0x$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
ip addr add 10.78.2.1/32 dev veth0 && P ip addr add 10.78.2.2/32 dev veth1
ip route add 10.78.2.2/32 dev veth0 src 10.78.2.1 && P ip route add 10.78.2.1/32 dev veth1 src 10.78.2.2
xfrm() { # NS-CMD... : both SAs and this side's policies
    local pre=("$@")
    "${pre[@]}" ip xfrm state add src 10.77.0.1 dst 10.77.0.2 proto esp spi 0x101 reqid 1 mode tunnel \
        aead 'rfc4106(gcm(aes))' "$key" 128 || return 1
    "${pre[@]}" ip xfrm state add src 10.77.0.2 dst 10.77.0.1 proto esp spi 0x102 reqid 2 mode tunnel \
        aead 'rfc4106(gcm(aes))' "$key" 128 || return 1
}
xfrm || fail "ip xfrm state (node a): no ESP / AES-GCM in this kernel?"
xfrm ip netns exec ns1 || fail "ip xfrm state (node b)"
ip xfrm policy add src 10.78.2.1 dst 10.78.2.2 dir out tmpl src 10.77.0.1 dst 10.77.0.2 proto esp reqid 1 mode tunnel
ip xfrm policy add src 10.78.2.2 dst 10.78.2.1 dir in tmpl src 10.77.0.2 dst 10.77.0.1 proto esp reqid 2 mode tunnel
P ip xfrm policy add src 10.78.2.2 dst 10.78.2.1 dir out tmpl src 10.77.0.2 dst 10.77.0.1 proto esp reqid 2 mode tunnel
P ip xfrm policy add src 10.78.2.1 dst 10.78.2.2 dir in tmpl src 10.77.0.1 dst 10.77.0.2 proto esp reqid 1 mode tunnel
ping -c 1 -W 5 10.78.1.2 >/dev/null || fail "no WireGuard connectivity"
ping -c 1 -W 5 -I 10.78.2.1 10.78.2.2 >/dev/null || fail "no IPsec connectivity"
echo "encryption.sh: plain 10.77.0.x (MTU $MTU), wireguard 10.78.1.x (MTU $((MTU - 80))), ipsec ESP AES-GCM-128 10.78.2.x"

# --- agents: node a here, node b in ns1 (its plain agent is the guest's ready one)
for a in 10.77.0.1:plain 10.78.1.1:wireguard 10.78.2.1:ipsec; do
    fabperf server --bind "${a%%:*}" --insecure --node-name node-a --path-label "${a#*:}" >"/tmp/agent-a-${a#*:}.log" 2>&1 &
done
for a in 10.78.1.2:wireguard 10.78.2.2:ipsec; do
    P fabperf server --bind "${a%%:*}" --insecure --node-name node-b --path-label "${a#*:}" >"/tmp/agent-b-${a#*:}.log" 2>&1 &
done
for ip in 10.77.0.1 10.78.1.1 10.78.2.1; do
    for _ in $(seq 100); do [[ -n $(ss -Hltn "src $ip:5301") ]] && break; sleep 0.2; done
done
for ip in 10.77.0.2 10.78.1.2 10.78.2.2; do
    for _ in $(seq 100); do [[ -n $(P ss -Hltn "src $ip:5301") ]] && break; sleep 0.2; done
done

# --- CPU sampler: whole-guest busy and total jiffies, 4 times a second
# (raised priority: at full load the kernel's crypto workers would starve it)
( while :; do echo "$(date +%s.%N) $(head -n1 /proc/stat)"; sleep 0.25; done ) >/tmp/cpu.log &
renice -n -10 -p $! >/dev/null 2>&1
sampler=$!
db=/tmp/encryption.db
rc=0
fabperf run "$plan" --db "$db" --plain || rc=$?
kill "$sampler" 2>/dev/null
fabperf export --db "$db" --format jsonl -o /tmp/encryption.jsonl

# Per cell: the guest's busy cores over the cell (start .. start + omit + duration).
echo
echo "path       test     Gbit/s  cpu loc%  cpu rem%  guest busy cores  guest cores per Gbit/s"
jq -r 'select(.role == "total") | [.path, .test, (.bw_gbps // 0), (.cpu_local_pct // 0), (.cpu_remote_pct // 0),
       (.started_at | sub("\\.[0-9]+Z$"; "Z") | fromdate), (.started_at | capture("\\.(?<f>[0-9]+)Z$").f // "0"),
       (.duration_s + 1)] | @tsv' /tmp/encryption.jsonl |
while IFS=$'\t' read -r path test bw cl cr sec frac dur; do
    t0="$sec.$frac"
    awk -v n="$(nproc)" -v t0="$t0" -v dur="$dur" -v path="$path" -v test="$test" -v bw="$bw" -v cl="$cl" -v cr="$cr" '
        # The samples that bracket the cell: the last at or before its start,
        # the first at or after its end.
        { t = $1; busy = $3 + $4 + $5 + $8 + $9 + $10; tot = busy + $6 + $7
          if (t <= t0 || !have) { b0 = busy; T0 = tot; have = 1 }
          if (!done) { b1 = busy; T1 = tot; if (t >= t0 + dur) done = 1 } }
        END { cores = (T1 > T0) ? n * (b1 - b0) / (T1 - T0) : 0
              printf "%-10s %-7s %7.2f %9.0f %9.0f %17.2f %23.2f\n", path, test, bw, cl, cr, cores, (bw > 0 ? cores / bw : 0) }' /tmp/cpu.log
done
echo "kernel crypto in use (name driver priority):"
awk '/^name/ { n = $3 } /^driver/ { d = $3 } /^priority/ { print "  " n, d, $3 }' /proc/crypto |
    grep -E "^  (rfc4106\(gcm\(aes\)\)|gcm\(aes\)|chacha20|poly1305|aes) " | sort -u
echo "(guest: $(nproc) vCPUs under TCG; 'guest busy cores' counts user, system, irq and softirq time of the whole guest)"
if [[ -n ${FABPERF_SIM_TARGET:-} ]]; then
    mkdir -p "$FABPERF_SIM_TARGET/softroce" && cp "$db" /tmp/encryption.jsonl "$FABPERF_SIM_TARGET/softroce/" &&
        echo "store and records copied to $FABPERF_SIM_TARGET/softroce/"
fi
exit $rc
