//! The results store: lifecycle, resume bookkeeping, bad files, schema
//! versions, exports, and durability under SIGKILL.

use fabperf_results::{Record, Transport};
use fabperf_store::*;
use serde_json::json;
use std::path::Path;

fn spec(id: &str, seq: i64) -> CellSpec {
    CellSpec {
        cell_id: id.to_string(),
        seq,
        batch: seq,
        test: "bw".into(),
        kind: "tcp-bw".into(),
        path: "host".into(),
        pattern: "pairs".into(),
        flows: vec![("a".into(), "b".into())],
        params: json!({"size": 131072, "duration_s": 1.0}),
        dims: json!({"size": 131072}),
        repeat: 0,
    }
}

fn record(gbps: f64) -> Record {
    let mut r = Record::new("tcp-bw", Transport::Tcp, 131072, 1);
    r.set_throughput((gbps * 1e9 / 8.0) as u64, 1.0, Some(1000));
    r
}

fn attempt() -> Attempt {
    Attempt {
        attempts: 1,
        started_at: fabperf_results::now_rfc3339(),
        ended_at: fabperf_results::now_rfc3339(),
        wall_s: 1.01,
    }
}

fn new_run(s: &mut Store, hash: &str) -> RunInfo {
    s.create_run(&NewRun {
        plan_name: "p",
        plan_hash: hash,
        plan_file: Some("p.toml"),
        plan_text: "[plan]\nname = \"p\"\n",
    })
    .unwrap()
}

#[test]
fn lifecycle_and_resume_bookkeeping() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h1");
    let cells: Vec<CellSpec> = (0..4).map(|i| spec(&format!("c{i}"), i)).collect();
    let rep = s.sync_cells(run.id, &cells, false).unwrap();
    assert_eq!(rep.pending, 4);
    s.finish_cell_done(
        run.id,
        "c0",
        &attempt(),
        &[Measurement {
            role: Role::Total,
            src: Some("a".into()),
            dst: Some("b".into()),
            record: record(10.0),
        }],
    )
    .unwrap();
    s.finish_cell_failed(run.id, "c1", &attempt(), "agent busy")
        .unwrap();
    drop(s);

    // Reopen: the same plan again keeps c0 done, c1 failed, c2/c3 pending.
    let mut s = Store::open(&db).unwrap();
    assert_eq!(s.latest_run_for_plan("p").unwrap().unwrap().id, run.id);
    let rep = s.sync_cells(run.id, &cells, false).unwrap();
    assert_eq!(
        rep,
        SyncReport {
            done: 1,
            failed: 1,
            pending: 2,
            not_in_plan: 0
        }
    );
    // A changed plan: c3 gone, c4 new; --retry-failed makes c1 pending.
    let mut changed: Vec<CellSpec> = cells[..3].to_vec();
    changed.push(spec("c4", 4));
    let rep = s.sync_cells(run.id, &changed, true).unwrap();
    assert_eq!(
        rep,
        SyncReport {
            done: 1,
            failed: 0,
            pending: 3,
            not_in_plan: 1
        }
    );
    let rows = s.cells(run.id).unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0].spec.cell_id, "c0");
    assert_eq!(rows[0].state, CellState::Done);
    assert_eq!(rows[1].state, CellState::Pending, "retried");
    assert_eq!(
        rows.last().unwrap().spec.cell_id,
        "c3",
        "out-of-plan cells last"
    );
    let ms = s.measurements(run.id, None).unwrap();
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].0, "c0");
    assert!((ms[0].1.record.bw_gbps.unwrap() - 10.0).abs() < 1e-6);
    assert_eq!(ms[0].1.src.as_deref(), Some("a"));
    assert_eq!(s.integrity_check().unwrap(), "ok");
}

