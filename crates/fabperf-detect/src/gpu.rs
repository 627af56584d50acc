//! GPUs and their NICs: which GPUs a node has, where each sits in the PCI hierarchy relative to
//! every RDMA device (the `nvidia-smi topo -m` relationships, computed from sysfs alone), the
//! rail each NIC is on, what GPUDirect RDMA needs, and the doctor rules about all of it.
//!
//! * GPUs: PCI functions with vendor 0x10de and class 0x0300 (VGA) or 0x0302 (3D controller) —
//!   never "any NVIDIA function" (NVSwitches are 0x0680 bridges).
//! * The hierarchy: `/sys/bus/pci/devices/<addr>` links into
//!   `/sys/devices/pci<domain>:<bus>/<root port>/<switch up>/<switch down>/.../<addr>`; the first
//!   component is the host bridge, the PCI addresses after it are the bridges above the function
//!   ([`read_topology`]).
//! * Relationship of two functions ([`relation`]): different host bridges → `NODE` when both are
//!   on the same NUMA node, else `SYS`; same host bridge but different root ports → `PHB`; below
//!   one root port, the PCIe switches the path crosses from the bridge where the two paths meet
//!   down to each function are counted (a switch = its upstream port and its downstream ports,
//!   told apart by the PCI Express port type in config space, else by position: below a root port
//!   upstream and downstream ports alternate) → one switch `PIX`, more `PXB`.
//!
//! Layout: this file finds the GPUs and their PCIe relationships; `gpu/rails.rs` assigns rails,
//! `gpu/render.rs` prints the GPU sections of `fabperf detect`, `gpu/doctor.rs` holds the doctor
//! rules.

mod doctor;
mod rails;
mod render;

pub(crate) use doctor::check;
pub use rails::{assign_rails, RailRule};
pub use render::{matrix_text, render_text};

use crate::model::{Gpu, GpuDirect, GpuNic, Inventory, PciInfo, RdmaDevice};
use crate::pcie;
use crate::root::Root;
use fabperf_results::{Evidence, Finding, Severity};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// PCI vendor ID of NVIDIA.
pub const NVIDIA: &str = "10de";

/// GPU classes: `0300xx` VGA controller, `0302xx` 3D controller.
pub fn is_gpu_class(class: &str) -> bool {
    class.starts_with("0300") || class.starts_with("0302")
}

/// A GPU's product from its PCI device ID (the entries of the PCI ID database for the data
/// centre parts; null for the others).
pub fn gpu_model(device: &str) -> Option<&'static str> {
    Some(match device {
        "1db1" => "Tesla V100 SXM2 16GB",
        "1db4" => "Tesla V100 PCIe 16GB",
        "1db5" => "Tesla V100 SXM2 32GB",
        "1db6" => "Tesla V100 PCIe 32GB",
        "20b0" => "A100 SXM4 40GB",
        "20b1" | "20f1" => "A100 PCIe 40GB",
        "20b2" => "A100 SXM4 80GB",
        "20b5" => "A100 PCIe 80GB",
        "20b7" => "A30 PCIe",
        "26b5" => "L40",
        "2322" => "H800 PCIe",
        "2324" => "H800",
        "2330" => "H100 SXM5 80GB",
        "2331" => "H100 PCIe",
        _ => return None,
    })
}

/// PCIe relationship of two functions, closest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Relation {
    /// Below one PCIe switch.
    Pix,
    /// Across several PCIe switches, not through the host bridge.
    Pxb,
    /// Through the PCIe host bridge (the CPU's root complex).
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across NUMA nodes (the inter-socket link).
    Sys,
}

impl Relation {
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Pix => "PIX",
            Relation::Pxb => "PXB",
            Relation::Phb => "PHB",
            Relation::Node => "NODE",
            Relation::Sys => "SYS",
        }
    }

    pub fn parse(s: &str) -> Option<Relation> {
        Some(match s {
            "PIX" => Relation::Pix,
            "PXB" => Relation::Pxb,
            "PHB" => Relation::Phb,
            "NODE" => Relation::Node,
            "SYS" => Relation::Sys,
            _ => return None,
        })
    }

    /// True when peer-to-peer traffic can stay inside PCIe switches (PIX, PXB).
    pub fn below_switches(self) -> bool {
        matches!(self, Relation::Pix | Relation::Pxb)
    }
}

