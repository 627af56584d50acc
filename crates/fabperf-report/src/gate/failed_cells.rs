//! `failed-cells`: the run's failed cells the gate selects, counted.

use super::eval::{Check, GateOutcome};
use super::syntax::Rhs;
use crate::analysis::Report;

/// Count the failed cells the gate selects.
pub(super) fn check(c: &Check<'_>, rep: &Report, out: &mut GateOutcome) {
    let g = c.g;
    let sel = &g.selectors;
    let failed: Vec<&crate::analysis::FailedCell> = rep
        .failed
        .iter()
        .filter(|f| {
            sel.path.as_ref().is_none_or(|p| *p == f.path)
                && sel.test.as_ref().is_none_or(|t| *t == f.test)
                && sel
                    .node
                    .as_ref()
                    .is_none_or(|n| f.flows.iter().any(|(a, b)| a == n || b == n))
        })
        .collect();
    let req = match &g.rhs {
        Rhs::Value(x) => Ok((*x, String::new())),
        _ => Err("failed-cells compares with a number".to_string()),
    };
    let cells = failed.iter().map(|f| f.cell.clone()).collect();
    let before = out.violations.len();
    c.check(
        out,
        format!("run {}", rep.run.id),
        cells,
        Ok(failed.len() as f64),
        req,
    );
    if let Some(v) = out.violations.get_mut(before) {
        if let Some(f) = failed.first() {
            v.measured
                .push_str(&format!(" (first: {}: {})", f.test, f.error));
        }
    }
}
