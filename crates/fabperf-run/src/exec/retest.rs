//! A mesh's suspect pairs measured again (ClusterKit-style), round after
//! round, in batches that share no node.

use super::discovery::hello_node;
use super::errors::RunError;
use super::Exec;
use crate::cells::Roster;
use crate::plan::{self, Pattern, Plan};
use crate::summary;
use fabperf_store::{CellSpec, CellState};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

pub(super) fn has_retests(plan: &Plan) -> bool {
    plan.tests
        .iter()
        .any(|t| matches!(t.pattern, Pattern::Mesh { retest, .. } if retest > 0))
}

/// The node an agent runs on: the node name it gave in its hello, else its
/// name in the plan. A node's agents on several paths share its NIC.
pub(super) fn node_of(roster: &Roster, path: &str, name: &str) -> String {
    roster
        .get(path, name)
        .and_then(|a| hello_node(&a.hello))
        .unwrap_or_else(|| name.to_string())
}

/// ClusterKit-style re-tests of a mesh's suspect pairs: every suspect not
/// yet cleared is measured again, up to `rounds` times; a pair that meets
/// the rule in a re-test is cleared (the first figure was noise), the rest
/// go to the next round with the set shrinking. A round's re-tests run in
/// batches that share no node — whatever their path or sweep point — so no
/// two re-tests depress each other or meet on one agent. A re-test that
/// failed leaves its suspect unconfirmed; `--retry-failed` runs it again.
/// Of a node the mesh names, the first round re-tests a sample of its
/// suspect pairs ([`to_retest`]).
pub(super) fn retest_mesh(
    ex: &mut Exec<'_>,
    t: &plan::TestDecl,
    rounds: u32,
    sample: u32,
    retry_failed: bool,
) -> Result<bool, RunError> {
    for round in 0..rounds {
        let t_analysis = Instant::now();
        let analysis = summary::analyze(ex.store, ex.run_id, &t.name, &t.rule())?;
        // One re-test per mesh cell behind a suspect still open after the
        // re-tests so far (a bidirectional cell measures two pairs).
        let mut todo: BTreeMap<String, CellSpec> = BTreeMap::new();
        for (g, s) in to_retest(&analysis, round, sample) {
            let Some(proto) = g.cell_template(&s.src, &s.dst) else {
                continue;
            };
            let Some((a, b)) = proto.flows.first().cloned() else {
                continue;
            };
            let mut instance = json!({"retest": round, "pair": [a, b]});
            crate::rails::tag_instance(&mut instance, &proto.dims);
            let mut c = proto.clone();
            c.cell_id = crate::cells::cell_id(
                &ex.plan.name,
                t,
                &c.path,
                &instance,
                &c.params,
                round,
                crate::cells::env_key(ex.plan, &c.dims).as_ref(),
            );
            c.pattern = fabperf_store::RETEST.into();
            c.flows = vec![(a, b)];
            c.repeat = round;
            todo.entry(c.cell_id.clone()).or_insert(c);
        }
        if todo.is_empty() {
            ex.phases.retest_s += t_analysis.elapsed().as_secs_f64();
            return Ok(true);
        }
        let mut todo: Vec<CellSpec> = todo.into_values().collect();
        todo.sort_by(|x, y| (x.seq, &x.cell_id).cmp(&(y.seq, &y.cell_id)));
        let nodes: Vec<Vec<String>> = todo
            .iter()
            .map(|c| {
                c.flows
                    .iter()
                    .flat_map(|(a, b)| [a, b])
                    .map(|n| node_of(ex.roster, &c.path, n))
                    .collect()
            })
            .collect();
        let base = 1_000_000_000 + (round as i64) * 1_000_000;
        for (i, (c, b)) in todo
            .iter_mut()
            .zip(crate::schedule::disjoint_batches(&nodes))
            .enumerate()
        {
            c.batch = base + b as i64;
            c.seq = base + i as i64;
        }
        todo.sort_by_key(|c| (c.batch, c.seq));
        ex.store.add_cells(ex.run_id, &todo)?;
        if retry_failed {
            let ids: Vec<&str> = todo.iter().map(|c| c.cell_id.as_str()).collect();
            ex.store.retry_failed_cells(ex.run_id, &ids)?;
        }
        let rows = ex.store.cells(ex.run_id)?;
        let pending: Vec<CellSpec> = todo
            .iter()
            .filter(|c| {
                rows.iter()
                    .any(|r| r.spec.cell_id == c.cell_id && r.state == CellState::Pending)
            })
            .cloned()
            .collect();
        ex.phases.retest_s += t_analysis.elapsed().as_secs_f64();
        if pending.is_empty() {
            continue;
        }
        ex.progress.total += pending.len();
        ex.progress.line(&format!(
            "fabperf run: {}: re-testing {} suspect cell(s), round {} of {rounds}",
            t.name,
            pending.len(),
            round + 1
        ));
        if !ex.run_cells(pending)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The suspects to re-test in `round`: every one still open whose re-tests
/// so far are `round`; in the first round, of a node the mesh names (all
/// of its pairs fail, or a clear majority), only `sample` of its suspect
/// pairs (0: all of them), spread over its peers. A node's pairs can only
/// be re-tested one at a time: re-testing all 2(N−1) pairs of a slow node
/// costs 2(N−1) batches per round, an hour at a thousand nodes, where a
/// sample judges the node as well (the summary confirms the node on its
/// sample; its other pairs stand with it). A pair left out whose node the
/// sample did not confirm is re-tested in the next round.
pub(super) fn to_retest(
    analysis: &summary::MeshAnalysis,
    round: u32,
    sample: u32,
) -> Vec<(&summary::MeshGroup, &summary::Suspect)> {
    use summary::SuspectState;
    let mut out = Vec::new();
    for g in &analysis.groups {
        let open: Vec<&summary::Suspect> = g
            .suspects
            .iter()
            .filter(|s| {
                s.state != SuspectState::Cleared
                    && s.state != SuspectState::WithNode
                    && (s.retests.len() == round as usize || (round > 0 && s.untested()))
            })
            .collect();
        if round > 0 || sample == 0 {
            out.extend(open.into_iter().map(|s| (g, s)));
            continue;
        }
        // Each named node's open suspects, with the peer of each.
        let mut mine: BTreeMap<&str, Vec<(&str, &summary::Suspect)>> = g
            .node_findings
            .iter()
            .filter(|f| f.fault != summary::NodeFault::Dead)
            .map(|f| (f.node.as_str(), Vec::new()))
            .collect();
        for &s in &open {
            if let Some(v) = mine.get_mut(s.src.as_str()) {
                v.push((s.dst.as_str(), s));
            }
            if let Some(v) = mine.get_mut(s.dst.as_str()) {
                v.push((s.src.as_str(), s));
            }
        }
        // The sample of each: evenly spaced over its peers' order.
        let mut chosen: BTreeSet<(&str, &str)> = BTreeSet::new();
        for v in mine.values_mut() {
            v.sort_unstable_by(|x, y| (x.0, &x.1.src, &x.1.dst).cmp(&(y.0, &y.1.src, &y.1.dst)));
            let (k, m) = (sample as usize, v.len());
            let picks: Vec<usize> = if m <= k {
                (0..m).collect()
            } else {
                (0..k).map(|i| i * m / k).collect()
            };
            chosen.extend(
                picks
                    .into_iter()
                    .map(|i| (v[i].1.src.as_str(), v[i].1.dst.as_str())),
            );
        }
        out.extend(
            open.into_iter()
                .filter(|s| {
                    let near_named =
                        mine.contains_key(s.src.as_str()) || mine.contains_key(s.dst.as_str());
                    !near_named || chosen.contains(&(s.src.as_str(), s.dst.as_str()))
                })
                .map(|s| (g, s)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::{Roster, RosterAgent};
    use serde_json::json;
    use std::net::SocketAddr;

    /// Re-tests are kept apart per node, and a node's agents on several
    /// paths (host, pod) are one node: the node name of their hellos.
    #[test]
    fn an_agents_node_is_the_node_its_hello_names() {
        let mut r = Roster::default();
        for (name, path, node, port) in [
            ("n1", "host", Some("node-a"), 1),
            ("10.1.0.5", "pod", Some("node-a"), 2),
            ("n2", "host", None, 3),
            ("bad", "host", Some("a b\n"), 4),
        ] {
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            r.insert(RosterAgent {
                name: name.into(),
                path: path.into(),
                addr,
                test_addr: addr,
                hello: node.map_or(json!({}), |n| json!({"agent": {"node": n}})),
                reachable: true,
            })
            .unwrap();
        }
        assert_eq!(node_of(&r, "host", "n1"), "node-a");
        assert_eq!(node_of(&r, "pod", "10.1.0.5"), "node-a");
        assert_eq!(node_of(&r, "host", "n2"), "n2", "no node in its hello");
        assert_eq!(node_of(&r, "host", "bad"), "bad", "not a safe name");
        assert_eq!(node_of(&r, "host", "gone"), "gone");
        let b = crate::schedule::disjoint_batches(&[
            vec![node_of(&r, "host", "n1"), node_of(&r, "host", "n2")],
            vec![node_of(&r, "pod", "10.1.0.5"), "node-c".into()],
        ]);
        assert_eq!(b, vec![0, 1], "host and pod suspects on node-a run apart");
    }

    /// A named node's first re-tests are a sample of its pairs, spread
    /// over its peers; suspects of no named node are all re-tested; a pair
    /// left out is re-tested in the next round unless the sample confirmed
    /// its node.
    #[test]
    fn a_named_nodes_first_retests_are_a_sample_of_its_pairs() {
        use crate::summary::fixture::*;
        let pairs = |v: Vec<(&MeshGroup, &crate::summary::Suspect)>| -> Vec<(String, String)> {
            v.iter()
                .map(|(_, s)| (s.src.clone(), s.dst.clone()))
                .collect()
        };
        // n3 slow both ways (14 suspects), nothing re-tested yet.
        let f = sampled_mesh(&EIGHT, "n3", &[], 0.0);
        let (a, _, _) = analyze_one(&f);
        let first = pairs(to_retest(&a, 0, 4));
        assert_eq!(first.len(), 4, "{first:?}");
        assert!(first.iter().all(|(x, y)| x == "n3" || y == "n3"));
        let peers: BTreeSet<&String> = first
            .iter()
            .map(|(x, y)| if x == "n3" { y } else { x })
            .collect();
        assert_eq!(peers.len(), 4, "spread over its peers: {first:?}");
        assert_eq!(to_retest(&a, 0, 0).len(), 14, "0: every pair");
        assert_eq!(
            to_retest(&a, 0, 20).len(),
            14,
            "fewer pairs than the sample"
        );
        // Not confirmed after the first round (no re-test at all here):
        // the next round takes every pair left.
        assert_eq!(to_retest(&a, 1, 4).len(), 14);
        // The sample confirmed n3: the next round re-tests the sample again,
        // the other pairs stand with n3.
        let sample: Vec<(&str, &str)> = first
            .iter()
            .map(|(x, y)| (x.as_str(), y.as_str()))
            .collect();
        let f = sampled_mesh(&EIGHT, "n3", &sample, 2.5);
        let (a, g, _) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n3".to_string()]);
        let second = pairs(to_retest(&a, 1, 4));
        assert_eq!(second, {
            let mut v = first.clone();
            v.sort();
            v
        });
        // The sample met the rule: the next round re-tests the other 10,
        // not the cleared four.
        let f = sampled_mesh(&EIGHT, "n3", &sample, 9.9);
        let (a, _, _) = analyze_one(&f);
        let second = pairs(to_retest(&a, 1, 4));
        assert_eq!(second.len(), 10, "{second:?}");
        assert!(second.iter().all(|p| !first.contains(p)));
        // A slow link of two healthy nodes is re-tested whatever the sample.
        let mut mesh = Vec::new();
        for x in NODES {
            for y in NODES.iter().filter(|y| **y != x) {
                let v = if (x, *y) == ("n1", "n2") { 2.0 } else { 10.0 };
                mesh.push((
                    spec(&format!("{x}{y}"), "mesh", x, y, json!({"size": 65536}), 0),
                    Ok(vec![rec(v, "forward")]),
                ));
            }
        }
        let f = fixture(mesh, vec![]);
        let (a, _, _) = analyze_one(&f);
        assert_eq!(
            pairs(to_retest(&a, 0, 1)),
            vec![("n1".to_string(), "n2".to_string())]
        );
    }
}
