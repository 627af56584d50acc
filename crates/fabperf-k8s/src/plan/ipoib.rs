//! `[ipoib]`: the IPoIB secondary network (master, mode, MTU, range).

use super::*;

pub(super) fn check_ipoib(
    cx: &mut Diagnostics,
    t: &S<RawIpoib>,
    detects: &[NodeDetect],
) -> Option<IpoibPlan> {
    let r = t.get_ref();
    let nad_name = check_nad_name(cx, &r.nad_name, "fabperf-ipoib");
    let attach = check_attach(cx, &r.attach, "ipoib", "ipoib-cni");
    if let (Attach::Sriov, Some(m)) = (attach, &r.mtu) {
        cx.at(m.span(), "[ipoib].mtu applies to ipoib-cni children; an InfiniBand VF (attach = \"sriov\") keeps the MTU the subnet manager gives it");
    }
    let mut mode = match &r.mode {
        Some(m) if m.get_ref() == "datagram" || m.get_ref() == "connected" => {
            Some(m.get_ref().clone())
        }
        Some(m) => {
            cx.at(
                m.span(),
                format!(
                    "[ipoib].mode {:?} must be \"datagram\" or \"connected\"",
                    m.get_ref()
                ),
            );
            None
        }
        None => None,
    };
    let master =
        match &r.master {
            Some(m) => {
                if !is_ifname(m.get_ref()) {
                    cx.at(
                        m.span(),
                        format!("[ipoib].master {:?} is not an interface name", m.get_ref()),
                    );
                }
                for d in detects {
                    match d.report.netdev(m.get_ref()) {
                        None => cx.at(
                            m.span(),
                            format!(
                        "missing interface: {} not found on node {} (its IPoIB interfaces: {})",
                        m.get_ref(), d.node,
                        names_or_none(d.report.ipoib_candidates().iter().map(|n| n.name.as_str()))
                    ),
                        ),
                        Some(nd) if nd.kind != "ipoib" => cx.at(
                            m.span(),
                            format!(
                                "{} on node {} is {} (kind {:?}), not an IPoIB interface",
                                m.get_ref(),
                                d.node,
                                m.get_ref(),
                                nd.kind
                            ),
                        ),
                        Some(_) => {}
                    }
                }
                m.get_ref().clone()
            }
            None => pick_from_detect(
                cx,
                t.span(),
                "IPoIB interface",
                "[ipoib].master",
                detects,
                |rep| {
                    rep.ipoib_candidates()
                        .iter()
                        .map(|n| n.name.clone())
                        .collect()
                },
            )?,
        };
    // The mode and MTU limits from what the nodes report.
    let mut master_mtu: Option<(u32, String)> = None;
    for d in detects {
        if let Some(nd) = d.report.netdev(&master) {
            if let Some(m) = &nd.ipoib_mode {
                match (&mode, &r.mode) {
                    (Some(plan_mode), Some(sp)) if plan_mode != m => cx.at(
                        sp.span(),
                        format!(
                            "[ipoib].mode is {plan_mode} but {master} on node {} runs in {m} mode",
                            d.node
                        ),
                    ),
                    (None, _) => mode = Some(m.clone()),
                    _ => {}
                }
            }
            if let Some(nm) = nd.mtu {
                if master_mtu.as_ref().is_none_or(|(v, _)| nm < *v) {
                    master_mtu = Some((nm, d.node.clone()));
                }
            }
        }
    }
    let mode = mode.unwrap_or_else(|| "datagram".into());
    let mtu = match &r.mtu {
        Some(m) => {
            let n = *m.get_ref();
            let limit = if mode == "connected" {
                IPOIB_CONNECTED_MAX_MTU
            } else {
                IPOIB_DATAGRAM_MAX_MTU
            };
            if n < 1280 {
                cx.at(m.span(), format!("[ipoib].mtu {n} is below 1280"));
                None
            } else if n > limit as i64 {
                let hint = if mode == "datagram" {
                    format!("above the IPoIB datagram limit {IPOIB_DATAGRAM_MAX_MTU} (4K IB MTU minus the 4-byte IPoIB header); ConnectX-4 and later run datagram only")
                } else {
                    format!("above the IPoIB connected-mode limit {IPOIB_CONNECTED_MAX_MTU}")
                };
                cx.at(m.span(), format!("[ipoib].mtu {n} is {hint}"));
                None
            } else {
                if let Some((mm, node)) = &master_mtu {
                    if n as u32 > *mm {
                        cx.at(m.span(), format!("[ipoib].mtu {n} exceeds the MTU {mm} of {master} on node {node}; ipoib-cni children cannot exceed their master"));
                    }
                }
                Some(n as u32)
            }
        }
        None => None,
    };
    let ipam = check_ipam(
        cx,
        "ipoib",
        &r.range,
        &r.range_start,
        &r.range_end,
        &r.exclude,
    )?;
    Some(IpoibPlan {
        nad_name,
        master,
        mtu,
        ipam,
        attach,
    })
}
