//! Rail meshes: a rail cell's ends are the nodes' rails (`n2/rail1`), all
//! rails of a sweep point one group; a rail whose every node is named is
//! named instead of its nodes.

use super::findings::{MeshGroup, NodeFault, NodeFinding, RailFinding};
use fabperf_store::CellSpec;
use std::collections::BTreeMap;

/// The end of a rail cell's flow as the summary names it: the node and
/// its rail.
pub fn rail_end(node: &str, rail: u32) -> String {
    format!("{node}/rail{rail}")
}

/// A rail cell as the summary sees it: its flow between the two nodes'
/// rails ([`rail_end`]), its dimensions without the rails (one group for
/// all rails). `None` for a cell without rails.
pub(super) fn on_rails(s: &CellSpec) -> Option<CellSpec> {
    let (from, to) = crate::rails::cell_rails(s)?;
    let mut c = s.clone();
    c.flows = c
        .flows
        .iter()
        .map(|(a, b)| (rail_end(a, from), rail_end(b, to)))
        .collect();
    if let Some(o) = c.dims.as_object_mut() {
        o.remove("rail");
        o.remove("rail_to");
    }
    Some(c)
}

/// The node and rail of a rail end ([`rail_end`]).
pub(super) fn rail_of(end: &str) -> Option<(&str, u32)> {
    let (node, rail) = end.rsplit_once("/rail")?;
    Some((node, rail.parse().ok()?))
}

/// The least nodes on a rail for its ends' findings to name the rail: with
/// two, one bad cable fails both ends' every pair just as a bad leaf does.
pub const RAIL_MIN_NODES: usize = 3;

/// A rail whose every end (node) is named — at least [`RAIL_MIN_NODES`] of
/// them — is named instead of its nodes: one leaf switch (or what every
/// node shares on that rail) is likelier than every node failing on the
/// same rail at once.
pub(super) fn fold_rails(g: &mut MeshGroup) {
    let mut ends: BTreeMap<u32, usize> = BTreeMap::new();
    for n in &g.nodes {
        if let Some((_, r)) = rail_of(n) {
            *ends.entry(r).or_default() += 1;
        }
    }
    for (rail, count) in ends {
        if count < RAIL_MIN_NODES {
            continue;
        }
        let on_rail = |f: &NodeFinding| rail_of(&f.node).is_some_and(|(_, r)| r == rail);
        let named: Vec<&NodeFinding> = g.node_findings.iter().filter(|f| on_rail(f)).collect();
        if named.len() < count {
            continue;
        }
        let confirmed = named.iter().all(|f| f.confirmed);
        let count_of = |k: NodeFault| named.iter().filter(|f| f.fault == k).count();
        let how: Vec<String> = [
            (NodeFault::Dead, "every cell failed"),
            (NodeFault::All, "its pairs fail"),
            (NodeFault::Sends, "its sends fail"),
            (NodeFault::Receives, "its receives fail"),
        ]
        .iter()
        .filter(|(k, _)| count_of(*k) > 0)
        .map(|(k, w)| format!("{}: {w}", count_of(*k)))
        .collect();
        let text = format!(
            "every one of its {count} nodes fails on it ({}): its leaf switch, or what every node shares on rail {rail}, rather than {count} faulty nodes",
            how.join("; ")
        );
        g.node_findings.retain(|f| !on_rail(f));
        g.rail_findings.push(RailFinding {
            rail,
            name: format!("rail{rail}"),
            nodes: count,
            confirmed,
            text,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;

    /// A rail mesh: every pair of `nodes` both ways on each of `rails`;
    /// `slow(node, rail)` makes every pair of that end 2 Gbit/s.
    fn rail_mesh(nodes: &[&str], rails: u32, slow: impl Fn(&str, u32) -> bool) -> Fixture {
        let mut mesh = Vec::new();
        let mut rts = Vec::new();
        let cell = |id: String, pattern: &str, a: &str, b: &str, r: u32| {
            let mut c = spec(&id, pattern, a, b, json!({}), 0);
            c.dims = json!({"size": 65536, "rail": r});
            c
        };
        for r in 0..rails {
            for a in nodes {
                for b in nodes {
                    if a == b {
                        continue;
                    }
                    let bad = slow(a, r) || slow(b, r);
                    let v = if bad { 2.0 } else { 10.0 };
                    mesh.push((
                        cell(format!("{a}{b}r{r}"), "mesh", a, b, r),
                        Ok(vec![rec(v, "forward")]),
                    ));
                    if bad {
                        rts.push((
                            cell(format!("rt-{a}{b}r{r}"), RETEST, a, b, r),
                            Ok(vec![rec(2.5, "forward")]),
                        ));
                    }
                }
            }
        }
        fixture(mesh, rts)
    }

    #[test]
    fn a_rail_failing_on_every_node_is_named_not_its_nodes() {
        let nodes = ["n1", "n2", "n3", "n4"];
        // One node's rail 1 (a cable): that end is named.
        let f = rail_mesh(&nodes, 4, |n, r| n == "n3" && r == 1);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n3/rail1".to_string()], "{text}");
        assert!(
            g.rail_findings.is_empty() && g.bad_links.is_empty(),
            "{text}"
        );
        // Rail 2 on every node (its leaf): the rail, no node, no link.
        let f = rail_mesh(&nodes, 4, |_, r| r == 2);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_rails, vec!["rail2".to_string()], "{text}");
        assert!(g.node_findings.is_empty(), "{text}");
        assert!(
            g.bad_links.is_empty() && g.unconfirmed_links.is_empty(),
            "{text}"
        );
        assert!(
            text.contains(
                "SUSPECT RAIL rail2: every one of its 4 nodes fails on it (4: its pairs fail)"
            ),
            "{text}"
        );
        assert!(!text.contains("SUSPECT NODE"), "{text}");
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["bad_rails"], json!(["rail2"]));
        // Two nodes: a bad cable and a bad leaf look alike; the ends are
        // named.
        let f = rail_mesh(&nodes[..2], 2, |_, r| r == 1);
        let (_, g, text) = analyze_one(&f);
        assert!(g.rail_findings.is_empty(), "{text}");
    }
}
