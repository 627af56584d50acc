//! Addressing checks: the node IP and its route, reverse-path filtering,
//! interfaces whose MTUs disagree, and network namespaces.

use super::*;

/// Where addresses and routes were read: the snapshot's `ip-route.json`, or netlink live.
pub(super) fn route_evidence(inv: &Inventory, value: String) -> Evidence {
    let path = if inv.source.mode == "snapshot" {
        format!(
            "{}, {}",
            inv.path("/ip-route.json"),
            inv.path("/ip-addr.json")
        )
    } else {
        "netlink (RTM_GETROUTE main table, RTM_GETADDR)".to_string()
    };
    Evidence { path, value }
}

pub(super) fn check_node_ip(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(node) = &inv.node_ip else {
        out.push(Finding {
            id: "node-ip-unknown".into(),
            severity: Severity::Warning,
            subject: "node".into(),
            summary: "no node address: there is no IPv4 default route and no --node-ip".into(),
            detail: "kubelet advertises the address of the default-route interface when --node-ip is unset; without one, CNIs and tests cannot tell which link carries pod traffic.".into(),
            evidence: vec![route_evidence(inv, "no IPv4 default route with an address on its interface".into())],
            cost_gbps: None,
            fix: vec!["pass the fabric address explicitly: kubelet `--node-ip=<fabric IPv4>` (and `fabperf doctor --node-ip <IP>`)".into()],
        });
        return;
    };
    // Fabric links: netdevs bound to hardware RDMA ports.
    let hw_fabric: Vec<(&Netdev, f64)> = inv
        .netdevs
        .iter()
        .filter(|n| {
            n.rdma_device
                .as_deref()
                .and_then(|d| inv.rdma_device(d))
                .is_some_and(|d| !d.software)
        })
        .filter_map(|n| netdev_gbps(inv, n).map(|g| (n, g)))
        .collect();
    // Active hardware ports count even without a netdev (pure IB).
    let port_max = inv
        .rdma_devices
        .iter()
        .filter(|d| !d.software)
        .flat_map(|d| d.ports.iter())
        .filter(|p| p.state == "ACTIVE")
        .filter_map(|p| p.rate_gbps)
        .fold(0.0f64, f64::max);
    if hw_fabric.iter().any(|(n, _)| n.name == node.interface) {
        return;
    }
    // Other links with a subnet of their own that are up: a faster one means the node address
    // sits on the slow path (a 1 Gbit/s management link next to the data network, or a link
    // shaped with tc).
    let other: Vec<(&Netdev, f64)> = inv
        .netdevs
        .iter()
        .filter(|n| n.kind != "loopback" && n.name != node.interface)
        .filter(|n| !hw_fabric.iter().any(|(h, _)| h.name == n.name))
        .filter(|n| matches!(n.operstate.as_deref(), Some("up") | Some("unknown")))
        .filter(|n| !is_overlay_or_bridge(n) && has_ipv4_subnet(n))
        .filter_map(|n| n.effective_gbps().map(|g| (n, g)))
        .collect();
    let hw_max = port_max.max(hw_fabric.iter().map(|(_, g)| *g).fold(0.0f64, f64::max));
    let other_max = other.iter().map(|(_, g)| *g).fold(0.0f64, f64::max);
    let fastest = hw_max.max(other_max);
    if fastest <= 0.0 {
        return;
    }
    let fabric: Vec<(&Netdev, f64)> = hw_fabric.iter().chain(other.iter()).copied().collect();
    let node_nd = inv.netdev(&node.interface);
    let node_gbps = node_nd.and_then(|n| n.effective_gbps());
    // The interface to move to: fastest, with an IPv4 address preferred.
    let target = {
        let mut c: Vec<&(&Netdev, f64)> = fabric.iter().collect();
        // Fastest with an IPv4 address, then the largest MTU, then by name.
        c.sort_by(|a, b| {
            (!b.0.ipv4.is_empty())
                .cmp(&!a.0.ipv4.is_empty())
                .then(b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal))
                .then(b.0.mtu.cmp(&a.0.mtu))
                .then(a.0.name.cmp(&b.0.name))
        });
        c.first().map(|(n, _)| *n)
    };
    let mut evidence = vec![route_evidence(
        inv,
        format!(
            "node address {} on {}{}",
            node.address,
            node.interface,
            node.route
                .as_ref()
                .map(|r| format!(" via route `{r}`"))
                .unwrap_or_default()
        ),
    )];
    if node.source == "node-ip-flag" {
        evidence[0].value.push_str(" (from --node-ip)");
    }
    evidence.push(ev(
        inv,
        &format!("/sys/class/net/{}/speed", node.interface),
        opt(&node_nd.and_then(|n| n.speed_mbps)),
    ));
    evidence.extend(node_nd.and_then(|n| tc_evidence(inv, n)));
    for (n, g) in &fabric {
        evidence.push(ev(
            inv,
            &format!("/sys/class/net/{}/speed", n.name),
            n.speed_mbps
                .map(|s| s.to_string())
                .unwrap_or_else(|| format!("unknown (port rate {})", fmt_gbps(*g))),
        ));
        evidence.extend(tc_evidence(inv, n));
    }
    let mut fix = Vec::new();
    match target {
        Some(t) => {
            let ip = t
                .ipv4
                .first()
                .map(|c| c.split('/').next().unwrap_or(c).to_string());
            match &ip {
                Some(ip) => fix.push(format!(
                    "kubelet: `--node-ip={ip}` (KUBELET_EXTRA_ARGS in /etc/default/kubelet, or kubeletExtraArgs.node-ip in kubeadm), then restart kubelet"
                )),
                None => fix.push(format!(
                    "{} has no IPv4 address: assign one first (`ip addr add <IP>/<prefix> dev {}`, persistently in your network config), then set kubelet `--node-ip=<that IP>`",
                    t.name, t.name
                )),
            }
            let i = &t.name;
            fix.push(format!("Calico: calico-node env `IP_AUTODETECTION_METHOD=interface={i}` (operator: `spec.calicoNetwork.nodeAddressAutodetectionV4.interface: {i}`)"));
            fix.push(format!("Flannel: `--iface={i}` in the kube-flannel container args"));
            fix.push(format!("Cilium: Helm value `devices: [{i}]` (plus `--node-ip` so the node address matches)"));
            fix.push(format!("Antrea: `transportInterface: {i}` in antrea-agent.conf"));
        }
        None => fix.push("bind an IPv4 address to the fabric link (IPoIB or the RoCE netdev) and point kubelet `--node-ip` and the CNI's interface setting at it".into()),
    }
    let mtu = node_nd.and_then(|n| n.mtu).unwrap_or(1500);
    let shaped = node_nd
        .and_then(|n| n.tc_shaping.as_deref())
        .filter(|_| {
            node_nd.is_some_and(|n| n.tc_rate_bps.map(|r| r as f64 / 1e9) == n.effective_gbps())
        })
        .map(|t| format!(", shaped by {t}"))
        .unwrap_or_default();
    let what = if hw_max >= other_max {
        "fabric link"
    } else {
        "link of this node"
    };
    let fastest_name = fabric
        .iter()
        .filter(|(_, g)| *g >= fastest)
        .map(|(n, _)| n.name.as_str())
        .next()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    match node_gbps {
        Some(ng) if ng <= fastest / 2.0 => {
            let plain = ng * tcp_efficiency(mtu);
            let vxlan = ng * tcp_efficiency_encap(mtu, 50);
            out.push(Finding {
                id: "node-ip-slow-link".into(),
                severity: Severity::Error,
                subject: node.interface.clone(),
                summary: format!(
                    "node address {} is on {} ({}{shaped}) while the fastest {what}{fastest_name} is {}",
                    node.address,
                    node.interface,
                    fmt_gbps(ng),
                    fmt_gbps(fastest)
                ),
                detail: format!(
                    "CNIs (Calico, Flannel, Cilium, Antrea) carry pod traffic over the interface of the node address. Over {} at MTU {mtu}, TCP goodput tops out near {:.3} Gbit/s plain and {:.3} Gbit/s with VXLAN/Geneve encapsulation, whatever the fabric can do.",
                    node.interface, plain, vxlan
                ),
                evidence,
                cost_gbps: Some(round1(fastest - ng)),
                fix,
            });
        }
        Some(_) => {}
        // Only a hardware fabric makes an unknown node-link speed worth a warning.
        None if hw_max <= 0.0 => {}
        None => out.push(Finding {
            id: "node-ip-slow-link".into(),
            severity: Severity::Warning,
            subject: node.interface.clone(),
            summary: format!(
                "node address {} is on {} (speed unknown), not on the {} fabric link",
                node.address,
                node.interface,
                fmt_gbps(hw_max)
            ),
            detail: "Pod traffic follows the node address; its link speed is unreadable here, so check that it is as fast as the fabric.".into(),
            evidence,
            cost_gbps: None,
            fix,
        }),
    }
}

