//! `[roce]`: the RoCE secondary network (netdev, macvlan or host-device,
//! MTU, range).

use super::*;

pub(super) fn check_roce(
    cx: &mut Diagnostics,
    t: &S<RawRoce>,
    detects: &[NodeDetect],
) -> Option<RocePlan> {
    let r = t.get_ref();
    let nad_name = check_nad_name(cx, &r.nad_name, "fabperf-roce");
    let attach = check_attach(cx, &r.attach, "roce", "shared");
    if attach == Attach::Sriov {
        for (v, key) in [
            (&r.network_type, "network_type"),
            (&r.macvlan_mode, "macvlan_mode"),
        ] {
            if let Some(x) = v {
                cx.at(x.span(), format!("[roce].{key} applies to attach = \"shared\"; with \"sriov\" the pod gets a VF (sriov-cni)"));
            }
        }
        if let Some(m) = &r.mtu {
            cx.at(m.span(), "[roce].mtu applies to attach = \"shared\"; a VF takes the MTU of its physical function");
        }
    }
    let netdev = match &r.netdev {
        Some(n) => {
            if !is_ifname(n.get_ref()) {
                cx.at(
                    n.span(),
                    format!("[roce].netdev {:?} is not an interface name", n.get_ref()),
                );
            }
            for d in detects {
                let rep = &d.report;
                match rep.netdev(n.get_ref()) {
                    None => cx.at(n.span(), format!(
                        "missing interface: {} not found on node {} (its RoCE netdevs: {})",
                        n.get_ref(), d.node, names_or_none(rep.roce_candidates().iter().map(|x| x.name.as_str()))
                    )),
                    Some(_) => match rep.rdma_behind(n.get_ref()) {
                        None => cx.at(n.span(), format!(
                            "{} on node {} has no RDMA device behind it; RoCE needs an RDMA-capable NIC (or rxe for tests)",
                            n.get_ref(), d.node
                        )),
                        Some((_, Some(p))) if p.link_layer != "Ethernet" => cx.at(n.span(), format!(
                            "{} on node {} sits on an {} port; RoCE needs an Ethernet link layer", n.get_ref(), d.node, p.link_layer
                        )),
                        Some(_) => {}
                    },
                }
            }
            n.get_ref().clone()
        }
        None => pick_from_detect(
            cx,
            t.span(),
            "RoCE netdev",
            "[roce].netdev",
            detects,
            |rep| {
                rep.roce_candidates()
                    .iter()
                    .map(|n| n.name.clone())
                    .collect()
            },
        )?,
    };
    let netdev_mtu = detects
        .iter()
        .filter_map(|d| {
            d.report
                .netdev(&netdev)
                .and_then(|n| n.mtu)
                .map(|m| (m, d.node.clone()))
        })
        .min_by_key(|x| x.0);
    let mtu = match &r.mtu {
        Some(m) => {
            let n = u32_in(cx, m, "[roce].mtu", 1280, 9216);
            if let (Some(n), Some((nm, node))) = (n, &netdev_mtu) {
                if n > *nm {
                    cx.at(
                        m.span(),
                        format!("[roce].mtu {n} exceeds the MTU {nm} of {netdev} on node {node}"),
                    );
                }
            }
            n
        }
        None => None,
    };
    let network_type = r
        .network_type
        .as_ref()
        .map(|s| s.get_ref().as_str())
        .unwrap_or("macvlan");
    let plugin = match network_type {
        "macvlan" => {
            let mode = match &r.macvlan_mode {
                Some(m)
                    if ["bridge", "private", "vepa", "passthru"]
                        .contains(&m.get_ref().as_str()) =>
                {
                    m.get_ref().clone()
                }
                Some(m) => {
                    cx.at(
                        m.span(),
                        format!(
                            "[roce].macvlan_mode {:?} must be bridge, private, vepa or passthru",
                            m.get_ref()
                        ),
                    );
                    String::new()
                }
                None => "bridge".into(),
            };
            CniPlugin::Macvlan {
                master: netdev.clone(),
                mode,
                mtu,
            }
        }
        "host-device" => {
            if let Some(m) = &r.macvlan_mode {
                cx.at(
                    m.span(),
                    "macvlan_mode applies to network_type = \"macvlan\" only",
                );
            }
            if let Some(m) = &r.mtu {
                cx.at(m.span(), "host-device moves the netdev into the pod with its own MTU; drop [roce].mtu or set it on the host");
            }
            CniPlugin::HostDevice {
                device: netdev.clone(),
            }
        }
        other => {
            let sp = r
                .network_type
                .as_ref()
                .map(|s| s.span())
                .unwrap_or(t.span());
            cx.at(
                sp,
                format!("[roce].network_type {other:?} must be \"macvlan\" or \"host-device\""),
            );
            return None;
        }
    };
    let ipam = check_ipam(
        cx,
        "roce",
        &r.range,
        &r.range_start,
        &r.range_end,
        &r.exclude,
    )?;
    Some(RocePlan {
        nad_name,
        netdev,
        plugin,
        ipam,
        attach,
    })
}
