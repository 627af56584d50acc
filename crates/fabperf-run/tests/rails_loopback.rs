//! Runs on rails against in-process agents: every agent serves its node's
//! rails (loopback addresses announced as links in its hello), rail i of one
//! node is paired with rail i of the other, all rails of a round at one
//! start instant, each cell stored with its rail.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{AgentIdentity, Limits};
use fabperf_run::rails::HelloLink;
use fabperf_run::summary::{Rule, RuleKind};
use fabperf_store::{CellState, Role, Store};
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;

/// The cluster's token: the agents listen on every address.
const TOKEN: &[u8] = b"rails-loopback-test-token-0123456789";

/// Node `i`'s agent, on every address (its rails are other loopback
/// addresses) at its own port, announcing `rails` as `fabR` with address
/// 127.0.(10+R).i.
fn agent(i: u8, rails: &[u8]) -> (AgentHandle, u16) {
    for _ in 0..20 {
        let probe = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let links: Vec<HelloLink> = rails
            .iter()
            .map(|r| HelloLink {
                iface: Some(format!("fab{r}")),
                addr: Some(format!("127.0.{}.{i}", 10 + r).parse().unwrap()),
                ..Default::default()
            })
            .collect();
        let bind: SocketAddr = format!("0.0.0.0:{port}").parse().unwrap();
        let Ok(a) = Agent::bind(AgentConfig {
            bind,
            token: Some(TOKEN.to_vec()),
            insecure: false,
            limits: Limits {
                io_timeout: Duration::from_secs(5),
                ..Limits::default()
            },
            kinds: {
                let mut k = fabperf_sock::kinds();
                k.push(Box::new(fabperf_run::DriveKind::new(
                    Some(TOKEN.to_vec()),
                    Duration::from_secs(5),
                )));
                k
            },
            quiet: true,
            identity: Some(AgentIdentity {
                addr: None,
                node: format!("n{i}"),
                path: "host".into(),
                inventory: Some(json!({ "links": links })),
            }),
        }) else {
            continue;
        };
        return (a.spawn(), port);
    }
    panic!("no free port for a test agent");
}

fn plan(dir: &std::path::Path, ports: &[u16], test: &str) -> std::path::PathBuf {
    let mut t = "name = \"rails\"\ntimeout = \"5s\"\nretries = 0\n".to_string();
    for (k, p) in ports.iter().enumerate() {
        t.push_str(&format!(
            "[[agents]]\nname = \"n{}\"\naddr = \"127.0.0.{}:{p}\"\n",
            k + 1,
            k + 1
        ));
    }
    t.push_str(test);
    let p = dir.join("rails.toml");
    std::fs::write(&p, t).unwrap();
    p
}

fn opts(plan: &std::path::Path, db: &std::path::Path) -> fabperf_run::RunOptions {
    fabperf_run::RunOptions {
        plan: plan.to_path_buf(),
        db: db.to_path_buf(),
        retry_failed: false,
        new_run: false,
        run_id: None,
        dry_run: false,
        progress: fabperf_run::exec::ProgressMode::Quiet,
        token: Some(TOKEN.to_vec()),
        lease_wait: Duration::ZERO,
    }
}

const BW: &str = "[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = \"0.5s\"\nparams = { omit_s = 0.1 }\nretest = 0\nordered = false\nrails = [\"fab0\", \"fab1\", \"fab2\"]\n";