pub(super) fn check_rp_filter(inv: &Inventory, out: &mut Vec<Finding>) {
    // subnet -> interfaces with an address in it
    let mut by_subnet: BTreeMap<String, Vec<&Netdev>> = BTreeMap::new();
    for n in inv.netdevs.iter().filter(|n| n.kind != "loopback") {
        for c in &n.ipv4 {
            let Ok(net) = c.parse::<ipnet::Ipv4Net>() else {
                continue;
            };
            // A /0 is not a shared subnet; a /32 holds one address.
            if net.prefix_len() == 0 || net.prefix_len() == 32 {
                continue;
            }
            let key = net.trunc().to_string();
            let v = by_subnet.entry(key).or_default();
            if !v.iter().any(|x| x.name == n.name) {
                v.push(n);
            }
        }
    }
    let all = &inv.sysctl.all;
    for (subnet, ifs) in by_subnet {
        if ifs.len() < 2 {
            continue;
        }
        let mut bad = Vec::new();
        let mut evidence = Vec::new();
        for n in &ifs {
            let per = inv
                .sysctl
                .interfaces
                .get(&n.name)
                .cloned()
                .unwrap_or_default();
            let eff = |a: Option<u32>, b: Option<u32>| match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).max(b.unwrap_or(0))),
            };
            let rp = eff(all.rp_filter, per.rp_filter);
            let ai = eff(all.arp_ignore, per.arp_ignore);
            let aa = eff(all.arp_announce, per.arp_announce);
            for (k, v) in [
                ("rp_filter", per.rp_filter),
                ("arp_ignore", per.arp_ignore),
                ("arp_announce", per.arp_announce),
            ] {
                evidence.push(ev(
                    inv,
                    &format!("/proc/sys/net/ipv4/conf/{}/{k}", n.name),
                    opt(&v),
                ));
            }
            if rp == Some(1) {
                bad.push(format!("{}: rp_filter {} (strict)", n.name, 1));
            }
            if ai == Some(0) {
                bad.push(format!(
                    "{}: arp_ignore 0 (answers ARP for every local address)",
                    n.name
                ));
            }
            let _ = aa;
        }
        if bad.is_empty() {
            continue;
        }
        for k in ["rp_filter", "arp_ignore", "arp_announce"] {
            let v = match k {
                "rp_filter" => all.rp_filter,
                "arp_ignore" => all.arp_ignore,
                _ => all.arp_announce,
            };
            evidence.push(ev(
                inv,
                &format!("/proc/sys/net/ipv4/conf/all/{k}"),
                opt(&v),
            ));
        }
        let names: Vec<&str> = ifs.iter().map(|n| n.name.as_str()).collect();
        let mut fix = vec![
            "sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2".to_string(),
        ];
        for n in &names {
            fix.push(format!(
                "sysctl -w net.ipv4.conf.{n}.rp_filter=2 net.ipv4.conf.{n}.arp_ignore=1 net.ipv4.conf.{n}.arp_announce=2"
            ));
        }
        fix.push("persist them in /etc/sysctl.d/90-rdma-multihomed.conf; alternatively give each interface its own subnet or use source-based policy routing".into());
        out.push(Finding {
            id: "rp-filter-multihomed".into(),
            severity: Severity::Warning,
            subject: subnet.clone(),
            summary: format!(
                "{} share subnet {subnet} but {}",
                names.join(", "),
                bad.join("; ")
            ),
            detail: "With several interfaces in one subnet, replies leave by the first route: strict reverse-path filtering drops traffic arriving on the other links, and arp_ignore=0 lets any interface answer ARP for any address (ARP flux), so RoCE and TCP pick the wrong port or time out.".into(),
            evidence,
            cost_gbps: None,
            fix,
        });
    }
}

