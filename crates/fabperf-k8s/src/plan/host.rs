//! The host path bound to a fabric interface: each node's address on it.

use super::*;

/// The host path: bind and advertise each node's address on the fabric
/// interface ([host].interface, else [cni].interface when detect files say
/// where it is), or the node IP when no interface is named.
pub(super) fn check_host(
    cx: &mut Diagnostics,
    raw: Option<&S<RawHost>>,
    cni: Option<&CniPlan>,
    detects: &[NodeDetect],
    node_names: &[String],
    warnings: &mut Vec<String>,
) -> Option<HostPlan> {
    let explicit = raw.and_then(|h| h.get_ref().interface.as_ref());
    let (interface, span) = match (explicit, cni) {
        (Some(i), _) => (i.get_ref().clone(), i.span()),
        (None, Some(c)) if !detects.is_empty() => (c.interface.clone(), 0..0),
        _ => {
            let links: BTreeSet<&str> = detects
                .iter()
                .filter_map(|d| d.node_ip.as_ref().map(|i| i.interface.as_str()))
                .collect();
            if !links.is_empty() {
                warnings.push(format!(
                    "host: the agents listen on the node IP (link {}); name the fabric link with [host].interface to measure it instead",
                    links.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
            return None;
        }
    };
    if !is_ifname(&interface) {
        cx.at(
            span,
            format!("[host].interface {interface:?} is not an interface name"),
        );
        return None;
    }
    if detects.is_empty() {
        cx.at(span, format!("[host].interface {interface}: the agent binds each node's address on it, which comes from the detect files; list them under [detect]"));
        return None;
    }
    for n in node_names {
        if !detects.iter().any(|d| &d.node == n) {
            cx.at(span.clone(), format!("the host path binds each node's address on {interface}, but node {n} has no detect file under [detect]"));
        }
    }
    let mut addresses = BTreeMap::new();
    for d in detects {
        match d.report.netdev(&interface) {
            None => cx.at(d.span.clone(), format!("missing interface: {interface} (the host path's fabric link) not found on node {}", d.node)),
            Some(nd) => match nd.ipv4.first() {
                None => cx.at(d.span.clone(), format!("{interface} on node {} has no IPv4 address for the host agent to bind; give it one or name another [host].interface", d.node)),
                Some(a) => {
                    let addr = a.split('/').next().unwrap_or(a);
                    if addr.parse::<std::net::Ipv4Addr>().is_err() {
                        cx.at(d.span.clone(), format!("{interface} on node {}: {a:?} is not an IPv4 address", d.node));
                    } else {
                        addresses.insert(d.node.clone(), addr.to_string());
                    }
                }
            },
        }
    }
    Some(HostPlan {
        interface,
        addresses,
    })
}