/// `(domain, bus, device, function)` of a PCI address, for ordering.
pub fn pci_key(addr: &str) -> (u32, u32, u32, u32) {
    let mut it = addr.split([':', '.']);
    let mut next = || {
        it.next()
            .and_then(|v| u32::from_str_radix(v, 16).ok())
            .unwrap_or(u32::MAX)
    };
    (next(), next(), next(), next())
}

/// Fill the hierarchy (host bridge, bridges above), the decoded configuration space and the
/// IOMMU group of a PCI function read from `pci.sysfs`.
pub(crate) fn read_topology(root: &Root, pci: &mut PciInfo) {
    let sysfs = pci.sysfs_or_bus();
    if sysfs == format!("/sys/bus/pci/devices/{}", pci.address) {
        if let Some(real) = root.canonical(&sysfs) {
            let comps: Vec<&str> = real.split('/').filter(|c| !c.is_empty()).collect();
            // /sys/devices/pciDDDD:BB/<bridges...>/<addr>
            if comps.len() >= 3 && comps[0] == "sys" && comps[1] == "devices" {
                let rest = &comps[2..];
                if let Some(hb) = rest.iter().position(|c| c.starts_with("pci")) {
                    let below: Vec<&str> = rest[hb + 1..]
                        .iter()
                        .copied()
                        .filter(|c| crate::parse::is_pci_address(c))
                        .collect();
                    if below.last() == Some(&pci.address.as_str()) {
                        pci.host_bridge = Some(rest[hb].to_string());
                        pci.upstream = below[..below.len() - 1]
                            .iter()
                            .map(|s| s.to_string())
                            .collect();
                    }
                }
            }
        }
    }
    pci.config = root
        .read_bytes(&format!("{sysfs}/config"))
        .filter(|b| !b.is_empty())
        .map(|b| pcie::parse(&b));
    pci.iommu_group = root
        .link_name(&format!("{sysfs}/iommu_group"))
        .and_then(|n| n.parse().ok());
    pci.iommu_type = root
        .read(&format!("{sysfs}/iommu_group/type"))
        .filter(|t| !t.is_empty());
}

/// The switch a bridge on a path belongs to, named by its upstream port (see the module docs).
fn switch_key(list: &[String], i: usize, port_type: &dyn Fn(&str) -> Option<u8>) -> String {
    let parent_is_up =
        |i: usize| i >= 1 && matches!(port_type(&list[i - 1]), Some(pcie::TYPE_UPSTREAM) | None);
    match port_type(&list[i]) {
        Some(pcie::TYPE_DOWNSTREAM) if parent_is_up(i) => list[i - 1].clone(),
        Some(_) => list[i].clone(),
        // Unknown: below the root port (index 0) upstream ports sit at odd positions.
        None if i.is_multiple_of(2) && i >= 2 => list[i - 1].clone(),
        None => list[i].clone(),
    }
}

/// The relationship of two PCI functions and the bridges peer-to-peer traffic between them
/// crosses (from the meeting bridge down to each; PIX/PXB only). `None` when the hierarchy is
/// unknown, or the NUMA nodes are unknown on a node with several.
pub fn relation(
    a: &PciInfo,
    b: &PciInfo,
    port_type: &dyn Fn(&str) -> Option<u8>,
    numa_nodes: usize,
) -> Option<(Relation, Vec<String>)> {
    let (ha, hb) = (a.host_bridge.as_ref()?, b.host_bridge.as_ref()?);
    if ha != hb {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x == y => Some((Relation::Node, Vec::new())),
            (Some(_), Some(_)) => Some((Relation::Sys, Vec::new())),
            _ if numa_nodes <= 1 => Some((Relation::Node, Vec::new())),
            _ => None,
        };
    }
    let common = a
        .upstream
        .iter()
        .zip(&b.upstream)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return Some((Relation::Phb, Vec::new()));
    }
    let meet = common - 1;
    let mut bridges: Vec<String> = Vec::new();
    let mut switches: BTreeSet<String> = BTreeSet::new();
    for list in [&a.upstream, &b.upstream] {
        // Index 0 is the root port: part of the host bridge, not a switch.
        for i in meet.max(1)..list.len() {
            if !bridges.contains(&list[i]) {
                bridges.push(list[i].clone());
            }
            switches.insert(switch_key(list, i, port_type));
        }
    }
    let rel = if switches.len() <= 1 {
        Relation::Pix
    } else {
        Relation::Pxb
    };
    Some((rel, bridges))
}

