//! Links: suspect pairs that no named node or rail explains.

use super::confirm::SuspectState;
use super::findings::{ExplainedLink, MeshAnalysis, MeshGroup, NodeFinding};
use super::rails::rail_of;
use super::rule::Metric;
use std::collections::{BTreeMap, BTreeSet};

/// How far below (bandwidth) or above (latency) a node's median pair a
/// link may be and still be that node's fault when another group names the
/// node. An added millisecond of round trip costs the short TCP flows of a
/// mesh a tenth to a third of their rate, and some pairs more than others
/// (measured on the testbed: a delayed node's pairs at a median of 0.92 of
/// the healthy ones, its worst at 0.7); a link at a fifth of its rate is its
/// own fault, whatever its ends.
pub const EXPLAIN_FACTOR: f64 = 2.0;

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
            SuspectState::Unconfirmed => maybe.insert(link(&s.src, &s.dst)),
            // Explained by a node above; never a link.
            SuspectState::Cleared | SuspectState::WithNode => continue,
        };
    }
    g.unconfirmed_links = maybe.difference(&bad).cloned().collect();
    g.bad_links = bad.into_iter().collect();
}

/// Across a run's mesh analyses: take out of `bad_links` the links that a
/// node named (confirmed) by another group on the same path explains, into
/// `explained_links`. One group's nodes already explain that group's links
/// ([`name_links`]); a node named by another test — the latency mesh names a
/// node with added delay, whose bandwidth pairs then fall below the rule
/// unevenly — explains a link only when the link's figure is within
/// [`EXPLAIN_FACTOR`] of the node's own median pair in the link's group, so
/// that a link much slower than the node's other pairs is still named.
pub fn explain_across(analyses: &mut [MeshAnalysis]) {
    // (path, node) -> the groups (test, sweep point) that name it, in order.
    let mut named: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
    for g in analyses.iter().flat_map(|a| &a.groups) {
        for n in &g.bad_nodes {
            named
                .entry((g.path.clone(), n.clone()))
                .or_default()
                .insert((g.test.clone(), g.dims.to_string()));
        }
    }
    for g in analyses.iter_mut().flat_map(|a| &mut a.groups) {
        let dims = g.dims.to_string();
        let mut kept = Vec::new();
        for (x, y) in std::mem::take(&mut g.bad_links) {
            let by = [&x, &y].into_iter().find_map(|n| {
                let mut others: Vec<String> = named
                    .get(&(g.path.clone(), n.clone()))?
                    .iter()
                    .filter(|(t, d)| !(t == &g.test && d == &dims))
                    .map(|(t, _)| t.clone())
                    .collect();
                // Sorted by test: one name per test, whatever its sweep points.
                others.dedup();
                if others.is_empty() {
                    return None;
                }
                explained_by(g, &x, &y, n, others)
            });
            match by {
                Some(e) => g.explained_links.push(e),
                None => kept.push((x, y)),
            }
        }
        g.bad_links = kept;
    }
}

/// Whether `node` (an end of the link x - y) explains the link in `g`.
fn explained_by(
    g: &MeshGroup,
    x: &str,
    y: &str,
    node: &str,
    named_by: Vec<String>,
) -> Option<ExplainedLink> {
    let on_link = |a: &str, b: &str| (a == x && b == y) || (a == y && b == x);
    let worse = |p: f64, q: f64| match g.metric {
        Metric::BandwidthGbps => p.min(q),
        Metric::LatencyP50Us => p.max(q),
    };
    let value = g
        .suspects
        .iter()
        .filter(|s| s.state == SuspectState::Confirmed && on_link(&s.src, &s.dst))
        .map(|s| s.value)
        .reduce(worse)?;
    // The node's row and column of the matrix, not the whole of it: a
    // 1024-node group has a million pairs and may have many links to judge.
    let sends = g
        .values
        .get(node)
        .into_iter()
        .flat_map(|row| row.iter().map(|(b, v)| (node, b.as_str(), *v)));
    let receives = g
        .values
        .iter()
        .filter_map(|(a, row)| row.get(node).map(|v| (a.as_str(), node, *v)));
    let mut pairs: Vec<f64> = sends
        .chain(receives)
        .filter(|(a, b, v)| !on_link(a, b) && v.is_finite())
        .map(|(_, _, v)| v)
        .collect();
    if pairs.is_empty() {
        return None;
    }
    pairs.sort_by(f64::total_cmp);
    let node_median = pairs[pairs.len() / 2];
    let within = match g.metric {
        Metric::BandwidthGbps => node_median <= EXPLAIN_FACTOR * value,
        Metric::LatencyP50Us => value <= EXPLAIN_FACTOR * node_median,
    };
    within.then(|| ExplainedLink {
        a: x.to_string(),
        b: y.to_string(),
        node: node.to_string(),
        named_by,
        value,
        node_median,
    })
}

