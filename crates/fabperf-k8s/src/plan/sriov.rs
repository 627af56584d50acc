//! `[sriov]`: VFs per NIC, the SR-IOV resources, ib-kubernetes' GUID pool,
//! and the physical function's PCI IDs from the detect reports.

use super::*;

/// The PCI vendor and device ID of the physical function behind `netdev`,
/// equal on every node.
fn pf_pci(
    cx: &mut Diagnostics,
    sp: &Range<usize>,
    netdev: &str,
    detects: &[NodeDetect],
) -> Option<(String, String)> {
    let mut found: Option<(String, String, String)> = None;
    for d in detects {
        let Some((dev, _)) = d.report.rdma_behind(netdev) else {
            cx.at(
                d.span.clone(),
                format!("SR-IOV: node {} has no RDMA device behind {netdev}", d.node),
            );
            return None;
        };
        let Some(pci) = &dev.pci else {
            cx.at(
                d.span.clone(),
                format!(
                    "SR-IOV: {} on node {} is not a PCI device (rxe/siw have no VFs)",
                    dev.name, d.node
                ),
            );
            return None;
        };
        if pci.is_vf {
            cx.at(
                d.span.clone(),
                format!(
                    "SR-IOV: {netdev} on node {} is already a VF; name the physical function",
                    d.node
                ),
            );
            return None;
        }
        let v = (
            pci.vendor_id.to_ascii_lowercase(),
            pci.device_id.to_ascii_lowercase(),
        );
        match &found {
            Some((fv, fd, node)) if (fv, fd) != (&v.0, &v.1) => {
                cx.at(d.span.clone(), format!("SR-IOV: {netdev} is PCI {}:{} on node {} but {fv}:{fd} on node {node}; one SriovNetworkNodePolicy selects one device ID", v.0, v.1, d.node));
                return None;
            }
            Some(_) => {}
            None => found = Some((v.0, v.1, d.node.clone())),
        }
    }
    if found.is_none() {
        cx.at(sp.clone(), format!("SR-IOV needs the PCI vendor and device ID of the NIC behind {netdev}: list the nodes' detect files under [detect]"));
    }
    found.map(|(v, d, _)| (v, d))
}

pub(super) fn check_sriov(
    cx: &mut Diagnostics,
    raw: Option<&S<RawSriov>>,
    roce: Option<&RocePlan>,
    ipoib: Option<&IpoibPlan>,
    detects: &[NodeDetect],
) -> Option<SriovPlan> {
    let empty = RawSriov {
        num_vfs: None,
        roce_resource: None,
        ib_resource: None,
        ufm_secret: None,
        guid_pool_start: None,
        guid_pool_end: None,
    };
    let sp = raw.map(|r| r.span()).unwrap_or(0..0);
    let r = raw.map(|r| r.get_ref()).unwrap_or(&empty);
    let num_vfs = match &r.num_vfs {
        Some(n) => u32_in(cx, n, "[sriov].num_vfs", 1, 127)?,
        None => 8,
    };
    let mut res = |v: &Option<S<String>>, key: &str, default: &str| -> String {
        match v {
            Some(x) if !is_sriov_resource(x.get_ref()) => {
                cx.at(x.span(), format!("[sriov].{key} {:?} may only hold letters, digits and '_' (the operator adds the prefix {DEFAULT_SRIOV_PREFIX}/)", x.get_ref()));
                String::new()
            }
            Some(x) => x.get_ref().clone(),
            None => default.into(),
        }
    };
    let roce_resource = res(&r.roce_resource, "roce_resource", "fabperf_roce_vf");
    let ib_resource = res(&r.ib_resource, "ib_resource", "fabperf_ib_vf");
    let roce_pci = match roce {
        Some(rp) if rp.attach == Attach::Sriov => Some(pf_pci(cx, &sp, &rp.netdev, detects)?),
        _ => None,
    };
    let (ib_pci, ib_kubernetes) = match ipoib {
        Some(ip) if ip.attach == Attach::Sriov => {
            let pci = pf_pci(cx, &sp, &ip.master, detects)?;
            let need = |cx: &mut Diagnostics, v: &Option<S<String>>, key: &str| -> Option<String> {
                match v {
                    Some(x) => Some(x.get_ref().clone()),
                    None => {
                        cx.at(sp.clone(), format!("InfiniBand VFs need ib-kubernetes (GUIDs and PKeys from the subnet manager): set [sriov].{key}"));
                        None
                    }
                }
            };
            let secret = need(cx, &r.ufm_secret, "ufm_secret");
            let start = need(cx, &r.guid_pool_start, "guid_pool_start");
            let end = need(cx, &r.guid_pool_end, "guid_pool_end");
            for (v, key) in [
                (&r.guid_pool_start, "guid_pool_start"),
                (&r.guid_pool_end, "guid_pool_end"),
            ] {
                if let Some(x) = v {
                    if !is_guid(x.get_ref()) {
                        cx.at(
                            x.span(),
                            format!(
                                "[sriov].{key} {:?} is not a GUID like 02:00:00:00:00:00:00:00",
                                x.get_ref()
                            ),
                        );
                    }
                }
            }
            if let Some(x) = &r.ufm_secret {
                if !is_dns_subdomain(x.get_ref()) {
                    cx.at(
                        x.span(),
                        format!("[sriov].ufm_secret {:?} is not a Secret name", x.get_ref()),
                    );
                }
            }
            (
                Some(pci),
                match (secret, start, end) {
                    (Some(s), Some(a), Some(b)) => Some(IbKubernetesPlan {
                        ufm_secret: s,
                        guid_pool_start: a,
                        guid_pool_end: b,
                    }),
                    _ => None,
                },
            )
        }
        _ => {
            for (v, key) in [
                (&r.ufm_secret, "ufm_secret"),
                (&r.guid_pool_start, "guid_pool_start"),
                (&r.guid_pool_end, "guid_pool_end"),
            ] {
                if let Some(x) = v {
                    cx.at(x.span(), format!("[sriov].{key} applies to InfiniBand VFs ([ipoib] attach = \"sriov\") only"));
                }
            }
            (None, None)
        }
    };
    Some(SriovPlan {
        num_vfs,
        roce_resource,
        ib_resource,
        ib_kubernetes,
        roce_pci,
        ib_pci,
    })
}