/// A capture's record of the user-space libraries (`fabperf-userspace.json`).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Userspace {
    pub schema: String,
    /// `ibv_reg_dmabuf_mr` is exported by libibverbs (null: libibverbs not loadable).
    pub ibv_reg_dmabuf_mr: Option<bool>,
    /// What was loaded (`libibverbs.so.1`) or why not.
    pub libibverbs: String,
}

/// Schema of `fabperf-userspace.json`.
pub const USERSPACE_SCHEMA: &str = "fabperf.userspace/1";

/// Probe this host's libibverbs: `(exports ibv_reg_dmabuf_mr, what was loaded)`.
pub fn probe_userspace() -> Userspace {
    // SAFETY: loading libibverbs runs its ELF initializers, which only set up its own state
    // (rdma-core's provider list); fabperf's verbs binding loads the same library anyway. The
    // symbol is looked up, never called.
    match unsafe { libloading::Library::new("libibverbs.so.1") } {
        Ok(lib) => {
            // SAFETY: only the address is looked up; the type is never used to call it.
            let has = unsafe { lib.get::<unsafe extern "C" fn()>(b"ibv_reg_dmabuf_mr\0") }.is_ok();
            Userspace {
                schema: USERSPACE_SCHEMA.into(),
                ibv_reg_dmabuf_mr: Some(has),
                libibverbs: "libibverbs.so.1".into(),
            }
        }
        Err(e) => Userspace {
            schema: USERSPACE_SCHEMA.into(),
            ibv_reg_dmabuf_mr: None,
            libibverbs: format!("libibverbs.so.1 not loadable: {e}"),
        },
    }
}

/// Kernel `major.minor` from an osrelease (`6.1.0-28-amd64`).
pub fn kernel_version(osrelease: &str) -> Option<(u32, u32)> {
    let mut it = osrelease.trim().split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor: String = it
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    Some((major, minor.parse().ok()?))
}

fn gpudirect(root: &Root) -> GpuDirect {
    let kernel = root.read("/proc/sys/kernel/osrelease");
    let kernel_dmabuf = kernel
        .as_deref()
        .and_then(kernel_version)
        .map(|v| v >= (5, 12));
    let nvidia_loaded = root.is_dir("/sys/module/nvidia");
    let nvidia_version = root
        .read("/sys/module/nvidia/version")
        .filter(|v| !v.is_empty());
    let nvidia_taint = root.read("/sys/module/nvidia/taint");
    let proc_version = root.read("/proc/driver/nvidia/version");
    let nvidia_open = if !nvidia_loaded {
        None
    } else if proc_version
        .as_deref()
        .is_some_and(|v| v.contains("Open Kernel Module"))
    {
        Some(true)
    } else {
        nvidia_taint.as_deref().map(|t| !t.contains('P'))
    };
    let peermem = ["nvidia_peermem", "nv_peer_mem"]
        .into_iter()
        .find(|m| root.is_dir(&format!("/sys/module/{m}")))
        .map(str::to_string);
    let (ibverbs_dmabuf, ibverbs_source) = if root.is_live() {
        let u = probe_userspace();
        (
            Some(u.ibv_reg_dmabuf_mr.unwrap_or(false)),
            Some(u.libibverbs),
        )
    } else {
        match root
            .try_read_limited("/fabperf-userspace.json", crate::root::MAX_JSON_BYTES)
            .ok()
            .and_then(|b| serde_json::from_slice::<Userspace>(&b).ok())
            .filter(|u| u.schema == USERSPACE_SCHEMA)
        {
            Some(u) => (
                Some(u.ibv_reg_dmabuf_mr.unwrap_or(false)),
                Some(u.libibverbs),
            ),
            None => (None, None),
        }
    };
    let parts = [
        kernel_dmabuf,
        Some(nvidia_loaded),
        nvidia_open,
        ibverbs_dmabuf,
    ];
    let dmabuf = if parts.contains(&Some(false)) {
        Some(false)
    } else if parts.contains(&None) {
        None
    } else {
        Some(true)
    };
    GpuDirect {
        kernel,
        kernel_dmabuf,
        nvidia_loaded,
        nvidia_version,
        nvidia_taint,
        nvidia_open,
        peermem,
        ibverbs_dmabuf,
        ibverbs_source,
        dmabuf,
    }
}

/// What [`collect`] adds to an inventory.
pub(crate) struct GpuPart {
    pub gpus: Vec<Gpu>,
    pub gpu_nic: Vec<GpuNic>,
    pub bridges: Vec<PciInfo>,
    pub gpudirect: Option<GpuDirect>,
}

