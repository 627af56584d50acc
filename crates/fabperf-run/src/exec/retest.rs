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
use std::collections::BTreeMap;
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
pub(super) fn retest_mesh(
    ex: &mut Exec<'_>,
    t: &plan::TestDecl,
    rounds: u32,
    retry_failed: bool,
) -> Result<bool, RunError> {
    for round in 0..rounds {
        let t_analysis = Instant::now();
        let analysis = summary::analyze(ex.store, ex.run_id, &t.name, &t.rule())?;
        // One re-test per mesh cell behind a suspect still open after the
        // re-tests so far (a bidirectional cell measures two pairs).
        let mut todo: BTreeMap<String, CellSpec> = BTreeMap::new();
        for g in &analysis.groups {
            for s in g.suspects.iter().filter(|s| {
                s.state != summary::SuspectState::Cleared && s.retests.len() == round as usize
            }) {
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
}
