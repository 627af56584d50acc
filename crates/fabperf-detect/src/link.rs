//! The link a test uses, from the node's inventory: the netdev holding the socket's local
//! address (socket tests) or the RDMA device and port chosen (RDMA tests), with what explains
//! its figures: the rate it can carry, the NIC's NUMA node and PCI function.
//!
//! Port rate rules (docs/counters.md):
//! - a physical netdev: its `speed`, capped by its `tc` egress shaping; without a speed, the
//!   rate of the RDMA port behind it;
//! - a virtual netdev (loopback, veth, bridge, ...: it lives under `/sys/devices/virtual`): its
//!   nominal speed (a veth says 10000 Mb/s) is a label, not a limit, so it has no port rate —
//!   unless `tc` caps it, which is a real limit;
//! - a hardware RDMA port: its `rate` (`tc` does not shape what the NIC sends by itself);
//! - a software RDMA device (rxe, siw): the rule of the netdev it runs on; when that netdev is
//!   not visible here (another network namespace), it counts as virtual.

use crate::model::{Inventory, Netdev};
use std::net::IpAddr;

/// Where a port rate comes from.
pub const RATE_RDMA: &str = "rdma port rate";
pub const RATE_SPEED: &str = "netdev speed";
pub const RATE_TC: &str = "tc cap";

/// The link of one end of a test.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestLink {
    /// The netdev (visible in this network namespace).
    pub netdev: Option<String>,
    /// The RDMA device and port.
    pub rdma: Option<(String, u32)>,
    /// The PCI function of the NIC (for its interrupts).
    pub pci: Option<String>,
    /// NUMA node of the NIC (unknown, virtual or -1: `None`).
    pub numa_node: Option<u32>,
    /// What the link carries at most, Gbit/s, and where that comes from.
    pub rate_gbps: Option<f64>,
    pub rate_source: Option<&'static str>,
    /// Loopback, veth, bridge, ... or a software RDMA device on one: no port rate.
    pub virtual_link: bool,
    /// How the link was found, or why it was not (for messages).
    pub note: Option<String>,
}

impl TestLink {
    /// A physical link whose rate is unknown (a NIC without `speed`, e.g. virtio).
    pub fn rate_unknown(&self) -> bool {
        self.rate_gbps.is_none()
            && !self.virtual_link
            && (self.netdev.is_some() || self.rdma.is_some())
    }
}

fn node(n: Option<i32>) -> Option<u32> {
    n.and_then(|n| u32::try_from(n).ok())
}

fn holds(nd: &Netdev, ip: IpAddr) -> bool {
    nd.ipv4
        .iter()
        .chain(nd.ipv6.iter())
        .filter_map(|c| c.split('/').next())
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .any(|a| a == ip)
}

/// The rate rules for a netdev (see the module documentation).
fn netdev_rate(inv: &Inventory, nd: &Netdev) -> (Option<f64>, Option<&'static str>, bool) {
    let tc = nd.tc_rate_bps.map(|r| r as f64 / 1e9).filter(|r| *r > 0.0);
    if nd.virtual_device {
        return (tc, tc.map(|_| RATE_TC), true);
    }
    let speed = nd
        .speed_mbps
        .map(|s| s as f64 / 1000.0)
        .filter(|s| *s > 0.0);
    let speed = speed.map(|s| (s, RATE_SPEED)).or_else(|| {
        let (_, port) = inv.rdma_behind(&nd.name)?;
        port?.rate_gbps.filter(|r| *r > 0.0).map(|r| (r, RATE_RDMA))
    });
    match (speed, tc) {
        (Some((s, _)), Some(t)) if t < s => (Some(t), Some(RATE_TC), false),
        (Some((s, src)), _) => (Some(s), Some(src), false),
        (None, Some(t)) => (Some(t), Some(RATE_TC), false),
        (None, None) => (None, None, false),
    }
}

