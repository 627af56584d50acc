//! Bandwidth, latency and loss rows: which rows a gate selects, which
//! figure of a row it compares, and the threshold (a number, a share of
//! the port rate, or the like row on another path).

use super::eval::{absolute, Check, GateOutcome};
use super::syntax::{Gate, Metric, Reference, Rhs, Stat};
use crate::analysis::{fmt_num, Family, Report, Row};

/// Check the rows the gate selects.
pub(super) fn check(c: &Check<'_>, rep: &Report, out: &mut GateOutcome) {
    let g = c.g;
    for r in rep.rows.iter().filter(|r| row_matches(g, r)) {
        if r.mean().is_none() {
            continue;
        }
        let required = match &g.rhs {
            Rhs::Value(v) => absolute(*v),
            Rhs::Relative(_, Reference::PortRate) if r.port_finding.is_some() => Err(format!(
                "{} port_rate, but {}",
                g.cmp.sym(),
                r.port_finding.as_deref().unwrap_or_default()
            )),
            Rhs::Relative(f, Reference::PortRate) => match r.port_rate_gbps {
                Some(p) => Ok((
                    f * p,
                    format!(" ({:.0} % of the {} Gbit/s port)", f * 100.0, fmt_num(p)),
                )),
                None => Err(format!(
                    "{} port_rate, but the port rate is unknown (no agent inventory for {})",
                    g.cmp.sym(),
                    r.nodes.join(", ")
                )),
            },
            Rhs::Relative(f, Reference::Path(p)) => match rep.counterpart(r, p) {
                Some(b) => match row_figure(g, b) {
                    Ok(v) => Ok((
                        f * v,
                        format!(" ({f} × {} on path {p})", fmt_num(v)),
                    )),
                    Err(why) => Err(format!("on path {p}: {why}")),
                },
                None => Err(format!(
                    "nothing like it on path {p} to compare with (same test kind or transport, size, \
                     streams, op, MTU, rate and pattern)"
                )),
            },
        };
        let label = match stat_word(g).as_str() {
            "" => r.label(),
            s => format!("{} [{s}]", r.label()),
        };
        c.check(out, label, r.cells.to_vec(), row_figure(g, r), required);
    }
}

fn row_matches(g: &Gate, r: &Row) -> bool {
    let s = &g.selectors;
    let kind_ok = match &g.metric {
        Metric::Bw(k) => {
            matches!(r.family, Family::Bandwidth | Family::Udp)
                && k.as_ref().is_none_or(|k| *k == r.kind)
        }
        Metric::Lat(k) => r.family == Family::Latency && k.as_ref().is_none_or(|k| *k == r.kind),
        Metric::UdpLoss => r.family == Family::Udp,
        _ => false,
    };
    // Incast and bisection aggregates have their own metrics.
    kind_ok
        && matches!(r.pattern.as_str(), "pairs" | "mesh")
        && s.path.as_ref().is_none_or(|p| *p == r.path)
        && s.test.as_ref().is_none_or(|t| *t == r.test)
        && s.kind.as_ref().is_none_or(|k| *k == r.kind)
        && s.op.as_ref().is_none_or(|o| r.op.as_ref() == Some(o))
        && s.size.is_none_or(|b| r.size == Some(b))
        && s.node.as_ref().is_none_or(|n| r.nodes.contains(n))
        && s.direction
            .as_ref()
            .is_none_or(|d| r.direction.as_deref().unwrap_or("forward") == d)
}

/// The figure of a row a gate compares, or why there is none.
fn row_figure(g: &Gate, r: &Row) -> Result<f64, String> {
    let none = || format!("no {} figure", stat_word(g));
    match &g.metric {
        Metric::Bw(_) => {
            let st = g.stat.unwrap_or(Stat::Mean);
            match (st, &r.spread, &r.stats) {
                (Stat::CiLow, ..) => ci_low(r),
                // A mesh's or a bisection's instances: the worst and the
                // best instance.
                (Stat::Min, Some(sp), _) => Ok(sp.min),
                (Stat::Max, Some(sp), _) => Ok(sp.max),
                (Stat::Min, None, Some(s)) => Ok(s.min),
                (Stat::Max, None, Some(s)) => Ok(s.max),
                _ => r.mean().ok_or_else(none),
            }
        }
        Metric::Lat(_) => {
            let l = r.lat.as_ref().ok_or_else(none)?;
            match g.stat.unwrap_or(Stat::P50) {
                Stat::P50 => l.p50,
                Stat::P90 => l.p90,
                Stat::P99 => l.p99,
                Stat::P999 => l.p999,
                Stat::Mean => l.mean,
                Stat::Min => l.min,
                Stat::Max => l.max,
                Stat::CiLow => None,
            }
            .ok_or_else(none)
        }
        Metric::UdpLoss => r.loss_pct.ok_or_else(none),
        _ => Err(none()),
    }
}

/// The lower end of the 95 % interval over repeats: of the row, or the
/// lowest of its instances' (a mesh's pairs). One repeat has no interval,
/// and a gate on it fails saying so rather than pass on the mean.
fn ci_low(r: &Row) -> Result<f64, String> {
    const NEED: &str = "ci-low needs ≥ 2 repeats";
    if r.spread.is_some() && r.pattern == "mesh" {
        let mut lo = f64::INFINITY;
        for i in &r.instances {
            match i.stats.as_ref().and_then(|s| s.ci95.map(|c| s.mean - c)) {
                Some(v) => lo = lo.min(v),
                None => {
                    return Err(format!(
                        "{NEED} of every pair; {} has {} (set repeats = 2 or more in the plan)",
                        i.key,
                        i.values.len()
                    ))
                }
            }
        }
        return Ok(lo);
    }
    let s = r.stats.as_ref().ok_or_else(|| "no figure".to_string())?;
    match s.ci95 {
        Some(c) => Ok(s.mean - c),
        None => Err(format!(
            "{NEED}; this row has {} (set repeats = 2 or more in the plan)",
            s.n
        )),
    }
}

fn stat_word(g: &Gate) -> String {
    match (&g.metric, g.stat) {
        (Metric::Bw(_), s) => s.unwrap_or(Stat::Mean).name().to_string(),
        (Metric::Lat(_), s) => s.unwrap_or(Stat::P50).name().to_string(),
        _ => String::new(),
    }
}
