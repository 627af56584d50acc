//! The node rule: a node is named when all of its pairs (in a direction)
//! fail, or a clear majority of them with enough peers; a dead node when
//! every cell with it failed.

use super::confirm::SuspectState;
use super::findings::{MeshGroup, NodeFault, NodeFinding};
use super::rule::passes;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// How one directed pair stands, for blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PairIs {
    Good,
    Failed,
    Confirmed,
    Unconfirmed,
    /// A suspect no re-test was run for: one of the pairs of a node whose
    /// re-tests were a sample of its pairs.
    Untested,
}

/// Name the nodes behind the failures and suspects. Pairs are by node
/// rank (an index into `g.nodes`); each node's pairs are found through its
/// own lists, so the work grows with the pairs, not with the nodes times
/// the pairs. `untested`: the suspects no re-test was run for (the run
/// re-tests a sample of a named node's pairs: `retest_sample`).
pub(super) fn name_nodes(
    g: &mut MeshGroup,
    pairs: &[(u32, u32, f64)],
    failed: &[(u32, u32, String)],
    states: &HashMap<(u32, u32), SuspectState>,
    untested: &HashSet<(u32, u32)>,
) {
    let n = g.nodes.len();
    let threshold = g.threshold;
    let mut status: BTreeMap<(u32, u32), PairIs> = BTreeMap::new();
    let mut value: HashMap<(u32, u32), f64> = HashMap::with_capacity(pairs.len());
    for &(a, b, v) in pairs {
        status.insert((a, b), PairIs::Good);
        value.insert((a, b), v);
    }
    for (a, b, _) in failed {
        status.insert((*a, *b), PairIs::Failed);
    }
    for (p, st) in states {
        let st = match st {
            SuspectState::Confirmed => PairIs::Confirmed,
            SuspectState::Unconfirmed if untested.contains(p) => PairIs::Untested,
            SuspectState::Unconfirmed | SuspectState::WithNode => PairIs::Unconfirmed,
            SuspectState::Cleared => PairIs::Good,
        };
        status.insert(*p, st);
    }
    // Each node's pairs: (src, dst, state), sending and receiving.
    let mut outs: Vec<Vec<(u32, u32, PairIs)>> = vec![Vec::new(); n];
    let mut ins: Vec<Vec<(u32, u32, PairIs)>> = vec![Vec::new(); n];
    for (&(a, b), &s) in &status {
        outs[a as usize].push((a, b, s));
        ins[b as usize].push((a, b, s));
    }
    let fmt = |v: f64| format!("{v:.2}");
    let unit = g.metric.unit();
    let range = |vals: &[f64]| -> String {
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if vals.is_empty() {
            String::new()
        } else if fmt(lo) == fmt(hi) {
            format!("{} {unit}", fmt(lo))
        } else {
            format!("{}-{} {unit}", fmt(lo), fmt(hi))
        }
    };
    // Dead nodes first: every cell with them failed.
    let mut dead = vec![false; n];
    for i in 0..n {
        let mine = outs[i].len() + ins[i].len();
        let all_failed = outs[i]
            .iter()
            .chain(&ins[i])
            .all(|(_, _, s)| *s == PairIs::Failed);
        if mine > 0 && all_failed {
            dead[i] = true;
            let first = failed
                .iter()
                .find(|(a, b, _)| *a as usize == i || *b as usize == i)
                .map(|(_, _, e)| e.as_str())
                .unwrap_or("");
            g.node_findings.push(NodeFinding {
                node: g.nodes[i].clone(),
                fault: NodeFault::Dead,
                confirmed: true,
                text: format!(
                    "all of its {} cell{} failed: {first}",
                    mine,
                    if mine == 1 { "" } else { "s" }
                ),
            });
        }
    }
    // Then the living: pairs with a dead peer say nothing about them.
    for i in 0..n {
        if dead[i] {
            continue;
        }
        let me = i as u32;
        let outs: Vec<(u32, u32, PairIs)> = outs[i]
            .iter()
            .filter(|(_, b, _)| !dead[*b as usize])
            .copied()
            .collect();
        let ins: Vec<(u32, u32, PairIs)> = ins[i]
            .iter()
            .filter(|(a, _, _)| !dead[*a as usize])
            .copied()
            .collect();
        let peers = |v: &[(u32, u32, PairIs)]| -> usize {
            v.iter()
                .map(|(a, b, _)| if *a == me { *b } else { *a })
                .collect::<BTreeSet<_>>()
                .len()
        };
        // A node is named when all of its pairs (in a direction) fail, with
        // at least two peers; or, with at least three failing peers, when
        // more than half of them do: under noise one pair of a faulty node
        // may pass, or be cleared by its re-test, and "every pair" would
        // then name its failing pairs as links one by one. A faulty link
        // (one peer) or a few faulty peers (one pair of each healthy node)
        // do not make a healthy node's majority.
        let bad = |v: &[(u32, u32, PairIs)]| -> Vec<(u32, u32, PairIs)> {
            v.iter()
                .filter(|(_, _, s)| *s != PairIs::Good)
                .copied()
                .collect()
        };
        let named = |v: &[(u32, u32, PairIs)], b: &[(u32, u32, PairIs)]| {
            let p = peers(b);
            (p >= 2 && b.len() == v.len()) || (p >= 3 && 2 * b.len() > v.len())
        };
        // Confirmed when the failed cells and confirmed suspects alone make
        // the majority; or, when some suspects were not re-tested, when the
        // re-tested pairs (confirmed, cleared, or whose re-tests failed)
        // meet the rule by themselves and, counting the untested ones with
        // them, the majority. Then also the size of that sample.
        let confirmed = |v: &[(u32, u32, PairIs)]| -> (bool, Option<(usize, usize)>) {
            let held = |v: &[(u32, u32, PairIs)], untested_too: bool| -> Vec<(u32, u32, PairIs)> {
                v.iter()
                    .filter(|(_, _, s)| {
                        matches!(s, PairIs::Failed | PairIs::Confirmed)
                            || (untested_too && *s == PairIs::Untested)
                    })
                    .copied()
                    .collect()
            };
            if named(v, &held(v, false)) {
                return (true, None);
            }
            if !v.iter().any(|p| p.2 == PairIs::Untested) {
                return (false, None);
            }
            let sample: Vec<(u32, u32, PairIs)> = v
                .iter()
                .filter(|(a, b, s)| {
                    matches!(s, PairIs::Confirmed | PairIs::Unconfirmed)
                        || states.get(&(*a, *b)) == Some(&SuspectState::Cleared)
                })
                .copied()
                .collect();
            let sample_holds = named(&sample, &held(&sample, false));
            let untested = v.iter().filter(|p| p.2 == PairIs::Untested).count();
            (
                sample_holds && named(v, &held(v, true)),
                Some((sample.len(), untested)),
            )
        };
        let figures = |v: &[(u32, u32, PairIs)]| -> (Vec<f64>, usize) {
            let vals: Vec<f64> = v
                .iter()
                .filter_map(|(a, b, _)| value.get(&(*a, *b)).copied())
                .collect();
            let failed = v.iter().filter(|(_, _, s)| *s == PairIs::Failed).count();
            (vals, failed)
        };
        let failed_note = |k: usize| {
            if k == 0 {
                String::new()
            } else {
                format!(", {k} failed")
            }
        };
        // "all 5 pairs" or "4 of its 5 pairs ... (the other passes: …)".
        let how_many =
            |b: &[(u32, u32, PairIs)], v: &[(u32, u32, PairIs)], all: &str, some: &str| {
                if b.len() == v.len() {
                    all.replace('#', &v.len().to_string())
                } else {
                    some.replace('#', &format!("{} of its {}", b.len(), v.len()))
                }
            };
        // The passing pairs' figures; a suspect cleared by its re-test
        // passes on that re-test.
        let passing = |b: &[(u32, u32, PairIs)], v: &[(u32, u32, PairIs)]| -> String {
            let mut good = Vec::new();
            let mut cleared = 0;
            for (x, y, _) in v.iter().filter(|p| p.2 == PairIs::Good) {
                match value.get(&(*x, *y)) {
                    Some(f) if threshold.is_none_or(|t| passes(g.metric, *f, t)) => good.push(*f),
                    _ => cleared += 1,
                }
            }
            let mut why = Vec::new();
            if !good.is_empty() {
                why.push(range(&good));
            }
            if cleared > 0 {
                why.push(format!("{cleared} cleared by a re-test"));
            }
            match v.len() - b.len() {
                0 => String::new(),
                1 => format!("; the other one passes ({})", why.join(", ")),
                k => format!("; the other {k} pass ({})", why.join(", ")),
            }
        };
        let all: Vec<(u32, u32, PairIs)> = outs.iter().chain(&ins).copied().collect();
        let both_ways = !outs.is_empty() && !ins.is_empty();
        let (bad_all, bad_outs, bad_ins) = (bad(&all), bad(&outs), bad(&ins));
        // One direction named while most of the other passes: that
        // direction (a transmit- or receive-side fault); otherwise the node
        // as a whole.
        let (n_outs, n_ins) = (named(&outs, &bad_outs), named(&ins, &bad_ins));
        let mostly_good = |v: &[(u32, u32, PairIs)], b: &[(u32, u32, PairIs)]| {
            !v.is_empty() && 2 * (v.len() - b.len()) > v.len()
        };
        let one_way =
            (n_outs && mostly_good(&ins, &bad_ins)) || (n_ins && mostly_good(&outs, &bad_outs));
        // A one-direction finding: its pairs `mine` (the failing ones
        // `bad`), and how the other direction's fare.
        let one_direction = |fault: NodeFault,
                             mine: &[(u32, u32, PairIs)],
                             bad: &[(u32, u32, PairIs)],
                             other: &[(u32, u32, PairIs)]| {
            let (dir, verb, other_dir) = match fault {
                NodeFault::Sends => ("sends", "sends in", "receives"),
                _ => ("receives", "receives in", "sends"),
            };
            let (vals, k) = figures(bad);
            (
                fault,
                confirmed(mine),
                format!(
                    "its {dir} fail: {} fail the rule ({}{}){}{}",
                    how_many(
                        bad,
                        mine,
                        &format!("all # pairs it {verb}"),
                        &format!("# pairs it {verb}")
                    ),
                    range(&vals),
                    failed_note(k),
                    passing(bad, mine),
                    if other.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", while {} of its {} {other_dir} pass",
                            other.iter().filter(|x| x.2 == PairIs::Good).count(),
                            other.len()
                        )
                    }
                ),
            )
        };
        let finding = if !one_way && (named(&all, &bad_all) || (n_outs && n_ins)) {
            let (vals, k) = figures(&bad_all);
            Some((
                NodeFault::All,
                confirmed(&all),
                format!(
                    "{}{} fail the rule ({}{}){}",
                    how_many(
                        &bad_all,
                        &all,
                        "all of its # measured pairs",
                        "# measured pairs"
                    ),
                    if both_ways {
                        ", sending and receiving,"
                    } else {
                        ""
                    },
                    range(&vals),
                    failed_note(k),
                    passing(&bad_all, &all)
                ),
            ))
        } else if n_outs {
            Some(one_direction(NodeFault::Sends, &outs, &bad_outs, &ins))
        } else if n_ins {
            Some(one_direction(NodeFault::Receives, &ins, &bad_ins, &outs))
        } else {
            None
        };
        if let Some((fault, (confirmed, sampled), mut text)) = finding {
            if let Some((k, untested)) = sampled {
                text.push_str(&if confirmed {
                    format!("; confirmed by the re-tests of {k} of its pairs ({untested} not re-tested)")
                } else {
                    format!("; the re-tests of {k} of its pairs do not confirm it ({untested} not re-tested)")
                });
            }
            g.node_findings.push(NodeFinding {
                node: g.nodes[i].clone(),
                fault,
                confirmed,
                text,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;

    #[test]
    fn a_node_whose_sends_fail_is_named_as_such() {
        let f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n3" { 1.0 } else { 10.0 }, "forward")])),
            ["n1", "n2", "n4"]
                .iter()
                .map(|b| retest("n3", b, 0, Ok(vec![rec(1.1, "forward")])))
                .collect(),
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n3".to_string()]);
        assert_eq!(g.node_findings.len(), 1);
        assert_eq!(g.node_findings[0].fault, NodeFault::Sends);
        assert!(g.bad_links.is_empty(), "explained by n3: {:?}", g.bad_links);
        assert!(
            text.contains("SUSPECT NODE n3: its sends fail: all 3 pairs it sends in fail the rule (1.00 Gbit/s), while 3 of its 3 receives pass; check this node's transmit side"),
            "{text}"
        );
        // Both ways slow: the node, not a direction.
        let f = fixture(
            mesh_cells(|a, b| {
                Ok(vec![rec(
                    if a == "n3" || b == "n3" { 1.0 } else { 10.0 },
                    "forward",
                )])
            }),
            NODES
                .iter()
                .filter(|n| **n != "n3")
                .flat_map(|n| {
                    [
                        retest("n3", n, 0, Ok(vec![rec(1.0, "forward")])),
                        retest(n, "n3", 0, Ok(vec![rec(1.0, "forward")])),
                    ]
                })
                .collect(),
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.node_findings[0].fault, NodeFault::All);
        assert!(text.contains("SUSPECT NODE n3: all of its 6 measured pairs, sending and receiving, fail the rule"), "{text}");
    }

    #[test]
    fn a_dead_node_is_a_finding() {
        let f = fixture(
            mesh_cells(|a, b| {
                if a == "n4" || b == "n4" {
                    Err("asking 127.0.0.4:5301 to drive: connection refused")
                } else {
                    Ok(vec![rec(10.0, "forward")])
                }
            }),
            vec![],
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n4".to_string()]);
        assert_eq!(g.node_findings[0].fault, NodeFault::Dead);
        assert_eq!(g.failed.len(), 6);
        assert!(g.suspects.is_empty());
        assert!(
            text.contains("SUSPECT NODE n4: all of its 6 cells failed: asking 127.0.0.4:5301 to drive: connection refused"),
            "{text}"
        );
        // Everything dead: said to be common cause, every node named.
        let f = fixture(mesh_cells(|_, _| Err("authentication failed")), vec![]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes.len(), 4);
        assert!(text.contains("every cell of this mesh failed"), "{text}");
    }

    /// A mesh of `nodes` (each pair both ways) and its re-tests: `slow`
    /// pairs measure 2 Gbit/s (their re-tests 2.5), the rest 10; `cleared`
    /// slow pairs re-test at 9.9.
    fn slow_mesh(nodes: &[&str], slow: &[(&str, &str)], cleared: &[(&str, &str)]) -> Fixture {
        let mut mesh = Vec::new();
        let mut rts = Vec::new();
        for a in nodes {
            for b in nodes {
                if a == b {
                    continue;
                }
                let bad = slow.contains(&(*a, *b));
                mesh.push((
                    spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                    Ok(vec![rec(if bad { 2.0 } else { 10.0 }, "forward")]),
                ));
                if bad {
                    let again = if cleared.contains(&(*a, *b)) {
                        9.9
                    } else {
                        2.5
                    };
                    rts.push(retest(a, b, 0, Ok(vec![rec(again, "forward")])));
                }
            }
        }
        fixture(mesh, rts)
    }

    #[test]
    fn a_node_confirmed_by_a_sample_of_its_pairs_keeps_the_others_with_it() {
        // n3 is slow both ways: 14 suspect pairs, 4 of them re-tested.
        let sample = [("n3", "n1"), ("n5", "n3"), ("n3", "n7"), ("n8", "n3")];
        let f = sampled_mesh(&EIGHT, "n3", &sample, 2.5);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n3".to_string()], "{text}");
        assert_eq!(g.node_findings[0].fault, NodeFault::All);
        assert!(
            g.bad_links.is_empty() && g.unconfirmed_links.is_empty(),
            "{text}"
        );
        let with = g
            .suspects
            .iter()
            .filter(|s| s.state == SuspectState::WithNode)
            .count();
        assert_eq!(with, 10, "{text}");
        assert_eq!(g.suspects.iter().filter(|s| s.held()).count(), 14);
        assert!(
            text.contains("SUSPECT NODE n3: all of its 14 measured pairs, sending and receiving, fail the rule (2.00 Gbit/s); confirmed by the re-tests of 4 of its pairs (10 not re-tested)"),
            "{text}"
        );
        assert!(text.contains("2.00^") && text.contains("2.00!"), "{text}");
        assert!(!text.contains("unconfirmed"), "{text}");
        // Two re-tested pairs with one peer are no sample to judge a node by.
        let f = sampled_mesh(&EIGHT, "n3", &[("n3", "n1"), ("n1", "n3")], 2.5);
        let (_, g, text) = analyze_one(&f);
        assert!(g.bad_nodes.is_empty(), "{text}");
        assert!(!g.node_findings[0].confirmed, "{text}");
        // The sample met the rule: the node is not confirmed and its other
        // suspects stay unconfirmed (the next round re-tests them).
        let f = sampled_mesh(&EIGHT, "n3", &sample, 9.9);
        let (_, g, text) = analyze_one(&f);
        assert!(g.bad_nodes.is_empty(), "{text}");
        assert!(!g.node_findings[0].confirmed, "{text}");
        assert!(
            text.contains("the re-tests of 4 of its pairs do not confirm it (10 not re-tested)"),
            "{text}"
        );
        assert_eq!(state(&g, "n3", "n2"), Some(SuspectState::Unconfirmed));
        assert!(
            g.suspects.iter().all(|s| s.state != SuspectState::WithNode),
            "{text}"
        );
    }

    #[test]
    fn a_node_whose_sends_mostly_fail_is_named_once_not_as_links() {
        // n5 drops half of what it transmits: 4 of its 5 sends are slow
        // (the fifth was cleared by its re-test), and two of its receives
        // suffer from its lost acknowledgements.
        let nodes = ["n1", "n2", "n3", "n4", "n5", "n6"];
        let slow = [
            ("n5", "n1"),
            ("n5", "n2"),
            ("n5", "n3"),
            ("n5", "n4"),
            ("n5", "n6"),
            ("n2", "n5"),
            ("n4", "n5"),
        ];
        let f = slow_mesh(&nodes, &slow, &[("n5", "n6")]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n5".to_string()], "{text}");
        assert_eq!(g.node_findings[0].fault, NodeFault::Sends, "{text}");
        assert!(
            g.bad_links.is_empty() && g.unconfirmed_links.is_empty(),
            "{text}"
        );
        assert!(
            text.contains("SUSPECT NODE n5: its sends fail: 4 of its 5 pairs it sends in fail the rule (2.00 Gbit/s); the other one passes (1 cleared by a re-test)"),
            "{text}"
        );
        // Two slow sends of one node (a link each) name no node: too few.
        let f = slow_mesh(&nodes, &[("n5", "n1"), ("n5", "n2")], &[]);
        let (_, g, text) = analyze_one(&f);
        assert!(g.node_findings.is_empty(), "{text}");
        assert_eq!(g.bad_links.len(), 2, "{text}");
        // A healthy node whose peers include two faulty senders is not
        // named: two of its five receives is no majority.
        let slow: Vec<(&str, &str)> = nodes
            .iter()
            .filter(|n| **n != "n1")
            .map(|n| ("n1", *n))
            .chain(nodes.iter().filter(|n| **n != "n2").map(|n| ("n2", *n)))
            .collect();
        let f = slow_mesh(&nodes, &slow, &[]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(
            g.bad_nodes,
            vec!["n1".to_string(), "n2".to_string()],
            "{text}"
        );
        assert!(g.bad_links.is_empty(), "{text}");
    }
}
