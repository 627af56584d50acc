//! Building the [`Inventory`] from a [`Root`] and the addresses/routes of the same host.

use crate::ipstate::{IpState, RouteEntry};
use crate::memlock::MemlockStatus;
use crate::model::*;
use crate::parse;
use crate::root::Root;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

/// Options of a detection run.
#[derive(Debug, Clone, Default)]
pub struct DetectOptions {
    /// The node address kubelet is told with `--node-ip` (else: the default-route address).
    pub node_ip: Option<IpAddr>,
}

/// Errors that make an inventory impossible (bad input, not a host problem).
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("--root {0}: no such directory")]
    RootMissing(String),
    #[error("--root {0} does not look like a snapshot: it has neither sys/ nor proc/ (create one with `fabperf detect --capture DIR`)")]
    NotASnapshot(String),
    #[error(
        "--node-ip {ip}: no interface of this node has that address (addresses found: {found})"
    )]
    NodeIpNotFound { ip: IpAddr, found: String },
}

/// Addresses and routes as loaded, plus where they came from and what went wrong.
pub(crate) struct IpInput {
    pub state: IpState,
    pub source: String,
    pub warnings: Vec<String>,
}

fn opt_i32(s: Option<String>) -> Option<i32> {
    s.and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|v| *v >= 0)
}

fn pci_from_path(real: &str) -> Option<String> {
    real.rsplit('/')
        .find(|c| parse::is_pci_address(c))
        .map(|s| s.to_string())
}

