//! `[cni]`: the primary CNIs, the underlay and its MTU, the encapsulation
//! and pod CIDR, and Cilium's link checks.

use super::*;

pub(super) fn check_cni(
    cx: &mut Diagnostics,
    t: &S<RawCni>,
    roce: Option<&RocePlan>,
    detects: &[NodeDetect],
) -> Option<CniPlan> {
    let r = t.get_ref();
    let encapsulation = match Encap::ALL
        .into_iter()
        .find(|e| e.name() == r.encapsulation.get_ref())
    {
        Some(e) => e,
        None => {
            cx.at(
                r.encapsulation.span(),
                format!(
                    "[cni].encapsulation {:?} must be one of none, vxlan, geneve, ipip, wireguard",
                    r.encapsulation.get_ref()
                ),
            );
            return None;
        }
    };
    let mut plugins = Vec::new();
    for p in r.plugins.get_ref() {
        match CniKind::ALL.into_iter().find(|k| k.name() == p.get_ref()) {
            Some(k) => {
                if let Err(why) = encapsulation.supported_by(k) {
                    cx.at(
                        p.span(),
                        format!(
                            "{} cannot use encapsulation {}: {why}",
                            k.name(),
                            encapsulation.name()
                        ),
                    );
                }
                if !plugins.contains(&k) {
                    plugins.push(k);
                }
            }
            None => cx.at(
                p.span(),
                format!(
                    "unknown CNI {:?}: expected antrea, calico, cilium or flannel",
                    p.get_ref()
                ),
            ),
        }
    }
    if r.plugins.get_ref().is_empty() {
        cx.at(
            r.plugins.span(),
            "[cni].plugins is empty; list antrea, calico, cilium and/or flannel",
        );
    }
    plugins.sort();
    let interface = match (&r.interface, roce) {
        (Some(i), _) => {
            for d in detects {
                if d.report.netdev(i.get_ref()).is_none() {
                    cx.at(
                        i.span(),
                        format!(
                            "missing interface: {} not found on node {}",
                            i.get_ref(),
                            d.node
                        ),
                    );
                }
            }
            i.get_ref().clone()
        }
        (None, Some(r)) => r.netdev.clone(),
        (None, None) => {
            cx.at(t.span(), "missing interface: set [cni].interface to the fast node interface the CNI should use");
            return None;
        }
    };
    let underlay_mtu = match &r.underlay_mtu {
        Some(m) => u32_in(cx, m, "[cni].underlay_mtu", 1280, 9216)?,
        None => {
            // An MTU from a detect file gets the same bounds as the plan's own.
            let mut bad = false;
            for d in detects {
                if let Some(m) = d.report.netdev(&interface).and_then(|n| n.mtu) {
                    if !(1280..=9216).contains(&m) {
                        cx.at(d.span.clone(), format!(
                            "the detect file of node {} reports MTU {m} for {interface}, out of range 1280..=9216 for a CNI underlay; fix the file (or the link) or set [cni].underlay_mtu",
                            d.node
                        ));
                        bad = true;
                    }
                }
            }
            if bad {
                return None;
            }
            let mtus: BTreeSet<u32> = detects
                .iter()
                .filter_map(|d| d.report.netdev(&interface).and_then(|n| n.mtu))
                .collect();
            match mtus.len() {
                1 => *mtus.iter().next().unwrap(),
                0 => {
                    cx.at(t.span(), format!("set [cni].underlay_mtu (the MTU of {interface}); no detect file reports it"));
                    return None;
                }
                _ => {
                    cx.at(t.span(), format!("{interface} has different MTUs across nodes ({mtus:?}); make them equal or set [cni].underlay_mtu"));
                    return None;
                }
            }
        }
    };
    if let Some(m) = &r.underlay_mtu {
        for d in detects {
            if let Some(nd_mtu) = d.report.netdev(&interface).and_then(|n| n.mtu) {
                if nd_mtu != underlay_mtu {
                    cx.at(m.span(), format!("[cni].underlay_mtu {underlay_mtu} differs from the MTU {nd_mtu} of {interface} on node {}", d.node));
                }
            }
        }
    }
    let pod_cidr = match cidr::parse(r.pod_cidr.get_ref()) {
        Ok(c) => c,
        Err(e) => {
            cx.at(r.pod_cidr.span(), format!("[cni].pod_cidr: {e}"));
            return None;
        }
    };
    if matches!(pod_cidr, IpNet::V6(_)) {
        cx.at(
            r.pod_cidr.span(),
            "[cni].pod_cidr must be IPv4 (the overheads used for the MTU are the IPv4 ones)",
        );
    }
    Some(CniPlan {
        plugins,
        interface,
        underlay_mtu,
        encapsulation,
        pod_cidr,
    })
}

/// Cilium's tunnel (and native-routing routes) run between the nodes'
/// Kubernetes InternalIPs whatever `devices` says (cilium/cilium#14520,
/// #25478): refuse a plan whose node IPs are on another link than
/// [cni].interface, and warn when there is nothing to check against.
pub(super) fn check_cilium_link(
    cx: &mut Diagnostics,
    span: Range<usize>,
    c: &CniPlan,
    detects: &[NodeDetect],
    warnings: &mut Vec<String>,
) {
    if !c.plugins.contains(&CniKind::Cilium) {
        return;
    }
    let mut checked = 0;
    for d in detects {
        let Some(ip) = &d.node_ip else { continue };
        checked += 1;
        if ip.interface == c.interface {
            continue;
        }
        let link_mtu = d
            .report
            .netdev(&ip.interface)
            .and_then(|n| n.mtu)
            .map(|m| format!(", MTU {m}"))
            .unwrap_or_default();
        let fast_addr = d
            .report
            .netdev(&c.interface)
            .and_then(|n| n.ipv4.first())
            .map(|a| a.split('/').next().unwrap_or(a).to_string());
        let fix = match fast_addr {
            Some(a) => format!("start the kubelet with --node-ip={a} (the address on {}) on node {}, re-run `fabperf detect --json`", c.interface, d.node),
            None => format!("give {} an address and make it node {}'s --node-ip", c.interface, d.node),
        };
        cx.at(span.clone(), format!(
            "cilium: node {}'s node IP {} is on {}{link_mtu}, not on [cni].interface {}; Cilium tunnels and routes between node IPs whatever `devices` says, so its pod path would run over {} with an MTU meant for {}. Fix: {fix}; or drop cilium from [cni].plugins",
            d.node, ip.address, ip.interface, c.interface, ip.interface, c.interface
        ));
    }
    if checked == 0 {
        warnings.push(format!(
            "cilium: the tunnel runs between the nodes' InternalIPs (kubelet --node-ip), not over `devices`; nothing tells the renderer that those are on {}: list detect files (they carry node_ip) or check `kubectl get nodes -o wide` yourself",
            c.interface
        ));
    }
}