#[test]
fn finishing_again_replaces_measurements() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Store::open(&d.path().join("r.db")).unwrap();
    let run = new_run(&mut s, "h");
    s.sync_cells(run.id, &[spec("c0", 0)], false).unwrap();
    let m = |g| Measurement {
        role: Role::Total,
        src: None,
        dst: None,
        record: record(g),
    };
    s.finish_cell_done(run.id, "c0", &attempt(), &[m(1.0), m(2.0)])
        .unwrap();
    s.finish_cell_done(run.id, "c0", &attempt(), &[m(3.0)])
        .unwrap();
    let ms = s.measurements(run.id, Some("c0")).unwrap();
    assert_eq!(ms.len(), 1);
    assert!((ms[0].1.record.bw_gbps.unwrap() - 3.0).abs() < 1e-6);
    assert!(s
        .finish_cell_done(run.id, "nope", &attempt(), &[m(1.0)])
        .is_err());
}

#[test]
fn findings_replace_by_kind() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Store::open(&d.path().join("r.db")).unwrap();
    let run = new_run(&mut s, "h");
    s.set_findings(run.id, "suspect", &[("a-b".into(), json!({"bw": 1}))])
        .unwrap();
    s.set_findings(run.id, "doctor", &[("a".into(), json!({"id": "x"}))])
        .unwrap();
    s.set_findings(run.id, "suspect", &[("c-d".into(), json!({"bw": 2}))])
        .unwrap();
    let f = s.findings(run.id, Some("suspect")).unwrap();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].subject, "c-d");
    assert_eq!(s.findings(run.id, None).unwrap().len(), 2);
}

#[test]
fn refuses_files_that_are_not_stores() {
    let d = tempfile::tempdir().unwrap();
    // Random bytes.
    let junk = d.path().join("junk.db");
    std::fs::write(&junk, vec![0x5au8; 8192]).unwrap();
    let e = Store::open(&junk).err().expect("junk must be refused");
    assert!(matches!(e, StoreError::NotAStore { .. }), "{e}");
    assert!(e.to_string().contains("not a fabperf results store"), "{e}");
    // Another program's SQLite database.
    let other = d.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    let e = Store::open(&other)
        .err()
        .expect("foreign db must be refused");
    assert!(e.to_string().contains("another program"), "{e}");
    // A directory.
    let e = Store::open(d.path()).err().expect("a directory is refused");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    // Read-only on a missing file does not create it.
    let missing = d.path().join("missing.db");
    let e = Store::open_read_only(&missing).err().unwrap();
    assert!(e.to_string().contains("fabperf run"), "{e}");
    assert!(!missing.exists());
}

#[test]
fn newer_schema_refused_and_older_migrated() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    // A store at schema version 1 (before findings existed).
    {
        let mut s = Store::open_with_migrations(&db, 1).unwrap();
        let run = new_run(&mut s, "h");
        s.sync_cells(run.id, &[spec("c0", 0)], false).unwrap();
        s.finish_cell_done(
            run.id,
            "c0",
            &attempt(),
            &[Measurement {
                role: Role::Total,
                src: None,
                dst: None,
                record: record(5.0),
            }],
        )
        .unwrap();
    }
    // Read-only refuses to migrate, with the way out.
    let e = Store::open_read_only(&db).err().unwrap();
    assert!(e.to_string().contains("migrate"), "{e}");
    // Opening for writing migrates and keeps the data.
    {
        let mut s = Store::open(&db).unwrap();
        let run = s.latest_run().unwrap().unwrap();
        assert_eq!(s.measurements(run.id, None).unwrap().len(), 1);
        s.set_findings(run.id, "suspect", &[]).unwrap();
    }
    assert!(Store::open_read_only(&db).is_ok());
    // A newer schema than this build knows is refused.
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let e = Store::open(&db).err().unwrap();
    assert!(matches!(e, StoreError::Newer { .. }), "{e}");
    assert!(e.to_string().contains("newer than this fabperf"), "{e}");
}

