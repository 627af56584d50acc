//! Links: suspect pairs that no named node or rail explains.

use super::confirm::SuspectState;
use super::findings::{MeshGroup, NodeFinding};
use super::rails::rail_of;
use std::collections::BTreeSet;

/// Name the links (a < b) behind suspects not explained by a named node
/// or rail: confirmed ones in `bad_links`, the others in
/// `unconfirmed_links`.
pub(super) fn name_links(g: &mut MeshGroup) {
    // Links: suspects no named node explains. A named node explains every
    // suspect pair it is in, also in its other direction (a node that
    // drops its transmits also slows its receives, whose acknowledgements
    // it sends): one faulty node is likelier than several faulty links.
    let rails: Vec<u32> = g.rail_findings.iter().map(|f| f.rail).collect();
    let explains = |f: &NodeFinding, a: &str, b: &str| f.node == a || f.node == b;
    let on_named_rail = |a: &str, b: &str| {
        [a, b]
            .iter()
            .any(|e| rail_of(e).is_some_and(|(_, r)| rails.contains(&r)))
    };
    let link = |a: &str, b: &str| {
        if a < b {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        }
    };
    let mut bad: BTreeSet<(String, String)> = BTreeSet::new();
    let mut maybe: BTreeSet<(String, String)> = BTreeSet::new();
    for s in &g.suspects {
        if s.state == SuspectState::Cleared
            || on_named_rail(&s.src, &s.dst)
            || g.node_findings.iter().any(|f| explains(f, &s.src, &s.dst))
        {
            continue;
        }
        match s.state {
            SuspectState::Confirmed => bad.insert(link(&s.src, &s.dst)),
            _ => maybe.insert(link(&s.src, &s.dst)),
        };
    }
    g.unconfirmed_links = maybe.difference(&bad).cloned().collect();
    g.bad_links = bad.into_iter().collect();
}
