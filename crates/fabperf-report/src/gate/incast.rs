//! Incast figures: Jain's index, the smallest share and the aggregate of
//! each incast cell, one direction at a time.

use super::eval::{Check, GateOutcome};
use super::syntax::{Metric, Reference, Rhs, Selectors};
use crate::analysis::{fmt_num, Report};

/// Check the incast cells the gate selects.
pub(super) fn check(c: &Check<'_>, rep: &Report, out: &mut GateOutcome) {
    let g = c.g;
    let sel = &g.selectors;
    // Each cell's directions on their own; one without a figure is
    // named in a note, never counted.
    for ic in &rep.incasts {
        let l = &ic.leg;
        if sel.path.as_ref().is_some_and(|p| *p != ic.path)
            || sel.test.as_ref().is_some_and(|t| *t != ic.test)
            || sel
                .node
                .as_ref()
                .is_some_and(|n| *n != ic.receiver && !ic.cell_flows.iter().any(|(a, _)| a == n))
            || !direction_selected(sel, l)
        {
            continue;
        }
        let subject = format!(
            "incast {} into {} on path {} (repeat {}{})",
            ic.test,
            ic.receiver,
            ic.path,
            ic.repeat + 1,
            if l.is_plain() {
                String::new()
            } else {
                format!(", {}", l.direction_words())
            }
        );
        if let Some(why) = &l.failed {
            out.notes
                .push(format!("{subject}: no figure, not checked: {why}"));
            continue;
        }
        let measured = match g.metric {
            Metric::IncastJain => l.jain,
            Metric::IncastMinShare => l.min_share(),
            _ => l.aggregate_gbps,
        };
        let req = match &g.rhs {
            Rhs::Value(x) => Ok((*x, String::new())),
            Rhs::Relative(_, Reference::PortRate) if l.port_finding.is_some() => Err(format!(
                "{} port_rate, but {}",
                g.cmp.sym(),
                l.port_finding.as_deref().unwrap_or_default()
            )),
            Rhs::Relative(f, Reference::PortRate) => match l.port_rate_gbps {
                Some(p) => Ok((
                    f * p,
                    format!(
                        " ({:.0} % of the receiver's {} Gbit/s port{})",
                        f * 100.0,
                        fmt_num(p),
                        if l.to_clients { ", sending" } else { "" }
                    ),
                )),
                None => Err(format!(
                    "{} port_rate, but {}'s port rate is unknown (no agent inventory)",
                    g.cmp.sym(),
                    ic.receiver
                )),
            },
            Rhs::Relative(..) => Err("incast figures compare with a number or port_rate".into()),
        };
        c.check(
            out,
            subject,
            vec![ic.cell.clone()],
            measured.ok_or_else(|| l.note.clone().unwrap_or_else(|| "no figure".to_string())),
            req,
        );
    }
}

/// Does a `direction:` selector take this direction of a multi-flow cell?
/// `forward`/`reverse` take that direction (of a bidir cell too), `bidir`
/// both directions of bidir cells.
fn direction_selected(sel: &Selectors, l: &crate::flows::Leg) -> bool {
    sel.direction
        .as_ref()
        .is_none_or(|d| *d == l.direction || (d == "bidir" && l.of_bidir))
}