#[test]
fn rail_i_meets_rail_i_at_one_start_and_each_cell_keeps_its_rail() {
    let (_a1, p1) = agent(1, &[0, 1, 2]);
    let (_a2, p2) = agent(2, &[0, 1, 2]);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let p = plan(d.path(), &[p1, p2], BW);
    let out = fabperf_run::run(&opts(&p, &db)).unwrap();
    // Every mesh cell of the two nodes, once per rail.
    assert_eq!(out.failed, 0, "{out:?}");
    assert_eq!(out.cells % 3, 0, "{out:?}");
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let cells = s.plan_cells(run.id).unwrap();
    let ms = s.measurements(run.id, None).unwrap();
    // Per batch: one cell per rail, each to the receiver's address on it.
    let mut batches: std::collections::BTreeMap<i64, Vec<u64>> = Default::default();
    for c in &cells.current {
        assert_eq!(c.state, CellState::Done, "{:?}", c.error);
        let rail = c.spec.dims["rail"]
            .as_u64()
            .expect("a rail cell has its rail");
        assert!(c.spec.dims.get("rail_to").is_none());
        batches.entry(c.spec.batch).or_default().push(rail);
        let (_, dst) = &c.spec.flows[0];
        let i = &dst[1..];
        let total = ms
            .iter()
            .find(|(id, m)| *id == c.spec.cell_id && m.role == Role::Total)
            .map(|(_, m)| &m.record)
            .unwrap();
        assert!(total.bw_gbps.unwrap() > 0.0);
        let remote = total.remote.as_deref().unwrap_or_default();
        assert!(
            remote.starts_with(&format!("127.0.{}.{i}:", 10 + rail)),
            "rail {rail} to {dst} went to {remote}"
        );
    }
    for (b, mut rails) in batches.clone() {
        rails.sort_unstable();
        assert_eq!(rails, [0, 1, 2], "batch {b}");
        // The rails of a batch started together: their senders' starts
        // within a small part of the 0.5 s test.
        let starts: Vec<f64> = cells
            .current
            .iter()
            .filter(|c| c.spec.batch == b)
            .filter_map(|c| {
                ms.iter()
                    .find(|(id, m)| *id == c.spec.cell_id && m.role == Role::Total)
                    .and_then(|(_, m)| m.record.interval.as_ref()?.sent_from_s)
            })
            .collect();
        assert_eq!(starts.len(), 3, "every rail's record says when it began");
        let skew = starts.iter().cloned().fold(f64::MIN, f64::max)
            - starts.iter().cloned().fold(f64::MAX, f64::min);
        assert!(skew < 0.2, "rails of batch {b} started {skew:.3} s apart");
    }
    // The summary has one group, its ends the nodes' rails.
    let a = fabperf_run::summary::analyze(&s, run.id, "bw", &Rule::new(RuleKind::Median, 0.5, 2.0))
        .unwrap();
    assert_eq!(a.groups.len(), 1, "{:?}", a.groups);
    assert_eq!(
        a.groups[0].nodes,
        ["n1/rail0", "n1/rail1", "n1/rail2", "n2/rail0", "n2/rail1", "n2/rail2"]
    );
    let text = fabperf_run::summary::render(&a);
    assert!(text.contains("n2/rail1"), "{text}");
}

#[test]
fn a_node_without_the_rail_fails_that_rail_by_name() {
    let (_a1, p1) = agent(1, &[0, 1, 2]);
    // n2 has no fab1.
    let (_a2, p2) = agent(2, &[0, 2]);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let p = plan(d.path(), &[p1, p2], BW);
    let out = fabperf_run::run(&opts(&p, &db)).unwrap();
    assert!(out.failed > 0, "{out:?}");
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    for c in &s.plan_cells(run.id).unwrap().current {
        let rail = c.spec.dims["rail"].as_u64().unwrap();
        if rail == 1 {
            assert_eq!(c.state, CellState::Failed);
            let e = c.error.as_deref().unwrap();
            assert!(
                e.contains("node n2 has no rail 1 (fab1)") && e.contains("fab2 (127.0.12.2)"),
                "{e}"
            );
        } else {
            assert_eq!(c.state, CellState::Done, "rail {rail}: {:?}", c.error);
        }
    }
}

#[test]
fn rails_rdma_needs_an_rdma_device_on_some_node() {
    let (_a1, p1) = agent(1, &[0, 1]);
    let (_a2, p2) = agent(2, &[0, 1]);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let p = plan(
        d.path(),
        &[p1, p2],
        &BW.replace("[\"fab0\", \"fab1\", \"fab2\"]", "\"rdma\""),
    );
    let e = fabperf_run::run(&opts(&p, &db)).unwrap_err().to_string();
    assert!(
        e.contains("announces an RDMA device with an address"),
        "{e}"
    );
}
