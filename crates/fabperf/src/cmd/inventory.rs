//! What an agent tells clients about the link it serves on: a short detect
//! inventory in its hello (interface, MTU, port rate, NUMA node, PCIe, RDMA
//! device), so runs and reports know what they measured.

use fabperf_detect::{DetectOptions, Inventory, Netdev};
use fabperf_run::rails::HelloLink;
use serde_json::{json, Value};
use std::net::IpAddr;

/// The netdev holding `ip` (IPv4 or IPv6, by address).
/// A loopback address no interface holds itself (127.0.0.2: the kernel
/// answers the whole 127/8 on `lo`) is the loopback interface's.
fn netdev_with(inv: &Inventory, ip: IpAddr) -> Option<&Netdev> {
    let ip = ip.to_canonical();
    let addrs = |n: &'_ Netdev| -> Vec<IpAddr> {
        n.ipv4
            .iter()
            .chain(n.ipv6.iter())
            .filter_map(|c| c.split('/').next())
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .collect()
    };
    let held = inv.netdevs.iter().find(|n| addrs(n).contains(&ip));
    if held.is_some() || !ip.is_loopback() {
        return held;
    }
    inv.netdevs
        .iter()
        .find(|n| addrs(n).iter().any(|a| a.is_loopback()))
}

/// The first IPv4 address of interface `name`.
pub fn interface_ipv4(inv: &Inventory, name: &str) -> Option<IpAddr> {
    inv.netdevs
        .iter()
        .find(|n| n.name == name)?
        .ipv4
        .iter()
        .filter_map(|c| c.split('/').next()?.parse().ok())
        .next()
}

/// The inventory of the link behind `ip` (the bind or advertised address),
/// or of the node address's link when the agent listens everywhere.
pub fn describe(inv: &Inventory, ip: Option<IpAddr>) -> Value {
    let by_ip = ip
        .filter(|a| !a.is_unspecified())
        .and_then(|a| netdev_with(inv, a));
    let nd = by_ip.or_else(|| {
        let ni = inv.node_ip.as_ref()?;
        inv.netdevs.iter().find(|n| n.name == ni.interface)
    });
    let mut o = json!({
        "hostname": inv.hostname,
        "rdma_available": inv.rdma_available,
    });
    if let Some(ni) = &inv.node_ip {
        o["node_ip"] = json!(ni.address);
        o["node_ip_iface"] = json!(ni.interface);
    }
    // Every link, for runs on rails.
    o["links"] = json!(links(inv));
    if let Some(rule) = &inv.rail_rule {
        o["rail_rule"] = json!(rule);
    }
    let Some(nd) = nd else {
        o["note"] = json!("the interface serving this agent was not found");
        return o;
    };
    o["iface"] = json!(nd.name);
    o["kind"] = json!(nd.kind);
    o["mtu"] = json!(nd.mtu);
    o["speed_mbps"] = json!(nd.speed_mbps);
    o["tc_rate_bps"] = json!(nd.tc_rate_bps);
    // A virtual link's speed is a label (a veth says 10000): reports use no
    // port rate for it but a tc cap.
    o["virtual_link"] = json!(nd.virtual_device);
    o["driver"] = json!(nd.driver);
    if let Some(pci) = &nd.pci {
        o["numa_node"] = json!(pci.numa_node);
        o["pci"] = json!(pci.address);
        o["pcie_gen"] = json!(pci.current_gen);
        o["pcie_width"] = json!(pci.current_width);
    }
    // The port rate: the RDMA port's when the link is an RDMA port, else the
    // netdev's speed (capped by its tc shaping).
    let rdma = nd.rdma_device.as_ref().and_then(|d| {
        let dev = inv.rdma_devices.iter().find(|r| &r.name == d)?;
        let port = dev
            .ports
            .iter()
            .find(|p| Some(p.port) == nd.rdma_port)
            .or_else(|| dev.ports.first())?;
        Some((d.clone(), port))
    });
    let port_rate = match &rdma {
        Some((dev, port)) => {
            o["rdma_device"] = json!(dev);
            o["rdma_port"] = json!(port.port);
            o["link_layer"] = json!(port.link_layer);
            port.rate_gbps
                .map(|r| nd.tc_rate_bps.map_or(r, |t| r.min(t as f64 / 1e9)))
        }
        None => nd.effective_gbps(),
    };
    o["port_rate_gbps"] = json!(port_rate);
    o
}

/// The first IPv4 address of a netdev, else its first IPv6 address that is
/// not link-local.
fn first_addr(nd: &Netdev) -> Option<IpAddr> {
    let parse = |c: &String| c.split('/').next()?.parse::<IpAddr>().ok();
    nd.ipv4.iter().filter_map(parse).next().or_else(|| {
        nd.ipv6
            .iter()
            .filter_map(parse)
            .find(|a| matches!(a, IpAddr::V6(v) if (v.segments()[0] & 0xffc0) != 0xfe80))
    })
}

