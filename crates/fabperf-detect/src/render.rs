//! Human-readable text for `fabperf detect` and `fabperf doctor`.

use crate::doctor::DoctorReport;
use crate::model::Inventory;
use std::fmt::Write;

fn o<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|x| x.to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn gbps(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// The `fabperf detect` report.
pub fn inventory_text(inv: &Inventory) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Node {}  ({}{})",
        inv.hostname,
        if inv.source.mode == "live" {
            "live host".to_string()
        } else {
            format!("snapshot {}", inv.source.root)
        },
        format_args!(", addresses from {}", inv.source.addresses)
    );
    s.push('\n');
    s.push_str("RDMA\n");
    if !inv.rdma_available {
        let _ = writeln!(
            s,
            "  none: {}",
            inv.rdma_note.as_deref().unwrap_or("no RDMA devices")
        );
    }
    if let Some(m) = &inv.rdma_netns_mode {
        let _ = writeln!(s, "  netns mode: {m}");
    }
    for d in &inv.rdma_devices {
        let _ = writeln!(
            s,
            "  {}  {}  driver {}{}",
            d.name,
            d.model.as_deref().unwrap_or("unknown model"),
            o(&d.driver),
            if d.software { "  (software)" } else { "" }
        );
        let mut ids = Vec::new();
        if let Some(g) = &d.node_guid {
            ids.push(format!("node_guid {g}"));
        }
        if let Some(f) = &d.fw_ver {
            ids.push(format!("fw {f}"));
        }
        if let Some(h) = &d.hca_type {
            ids.push(format!("hca_type {h}"));
        }
        if let Some(b) = &d.board_id {
            ids.push(format!("board {b}"));
        }
        if let Some(p) = &d.parent_netdev {
            ids.push(format!("on netdev {p}"));
        }
        if !ids.is_empty() {
            let _ = writeln!(s, "    {}", ids.join(", "));
        }
        if let Some(p) = &d.pci {
            let _ = writeln!(
                s,
                "    PCI {} [{}:{}]{}  NUMA {}",
                p.address,
                p.vendor_id,
                p.device_id,
                if p.is_vf { " VF" } else { "" },
                o(&p.numa_node)
            );
            let _ = writeln!(
                s,
                "    PCIe now {} x{} -> {} Gbit/s usable; capable of {} x{} -> {} Gbit/s",
                p.current_link_speed.as_deref().unwrap_or("unknown"),
                o(&p.current_width),
                p.ceiling_gbps.map(gbps).unwrap_or_else(|| "unknown".into()),
                p.max_link_speed.as_deref().unwrap_or("unknown"),
                o(&p.max_width),
                p.max_ceiling_gbps
                    .map(gbps)
                    .unwrap_or_else(|| "unknown".into()),
            );
        }
        for p in &d.ports {
            let _ = writeln!(
                s,
                "    port {}: {} {} ({}), rate {}{}",
                p.port,
                p.link_layer,
                p.state,
                p.phys_state.as_deref().unwrap_or("phys unknown"),
                p.rate.as_deref().unwrap_or("unknown"),
                if p.link_layer == "InfiniBand" {
                    format!(", lid {} sm_lid {}", o(&p.lid), o(&p.sm_lid))
                } else {
                    String::new()
                }
            );
            if !p.netdevs.is_empty() {
                let _ = writeln!(s, "      netdevs: {}", p.netdevs.join(", "));
            }
            for g in &p.gids {
                let _ = writeln!(
                    s,
                    "      gid {:>3} {}  {:<10} {}{}{}",
                    g.index,
                    g.gid,
                    g.gid_type.as_deref().unwrap_or("type ?"),
                    g.netdev.as_deref().unwrap_or("-"),
                    g.ipv4
                        .as_deref()
                        .map(|a| format!("  {a}"))
                        .unwrap_or_default(),
                    if p.preferred_gid_index == Some(g.index) {
                        "  <- fabperf uses this"
                    } else {
                        ""
                    }
                );
            }
            if p.gids.is_empty() {
                let _ = writeln!(s, "      no valid GIDs");
            }
        }
    }
    s.push('\n');
    s.push_str(&crate::gpu::render_text(inv));
    s.push_str("Netdevs\n");
    let _ = writeln!(
        s,
        "  {:<14} {:<9} {:>6} {:>10} {:<8} {:<22} BEHIND",
        "NAME", "KIND", "MTU", "SPEED", "STATE", "IPv4"
    );
    for n in &inv.netdevs {
        let speed = n
            .speed_mbps
            .map(|v| format!("{v}Mb/s"))
            .unwrap_or_else(|| "unknown".into());
        let mut behind = Vec::new();
        if let (Some(d), Some(p)) = (&n.rdma_device, n.rdma_port) {
            behind.push(format!("{d} port {p}"));
        }
        if let Some(m) = &n.ipoib_mode {
            behind.push(format!(
                "IPoIB {m}{}",
                n.ipoib_pkey
                    .as_deref()
                    .map(|p| format!(" pkey {p}"))
                    .unwrap_or_default()
            ));
        }
        if let Some(pci) = &n.pci_address {
            behind.push(format!("PCI {pci}"));
        }
        if let Some(drv) = &n.driver {
            behind.push(drv.clone());
        } else if n.virtual_device {
            behind.push("virtual".into());
        }
        let _ = writeln!(
            s,
            "  {:<14} {:<9} {:>6} {:>10} {:<8} {:<22} {}",
            n.name,
            n.kind,
            o(&n.mtu),
            speed,
            n.operstate.as_deref().unwrap_or("?"),
            if n.ipv4.is_empty() {
                "-".to_string()
            } else {
                n.ipv4.join(",")
            },
            behind.join(", ")
        );
    }
    for n in &inv.netdevs {
        if let Some(t) = &n.tc_shaping {
            let _ = writeln!(
                s,
                "  {} egress shaped with tc: {t} (carries at most {} Gbit/s)",
                n.name,
                n.effective_gbps().map(gbps).unwrap_or_else(|| "?".into())
            );
        }
    }
    for n in &inv.netdevs {
        let Some(p) = &n.pci else { continue };
        if n.rdma_device.is_some() {
            continue;
        }
        if p.current_link_speed.is_none() {
            let _ = writeln!(
                s,
                "  {} PCI {} [{}:{}]: no PCIe link attributes (conventional PCI, e.g. a VM's virtual NIC)",
                n.name, p.address, p.vendor_id, p.device_id
            );
            continue;
        }
        let _ = writeln!(
            s,
            "  {} PCIe {} x{} -> {} Gbit/s usable (capable of {} x{})",
            n.name,
            p.current_link_speed.as_deref().unwrap_or("unknown"),
            o(&p.current_width),
            p.ceiling_gbps.map(gbps).unwrap_or_else(|| "unknown".into()),
            p.max_link_speed.as_deref().unwrap_or("unknown"),
            o(&p.max_width),
        );
    }
    s.push('\n');
    match &inv.node_ip {
        Some(ni) => {
            let _ = writeln!(
                s,
                "Node IP {} on {} ({}){}",
                ni.address,
                ni.interface,
                ni.source,
                ni.route
                    .as_ref()
                    .map(|r| format!(", route: {r}"))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(s, "Node IP: none (no IPv4 default route; pass --node-ip)");
        }
    }
    let a = &inv.sysctl.all;
    let _ = writeln!(
        s,
        "Sysctls all: rp_filter {} arp_ignore {} arp_announce {}",
        o(&a.rp_filter),
        o(&a.arp_ignore),
        o(&a.arp_announce)
    );
    for (name, v) in &inv.sysctl.interfaces {
        if inv
            .netdev(name)
            .is_some_and(|n| n.ipv4.is_empty() || n.kind == "loopback")
        {
            continue;
        }
        let _ = writeln!(
            s,
            "        {name}: rp_filter {} arp_ignore {} arp_announce {}",
            o(&v.rp_filter),
            o(&v.arp_ignore),
            o(&v.arp_announce)
        );
    }
    match &inv.memlock {
        Some(m) => {
            let _ = writeln!(
                s,
                "Memlock {} (hard {}), CAP_IPC_LOCK {}",
                m.soft_text(),
                m.hard_bytes
                    .map(crate::memlock::human_bytes)
                    .unwrap_or_else(|| "unlimited".into()),
                o(&m.cap_ipc_lock)
            );
        }
        None => {
            let _ = writeln!(s, "Memlock: unknown");
        }
    }
    if let Some(c) = &inv.clocksource {
        let _ = writeln!(
            s,
            "Clocksource {}{} (available: {})",
            c.current,
            if c.is_slow() {
                " (slow: every clock read is a system call)"
            } else {
                ""
            },
            c.available.join(" ")
        );
    }
    if !inv.warnings.is_empty() {
        s.push_str("\nNotes (inputs missing or unreadable):\n");
        for w in &inv.warnings {
            let _ = writeln!(s, "  - {w}");
        }
    }
    s
}

/// The `fabperf doctor` report.
pub fn doctor_text(r: &DoctorReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "fabperf doctor: {} ({})\n",
        r.hostname,
        if r.source.mode == "live" {
            "live host".to_string()
        } else {
            format!("snapshot {}", r.source.root)
        }
    );
    for f in &r.findings {
        let _ = writeln!(
            s,
            "{:<7} {}  [{}]",
            f.severity.as_str().to_ascii_uppercase(),
            f.id,
            f.subject
        );
        let _ = writeln!(s, "        {}", f.summary);
        let _ = writeln!(s, "        {}", f.detail);
        if let Some(c) = f.cost_gbps {
            let _ = writeln!(s, "        cost: up to {} Gbit/s", gbps(c));
        }
        for e in &f.evidence {
            let _ = writeln!(s, "        evidence: {} = {}", e.path, e.value);
        }
        for x in &f.fix {
            let _ = writeln!(s, "        fix: {x}");
        }
        s.push('\n');
    }
    if r.findings.is_empty() {
        s.push_str("no findings\n");
    }
    let _ = writeln!(
        s,
        "{} error(s), {} warning(s), {} info",
        r.errors, r.warnings, r.infos
    );
    s
}
