//! From a plan and the agents found for it to the ordered list of cells.

use crate::plan::{Pattern, Plan, TestDecl};
use crate::schedule;
use fabperf_store::CellSpec;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// An agent the runner found: by name on a path.
#[derive(Debug, Clone, PartialEq)]
pub struct RosterAgent {
    pub name: String,
    pub path: String,
    pub addr: SocketAddr,
    /// Where other agents reach it for tests: the address it advertises
    /// (`fabperf server --advertise`), else `addr`.
    pub test_addr: SocketAddr,
    /// What it said in its hello (node, path label, inventory), or why it
    /// could not be reached.
    pub hello: Value,
    pub reachable: bool,
}

/// The agents of a run, by path then name.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    pub by_path: BTreeMap<String, BTreeMap<String, RosterAgent>>,
}

impl Roster {
    pub fn insert(&mut self, a: RosterAgent) -> Result<(), String> {
        // One agent under two names (a static entry and a DNS answer, two
        // names for one address): its cells would collide on it ("busy").
        let canon = |s: &SocketAddr| SocketAddr::new(s.ip().to_canonical(), s.port());
        if a.addr.port() != 0 {
            if let Some(other) = self.by_path.values().flat_map(|m| m.values()).find(|o| {
                canon(&o.addr) == canon(&a.addr) && (o.name != a.name || o.path != a.path)
            }) {
                return Err(format!(
                    "agent {:?} (path {:?}) and agent {:?} (path {:?}) are the same agent at {}; list each agent once",
                    other.name,
                    other.path,
                    a.name,
                    a.path,
                    canon(&a.addr)
                ));
            }
        }
        let path = self.by_path.entry(a.path.clone()).or_default();
        if let Some(old) = path.get(&a.name) {
            if old.addr != a.addr {
                return Err(format!(
                    "two agents on path {:?} call themselves {:?} ({} and {}); give each node's agent its own --node-name",
                    a.path, a.name, old.addr, a.addr
                ));
            }
            return Ok(());
        }
        path.insert(a.name.clone(), a);
        Ok(())
    }

    /// The agents of a path, sorted by name.
    pub fn nodes(&self, path: &str) -> Vec<&RosterAgent> {
        self.by_path
            .get(path)
            .map(|m| m.values().collect())
            .unwrap_or_default()
    }

    pub fn get(&self, path: &str, name: &str) -> Option<&RosterAgent> {
        self.by_path.get(path)?.get(name)
    }

    pub fn all(&self) -> impl Iterator<Item = &RosterAgent> {
        self.by_path.values().flat_map(|m| m.values())
    }
}

/// A cell's stable id: a hash of the plan's name and everything that
/// defines the measurement (so an unchanged cell keeps its id when the plan
/// around it changes).
pub fn cell_id(
    plan: &str,
    test: &TestDecl,
    path: &str,
    instance: &Value,
    params: &Value,
    repeat: u32,
    env: Option<&Value>,
) -> String {
    let mut key = json!({
        "plan": plan,
        "test": test.name,
        "kind": test.kind.name(),
        "path": path,
        "pattern": test.pattern.name(),
        "instance": instance,
        "params": params,
        "repeat": repeat,
    });
    // Only cells with an environment get the key, so plans without
    // profiles or policies keep their cells' ids.
    if let Some(e) = env {
        key["env"] = e.clone();
    }
    // serde_json's Map is ordered (BTreeMap), so the text is canonical.
    let h = Sha256::digest(key.to_string().as_bytes());
    crate::hex(&h[..8])
}

/// What a cell's environment adds to its identity: the profile's name and
/// content hash (an edited profile is another measurement), the policy
/// count and model. `None` for a cell without one.
pub fn env_key(plan: &Plan, dims: &Value) -> Option<Value> {
    let profile = dims.get("profile").and_then(Value::as_str);
    let policies = dims.get("policies").and_then(Value::as_u64);
    if profile.is_none() && policies.is_none() {
        return None;
    }
    let mut e = json!({});
    if let Some(p) = profile {
        e["profile"] = json!(p);
        e["profile_hash"] = json!(plan.profiles.get(p).map(|p| p.hash()));
    }
    if let Some(n) = policies {
        e["policies"] = json!(n);
        e["policy_conntrack"] = json!(dims
            .get("policy_conntrack")
            .and_then(Value::as_bool)
            .unwrap_or(false));
    }
    Some(e)
}

