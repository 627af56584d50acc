//! Verdicts in words per path and per node.

use super::build::Seen;
use super::format::{fmt_num, signed};
use super::report::{FailedCell, Family, Incast, Level, Report, Row, Verdict};
use crate::data::{Agent, FindingView, RunData};
use crate::units::size_words;
use std::collections::BTreeSet;

/// Where on the sweep a verdict's figure was measured, in words (the path
/// is the verdict's own): `at 64 KiB ×4 at rate 2.5G`.
pub(super) fn where_(r: &Row) -> String {
    let mut s = match r.size {
        Some(b) => format!("at {}", size_words(b)),
        None => String::new(),
    };
    if let Some(op) = &r.op {
        s.push_str(&format!(" {op}"));
    }
    if let Some(n) = r.streams.filter(|n| *n > 1) {
        s.push_str(&format!(" ×{n}"));
    }
    if let Some(rate) = &r.rate {
        s.push_str(&format!(" at rate {rate}"));
    }
    s.trim().to_string()
}

/// The verdicts: one per path measured, then one per node (every agent
/// and every node a flow names).
pub(super) fn verdicts(rep: &Report, data: &RunData, seen: &Seen) -> Vec<Verdict> {
    let mut out = path_verdicts(rep, seen);
    out.extend(node_verdicts(rep, data, seen));
    out
}

