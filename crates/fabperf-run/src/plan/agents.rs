//! `[[agents]]`: a static agent (`addr`) or every address behind a name
//! (`dns`), each on a path.

use super::*;

/// The declared agents, and the paths that have some.
pub(super) fn check_agents(
    cx: &mut Diagnostics,
    raw: &[S<RawAgent>],
) -> (Vec<AgentDecl>, BTreeSet<String>) {
    let mut agents = Vec::new();
    let mut static_names: BTreeSet<(String, String)> = BTreeSet::new();
    let mut paths_declared: BTreeSet<String> = BTreeSet::new();
    for a in raw {
        let span = a.span();
        let a = a.get_ref();
        let path = match &a.path {
            Some(p) if is_name(p.get_ref()) => p.get_ref().clone(),
            Some(p) => {
                cx.at(
                    p.span(),
                    format!(
                        "path {:?}: use letters, digits, '-', '_' and '.'",
                        p.get_ref()
                    ),
                );
                continue;
            }
            None => "host".to_string(),
        };
        let port = match &a.port {
            None => DEFAULT_PORT,
            Some(p) => cx
                .int_in(p, "port", 1, 65535)
                .map_or(DEFAULT_PORT, |n| n as u16),
        };
        let source = match (&a.addr, &a.dns) {
            (Some(_), Some(d)) => {
                cx.at(d.span(), "an agent has either `addr` (one agent) or `dns` (every address behind a name), not both");
                continue;
            }
            (None, None) => {
                cx.at(
                    span,
                    "an agent needs `addr = \"host[:port]\"` or `dns = \"name\"`",
                );
                continue;
            }
            (Some(addr), None) => {
                let Some(n) = &a.name else {
                    cx.at(span, "a static agent needs a `name` (the node it runs on)");
                    continue;
                };
                if !is_name(n.get_ref()) {
                    cx.at(
                        n.span(),
                        format!(
                            "agent name {:?}: use letters, digits, '-', '_' and '.'",
                            n.get_ref()
                        ),
                    );
                    continue;
                }
                let addr_s = addr.get_ref().trim();
                if addr_s.is_empty() || addr_s.contains(char::is_whitespace) {
                    cx.at(
                        addr.span(),
                        format!(
                            "agent address {:?} is not a host or host:port",
                            addr.get_ref()
                        ),
                    );
                    continue;
                }
                if a.port.is_some() && has_port(addr_s) {
                    cx.at(
                        addr.span(),
                        "give the port either in `addr` or in `port`, not both",
                    );
                }
                if !static_names.insert((n.get_ref().clone(), path.clone())) {
                    cx.at(
                        n.span(),
                        format!("agent {:?} on path {path:?} is declared twice", n.get_ref()),
                    );
                }
                let addr = if has_port(addr_s) {
                    addr_s.to_string()
                } else {
                    join_host_port(addr_s, port)
                };
                AgentSource::Static {
                    name: n.get_ref().clone(),
                    addr,
                }
            }
            (None, Some(d)) => {
                if let Some(n) = &a.name {
                    cx.at(n.span(), "a `dns` agent entry takes its names from the agents (their node names); drop `name`");
                }
                let host = d.get_ref().trim().trim_end_matches('.');
                if host.is_empty()
                    || host.len() > 253
                    || !host.split('.').all(|l| {
                        !l.is_empty()
                            && l.len() <= 63
                            && !l.starts_with('-')
                            && !l.ends_with('-')
                            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    })
                {
                    cx.at(d.span(), format!("dns {:?} is not a DNS name", d.get_ref()));
                    continue;
                }
                AgentSource::Dns {
                    name: host.to_string(),
                    port,
                }
            }
        };
        paths_declared.insert(path.clone());
        agents.push(AgentDecl { source, path });
    }
    if raw.is_empty() {
        cx.at(0..0, "the plan has no [[agents]]");
    }
    (agents, paths_declared)
}
