//! `fabperf doctor`: findings about a node's fabric, each with evidence, cost and the fix.
//!
//! [`diagnose`] is a pure function of an [`Inventory`], so it works the same on the live host, a
//! capture, a fixture, or a `detect --json` file loaded from another node.

use crate::memlock::{human_bytes, MemlockStatus, BENCH_NEED_BYTES};
use crate::model::{Inventory, Netdev, RdmaDevice, RdmaPort};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Value of the doctor report's `schema` field.
pub const DOCTOR_SCHEMA: &str = "fabperf.doctor/1";

// One finding vocabulary for doctor and the records (findings from counter deltas).
pub use fabperf_results::{Evidence, Finding, Severity};

/// All findings for one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoctorReport {
    pub schema: String,
    pub hostname: String,
    pub source: crate::model::Source,
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// True when at least one finding is an error.
    pub fn has_error(&self) -> bool {
        self.errors > 0
    }

    /// Findings with this id.
    pub fn with_id<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
        self.findings.iter().filter(move |f| f.id == id)
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }

    /// Add findings made from measurements (`fabperf doctor --mtu-results`),
    /// keeping the report's order (severity, id, subject) and its counts.
    pub fn extend(&mut self, more: Vec<Finding>) {
        self.findings.extend(more);
        sort_findings(&mut self.findings);
        let count = |s: Severity| self.findings.iter().filter(|x| x.severity == s).count();
        self.errors = count(Severity::Error);
        self.warnings = count(Severity::Warning);
        self.infos = count(Severity::Info);
    }
}

fn sort_findings(f: &mut [Finding]) {
    f.sort_by(|a, b| {
        a.severity
            .cmp(&b.severity)
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.subject.cmp(&b.subject))
    });
}

