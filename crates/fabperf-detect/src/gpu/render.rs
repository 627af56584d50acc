//! The GPU sections of `fabperf detect`: the device list and the
//! GPU/NIC relationship matrix (as `nvidia-smi topo -m` prints it).

use super::*;

pub(super) fn link_text(p: &PciInfo, current: bool) -> String {
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