#[test]
fn exports_carry_context() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Store::open(&d.path().join("r.db")).unwrap();
    let run = new_run(&mut s, "h");
    s.sync_cells(run.id, &[spec("c0", 0), spec("c1", 1)], false)
        .unwrap();
    let mut r2 = record(2.0);
    r2.stream = Some(0);
    s.finish_cell_done(
        run.id,
        "c0",
        &attempt(),
        &[
            Measurement {
                role: Role::Total,
                src: Some("a".into()),
                dst: Some("b".into()),
                record: record(4.0),
            },
            Measurement {
                role: Role::Stream,
                src: Some("a".into()),
                dst: Some("b,\"x\"".into()),
                record: r2,
            },
        ],
    )
    .unwrap();
    let mut j = Vec::new();
    assert_eq!(export_jsonl(&s, None, &mut j).unwrap(), 2);
    let lines: Vec<serde_json::Value> = String::from_utf8(j)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["cell_id"], "c0");
    assert_eq!(lines[0]["src_node"], "a");
    assert_eq!(lines[0]["test"], "tcp-bw");
    assert_eq!(lines[1]["role"], "stream");
    // Every exported line is a valid fabperf record plus context.
    for l in &lines {
        let r: Record = serde_json::from_value(l.clone()).unwrap();
        assert_eq!(r.size, 131072);
    }
    let mut c = Vec::new();
    assert_eq!(export_csv(&s, Some(run.id), &mut c).unwrap(), 2);
    let mut rdr = csv::Reader::from_reader(c.as_slice());
    let hdr = rdr.headers().unwrap().clone();
    assert_eq!(&hdr[0], "run_id");
    let col = |name: &str| hdr.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[1][col("dst_node")], "b,\"x\"");
    assert_eq!(&rows[0][col("test")], "tcp-bw");
    assert!(rows[0][col("bw_gbps")].parse::<f64>().unwrap() > 3.9);
    // An unknown run is an error naming it.
    let e = export_jsonl(&s, Some(99), Vec::new()).err().unwrap();
    assert!(e.to_string().contains("no run 99"), "{e}");
}

/// A latency record's histogram is stored once, in the `lat_hist` column
/// (not again inside the record's JSON), and every reader gives it back:
/// typed measurements, the JSON Lines export, the raw and streaming
/// readers' column. A record of an older store that still carries it in
/// its JSON reads the same.
#[test]
fn latency_histogram_stored_once_and_read_back() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h");
    s.sync_cells(run.id, &[spec("c0", 0), spec("c1", 1)], false)
        .unwrap();
    let mut h = fabperf_results::LatencyHistogram::new(fabperf_results::LatencyKind::HalfRtt);
    for ns in [9_000u64, 10_000, 12_000, 40_000] {
        h.record_rtt_ns(ns);
    }
    let mut r = Record::new("tcp-lat", Transport::Tcp, 64, 1);
    r.set_latency(&h);
    let hist = r.lat_hist.clone().expect("set_latency keeps the histogram");
    for cell in ["c0", "c1"] {
        let m = Measurement {
            role: Role::Total,
            src: Some("a".into()),
            dst: Some("b".into()),
            record: r.clone(),
        };
        s.finish_cell_done(run.id, cell, &attempt(), &[m]).unwrap();
    }
    drop(s);
    let c = rusqlite::Connection::open(&db).unwrap();
    let (json_hist, column): (Option<String>, Option<String>) = c
        .query_row(
            "SELECT json_extract(record, '$.lat_hist'), lat_hist FROM measurements WHERE cell_id = 'c0'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        json_hist, None,
        "the record's JSON does not repeat the histogram"
    );
    assert_eq!(column.as_deref(), Some(hist.as_str()));
    // c1 as an older version stored it: the histogram in the JSON too.
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.lat_hist', lat_hist) WHERE cell_id = 'c1'",
        [],
    )
    .unwrap();
    drop(c);
    let s = Store::open_read_only(&db).unwrap();
    let ms = s.measurements(run.id, None).unwrap();
    assert_eq!(ms.len(), 2);
    for (cell, m) in &ms {
        assert_eq!(m.record.lat_hist.as_deref(), Some(hist.as_str()), "{cell}");
        assert_eq!(m.record, r, "{cell}: the record as written");
    }
    let mut j = Vec::new();
    assert_eq!(export_jsonl(&s, None, &mut j).unwrap(), 2);
    for l in String::from_utf8(j).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["lat_hist"], hist.as_str(), "{l}");
    }
    for raw in s.measurements_raw(run.id).unwrap() {
        assert_eq!(raw.lat_hist.as_deref(), Some(hist.as_str()));
    }
    // The streaming reader leaves the histogram out (its readers use the
    // figures' columns).
    let mut n = 0;
    s.each_measurement(run.id, None, &mut |m| {
        assert!(m.lat_p50_us.is_some(), "{m:?}");
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 2);
}

