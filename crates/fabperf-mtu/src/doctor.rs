//! `fabperf doctor --mtu-results FILE`: measured path MTUs against the
//! MTUs the interfaces are configured for, as `mtu-mismatch` findings.

use crate::report::{MtuReport, PathReport, MTU_SCHEMA};
use fabperf_detect::doctor::{Evidence, Finding, Severity};
use fabperf_detect::Inventory;
use std::path::Path;

/// Largest results file read.
pub const MAX_RESULTS_BYTES: u64 = 4 << 20;

/// Read a `fabperf mtu --json` file (a regular file of at most
/// [`MAX_RESULTS_BYTES`]: fabperf's one reader of input files).
pub fn read_results(file: &Path) -> Result<MtuReport, String> {
    let text = fabperf_results::files::read_text(file, MAX_RESULTS_BYTES, "mtu results file")?;
    parse_results(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Parse a `fabperf mtu --json` report (schema `fabperf.mtu/1`).
pub fn parse_results(text: &str) -> Result<MtuReport, String> {
    let r: MtuReport =
        serde_json::from_str(text).map_err(|e| format!("not a fabperf mtu report: {e}"))?;
    if r.schema != MTU_SCHEMA {
        return Err(format!(
            "schema {:?}, expected {MTU_SCHEMA:?} (from `fabperf mtu --json`)",
            r.schema.escape_debug().to_string()
        ));
    }
    Ok(r)
}

/// A name from a file someone else wrote (an interface, a host), fit for
/// one line of a report: fabperf's terminal escaping, cut to 64 characters.
fn clean(s: &str) -> String {
    fabperf_results::escape::terminal_cut(s, 64)
}

/// `mtu-mismatch` findings: for each measured path, this node's interface
/// (its MTU as configured now when the report was made on this node, else
/// as the report recorded it) and the agent's interface, each against the
/// largest packet measured crossing.
pub fn findings(rep: &MtuReport, inv: &Inventory, file: &Path) -> Vec<Finding> {
    let here = rep.hostname == inv.hostname;
    let mut out = Vec::new();
    for p in &rep.paths {
        // A search that ended at what the interface could send found no
        // limit on the path (loopback's MTU is above the largest IP packet).
        let local = p.local_crossing().filter(|(c, _)| c.limited_by == "path");
        if let (Some(i), Some((c, by))) = (&p.interface, local) {
            let measured = c.mtu;
            let name = clean(&i.name);
            let live = here
                .then(|| inv.netdevs.iter().find(|n| n.name == i.name))
                .flatten()
                .and_then(|n| n.mtu);
            let (configured, at) = match live {
                Some(m) => (m, inv.path(&format!("/sys/class/net/{}/mtu", i.name))),
                None => (
                    i.mtu,
                    format!(
                        "{} (interface {name} on {})",
                        file.display(),
                        clean(&rep.hostname)
                    ),
                ),
            };
            if configured > measured {
                out.push(finding(
                    p,
                    file,
                    &name,
                    "this node's",
                    configured,
                    at,
                    measured,
                    by,
                ));
            }
        }
        if let (Some(i), Some(r)) = (&p.agent_interface, &p.reverse) {
            if r.limited_by == "path" && i.mtu > r.mtu {
                let name = clean(&i.name);
                let at = format!(
                    "{} (the agent at {} reported interface {name})",
                    file.display(),
                    p.addr
                );
                out.push(finding(
                    p,
                    file,
                    &name,
                    "the agent's",
                    i.mtu,
                    at,
                    r.mtu,
                    "reverse",
                ));
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn finding(
    p: &PathReport,
    file: &Path,
    iface: &str,
    whose: &str,
    configured: u32,
    configured_at: String,
    measured: u32,
    by: &str,
) -> Finding {
    let how = match by {
        "forward" => "UDP probes with Don't Fragment, this node to the agent",
        "reverse" => "UDP datagrams with Don't Fragment, the agent to this node",
        _ => "ICMP echo with Don't Fragment",
    };
    let mut detail = format!(
        "Packets of {} to {configured} bytes fit {whose} interface but do not cross the path to {}: \
         they are dropped (or, where a router's \"fragmentation needed\" is filtered, black-holed: \
         TCP connections stall on their first full-size segment).",
        measured + 1,
        p.addr
    );
    if let Some(o) = p.interface.as_ref().and_then(|i| i.describe_overhead()) {
        detail.push_str(&format!(" The path's encapsulation: {}.", clean_line(&o)));
    }
    Finding {
        id: "mtu-mismatch".into(),
        severity: Severity::Error,
        subject: iface.to_string(),
        summary: format!(
            "{iface} is configured for MTU {configured} but only {measured}-byte packets cross to {} ({by})",
            p.addr
        ),
        detail,
        evidence: vec![
            Evidence {
                path: configured_at,
                value: configured.to_string(),
            },
            Evidence {
                path: format!("{} (path to {}, {how})", file.display(), p.addr),
                value: format!("largest packet that crossed: {measured} bytes"),
            },
        ],
        cost_gbps: None,
        fix: vec![format!(
            "`ip link set {iface} mtu {measured}` on {} (or raise the MTU of every hop of the path to {configured})",
            if whose == "this node's" { "this node" } else { "the agent's node" }
        )],
    }
}

/// A description from a file someone else wrote, fit for a sentence of a
/// report: fabperf's terminal escaping, cut to 200 characters.
fn clean_line(s: &str) -> String {
    fabperf_results::escape::terminal_cut(s, 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Interface;
    use crate::report::Crossing;

    fn crossing(mtu: u32) -> Crossing {
        Crossing {
            mtu,
            payload: mtu - 28,
            limited_by: "path".into(),
            probes: 12,
            too_big_mtu: None,
            too_big_from: None,
        }
    }

    fn iface(name: &str, mtu: u32) -> Interface {
        Interface {
            name: name.into(),
            mtu,
            kind: "ethernet".into(),
            overhead: None,
            underlay: None,
        }
    }

    fn report(local: u32, agent: u32, fwd: u32, rev: u32) -> MtuReport {
        MtuReport {
            schema: MTU_SCHEMA.into(),
            hostname: "node1".into(),
            paths: vec![PathReport {
                target: "node2".into(),
                addr: "198.18.1.2:5301".parse().unwrap(),
                local: None,
                interface: Some(iface("eth1", local)),
                agent_interface: Some(iface("eth2", agent)),
                forward: Some(crossing(fwd)),
                reverse: Some(crossing(rev)),
                icmp: None,
                skipped: vec![],
                mismatches: vec![],
            }],
        }
    }

    fn inv(host: &str) -> Inventory {
        Inventory {
            hostname: host.into(),
            ..Inventory::default()
        }
    }

    #[test]
    fn a_path_that_carries_the_configured_mtu_is_no_finding() {
        let f = findings(
            &report(1500, 1500, 1500, 1500),
            &inv("other"),
            Path::new("m.json"),
        );
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn both_ends_above_the_path_are_named_with_the_measured_value() {
        let f = findings(
            &report(9000, 9000, 1500, 1450),
            &inv("other"),
            Path::new("m.json"),
        );
        assert_eq!(f.len(), 2);
        assert!(f
            .iter()
            .all(|x| x.id == "mtu-mismatch" && x.severity == Severity::Error));
        assert_eq!(f[0].subject, "eth1");
        assert!(f[0].summary.contains("9000") && f[0].summary.contains("1500"));
        assert!(f[0].evidence[1].value.contains("1500"));
        assert!(f[0].fix[0].contains("ip link set eth1 mtu 1500"));
        assert_eq!(f[1].subject, "eth2");
        assert!(f[1].evidence[1].value.contains("1450"));
    }

    #[test]
    fn hostile_reports_are_refused_or_escaped() {
        assert!(parse_results("").is_err());
        assert!(parse_results("{\"schema\":\"other/1\",\"hostname\":\"x\",\"paths\":[]}").is_err());
        assert!(parse_results("[1,2,3]").is_err());
        let mut r = report(9000, 1500, 1500, 1500);
        r.paths[0].interface.as_mut().unwrap().name = "eth1\n\u{1b}[31mX".into();
        let f = findings(&r, &inv("other"), Path::new("m.json"));
        assert_eq!(f.len(), 1);
        assert!(
            !f[0].summary.chars().any(|c| c.is_control()),
            "{}",
            f[0].summary
        );
        // Escaped visibly, the way fabperf shows any foreign text.
        assert_eq!(f[0].subject, "eth1\\n\\x1b[31mX");
        assert!(f[0].fix[0].contains("ip link set eth1\\n\\x1b[31mX mtu"));
        let mut r = report(9000, 1500, 1500, 1500);
        r.hostname = format!("a\u{202e}b{}", "h".repeat(70));
        let f = findings(&r, &inv("other"), Path::new("m.json"));
        let at = &f[0].evidence[0].path;
        assert!(at.contains("on a\\u{202e}b"), "{at}");
        assert!(!at.contains('\u{202e}'), "{at}");
        assert!(
            at.contains(&format!("b{}… (9 more bytes)", "h".repeat(61))),
            "{at}"
        );
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(parse_results(&text).unwrap(), r);
    }
}