fn from_netdev(inv: &Inventory, nd: &Netdev) -> TestLink {
    let (rate_gbps, rate_source, virtual_link) = netdev_rate(inv, nd);
    let rdma = inv
        .rdma_behind(&nd.name)
        .and_then(|(d, p)| Some((d.name.clone(), p?.port)));
    TestLink {
        netdev: Some(nd.name.clone()),
        rdma,
        pci: nd
            .pci
            .as_ref()
            .map(|p| p.address.clone())
            .or(nd.pci_address.clone()),
        numa_node: node(nd.pci.as_ref().and_then(|p| p.numa_node)),
        rate_gbps,
        rate_source,
        virtual_link,
        note: None,
    }
}

/// The link holding local address `ip` (a socket's): the netdev with that address; a
/// loopback address is the loopback netdev.
pub fn for_ip(inv: &Inventory, ip: IpAddr) -> TestLink {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    let nd = inv.netdevs.iter().find(|n| holds(n, ip)).or_else(|| {
        ip.is_loopback()
            .then(|| inv.netdevs.iter().find(|n| n.kind == "loopback"))
            .flatten()
    });
    match nd {
        Some(nd) => from_netdev(inv, nd),
        None => TestLink {
            note: Some(format!("no interface of this node holds {ip}")),
            ..TestLink::default()
        },
    }
}