/// `KEY=value` of a sysfs `uevent` file.
fn uevent(root: &Root, dir: &str, key: &str) -> Option<String> {
    let text = root.read(&format!("{dir}/uevent"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The PCI function behind a `device` link and the directory to read it from.
///
/// Live, `device` is a symlink into `/sys/devices/pci...`, read through
/// `/sys/bus/pci/devices/ADDR`. In a dereferenced copy (`cp -rL`, `tar -h`, `rsync -L`) it is
/// a real directory holding the function's attributes: its `uevent` names the slot
/// (`PCI_SLOT_NAME=`) and the attributes are read from the directory itself.
fn pci_device(root: &Root, device: &str) -> Option<(String, String)> {
    let real = root.canonical(device)?;
    if let Some(a) = pci_from_path(&real) {
        return Some((a.clone(), format!("/sys/bus/pci/devices/{a}")));
    }
    let a = uevent(root, device, "PCI_SLOT_NAME").filter(|a| parse::is_pci_address(a))?;
    Some((a, device.to_string()))
}

/// The driver bound to a device directory: the `driver` link's target, else `uevent`'s
/// `DRIVER=` (a dereferenced copy has a plain `driver` directory).
fn device_driver(root: &Root, dir: &str) -> Option<String> {
    root.link_name(&format!("{dir}/driver"))
        .or_else(|| uevent(root, dir, "DRIVER"))
}

pub(crate) fn read_pci(root: &Root, addr: &str, base: &str) -> PciInfo {
    let vendor_id = root
        .read(&format!("{base}/vendor"))
        .and_then(|v| parse::hex_id(&v))
        .unwrap_or_default();
    let device_id = root
        .read(&format!("{base}/device"))
        .and_then(|v| parse::hex_id(&v))
        .unwrap_or_default();
    let table = parse::pci_model(&vendor_id, &device_id);
    let is_vf = table.map(|t| t.1).unwrap_or(false) || root.is_dir(&format!("{base}/physfn"));
    let class = root
        .read(&format!("{base}/class"))
        .and_then(|v| parse::hex_id(&v));
    let cur_s = root.read(&format!("{base}/current_link_speed"));
    let max_s = root.read(&format!("{base}/max_link_speed"));
    let cur_w = root
        .read(&format!("{base}/current_link_width"))
        .and_then(|v| parse::uint(&v))
        .filter(|w| *w > 0);
    let max_w = root
        .read(&format!("{base}/max_link_width"))
        .and_then(|v| parse::uint(&v))
        .filter(|w| *w > 0);
    let cur_g = cur_s.as_deref().and_then(parse::pcie_speed_gts);
    let max_g = max_s.as_deref().and_then(parse::pcie_speed_gts);
    PciInfo {
        address: addr.to_string(),
        sysfs: base.to_string(),
        vendor_id,
        device_id,
        model: table.map(|t| t.0.to_string()),
        is_vf,
        class,
        driver: device_driver(root, base),
        numa_node: opt_i32(root.read(&format!("{base}/numa_node"))),
        current_link_speed: cur_s,
        max_link_speed: max_s,
        current_speed_gts: cur_g,
        max_speed_gts: max_g,
        current_gen: cur_g.and_then(parse::pcie_gen),
        max_gen: max_g.and_then(parse::pcie_gen),
        current_width: cur_w,
        max_width: max_w,
        ceiling_gbps: parse::pcie_ceiling_gbps(cur_g, cur_w),
        max_ceiling_gbps: parse::pcie_ceiling_gbps(max_g, max_w),
        ..PciInfo::default()
    }
}

fn read_port(root: &Root, dev: &str, port: u32, warnings: &mut Vec<String>) -> RdmaPort {
    let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
    let link_layer = match root.read(&format!("{base}/link_layer")).as_deref() {
        Some("InfiniBand") => "InfiniBand".to_string(),
        Some("Ethernet") => "Ethernet".to_string(),
        _ => "Unknown".to_string(),
    };
    let state = root
        .read(&format!("{base}/state"))
        .and_then(|s| parse::port_state(&s))
        .unwrap_or_else(|| {
            warnings.push(format!("{dev} port {port}: state unreadable"));
            "UNKNOWN".to_string()
        });
    let phys_state = root
        .read(&format!("{base}/phys_state"))
        .and_then(|s| parse::phys_state(&s));
    let rate = root.read(&format!("{base}/rate"));
    let parsed = rate.as_deref().and_then(parse::port_rate);
    if rate.is_some() && parsed.is_none() {
        warnings.push(format!(
            "{dev} port {port}: rate {:?} not understood",
            rate.as_deref().unwrap_or("")
        ));
    }
    let ib = link_layer == "InfiniBand";
    let (lid, sm_lid) = if ib {
        (
            root.read(&format!("{base}/lid")),
            root.read(&format!("{base}/sm_lid")),
        )
    } else {
        (None, None)
    };
    let mut gids = Vec::new();
    for name in root.list(&format!("{base}/gids")) {
        let Ok(index) = name.parse::<u32>() else {
            continue;
        };
        let Some(text) = root.read(&format!("{base}/gids/{name}")) else {
            continue;
        };
        let Some(bytes) = parse::gid_bytes(&text) else {
            warnings.push(format!(
                "{dev} port {port}: GID {index} {text:?} not understood"
            ));
            continue;
        };
        if bytes == [0u8; 16] {
            continue;
        }
        let gid_type = root
            .read(&format!("{base}/gid_attrs/types/{name}"))
            .filter(|t| !t.is_empty());
        let netdev = if ib {
            None
        } else {
            root.read(&format!("{base}/gid_attrs/ndevs/{name}"))
                .filter(|t| !t.is_empty())
        };
        gids.push(GidEntry {
            index,
            gid: text,
            gid_type,
            netdev,
            ipv4: parse::gid_ipv4(&bytes).map(|a| a.to_string()),
            link_local: parse::gid_link_local(&bytes),
        });
    }
    let is_v2 = |g: &GidEntry| g.gid_type.as_deref() == Some("RoCE v2");
    let (roce_v2_ipv4_gid_index, preferred_gid_index) = if link_layer == "Ethernet" {
        let v2v4 = gids
            .iter()
            .find(|g| is_v2(g) && g.ipv4.is_some())
            .map(|g| g.index);
        let rank = |g: &GidEntry| match (is_v2(g), g.ipv4.is_some()) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        };
        let pref = gids
            .iter()
            .filter(|g| !g.link_local)
            .min_by_key(|g| (rank(g), g.index))
            .map(|g| g.index);
        (v2v4, pref)
    } else if ib {
        (None, gids.first().map(|g| g.index))
    } else {
        (None, None)
    };
    let mut netdevs: Vec<String> = Vec::new();
    for g in &gids {
        if let Some(n) = &g.netdev {
            if !netdevs.contains(n) {
                netdevs.push(n.clone());
            }
        }
    }
    RdmaPort {
        port,
        link_layer,
        state,
        phys_state,
        rate_gbps: parsed.as_ref().map(|r| r.gbps),
        lanes: parsed.as_ref().and_then(|r| r.lanes),
        lane_gbps: parsed
            .as_ref()
            .and_then(|r| r.lane_speed.as_deref())
            .and_then(parse::ib_lane_gbps),
        lane_speed: parsed.and_then(|r| r.lane_speed),
        rate,
        lid,
        sm_lid,
        gids,
        roce_v2_ipv4_gid_index,
        preferred_gid_index,
        netdevs,
    }
}

/// What a device is, from its sysfs directory: enough to tell hardware from software.
struct Identity {
    node_type: Option<String>,
    parent_netdev: Option<String>,
    pci: Option<PciInfo>,
    iwarp: bool,
    hca_type: Option<String>,
    hca_model: Option<String>,
    software: bool,
}

/// The rule for software RDMA devices (rxe, siw): no PCI function behind them (live, they sit
/// under `/sys/devices/virtual`), no mlx `hca_type`, and a `parent` netdev, an iWARP node type,
/// an rxe/siw name, or no `hca_type` at all.
fn identity(root: &Root, name: &str) -> Identity {
    let base = format!("/sys/class/infiniband/{name}");
    let r = |f: &str| root.read(&format!("{base}/{f}")).filter(|v| !v.is_empty());
    let node_type = r("node_type");
    let parent_netdev = r("parent");
    let pci = pci_device(root, &format!("{base}/device")).map(|(a, dir)| read_pci(root, &a, &dir));
    let iwarp = node_type.as_deref().is_some_and(|t| t.contains("RNIC"));
    let hca_type = r("hca_type");
    // Without a PCI link (partial sysfs), mlx hca_type `MT<decimal device id>` still names it.
    let hca_model = hca_type
        .as_deref()
        .and_then(|h| h.strip_prefix("MT"))
        .and_then(|d| d.parse::<u32>().ok())
        .and_then(|d| parse::pci_model("15b3", &format!("{d:04x}")))
        .map(|(m, _)| m.to_string());
    let software = pci.is_none()
        && hca_model.is_none()
        && (parent_netdev.is_some()
            || iwarp
            || name.starts_with("rxe")
            || name.starts_with("siw")
            || hca_type.is_none());
    Identity {
        node_type,
        parent_netdev,
        pci,
        iwarp,
        hca_type,
        hca_model,
        software,
    }
}

/// Whether RDMA device `name` of the host at `root` (`/` for this host, or a snapshot) is a
/// software device (rxe, siw), whose protocol work the kernel does on the CPU. `None` when
/// there is no such device.
pub fn rdma_device_is_software(root: &std::path::Path, name: &str) -> Option<bool> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return None;
    }
    let root = if root == std::path::Path::new("/") {
        Root::live()
    } else {
        Root::at(root)
    };
    if !root.is_dir(&format!("/sys/class/infiniband/{name}")) {
        return None;
    }
    Some(identity(&root, name).software)
}

