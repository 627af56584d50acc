//! RDMA checks: PCIe links narrower or slower than the device needs,
//! IPoIB mode, port state/rate/GIDs, and a node with no RDMA device.

use super::*;

pub(super) fn port_rate_max(d: &RdmaDevice) -> Option<f64> {
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

pub(super) fn check_pcie(inv: &Inventory, out: &mut Vec<Finding>) {
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

pub(super) fn check_ipoib(inv: &Inventory, out: &mut Vec<Finding>) {
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

pub(super) fn check_ports(inv: &Inventory, out: &mut Vec<Finding>) {
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

pub(super) fn check_no_rdma(inv: &Inventory, out: &mut Vec<Finding>) {
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