#[cfg(test)]
mod tests {
    use super::super::findings::Suspect;
    use super::super::fixture::*;
    use super::super::rule::Metric;
    use super::*;

    const N: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];

    /// A group of `test` on `path` at `size`: every ordered pair of N at
    /// `fig(a, b)`, the given confirmed suspects, named nodes and links.
    fn group(
        test: &str,
        path: &str,
        size: u64,
        metric: Metric,
        fig: impl Fn(&str, &str) -> f64,
        bad_nodes: &[&str],
        bad_links: &[(&str, &str)],
    ) -> MeshGroup {
        let mut s = spec("c", "mesh", "n1", "n2", json!({}), 0);
        s.test = test.into();
        s.path = path.into();
        s.dims = json!({ "size": size });
        let mut g = MeshGroup::empty(&s, metric);
        g.nodes = N.iter().map(|n| n.to_string()).collect();
        g.repeats = 1;
        for a in N {
            for b in N.iter().filter(|b| **b != a) {
                g.values
                    .entry(a.to_string())
                    .or_default()
                    .insert(b.to_string(), fig(a, b));
            }
        }
        g.bad_nodes = bad_nodes.iter().map(|n| n.to_string()).collect();
        for (a, b) in bad_links {
            g.bad_links.push((a.to_string(), b.to_string()));
            g.suspects.push(Suspect {
                src: a.to_string(),
                dst: b.to_string(),
                value: fig(a, b),
                retests: vec![fig(a, b)],
                retests_failed: Vec::new(),
                state: SuspectState::Confirmed,
                confirmed: true,
            });
        }
        g
    }

    /// The analysis of one test: its groups' (all of that test).
    fn analysis(groups: Vec<MeshGroup>) -> MeshAnalysis {
        MeshAnalysis {
            run_id: 1,
            test: groups[0].test.clone(),
            rule: RuleKind::Median,
            bw_fraction: DEFAULT_BW_FRACTION,
            lat_factor: DEFAULT_LAT_FACTOR,
            groups,
            stale_cells: Vec::new(),
        }
    }

    /// A mesh on the fabric with its named nodes and links: test `bw` at
    /// 64 KiB for bandwidth, `lat` at 64 B for latency.
    fn fabric(
        metric: Metric,
        fig: impl Fn(&str, &str) -> f64,
        nodes: &[&str],
        links: &[(&str, &str)],
    ) -> MeshAnalysis {
        let (test, size) = match metric {
            Metric::BandwidthGbps => ("bw", 65536),
            _ => ("lat", 64),
        };
        analysis(vec![group(test, "fabric", size, metric, fig, nodes, links)])
    }

    /// Bandwidth: 10 between healthy nodes, n3's pairs 9 (its delay), the
    /// n1 - n3 link 6 (its delay, unevenly), the n3 - n5 link 1.5 (a rate
    /// fault on a delayed node's link), n2 - n4 4 (a link fault).
    fn bw(a: &str, b: &str) -> f64 {
        let is = |x: &str, y: &str| (a == x && b == y) || (a == y && b == x);
        if is("n1", "n3") {
            6.0
        } else if is("n3", "n5") {
            1.5
        } else if is("n2", "n4") {
            4.0
        } else if a == "n3" || b == "n3" {
            9.0
        } else {
            10.0
        }
    }

    #[test]
    fn a_node_named_by_another_test_explains_the_links_it_slows_only() {
        let links = [("n1", "n3"), ("n2", "n4"), ("n3", "n5")];
        let lat = |a: &str, b: &str| if a == "n3" || b == "n3" { 1020.0 } else { 20.0 };
        let mut all = vec![
            fabric(Metric::BandwidthGbps, bw, &[], &links),
            fabric(Metric::LatencyP50Us, lat, &["n3"], &[]),
        ];
        explain_across(&mut all);
        let g = &all[0].groups[0];
        // n3 explains n1 - n3 (6 against its median pair 9), not n3 - n5
        // (1.5: six times below); n2 - n4 has no named end.
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(g.bad_links, vec![pair("n2", "n4"), pair("n3", "n5")]);
        assert_eq!(
            g.explained_links,
            vec![ExplainedLink {
                a: "n1".into(),
                b: "n3".into(),
                node: "n3".into(),
                named_by: vec!["lat".into()],
                value: 6.0,
                node_median: 9.0,
            }]
        );
        // The latency group is untouched, and the text says why.
        assert!(all[1].groups[0].explained_links.is_empty());
        let text = render(&all[0]);
        assert!(
            text.contains("link n1 - n3 explained by node n3 (named by lat): n1 -> n3 6.00, re-tests 6.00 (confirmed); n3's median pair here 9.00"),
            "{text}"
        );
        assert!(text.contains("SUSPECT LINK n3 - n5"), "{text}");
        // The JSON has them; a group without any leaves the key out.
        let json = serde_json::to_value(&all).unwrap();
        assert_eq!(json[0]["groups"][0]["explained_links"][0]["node"], "n3");
        assert!(json[1]["groups"][0].get("explained_links").is_none());
    }

    #[test]
    fn a_link_is_explained_by_other_groups_on_its_path_only() {
        let links = [("n1", "n3")];
        let bw_group = |size| group("bw", "fabric", size, Metric::BandwidthGbps, bw, &[], &links);
        // The same group naming n3 would have explained it itself; a group
        // of another path names another node (the same name on another
        // network is another port).
        let mut all = vec![
            analysis(vec![bw_group(65536)]),
            analysis(vec![group(
                "lat",
                "overlay",
                64,
                Metric::LatencyP50Us,
                |_, _| 20.0,
                &["n3"],
                &[],
            )]),
        ];
        explain_across(&mut all);
        assert_eq!(all[0].groups[0].bad_links.len(), 1);
        assert!(all[0].groups[0].explained_links.is_empty());
        // Another sweep point of the same test on the same path does.
        let mut named = bw_group(4096);
        named.bad_nodes = vec!["n3".into()];
        named.bad_links.clear();
        let mut all = vec![analysis(vec![bw_group(65536), named])];
        explain_across(&mut all);
        assert!(all[0].groups[0].bad_links.is_empty());
        assert_eq!(all[0].groups[0].explained_links[0].named_by, vec!["bw"]);
        assert!(all[0].groups[1].explained_links.is_empty());
    }

    #[test]
    fn latency_links_are_explained_within_the_factor_of_the_node() {
        // A node named by the bandwidth mesh; a latency link at it 1.5x
        // its median pair is its; one at 50x is a link of its own.
        let lat = |a: &str, b: &str| {
            let is = |x: &str, y: &str| (a == x && b == y) || (a == y && b == x);
            if is("n1", "n3") {
                30.0
            } else if is("n3", "n6") {
                1000.0
            } else {
                20.0
            }
        };
        let mut all = vec![
            fabric(Metric::BandwidthGbps, bw, &["n3"], &[]),
            fabric(
                Metric::LatencyP50Us,
                lat,
                &[],
                &[("n1", "n3"), ("n3", "n6")],
            ),
        ];
        explain_across(&mut all);
        let g = &all[1].groups[0];
        assert_eq!(g.bad_links, vec![("n3".to_string(), "n6".to_string())]);
        assert_eq!(g.explained_links.len(), 1);
        assert_eq!(
            (g.explained_links[0].value, g.explained_links[0].node_median),
            (30.0, 20.0)
        );
    }

    #[test]
    fn a_nodes_median_pair_is_over_its_sends_and_its_receives() {
        // n3 sends at 4 and receives at 10, n5 the other way round; their
        // median pair over both is 10 (the upper middle), so links at 3 to
        // them are more than twice as slow and stay named. Judged on one
        // direction alone, either node would explain its link.
        let fig = |a: &str, b: &str| {
            let is = |x: &str, y: &str| (a == x && b == y) || (a == y && b == x);
            if is("n1", "n3") || is("n5", "n6") {
                3.0
            } else if a == "n3" || b == "n5" {
                4.0
            } else {
                10.0
            }
        };
        let links = [("n1", "n3"), ("n5", "n6")];
        let mut all = vec![
            fabric(Metric::BandwidthGbps, fig, &[], &links),
            fabric(Metric::LatencyP50Us, |_, _| 20.0, &["n3", "n5"], &[]),
        ];
        explain_across(&mut all);
        let g = &all[0].groups[0];
        assert!(g.explained_links.is_empty(), "{:?}", g.explained_links);
        assert_eq!(g.bad_links.len(), 2);
    }
}