/// Per path: its figures against the baseline (bandwidth, latency, HTTP
/// load, UDP loss), the path MTU, the share of the port rate, incast and
/// bisection, the cells that failed, and its nodes' findings.
fn path_verdicts(rep: &Report, seen: &Seen) -> Vec<Verdict> {
    let mut out = Vec::new();
    let base = rep.baseline.as_deref();
    let doctor: Vec<&FindingView> = rep
        .findings
        .iter()
        .filter(|f| f.kind == "doctor" && f.severity.as_deref() != Some("info"))
        .collect();
    for path in rep.paths() {
        let rows: Vec<&Row> = rep.rows.iter().filter(|r| r.path == path).collect();
        let mut parts: Vec<String> = Vec::new();
        let mut level = Level::Ok;
        let nodes: BTreeSet<&str> = rows
            .iter()
            .flat_map(|r| r.nodes.iter().map(String::as_str))
            .collect();
        if Some(path.as_str()) == base {
            parts.push("baseline".into());
        }
        // Bandwidth against the baseline: the worst difference.
        // Unlike comparisons (--compare-unlike) are shown, never judged.
        let like = |r: &&&Row| r.base.as_ref().is_some_and(|d| d.unlike.is_empty());
        let worst_bw = rows
            .iter()
            .filter(|r| matches!(r.family, Family::Bandwidth | Family::Udp))
            .filter(like)
            .filter_map(|r| Some((r, r.base.as_ref()?.d_pct?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((r, pct)) = worst_bw {
            let d = r.base.as_ref().expect("filtered on base");
            // Within the two intervals: a small difference is noise; a large
            // one is reported, softened, with the reason (too few repeats).
            let noise = d.within_noise == Some(true);
            let caveat = if noise {
                "; not significant over its repeats (Welch's t-test), so more repeats are needed to be sure"
            } else {
                ""
            };
            if pct <= -5.0 && !(noise && pct > -25.0) {
                parts.push(format!(
                    "{} % vs {} {} ({} {} vs {} Gbit/s{caveat})",
                    signed(pct, 0),
                    d.path,
                    where_(r),
                    r.kind,
                    fmt_num(r.mean().unwrap_or(f64::NAN)),
                    fmt_num(d.base_mean)
                ));
                level = level.max(if pct <= -25.0 && (!noise || pct <= -50.0) {
                    Level::Bad
                } else {
                    Level::Warn
                });
            } else if pct >= 5.0 && !noise {
                parts.push(format!(
                    "{} % vs {} {} ({})",
                    signed(pct, 0),
                    d.path,
                    where_(r),
                    r.kind
                ));
            } else {
                parts.push(format!(
                    "bandwidth on par with {} (worst {} %{})",
                    d.path,
                    signed(pct, 1),
                    if noise { ", within the noise" } else { "" }
                ));
            }
        }
        // Latency against the baseline: the largest p50 increase.
        let worst_lat = rows
            .iter()
            .filter(|r| r.family == Family::Latency)
            .filter(like)
            .filter_map(|r| Some((r, r.base.as_ref()?.d_p50_us?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((r, d50)) = worst_lat {
            let d = r.base.as_ref().expect("filtered on base");
            let rel = if d.base_mean > 0.0 {
                d50 / d.base_mean
            } else {
                0.0
            };
            let d99 = d
                .d_p99_us
                .map(|x| format!(", {} µs at p99", signed(x, 1)))
                .unwrap_or_default();
            // The same figure the noise test judged: the repeats' p50.
            let noise = d.within_noise == Some(true);
            parts.push(format!(
                "{} µs at p50{d99} {} ({}{})",
                signed(d50, 1),
                where_(r),
                r.kind,
                if noise {
                    "; not significant over its repeats (Welch's t-test)"
                } else {
                    ""
                }
            ));
            if rel > 0.5 && d50 > 1.0 && !noise {
                level = level.max(Level::Bad);
            } else if rel > 0.1 && d50 > 0.5 {
                level = level.max(Level::Warn);
            }
        }
        // HTTP load against the baseline: the worst requests/s, errors added.
        if let Some((r, pct)) = rows
            .iter()
            .filter(|r| r.family == Family::Http)
            .filter(like)
            .filter_map(|r| Some((r, r.base.as_ref()?.d_pct?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
        {
            let d = r.base.as_ref().expect("filtered on base");
            let noise = d.within_noise == Some(true);
            let errs = d
                .d_error_pp
                .filter(|e| *e > 0.0)
                .map(|e| format!(", errors {} pp", signed(e, 2)))
                .unwrap_or_default();
            parts.push(format!(
                "{} % requests/s vs {} {} ({} {} vs {} req/s{errs}{})",
                signed(pct, 0),
                d.path,
                where_(r),
                r.kind,
                fmt_num(r.mean().unwrap_or(f64::NAN)),
                fmt_num(d.base_mean),
                if noise { "; not significant" } else { "" }
            ));
            if pct <= -25.0 && !noise {
                level = level.max(Level::Bad);
            } else if (pct <= -5.0 && !noise) || !errs.is_empty() {
                level = level.max(Level::Warn);
            }
        }
        // Path MTU: the bytes an overlay takes, named.
        for r in rows.iter().filter(|r| r.family == Family::Mtu) {
            if r.base
                .as_ref()
                .and_then(|d| d.d_bytes)
                .is_some_and(|b| b != 0)
            {
                parts.push(format!(
                    "MTU {} {} ({})",
                    fmt_num(r.mean().unwrap_or(f64::NAN)),
                    r.op.as_deref().unwrap_or(""),
                    crate::text::overhead_words(r)
                ));
            }
        }
        // UDP loss against the baseline.
        if let Some((r, pp)) = rows
            .iter()
            .filter_map(|r| Some((r, r.base.as_ref()?.d_loss_pp?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
        {
            if pp > 0.1 {
                parts.push(format!(
                    "loses {:.2} % of datagrams {} ({} pp vs {})",
                    r.loss_pct.unwrap_or(0.0),
                    where_(r),
                    signed(pp, 2),
                    r.base.as_ref().map(|d| d.path.as_str()).unwrap_or("")
                ));
                level = level.max(Level::Warn);
            }
        }
        // A figure above a real port rate: a wrong rate or wrong counting.
        for r in rows.iter().filter(|r| r.port_finding.is_some()) {
            parts.push(format!(
                "{} {}: {}",
                r.test,
                where_(r),
                r.port_finding.as_deref().unwrap_or_default()
            ));
            level = level.max(Level::Warn);
        }
        // Share of the port rate.
        if let Some((r, pct)) = rows
            .iter()
            .filter(|r| r.family == Family::Bandwidth && r.pattern == "pairs")
            .filter_map(|r| Some((r, r.pct_port?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
        {
            parts.push(format!(
                "best {:.0} % of the {} Gbit/s port {}",
                pct,
                fmt_num(r.port_rate_gbps.unwrap_or(f64::NAN)),
                where_(r)
            ));
            if pct < 50.0 {
                level = level.max(Level::Warn);
            }
        }
        for m in rep.meshes.iter().flat_map(|m| &m.groups) {
            if m.path != path {
                continue;
            }
            if !m.bad_nodes.is_empty() || !m.bad_links.is_empty() || !m.bad_rails.is_empty() {
                parts.push(format!(
                    "mesh {}: suspect node(s) {}{}, link(s) {}",
                    m.test,
                    list_or_none(m.bad_nodes.iter().map(String::as_str)),
                    if m.bad_rails.is_empty() {
                        String::new()
                    } else {
                        format!(", rail(s) {}", m.bad_rails.join(", "))
                    },
                    list_or_none(m.bad_links.iter().map(|(a, b)| format!("{a}-{b}")))
                ));
                level = level.max(Level::Warn);
            }
        }
        // Incast fairness and bisection bandwidth, in one phrase each, per
        // direction.
        let ics: Vec<&Incast> = rep.incasts.iter().filter(|i| i.path == path).collect();
        if let Some(worst) = ics.iter().filter(|i| i.leg.jain.is_some()).min_by(|a, b| {
            a.leg
                .jain
                .unwrap_or(1.0)
                .total_cmp(&b.leg.jain.unwrap_or(1.0))
        }) {
            let l = &worst.leg;
            parts.push(format!(
                "incast: Jain's index {:.2} at worst (into {}{}){}",
                l.jain.unwrap_or(1.0),
                worst.receiver,
                if l.is_plain() {
                    String::new()
                } else {
                    format!(", {}", l.direction_words())
                },
                l.pct_port
                    .map(|p| format!(", {p:.0} % of its port"))
                    .unwrap_or_default()
            ));
        }
        let mut outcasts: Vec<(&str, &str)> = Vec::new();
        for ic in &ics {
            if let Some(o) = &ic.leg.outcast {
                if !outcasts.contains(&(ic.test.as_str(), o.as_str())) {
                    outcasts.push((&ic.test, o));
                    parts.push(format!("incast {} into {}: {o}", ic.test, ic.receiver));
                    level = level.max(Level::Warn);
                }
            }
        }
        for ic in &ics {
            let l = &ic.leg;
            let what = format!(
                "incast into {} (repeat {}, {})",
                ic.receiver,
                ic.repeat + 1,
                l.direction_words()
            );
            if let Some(f) = &l.port_finding {
                parts.push(format!("{what}: {f}"));
                level = level.max(Level::Warn);
            }
        }
        // A done cell whose direction has no usable aggregate (failed cells
        // are counted below).
        let done_without = |cell: &str| seen.done_multi.contains(cell);
        for (what, l, cell) in ics
            .iter()
            .map(|i| {
                (
                    format!("incast into {} (repeat {}", i.receiver, i.repeat + 1),
                    &i.leg,
                    &i.cell,
                )
            })
            .chain(rep.bisections.iter().filter(|b| b.path == path).map(|b| {
                (
                    format!("bisection cut {} (repeat {}", b.cut, b.repeat + 1),
                    &b.leg,
                    &b.cell,
                )
            }))
        {
            if let Some(f) = l.failed.as_ref().filter(|_| done_without(cell)) {
                parts.push(format!("{what}, {}): no figure: {f}", l.direction_words()));
                level = level.max(Level::Warn);
            }
        }
        // Bisection: the slowest cut is the bisection bandwidth.
        for b in rows.iter().filter(|r| r.pattern == "bisection") {
            let Some(v) = b.mean() else { continue };
            let cuts = b.spread.as_ref().map_or(1, |sp| sp.count);
            let dir = b
                .direction_words()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            let missing = if b.unmeasured.is_empty() {
                String::new()
            } else {
                level = level.max(Level::Warn);
                format!(
                    "; {} more cut(s) without a figure, which may be slower",
                    b.unmeasured.len()
                )
            };
            match b.pct_port {
                Some(p) => {
                    parts.push(format!(
                        "bisection{dir}: {} Gbit/s, the slowest of {cuts} cut(s) of test {}, {p:.0} % of its flows' port rates{missing}",
                        fmt_num(v),
                        b.test
                    ));
                    if p < 50.0 {
                        level = level.max(Level::Warn);
                    }
                }
                None => parts.push(format!(
                    "bisection{dir}: {} Gbit/s, the slowest of {cuts} cut(s) of test {}{missing}",
                    fmt_num(v),
                    b.test
                )),
            }
        }
        let failed = rep.failed.iter().filter(|f| f.path == path).count();
        if failed > 0 {
            parts.push(format!("{failed} cell(s) failed"));
            level = level.max(Level::Warn);
        }
        // The findings of this path's nodes explain what the figures show.
        let see: Vec<String> = doctor
            .iter()
            .filter(|f| nodes.contains(f.node.as_str()))
            .map(|f| {
                format!(
                    "see doctor finding {}{}",
                    f.label(),
                    f.summary
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        if level > Level::Ok {
            parts.extend(see);
        }
        if parts.is_empty() {
            parts.push("measured; no baseline to compare with".into());
        }
        out.push(Verdict {
            scope: "path",
            subject: path.clone(),
            level,
            text: parts.join("; "),
        });
    }
    out
}

/// Per node: its findings, what the mesh summary says of it, incast shares
/// below half the fair one, an unreachable agent, and a port rate or MTU
/// unlike the rest of its path's nodes.
fn node_verdicts(rep: &Report, data: &RunData, seen: &Seen) -> Vec<Verdict> {
    let mut out = Vec::new();
    let mut nodes: BTreeSet<String> = data.agents.iter().map(|a| a.name.clone()).collect();
    nodes.extend(seen.nodes.iter().cloned());
    for n in nodes {
        let mut parts = Vec::new();
        let mut level = Level::Ok;
        for f in rep.findings.iter().filter(|f| f.node == n) {
            let l = match f.severity.as_deref() {
                Some("error") => Level::Bad,
                Some("warning") | Some("warn") => Level::Warn,
                _ => Level::Ok,
            };
            level = level.max(l);
            parts.push(format!(
                "{} finding {}{}",
                f.kind,
                f.id.as_deref().unwrap_or(&f.subject),
                f.summary
                    .as_deref()
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default()
            ));
        }
        for m in rep.meshes.iter().flat_map(|m| &m.groups) {
            // The mesh summary says why it names a node (all its pairs, its
            // sends or receives, or every cell failed), confirmed or not.
            for f in m.node_findings.iter().filter(|f| f.node == n) {
                parts.push(format!(
                    "{}suspect node in mesh {} on {}: {}",
                    if f.confirmed { "" } else { "unconfirmed " },
                    m.test,
                    m.path,
                    f.text
                ));
                level = level.max(if f.confirmed { Level::Bad } else { Level::Warn });
            }
            for (a, b) in &m.bad_links {
                if *a == n || *b == n {
                    parts.push(format!(
                        "suspect link {a}-{b} in mesh {} on {}",
                        m.test, m.path
                    ));
                    level = level.max(Level::Warn);
                }
            }
        }
        // An incast share below half the fair one, per direction: into the
        // receiver (the node a sender), out of it (the node a peer it sends to).
        for ic in &rep.incasts {
            let l = &ic.leg;
            let k = l.flows.len();
            if k < 2 {
                continue;
            }
            let reverse = l.to_clients;
            let mine = l
                .flows
                .iter()
                .find(|f| if reverse { f.dst == n } else { f.src == n });
            if let Some(f) = mine {
                let fair = 1.0 / k as f64;
                if f.share < 0.5 * fair {
                    parts.push(if reverse {
                        format!(
                            "got {:.0} % of the bandwidth out of {} as one of its {k} incast peers ({}; test {}; fair share {:.0} %)",
                            f.share * 100.0,
                            ic.receiver,
                            l.direction_words(),
                            ic.test,
                            fair * 100.0
                        )
                    } else {
                        format!(
                            "got {:.0} % of the bandwidth into {} as one of {k} incast senders ({}test {}; fair share {:.0} %)",
                            f.share * 100.0,
                            ic.receiver,
                            if l.of_bidir {
                                format!("{}; ", l.direction_words())
                            } else {
                                String::new()
                            },
                            ic.test,
                            fair * 100.0
                        )
                    });
                    level = level.max(Level::Warn);
                }
            }
        }
        // Inventory: a port rate or MTU unlike the rest of the path's nodes.
        for a in data.agents.iter().filter(|a| a.name == n) {
            if let Some(u) = &a.unreachable {
                parts.push(format!("agent on path {} unreachable: {u}", a.path));
                level = Level::Bad;
            }
            let peers: Vec<&Agent> = data
                .agents
                .iter()
                .filter(|p| p.path == a.path && p.name != n)
                .collect();
            if let Some(mine) = a.inventory.port_rate_gbps {
                if let Some(common) =
                    majority(peers.iter().filter_map(|p| p.inventory.port_rate_gbps))
                {
                    if (mine - common).abs() > 1e-9 {
                        parts.push(format!(
                            "port rate {} Gbit/s on path {} where its peers have {}",
                            fmt_num(mine),
                            a.path,
                            fmt_num(common)
                        ));
                        level = level.max(Level::Warn);
                    }
                }
            }
            if let Some(mine) = a.inventory.mtu {
                if let Some(common) = majority(
                    peers
                        .iter()
                        .filter_map(|p| p.inventory.mtu.map(|m| m as f64)),
                ) {
                    if (mine as f64 - common).abs() > 0.5 {
                        parts.push(format!(
                            "MTU {mine} on path {} where its peers have {common:.0}",
                            a.path
                        ));
                        level = level.max(Level::Warn);
                    }
                }
            }
        }
        let failed: Vec<&FailedCell> = rep
            .failed
            .iter()
            .filter(|f| f.flows.iter().any(|(a, b)| *a == n || *b == n))
            .collect();
        if !failed.is_empty() {
            parts.push(format!(
                "{} cell(s) with it failed (first: {})",
                failed.len(),
                failed[0].error
            ));
            level = level.max(Level::Warn);
        }
        if parts.is_empty() {
            parts.push("no issue found".into());
        }
        out.push(Verdict {
            scope: "node",
            subject: n,
            level,
            text: parts.join("; "),
        });
    }
    out
}

pub(super) fn list_or_none<S: AsRef<str>>(it: impl Iterator<Item = S>) -> String {
    let v: Vec<String> = it.map(|s| s.as_ref().to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The value most of `vals` share (ties: the larger); `None` when empty.
pub(super) fn majority(vals: impl Iterator<Item = f64>) -> Option<f64> {
    let mut counts: Vec<(f64, usize)> = Vec::new();
    for v in vals {
        match counts.iter_mut().find(|(x, _)| (*x - v).abs() < 1e-9) {
            Some(c) => c.1 += 1,
            None => counts.push((v, 1)),
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.total_cmp(&b.0)))
        .map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_of_values() {
        assert_eq!(majority([100.0, 100.0, 25.0].into_iter()), Some(100.0));
        assert_eq!(majority(std::iter::empty()), None);
    }
}