fn read_rdma_device(root: &Root, name: &str, warnings: &mut Vec<String>) -> RdmaDevice {
    let base = format!("/sys/class/infiniband/{name}");
    let r = |f: &str| root.read(&format!("{base}/{f}")).filter(|v| !v.is_empty());
    let Identity {
        node_type,
        parent_netdev,
        pci,
        iwarp,
        hca_type,
        hca_model,
        software,
    } = identity(root, name);
    let driver = match &pci {
        Some(p) => p.driver.clone(),
        None if !software => None,
        None if parent_netdev.is_some() && !iwarp => Some("rdma_rxe".to_string()),
        None if iwarp || name.starts_with("siw") => Some("siw".to_string()),
        None if name.starts_with("rxe") => Some("rdma_rxe".to_string()),
        None => None,
    };
    let model = match (&pci, driver.as_deref()) {
        (Some(p), _) => p.model.clone().or(hca_model),
        (None, _) if !software => hca_model,
        (None, Some("rdma_rxe")) => Some("Soft-RoCE (rxe)".to_string()),
        (None, Some("siw")) => Some("Soft-iWARP (siw)".to_string()),
        _ => None,
    };
    let mut ports = Vec::new();
    let port_names = root.list(&format!("{base}/ports"));
    if port_names.is_empty() {
        warnings.push(format!("{name}: no ports directory ({base}/ports)"));
    }
    for p in port_names {
        if let Ok(n) = p.parse::<u32>() {
            ports.push(read_port(root, name, n, warnings));
        }
    }
    if let (Some(parent), true) = (&parent_netdev, software) {
        for p in &mut ports {
            if !p.netdevs.contains(parent) {
                p.netdevs.push(parent.clone());
            }
        }
    }
    RdmaDevice {
        name: name.to_string(),
        driver,
        software,
        model,
        node_guid: r("node_guid"),
        sys_image_guid: r("sys_image_guid"),
        fw_ver: r("fw_ver"),
        hca_type,
        board_id: r("board_id"),
        node_type,
        numa_node: pci.as_ref().and_then(|p| p.numa_node),
        parent_netdev,
        pci,
        ports,
        rail: None,
    }
}