/// The link of RDMA device `dev` port `port`.
pub fn for_rdma(inv: &Inventory, dev: &str, port: u32) -> TestLink {
    let Some(d) = inv.rdma_device(dev) else {
        return TestLink {
            rdma: Some((dev.to_string(), port)),
            note: Some(format!("{dev} is not in this node's inventory")),
            ..TestLink::default()
        };
    };
    let p = d.ports.iter().find(|p| p.port == port);
    // The netdev carrying the port: the port's own list (GID ndevs, IPoIB), else the parent
    // of a software device; only one this namespace can see.
    let nd = p
        .into_iter()
        .flat_map(|p| p.netdevs.iter())
        .chain(d.parent_netdev.iter())
        .find_map(|n| inv.netdev(n));
    let mut l = TestLink {
        netdev: nd.map(|n| n.name.clone()),
        rdma: Some((dev.to_string(), port)),
        pci: d.pci.as_ref().map(|p| p.address.clone()),
        numa_node: node(d.numa_node.or(d.pci.as_ref().and_then(|p| p.numa_node))),
        ..TestLink::default()
    };
    if d.software {
        match nd {
            Some(nd) => {
                let (r, s, v) = netdev_rate(inv, nd);
                l.rate_gbps = r;
                l.rate_source = s;
                l.virtual_link = v;
                l.numa_node = node(nd.pci.as_ref().and_then(|p| p.numa_node));
                l.pci = nd.pci.as_ref().map(|p| p.address.clone());
            }
            None => {
                l.virtual_link = true;
                l.note = Some(format!(
                    "{dev} is a software device whose netdev is not in this network namespace"
                ));
            }
        }
    } else if let Some(r) = p.and_then(|p| p.rate_gbps).filter(|r| *r > 0.0) {
        l.rate_gbps = Some(r);
        l.rate_source = Some(RATE_RDMA);
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PciInfo, RdmaDevice, RdmaPort};

    fn nd(name: &str, ip: &str, speed: Option<u64>, virt: bool) -> Netdev {
        Netdev {
            name: name.into(),
            kind: if name == "lo" { "loopback" } else { "ethernet" }.into(),
            ipv4: vec![ip.into()],
            speed_mbps: speed,
            virtual_device: virt,
            ..Default::default()
        }
    }

    fn inv() -> Inventory {
        let mut eth = nd("ens1f0np0", "10.0.0.1/24", Some(100_000), false);
        eth.pci = Some(PciInfo {
            address: "0000:81:00.0".into(),
            numa_node: Some(1),
            ..Default::default()
        });
        eth.rdma_device = Some("mlx5_0".into());
        eth.rdma_port = Some(1);
        let mut shaped = nd("veth0", "10.77.0.1/24", Some(10_000), true);
        shaped.tc_rate_bps = Some(1_000_000_000);
        let mut virtio = nd("eth0", "192.0.2.2/24", None, false);
        virtio.pci = Some(PciInfo {
            address: "0000:00:03.0".into(),
            numa_node: Some(-1),
            ..Default::default()
        });
        Inventory {
            netdevs: vec![
                nd("lo", "127.0.0.1/8", None, true),
                eth,
                shaped,
                virtio,
                nd("veth9", "10.9.0.1/24", Some(10_000), true),
            ],
            rdma_devices: vec![
                RdmaDevice {
                    name: "mlx5_0".into(),
                    numa_node: Some(1),
                    pci: Some(PciInfo {
                        address: "0000:81:00.0".into(),
                        numa_node: Some(1),
                        ..Default::default()
                    }),
                    ports: vec![RdmaPort {
                        port: 1,
                        rate_gbps: Some(200.0),
                        netdevs: vec!["ens1f0np0".into()],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                RdmaDevice {
                    name: "rxe0".into(),
                    software: true,
                    parent_netdev: Some("veth0".into()),
                    ports: vec![RdmaPort {
                        port: 1,
                        rate_gbps: Some(10.0),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                RdmaDevice {
                    name: "rxe1".into(),
                    software: true,
                    parent_netdev: Some("veth1".into()),
                    ports: vec![RdmaPort {
                        port: 1,
                        rate_gbps: Some(10.0),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn socket_links() {
        let inv = inv();
        let l = for_ip(&inv, "10.0.0.1".parse().unwrap());
        assert_eq!(l.netdev.as_deref(), Some("ens1f0np0"));
        assert_eq!(
            (l.rate_gbps, l.rate_source),
            (Some(100.0), Some(RATE_SPEED))
        );
        assert_eq!(l.numa_node, Some(1));
        assert_eq!(l.pci.as_deref(), Some("0000:81:00.0"));
        assert_eq!(l.rdma, Some(("mlx5_0".into(), 1)));
        // IPv4-mapped IPv6 (a dual-stack socket) is the same address.
        let m = for_ip(&inv, "::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(m.netdev.as_deref(), Some("ens1f0np0"));
        // Loopback: any 127/8 address, virtual, no rate.
        let l = for_ip(&inv, "127.0.0.5".parse().unwrap());
        assert_eq!(l.netdev.as_deref(), Some("lo"));
        assert!(l.virtual_link && l.rate_gbps.is_none() && !l.rate_unknown());
        // An unshaped veth: its 10000 Mb/s is a label.
        let l = for_ip(&inv, "10.9.0.1".parse().unwrap());
        assert!(l.virtual_link && l.rate_gbps.is_none());
        // A shaped veth: the tc cap is a real limit.
        let l = for_ip(&inv, "10.77.0.1".parse().unwrap());
        assert_eq!((l.rate_gbps, l.rate_source), (Some(1.0), Some(RATE_TC)));
        // virtio without a speed, NUMA -1: physical, rate unknown, no node.
        let l = for_ip(&inv, "192.0.2.2".parse().unwrap());
        assert!(l.rate_unknown() && l.numa_node.is_none());
        // Not on this node.
        let l = for_ip(&inv, "203.0.113.9".parse().unwrap());
        assert!(l.netdev.is_none() && l.note.unwrap().contains("no interface"));
    }

    #[test]
    fn rdma_links() {
        let inv = inv();
        let l = for_rdma(&inv, "mlx5_0", 1);
        assert_eq!((l.rate_gbps, l.rate_source), (Some(200.0), Some(RATE_RDMA)));
        assert_eq!(l.netdev.as_deref(), Some("ens1f0np0"));
        assert_eq!(l.numa_node, Some(1));
        // rxe on a shaped veth: the veth's rule, not rxe's made-up 10 Gb/s.
        let l = for_rdma(&inv, "rxe0", 1);
        assert_eq!((l.rate_gbps, l.rate_source), (Some(1.0), Some(RATE_TC)));
        assert!(l.virtual_link);
        assert_eq!(l.netdev.as_deref(), Some("veth0"));
        // rxe whose veth is in another namespace: virtual, no rate.
        let l = for_rdma(&inv, "rxe1", 1);
        assert!(l.virtual_link && l.rate_gbps.is_none() && l.netdev.is_none());
        // Absent device or port.
        let l = for_rdma(&inv, "mlx5_9", 1);
        assert!(l.note.unwrap().contains("not in this node's inventory"));
        let l = for_rdma(&inv, "mlx5_0", 2);
        assert!(l.rate_gbps.is_none() && l.rate_unknown());
    }
}
