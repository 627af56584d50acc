//! The reference a group's pairs are judged against: the rule's pair (the
//! median or the best), its figure capped at the group's real port rate.

use super::findings::{MeshGroup, Reference};
use super::rule::{Metric, RuleKind};
use std::collections::{BTreeMap, BTreeSet};

/// A group's reference and the figure the rule applies to: the rule's
/// pair ([`reference_pair`]), capped at the group's port rate when it
/// measured above it. `pairs`: (src rank, dst rank, mean) in name order.
pub(super) fn reference(
    g: &MeshGroup,
    kind: RuleKind,
    pairs: &[(u32, u32, f64)],
) -> Option<(Reference, f64)> {
    let (a, b, v) = reference_pair(g.metric, kind, pairs)?;
    let capped_at = g
        .port_rate_gbps
        .filter(|p| g.metric == Metric::BandwidthGbps && v > *p);
    let r = Reference {
        src: g.nodes[a as usize].clone(),
        dst: g.nodes[b as usize].clone(),
        measured: v,
        capped_at,
        rule: kind,
        pairs: pairs.len(),
        nodes: pairs
            .iter()
            .flat_map(|(a, b, _)| [*a, *b])
            .collect::<BTreeSet<_>>()
            .len(),
    };
    Some((r, capped_at.unwrap_or(v)))
}