fn read_netdev(root: &Root, name: &str, ip: &IpState) -> Netdev {
    let base = format!("/sys/class/net/{name}");
    let r = |f: &str| root.read(&format!("{base}/{f}")).filter(|v| !v.is_empty());
    let arphrd = r("type").and_then(|v| parse::uint(&v));
    let kind = match arphrd {
        Some(1) => "ethernet",
        Some(32) => "ipoib",
        Some(772) => "loopback",
        _ => "other",
    }
    .to_string();
    let speed_mbps = r("speed")
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| *v > 0)
        .map(|v| v as u64);
    let (ipoib_mode, ipoib_pkey) = if kind == "ipoib" {
        (r("mode"), r("pkey"))
    } else {
        (None, None)
    };
    let real = root.canonical(&base);
    let virtual_device = real
        .as_deref()
        .is_some_and(|p| p.starts_with("/sys/devices/virtual/"));
    let device = format!("{base}/device");
    let device_real = root.canonical(&device);
    let pci_dev = device_real.as_ref().and_then(|_| pci_device(root, &device));
    let pci_address = pci_dev.as_ref().map(|(a, _)| a.clone());
    let pci = match (&pci_dev, virtual_device) {
        (Some((a, dir)), false) => Some(read_pci(root, a, dir)),
        _ => None,
    };
    let driver = if device_real.is_some() {
        device_driver(root, &device)
    } else {
        None
    };
    let shaping = crate::tc::egress_limit(&ip.tc, name);
    let mut ipv4 = Vec::new();
    let mut ipv6 = Vec::new();
    for a in ip.addrs.iter().filter(|a| a.ifname == name) {
        if a.addr.is_ipv4() {
            ipv4.push(a.cidr());
        } else {
            ipv6.push(a.cidr());
        }
    }
    Netdev {
        name: name.to_string(),
        kind,
        arphrd,
        mtu: r("mtu").and_then(|v| parse::uint(&v)),
        speed_mbps,
        operstate: r("operstate"),
        address: r("address"),
        ipv4,
        ipv6,
        ipoib_mode,
        ipoib_pkey,
        rdma_device: None,
        rdma_port: None,
        driver,
        pci_address,
        pci,
        virtual_device,
        devtype: uevent(root, &base, "DEVTYPE"),
        tc_rate_bps: shaping.as_ref().map(|s| s.rate_bps),
        tc_shaping: shaping.map(|s| s.text),
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    s.split([':', '-'])
        .filter_map(|b| u8::from_str_radix(b, 16).ok())
        .collect()
}