/// GPUs, their relationships to the RDMA devices, the bridges above both, and the GPUDirect
/// prerequisites. Without GPUs only the PCI device list's vendor and class files are read.
pub(crate) fn collect(root: &Root, devs: &[RdmaDevice], numa_nodes: usize) -> GpuPart {
    let mut addrs: Vec<String> = root
        .list("/sys/bus/pci/devices")
        .into_iter()
        .filter(|a| crate::parse::is_pci_address(a))
        .collect();
    addrs.sort_by_key(|a| pci_key(a));
    let mut gpus = Vec::new();
    for addr in addrs {
        let base = format!("/sys/bus/pci/devices/{addr}");
        let vendor = root
            .read(&format!("{base}/vendor"))
            .and_then(|v| crate::parse::hex_id(&v));
        if vendor.as_deref() != Some(NVIDIA) {
            continue;
        }
        let class = root
            .read(&format!("{base}/class"))
            .and_then(|v| crate::parse::hex_id(&v));
        if !class.as_deref().is_some_and(is_gpu_class) {
            continue;
        }
        let mut pci = crate::collect::read_pci(root, &addr, &base);
        read_topology(root, &mut pci);
        gpus.push(Gpu {
            index: gpus.len() as u32,
            model: gpu_model(&pci.device_id).map(str::to_string),
            pci,
            nearest_rdma: Vec::new(),
            nearest: None,
        });
    }
    if gpus.is_empty() {
        return GpuPart {
            gpus,
            gpu_nic: Vec::new(),
            bridges: Vec::new(),
            gpudirect: None,
        };
    }
    let hw: Vec<(&str, &PciInfo)> = devs
        .iter()
        .filter(|d| !d.software)
        .filter_map(|d| d.pci.as_ref().map(|p| (d.name.as_str(), p)))
        .collect();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for p in gpus
        .iter()
        .map(|g| &g.pci)
        .chain(hw.iter().map(|(_, p)| *p))
    {
        wanted.extend(p.upstream.iter().cloned());
    }
    let mut bridges: Vec<PciInfo> = wanted
        .into_iter()
        .map(|a| {
            let base = format!("/sys/bus/pci/devices/{a}");
            let mut p = crate::collect::read_pci(root, &a, &base);
            read_topology(root, &mut p);
            p
        })
        .collect();
    bridges.sort_by_key(|b| pci_key(&b.address));
    let types: BTreeMap<&str, u8> = bridges
        .iter()
        .filter_map(|b| Some((b.address.as_str(), b.config.as_ref()?.port_type?)))
        .collect();
    let port_type = |a: &str| types.get(a).copied();
    let mut gpu_nic = Vec::new();
    for g in &mut gpus {
        let mut best: Option<Relation> = None;
        let mut rels = Vec::new();
        for (name, p) in &hw {
            let r = relation(&g.pci, p, &port_type, numa_nodes);
            if let Some((rel, _)) = &r {
                best = Some(best.map_or(*rel, |b| b.min(*rel)));
            }
            rels.push((name.to_string(), r.as_ref().map(|x| x.0)));
            gpu_nic.push(GpuNic {
                gpu_index: g.index,
                gpu: g.pci.address.clone(),
                rdma_device: name.to_string(),
                relation: r.as_ref().map(|x| x.0.as_str().to_string()),
                bridges: r.map(|x| x.1).unwrap_or_default(),
            });
        }
        g.nearest = best.map(|b| b.as_str().to_string());
        g.nearest_rdma = rels
            .into_iter()
            .filter(|(_, r)| r.is_some() && *r == best)
            .map(|(n, _)| n)
            .collect();
    }
    // Bridges that matter: those on some GPU's or RDMA device's path (all of them, here).
    bridges.retain(|b| !b.address.is_empty());
    GpuPart {
        gpus,
        gpu_nic,
        bridges,
        gpudirect: Some(gpudirect(root)),
    }
}