/// The pair the reference comes from. ClusterKit's: the best (highest
/// bandwidth, lowest latency). The median: each node's median pair (the
/// pairs it sends or receives in), then the median of those over the
/// nodes — of an even count the better of the two middle ones at both
/// steps. A faulty node moves only its own median and one pair of each
/// other node's, so the reference stays on the healthy side while fewer
/// than half of the nodes are faulty and no healthy node has more than half
/// of its pairs with faulty peers (one bad node of three still works); a
/// lucky pair moves two nodes' medians by one place at most. Ties go to
/// the first pair in (src, dst) order.
fn reference_pair(
    metric: Metric,
    kind: RuleKind,
    pairs: &[(u32, u32, f64)],
) -> Option<(u32, u32, f64)> {
    type P = (u32, u32, f64);
    // From worst to best; ties: the later (src, dst) first, so that the
    // best of equal pairs is the first in (src, dst) order.
    let sort = |v: &mut Vec<P>| {
        v.sort_by(|x, y| {
            let by_value = match metric {
                Metric::BandwidthGbps => x.2.total_cmp(&y.2),
                Metric::LatencyP50Us => y.2.total_cmp(&x.2),
            };
            by_value.then_with(|| (y.0, y.1).cmp(&(x.0, x.1)))
        })
    };
    let better_middle = |mut v: Vec<P>| -> Option<P> {
        sort(&mut v);
        v.get(v.len() / 2).copied()
    };
    match kind {
        RuleKind::Clusterkit => {
            let mut v = pairs.to_vec();
            sort(&mut v);
            v.last().copied()
        }
        RuleKind::Median => {
            let mut by_node: BTreeMap<u32, Vec<P>> = BTreeMap::new();
            for p in pairs {
                by_node.entry(p.0).or_default().push(*p);
                by_node.entry(p.1).or_default().push(*p);
            }
            let medians: Vec<P> = by_node.into_values().filter_map(better_middle).collect();
            better_middle(medians)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;

    #[test]
    fn the_reference_is_capped_at_a_real_port_rate() {
        let port = |r: &mut Record, rate: f64, source: &str, virt: bool| {
            let p = Placement {
                port_rate_gbps: Some(rate),
                port_rate_source: Some(source.into()),
                virtual_link: virt,
                ..Placement::default()
            };
            r.placement_local = Some(p.clone());
            r.placement_remote = Some(p);
        };
        // n1 -> n2 are co-located: 30 Gbit/s on 10 Gbit/s ports.
        let cells = |source: &'static str, virt: bool| {
            mesh_cells(move |a, b| {
                let mut r = rec(if (a, b) == ("n1", "n2") { 30.0 } else { 9.5 }, "forward");
                port(&mut r, 10.0, source, virt);
                Ok(vec![r])
            })
        };
        let clusterkit = Rule::new(
            RuleKind::Clusterkit,
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        );
        let f = fixture(cells("netdev speed", false), vec![]);
        let (_, g, text) = analyze_by(&f, clusterkit);
        assert_eq!(g.port_rate_gbps, Some(10.0));
        assert_eq!(g.best, Some(10.0));
        let r = g.reference.as_ref().unwrap();
        assert_eq!(
            (r.src.as_str(), r.dst.as_str(), r.measured, r.capped_at),
            ("n1", "n2", 30.0, Some(10.0))
        );
        assert!(
            g.suspects.is_empty(),
            "9.5 is 95 % of the port: {:?}",
            g.suspects
        );
        assert_eq!(g.above_port, vec![("n1".into(), "n2".into(), 30.0)]);
        assert!(text.contains("below 93% of the 10.00 Gbit/s port rate, i.e. < 9.30 (the best pair, n1 -> n2, measured 30.00"), "{text}");
        assert!(text.contains("ABOVE THE PORT RATE n1 -> n2"), "{text}");
        // A virtual link's speed and a tc cap are not port rates: ClusterKit's
        // rule as it is, and the summary names the pair that set it.
        for (src, virt) in [("netdev speed", true), ("tc cap", false)] {
            let f = fixture(cells(src, virt), vec![]);
            let (_, g, text) = analyze_by(&f, clusterkit);
            assert_eq!((g.port_rate_gbps, g.best), (None, Some(30.0)));
            assert_eq!(g.suspects.len(), 11);
            assert!(
                text.contains("below 93% of the best pair (n1 -> n2, 30.00 Gbit/s), i.e. < 27.90"),
                "{text}"
            );
        }
    }

    /// Latency under CPU noise: one pair ran while the others waited for a
    /// core. ClusterKit's reference is that lucky pair, and every healthy
    /// pair above 2.1 times it is a suspect; the median pair is not moved
    /// by it, and only the node with a real delay is named.
    #[test]
    fn a_lucky_pair_sets_clusterkits_reference_but_not_the_median() {
        let lat = |us: f64| {
            let mut r = Record::new("tcp-lat", Transport::Tcp, 64, 1);
            let mut h = fabperf_results::LatencyHistogram::new(fabperf_results::LatencyKind::Rtt);
            for _ in 0..8 {
                h.record_rtt_ns((us * 1000.0) as u64);
            }
            r.set_latency(&h);
            r
        };
        let lat_cells = |fig: &dyn Fn(&str, &str) -> f64| -> Vec<(CellSpec, Outcome)> {
            mesh_cells(|_, _| Ok(vec![]))
                .into_iter()
                .map(|(mut c, _)| {
                    c.kind = "tcp-lat".into();
                    let (a, b) = c.flows[0].clone();
                    let v = fig(&a, &b);
                    (c, Ok(vec![lat(v)]))
                })
                .collect()
        };
        // Healthy pairs 40-90 us, one lucky 12 us; n4 has 1 ms more each way.
        let fig = |a: &str, b: &str| -> f64 {
            let base = match (a, b) {
                ("n1", "n2") => 12.0,
                ("n1", _) | (_, "n1") => 40.0,
                ("n2", _) | (_, "n2") => 60.0,
                _ => 90.0,
            };
            if a == "n4" || b == "n4" {
                base + 1000.0
            } else {
                base
            }
        };
        // The re-tests measure the same again.
        let retests: Vec<(CellSpec, Outcome)> = lat_cells(&fig)
            .into_iter()
            .map(|(mut c, o)| {
                c.cell_id = format!("rt0-{}", c.cell_id);
                c.pattern = RETEST.into();
                (c, o)
            })
            .collect();
        let f = fixture(lat_cells(&fig), retests);
        let ck = Rule::new(
            RuleKind::Clusterkit,
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        );
        let (_, g, text) = analyze_by(&f, ck);
        assert!((g.best.unwrap() - 12.0).abs() < 0.1, "{text}");
        assert!(
            g.bad_nodes.len() > 1,
            "ClusterKit blames healthy nodes too: {:?}\n{text}",
            g.bad_nodes
        );
        let (a, g, text) = analyze_one(&f);
        assert_eq!(a.rule, RuleKind::Median);
        assert_eq!(g.bad_nodes, vec!["n4".to_string()], "{text}");
        assert!(g.bad_links.is_empty(), "{:?}", g.bad_links);
        let r = g.reference.as_ref().unwrap();
        assert_eq!((r.rule, r.pairs, r.nodes), (RuleKind::Median, 12, 4));
        assert!(
            text.contains("latency above 2.1x the median pair (")
                && text.contains(" us; the median of 4 nodes' median pairs), i.e. > "),
            "{text}"
        );
    }

    /// Bandwidth: one pair above the others (it ran alone) is ClusterKit's
    /// reference; the median is the better of the two middle pairs, so a
    /// node whose every pair is slow — half of a 4-node one-way mesh — still
    /// leaves the reference on the healthy side.
    #[test]
    fn the_median_is_the_better_middle_pair() {
        // One way: n1 -> n2, n1 -> n3, ... (6 pairs), n3 slow in all 3 of its.
        let mut cells = Vec::new();
        for (a, b) in [
            ("n1", "n2"),
            ("n1", "n3"),
            ("n1", "n4"),
            ("n2", "n3"),
            ("n2", "n4"),
            ("n3", "n4"),
        ] {
            let v = match (a, b) {
                _ if a == "n3" || b == "n3" => 1.0,
                ("n1", "n2") => 19.0,
                _ => 9.0,
            };
            cells.push((
                spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                Ok(vec![rec(v, "forward")]),
            ));
        }
        let f = fixture(cells, vec![]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.best, Some(9.0), "{text}");
        let named: Vec<&str> = g.node_findings.iter().map(|f| f.node.as_str()).collect();
        assert_eq!(named, vec!["n3"], "{text}");
        assert_eq!(g.suspects.len(), 3, "{:?}", g.suspects);
        let ck = Rule::new(
            RuleKind::Clusterkit,
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        );
        let (_, g, _) = analyze_by(&f, ck);
        assert_eq!(g.best, Some(19.0));
        assert_eq!(g.suspects.len(), 5, "every pair below the lucky one");
    }
}
