//! The text summary: per group the matrix (or, above
//! [`MATRIX_MAX_NODES`], the worst pairs and nodes), the reference, the
//! suspects and what they blame; foreign names escaped.

use super::confirm::SuspectState;
use super::findings::{MeshAnalysis, MeshGroup, NodeFault, Reference};
use super::rule::{Metric, RuleKind};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human-readable summary of one test.
pub fn render(a: &MeshAnalysis) -> String {
    // Names and errors come from a store (and agents): escaped, one line each.
    let e = fabperf_results::escape::terminal;
    let mut o = String::new();
    for g in &a.groups {
        render_group(&mut o, a, g);
    }
    if !a.stale_cells.is_empty() {
        let n = a.stale_cells.len();
        let shown: Vec<&str> = a.stale_cells.iter().take(8).map(String::as_str).collect();
        let _ = writeln!(
            o,
            "{}: {n} stored cell{} not part of the run's current plan (the plan was edited since they ran), not counted: {}{}\n",
            e(&a.test),
            if n == 1 { " is" } else { "s are" },
            e(&shown.join(", ")),
            if n > shown.len() {
                format!(" and {} more", n - shown.len())
            } else {
                String::new()
            }
        );
    }
    o
}

/// Above this many nodes the text summary lists the worst pairs and nodes
/// instead of printing the matrix.
pub const MATRIX_MAX_NODES: usize = 64;
/// Lines per list (suspect links, cleared and unconfirmed suspects, failed
/// pairs) in the text summary; `--json` has every one.
pub const LIST_MAX: usize = 20;

/// After an unconfirmed node's or rail's finding.
const UNCONFIRMED_NOTE: &str = " — not confirmed: some of these pairs have no re-test figure";