/// Open files and threads one test of a group takes on its receiver: its
/// control connection, and for tcp-bw one data connection per stream and
/// direction (each with a thread).
pub fn per_test_need(kind: crate::plan::Kind, params: &Value) -> u64 {
    match kind {
        crate::plan::Kind::TcpBw => {
            let streams = params.get("streams").and_then(Value::as_u64).unwrap_or(1);
            let dirs = if params.get("direction").and_then(Value::as_str) == Some("bidir") {
                2
            } else {
                1
            };
            1 + streams.saturating_mul(dirs)
        }
        _ => 1,
    }
}

/// Why an incast of `senders` into `receiver` is more than the receiver
/// announced it can hold (its hello's `capacity`), for some sweep point.
fn over_capacity(t: &TestDecl, receiver: &RosterAgent, senders: usize) -> Option<String> {
    let cap: fabperf_proto::AgentCapacity =
        serde_json::from_value(receiver.hello.get("capacity")?.clone()).ok()?;
    let n = senders as u64;
    let fix = "raise its open-file limit (LimitNOFILE=, ulimit -n) or its threads (the pod's pids limit), or give the test fewer agents or streams";
    if n > u64::from(cap.group_tests) {
        return Some(format!(
            "test {:?}: the incast into {} (path {:?}) has {senders} senders, but that agent admits {} tests of a group at once (its hello says so); {fix}",
            t.name, receiver.name, receiver.path, cap.group_tests
        ));
    }
    let need = t
        .points
        .iter()
        .map(|p| n.saturating_mul(per_test_need(t.kind, &p.params)))
        .max()
        .unwrap_or(0);
    let (have, what) = if cap.group_fds <= cap.group_threads {
        (cap.group_fds, "open files")
    } else {
        (cap.group_threads, "threads")
    };
    (need > have).then(|| {
        format!(
            "test {:?}: the incast into {} (path {:?}) needs {need} {what} there ({senders} senders, each a control connection and its data connections), but that agent can give a group {have}; {fix}",
            t.name, receiver.name, receiver.path
        )
    })
}

fn names(nodes: &[&RosterAgent], flows: &[(usize, usize)]) -> Vec<(String, String)> {
    flows
        .iter()
        .map(|&(a, b)| (nodes[a].name.clone(), nodes[b].name.clone()))
        .collect()
}

/// One pattern instance: its key (for the cell id) and its flows as node
/// indices.
type Instance = (Value, Vec<(usize, usize)>);

/// A batch of pair instances on rails: per rail shift, one batch with every
/// pair on every rail (they run at the same time); without rails, as it is.
fn on_rails(
    batch: Vec<Instance>,
    rails: Option<(&crate::rails::Rails, usize)>,
) -> Vec<Vec<Instance>> {
    let Some((r, n)) = rails else {
        return vec![batch];
    };
    crate::rails::shifts(r, n)
        .into_iter()
        .map(|k| {
            batch
                .iter()
                .flat_map(|(inst, flows)| {
                    (0..n).map(move |i| {
                        (crate::rails::instance(inst.clone(), i, k, n), flows.clone())
                    })
                })
                .collect()
        })
        .collect()
}