fn ev(inv: &Inventory, host_path: &str, value: impl ToString) -> Evidence {
    Evidence {
        path: inv.path(host_path),
        value: value.to_string(),
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|x| x.to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Fraction of the link rate TCP/IPv4 carries as goodput at this MTU (timestamps on; Ethernet
/// framing with preamble and IFG adds 38 bytes; IP+TCP headers take 52).
pub fn tcp_efficiency(mtu: u32) -> f64 {
    tcp_efficiency_encap(mtu, 0)
}

/// Like [`tcp_efficiency`] when a tunnel header of `overhead` bytes (VXLAN/Geneve 50, IP-in-IP
/// 20, WireGuard 60) rides inside each frame of the underlay MTU.
pub fn tcp_efficiency_encap(mtu: u32, overhead: u32) -> f64 {
    let m = f64::from(mtu.max(200));
    ((m - 52.0 - f64::from(overhead)) / (m + 38.0)).max(0.0)
}

/// Link rate of a netdev in Gbit/s: the smaller of its speed and its `tc` egress cap, else the
/// rate of the RDMA port behind it (capped by `tc` too).
fn netdev_gbps(inv: &Inventory, n: &Netdev) -> Option<f64> {
    if let Some(g) = n.effective_gbps() {
        return Some(g);
    }
    let d = inv.rdma_device(n.rdma_device.as_deref()?)?;
    let p = d.ports.iter().find(|p| Some(p.port) == n.rdma_port)?;
    p.rate_gbps
}

/// Where `tc` shaping was read: the snapshot's `fabperf-tc.json`, or netlink live.
fn tc_evidence(inv: &Inventory, n: &Netdev) -> Option<Evidence> {
    let text = n.tc_shaping.clone()?;
    let path = if inv.source.mode == "snapshot" {
        inv.path("/fabperf-tc.json")
    } else {
        format!("netlink (RTM_GETQDISC/RTM_GETTCLASS, dev {})", n.name)
    };
    Some(Evidence {
        path,
        value: format!("egress {text}"),
    })
}

/// Link kinds that carry traffic of the node itself rather than stand for another path:
/// bridges, overlays and tunnels (docker0, cni0, flannel.1, vxlan.calico, ...) report a speed
/// borrowed from their ports and are never "the faster link".
fn is_overlay_or_bridge(n: &Netdev) -> bool {
    !matches!(n.devtype.as_deref(), None | Some("vlan") | Some("bond"))
}

/// A link with a routable subnet of its own (not a /32 host address such as cilium_host or a
/// kube-ipvs0 service address).
fn has_ipv4_subnet(n: &Netdev) -> bool {
    n.ipv4.iter().any(|c| {
        c.parse::<ipnet::Ipv4Net>()
            .is_ok_and(|net| (1..32).contains(&net.prefix_len()) && !net.addr().is_loopback())
    })
}

fn port_path(d: &RdmaDevice, p: &RdmaPort, file: &str) -> String {
    format!("/sys/class/infiniband/{}/ports/{}/{}", d.name, p.port, file)
}

fn fmt_gbps(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0} Gbit/s")
    } else if (x * 10.0 - (x * 10.0).round()).abs() < 1e-9 {
        format!("{x:.1} Gbit/s")
    } else {
        format!("{x:.3} Gbit/s")
    }
}

/// Where addresses and routes were read: the snapshot's `ip-route.json`, or netlink live.
fn route_evidence(inv: &Inventory, value: String) -> Evidence {
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

fn check_node_ip(inv: &Inventory, out: &mut Vec<Finding>) {
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

fn port_rate_max(d: &RdmaDevice) -> Option<f64> {
    let active: Vec<f64> = d
        .ports
        .iter()
        .filter(|p| p.state == "ACTIVE")
        .filter_map(|p| p.rate_gbps)
        .collect();
    let all: Vec<f64> = d.ports.iter().filter_map(|p| p.rate_gbps).collect();
    let pick = if active.is_empty() { all } else { active };
    pick.into_iter().reduce(f64::max)
}

fn check_pcie(inv: &Inventory, out: &mut Vec<Finding>) {
    for d in &inv.rdma_devices {
        let Some(pci) = &d.pci else { continue };
        let base = if pci.sysfs.is_empty() {
            format!("/sys/bus/pci/devices/{}", pci.address)
        } else {
            pci.sysfs.clone()
        };
        let evidence = vec![
            ev(
                inv,
                &format!("{base}/current_link_speed"),
                opt(&pci.current_link_speed),
            ),
            ev(
                inv,
                &format!("{base}/current_link_width"),
                opt(&pci.current_width),
            ),
            ev(
                inv,
                &format!("{base}/max_link_speed"),
                opt(&pci.max_link_speed),
            ),
            ev(inv, &format!("{base}/max_link_width"), opt(&pci.max_width)),
        ];
        let rate = port_rate_max(d);
        let ceil = pci.ceiling_gbps;
        let max_ceil = pci.max_ceiling_gbps;
        let link_txt = |gts: Option<f64>, w: Option<u32>| {
            format!(
                "{} GT/s x{}",
                gts.map(|g| g.to_string()).unwrap_or_else(|| "?".into()),
                w.map(|w| w.to_string()).unwrap_or_else(|| "?".into())
            )
        };
        let cur_txt = link_txt(pci.current_speed_gts, pci.current_width);
        let max_txt = link_txt(pci.max_speed_gts, pci.max_width);
        let slow_speed = matches!((pci.current_gen, pci.max_gen), (Some(c), Some(m)) if c < m);
        let narrow = matches!((pci.current_width, pci.max_width), (Some(c), Some(m)) if c < m);
        let mut port_ev = Vec::new();
        for p in &d.ports {
            if let Some(r) = &p.rate {
                port_ev.push(ev(inv, &port_path(d, p, "rate"), r));
            }
        }
        if slow_speed || narrow {
            let cost = match (rate, ceil, max_ceil) {
                (Some(r), Some(c), Some(m)) => Some(round1((r.min(m) - r.min(c)).max(0.0))),
                _ => None,
            };
            // Info only when it provably costs nothing at the current port rate.
            let severity = if cost == Some(0.0) {
                Severity::Info
            } else {
                Severity::Warning
            };
            let mut e = evidence.clone();
            e.extend(port_ev.iter().cloned());
            out.push(Finding {
                id: "pcie-downgraded".into(),
                severity,
                subject: format!("{} ({})", pci.address, d.name),
                summary: format!(
                    "{} PCIe link trained at {cur_txt}, below the {max_txt} it is capable of",
                    d.name
                ),
                detail: format!(
                    "The link negotiates at boot; a narrower or slower link means a wrong slot, a riser/bifurcation setting, or a bad seat. Usable PCIe bandwidth is {} now vs {} at full link.",
                    ceil.map(fmt_gbps).unwrap_or_else(|| "unknown".into()),
                    max_ceil.map(fmt_gbps).unwrap_or_else(|| "unknown".into())
                ),
                evidence: e,
                cost_gbps: cost,
                fix: vec![
                    format!("move the card to a slot wired x{} at Gen{} (check `lspci -vv -s {} | grep -e LnkCap -e LnkSta`)", opt(&pci.max_width), opt(&pci.max_gen), pci.address),
                    "check the BIOS slot settings (link speed forced to a lower Gen, PCIe bifurcation x8x8 on an x16 slot) and reseat the card; the link retrains only on reboot".into(),
                ],
            });
        }
        if let (Some(r), Some(c)) = (rate, ceil) {
            if c < r {
                let card_limited = max_ceil.is_some_and(|m| m < r);
                let mut e = evidence.clone();
                e.extend(port_ev.iter().cloned());
                out.push(Finding {
                    id: "pcie-ceiling".into(),
                    severity: Severity::Error,
                    subject: format!("{} ({})", pci.address, d.name),
                    summary: format!(
                        "{} PCIe {cur_txt} gives {} usable, below the {} port rate",
                        d.name,
                        fmt_gbps(c),
                        fmt_gbps(r)
                    ),
                    detail: format!(
                        "Every byte the NIC moves crosses PCIe; after encoding the link carries at most {} and real DMA (TLP headers, completions) somewhat less, so RDMA, IPoIB and TCP over this port cannot reach line rate.{}",
                        fmt_gbps(c),
                        if card_limited { " The card itself is not capable of more (its maximum link is below the port rate): the port cannot be fed at line rate in any slot." } else { "" }
                    ),
                    evidence: e,
                    cost_gbps: Some(round1(r - c)),
                    fix: if card_limited {
                        vec!["use a NIC whose PCIe link matches the port rate, or run the port at a lower speed you can feed".into()]
                    } else {
                        vec![
                            format!("put the NIC in a slot that trains at {max_txt} (usable {})", max_ceil.map(fmt_gbps).unwrap_or_else(|| "unknown".into())),
                            format!("verify after reboot: `cat /sys/bus/pci/devices/{}/current_link_width` and dmesg `available PCIe bandwidth`", pci.address),
                        ]
                    },
                });
            }
        }
    }
}

fn check_ipoib(inv: &Inventory, out: &mut Vec<Finding>) {
    for n in inv.netdevs.iter().filter(|n| n.kind == "ipoib") {
        if n.ipoib_mode.as_deref() != Some("datagram") {
            continue;
        }
        let dev = n.rdma_device.as_deref().and_then(|d| inv.rdma_device(d));
        let enhanced = dev.and_then(|d| d.pci.as_ref()).is_some_and(|p| {
            p.vendor_id == "15b3" && crate::parse::enhanced_ipoib_only(&p.device_id)
        });
        let mtu = n.mtu.unwrap_or(0);
        let mut fix = Vec::new();
        if mtu <= 2044 {
            fix.push("raise the IB partition MTU to 4K in the subnet manager (opensm partitions.conf: `Default=0x7fff, ipoib, mtu=5 : ALL=full;`, then restart opensm): datagram MTU becomes 4092".into());
        }
        if enhanced {
            fix.push(format!(
                "{} is ConnectX-4 or later: inbox enhanced IPoIB supports datagram mode only; connected mode needs MLNX_OFED with `options ib_ipoib ipoib_enhanced=0` in /etc/modprobe.d/ib_ipoib.conf, then `echo connected > /sys/class/net/{}/mode && ip link set {} mtu 65520`",
                dev.map(|d| d.name.as_str()).unwrap_or("the HCA"), n.name, n.name
            ));
        } else {
            fix.push(format!(
                "`echo connected > /sys/class/net/{}/mode && ip link set {} mtu 65520` (persist with CONNECTED_MODE=yes / MTU=65520 in the interface config)",
                n.name, n.name
            ));
        }
        out.push(Finding {
            id: "ipoib-datagram-mtu".into(),
            severity: Severity::Warning,
            subject: n.name.clone(),
            summary: format!(
                "{} runs IPoIB in datagram mode, MTU {} (datagram caps it at 2044 with a 2K IB MTU, 4092 with 4K)",
                n.name,
                opt(&n.mtu)
            ),
            detail: "Small packets make TCP over IPoIB CPU-bound per packet: expect well below the IB rate (tens of Gbit/s on 100-200 Gbit/s links). Pods on an ipoib-cni network inherit this MTU.".into(),
            evidence: vec![
                ev(inv, &format!("/sys/class/net/{}/mode", n.name), "datagram"),
                ev(inv, &format!("/sys/class/net/{}/mtu", n.name), opt(&n.mtu)),
            ],
            cost_gbps: None,
            fix,
        });
    }
}

fn check_ports(inv: &Inventory, out: &mut Vec<Finding>) {
    for d in &inv.rdma_devices {
        for p in &d.ports {
            let subject = format!("{} port {}", d.name, p.port);
            let mut evidence = vec![ev(inv, &port_path(d, p, "state"), &p.state)];
            if let Some(ps) = &p.phys_state {
                evidence.push(ev(inv, &port_path(d, p, "phys_state"), ps));
            }
            if p.state != "ACTIVE" {
                let ib = p.link_layer == "InfiniBand";
                let (severity, summary, detail, fix) = match p.state.as_str() {
                    "INIT" | "ARMED" if ib => {
                        if let Some(l) = &p.lid {
                            evidence.push(ev(inv, &port_path(d, p, "lid"), l));
                        }
                        if let Some(l) = &p.sm_lid {
                            evidence.push(ev(inv, &port_path(d, p, "sm_lid"), l));
                        }
                        (
                            Severity::Error,
                            format!("{subject} is stuck in {}: the link is up but no subnet manager has configured it", p.state),
                            "An InfiniBand port becomes ACTIVE only after a subnet manager assigns its LID; until then no RDMA or IPoIB traffic flows.".to_string(),
                            vec![
                                "run a subnet manager on exactly one node or switch of the fabric: `apt install opensm && systemctl enable --now opensm` (or enable the SM on a managed switch)".to_string(),
                                format!("check with `sminfo` / `cat /sys/class/infiniband/{}/ports/{}/sm_lid` (0x0 = none)", d.name, p.port),
                            ],
                        )
                    }
                    "DOWN" => {
                        let disabled = p.phys_state.as_deref() == Some("Disabled");
                        (
                            Severity::Warning,
                            format!(
                                "{subject} is DOWN ({})",
                                p.phys_state.as_deref().unwrap_or("physical state unknown")
                            ),
                            if disabled {
                                "The port is administratively disabled.".to_string()
                            } else {
                                "No link: no cable, the peer port is down, or a speed/FEC mismatch with the switch.".to_string()
                            },
                            if disabled {
                                vec![format!("enable it: `ip link set {} up` for its netdev, or `ibportstate` / the switch for IB", p.netdevs.first().map(String::as_str).unwrap_or("<netdev>"))]
                            } else {
                                vec![
                                    "check the cable and the switch port; `ethtool <netdev>` (Ethernet) or `ibstat` (IB) shows the negotiated state".to_string(),
                                    "ignore this if the port is intentionally unused".to_string(),
                                ]
                            },
                        )
                    }
                    other => (
                        Severity::Warning,
                        format!("{subject} is {other}, not ACTIVE"),
                        "RDMA traffic needs an ACTIVE port.".to_string(),
                        vec![
                            "check the link (`ibstat`, `rdma link show`) and the switch side"
                                .to_string(),
                        ],
                    ),
                };
                out.push(Finding {
                    id: "port-not-active".into(),
                    severity,
                    subject,
                    summary,
                    detail,
                    evidence,
                    cost_gbps: p.rate_gbps.filter(|_| p.state != "DOWN"),
                    fix,
                });
                continue;
            }
            if p.link_layer == "Ethernet" {
                match p.roce_v2_ipv4_gid_index {
                    None => {
                        let nd = p.netdevs.first();
                        let nd_has_v4 = nd
                            .and_then(|n| inv.netdev(n))
                            .is_some_and(|n| !n.ipv4.is_empty());
                        let mut e = vec![ev(
                            inv,
                            &port_path(d, p, "gids"),
                            format!(
                                "{} valid GIDs, none RoCE v2 with an IPv4 address",
                                p.gids.len()
                            ),
                        )];
                        for g in p.gids.iter().take(8) {
                            e.push(ev(
                                inv,
                                &port_path(d, p, &format!("gid_attrs/types/{}", g.index)),
                                format!("{} ({})", opt(&g.gid_type), g.gid),
                            ));
                        }
                        out.push(Finding {
                            id: "roce-v2-gid-missing".into(),
                            severity: Severity::Warning,
                            subject: subject.clone(),
                            summary: format!("{subject} (RoCE) has no RoCE v2 GID carrying an IPv4 address"),
                            detail: "rdma_cm and most tools use RoCE v2 over IPv4; without such a GID connections fail with `Failed to modify QP to RTR` / ETIMEDOUT, or fall back to RoCE v1 which does not route.".into(),
                            evidence: e,
                            cost_gbps: None,
                            fix: match nd {
                                Some(n) if !nd_has_v4 => vec![format!("give {n} an IPv4 address (`ip addr add <IP>/<prefix> dev {n}`): the kernel then adds RoCE v1 and v2 GIDs for it")],
                                Some(n) => vec![
                                    format!("{n} has IPv4 but no v2 GID: check `cma_roce_mode -d {} -p {}` and that the netdev is not in another network namespace", d.name, p.port),
                                    "inside pods GID tables are sparse: make sure the pod's RoCE netdev (macvlan/host-device) has an IPv4 address".into(),
                                ],
                                None => vec!["bind a netdev to this port and give it an IPv4 address".into()],
                            },
                        });
                    }
                    Some(idx) => {
                        let g = p.gids.iter().find(|g| g.index == idx);
                        out.push(Finding {
                            id: "roce-gid-index".into(),
                            severity: Severity::Info,
                            subject: subject.clone(),
                            summary: format!(
                                "{subject}: RoCE v2 over IPv4 uses GID index {idx} ({}{})",
                                g.and_then(|g| g.ipv4.clone()).unwrap_or_default(),
                                g.and_then(|g| g.netdev.clone()).map(|n| format!(" on {n}")).unwrap_or_default()
                            ),
                            detail: "GID indexes differ between nodes and pods; fabperf picks this one automatically.".into(),
                            evidence: vec![ev(inv, &port_path(d, p, &format!("gid_attrs/types/{idx}")), "RoCE v2")],
                            cost_gbps: None,
                            fix: vec![format!("for perftest: `-x {idx}` on this node (or `-R` to let rdma_cm pick)")],
                        });
                    }
                }
            }
        }
    }
}

fn check_memlock(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(m) = &inv.memlock else { return };
    if m.can_lock(BENCH_NEED_BYTES) {
        return;
    }
    out.push(Finding {
        id: "memlock-low".into(),
        severity: if inv.rdma_available { Severity::Error } else { Severity::Info },
        subject: "process".into(),
        summary: format!(
            "locked-memory limit is {} without CAP_IPC_LOCK; RDMA benchmarks need to pin about {}",
            m.soft_text(),
            human_bytes(BENCH_NEED_BYTES)
        ),
        detail: "Memory registration pins pages; beyond RLIMIT_MEMLOCK without CAP_IPC_LOCK `ibv_reg_mr` fails with ENOMEM (`Cannot allocate memory`). containerd's default limit is small.".into(),
        evidence: vec![
            ev(inv, "/proc/self/limits", format!("Max locked memory {}", m.soft_text())),
            ev(inv, "/proc/self/status", format!("CapEff CAP_IPC_LOCK {}", opt(&m.cap_ipc_lock))),
        ],
        cost_gbps: None,
        fix: MemlockStatus::fix_lines(),
    });
}

fn check_rp_filter(inv: &Inventory, out: &mut Vec<Finding>) {
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

fn check_mtu(inv: &Inventory, out: &mut Vec<Finding>) {
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

fn check_netns(inv: &Inventory, out: &mut Vec<Finding>) {
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

fn check_clocksource(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(c) = &inv.clocksource else { return };
    if !c.is_slow() {
        return;
    }
    let base = crate::model::CLOCKSOURCE_DIR;
    let mut fix = vec!["see why the kernel left the TSC: `dmesg | grep -i -E 'tsc|clocksource'` (\"Marking clocksource tsc unstable\")".to_string()];
    if c.available.iter().any(|a| a == "tsc") {
        fix.push(format!(
            "where the TSC is known good (constant_tsc/nonstop_tsc in /proc/cpuinfo): `echo tsc > {base}/current_clocksource` (until reboot), or boot with `tsc=reliable`"
        ));
    }
    if c.available.iter().any(|a| a == "kvm-clock") {
        fix.push(format!(
            "in this KVM guest: `echo kvm-clock > {base}/current_clocksource`"
        ));
    } else {
        fix.push(
            "in a VM: enable the hypervisor's paravirtual clock (kvm-clock, Hyper-V TSC page)"
                .into(),
        );
    }
    out.push(Finding {
        id: "clocksource-slow".into(),
        severity: Severity::Warning,
        subject: "node".into(),
        summary: format!(
            "the kernel's clocksource is {}: every clock read is a system call with a trapped device access (~0.5-1 µs instead of ~20-60 ns)",
            c.current
        ),
        detail: "Benchmarks that time with the system clock (fabperf, iperf3, sockperf) pay it on every timestamp: latency samples grow and busy-polling loops slow down, while perftest reads the TSC directly and does not, so comparisons between them skew. The kernel falls back to hpet/acpi_pm when its watchdog marks the TSC unstable (VMs, emulators, some firmware). fabperf's records carry a warning with the measured cost when this happens.".into(),
        evidence: vec![
            ev(inv, &format!("{base}/current_clocksource"), &c.current),
            ev(inv, &format!("{base}/available_clocksource"), c.available.join(" ")),
        ],
        cost_gbps: None,
        fix,
    });
}

fn check_incomplete(inv: &Inventory, out: &mut Vec<Finding>) {
    if inv.unreadable.is_empty() {
        return;
    }
    let dirs: Vec<&str> = inv
        .unreadable
        .iter()
        .filter(|u| u.directory)
        .map(|u| u.path.as_str())
        .collect();
    let denied = inv
        .unreadable
        .iter()
        .any(|u| u.reason.contains("permission"));
    let mut fix = Vec::new();
    if denied {
        fix.push("run `fabperf doctor` as root (or, in a pod, with sysfs and procfs readable: the default container mounts are)".to_string());
    }
    if inv.source.mode == "snapshot" {
        fix.push("re-create the snapshot with `fabperf detect --capture DIR` (it copies regular files only) and check its permissions (`chmod -R u+rX DIR`)".to_string());
    }
    out.push(Finding {
        id: "inventory-incomplete".into(),
        // A whole directory missing means "nothing found there" would be a guess.
        severity: if dirs.is_empty() { Severity::Warning } else { Severity::Error },
        subject: "node".into(),
        summary: if dirs.is_empty() {
            format!("{} inputs could not be read; the values behind them are unknown", inv.unreadable.len())
        } else {
            format!("the inventory is incomplete: {} could not be read, so what is behind it is unknown (not absent)", dirs.join(", "))
        },
        detail: "Findings below are drawn from what could be read; an unreadable directory is not evidence that nothing is there.".into(),
        evidence: inv
            .unreadable
            .iter()
            .map(|u| ev(inv, &u.path, &u.reason))
            .collect(),
        cost_gbps: None,
        fix,
    });
}

fn check_no_rdma(inv: &Inventory, out: &mut Vec<Finding>) {
    if inv.rdma_available
        || inv
            .unreadable
            .iter()
            .any(|u| u.path == "/sys/class/infiniband")
    {
        return;
    }
    out.push(Finding {
        id: "no-rdma".into(),
        severity: Severity::Info,
        subject: "node".into(),
        summary: inv
            .rdma_note
            .clone()
            .unwrap_or_else(|| "no RDMA devices".into()),
        detail: "RDMA tests cannot run here; socket tests (TCP/UDP, IPoIB, CNI paths) still can.".into(),
        evidence: vec![ev(inv, "/sys/class/infiniband", "absent or empty")],
        cost_gbps: None,
        fix: vec![
            "for hardware: install the NIC driver (mlx5_core + mlx5_ib, rdma-core)".into(),
            "to test without hardware: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <netdev>` (Soft-RoCE)".into(),
        ],
    });
}

/// All findings for an inventory, errors first.
pub fn diagnose(inv: &Inventory) -> DoctorReport {
    let mut f = Vec::new();
    check_incomplete(inv, &mut f);
    check_no_rdma(inv, &mut f);
    check_node_ip(inv, &mut f);
    check_pcie(inv, &mut f);
    check_ipoib(inv, &mut f);
    check_ports(inv, &mut f);
    crate::placement::check_numa(inv, &mut f);
    crate::gpu::check(inv, &mut f);
    check_memlock(inv, &mut f);
    check_rp_filter(inv, &mut f);
    check_mtu(inv, &mut f);
    check_netns(inv, &mut f);
    check_clocksource(inv, &mut f);
    sort_findings(&mut f);
    let count = |s: Severity| f.iter().filter(|x| x.severity == s).count();
    DoctorReport {
        schema: DOCTOR_SCHEMA.into(),
        hostname: inv.hostname.clone(),
        source: inv.source.clone(),
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        findings: f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClockSource;

    fn with_clock(current: &str, available: &[&str]) -> Inventory {
        Inventory {
            clocksource: Some(ClockSource {
                current: current.into(),
                available: available.iter().map(|a| a.to_string()).collect(),
            }),
            rdma_available: true,
            ..Inventory::default()
        }
    }

    #[test]
    fn slow_clocksource_is_a_warning_with_the_way_back_to_the_tsc() {
        let fixes = |current: &str, available: &[&str]| {
            let r = diagnose(&with_clock(current, available));
            let f = r
                .with_id("clocksource-slow")
                .next()
                .expect("finding")
                .clone();
            assert_eq!(f.severity, Severity::Warning);
            assert!(f.summary.contains(current), "{}", f.summary);
            assert_eq!(f.evidence[1].value, available.join(" "));
            f.fix.join("\n")
        };
        let fix = fixes("hpet", &["tsc", "hpet", "acpi_pm"]);
        assert!(
            fix.contains("echo tsc >") && fix.contains("tsc=reliable"),
            "{fix}"
        );
        // No TSC to go back to: no advice to select it; kvm-clock instead.
        let fix = fixes("acpi_pm", &["kvm-clock", "acpi_pm"]);
        assert!(!fix.contains("echo tsc >"), "{fix}");
        assert!(fix.contains("echo kvm-clock >"), "{fix}");
    }

    #[test]
    fn fast_or_unknown_clocksource_has_no_finding() {
        for c in ["tsc", "kvm-clock", "arch_sys_counter"] {
            let r = diagnose(&with_clock(c, &[c]));
            assert_eq!(r.with_id("clocksource-slow").count(), 0, "{c}");
        }
        let r = diagnose(&Inventory::default());
        assert_eq!(r.with_id("clocksource-slow").count(), 0);
    }

    fn nd(name: &str, speed: u64, cidr: &str, devtype: Option<&str>) -> Netdev {
        Netdev {
            name: name.into(),
            kind: "ethernet".into(),
            mtu: Some(1500),
            speed_mbps: Some(speed),
            operstate: Some("up".into()),
            ipv4: vec![cidr.into()],
            devtype: devtype.map(str::to_string),
            ..Netdev::default()
        }
    }

    fn node_on(iface: &str, netdevs: Vec<Netdev>) -> Inventory {
        Inventory {
            netdevs,
            node_ip: Some(crate::model::NodeIp {
                address: "192.0.2.10".into(),
                interface: iface.into(),
                source: "default-route".into(),
                ..Default::default()
            }),
            ..Inventory::default()
        }
    }

    #[test]
    fn bridges_overlays_and_host_addresses_are_not_faster_links() {
        // A 1 GbE node with docker0 (a bridge reports its ports' 10000), a VXLAN overlay and
        // cilium_host (a veth with a /32): nothing to move the node address to.
        let inv = node_on(
            "eth0",
            vec![
                nd("eth0", 1000, "192.0.2.10/24", None),
                nd("docker0", 10000, "172.17.0.1/16", Some("bridge")),
                nd("flannel.1", 10000, "10.244.0.0/24", Some("vxlan")),
                nd("cilium_host", 10000, "10.0.0.197/32", None),
            ],
        );
        assert_eq!(diagnose(&inv).with_id("node-ip-slow-link").count(), 0);
        // A second routable link that is faster: the node address is on the slow one.
        let mut inv = inv;
        inv.netdevs
            .push(nd("eth1", 25000, "198.51.100.10/24", None));
        let r = diagnose(&inv);
        let f = r.with_id("node-ip-slow-link").next().expect("finding");
        assert!(f.summary.contains("(eth1) is 25 Gbit/s"), "{}", f.summary);
        // Shaped with tc, a link is as slow as its cap; unknown speed and no RDMA: silent.
        let mut fast = node_on(
            "eth1",
            vec![
                nd("eth0", 1000, "192.0.2.10/24", None),
                nd("eth1", 25000, "198.51.100.10/24", None),
            ],
        );
        fast.netdevs[1].tc_rate_bps = Some(100_000_000);
        fast.netdevs[1].tc_shaping = Some("tbf 1: (root qdisc) rate 100 Mbit/s".into());
        let r = diagnose(&fast);
        let f = r
            .with_id("node-ip-slow-link")
            .next()
            .expect("shaped finding");
        assert!(
            f.summary.contains("0.1 Gbit/s, shaped by tbf"),
            "{}",
            f.summary
        );
        fast.netdevs[1].speed_mbps = None;
        fast.netdevs[1].tc_rate_bps = None;
        assert_eq!(diagnose(&fast).with_id("node-ip-slow-link").count(), 0);
    }

    #[test]
    fn tcp_efficiency_matches_published_goodput() {
        // 1 GbE, MTU 1500: 941.5 Mbit/s plain, 909.0 with VXLAN (50 bytes less payload).
        assert!((1000.0 * tcp_efficiency(1500) - 941.5).abs() < 0.1);
        assert!((1000.0 * tcp_efficiency_encap(1500, 50) - 909.0).abs() < 0.1);
        assert!((1000.0 * tcp_efficiency_encap(1500, 20) - 928.5).abs() < 0.1);
        assert!((1000.0 * tcp_efficiency_encap(1500, 60) - 902.5).abs() < 0.1);
        // 100 GbE: ~99.0 at 9000, ~94.1 at 1500.
        assert!((100.0 * tcp_efficiency(9000) - 99.0).abs() < 0.05);
        assert!((100.0 * tcp_efficiency(1500) - 94.1).abs() < 0.05);
    }
}
