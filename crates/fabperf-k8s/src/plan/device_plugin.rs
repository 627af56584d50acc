//! `[device_plugin]`: the RDMA shared device plugin's resources and their
//! selectors, by hand or from the detect reports.

use super::*;

fn str_list(
    cx: &mut Diagnostics,
    v: &Option<Vec<S<String>>>,
    key: &str,
    ok: impl Fn(&str) -> bool,
    expect: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for s in v.iter().flatten() {
        if !ok(s.get_ref()) {
            cx.at(
                s.span(),
                format!(
                    "[device_plugin].{key} value {:?}: expected {expect}",
                    s.get_ref()
                ),
            );
        } else if !out.contains(s.get_ref()) {
            out.push(s.get_ref().clone());
        }
    }
    out
}

/// Selectors for the RDMA devices behind the given netdevs (all PCI RDMA
/// devices when `if_names` is empty), from detect reports, one set per link
/// type: k8s-rdma-shared-dev-plugin (v1.5.3, pkg/resources) would otherwise
/// put InfiniBand and RoCE HCAs into one resource, and a pod asking for it
/// could get either. Returns (plugin link type, selectors), `ether` first.
pub fn selectors_from_detect(
    reports: &[(&str, &DetectReport)],
    if_names: &[String],
) -> Result<Vec<(&'static str, RdmaSelectors)>, String> {
    let mut groups: BTreeMap<&'static str, RdmaSelectors> = BTreeMap::new();
    let push = |v: &mut Vec<String>, s: &str| {
        if !v.iter().any(|x| x == s) {
            v.push(s.to_string());
        }
    };
    for (node, rep) in reports {
        if !rep.rdma_available {
            return Err(format!(
                "node {node} has no RDMA stack{}",
                rep.rdma_note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            ));
        }
        let devices: Vec<(&crate::detect::RdmaDevice, Option<&crate::detect::RdmaPort>)> =
            if if_names.is_empty() {
                rep.rdma_devices
                    .iter()
                    .flat_map(|d| {
                        if d.ports.is_empty() {
                            vec![(d, None)]
                        } else {
                            d.ports.iter().map(|p| (d, Some(p))).collect()
                        }
                    })
                    .collect()
            } else {
                let mut v = Vec::new();
                for i in if_names {
                    match rep.rdma_behind(i) {
                        Some(x) => v.push(x),
                        None => return Err(format!("node {node}: no RDMA device behind {i}")),
                    }
                }
                v
            };
        let mut found = false;
        for (dev, port) in devices {
            if dev.software {
                continue;
            }
            let Some(pci) = &dev.pci else { continue };
            let Some(lt) = port.and_then(|p| plugin_link_type(&p.link_layer)) else {
                return Err(format!(
                    "node {node}: the link layer of {}{} is unknown, so it cannot be put with the InfiniBand or the RoCE devices; name the netdevs (--if-name / [device_plugin].if_names)",
                    dev.name,
                    port.map(|p| format!(" port {}", p.port)).unwrap_or_default()
                ));
            };
            found = true;
            let sel = groups.entry(lt).or_default();
            push(&mut sel.vendors, &pci.vendor_id.to_ascii_lowercase());
            push(&mut sel.device_ids, &pci.device_id.to_ascii_lowercase());
            if let Some(drv) = &dev.driver {
                push(&mut sel.drivers, drv);
            }
            push(&mut sel.link_types, lt);
        }
        if !found {
            return Err(format!(
                "node {node} has no PCI RDMA device{}; k8s-rdma-shared-dev-plugin only serves PCI devices (rxe/siw are not exposed)",
                if if_names.is_empty() { String::new() } else { format!(" behind {}", if_names.join(", ")) }
            ));
        }
    }
    let mut out = Vec::new();
    for (lt, mut sel) in groups {
        for s in [&mut sel.vendors, &mut sel.device_ids, &mut sel.drivers] {
            s.sort();
        }
        if !if_names.is_empty() {
            // Only the netdevs of this link type.
            sel.if_names = if_names
                .iter()
                .filter(|i| {
                    reports.iter().any(|(_, rep)| {
                        matches!(rep.rdma_behind(i), Some((_, Some(p))) if plugin_link_type(&p.link_layer) == Some(lt))
                    })
                })
                .cloned()
                .collect();
        }
        out.push((lt, sel));
    }
    Ok(out)
}