pub(super) fn check_mtu(inv: &Inventory, out: &mut Vec<Finding>) {
    for kind in ["ethernet", "ipoib"] {
        let nds: Vec<&Netdev> = inv
            .netdevs
            .iter()
            .filter(|n| n.kind == kind && n.rdma_device.is_some() && !n.virtual_device)
            .filter(|n| {
                n.rdma_device
                    .as_deref()
                    .and_then(|d| inv.rdma_device(d))
                    .is_some_and(|d| !d.software)
            })
            .filter(|n| n.mtu.is_some())
            .collect();
        if nds.len() < 2 {
            continue;
        }
        let max = nds.iter().filter_map(|n| n.mtu).max().unwrap_or(0);
        let min = nds.iter().filter_map(|n| n.mtu).min().unwrap_or(0);
        let mismatch = if kind == "ethernet" {
            max > 1500 && min <= 1500
        } else {
            max != min
        };
        if !mismatch {
            continue;
        }
        let small: Vec<&&Netdev> = nds.iter().filter(|n| n.mtu == Some(min)).collect();
        let rate = small
            .iter()
            .filter_map(|n| netdev_gbps(inv, n))
            .reduce(f64::max);
        let cost = rate.map(|r| round1(r * (tcp_efficiency(max) - tcp_efficiency(min))));
        let list: Vec<String> = nds
            .iter()
            .map(|n| format!("{} {}", n.name, opt(&n.mtu)))
            .collect();
        out.push(Finding {
            id: "mtu-mismatch".into(),
            severity: Severity::Warning,
            subject: kind.into(),
            summary: format!("RDMA netdevs have different MTUs: {}", list.join(", ")),
            detail: format!(
                "Traffic between these links (and to peers configured like the other one) is limited to MTU {min}: TCP loses header efficiency and RoCE's path MTU drops (1024 at MTU 1500 vs 4096 with jumbo frames)."
            ),
            evidence: nds
                .iter()
                .map(|n| ev(inv, &format!("/sys/class/net/{}/mtu", n.name), opt(&n.mtu)))
                .collect(),
            cost_gbps: cost.filter(|c| *c > 0.0),
            fix: small
                .iter()
                .map(|n| format!("`ip link set {} mtu {max}` (persist it in the network config; the switch ports must allow it)", n.name))
                .collect(),
        });
    }
}

pub(super) fn check_netns(inv: &Inventory, out: &mut Vec<Finding>) {
    if inv.rdma_netns_mode.as_deref() != Some("exclusive") {
        return;
    }
    out.push(Finding {
        id: "rdma-netns-exclusive".into(),
        severity: Severity::Warning,
        subject: "rdma subsystem".into(),
        summary: "RDMA subsystem is in exclusive network-namespace mode".into(),
        detail: "In exclusive mode an RDMA device is visible only in the namespace that owns it: the k8s-rdma-shared-dev-plugin reports capacity 0 / \"incorrect RDMA subsystem network namespace\" and pods see no device (the SR-IOV device plugin with rdma CNI is the exclusive-mode alternative).".into(),
        evidence: vec![ev(inv, "/sys/module/ib_core/parameters/netns_mode", "N")],
        cost_gbps: None,
        fix: vec![
            "`rdma system set netns shared` (before any pod starts)".into(),
            "persist: `echo 'options ib_core netns_mode=1' > /etc/modprobe.d/ib_core.conf` and rebuild the initramfs".into(),
        ],
    });
}
