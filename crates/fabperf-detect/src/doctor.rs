//! `fabperf doctor`: findings about a node's fabric, each with evidence, cost and the fix.
//!
//! [`diagnose`] is a pure function of an [`Inventory`], so it works the same on the live host, a
//! capture, a fixture, or a `detect --json` file loaded from another node.
//!
//! Layout: this file holds the report, [`diagnose`] and the helpers the checks share; the checks
//! live by subject in `doctor/addressing.rs` (node IP, routes, rp_filter, MTU, netns),
//! `doctor/rdma.rs` (PCIe, IPoIB, ports) and `doctor/host.rs` (memlock, clocksource, inventory).

mod addressing;
mod host;
mod rdma;

use addressing::{check_mtu, check_netns, check_node_ip, check_rp_filter};
use host::{check_clocksource, check_incomplete, check_memlock};
use rdma::{check_ipoib, check_no_rdma, check_pcie, check_ports};

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
