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

/// How rails are assigned to RDMA devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RailRule {
    /// Hardware RDMA devices (physical functions) in PCI address order: rail 0, 1, ...
    PciOrder,
    /// Rail i is the RDMA device nearest to GPU i (GPUs in PCI address order), where that
    /// device is unique and below the GPU's PCIe switches (PIX/PXB); other devices get none.
    GpuOrder,
    /// Explicit: RDMA device (or netdev) name → rail.
    Map(BTreeMap<String, u32>),
}

impl std::str::FromStr for RailRule {
    type Err = String;
    fn from_str(s: &str) -> Result<RailRule, String> {
        match s {
            "pci-order" => return Ok(RailRule::PciOrder),
            "gpu-order" => return Ok(RailRule::GpuOrder),
            _ => {}
        }
        let mut m = BTreeMap::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let Some((name, rail)) = part.split_once('=') else {
                return Err(format!(
                    "rails {s:?}: use pci-order, gpu-order, or DEVICE=RAIL,... (e.g. mlx5_0=0,mlx5_3=1); {part:?} has no '='"
                ));
            };
            let rail: u32 = rail
                .trim()
                .parse()
                .map_err(|_| format!("rails: {part:?}: the rail must be a number 0, 1, ..."))?;
            if m.insert(name.trim().to_string(), rail).is_some() {
                return Err(format!("rails: {name:?} is given twice"));
            }
        }
        if m.is_empty() {
            return Err("rails: empty; use pci-order, gpu-order or DEVICE=RAIL,...".into());
        }
        Ok(RailRule::Map(m))
    }
}

impl RailRule {
    pub fn name(&self) -> &'static str {
        match self {
            RailRule::PciOrder => "pci-order",
            RailRule::GpuOrder => "gpu-order",
            RailRule::Map(_) => "map",
        }
    }
}

/// Number the rails of the inventory's RDMA devices by `rule` (and record the rule). An explicit
/// map naming a device (or netdev) the node does not have is an error, and so is a map that puts
/// two devices on one rail.
pub fn assign_rails(inv: &mut Inventory, rule: &RailRule) -> Result<(), String> {
    for d in &mut inv.rdma_devices {
        d.rail = None;
    }
    match rule {
        RailRule::PciOrder => {
            let mut hw: Vec<(String, String)> = inv
                .rdma_devices
                .iter()
                .filter(|d| !d.software)
                .filter_map(|d| {
                    let p = d.pci.as_ref().filter(|p| !p.is_vf)?;
                    Some((p.address.clone(), d.name.clone()))
                })
                .collect();
            hw.sort_by_key(|(a, n)| (pci_key(a), n.clone()));
            for (rail, (_, name)) in hw.iter().enumerate() {
                if let Some(d) = inv.rdma_devices.iter_mut().find(|d| &d.name == name) {
                    d.rail = Some(rail as u32);
                }
            }
        }
        RailRule::GpuOrder => {
            let picks: Vec<(u32, String)> = inv
                .gpus
                .iter()
                .filter(|g| {
                    g.nearest_rdma.len() == 1
                        && g.nearest
                            .as_deref()
                            .and_then(Relation::parse)
                            .is_some_and(Relation::below_switches)
                })
                .map(|g| (g.index, g.nearest_rdma[0].clone()))
                .collect();
            for (rail, name) in picks {
                if let Some(d) = inv.rdma_devices.iter_mut().find(|d| d.name == name) {
                    if d.rail.is_none() {
                        d.rail = Some(rail);
                    }
                }
            }
        }
        RailRule::Map(m) => {
            let mut seen: BTreeMap<u32, String> = BTreeMap::new();
            for (name, rail) in m {
                let dev = if inv.rdma_device(name).is_some() {
                    name.clone()
                } else if let Some((d, _)) = inv.rdma_behind(name) {
                    d.name.clone()
                } else {
                    let known: Vec<&str> =
                        inv.rdma_devices.iter().map(|d| d.name.as_str()).collect();
                    return Err(format!(
                        "rails: no RDMA device or netdev named {name:?} on {} (RDMA devices: {})",
                        inv.hostname,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ));
                };
                if let Some(other) = seen.insert(*rail, dev.clone()) {
                    if other != dev {
                        return Err(format!(
                            "rails: {other} and {dev} are both given rail {rail}; one NIC per rail"
                        ));
                    }
                }
                if let Some(d) = inv.rdma_devices.iter_mut().find(|d| d.name == dev) {
                    d.rail = Some(*rail);
                }
            }
        }
    }
    inv.rail_rule = Some(rule.name().to_string());
    Ok(())
}