// ---- doctor ------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(host: &str, up: &[&str], numa: Option<i32>) -> PciInfo {
        PciInfo {
            address: "0000:ff:00.0".into(),
            host_bridge: Some(host.into()),
            upstream: up.iter().map(|s| s.to_string()).collect(),
            numa_node: numa,
            ..PciInfo::default()
        }
    }

    #[test]
    fn relationships_from_the_hierarchy() {
        let none = |_: &str| None;
        // Two-level switch: RP, U1, D1a, U2, D2a / RP, U1, D1a, U2, D2b → one switch (U2).
        let a = dev("pci0000:15", &["rp", "u1", "d1a", "u2", "d2a"], Some(0));
        let b = dev("pci0000:15", &["rp", "u1", "d1a", "u2", "d2b"], Some(0));
        let (r, br) = relation(&a, &b, &none, 2).unwrap();
        assert_eq!(r, Relation::Pix);
        assert_eq!(br, vec!["u2", "d2a", "d2b"]);
        // Under different second-level switches of the same first-level one → three switches.
        let c = dev("pci0000:15", &["rp", "u1", "d1b", "u3", "d3a"], Some(0));
        assert_eq!(relation(&a, &c, &none, 2).unwrap().0, Relation::Pxb);
        // Different root ports of one host bridge.
        let d = dev("pci0000:15", &["rp2"], Some(0));
        assert_eq!(relation(&a, &d, &none, 2).unwrap().0, Relation::Phb);
        // Different host bridges: NUMA decides.
        let e = dev("pci0000:37", &["rp"], Some(0));
        let f = dev("pci0000:97", &["rp"], Some(1));
        assert_eq!(relation(&a, &e, &none, 2).unwrap().0, Relation::Node);
        assert_eq!(relation(&a, &f, &none, 2).unwrap().0, Relation::Sys);
        let g = dev("pci0000:97", &["rp"], None);
        assert_eq!(relation(&a, &g, &none, 2), None);
        assert_eq!(relation(&a, &g, &none, 1).unwrap().0, Relation::Node);
        // One switch, the two on different downstream ports.
        let h = dev("pci0000:15", &["rp", "u1", "d1a"], Some(0));
        let i = dev("pci0000:15", &["rp", "u1", "d1b"], Some(0));
        assert_eq!(relation(&h, &i, &none, 2).unwrap().0, Relation::Pix);
        // Unknown hierarchy.
        let mut j = h.clone();
        j.host_bridge = None;
        assert_eq!(relation(&h, &j, &none, 2), None);
        // Port types from config space override the position rule: a PCIe-to-PCI bridge
        // (type 7) between the root port and the switch counts as a bridge of its own.
        let types = |a: &str| match a {
            "rp" => Some(4),
            "br" => Some(7),
            "u1" => Some(5),
            "d1a" | "d1b" => Some(6),
            _ => None,
        };
        let k = dev("pci0000:15", &["rp", "br", "u1", "d1a"], Some(0));
        let l = dev("pci0000:15", &["rp", "br", "u1", "d1b"], Some(0));
        assert_eq!(relation(&k, &l, &types, 2).unwrap().0, Relation::Pix);
        let m = dev("pci0000:15", &["rp", "br"], Some(0));
        assert_eq!(relation(&k, &m, &types, 2).unwrap().0, Relation::Pxb);
    }

    #[test]
    fn rail_rules_parse() {
        assert_eq!("pci-order".parse::<RailRule>(), Ok(RailRule::PciOrder));
        assert_eq!("gpu-order".parse::<RailRule>(), Ok(RailRule::GpuOrder));
        let RailRule::Map(m) = "mlx5_0=0, mlx5_3=1".parse::<RailRule>().unwrap() else {
            panic!()
        };
        assert_eq!(m.get("mlx5_3"), Some(&1));
        assert!("mlx5_0".parse::<RailRule>().unwrap_err().contains("no '='"));
        assert!("a=x".parse::<RailRule>().unwrap_err().contains("number"));
        assert!("a=1,a=2".parse::<RailRule>().unwrap_err().contains("twice"));
        assert!("".parse::<RailRule>().unwrap_err().contains("empty"));
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.1.0-28-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("5.12.0"), Some((5, 12)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("7.3.4"), Some((7, 3)));
        assert_eq!(kernel_version("5.15rc1"), Some((5, 15)));
        assert_eq!(kernel_version("garbage"), None);
        assert_eq!(kernel_version(""), None);
    }

    #[test]
    fn classes_and_order() {
        assert!(is_gpu_class("030200"));
        assert!(is_gpu_class("030000"));
        assert!(!is_gpu_class("068000"), "NVSwitch");
        assert!(pci_key("0000:1a:00.0") < pci_key("0000:9b:00.0"));
        assert!(pci_key("0000:9b:00.0") < pci_key("0001:00:00.0"));
        assert_eq!(gpu_model("2330"), Some("H100 SXM5 80GB"));
    }
}