/// Every cell of the plan in execution order. Cells of one mesh round share
/// a batch number (they run at the same time); every other cell has a batch
/// of its own.
pub fn expand(plan: &Plan, roster: &Roster) -> Result<Vec<CellSpec>, String> {
    let mut out = Vec::new();
    let mut batch: i64 = 0;
    let mut problems = Vec::new();
    for t in &plan.tests {
        for repeat in 0..t.repeats {
            for path in &t.paths {
                let nodes = roster.nodes(path);
                let index = |name: &str| nodes.iter().position(|n| n.name == name);
                // On rails: how many, from the plan or the agents' hellos.
                let rails = t
                    .rails
                    .as_ref()
                    .map(|r| (r, crate::rails::rail_count(r, &nodes)));
                if let Some((_, 0)) = rails {
                    problems.push(format!(
                        "test {:?}: no agent on path {path:?} announces an RDMA device with an address (rails = \"rdma\"); name the rails (rails = [\"mlx5_0\", ...]) or check `fabperf detect` on the nodes",
                        t.name
                    ));
                    continue;
                }
                // The pattern's instances: (instance key, flows) per batch.
                let mut batches: Vec<Vec<Instance>> = Vec::new();
                match &t.pattern {
                    Pattern::Pairs(pairs) => {
                        for (a, b) in pairs {
                            match (index(a), index(b)) {
                                (Some(x), Some(y)) => batches.extend(on_rails(
                                    vec![(json!({"pair": [a, b]}), vec![(x, y)])],
                                    rails,
                                )),
                                _ => {
                                    let missing: Vec<&str> = [a, b]
                                        .into_iter()
                                        .filter(|n| index(n).is_none())
                                        .map(String::as_str)
                                        .collect();
                                    problems.push(format!(
                                        "test {:?}: no agent named {} on path {path:?} (found: {})",
                                        t.name,
                                        missing.join(", "),
                                        if nodes.is_empty() {
                                            "none".to_string()
                                        } else {
                                            nodes
                                                .iter()
                                                .map(|n| n.name.as_str())
                                                .collect::<Vec<_>>()
                                                .join(", ")
                                        }
                                    ));
                                }
                            }
                        }
                    }
                    Pattern::Mesh { ordered, .. } => {
                        if nodes.len() < 2 {
                            problems.push(format!("test {:?}: a mesh needs at least 2 agents on path {path:?}, found {}", t.name, nodes.len()));
                            continue;
                        }
                        let rounds = if *ordered {
                            schedule::round_robin_ordered(nodes.len())
                        } else {
                            schedule::round_robin(nodes.len())
                        };
                        for r in rounds {
                            batches.extend(on_rails(
                                r.into_iter()
                                    .map(|(a, b)| {
                                        (
                                            json!({"pair": [nodes[a].name, nodes[b].name]}),
                                            vec![(a, b)],
                                        )
                                    })
                                    .collect(),
                                rails,
                            ));
                        }
                    }
                    Pattern::Incast { receivers } => {
                        if nodes.len() < 2 {
                            problems.push(format!("test {:?}: incast needs at least 2 agents on path {path:?}, found {}", t.name, nodes.len()));
                            continue;
                        }
                        let rx: Vec<usize> = match receivers {
                            None => (0..nodes.len()).collect(),
                            Some(list) => list
                                .iter()
                                .filter_map(|r| {
                                    let i = index(r);
                                    if i.is_none() {
                                        problems.push(format!("test {:?}: incast receiver {r:?} has no agent on path {path:?}", t.name));
                                    }
                                    i
                                })
                                .collect(),
                        };
                        for r in rx {
                            let flows = schedule::incast(nodes.len(), r);
                            if repeat == 0 {
                                if let Some(p) = over_capacity(t, nodes[r], flows.len()) {
                                    problems.push(p);
                                }
                            }
                            let senders: Vec<&str> =
                                flows.iter().map(|&(s, _)| nodes[s].name.as_str()).collect();
                            batches.push(vec![(
                                json!({"incast": nodes[r].name, "senders": senders}),
                                flows,
                            )]);
                        }
                    }
                    Pattern::Bisection { splits, seed } => {
                        if nodes.len() < 2 {
                            problems.push(format!("test {:?}: bisection needs at least 2 agents on path {path:?}, found {}", t.name, nodes.len()));
                            continue;
                        }
                        for s in 0..*splits {
                            let flows = schedule::bisection(nodes.len(), *seed, s);
                            let named = names(&nodes, &flows);
                            batches.push(vec![(
                                json!({"split": s, "seed": seed, "flows": named}),
                                flows,
                            )]);
                        }
                    }
                }
                for point in &t.points {
                    for b in &batches {
                        for (instance, flows) in b {
                            out.push(CellSpec {
                                cell_id: cell_id(
                                    &plan.name,
                                    t,
                                    path,
                                    instance,
                                    &point.params,
                                    repeat,
                                    env_key(plan, &Value::Object(point.dims.clone())).as_ref(),
                                ),
                                seq: out.len() as i64,
                                batch,
                                test: t.name.clone(),
                                kind: t.kind.name().to_string(),
                                path: path.clone(),
                                pattern: t.pattern.name().to_string(),
                                flows: names(&nodes, flows),
                                params: point.params.clone(),
                                dims: crate::rails::cell_dims(&point.dims, instance),
                                repeat,
                            });
                        }
                        batch += 1;
                        if out.len() > crate::plan::MAX_CELLS {
                            return Err(format!("the plan expands to more than {} cells with these agents; shorten its sweeps, repeats or patterns", crate::plan::MAX_CELLS));
                        }
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        problems.dedup();
        return Err(problems.join("\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn roster(paths: &[(&str, &[&str])]) -> Roster {
        let mut r = Roster::default();
        let mut port = 6000;
        for (p, names) in paths {
            for n in *names {
                port += 1;
                r.insert(RosterAgent {
                    name: n.to_string(),
                    path: p.to_string(),
                    addr: format!("127.0.0.1:{port}").parse().unwrap(),
                    test_addr: format!("127.0.0.1:{port}").parse().unwrap(),
                    hello: json!({}),
                    reachable: true,
                })
                .unwrap();
            }
        }
        r
    }

    fn plan(text: &str) -> Plan {
        crate::plan::parse(text, "p.toml", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn one_agent_under_two_names_is_refused() {
        let agent = |name: &str, path: &str, addr: &str| RosterAgent {
            name: name.into(),
            path: path.into(),
            addr: addr.parse().unwrap(),
            test_addr: addr.parse().unwrap(),
            hello: json!({}),
            reachable: true,
        };
        let mut r = Roster::default();
        r.insert(agent("n1", "host", "10.0.0.1:5301")).unwrap();
        // The same name again (a name listed twice, or found twice): fine.
        r.insert(agent("n1", "host", "10.0.0.1:5301")).unwrap();
        // Another name for the same address, v4-mapped or not, any path.
        for (name, path, addr) in [
            ("n2", "host", "10.0.0.1:5301"),
            ("10.0.0.1", "host", "[::ffff:10.0.0.1]:5301"),
            ("n1", "pod", "10.0.0.1:5301"),
        ] {
            let e = r.insert(agent(name, path, addr)).unwrap_err();
            assert!(
                e.contains("are the same agent at 10.0.0.1:5301") && e.contains("\"n1\""),
                "{e}"
            );
        }
        // Another port is another agent; unreachable placeholders are not compared.
        r.insert(agent("n3", "host", "10.0.0.1:5302")).unwrap();
        r.insert(agent("x", "host", "0.0.0.0:0")).unwrap();
        r.insert(agent("y", "host", "0.0.0.0:0")).unwrap();
    }

    const AGENTS: &str = r#"
name = "t"
[[agents]]
name = "a"
addr = "127.0.0.1"
"#;

    #[test]
    fn mesh_cells_batch_by_round() {
        let p = plan(&format!("{AGENTS}\n[[tests]]\nkind = \"tcp-bw\"\nduration = 1\nsizes = [\"64K\", \"1M\"]\nrepeats = 2\n"));
        let r = roster(&[("host", &["n1", "n2", "n3", "n4"])]);
        let cells = expand(&p, &r).unwrap();
        // 6 pairs × both directions × 2 sizes × 2 repeats.
        assert_eq!(cells.len(), 48);
        // 6 rounds × 2 sizes × 2 repeats batches of 2 pairs.
        let mut batches: BTreeMap<i64, usize> = BTreeMap::new();
        for c in &cells {
            *batches.entry(c.batch).or_default() += 1;
        }
        assert_eq!(batches.len(), 24);
        assert!(batches.values().all(|&n| n == 2));
        // Ids are unique and stable.
        let ids: std::collections::HashSet<&str> =
            cells.iter().map(|c| c.cell_id.as_str()).collect();
        assert_eq!(ids.len(), cells.len());
        assert_eq!(expand(&p, &r).unwrap(), cells);
        // Repeat 0 of every size comes before repeat 1.
        let first_r1 = cells.iter().position(|c| c.repeat == 1).unwrap();
        assert!(cells[..first_r1].iter().all(|c| c.repeat == 0));
        assert_eq!(cells[0].dims["size"], 65536);
        assert_eq!(cells[0].params["size"], 65536);
    }

    /// A mesh measures both directions by default, so a node's sends and
    /// receives can be told apart; `ordered = false` or `bidir` cells (both
    /// ways in one cell) measure each pair once.
    #[test]
    fn mesh_measures_both_directions_by_default() {
        let r = roster(&[("host", &["n1", "n2", "n3"])]);
        let pairs = |extra: &str| -> std::collections::BTreeSet<(String, String)> {
            let p = plan(&format!(
                "{AGENTS}\n[[tests]]\nkind = \"tcp-bw\"\nduration = 1\n{extra}"
            ));
            expand(&p, &r)
                .unwrap()
                .into_iter()
                .map(|c| c.flows[0].clone())
                .collect()
        };
        let both = pairs("");
        assert_eq!(both.len(), 6);
        for (a, b) in &both {
            assert!(both.contains(&(b.clone(), a.clone())), "{a} -> {b} only");
        }
        assert_eq!(pairs("ordered = false\n").len(), 3);
        assert_eq!(pairs("directions = [\"bidir\"]\n").len(), 3);
        assert_eq!(pairs("directions = [\"bidir\", \"forward\"]\n").len(), 6);
        assert_eq!(pairs("directions = [\"bidir\"]\nordered = true\n").len(), 6);
    }

    #[test]
    fn ids_survive_unrelated_plan_changes() {
        let one = plan(&format!("{AGENTS}\n[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = 1\nsizes = [\"64K\"]\n"));
        let two = plan(&format!("{AGENTS}\n[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = 1\nsizes = [\"64K\", \"1M\"]\n[[tests]]\nkind = \"tcp-lat\"\nduration = 1\n"));
        let r = roster(&[("host", &["n1", "n2"])]);
        let a = expand(&one, &r).unwrap();
        let b = expand(&two, &r).unwrap();
        assert_eq!(a.len(), 2, "both directions");
        assert!(
            b.iter().any(|c| c.cell_id == a[0].cell_id),
            "the 64K cell keeps its id"
        );
        // Another duration is another measurement.
        let three = plan(&format!("{AGENTS}\n[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = 2\nsizes = [\"64K\"]\n"));
        assert_ne!(expand(&three, &r).unwrap()[0].cell_id, a[0].cell_id);
    }

    #[test]
    fn incast_and_bisection_cells() {
        let p = plan(&format!("{AGENTS}\n[[tests]]\nkind = \"tcp-bw\"\npattern = \"incast\"\nduration = 1\n[[tests]]\nkind = \"tcp-bw\"\npattern = \"bisection\"\nsplits = 2\nduration = 1\n"));
        let r = roster(&[("host", &["n1", "n2", "n3", "n4", "n5"])]);
        let cells = expand(&p, &r).unwrap();
        let incast: Vec<&CellSpec> = cells.iter().filter(|c| c.pattern == "incast").collect();
        assert_eq!(incast.len(), 5);
        assert!(incast.iter().all(|c| c.flows.len() == 4));
        assert_eq!(incast[2].flows[0].1, "n3");
        let bis: Vec<&CellSpec> = cells.iter().filter(|c| c.pattern == "bisection").collect();
        assert_eq!(bis.len(), 2);
        assert!(bis.iter().all(|c| c.flows.len() == 2));
    }

    #[test]
    fn unknown_pair_names_are_reported() {
        let p = plan(&format!(
            "{AGENTS}\n[[tests]]\nkind = \"tcp-lat\"\npairs = [[\"n1\", \"zz\"]]\nduration = 1\n"
        ));
        let r = roster(&[("host", &["n1", "n2"])]);
        let e = expand(&p, &r).unwrap_err();
        assert!(
            e.contains("no agent named zz") && e.contains("n1, n2"),
            "{e}"
        );
        let p = plan(&format!(
            "{AGENTS}\n[[tests]]\nkind = \"tcp-lat\"\nduration = 1\n"
        ));
        let e = expand(&p, &roster(&[("host", &["n1"])])).unwrap_err();
        assert!(e.contains("at least 2 agents"), "{e}");
    }

    #[test]
    fn duplicate_names_with_different_addresses_refused() {
        let mut r = roster(&[("host", &["n1"])]);
        let e = r
            .insert(RosterAgent {
                name: "n1".into(),
                path: "host".into(),
                addr: "127.0.0.2:1".parse().unwrap(),
                test_addr: "127.0.0.2:1".parse().unwrap(),
                hello: json!({}),
                reachable: true,
            })
            .unwrap_err();
        assert!(e.contains("--node-name"), "{e}");
    }
}