fn render_group(o: &mut String, a: &MeshAnalysis, g: &MeshGroup) {
    // Names and errors come from a store (and agents): escaped, one line each.
    let e = fabperf_results::escape::terminal;
    let dims = e(&fabperf_results::dims::label(
        &g.dims,
        fabperf_results::dims::SizeIn::Bytes,
    ));
    let _ = writeln!(
        o,
        "{} ({}) on path {}{}{}: {}, mean of {} repeat{}, from row to column",
        e(&g.test),
        e(&g.kind),
        e(&g.path),
        if dims.is_empty() { "" } else { ", " },
        dims,
        g.metric.unit(),
        g.repeats,
        if g.repeats == 1 { "" } else { "s" }
    );
    let shown: BTreeMap<&str, String> = g.nodes.iter().map(|n| (n.as_str(), e(n))).collect();
    let w = shown
        .values()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(4)
        .max(8);
    let state: BTreeMap<(&str, &str), SuspectState> = g
        .suspects
        .iter()
        .map(|s| ((s.src.as_str(), s.dst.as_str()), s.state))
        .collect();
    let failed: BTreeSet<(&str, &str)> = g
        .failed
        .iter()
        .map(|(a, b, _)| (a.as_str(), b.as_str()))
        .collect();
    let mut unmeasured = false;
    let big = g.nodes.len() > MATRIX_MAX_NODES;
    if big {
        let measured: usize = g.values.values().map(BTreeMap::len).sum();
        let n = g.nodes.len();
        unmeasured = measured + g.failed.len() < n * (n - 1);
        let _ = writeln!(
            o,
            "  {n} nodes, {measured} pairs measured: the matrix is not printed above {MATRIX_MAX_NODES} nodes (`fabperf mesh-summary --json` has every pair; `fabperf report --format html` draws it as a heat map)"
        );
        let worst: Vec<String> = g
            .worst_pairs(LIST_MAX)
            .iter()
            .map(|(x, y, v)| format!("{} -> {} {v:.2}", e(x), e(y)))
            .collect();
        if !worst.is_empty() {
            let _ = writeln!(o, "  worst pairs: {}", worst.join(", "));
        }
        let nodes: Vec<String> = g
            .worst_nodes(LIST_MAX)
            .iter()
            .map(|(x, v, _)| format!("{} {v:.2}", e(x)))
            .collect();
        if !nodes.is_empty() {
            let _ = writeln!(
                o,
                "  worst nodes (the median of the pairs each sends or receives in): {}",
                nodes.join(", ")
            );
        }
    } else {
        let _ = write!(o, "  {:>w$}", "from \\ to");
        for n in &g.nodes {
            let _ = write!(o, " {:>w$}", shown[n.as_str()]);
        }
        o.push('\n');
    }
    for x in g.nodes.iter().filter(|_| !big) {
        let _ = write!(o, "  {:>w$}", shown[x.as_str()]);
        for y in &g.nodes {
            let cell = if x == y {
                "-".to_string()
            } else if let Some(v) = g.values.get(x).and_then(|r| r.get(y)) {
                let mark = match state.get(&(x.as_str(), y.as_str())) {
                    Some(SuspectState::Confirmed) => "!",
                    Some(SuspectState::Unconfirmed) => "?",
                    Some(SuspectState::Cleared) => "~",
                    Some(SuspectState::WithNode) => "^",
                    None => "",
                };
                format!("{v:.2}{mark}")
            } else if failed.contains(&(x.as_str(), y.as_str())) {
                "FAIL".into()
            } else {
                unmeasured = true;
                ".".into()
            };
            let _ = write!(o, " {cell:>w$}");
        }
        o.push('\n');
    }
    let who = |r: &Reference| format!("{} -> {}", e(&r.src), e(&r.dst));
    // "the best pair" / "the median pair", and "of N pairs" for the median.
    let which = |r: &Reference, best: &str| match r.rule {
        RuleKind::Clusterkit => (format!("the {best} pair"), String::new()),
        RuleKind::Median => (
            "the median pair".to_string(),
            format!("; the median of {} nodes' median pairs", r.nodes),
        ),
    };
    let rule = match (g.metric, &g.reference, g.threshold) {
        (Metric::BandwidthGbps, Some(r), Some(t)) => {
            let (name, of) = which(r, "best");
            match r.capped_at {
                Some(p) => format!(
                    "bandwidth below {:.0}% of the {p:.2} Gbit/s port rate, i.e. < {t:.2} ({name}{of}, {}, measured {:.2}, above the port rate)",
                    a.bw_fraction * 100.0,
                    who(r),
                    r.measured
                ),
                None => format!(
                    "bandwidth below {:.0}% of {name} ({}, {:.2} Gbit/s{of}), i.e. < {t:.2}",
                    a.bw_fraction * 100.0,
                    who(r),
                    r.measured
                ),
            }
        }
        (Metric::LatencyP50Us, Some(r), Some(t)) => {
            let (name, of) = which(r, "lowest");
            format!(
                "latency above {}x {name} ({}, {:.2} us{of}), i.e. > {t:.2}",
                a.lat_factor,
                who(r),
                r.measured
            )
        }
        _ => "no figures".into(),
    };
    let _ = writeln!(
        o,
        "  rule: {rule}; ! suspect confirmed by its re-tests, ? suspect not confirmed (no re-test gave a figure), ~ cleared by a re-test{}{}{}",
        if g.suspects.iter().any(|s| s.state == SuspectState::WithNode) {
            ", ^ suspect not re-tested, with its node (confirmed by the re-tests of a sample of its pairs)"
        } else {
            ""
        },
        if failed.is_empty() { "" } else { ", FAIL no figure" },
        if unmeasured {
            ", . not measured (this mesh measures each pair one way)"
        } else {
            ""
        }
    );
    if g.suspects.is_empty() && g.failed.is_empty() {
        let _ = writeln!(o, "  no suspect pairs");
    }
    let living = g.nodes.len()
        - g.node_findings
            .iter()
            .filter(|f| f.fault == NodeFault::Dead)
            .count();
    if living == 0 && !g.nodes.is_empty() {
        let _ = writeln!(
            o,
            "  every cell of this mesh failed: a cause common to all (the runner, the token, the plan) is more likely than {} faulty nodes",
            g.nodes.len()
        );
    }
    for f in &g.node_findings {
        let hint = match f.fault {
            NodeFault::Dead => "check that its agent runs and is reachable (`fabperf runs --cells` has every error)",
            NodeFault::Sends => "check this node's transmit side: NIC, cable, switch port (`fabperf doctor` on it)",
            NodeFault::Receives => "check this node's receive side: NIC, cable, switch port (`fabperf doctor` on it)",
            NodeFault::All => "check this node's NIC, cable, switch port and PCIe slot (`fabperf doctor` on it)",
        };
        if f.confirmed {
            let _ = writeln!(o, "  SUSPECT NODE {}: {}; {hint}", e(&f.node), e(&f.text));
        } else {
            let _ = writeln!(
                o,
                "  unconfirmed SUSPECT NODE {}: {}{UNCONFIRMED_NOTE}",
                e(&f.node),
                e(&f.text)
            );
        }
    }
    for f in &g.rail_findings {
        if f.confirmed {
            let _ = writeln!(
                o,
                "  SUSPECT RAIL {}: {}; check that rail's leaf switch, its ports and uplinks",
                e(&f.name),
                e(&f.text)
            );
        } else {
            let _ = writeln!(
                o,
                "  unconfirmed SUSPECT RAIL {}: {}{UNCONFIRMED_NOTE}",
                e(&f.name),
                e(&f.text)
            );
        }
    }
    let detail = |x: &str, y: &str| -> String {
        g.suspects
            .iter()
            .filter(|s| (s.src == x && s.dst == y) || (s.src == y && s.dst == x))
            .filter(|s| s.state != SuspectState::Cleared)
            .map(|s| {
                format!(
                    "{} -> {} {:.2}{} ({})",
                    e(&s.src),
                    e(&s.dst),
                    s.value,
                    if s.retests.is_empty() {
                        String::new()
                    } else {
                        format!(", re-tests {}", list(&s.retests))
                    },
                    s.state.word()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    // Long lists (a large or a noisy mesh) end after LIST_MAX lines.
    let more = |o: &mut String, n: usize, what: &str| {
        if n > LIST_MAX {
            let _ = writeln!(
                o,
                "  ... and {} more {what} (`fabperf mesh-summary --json` lists them all)",
                n - LIST_MAX
            );
        }
    };
    for (x, y) in g.bad_links.iter().take(LIST_MAX) {
        let _ = writeln!(o, "  SUSPECT LINK {} - {}: {}", e(x), e(y), detail(x, y));
    }
    more(o, g.bad_links.len(), "suspect links");
    for (x, y) in g.unconfirmed_links.iter().take(LIST_MAX) {
        let _ = writeln!(
            o,
            "  unconfirmed SUSPECT LINK {} - {}: {}",
            e(x),
            e(y),
            detail(x, y)
        );
    }
    more(o, g.unconfirmed_links.len(), "unconfirmed suspect links");
    for l in g.explained_links.iter().take(LIST_MAX) {
        let _ = writeln!(
            o,
            "  link {} - {} explained by node {} (named by {}): {}; {}'s median pair here {:.2}",
            e(&l.a),
            e(&l.b),
            e(&l.node),
            e(&l.named_by.join(", ")),
            detail(&l.a, &l.b),
            e(&l.node),
            l.node_median
        );
    }
    more(o, g.explained_links.len(), "explained links");
    let (mut cleared, mut open) = (0usize, 0usize);
    for s in &g.suspects {
        match s.state {
            SuspectState::Cleared if cleared >= LIST_MAX => cleared += 1,
            SuspectState::Unconfirmed if open >= LIST_MAX => open += 1,
            SuspectState::Cleared => {
                cleared += 1;
                let _ = writeln!(
                    o,
                    "  cleared {} -> {}: {:.2} in the mesh, re-tests {} (noise)",
                    e(&s.src),
                    e(&s.dst),
                    s.value,
                    list(&s.retests)
                );
            }
            SuspectState::Unconfirmed => {
                open += 1;
                let why = match s.retests_failed.first() {
                    Some(err) => format!(
                        "{} re-test{} failed ({}); `fabperf run PLAN --retry-failed` runs {} again",
                        s.retests_failed.len(),
                        if s.retests_failed.len() == 1 { "" } else { "s" },
                        e(err),
                        if s.retests_failed.len() == 1 { "it" } else { "them" }
                    ),
                    None => "no re-test ran (the plan's `retest` is 0, the run stopped before its re-tests, or the rule was changed after the run)".into(),
                };
                let _ = writeln!(
                    o,
                    "  unconfirmed {} -> {}: {:.2} in the mesh; {why}",
                    e(&s.src),
                    e(&s.dst),
                    s.value
                );
            }
            SuspectState::Confirmed | SuspectState::WithNode => {}
        }
    }
    more(o, cleared, "cleared suspects");
    more(o, open, "unconfirmed suspects");
    for (x, y, err) in g.failed.iter().take(LIST_MAX) {
        let _ = writeln!(o, "  FAILED {} -> {}: {}", e(x), e(y), e(err));
    }
    more(o, g.failed.len(), "failed pairs");
    if let Some(p) = g.port_rate_gbps {
        for (x, y, v) in g.above_port.iter().take(LIST_MAX) {
            let _ = writeln!(
                o,
                "  ABOVE THE PORT RATE {} -> {}: {v:.2} Gbit/s on {p:.2} Gbit/s ports: the agents share a host, or a rate or a count is wrong",
                e(x),
                e(y)
            );
        }
        more(o, g.above_port.len(), "pairs above the port rate");
    }
    o.push('\n');
}