/// SIGKILL at random instants while a child process writes cells: the file
/// stays sound and every cell marked done has its measurements.
#[test]
fn sigkill_leaves_a_consistent_store() {
    if let Ok(db) = std::env::var("FABPERF_STORE_CHILD_DB") {
        child_writer(Path::new(&db));
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("k.db");
    let exe = std::env::current_exe().unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut last_done = 0;
    for round in 0..6 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "sigkill_leaves_a_consistent_store",
                "--nocapture",
            ])
            .env("FABPERF_STORE_CHILD_DB", &db)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(400 + seed % 800));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let s = Store::open(&db).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(s.integrity_check().unwrap(), "ok", "round {round}");
        let mut done = 0;
        for run in s.runs().unwrap() {
            let ms = s.measurements(run.id, None).unwrap();
            done += s
                .cells(run.id)
                .unwrap()
                .iter()
                .filter(|c| c.state == CellState::Done)
                .count();
            for c in s.cells(run.id).unwrap() {
                let n = ms.iter().filter(|(id, _)| *id == c.spec.cell_id).count();
                match c.state {
                    CellState::Done => assert_eq!(n, 3, "round {round}: {c:?}"),
                    _ => assert_eq!(n, 0, "round {round}: {c:?}"),
                }
            }
        }
        // Each round resumes where the last one was killed.
        assert!(done >= last_done, "round {round}: {done} < {last_done}");
        last_done = done;
    }
    assert!(last_done > 0, "the writer never finished a cell");
}

fn child_writer(db: &Path) {
    let mut s = Store::open(db).unwrap();
    let run = match s.latest_run().unwrap() {
        Some(r) => r,
        None => new_run(&mut s, "h"),
    };
    // Cells come in small chunks, each finished one transaction at a time,
    // without end: the parent's kill always lands mid-way.
    let mut next = s.cells(run.id).unwrap().len() as i64;
    loop {
        let chunk: Vec<CellSpec> = (next..next + 50)
            .map(|i| spec(&format!("k{i}"), i))
            .collect();
        next += 50;
        s.add_cells(run.id, &chunk).unwrap();
        let pending: Vec<String> = s
            .cells(run.id)
            .unwrap()
            .into_iter()
            .filter(|c| c.state == CellState::Pending)
            .map(|c| c.spec.cell_id)
            .collect();
        for id in pending {
            let ms: Vec<Measurement> = (0..3)
                .map(|i| Measurement {
                    role: Role::Flow,
                    src: Some(format!("n{i}")),
                    dst: Some("r".into()),
                    record: record(i as f64 + 1.0),
                })
                .collect();
            s.finish_cell_done(run.id, &id, &attempt(), &ms).unwrap();
        }
    }
}

#[test]
fn raw_measurements_keep_unknown_keys() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h1");
    s.sync_cells(run.id, &[spec("c0", 0), spec("c1", 1)], false)
        .unwrap();
    s.finish_cell_done(
        run.id,
        "c0",
        &attempt(),
        &[Measurement {
            role: Role::Total,
            src: Some("a".into()),
            dst: Some("b".into()),
            record: record(10.0),
        }],
    )
    .unwrap();
    drop(s);
    // A newer writer's record: a key this version does not model.
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.host_cpu_local', json('{\"user_pct\": 5}')), lat_hist = 'HIST'",
        [],
    )
    .unwrap();
    drop(c);
    let s = Store::open_read_only(&db).unwrap();
    let raw = s.measurements_raw(run.id).unwrap();
    assert_eq!(raw.len(), 1);
    assert_eq!(raw[0].cell_id, "c0");
    assert_eq!(raw[0].role, Role::Total);
    assert_eq!(raw[0].src.as_deref(), Some("a"));
    assert_eq!(raw[0].record["host_cpu_local"]["user_pct"], 5);
    assert_eq!(raw[0].record["test"], "tcp-bw");
    assert_eq!(raw[0].lat_hist.as_deref(), Some("HIST"));
    assert!(s.measurements_raw(run.id + 1).unwrap().is_empty());
}