pub(super) fn check_device_plugin(
    cx: &mut Diagnostics,
    t: Option<&S<RawDevicePlugin>>,
    rdma_resource: &str,
    roce: Option<&RocePlan>,
    detects: &[NodeDetect],
) -> Option<RdmaSharedConfig> {
    let empty = RawDevicePlugin {
        ib_resource: None,
        rdma_hca_max: None,
        periodic_update_interval: None,
        vendors: None,
        device_ids: None,
        drivers: None,
        if_names: None,
        link_types: None,
    };
    let r = t.map(|t| t.get_ref()).unwrap_or(&empty);
    let rdma_hca_max = match &r.rdma_hca_max {
        Some(v) => u32_in(cx, v, "[device_plugin].rdma_hca_max", 1, 65535)?,
        None => 1000,
    };
    let periodic_update_interval = match &r.periodic_update_interval {
        Some(v) => u32_in(cx, v, "[device_plugin].periodic_update_interval", 0, 86400)?,
        None => 300,
    };
    let mut sel = RdmaSelectors {
        vendors: str_list(
            cx,
            &r.vendors,
            "vendors",
            is_hex4,
            "a 4-digit lowercase hex PCI vendor ID such as \"15b3\"",
        ),
        device_ids: str_list(
            cx,
            &r.device_ids,
            "device_ids",
            is_hex4,
            "a 4-digit lowercase hex PCI device ID such as \"101b\"",
        ),
        drivers: str_list(
            cx,
            &r.drivers,
            "drivers",
            |s| !s.is_empty(),
            "a driver name such as \"mlx5_core\"",
        ),
        if_names: str_list(cx, &r.if_names, "if_names", is_ifname, "an interface name"),
        link_types: str_list(
            cx,
            &r.link_types,
            "link_types",
            |s| s == "ether" || s == "infiniband",
            "\"ether\" or \"infiniband\"",
        ),
    };
    let ib_resource = match &r.ib_resource {
        Some(v) => {
            let ok = v.get_ref().split_once('/').is_some_and(|(pre, name)| {
                is_dns_subdomain(pre)
                    && !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            if !ok {
                cx.at(v.span(), format!("[device_plugin].ib_resource {:?} must be PREFIX/NAME, e.g. {DEFAULT_IB_RESOURCE}", v.get_ref()));
            }
            v.get_ref().clone()
        }
        None => DEFAULT_IB_RESOURCE.into(),
    };
    let entry = |resource: &str, selectors: RdmaSelectors| {
        let (prefix, name) = split_resource(resource);
        RdmaResourceConfig {
            resource_name: name.to_string(),
            resource_prefix: prefix.to_string(),
            rdma_hca_max,
            selectors,
        }
    };
    let config_list = if !sel.is_empty() {
        vec![entry(rdma_resource, sel)]
    } else if !detects.is_empty() {
        let if_names: Vec<String> = roce.map(|r| vec![r.netdev.clone()]).unwrap_or_default();
        let reps: Vec<(&str, &DetectReport)> = detects
            .iter()
            .map(|d| (d.node.as_str(), &d.report))
            .collect();
        match selectors_from_detect(&reps, &if_names) {
            Ok(groups) => groups
                .into_iter()
                .map(|(lt, s)| {
                    entry(
                        if lt == "ether" {
                            rdma_resource
                        } else {
                            &ib_resource
                        },
                        s,
                    )
                })
                .collect(),
            Err(e) => {
                let sp = detects[0].span.clone();
                cx.at(sp, format!("device plugin selectors: {e}; or set [device_plugin] vendors/device_ids/if_names by hand"));
                return None;
            }
        }
    } else if let Some(r) = roce {
        sel.vendors = vec!["15b3".into()];
        sel.if_names = vec![r.netdev.clone()];
        sel.link_types = vec!["ether".into()];
        vec![entry(rdma_resource, sel)]
    } else {
        let sp = t.map(|t| t.span()).unwrap_or(0..0);
        cx.at(sp, "the device plugin needs selectors: set [device_plugin] vendors/device_ids/if_names or list detect files");
        return None;
    };
    let mut config_list = config_list;
    // host-device moves the RoCE netdev into the agent pod: the plugin
    // (k8s-rdma-shared-dev-plugin v1.5.3, pkg/resources/pci_net_device.go)
    // then reads an empty interface name and link type for the NIC at its
    // next periodic update, so ifNames and linkTypes selectors stop matching
    // and the resource drops to 0 while an agent holds the NIC: a restarted
    // agent stays Pending. Select the NIC by its PCI identity only (vendor,
    // device ID, driver), which the move does not change; its RDMA device
    // stays in the host (shared netns mode).
    if let Some(r) = roce.filter(|r| matches!(r.plugin, CniPlugin::HostDevice { .. })) {
        let sp = t.map(|t| t.span()).unwrap_or(0..0);
        let by_hand = !r_if_names_or_link_types(t).is_empty();
        if by_hand {
            cx.at(sp, format!("[roce] network_type = \"host-device\" moves {} into the agent pod, and the device plugin then sees no interface name or link type for its NIC: drop [device_plugin] {} and select the NIC by vendors/device_ids (the PCI identity survives the move)", r.netdev, r_if_names_or_link_types(t).join(" and ")));
            return None;
        }
        let ether = config_list
            .iter()
            .position(|c| format!("{}/{}", c.resource_prefix, c.resource_name) == rdma_resource);
        let Some(i) = ether else {
            return Some(RdmaSharedConfig {
                periodic_update_interval,
                config_list,
            });
        };
        let sel = &mut config_list[i].selectors;
        if sel.device_ids.is_empty() {
            cx.at(sp, format!("[roce] network_type = \"host-device\": the device plugin must select {}'s NIC by PCI IDs (its interface name vanishes from the host while an agent holds it): list the nodes' detect files under [detect], or set [device_plugin] vendors and device_ids", r.netdev));
            return None;
        }
        sel.if_names.clear();
        sel.link_types.clear();
        let ids = sel.device_ids.clone();
        if let Some(other) = config_list
            .iter()
            .enumerate()
            .find(|(j, c)| *j != i && c.selectors.device_ids.iter().any(|d| ids.contains(d)))
        {
            cx.at(sp, format!("[roce] network_type = \"host-device\": the RoCE NIC's PCI device ID ({}) is also the one of the devices of {}/{}; without the link type (which host-device hides) one resource would hand out both. Use macvlan, or name the devices apart by hand", ids.join(", "), other.1.resource_prefix, other.1.resource_name));
            return None;
        }
    }
    Some(RdmaSharedConfig {
        periodic_update_interval,
        config_list,
    })
}

/// The `[device_plugin]` selector keys given by hand that name interfaces
/// or link types.
fn r_if_names_or_link_types(t: Option<&S<RawDevicePlugin>>) -> Vec<&'static str> {
    let Some(t) = t else { return Vec::new() };
    let r = t.get_ref();
    let mut v = Vec::new();
    if r.if_names.is_some() {
        v.push("if_names");
    }
    if r.link_types.is_some() {
        v.push("link_types");
    }
    v
}
