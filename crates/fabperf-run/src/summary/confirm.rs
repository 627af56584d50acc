//! Re-test confirmation: where a suspect stands after its re-tests.

use super::rule::{passes, Metric};
use serde::Serialize;

/// Where a suspect stands after its re-tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuspectState {
    /// No re-test produced a figure (re-tests failed, were not run, or the
    /// rule changed after the run): neither confirmed nor cleared.
    Unconfirmed,
    /// Re-tests ran and every one failed the rule as well.
    Confirmed,
    /// A re-test met the rule: the mesh figure was noise.
    Cleared,
    /// Not re-tested: the pair of a node that the re-tests of a sample of
    /// its pairs confirmed (`retest_sample`); it stands with that node.
    WithNode,
}

impl SuspectState {
    pub fn word(self) -> &'static str {
        match self {
            SuspectState::Unconfirmed => "unconfirmed",
            SuspectState::Confirmed => "confirmed",
            SuspectState::Cleared => "cleared",
            SuspectState::WithNode => "with its node",
        }
    }
}

/// A suspect's state from its re-tests' figures (a failed re-test has
/// none): cleared when one meets the rule (the mesh figure was noise),
/// unconfirmed without any figure, confirmed when every one fails it too.
pub(super) fn confirmation(metric: Metric, threshold: f64, retests: &[f64]) -> SuspectState {
    if retests.iter().any(|&x| passes(metric, x, threshold)) {
        SuspectState::Cleared
    } else if retests.is_empty() {
        SuspectState::Unconfirmed
    } else {
        SuspectState::Confirmed
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;

    #[test]
    fn suspects_are_confirmed_cleared_or_unconfirmed() {
        let slow = [("n1", "n2"), ("n1", "n3"), ("n2", "n4"), ("n3", "n4")];
        let f = fixture(
            mesh_cells(|a, b| {
                Ok(vec![rec(
                    if slow.contains(&(a, b)) { 5.0 } else { 10.0 },
                    "forward",
                )])
            }),
            vec![
                // Confirmed: the re-test is slow too.
                retest("n1", "n2", 0, Ok(vec![rec(4.0, "forward")])),
                // Cleared: the re-test meets the rule.
                retest("n1", "n3", 0, Ok(vec![rec(9.9, "forward")])),
                // Unconfirmed: the re-test failed.
                retest("n2", "n4", 0, Err("connection refused")),
                // n3 -> n4: no re-test at all.
            ],
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(state(&g, "n1", "n2"), Some(SuspectState::Confirmed));
        assert_eq!(state(&g, "n1", "n3"), Some(SuspectState::Cleared));
        assert_eq!(state(&g, "n2", "n4"), Some(SuspectState::Unconfirmed));
        assert_eq!(state(&g, "n3", "n4"), Some(SuspectState::Unconfirmed));
        let failed = g
            .suspects
            .iter()
            .find(|s| s.src == "n2" && s.dst == "n4")
            .unwrap();
        assert_eq!(
            failed.retests_failed,
            vec!["connection refused".to_string()]
        );
        assert!(!failed.confirmed);
        assert_eq!(g.unconfirmed().count(), 2);
        // Only the confirmed suspect blames a link.
        assert_eq!(g.bad_links, vec![("n1".to_string(), "n2".to_string())]);
        assert_eq!(
            g.unconfirmed_links,
            vec![
                ("n2".to_string(), "n4".to_string()),
                ("n3".to_string(), "n4".to_string())
            ]
        );
        assert!(g.bad_nodes.is_empty());
        assert!(
            text.contains("SUSPECT LINK n1 - n2: n1 -> n2 5.00, re-tests 4.00 (confirmed)"),
            "{text}"
        );
        assert!(text.contains("unconfirmed SUSPECT LINK n2 - n4"), "{text}");
        assert!(
            text.contains("unconfirmed n2 -> n4: 5.00 in the mesh; 1 re-test failed (connection refused); `fabperf run PLAN --retry-failed` runs it again"),
            "{text}"
        );
        assert!(
            text.contains("unconfirmed n3 -> n4: 5.00 in the mesh; no re-test ran"),
            "{text}"
        );
        assert!(text.contains("cleared n1 -> n3"), "{text}");
        assert!(
            text.contains("5.00?") && text.contains("5.00!") && text.contains("5.00~"),
            "{text}"
        );
        // Nothing is "not measured": both directions were.
        assert!(!text.contains(" . not measured"), "{text}");
    }

    #[test]
    fn a_changed_rule_leaves_new_suspects_unconfirmed() {
        let f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n1" { 8.0 } else { 10.0 }, "forward")])),
            vec![],
        );
        // The plan's rule: nobody is a suspect at 0.7.
        let a = analyze(
            &f.store,
            f.run,
            "mesh",
            &Rule::new(RuleKind::Median, 0.7, DEFAULT_LAT_FACTOR),
        )
        .unwrap();
        assert!(a.groups[0].suspects.is_empty());
        // A stricter rule afterwards: n1's sends are suspects with no re-test.
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.unconfirmed().count(), 3);
        assert!(g.bad_nodes.is_empty(), "nothing is confirmed");
        let n1 = &g.node_findings[0];
        assert_eq!(
            (n1.node.as_str(), n1.fault, n1.confirmed),
            ("n1", NodeFault::Sends, false)
        );
        assert!(
            text.contains("unconfirmed SUSPECT NODE n1: its sends fail"),
            "{text}"
        );
        assert!(!text.contains("\n  SUSPECT NODE"), "{text}");
    }
}