/// Bind netdevs to RDMA ports: GID ndevs and rxe parents (already on the ports), then the IPoIB
/// hardware-address rule, then "same PCI function".
fn bind_netdevs(root: &Root, devs: &mut [RdmaDevice], netdevs: &mut [Netdev]) {
    // 1. From the ports' lists.
    for d in devs.iter() {
        for p in &d.ports {
            for n in &p.netdevs {
                if let Some(nd) = netdevs.iter_mut().find(|x| &x.name == n) {
                    if nd.rdma_device.is_none() {
                        nd.rdma_device = Some(d.name.clone());
                        nd.rdma_port = Some(p.port);
                    }
                }
            }
        }
    }
    // 2. IPoIB: the last 8 bytes of the 20-byte hardware address are the port GUID (= the low
    //    half of GID 0); fall back to the node GUID.
    for nd in netdevs.iter_mut() {
        if nd.kind != "ipoib" || nd.rdma_device.is_some() {
            continue;
        }
        let hw = nd.address.as_deref().map(hex_bytes).unwrap_or_default();
        if hw.len() != 20 {
            continue;
        }
        let guid = &hw[12..20];
        let mut found: Option<(usize, usize)> = None;
        'outer: for (di, d) in devs.iter().enumerate() {
            for (pi, p) in d.ports.iter().enumerate() {
                if p.link_layer != "InfiniBand" {
                    continue;
                }
                if let Some(g0) = p.gids.iter().find(|g| g.index == 0) {
                    if let Some(b) = parse::gid_bytes(&g0.gid) {
                        if &b[8..16] == guid {
                            found = Some((di, pi));
                            break 'outer;
                        }
                    }
                }
            }
        }
        if found.is_none() {
            for (di, d) in devs.iter().enumerate() {
                let ng = d.node_guid.as_deref().map(hex_bytes).unwrap_or_default();
                if ng.len() == 8 && ng.as_slice() == guid {
                    let want = root
                        .read(&format!("/sys/class/net/{}/dev_port", nd.name))
                        .and_then(|v| parse::uint(&v))
                        .map(|v| v + 1)
                        .unwrap_or(1);
                    if let Some(pi) = d.ports.iter().position(|p| p.port == want) {
                        found = Some((di, pi));
                    }
                    break;
                }
            }
        }
        if let Some((di, pi)) = found {
            let d = &mut devs[di];
            nd.rdma_device = Some(d.name.clone());
            nd.rdma_port = Some(d.ports[pi].port);
            if !d.ports[pi].netdevs.contains(&nd.name) {
                d.ports[pi].netdevs.push(nd.name.clone());
            }
        }
    }
    // 3. Same PCI function (covers unreadable ndevs, e.g. inside pods).
    for nd in netdevs.iter_mut() {
        if nd.rdma_device.is_some() {
            continue;
        }
        let Some(addr) = nd.pci_address.clone() else {
            continue;
        };
        if nd.virtual_device {
            continue;
        }
        let Some(d) = devs
            .iter_mut()
            .find(|d| d.pci.as_ref().is_some_and(|p| p.address == addr))
        else {
            continue;
        };
        let want = root
            .read(&format!("/sys/class/net/{}/dev_port", nd.name))
            .and_then(|v| parse::uint(&v))
            .map(|v| v + 1);
        let idx = if d.ports.len() == 1 {
            Some(0)
        } else {
            want.and_then(|w| d.ports.iter().position(|p| p.port == w))
        };
        if let Some(pi) = idx {
            nd.rdma_device = Some(d.name.clone());
            nd.rdma_port = Some(d.ports[pi].port);
            if !d.ports[pi].netdevs.contains(&nd.name) {
                d.ports[pi].netdevs.push(nd.name.clone());
            }
        }
    }
}

/// The network of `addr/prefix` (`192.0.2.0/24`); `None` for a prefix above 32.
fn subnet_of(addr: Ipv4Addr, prefix: u8) -> Option<String> {
    ipnet::Ipv4Net::new(addr, prefix)
        .ok()
        .map(|n| n.trunc().to_string())
}

fn route_text(r: &RouteEntry) -> String {
    let mut s = r.dst.clone();
    if let Some(g) = &r.gateway {
        s.push_str(&format!(" via {g}"));
    }
    if let Some(d) = &r.dev {
        s.push_str(&format!(" dev {d}"));
    }
    if let Some(p) = &r.prefsrc {
        s.push_str(&format!(" src {p}"));
    }
    if let Some(m) = r.metric {
        s.push_str(&format!(" metric {m}"));
    }
    s
}

