//! Each group judged: its matrix of mean figures, its failed pairs, the
//! reference and threshold, every pair below it a suspect (with its
//! re-tests' verdict); then the nodes, rails and links to blame.

use super::analyze::{Names, Pair, Raw};
use super::confirm::{confirmation, SuspectState};
use super::findings::{MeshGroup, Suspect};
use super::links::name_links;
use super::nodes::name_nodes;
use super::rails::fold_rails;
use super::reference::reference;
use super::rule::{passes, Metric, Rule};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Apply the rule to a group's figures, re-tests and failures, and blame.
pub(super) fn judge(g: &mut MeshGroup, mut raw: Raw, rule: &Rule, names: &Names) {
    // Ranks: the group's nodes in name order, so that every list below is
    // in (src, dst) name order.
    let mut order: Vec<u32> = raw.nodes.iter().copied().collect();
    order.sort_by(|x, y| names.names[*x as usize].cmp(&names.names[*y as usize]));
    let mut rank: HashMap<u32, u32> = HashMap::with_capacity(order.len());
    for (r, id) in order.iter().enumerate() {
        rank.insert(*id, r as u32);
    }
    g.nodes = order
        .iter()
        .map(|&i| names.names[i as usize].clone())
        .collect();
    let name = |r: u32| g.nodes[r as usize].clone();
    let ranked = |p: &Pair| (rank[&p.0], rank[&p.1]);
    g.repeats = raw.mesh.values().map(|v| v.1 as usize).max().unwrap_or(0);
    // (src rank, dst rank, mean) in name order.
    let mut pairs: Vec<(u32, u32, f64)> = raw
        .mesh
        .iter()
        .map(|(p, (sum, n))| {
            let (x, y) = ranked(p);
            (x, y, sum / f64::from(*n))
        })
        .collect();
    pairs.sort_by_key(|p| (p.0, p.1));
    let mut row: Option<(u32, BTreeMap<String, f64>)> = None;
    for &(x, y, v) in &pairs {
        if row.as_ref().is_some_and(|(r, _)| *r != x) {
            let (r, m) = row.take().expect("checked");
            g.values.insert(name(r), m);
        }
        row.get_or_insert_with(|| (x, BTreeMap::new()))
            .1
            .insert(name(y), v);
    }
    if let Some((r, m)) = row {
        g.values.insert(name(r), m);
    }
    // A pair that failed in one repeat but was measured in another is not
    // "failed".
    let mut failed: Vec<(u32, u32, String)> = raw
        .mesh_failed
        .iter()
        .filter(|(p, _)| !raw.mesh.contains_key(*p))
        .map(|(p, e)| {
            let (x, y) = ranked(p);
            (x, y, e.clone())
        })
        .collect();
    failed.sort_by_key(|f| (f.0, f.1));
    g.failed = failed
        .iter()
        .map(|(x, y, e)| (name(*x), name(*y), e.clone()))
        .collect();
    if g.metric == Metric::BandwidthGbps {
        g.port_rate_gbps = raw.port;
    }
    if let Some(port) = g.port_rate_gbps {
        g.above_port = pairs
            .iter()
            .filter(|(_, _, v)| *v > port)
            .map(|(a, b, v)| (name(*a), name(*b), *v))
            .collect();
    }
    if let Some((r, best)) = reference(g, rule.kind, &pairs) {
        g.reference = Some(r);
        g.best = Some(best);
    }
    let mut states: HashMap<(u32, u32), SuspectState> = HashMap::new();
    // Suspects without any re-test (neither a figure nor a failure).
    let mut untested: HashSet<(u32, u32)> = HashSet::new();
    if let Some(best) = g.best {
        let threshold = rule.threshold(g.metric, best);
        g.threshold = Some(threshold);
        for &(a, b, v) in &pairs {
            if passes(g.metric, v, threshold) {
                continue;
            }
            let key = (order[a as usize], order[b as usize]);
            let mut rt = raw.retest.remove(&key).unwrap_or_default();
            rt.sort_by_key(|(round, _)| *round);
            let retests: Vec<f64> = rt.into_iter().map(|(_, v)| v).collect();
            let retests_failed = raw.retest_failed.remove(&key).unwrap_or_default();
            let state = confirmation(g.metric, threshold, &retests);
            states.insert((a, b), state);
            if retests.is_empty() && retests_failed.is_empty() {
                untested.insert((a, b));
            }
            g.suspects.push(Suspect {
                src: name(a),
                dst: name(b),
                value: v,
                retests,
                retests_failed,
                state,
                confirmed: state == SuspectState::Confirmed,
            });
        }
    }
    g.template_ids = std::mem::take(&mut raw.templates);
    blame(g, &pairs, &failed, &states, &untested);
}

/// Name the nodes, rails and links behind the failures and suspects.
fn blame(
    g: &mut MeshGroup,
    pairs: &[(u32, u32, f64)],
    failed: &[(u32, u32, String)],
    states: &HashMap<(u32, u32), SuspectState>,
    untested: &HashSet<(u32, u32)>,
) {
    name_nodes(g, pairs, failed, states, untested);
    // A suspect never re-tested whose node is confirmed stands with it
    // (the run re-tested a sample of that node's pairs).
    let confirmed: BTreeSet<&str> = g
        .node_findings
        .iter()
        .filter(|f| f.confirmed)
        .map(|f| f.node.as_str())
        .collect();
    for s in g.suspects.iter_mut() {
        if s.state == SuspectState::Unconfirmed
            && s.untested()
            && (confirmed.contains(s.src.as_str()) || confirmed.contains(s.dst.as_str()))
        {
            s.state = SuspectState::WithNode;
        }
    }
    fold_rails(g);
    g.bad_nodes = g
        .node_findings
        .iter()
        .filter(|f| f.confirmed)
        .map(|f| f.node.clone())
        .collect();
    g.bad_rails = g
        .rail_findings
        .iter()
        .filter(|f| f.confirmed)
        .map(|f| f.name.clone())
        .collect();
    name_links(g);
}
