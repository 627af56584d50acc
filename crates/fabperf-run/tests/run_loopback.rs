//! `fabperf run` end to end against in-process agents on loopback.

mod common;

use fabperf_store::{CellState, Role, Store};

const MESH: &str = "[[tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nretest = 0\nordered = false\n\
[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = \"0.3s\"\nparams = { omit_s = 0.1 }\nretest = 0\nordered = false\n";

#[test]
fn mesh_runs_stores_and_resumes_only_what_is_missing() {
    let agents = common::start(3, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(d.path(), "mesh", agents.port, 3, MESH);
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    // 3 pairs × 2 tests.
    assert_eq!(
        (out.cells, out.done, out.failed, out.pending),
        (6, 6, 0, 0),
        "{out:?}"
    );
    assert!(!out.interrupted);
    assert!(out.test_s > 0.0 && out.test_s <= out.wall_s);
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    assert!(run.ended_at.is_some());
    let ms = s.measurements(run.id, None).unwrap();
    let totals: Vec<_> = ms.iter().filter(|(_, m)| m.role == Role::Total).collect();
    assert_eq!(totals.len(), 6);
    for (_, m) in &totals {
        assert!(m.src.is_some() && m.dst.is_some());
        if m.record.test == "tcp-bw" {
            assert!(m.record.bw_gbps.unwrap() > 0.0);
        } else {
            assert!(m.record.lat_us.as_ref().unwrap().p50 > 0.0);
        }
    }
    // The agents' hellos are stored.
    assert_eq!(s.agents(run.id).unwrap().len(), 3);
    drop(s);

    // The same command again runs nothing.
    let again = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(again.ran, 0, "{again:?}");
    assert_eq!(again.run_id, out.run_id);

    // A plan that adds a size runs only the new cells, in the same run.
    let bigger = common::plan(
        d.path(),
        "mesh",
        agents.port,
        3,
        &MESH.replace(
            "duration = \"0.3s\"",
            "duration = \"0.3s\"\nsizes = [\"128K\", \"64K\"]",
        ),
    );
    let more = fabperf_run::run(&common::opts(&bigger, &db)).unwrap();
    assert_eq!(more.run_id, out.run_id);
    assert_eq!(more.ran, 3, "{more:?}");
    assert_eq!(more.done, 9);
    // --new-run measures everything again into a new run.
    let mut o = common::opts(&bigger, &db);
    o.new_run = true;
    let fresh = fabperf_run::run(&o).unwrap();
    assert_ne!(fresh.run_id, out.run_id);
    assert_eq!(fresh.ran, 9);
}

#[test]
fn a_dead_agent_fails_its_cells_and_the_run_goes_on() {
    let agents = common::start(2, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    // n3 is declared but nothing listens there.
    let plan = common::plan(
        d.path(),
        "dead",
        agents.port,
        3,
        "[[tests]]\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nretest = 0\nordered = false\n",
    );
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(out.cells, 3);
    assert_eq!(out.done, 1, "{out:?}");
    assert_eq!(out.failed, 2);
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    for c in s.cells(run.id).unwrap() {
        if c.spec.flows[0].0 == "n3" || c.spec.flows[0].1 == "n3" {
            assert_eq!(c.state, CellState::Failed);
            assert_eq!(c.attempts, 2, "one retry: {c:?}");
            assert!(c.error.as_deref().unwrap().contains("127.0.0.3"), "{c:?}");
        } else {
            assert_eq!(c.state, CellState::Done);
        }
    }
    drop(s);
    // Without --retry-failed the failed cells stay failed.
    let again = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(again.ran, 0);
    let mut o = common::opts(&plan, &db);
    o.retry_failed = true;
    let retried = fabperf_run::run(&o).unwrap();
    assert_eq!(retried.ran, 2);
    assert_eq!(retried.failed, 2);
}

#[test]
fn pairs_pattern_and_dry_run() {
    let agents = common::start(2, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(
        d.path(),
        "pairs",
        agents.port,
        2,
        "[[tests]]\nkind = \"udp-lat\"\npairs = [[\"n2\", \"n1\"]]\nduration = \"0.2s\"\n",
    );
    let mut o = common::opts(&plan, &db);
    o.dry_run = true;
    let dry = fabperf_run::run(&o).unwrap();
    assert_eq!(dry.cells, 1);
    assert!(!db.exists(), "a dry run creates no store");
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(out.done, 1);
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let ms = s.measurements(run.id, None).unwrap();
    assert_eq!(ms[0].1.src.as_deref(), Some("n2"));
    assert_eq!(ms[0].1.record.test, "udp-lat");
}

#[test]
fn token_protected_agents() {
    let agents = common::start(2, Some(b"0123456789abcdef-secret"));
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    std::fs::write(d.path().join("tok"), "0123456789abcdef-secret\n").unwrap();
    let plan = common::plan(
        d.path(),
        "tok",
        agents.port,
        2,
        "token_file = \"tok\"\n[[tests]]\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nordered = false\n",
    );
    // token_file must come before the tables: rebuild the plan that way.
    let text = std::fs::read_to_string(&plan).unwrap();
    let text = text.replace("token_file = \"tok\"\n", "");
    std::fs::write(&plan, format!("token_file = \"tok\"\n{text}")).unwrap();
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(out.done, 1, "{out:?}");
    // Without the token every cell fails, with the reason.
    let no_tok = d.path().join("none.toml");
    std::fs::write(
        &no_tok,
        std::fs::read_to_string(&plan)
            .unwrap()
            .replace("token_file = \"tok\"\n", "")
            .replace("name = \"tok\"", "name = \"none\""),
    )
    .unwrap();
    let out = fabperf_run::run(&common::opts(&no_tok, &db)).unwrap();
    assert_eq!(out.failed, 1);
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run_for_plan("none").unwrap().unwrap();
    let c = &s.cells(run.id).unwrap()[0];
    assert!(c.error.as_deref().unwrap().contains("secret"), "{c:?}");
    assert_eq!(c.attempts, 1, "authentication failures are not retried");
}

#[test]
fn incast_and_bisection_run_their_flows_at_once() {
    let agents = common::start(4, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(
        d.path(),
        "incast",
        agents.port,
        4,
        "[[tests]]\nname = \"in\"\nkind = \"tcp-bw\"\npattern = \"incast\"\nreceivers = [\"n1\"]\nduration = \"1s\"\nparams = { omit_s = 0.2 }\n\
         [[tests]]\nname = \"bi\"\nkind = \"tcp-bw\"\npattern = \"bisection\"\nsplits = 1\nduration = \"1s\"\nparams = { omit_s = 0.2 }\n",
    );
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let cells = s.cells(run.id).unwrap();
    let errors: Vec<_> = cells.iter().filter_map(|c| c.error.clone()).collect();
    assert_eq!(
        (out.cells, out.done, out.failed),
        (2, 2, 0),
        "{out:?} {errors:?}"
    );
    let ms = s.measurements(run.id, None).unwrap();
    let incast = cells.iter().find(|c| c.spec.pattern == "incast").unwrap();
    let mine: Vec<_> = ms
        .iter()
        .filter(|(id, _)| *id == incast.spec.cell_id)
        .map(|(_, m)| m)
        .collect();
    let flows: Vec<_> = mine.iter().filter(|m| m.role == Role::Flow).collect();
    assert_eq!(flows.len(), 3);
    assert!(flows.iter().all(|m| m.dst.as_deref() == Some("n1")));
    let agg = mine.iter().find(|m| m.role == Role::Aggregate).unwrap();
    assert_eq!(agg.record.streams, 3);
    assert!(agg.record.check().is_empty(), "{:?}", agg.record.check());
    // Every flow's measured interval is recorded in absolute time, with its
    // progress; the aggregate covers only their common interval.
    let common = agg.record.interval.as_ref().expect("the common interval");
    for f in &flows {
        let i = f.record.interval.as_ref().expect("each flow's interval");
        assert!(i.progress.is_some(), "{i:?}");
        assert!(i.start_s <= common.start_s + 1e-9 && i.end_s >= common.end_s - 1e-9);
        assert!(f.record.duration_s >= agg.record.duration_s - 1e-9);
    }
    let sum: u64 = flows.iter().map(|m| m.record.bytes).sum();
    assert!(agg.record.bytes <= sum, "{} > {sum}", agg.record.bytes);
    let set = agg.record.flows.as_ref().expect("the flow set");
    assert_eq!(set.count, 3);
    assert!(set.overlap_pct >= 90.0, "{set:?}");
    // One start: the senders started within a few milliseconds (a loaded
    // 2-core machine included), not staggered by their set-up.
    let skew = set.start_skew_s.expect("the start skew");
    assert!(skew < 0.1, "the senders started {:.1} ms apart", skew * 1e3);
    let bis = cells
        .iter()
        .find(|c| c.spec.pattern == "bisection")
        .unwrap();
    assert_eq!(bis.spec.flows.len(), 2);
    let n = ms
        .iter()
        .filter(|(id, m)| *id == bis.spec.cell_id && m.role == Role::Flow)
        .count();
    assert_eq!(n, 2);
}

/// A bidirectional incast counts each direction once: per sender a forward
/// and a reverse flow (not their total too), and one aggregate per
/// direction over its own flows.
#[test]
fn a_bidirectional_incast_counts_each_direction_once() {
    let agents = common::start(3, None);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(
        d.path(),
        "bidir",
        agents.port,
        3,
        "[[tests]]\nname = \"in\"\nkind = \"tcp-bw\"\npattern = \"incast\"\nreceivers = [\"n1\"]\n\
         directions = [\"bidir\"]\nduration = \"1s\"\nparams = { omit_s = 0.2 }\n",
    );
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!((out.done, out.failed), (1, 0), "{out:?}");
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let ms = s.measurements(run.id, None).unwrap();
    let flows: Vec<_> = ms
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.role == Role::Flow)
        .collect();
    let mut dirs: Vec<&str> = flows
        .iter()
        .map(|m| m.record.direction.as_deref().unwrap())
        .collect();
    dirs.sort_unstable();
    assert_eq!(dirs, ["forward", "forward", "reverse", "reverse"]);
    let aggs: Vec<_> = ms
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m.role == Role::Aggregate)
        .collect();
    assert_eq!(aggs.len(), 2, "one aggregate per direction");
    for a in aggs {
        let dir = a.record.direction.as_deref().unwrap();
        let sum: u64 = flows
            .iter()
            .filter(|m| m.record.direction.as_deref() == Some(dir))
            .map(|m| m.record.bytes)
            .sum();
        // The common interval lies inside every flow's own; a receive that
        // straddles an interval's edge is counted whole by the flow and
        // pro rata by the progress counts, so allow 1 % for the edges.
        assert!(
            a.record.bytes as f64 <= sum as f64 * 1.01,
            "{dir}: {} > {sum}",
            a.record.bytes
        );
        assert_eq!(a.record.flows.as_ref().unwrap().count, 2);
        assert_eq!(a.dst.as_deref(), Some("n1"));
    }
}

/// A plan is checked against what the agents announce before anything
/// runs: an incast with more senders than its receiver admits at once is a
/// plan error (not a second wave whose bytes would enter the aggregate).
#[test]
fn an_incast_larger_than_the_receiver_admits_is_refused_at_plan_time() {
    let agents = common::start_with_group(4, None, Some(2));
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = common::plan(
        d.path(),
        "big",
        agents.port,
        4,
        "[[tests]]\nname = \"in\"\nkind = \"tcp-bw\"\npattern = \"incast\"\nreceivers = [\"n1\"]\nduration = \"0.3s\"\n",
    );
    match fabperf_run::run(&common::opts(&plan, &db)) {
        Err(fabperf_run::exec::RunError::Plan(e)) => {
            assert!(e.contains("3 senders") && e.contains("admits 2"), "{e}");
        }
        other => panic!("expected a plan error, got {other:?}"),
    }
    assert!(
        !db.exists() || {
            let s = Store::open_read_only(&db).unwrap();
            s.latest_run().unwrap().is_none()
        }
    );
}