fn find_node_ip(
    ip: &IpState,
    opts: &DetectOptions,
    warnings: &mut Vec<String>,
) -> Result<Option<NodeIp>, DetectError> {
    if let Some(want) = opts.node_ip {
        let Some(a) = ip.addrs.iter().find(|a| a.addr == want) else {
            let found: Vec<String> = ip
                .addrs
                .iter()
                .filter(|a| a.scope == "global")
                .map(|a| format!("{} on {}", a.addr, a.ifname))
                .collect();
            return Err(DetectError::NodeIpNotFound {
                ip: want,
                found: if found.is_empty() {
                    "none".into()
                } else {
                    found.join(", ")
                },
            });
        };
        let subnet = match a.addr {
            IpAddr::V4(v4) => subnet_of(v4, a.prefixlen),
            IpAddr::V6(_) => None,
        };
        let route = subnet.as_ref().and_then(|s| {
            ip.routes
                .iter()
                .find(|r| &r.dst == s && r.dev.as_deref() == Some(a.ifname.as_str()))
                .map(route_text)
        });
        return Ok(Some(NodeIp {
            address: a.addr.to_string(),
            interface: a.ifname.clone(),
            source: "node-ip-flag".into(),
            route,
            subnet,
        }));
    }
    let Some(def) = ip
        .routes
        .iter()
        .filter(|r| r.dst == "default" && r.dev.is_some())
        .min_by_key(|r| r.metric.unwrap_or(0))
    else {
        warnings.push(
            "no IPv4 default route: kubelet cannot pick a node address by itself (pass --node-ip)"
                .into(),
        );
        return Ok(None);
    };
    let dev = def.dev.clone().unwrap_or_default();
    let on_dev: Vec<_> = ip
        .addrs
        .iter()
        .filter(|a| a.ifname == dev && a.addr.is_ipv4() && a.scope == "global")
        .collect();
    let chosen = def
        .prefsrc
        .as_ref()
        .and_then(|p| on_dev.iter().find(|a| a.addr.to_string() == *p))
        .or_else(|| on_dev.first());
    let Some(a) = chosen else {
        warnings.push(format!(
            "the default route uses {dev}, which has no global IPv4 address"
        ));
        return Ok(None);
    };
    let subnet = match a.addr {
        IpAddr::V4(v4) => subnet_of(v4, a.prefixlen),
        IpAddr::V6(_) => None,
    };
    Ok(Some(NodeIp {
        address: a.addr.to_string(),
        interface: dev,
        source: "default-route".into(),
        route: Some(route_text(def)),
        subnet,
    }))
}

fn conf_values(root: &Root, dir: &str) -> ConfValues {
    let r = |k: &str| {
        root.read(&format!("/proc/sys/net/ipv4/conf/{dir}/{k}"))
            .and_then(|v| parse::uint(&v))
    };
    ConfValues {
        rp_filter: r("rp_filter"),
        arp_ignore: r("arp_ignore"),
        arp_announce: r("arp_announce"),
    }
}