/// An edited plan gives its edited cells new ids: the run's current cells
/// are the new plan's and the re-tests derived from them; the old cells and
/// their re-tests are stale.
#[test]
fn plan_cells_split_current_from_stale() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h1");
    let mesh = |id: &str, seq: i64, duration: f64| {
        let mut c = spec(id, seq);
        c.pattern = "mesh".into();
        c.params = json!({"size": 131072, "duration_s": duration});
        c
    };
    let retest_of = |c: &CellSpec, id: &str| {
        let mut r = c.clone();
        r.cell_id = id.into();
        r.pattern = RETEST.into();
        r.seq = 1_000_000_000;
        r
    };
    let mut old1 = mesh("old1", 1, 1.0);
    old1.flows = vec![("b".into(), "a".into())];
    let v1 = vec![mesh("old0", 0, 1.0), old1.clone()];
    s.sync_cells(run.id, &v1, false).unwrap();
    s.add_cells(run.id, &[retest_of(&v1[0], "old-rt")]).unwrap();
    // The plan is edited: another duration, new ids; one cell is unchanged.
    let v2 = vec![old1, mesh("new0", 1, 2.0)];
    let rep = s.sync_cells(run.id, &v2, false).unwrap();
    assert_eq!(rep.not_in_plan, 1);
    s.add_cells(run.id, &[retest_of(&v2[1], "new-rt")]).unwrap();
    let pc = s.plan_cells(run.id).unwrap();
    let ids = |v: &[CellRow]| {
        let mut v: Vec<String> = v.iter().map(|c| c.spec.cell_id.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&pc.current), ["new-rt", "new0", "old1"]);
    assert_eq!(ids(&pc.stale), ["old-rt", "old0"]);
    assert!(pc.current_ids().contains("new0"));
    // All cells are still there for those who ask for them.
    assert_eq!(s.cells(run.id).unwrap().len(), 5);
}

#[test]
fn failed_derived_cells_can_be_retried() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h1");
    let mut rt = spec("rt", 0);
    rt.pattern = RETEST.into();
    s.add_cells(run.id, &[rt.clone(), spec("ok", 1)]).unwrap();
    s.finish_cell_failed(run.id, "rt", &attempt(), "refused")
        .unwrap();
    s.finish_cell_done(run.id, "ok", &attempt(), &[]).unwrap();
    assert_eq!(
        s.retry_failed_cells(run.id, &["rt", "ok", "none"]).unwrap(),
        1
    );
    let st: Vec<(String, CellState)> = s
        .cells(run.id)
        .unwrap()
        .into_iter()
        .map(|c| (c.spec.cell_id, c.state))
        .collect();
    assert!(st.contains(&("rt".into(), CellState::Pending)), "{st:?}");
    assert!(st.contains(&("ok".into(), CellState::Done)), "{st:?}");
}

/// One runner per store: a second is refused with the holder named; the
/// lease ends with its holder, also when the holder is SIGKILLed.
#[test]
fn the_lease_is_exclusive_and_dies_with_its_holder() {
    if let Ok(db) = std::env::var("FABPERF_LEASE_CHILD_DB") {
        let _l = Lease::acquire(
            Path::new(&db),
            &LeaseHolder::this_process("the child"),
            std::time::Duration::ZERO,
        )
        .unwrap();
        println!("held");
        std::thread::sleep(std::time::Duration::from_secs(60));
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let me = LeaseHolder::this_process("fabperf run plan.toml (run 1)");
    let held = Lease::acquire(&db, &me, std::time::Duration::ZERO).unwrap();
    assert_eq!(Lease::holder(&db).as_ref(), Some(&me));
    // Another open file description of the same file is another holder,
    // even in this process.
    let e = Lease::acquire(
        &db,
        &LeaseHolder::this_process("second"),
        std::time::Duration::from_millis(300),
    )
    .unwrap_err();
    let msg = e.to_string();
    for want in [
        "in use by fabperf run plan.toml (run 1)",
        &format!("pid {}", std::process::id()),
        &format!("on host {}", me.host),
        &format!("since {}", me.started_at),
        "waited 0.3 s",
        "another --db",
    ] {
        assert!(msg.contains(want), "{want:?} missing: {msg}");
    }
    drop(held);
    let again = Lease::acquire(&db, &me, std::time::Duration::ZERO).unwrap();
    drop(again);

    // A holder killed with SIGKILL frees the lease.
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_lease_is_exclusive_and_dies_with_its_holder",
            "--nocapture",
        ])
        .env("FABPERF_LEASE_CHILD_DB", &db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("held") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "the child ended without taking the lease"
        );
    }
    let e = Lease::acquire(&db, &me, std::time::Duration::ZERO).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("the child, pid {}", child.id())),
        "{e}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    Lease::acquire(&db, &me, std::time::Duration::from_secs(5)).unwrap();
}

