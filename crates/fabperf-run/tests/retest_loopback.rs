//! Mesh re-tests end to end against in-process agents on loopback: re-tests
//! never share a node, failed re-tests leave their suspects unconfirmed,
//! `--retry-failed` runs them again, and a second runner is refused.

mod common;

use fabperf_run::summary::{self, SuspectState};
use fabperf_store::{Attempt, CellState, Store, RETEST};
use std::collections::BTreeMap;

/// Two sizes of one mesh, each pair measured both ways; re-tests off.
fn mesh_plan(retest: u32) -> String {
    format!(
        "[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nsizes = [\"64K\", \"128K\"]\nduration = \"0.3s\"\nparams = {{ omit_s = 0.1 }}\nretest = {retest}\nsuspect_bw = 0.5\n"
    )
}

/// Make every stored figure of a pair with n3 tiny, as if n3 were slow, and
/// every other pair's a steady 1 Gbit/s: the verdict then does not depend on
/// how fast this machine's loopback happened to be (a loaded machine can make
/// a healthy pair look slow).
fn slow_down_n3(db: &std::path::Path) {
    let mut s = Store::open(db).unwrap();
    let run = s.latest_run().unwrap().unwrap().id;
    let at = Attempt {
        attempts: 1,
        started_at: String::new(),
        ended_at: String::new(),
        wall_s: 1.0,
    };
    for c in s.cells(run).unwrap() {
        let (a, b) = c.spec.flows[0].clone();
        let with_n3 = a == "n3" || b == "n3";
        let mut ms: Vec<fabperf_store::Measurement> = s
            .measurements(run, Some(&c.spec.cell_id))
            .unwrap()
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        for m in &mut ms {
            let secs = m.record.duration_s;
            let bytes = if with_n3 {
                1000
            } else {
                (125_000_000.0 * secs) as u64
            };
            m.record.set_throughput(bytes, secs, None);
        }
        s.finish_cell_done(run, &c.spec.cell_id, &at, &ms).unwrap();
    }
}

#[test]
fn retests_share_no_node_and_failed_ones_stay_unconfirmed_until_retried() {
    let mut agents = common::start(3, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(d.path(), "rt", agents.port, 3, &mesh_plan(0));
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    // 3 pairs × both directions × 2 sizes.
    assert_eq!((out.cells, out.done), (12, 12), "{out:?}");
    slow_down_n3(&db);

    // n3's agent goes away; the plan turns its re-tests on.
    agents.handles.remove(2).shutdown();
    let plan = common::plan(d.path(), "rt", agents.port, 3, &mesh_plan(1));
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(out.ran, 8, "a re-test per pair with n3, per size: {out:?}");
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap().id;
    let retests: Vec<_> = s
        .cells(run)
        .unwrap()
        .into_iter()
        .filter(|c| c.spec.pattern == RETEST)
        .collect();
    assert_eq!(retests.len(), 8);
    assert!(retests.iter().all(|c| c.state == CellState::Failed));
    // No two re-tests of one batch share a node: the two sizes of a pair
    // run one after the other, not at once.
    let mut batches: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for c in &retests {
        let nodes = batches.entry(c.spec.batch).or_default();
        for (a, b) in &c.spec.flows {
            for n in [a, b] {
                assert!(
                    !nodes.contains(&n.as_str()),
                    "batch {} runs {n} twice: {:?}",
                    c.spec.batch,
                    retests
                        .iter()
                        .filter(|r| r.spec.batch == c.spec.batch)
                        .map(|r| (&r.spec.flows, &r.spec.dims))
                        .collect::<Vec<_>>()
                );
                nodes.push(n.as_str());
            }
        }
    }
    // The suspects are unconfirmed, not "confirmed by every re-test".
    let a = summary::analyze(
        &s,
        run,
        "bw",
        &summary::Rule::new(summary::RuleKind::Median, 0.5, 2.1),
    )
    .unwrap();
    assert_eq!(a.groups.len(), 2);
    for g in &a.groups {
        assert_eq!(g.suspects.len(), 4, "{:?}", g.suspects);
        for sus in &g.suspects {
            assert_eq!(sus.state, SuspectState::Unconfirmed, "{sus:?}");
            assert_eq!(sus.retests_failed.len(), 1, "{sus:?}");
        }
        assert!(g.bad_nodes.is_empty() && g.bad_links.is_empty());
        assert_eq!(g.node_findings[0].node, "n3");
        assert!(!g.node_findings[0].confirmed);
    }
    let text = summary::render(&a);
    assert!(text.contains("unconfirmed SUSPECT NODE n3"), "{text}");
    assert!(text.contains("--retry-failed"), "{text}");
    assert!(!text.contains("\n  SUSPECT NODE"), "{text}");
    drop(s);

    // Without --retry-failed nothing runs again.
    let again = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(again.ran, 0, "{again:?}");
    // n3 is back: --retry-failed re-runs the failed re-tests. The real
    // figures are fast, so the suspects are cleared.
    agents.handles.push(common::start_one(&agents, 3));
    let mut o = common::opts(&plan, &db);
    o.retry_failed = true;
    let retried = fabperf_run::run(&o).unwrap();
    assert_eq!(retried.ran, 8, "{retried:?}");
    assert_eq!(retried.failed, 0, "{retried:?}");
    let s = Store::open_read_only(&db).unwrap();
    let a = summary::analyze(
        &s,
        run,
        "bw",
        &summary::Rule::new(summary::RuleKind::Median, 0.5, 2.1),
    )
    .unwrap();
    for g in &a.groups {
        for sus in &g.suspects {
            assert_eq!(sus.state, SuspectState::Cleared, "{sus:?}");
        }
        assert!(g.node_findings.is_empty());
    }
}

#[test]
fn a_second_runner_is_refused_with_the_holder_named_or_waits() {
    let agents = common::start(2, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(
        d.path(),
        "lease",
        agents.port,
        2,
        "[[tests]]\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nretest = 0\n",
    );
    let holder = fabperf_store::LeaseHolder::this_process("fabperf run other.toml (run 7)");
    let held = fabperf_store::Lease::acquire(&db, &holder, std::time::Duration::ZERO).unwrap();
    let e = fabperf_run::run(&common::opts(&plan, &db))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "in use by fabperf run other.toml (run 7), pid {} on host {}, since {}",
            holder.pid, holder.host, holder.started_at
        )),
        "{e}"
    );
    assert!(!db.exists(), "the refused runner created no store");
    // With a wait, the runner takes the lease once it is free.
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(held);
    });
    let mut o = common::opts(&plan, &db);
    o.lease_wait = std::time::Duration::from_secs(20);
    let out = fabperf_run::run(&o).unwrap();
    t.join().unwrap();
    assert_eq!(out.done, 2, "{out:?}");
    let h = fabperf_store::Lease::holder(&db).unwrap();
    assert_eq!(h.pid, std::process::id());
    assert!(
        h.what.contains("lease.toml") && h.what.contains("run 1"),
        "{h:?}"
    );
}