/// Build the inventory.
pub(crate) fn build(
    root: &Root,
    ip: IpInput,
    opts: &DetectOptions,
) -> Result<Inventory, DetectError> {
    let mut warnings = ip.warnings;
    let hostname = root
        .read("/proc/sys/kernel/hostname")
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| {
            warnings.push("hostname unreadable (/proc/sys/kernel/hostname)".into());
            "unknown".into()
        });

    let mut netdevs: Vec<Netdev> = root
        .list("/sys/class/net")
        .iter()
        .filter(|n| !n.starts_with('.') && *n != "bonding_masters")
        .map(|n| read_netdev(root, n, &ip.state))
        .collect();
    if netdevs.is_empty() && root.problem("/sys/class/net").is_none() {
        warnings.push("no network interfaces found (/sys/class/net is missing or empty)".into());
    }

    let ib_core = root.is_dir("/sys/module/ib_core");
    let has_class = root.is_dir("/sys/class/infiniband");
    let mut devs: Vec<RdmaDevice> = root
        .list("/sys/class/infiniband")
        .iter()
        .map(|n| read_rdma_device(root, n, &mut warnings))
        .collect();
    let ib_problem = root.problem("/sys/class/infiniband");
    let rdma_note = if let Some(p) = &ib_problem {
        Some(format!(
            "RDMA devices unknown: {} is unreadable ({}); the inventory is incomplete, not empty (run fabperf as root, or give it read access to sysfs)",
            root.display("/sys/class/infiniband"),
            p.error
        ))
    } else if !devs.is_empty() {
        None
    } else if !has_class && !ib_core {
        Some("no RDMA devices: /sys/class/infiniband is absent and the RDMA core (ib_core) is not loaded; this host has no RDMA stack (load mlx5_ib for ConnectX, or rdma_rxe for Soft-RoCE)".to_string())
    } else if !has_class {
        Some("no RDMA devices: ib_core is loaded but /sys/class/infiniband is absent".to_string())
    } else {
        Some("no RDMA devices: /sys/class/infiniband is empty (no RDMA driver has registered a device: check `lsmod | grep -e mlx5_ib -e rdma_rxe` and dmesg)".to_string())
    };
    bind_netdevs(root, &mut devs, &mut netdevs);
    // Where each NIC sits in the PCI hierarchy and its configuration space (MaxReadReq, the
    // GPU relationships below).
    for d in devs.iter_mut().filter(|d| !d.software) {
        if let Some(p) = d.pci.as_mut() {
            crate::gpu::read_topology(root, p);
        }
    }

    let rdma_netns_mode = root
        .read("/sys/module/ib_core/parameters/netns_mode")
        .and_then(|v| match v.as_str() {
            "Y" | "1" => Some("shared".to_string()),
            "N" | "0" => Some("exclusive".to_string()),
            _ => None,
        });

    let node_ip = find_node_ip(&ip.state, opts, &mut warnings)?;
    let default_routes = ip
        .state
        .routes
        .iter()
        .filter(|r| r.dst == "default")
        .map(|r| RouteInfo {
            dst: r.dst.clone(),
            gateway: r.gateway.clone(),
            dev: r.dev.clone(),
            prefsrc: r.prefsrc.clone(),
            metric: r.metric,
        })
        .collect();

    let mut interfaces = BTreeMap::new();
    for n in &netdevs {
        if root.is_dir(&format!("/proc/sys/net/ipv4/conf/{}", n.name)) {
            interfaces.insert(n.name.clone(), conf_values(root, &n.name));
        }
    }
    let sysctl = Sysctls {
        all: conf_values(root, "all"),
        interfaces,
    };

    let numa_nodes: Vec<crate::model::NumaNode> = crate::placement::numa_nodes(root)
        .into_iter()
        .map(|(node, cpulist)| crate::model::NumaNode { node, cpulist })
        .collect();
    let gpu = crate::gpu::collect(root, &devs, numa_nodes.len());
    let cpus_allowed = root
        .read("/proc/self/status")
        .and_then(|s| crate::placement::allowed_from_status(&s));

    let memlock = match root.read("/proc/self/limits") {
        Some(l) => {
            let status = root.read("/proc/self/status");
            let m = MemlockStatus::from_proc(&l, status.as_deref());
            if m.is_none() {
                warnings.push("memlock: /proc/self/limits has no 'Max locked memory' line".into());
            }
            m
        }
        None => {
            warnings.push("memlock: /proc/self/limits unreadable".into());
            None
        }
    };

    // Absent on non-Linux roots and old fixtures: null, no note.
    let clocksource = root
        .read(&format!("{CLOCKSOURCE_DIR}/current_clocksource"))
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .map(|current| ClockSource {
            current,
            available: root
                .read(&format!("{CLOCKSOURCE_DIR}/available_clocksource"))
                .map(|a| a.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
        });

    let unreadable: Vec<Unreadable> = root
        .problems()
        .into_iter()
        .map(|p| {
            warnings.push(format!(
                "{}: {}; {}",
                root.display(&p.host_path),
                p.error,
                consequence(&p.host_path)
            ));
            Unreadable {
                path: p.host_path,
                directory: p.directory,
                reason: p.error.to_string(),
            }
        })
        .collect();

    let source = Source {
        mode: if root.is_live() { "live" } else { "snapshot" }.into(),
        root: root.base().display().to_string(),
        addresses: ip.source,
    };

    Ok(Inventory {
        schema: SCHEMA.to_string(),
        hostname,
        source,
        rdma_available: !devs.is_empty(),
        rdma_note,
        rdma_netns_mode,
        rdma_devices: devs,
        netdevs,
        node_ip,
        default_routes,
        sysctl,
        memlock,
        clocksource,
        numa_nodes,
        cpus_allowed,
        gpus: gpu.gpus,
        gpu_nic: gpu.gpu_nic,
        pci_bridges: gpu.bridges,
        gpudirect: gpu.gpudirect,
        rail_rule: None,
        unreadable,
        warnings,
    })
}

/// What is unknown when `host_path` cannot be read.
fn consequence(host_path: &str) -> &'static str {
    match host_path {
        "/ip-addr.json" => "addresses unknown",
        "/ip-route.json" => "routes unknown",
        "/fabperf-tc.json" => "egress shaping unknown",
        "/sys/class/infiniband" => "RDMA devices unknown (the inventory is incomplete)",
        "/sys/class/net" => "network interfaces unknown (the inventory is incomplete)",
        _ => "the values read from it are unknown",
    }
}