/// Every link of the node a runner can pair as a rail (`inventory.links` in
/// the hello): each RDMA port, with the interface and address that carry it
/// here when there is one, and each other interface with an address.
pub fn links(inv: &Inventory) -> Vec<HelloLink> {
    let node_iface = inv.node_ip.as_ref().map(|n| n.interface.as_str());
    let mut out = Vec::new();
    let mut covered: Vec<&str> = Vec::new();
    for d in &inv.rdma_devices {
        for p in &d.ports {
            let nd = inv.netdevs.iter().find(|n| {
                matches!(inv.rdma_behind(&n.name), Some((dd, pp))
                    if dd.name == d.name && pp.is_none_or(|pp| pp.port == p.port))
            });
            if let Some(n) = nd {
                covered.push(&n.name);
            }
            let tc = nd.and_then(|n| n.tc_rate_bps).map(|t| t as f64 / 1e9);
            out.push(HelloLink {
                iface: nd.map(|n| n.name.clone()),
                addr: nd.and_then(first_addr),
                rdma_device: Some(d.name.clone()),
                rdma_port: u8::try_from(p.port).ok(),
                link_layer: Some(p.link_layer.clone()),
                state: Some(p.state.clone()),
                port_rate_gbps: p.rate_gbps.map(|r| tc.map_or(r, |t| r.min(t))),
                rail: d.rail,
                node_ip: nd.is_some_and(|n| Some(n.name.as_str()) == node_iface),
            });
        }
    }
    for nd in &inv.netdevs {
        if covered.contains(&nd.name.as_str()) || nd.kind == "loopback" {
            continue;
        }
        let Some(addr) = first_addr(nd) else {
            continue;
        };
        out.push(HelloLink {
            iface: Some(nd.name.clone()),
            addr: Some(addr),
            port_rate_gbps: nd.effective_gbps(),
            node_ip: Some(nd.name.as_str()) == node_iface,
            ..Default::default()
        });
    }
    out.truncate(fabperf_run::rails::MAX_LINKS);
    out
}

/// Detect this node and describe the link behind `ip`; a failed detect is
/// described, not fatal (the agent serves without an inventory).
pub fn for_agent(ip: Option<IpAddr>) -> (Option<Inventory>, Value) {
    match fabperf_detect::detect(None, &DetectOptions::default()) {
        Ok(inv) => {
            let v = describe(&inv, ip);
            (Some(inv), v)
        }
        Err(e) => (None, json!({ "error": format!("detect failed: {e}") })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_link_says_so() {
        let nd = |name: &str, ip: &str, virt: bool| Netdev {
            name: name.into(),
            kind: "ethernet".into(),
            speed_mbps: Some(10_000),
            ipv4: vec![format!("{ip}/24")],
            virtual_device: virt,
            ..Default::default()
        };
        let inv = Inventory {
            netdevs: vec![nd("veth0", "10.9.0.1", true), nd("eth0", "10.9.1.1", false)],
            ..Default::default()
        };
        let v = describe(&inv, Some("10.9.0.1".parse().unwrap()));
        assert_eq!(v["virtual_link"], json!(true));
        let v = describe(&inv, Some("10.9.1.1".parse().unwrap()));
        assert_eq!(v["virtual_link"], json!(false));
        assert_eq!(v["port_rate_gbps"], json!(10.0));
    }

    /// An agent bound to 127.0.0.2 serves on `lo` (which holds 127.0.0.1/8),
    /// not on the node address's link.
    #[test]
    fn a_loopback_address_is_the_loopback_link() {
        let nd = |name: &str, ip: &str, mtu: u32| Netdev {
            mtu: Some(mtu),
            name: name.into(),
            kind: "ethernet".into(),
            ipv4: vec![ip.into()],
            ..Default::default()
        };
        let inv = Inventory {
            netdevs: vec![
                nd("lo", "127.0.0.1/8", 65536),
                nd("eth0", "10.9.1.1/24", 1400),
            ],
            node_ip: Some(fabperf_detect::NodeIp {
                address: "10.9.1.1".into(),
                interface: "eth0".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        for ip in ["127.0.0.2", "127.0.0.1", "::ffff:127.0.0.3"] {
            let v = describe(&inv, Some(ip.parse().unwrap()));
            assert_eq!(v["iface"], json!("lo"), "{ip}");
            assert_eq!(v["mtu"], json!(65536), "{ip}");
        }
        // An address no interface holds and that is not loopback: the node
        // address's link, as before.
        let v = describe(&inv, Some("10.9.7.7".parse().unwrap()));
        assert_eq!(v["iface"], json!("eth0"));
    }
}