fn link_text(p: &PciInfo, current: bool) -> String {
    let (s, w) = if current {
        (&p.current_link_speed, p.current_width)
    } else {
        (&p.max_link_speed, p.max_width)
    };
    match (s, w) {
        (Some(s), Some(w)) => format!("{} x{w}", s.trim_end_matches(" PCIe")),
        _ => "unknown".into(),
    }
}

/// The GPU part of `fabperf detect`: GPUs, the GPU × RDMA device matrix, rails, GPUDirect.
pub fn render_text(inv: &Inventory) -> String {
    let mut s = String::new();
    if inv.gpus.is_empty() {
        return s;
    }
    s.push_str("GPUs\n");
    let _ = writeln!(
        s,
        "  {:<4} {:<13} {:<16} {:>4}  {:<14} {:<14} {:<8} NEAREST RDMA",
        "GPU", "PCI", "MODEL", "NUMA", "PCIe NOW", "PCIe MAX", "IOMMU"
    );
    for g in &inv.gpus {
        let model = g
            .model
            .clone()
            .unwrap_or_else(|| format!("[{}:{}]", g.pci.vendor_id, g.pci.device_id));
        let near = if g.nearest_rdma.is_empty() {
            "none".to_string()
        } else {
            format!(
                "{} ({})",
                g.nearest_rdma.join(", "),
                g.nearest.as_deref().unwrap_or("?")
            )
        };
        let _ = writeln!(
            s,
            "  {:<4} {:<13} {:<16} {:>4}  {:<14} {:<14} {:<8} {}",
            format!("GPU{}", g.index),
            g.pci.address,
            model,
            g.pci
                .numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".into()),
            link_text(&g.pci, true),
            link_text(&g.pci, false),
            g.pci.iommu_type.as_deref().unwrap_or("-"),
            near
        );
    }
    s.push('\n');
    s.push_str(&matrix_text(inv));
    let railed: Vec<String> = inv
        .rdma_devices
        .iter()
        .filter_map(|d| d.rail.map(|r| format!("{} rail {r}", d.name)))
        .collect();
    if let Some(rule) = &inv.rail_rule {
        let _ = writeln!(
            s,
            "Rails ({rule}): {}",
            if railed.is_empty() {
                "none assigned".to_string()
            } else {
                railed.join(", ")
            }
        );
    }
    if let Some(g) = &inv.gpudirect {
        let yn = |v: Option<bool>| match v {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        let _ = writeln!(
            s,
            "GPUDirect RDMA: peermem {}; dma-buf {} (kernel {} >= 5.12: {}, NVIDIA {} open kernel module: {}, libibverbs ibv_reg_dmabuf_mr: {})",
            g.peermem
                .as_deref()
                .map(|m| format!("{m} loaded"))
                .unwrap_or_else(|| "not loaded".into()),
            yn(g.dmabuf),
            g.kernel.as_deref().unwrap_or("?"),
            yn(g.kernel_dmabuf),
            if g.nvidia_loaded {
                g.nvidia_version.as_deref().unwrap_or("driver")
            } else {
                "driver not loaded,"
            },
            yn(g.nvidia_open),
            yn(g.ibverbs_dmabuf),
        );
    }
    s.push('\n');
    s
}

/// The `nvidia-smi topo -m`-style table: one row per GPU, one column per RDMA device.
pub fn matrix_text(inv: &Inventory) -> String {
    let mut s = String::new();
    let nics: Vec<&str> = {
        let mut seen: Vec<&str> = Vec::new();
        for l in &inv.gpu_nic {
            if !seen.contains(&l.rdma_device.as_str()) {
                seen.push(&l.rdma_device);
            }
        }
        seen
    };
    if nics.is_empty() {
        s.push_str("GPU x RDMA: no hardware RDMA device\n");
        return s;
    }
    let w = nics.iter().map(|n| n.len()).max().unwrap_or(4).max(4) + 2;
    s.push_str("GPU x RDMA  PIX one PCIe switch, PXB several switches, PHB host bridge, NODE across host bridges of a NUMA node, SYS across NUMA nodes\n");
    let _ = write!(s, "  {:<6}", "");
    for n in &nics {
        let _ = write!(s, "{n:>w$}");
    }
    s.push('\n');
    for g in &inv.gpus {
        let _ = write!(s, "  {:<6}", format!("GPU{}", g.index));
        for n in &nics {
            let r = inv
                .gpu_nic
                .iter()
                .find(|l| l.gpu_index == g.index && l.rdma_device == *n)
                .and_then(|l| l.relation.clone())
                .unwrap_or_else(|| "?".into());
            let _ = write!(s, "{r:>w$}");
        }
        s.push('\n');
    }
    let railed: Vec<(&str, u32)> = nics
        .iter()
        .filter_map(|n| inv.rdma_device(n).and_then(|d| d.rail).map(|r| (*n, r)))
        .collect();
    if !railed.is_empty() {
        let _ = write!(s, "  {:<6}", "rail");
        for n in &nics {
            let r = railed
                .iter()
                .find(|(x, _)| x == n)
                .map(|(_, r)| r.to_string())
                .unwrap_or_else(|| "-".into());
            let _ = write!(s, "{r:>w$}");
        }
        s.push('\n');
    }
    s
}

// ---- doctor ------------------------------------------------------------------------------------

fn ev(inv: &Inventory, host_path: &str, value: impl ToString) -> Evidence {
    Evidence {
        path: inv.path(host_path),
        value: value.to_string(),
    }
}

fn config_ev(inv: &Inventory, p: &PciInfo, what: String) -> Evidence {
    ev(inv, &format!("{}/config", p.sysfs_or_bus()), what)
}

fn hw_nics(inv: &Inventory) -> impl Iterator<Item = (&RdmaDevice, &PciInfo)> {
    inv.rdma_devices
        .iter()
        .filter(|d| !d.software)
        .filter_map(|d| d.pci.as_ref().map(|p| (d, p)))
}

/// The GPU rules of `fabperf doctor` (and the NIC's MaxReadReq, judged on every node).
pub(crate) fn check(inv: &Inventory, out: &mut Vec<Finding>) {
    check_mrrs(inv, out);
    if inv.gpus.is_empty() {
        return;
    }
    check_gpudirect(inv, out);
    check_acs(inv, out);
    check_iommu(inv, out);
    check_gpu_links(inv, out);
    check_sys(inv, out);
}

fn check_mrrs(inv: &Inventory, out: &mut Vec<Finding>) {
    let gpu_node = !inv.gpus.is_empty();
    for (d, p) in hw_nics(inv) {
        let Some(c) = &p.config else { continue };
        let (Some(mrrs), Some(cap)) = (c.max_read_request, c.pcie_cap) else {
            continue;
        };
        if mrrs >= 4096 || p.is_vf {
            continue;
        }
        out.push(Finding {
            id: "pcie-mrrs-low".into(),
            severity: if gpu_node { Severity::Warning } else { Severity::Info },
            subject: format!("{} ({})", p.address, d.name),
            summary: format!(
                "{} PCIe Max_Read_Request_Size is {mrrs} bytes, not 4096",
                d.name
            ),
            detail: format!(
                "Every RDMA send, write source and read response is fetched by the NIC with PCIe read requests of at most this size; small requests mean more requests and completions in flight for the same bytes. NVIDIA's ConnectX tuning guides set 4096{}.",
                if gpu_node {
                    ", and with GPUDirect RDMA the reads go to GPU memory across the PCIe switch, where the request size matters most"
                } else {
                    "; on nodes that already reach line rate it costs little"
                }
            ),
            evidence: vec![config_ev(
                inv,
                p,
                format!(
                    "Device Control 0x{:04x} at PCIe capability 0x{cap:02x}+0x08: MaxReadReq {mrrs} bytes",
                    c.devctl.unwrap_or(0)
                ),
            )],
            cost_gbps: None,
            fix: vec![
                format!(
                    "`setpci -s {} CAP_EXP+0x08.w=5000:7000` (MaxReadReq 4096 until the next reboot or driver reset; run it while no test runs)",
                    p.address
                ),
                "persistently: the BIOS/firmware PCIe setting for Max Read Request (or a boot-time unit running the setpci line)".into(),
            ],
        });
    }
}

fn check_gpudirect(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(g) = &inv.gpudirect else { return };
    if hw_nics(inv).next().is_none() || g.peermem.is_some() || g.dmabuf == Some(true) {
        return;
    }
    let yn = |v: Option<bool>, yes: &str, no: &str| match v {
        Some(true) => yes.to_string(),
        Some(false) => no.to_string(),
        None => "unknown".to_string(),
    };
    let mut evidence = vec![
        ev(inv, "/sys/module/nvidia_peermem", "absent"),
        ev(inv, "/sys/module/nv_peer_mem", "absent"),
        ev(
            inv,
            "/proc/sys/kernel/osrelease",
            format!(
                "{} ({})",
                g.kernel.as_deref().unwrap_or("unreadable"),
                yn(g.kernel_dmabuf, ">= 5.12", "older than 5.12")
            ),
        ),
    ];
    if g.nvidia_loaded {
        evidence.push(ev(
            inv,
            "/sys/module/nvidia/taint",
            format!(
                "{} ({})",
                g.nvidia_taint.as_deref().unwrap_or("unreadable"),
                yn(
                    g.nvidia_open,
                    "open GPU kernel module",
                    "proprietary GPU kernel module: no dma-buf export"
                )
            ),
        ));
    } else {
        evidence.push(ev(
            inv,
            "/sys/module/nvidia",
            "absent: the NVIDIA driver is not loaded",
        ));
    }
    evidence.push(Evidence {
        path: match (&g.ibverbs_source, inv.source.mode.as_str()) {
            (None, _) => "libibverbs (not recorded in this snapshot)".into(),
            (Some(l), "snapshot") => format!("{} ({l})", inv.path("/fabperf-userspace.json")),
            (Some(l), _) => format!("dlopen {l}"),
        },
        value: format!(
            "ibv_reg_dmabuf_mr {}",
            yn(
                g.ibverbs_dmabuf,
                "exported",
                "missing (rdma-core older than 34, or no libibverbs)"
            )
        ),
    });
    let mut missing = Vec::new();
    if !g.nvidia_loaded {
        missing.push("the NVIDIA kernel module is not loaded");
    }
    if g.kernel_dmabuf == Some(false) {
        missing.push("the kernel is older than 5.12");
    }
    if g.nvidia_open == Some(false) {
        missing.push("the GPU kernel module is the proprietary one");
    }
    if g.ibverbs_dmabuf == Some(false) {
        missing.push("libibverbs has no ibv_reg_dmabuf_mr");
    }
    let proven = g.dmabuf == Some(false);
    let mut fix = Vec::new();
    if !g.nvidia_loaded {
        fix.push("load the NVIDIA driver (`modprobe nvidia`; install it if missing)".into());
    }
    fix.push("peermem: `modprobe nvidia_peermem` (it ships with the NVIDIA driver, R470 and later, and needs the RDMA core loaded); keep it with `echo nvidia_peermem > /etc/modules-load.d/nvidia-peermem.conf`".into());
    if g.nvidia_open == Some(false) {
        fix.push("dma-buf: install the open GPU kernel modules of the same driver branch (R515 or later: the `-open` driver packages such as nvidia-driver-550-open, or the open-module choice of NVIDIA's .run installer)".into());
    }
    if g.kernel_dmabuf == Some(false) {
        fix.push(
            "dma-buf: a kernel 5.12 or later (the RDMA core imports dma-bufs from 5.12)".into(),
        );
    }
    if g.ibverbs_dmabuf != Some(true) {
        fix.push("dma-buf: rdma-core 34 or later (libibverbs with ibv_reg_dmabuf_mr)".into());
    }
    out.push(Finding {
        id: "gpudirect-unavailable".into(),
        severity: if proven { Severity::Error } else { Severity::Warning },
        subject: "node".into(),
        summary: if proven {
            format!(
                "no GPUDirect RDMA path: nvidia_peermem is not loaded and dma-buf cannot work ({})",
                missing.join("; ")
            )
        } else {
            "GPUDirect RDMA unverified: nvidia_peermem is not loaded and part of the dma-buf path could not be read".into()
        },
        detail: "An RDMA NIC reaches GPU memory either through the peermem module (ibv_reg_mr on a GPU pointer) or through dma-buf (cuMemGetHandleForAddressRange exports the memory, ibv_reg_dmabuf_mr registers it: kernel 5.12+, the open GPU kernel module, rdma-core 34+, a provider that imports dma-bufs such as mlx5). Without either, `ib_write_bw --use_cuda`, NCCL's GDR and `fabperf rdma-bw --mem cuda` fall back to host memory or fail.".into(),
        evidence,
        cost_gbps: None,
        fix,
    });
}

fn check_acs(inv: &Inventory, out: &mut Vec<Finding>) {
    let bridges: BTreeMap<&str, &PciInfo> = inv
        .pci_bridges
        .iter()
        .map(|b| (b.address.as_str(), b))
        .collect();
    for g in &inv.gpus {
        for link in inv.gpu_nic.iter().filter(|l| {
            l.gpu_index == g.index
                && g.nearest_rdma.contains(&l.rdma_device)
                && l.relation
                    .as_deref()
                    .and_then(Relation::parse)
                    .is_some_and(Relation::below_switches)
        }) {
            let on: Vec<(&PciInfo, u16, u16)> = link
                .bridges
                .iter()
                .filter_map(|a| bridges.get(a.as_str()).copied())
                .filter_map(|b| {
                    let c = b.config.as_ref()?;
                    let ctrl = c.acs_ctrl?;
                    pcie::acs_redirects(ctrl).then_some((b, ctrl, c.acs_cap_offset?))
                })
                .collect();
            if on.is_empty() {
                continue;
            }
            let names: Vec<&str> = on.iter().map(|(b, _, _)| b.address.as_str()).collect();
            out.push(Finding {
                id: "pcie-acs-redirect".into(),
                severity: Severity::Error,
                subject: format!("GPU{} {} <-> {}", g.index, g.pci.address, link.rdma_device),
                summary: format!(
                    "ACS P2P redirect is on at {} between GPU{} and {} ({})",
                    names.join(", "),
                    g.index,
                    link.rdma_device,
                    link.relation.as_deref().unwrap_or("?")
                ),
                detail: "With Access Control Services P2P Request/Completion Redirect enabled on a switch port, the GPU's and the NIC's peer-to-peer traffic is sent up to the root complex instead of across the switch: GPUDirect RDMA crawls at a fraction of the link rate or fails. A kernel that runs an IOMMU enables ACS on every port at boot.".into(),
                evidence: on
                    .iter()
                    .map(|(b, ctrl, off)| {
                        config_ev(
                            inv,
                            b,
                            format!(
                                "{} ACS Control 0x{ctrl:04x} at 0x{off:03x}+0x06: {}",
                                b.config
                                    .as_ref()
                                    .and_then(|c| c.port_type)
                                    .map(pcie::port_type_name)
                                    .unwrap_or("bridge"),
                                pcie::acs_ctrl_text(*ctrl)
                            ),
                        )
                    })
                    .collect(),
                cost_gbps: None,
                fix: vec![
                    format!(
                        "now (until reboot): {}",
                        names
                            .iter()
                            .map(|a| format!("`setpci -s {a} ECAP_ACS+0x6.w=0000`"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    format!(
                        "at boot: kernel parameter `pci=disable_acs_redir={}` (clears request/completion redirect and egress control on those ports), or the BIOS setting that disables ACS",
                        names.join(";")
                    ),
                    "verify: `lspci -vvv -s <port> | grep ACSCtl` shows ReqRedir- CmpltRedir-".into(),
                ],
            });
        }
    }
}

fn check_iommu(inv: &Inventory, out: &mut Vec<Finding>) {
    let translated = |t: &Option<String>| matches!(t.as_deref(), Some("DMA") | Some("DMA-FQ"));
    let mut who: Vec<(String, &PciInfo)> = inv
        .gpus
        .iter()
        .filter(|g| translated(&g.pci.iommu_type))
        .map(|g| (format!("GPU{}", g.index), &g.pci))
        .collect();
    who.extend(
        hw_nics(inv)
            .filter(|(_, p)| translated(&p.iommu_type))
            .map(|(d, p)| (d.name.clone(), p)),
    );
    if who.is_empty() {
        return;
    }
    let groups: BTreeSet<u32> = who.iter().filter_map(|(_, p)| p.iommu_group).collect();
    out.push(Finding {
        id: "iommu-translated".into(),
        severity: Severity::Warning,
        subject: "node".into(),
        summary: format!(
            "the IOMMU translates DMA of {} (group type DMA/DMA-FQ, not passthrough)",
            who.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ),
        detail: "In translated mode every peer-to-peer transfer between a NIC and a GPU goes through the IOMMU (and ACS sends it up to the root complex): GPUDirect RDMA slows down or fails. GPU nodes run the IOMMU in passthrough (`iommu=pt`) or off.".into(),
        evidence: who
            .iter()
            .map(|(n, p)| {
                ev(
                    inv,
                    &p.iommu_group
                        .map(|g| format!("/sys/kernel/iommu_groups/{g}/type"))
                        .unwrap_or_else(|| format!("{}/iommu_group/type", p.sysfs_or_bus())),
                    format!("{} ({n} {})", p.iommu_type.as_deref().unwrap_or("?"), p.address),
                )
            })
            .collect(),
        cost_gbps: None,
        fix: vec![
            "kernel command line: `iommu=pt` (Intel also `intel_iommu=on iommu=pt`; AMD `iommu=pt`), then reboot".into(),
            format!(
                "per group, with the devices' drivers unbound (kernel 5.11+): `echo identity > /sys/kernel/iommu_groups/<N>/type` for groups {}",
                groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", ")
            ),
        ],
    });
}

fn check_gpu_links(inv: &Inventory, out: &mut Vec<Finding>) {
    for g in &inv.gpus {
        let p = &g.pci;
        let narrow = matches!((p.current_width, p.max_width), (Some(c), Some(m)) if c < m);
        let slow = matches!((p.current_gen, p.max_gen), (Some(c), Some(m)) if c < m);
        if !narrow && !slow {
            continue;
        }
        let base = p.sysfs_or_bus();
        out.push(Finding {
            id: "gpu-pcie-downgraded".into(),
            severity: if narrow { Severity::Warning } else { Severity::Info },
            subject: format!("GPU{} {}", g.index, p.address),
            summary: format!(
                "GPU{} PCIe link is {}, below the {} it is capable of",
                g.index,
                link_text(p, true),
                link_text(p, false)
            ),
            detail: if narrow {
                format!(
                    "A narrower link is a slot, riser or seating problem and caps everything the GPU moves over PCIe, GPUDirect RDMA included: {} usable instead of {}.",
                    p.ceiling_gbps.map(|c| format!("{c} Gbit/s")).unwrap_or_else(|| "unknown".into()),
                    p.max_ceiling_gbps.map(|c| format!("{c} Gbit/s")).unwrap_or_else(|| "unknown".into())
                )
            } else {
                "Only the speed is lower: NVIDIA GPUs drop their PCIe link to a lower speed while idle and retrain to full speed under load, so this is expected on an idle GPU. Read it again while a test runs; if it stays low, it is a slot or BIOS setting.".into()
            },
            evidence: vec![
                ev(inv, &format!("{base}/current_link_speed"), p.current_link_speed.as_deref().unwrap_or("unknown")),
                ev(inv, &format!("{base}/current_link_width"), p.current_width.map(|w| w.to_string()).unwrap_or_else(|| "unknown".into())),
                ev(inv, &format!("{base}/max_link_speed"), p.max_link_speed.as_deref().unwrap_or("unknown")),
                ev(inv, &format!("{base}/max_link_width"), p.max_width.map(|w| w.to_string()).unwrap_or_else(|| "unknown".into())),
            ],
            cost_gbps: None,
            fix: if narrow {
                vec![
                    format!("reseat the GPU or its riser/baseboard cable and check the slot's lane setting in the BIOS; verify with `lspci -vv -s {} | grep LnkSta`", p.address),
                ]
            } else {
                vec![format!(
                    "check under load: `cat {base}/current_link_speed` while `fabperf rdma-bw --mem cuda:{}` runs (or `nvidia-smi -q -d PCIE`)",
                    g.index
                )]
            },
        });
    }
}

fn check_sys(inv: &Inventory, out: &mut Vec<Finding>) {
    for g in &inv.gpus {
        if g.nearest.as_deref() != Some("SYS") {
            continue;
        }
        let mut evidence = vec![ev(
            inv,
            &format!("{}/numa_node", g.pci.sysfs_or_bus()),
            g.pci
                .numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into()),
        )];
        for (d, p) in hw_nics(inv) {
            evidence.push(ev(
                inv,
                &format!("{}/numa_node", p.sysfs_or_bus()),
                format!(
                    "{} ({})",
                    p.numa_node
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "unknown".into()),
                    d.name
                ),
            ));
        }
        out.push(Finding {
            id: "gpu-nic-sys".into(),
            severity: Severity::Warning,
            subject: format!("GPU{} {}", g.index, g.pci.address),
            summary: format!(
                "GPU{}'s nearest RDMA device ({}) is across the socket link (SYS)",
                g.index,
                g.nearest_rdma.join(", ")
            ),
            detail: "GPUDirect RDMA between a GPU and a NIC on different NUMA nodes crosses the inter-socket link (UPI/xGMI): bandwidth drops and NCCL disables GDR for such pairs by default, staging through host memory instead.".into(),
            evidence,
            cost_gbps: None,
            fix: vec![
                "put a NIC in a slot of the GPU's socket (ideally under the same PCIe switch)".into(),
                "or run this GPU's traffic through a NIC of its socket via another GPU (NCCL's PXN), and pin the job to the GPU's NUMA node".into(),
            ],
        });
    }
}

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