/// The lease file is anyone's to write: garbage, control characters and a
/// huge file give a plain message, never a panic or raw escapes.
#[test]
fn hostile_lease_files() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let lf = Lease::path_for(&db);
    assert_eq!(lf, d.path().join("r.db.lease"));
    let evil = serde_json::to_string(&LeaseHolder {
        pid: 7,
        host: "h\u{1b}[31m\nx".into(),
        started_at: "t".into(),
        what: "w\u{7}".repeat(1000),
    })
    .unwrap();
    for content in [
        evil.into_bytes(),
        b"\x00\xff garbage".to_vec(),
        vec![b'{'; 1 << 20],
        Vec::new(),
    ] {
        std::fs::write(&lf, &content).unwrap();
        // Unlocked: whatever is in the file, the lease is taken and the
        // file rewritten.
        let me = LeaseHolder::this_process("me");
        let l = Lease::acquire(&db, &me, std::time::Duration::ZERO).unwrap();
        assert_eq!(Lease::holder(&db), Some(me.clone()));
        drop(l);
        // Locked by someone who wrote that content.
        std::fs::write(&lf, &content).unwrap();
        let f = std::fs::File::open(&lf).unwrap();
        f.lock().unwrap();
        let e = Lease::acquire(&db, &me, std::time::Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
        assert!(e.len() < 2000, "{} bytes", e.len());
        drop(f);
    }
    // A lease path that is a directory is refused with what to do.
    std::fs::remove_file(&lf).unwrap();
    std::fs::create_dir(&lf).unwrap();
    let e = Lease::acquire(
        &db,
        &LeaseHolder::this_process("me"),
        std::time::Duration::ZERO,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not a regular file; remove it"), "{e}");
}

/// Many cells in one transaction, read back one at a time: every cell's
/// measurements together and in the order stored, the figures from their
/// columns, one cell by id, and a cell that is not in the run refused with
/// nothing of the batch stored.
#[test]
fn cells_stored_in_bulk_and_read_one_at_a_time() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h1");
    let cells: Vec<CellSpec> = (0..50).map(|i| spec(&format!("c{i:02}"), 49 - i)).collect();
    s.sync_cells(run.id, &cells, false).unwrap();
    let ms: Vec<Vec<Measurement>> = (0..50)
        .map(|i| {
            (0..2)
                .map(|k| Measurement {
                    role: if k == 0 { Role::Total } else { Role::Stream },
                    src: Some("a".into()),
                    dst: Some("b".into()),
                    record: record(i as f64 + k as f64 / 10.0),
                })
                .collect()
        })
        .collect();
    let at = attempt();
    let batch: Vec<(&str, &Attempt, &[Measurement])> = cells
        .iter()
        .zip(&ms)
        .map(|(c, m)| (c.cell_id.as_str(), &at, m.as_slice()))
        .collect();
    // One unknown cell: the whole batch is refused.
    let mut bad = batch.clone();
    bad.push(("nope", &at, &[]));
    assert!(s.finish_cells_done(run.id, &bad).is_err());
    assert_eq!(
        s.count(
            "SELECT count(*) FROM measurements WHERE run_id = ?1",
            run.id
        )
        .unwrap(),
        0
    );
    s.finish_cells_done(run.id, &batch).unwrap();
    let mut seen: Vec<(String, Role, Option<f64>)> = Vec::new();
    s.each_measurement(run.id, Some("bw"), &mut |m| {
        assert!(m.record.starts_with('{'));
        seen.push((m.cell_id, m.role, m.bw_gbps));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen.len(), 100);
    assert_eq!(seen[0], ("c00".to_string(), Role::Total, Some(0.0)));
    assert_eq!(seen[1].1, Role::Stream);
    assert_eq!(seen[99].0, "c49");
    assert!((seen[99].2.unwrap() - 49.1).abs() < 1e-9);
    // Another run stored after, then a cell of the first stored again: the
    // first run's rows come in the order stored, that cell's last and
    // together, none of the other run's.
    let run2 = new_run(&mut s, "h2");
    assert_ne!(run2.id, run.id);
    s.sync_cells(run2.id, &cells[..3], false).unwrap();
    s.finish_cells_done(run2.id, &batch[..3]).unwrap();
    s.finish_cell_done(run.id, "c07", &at, &ms[7]).unwrap();
    let mut again: Vec<(String, Role)> = Vec::new();
    s.each_measurement(run.id, None, &mut |m| {
        again.push((m.cell_id, m.role));
        Ok(())
    })
    .unwrap();
    assert_eq!(again.len(), 100);
    assert_eq!(again[98], ("c07".to_string(), Role::Total));
    assert_eq!(again[99], ("c07".to_string(), Role::Stream));
    assert_eq!(again.iter().filter(|c| c.0 == "c07").count(), 2);
    let mut other = 0;
    s.each_measurement(run2.id, Some("bw"), &mut |_| {
        other += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(other, 6);
    let mut none = 0;
    s.each_measurement(run.id, Some("other"), &mut |_| {
        none += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(none, 0, "another test's measurements only");
    let c = s.cell(run.id, "c07").unwrap().unwrap();
    assert_eq!((c.spec.seq, c.state), (42, CellState::Done));
    assert!(s.cell(run.id, "c99").unwrap().is_none());
    // In plan order, one at a time, with the current-plan flag.
    let mut order = Vec::new();
    s.each_plan_cell(run.id, Some("bw"), &mut |c, current| {
        assert!(current);
        order.push(c.spec.cell_id);
        Ok(())
    })
    .unwrap();
    assert_eq!(order.first().map(String::as_str), Some("c49"));
    assert_eq!(order.len(), 50);
}

/// The one-pass reader of a run's cells with their measurements gives what
/// the cell reader and the per-cell measurement reader give, on a run with
/// what a store can hold: cells without records, several records per cell,
/// cells sharing a `seq`, parameters that alternate between cells, stale
/// cells (handed out last, without records), re-tests, and hostile rows (a
/// cell that does not decode, with records; an unknown role; a record that
/// is not JSON), which are skipped and counted.
#[test]
fn plan_cells_come_with_their_measurements_in_one_pass() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let mut s = Store::open(&db).unwrap();
    let run = new_run(&mut s, "h1");
    let mut cells: Vec<CellSpec> = (0..40)
        .map(|i| {
            let mut c = spec(&format!("c{i:02}"), (i / 3) as i64);
            c.pattern = "mesh".into();
            c.flows = vec![(format!("n{}", i % 7), format!("n{}", (i + 1) % 7))];
            let size = [64, 4096, 64, 131072][i % 4];
            c.params = json!({"size": size, "duration_s": 1.0});
            c.dims = json!({"size": size});
            c
        })
        .collect();
    // A cell of an earlier version of the plan: stale after the sync below.
    let mut gone = spec("gone", 3);
    gone.pattern = "mesh".into();
    s.sync_cells(run.id, &[gone.clone()], false).unwrap();
    s.finish_cell_done(
        run.id,
        "gone",
        &attempt(),
        &[Measurement {
            role: Role::Total,
            src: Some("a".into()),
            dst: Some("b".into()),
            record: record(1.0),
        }],
    )
    .unwrap();
    s.sync_cells(run.id, &cells, false).unwrap();
    let retest = |c: &CellSpec, id: &str| {
        let mut r = c.clone();
        r.cell_id = id.into();
        r.pattern = RETEST.into();
        r.seq = 1_000;
        r
    };
    let mut foreign = retest(&cells[5], "rt-other");
    foreign.flows = vec![("x".into(), "y".into())];
    s.add_cells(run.id, &[retest(&cells[4], "rt-4"), foreign])
        .unwrap();
    cells.push(retest(&cells[4], "rt-4"));
    let at = attempt();
    for (i, c) in cells.iter().enumerate() {
        // Every fifth cell has no records; the others one to three.
        if i % 5 == 2 {
            continue;
        }
        let ms: Vec<Measurement> = (0..1 + i % 3)
            .map(|k| Measurement {
                role: if k == 0 { Role::Total } else { Role::Stream },
                src: Some(format!("s{i}")),
                dst: None,
                record: record(i as f64 + k as f64),
            })
            .collect();
        s.finish_cell_done(run.id, &c.cell_id, &at, &ms).unwrap();
    }
    drop(s);
    let c = rusqlite::Connection::open(&db).unwrap();
    for sql in [
        // A file edited by hand, or written by another program.
        "PRAGMA ignore_check_constraints = ON",
        "UPDATE cells SET params = '{not json' WHERE cell_id = 'c07'",
        "UPDATE measurements SET role = 'sideways' WHERE id = (SELECT min(id) FROM measurements WHERE cell_id = 'c10')",
        "UPDATE measurements SET record = '[1, 2' WHERE id = (SELECT max(id) FROM measurements WHERE cell_id = 'c11')",
    ] {
        c.execute(sql, []).unwrap();
    }
    drop(c);

    type Seen = Vec<(String, bool, Vec<(Role, Option<String>, f64)>)>;
    let figure = |r: &serde_json::Value| r["bw_gbps"].as_f64().unwrap();
    let s = Store::open_read_only(&db).unwrap();
    // The reference: the cells in plan order, each cell's records by its own query.
    let mut want: Seen = Vec::new();
    s.each_plan_cell(run.id, None, &mut |c, current| {
        want.push((c.spec.cell_id, current, Vec::new()));
        Ok(())
    })
    .unwrap();
    let raw = s.measurements_raw(run.id).unwrap();
    for (id, current, ms) in &mut want {
        if *current {
            *ms = raw
                .iter()
                .filter(|m| &m.cell_id == id)
                .map(|m| (m.role, m.src.clone(), figure(&m.record)))
                .collect();
        }
    }
    // A store of its own, which has skipped nothing yet.
    let one = Store::open_read_only(&db).unwrap();
    let mut got: Seen = Vec::new();
    one.each_plan_cell_measured::<serde_json::Value>(run.id, &mut |c, current, ms| {
        // Each cell is decoded as the cell reader decodes it.
        let again = s.cell(run.id, &c.spec.cell_id).unwrap().unwrap();
        assert_eq!(again, c);
        got.push((
            c.spec.cell_id,
            current,
            ms.iter()
                .map(|m| (m.role, m.src.clone(), figure(&m.record)))
                .collect(),
        ));
        Ok(())
    })
    .unwrap();
    assert_eq!(got, want);
    // What the reference shows: c07 left out, the stale cell last and
    // without records, the other plan's re-test not current, c02 without
    // records, c10 and c11 each one record short.
    let ids: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
    assert!(!ids.contains(&"c07"));
    assert_eq!(
        got.last().map(|g| (g.0.as_str(), g.1, g.2.len())),
        Some(("gone", false, 0))
    );
    let of = |id: &str| got.iter().find(|g| g.0 == id).unwrap();
    assert!(of("rt-4").1 && !of("rt-other").1);
    assert!(of("c02").2.is_empty());
    assert_eq!((of("c10").2.len(), of("c11").2.len()), (1, 2));
    assert_eq!(of("c08").2.len(), 3);
    // Skipped and counted: the cell that does not decode, the unknown role
    // and the record that is not JSON.
    let skipped = one.skipped();
    assert!(
        skipped
            .iter()
            .any(|m| m.contains("c07") && m.contains("params")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|m| m.contains("c10") && m.contains("sideways")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|m| m.contains("c11") && m.contains("stored record")),
        "{skipped:?}"
    );
}
