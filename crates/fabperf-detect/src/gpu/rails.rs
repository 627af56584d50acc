//! Rails: which NICs (and GPUs) of a node belong to which rail, by a rule
//! the operator names (`--rails`).

use super::*;

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
