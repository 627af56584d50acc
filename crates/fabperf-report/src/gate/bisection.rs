//! Bisection bandwidth: per test, path and direction, the slowest cut.

use super::eval::{Check, GateOutcome};
use super::syntax::{Reference, Rhs};
use crate::analysis::{fmt_num, Report};

/// Check the bisections the gate selects.
pub(super) fn check(c: &Check<'_>, rep: &Report, out: &mut GateOutcome) {
    let g = c.g;
    let sel = &g.selectors;
    // The bisection bandwidth of a test on a path, per direction:
    // the slowest cut.
    for b in rep.rows.iter().filter(|r| r.pattern == "bisection") {
        let dir = b.direction.as_deref().unwrap_or("forward");
        if sel.path.as_ref().is_some_and(|p| *p != b.path)
            || sel.test.as_ref().is_some_and(|t| *t != b.test)
            || sel.node.as_ref().is_some_and(|n| !b.nodes.contains(n))
            || sel
                .direction
                .as_ref()
                .is_some_and(|d| d != dir && !(d == "bidir" && b.of_bidir))
        {
            continue;
        }
        let subject = format!(
            "bisection {} on path {} ({}{}{})",
            b.test,
            b.path,
            b.scope,
            b.direction_words()
                .map(|d| format!(", {d}"))
                .unwrap_or_default(),
            b.spread
                .as_ref()
                .map(|sp| format!(": {}", sp.worst))
                .unwrap_or_default()
        );
        for f in &b.failed {
            out.notes.push(format!(
                "{subject}: repeat {} of cut {} has no figure, not counted: {}",
                f.repeat + 1,
                f.instance,
                f.reason
            ));
        }
        if !b.unmeasured.is_empty() {
            out.notes.push(format!(
                "{subject}: {} cut(s) without any figure are not in the minimum: {}",
                b.unmeasured.len(),
                b.unmeasured.join("; ")
            ));
        }
        if b.mean().is_none() {
            continue;
        }
        let req = match &g.rhs {
            Rhs::Value(x) => Ok((*x, String::new())),
            Rhs::Relative(_, Reference::PortRate) if b.port_finding.is_some() => Err(format!(
                "{} port_rate, but {}",
                g.cmp.sym(),
                b.port_finding.as_deref().unwrap_or_default()
            )),
            Rhs::Relative(f, Reference::PortRate) => match b.port_rate_gbps {
                Some(p) => Ok((
                    f * p,
                    format!(
                        " ({:.0} % of the cut's flows' port rates, {} Gbit/s)",
                        f * 100.0,
                        fmt_num(p)
                    ),
                )),
                None => Err(format!(
                    "{} port_rate, but a port rate is unknown (no agent inventory, or a virtual link)",
                    g.cmp.sym()
                )),
            },
            Rhs::Relative(..) => {
                Err("bisection bandwidth compares with a number or port_rate".into())
            }
        };
        c.check(
            out,
            subject,
            b.cells.to_vec(),
            b.mean().ok_or_else(|| "no figure".to_string()),
            req,
        );
    }
}
