//! Mesh counts: confirmed outliers, suspect nodes, rails and links, and
//! failed pairs per mesh group; what is not confirmed is said in a note,
//! not counted.

use super::eval::{Check, GateOutcome};
use super::syntax::{Metric, Rhs};
use crate::analysis::{fmt_num, Report};

/// Check the mesh groups the gate selects.
pub(super) fn check(c: &Check<'_>, rep: &Report, out: &mut GateOutcome) {
    let g = c.g;
    let sel = &g.selectors;
    for m in rep.meshes.iter().flat_map(|m| &m.groups) {
        if sel.path.as_ref().is_some_and(|p| *p != m.path)
            || sel.test.as_ref().is_some_and(|t| *t != m.test)
            || sel.kind.as_ref().is_some_and(|k| *k != m.kind)
            || sel.node.as_ref().is_some_and(|n| !m.nodes.contains(n))
        {
            continue;
        }
        let on_node = |a: &str, b: &str| sel.node.as_ref().is_none_or(|n| n == a || n == b);
        let v = match g.metric {
            Metric::MeshOutliers => m
                .suspects
                .iter()
                .filter(|s| s.held() && on_node(&s.src, &s.dst))
                .count(),
            Metric::MeshSuspectNodes => m
                .bad_nodes
                .iter()
                .filter(|n| sel.node.as_ref().is_none_or(|x| x == *n))
                .count(),
            // A named rail concerns every node on it.
            Metric::MeshSuspectRails => m.bad_rails.len(),
            Metric::MeshSuspectLinks => m.bad_links.iter().filter(|(a, b)| on_node(a, b)).count(),
            _ => m.failed.iter().filter(|(a, b, _)| on_node(a, b)).count(),
        };
        let subject = format!(
            "mesh {} ({}) on path {}{}",
            m.test,
            m.kind,
            m.path,
            if m.dims.as_object().is_some_and(|o| !o.is_empty()) {
                format!(" {}", m.dims)
            } else {
                String::new()
            }
        );
        let mut why = String::new();
        if v > 0 {
            let names: Vec<String> = match g.metric {
                Metric::MeshSuspectNodes => m.bad_nodes.clone(),
                Metric::MeshSuspectRails => m.bad_rails.clone(),
                Metric::MeshSuspectLinks => m
                    .bad_links
                    .iter()
                    .map(|(a, b)| format!("{a}-{b}"))
                    .collect(),
                Metric::MeshFailed => m
                    .failed
                    .iter()
                    .map(|(a, b, _)| format!("{a}->{b}"))
                    .collect(),
                _ => m
                    .suspects
                    .iter()
                    .filter(|s| s.held())
                    .map(|s| format!("{}->{} {}", s.src, s.dst, fmt_num(s.value)))
                    .collect(),
            };
            why = format!(" ({})", names.join(", "));
        }
        // Counts are of confirmed findings; what is not confirmed
        // is said, not counted.
        let unconfirmed: Vec<String> = match g.metric {
            Metric::MeshOutliers => m
                .unconfirmed()
                .filter(|s| on_node(&s.src, &s.dst))
                .map(|s| format!("{}->{} {}", s.src, s.dst, fmt_num(s.value)))
                .collect(),
            Metric::MeshSuspectNodes => m
                .node_findings
                .iter()
                .filter(|f| !f.confirmed && sel.node.as_ref().is_none_or(|x| *x == f.node))
                .map(|f| f.node.clone())
                .collect(),
            Metric::MeshSuspectRails => m
                .rail_findings
                .iter()
                .filter(|f| !f.confirmed)
                .map(|f| f.name.clone())
                .collect(),
            Metric::MeshSuspectLinks => m
                .unconfirmed_links
                .iter()
                .filter(|(a, b)| on_node(a, b))
                .map(|(a, b)| format!("{a}-{b}"))
                .collect(),
            _ => Vec::new(),
        };
        if !unconfirmed.is_empty() {
            out.notes.push(format!(
                "{subject}: {} more not counted, unconfirmed (no re-test gave a figure): {}",
                unconfirmed.len(),
                unconfirmed.join(", ")
            ));
        }
        let req = match &g.rhs {
            Rhs::Value(x) => Ok((*x, String::new())),
            _ => Err("mesh counts compare with a number".to_string()),
        };
        let before = out.violations.len();
        c.check(out, subject, Vec::new(), Ok(v as f64), req);
        if let Some(last) = out.violations.get_mut(before) {
            last.measured.push_str(&why);
        }
    }
}
