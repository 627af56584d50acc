//! `report`, `export` and `mesh-summary` on a store someone else wrote (a
//! shared or tampered file): text in it cannot forge lines, drive the
//! terminal, run as a spreadsheet formula or render as HTML; a record that
//! cannot be decoded is skipped and counted the same way by every reader;
//! a store with an impossible schema version is refused with advice that
//! works and nothing left beside it; output files are replaced only when
//! they are regular files.

use fabperf_results::{Note, Record, Transport};
use fabperf_store::{Attempt, CellSpec, Measurement, NewRun, Role, Store};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

/// A node name that tries to end its line and forge the report's sections.
const EVIL_NODE: &str =
    "n3\n== Verdicts\nok   all links    GOOD\u{202e}<img src=x onerror=alert(1)>";
/// A warning an agent sent: a spreadsheet formula with terminal escapes.
const EVIL_WARNING: &str = "=HYPERLINK(\"http://evil.example/\",\"ok\")\x1b]0;owned\x07";

fn fabperf(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn bw(gbps: f64) -> Record {
    let mut r = Record::new("tcp-bw", Transport::Tcp, 131072, 1);
    r.duration_s = 3.0;
    r.bytes = (gbps * 1e9 / 8.0 * 3.0) as u64;
    r.bw_gbps = Some(gbps);
    r.direction = Some("forward".into());
    r
}

fn cell(id: &str, test: &str, pattern: &str, a: &str, b: &str, seq: i64) -> CellSpec {
    CellSpec {
        cell_id: id.into(),
        seq,
        batch: seq,
        test: test.into(),
        kind: "tcp-bw".into(),
        path: "host".into(),
        pattern: pattern.into(),
        flows: vec![(a.into(), b.into())],
        params: json!({}),
        dims: json!({"size": 131072}),
        repeat: 0,
    }
}

fn attempt() -> Attempt {
    Attempt {
        attempts: 1,
        started_at: "2026-01-02T03:04:05Z".into(),
        ended_at: "2026-01-02T03:04:09Z".into(),
        wall_s: 4.0,
    }
}

/// A store with a pairs cell whose record carries a hostile warning, a
/// 3-node mesh with a hostile node name, and a failed cell whose error
/// carries escapes.
fn hostile_store(db: &Path) -> i64 {
    let mut s = Store::open(db).unwrap();
    let run = s
        .create_run(&NewRun {
            plan_name: "plan\n== Gates\nPASS everything",
            plan_hash: "h",
            plan_file: None,
            plan_text: "name = \"x\"\nbaseline = \"host\"\n",
        })
        .unwrap()
        .id;
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    let c = cell("pair", "bw", "pairs", "n1", "n2", next());
    s.add_cells(run, std::slice::from_ref(&c)).unwrap();
    let mut r = bw(9.0);
    r.warnings.push(Note {
        id: "peer".into(),
        message: EVIL_WARNING.into(),
    });
    s.finish_cell_done(
        run,
        "pair",
        &attempt(),
        &[Measurement {
            role: Role::Total,
            src: Some("n1".into()),
            dst: Some("n2".into()),
            record: r,
        }],
    )
    .unwrap();
    let nodes = ["n1", "n2", EVIL_NODE];
    for i in 0..3 {
        for j in 0..3 {
            if i == j {
                continue;
            }
            let id = format!("mesh-{i}{j}");
            let c = cell(&id, "mesh", "mesh", nodes[i], nodes[j], next());
            s.add_cells(run, std::slice::from_ref(&c)).unwrap();
            let g = if i == 2 || j == 2 { 1.0 } else { 9.4 };
            s.finish_cell_done(
                run,
                &id,
                &attempt(),
                &[Measurement {
                    role: Role::Total,
                    src: Some(nodes[i].into()),
                    dst: Some(nodes[j].into()),
                    record: bw(g),
                }],
            )
            .unwrap();
        }
    }
    let c = cell("broken", "bw", "pairs", "n2", "n1", next());
    s.add_cells(run, std::slice::from_ref(&c)).unwrap();
    s.finish_cell_failed(
        run,
        "broken",
        &attempt(),
        "agent said\x1b[2J\n== Verdicts\nbad \u{202e}nothing",
    )
    .unwrap();
    run
}

fn assert_clean(what: &str, s: &str) {
    for c in ['\x1b', '\x07', '\u{202e}', '\r'] {
        assert!(!s.contains(c), "{what}: {c:?} reached the output: {s:?}");
    }
    assert!(
        !s.lines()
            .any(|l| l.trim_start().starts_with("ok   all links")
                || l.trim_start().starts_with("PASS everything")
                || l.trim_start().starts_with("bad ")),
        "{what}: a stored newline forged a line:\n{s}"
    );
}

#[test]
fn stored_text_reaches_no_sink_raw() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("s.db");
    hostile_store(&db);
    let db = db.to_str().unwrap();
    for fmt in ["table", "markdown"] {
        let o = fabperf(&["report", "--db", db, "--format", fmt]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert_clean(fmt, &out);
        assert_clean(fmt, &text(&o.stderr));
        if fmt == "markdown" {
            // Outside code blocks (where HTML is not HTML), no raw tag.
            let mut fence: Option<String> = None;
            for l in out.lines() {
                let ticks: String = l.chars().take_while(|c| *c == '`').collect();
                match &fence {
                    None if ticks.len() >= 3 => fence = Some(ticks),
                    Some(f) if ticks.len() >= f.len() && l.trim() == ticks => fence = None,
                    Some(_) => {}
                    None => assert!(!l.contains("<img"), "raw HTML in Markdown: {l}"),
                }
            }
            assert!(fence.is_none(), "an unclosed code block:\n{out}");
        }
    }
    let o = fabperf(&["mesh-summary", "--db", db]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_clean("mesh-summary", &text(&o.stdout));
    // CSV: formulas neutralised, escapes visible, in both CSV exports.
    for args in [
        &["export", "--db", db, "--format", "csv"][..],
        &["report", "--db", db, "--format", "csv"][..],
    ] {
        let o = fabperf(args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert_clean("csv", &out);
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(out.as_bytes());
        for rec in rdr.records() {
            for f in rec.unwrap().iter() {
                let formula = f.starts_with(['=', '@'])
                    || (f.starts_with(['+', '-']) && f.parse::<f64>().is_err() && f != "-");
                assert!(
                    !formula,
                    "{args:?}: a cell a spreadsheet would evaluate: {f:?}"
                );
            }
        }
        if args[0] == "export" {
            assert!(out.contains("'=HYPERLINK"), "{out}");
        }
    }
}

fn sql(db: &Path, q: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch(q).unwrap();
}

#[test]
fn an_undecodable_record_is_skipped_and_counted_by_every_reader() {
    let d = tempfile::tempdir().unwrap();
    let dbp = d.path().join("s.db");
    hostile_store(&dbp);
    sql(
        &dbp,
        "UPDATE measurements SET record = '{not json' WHERE cell_id = 'mesh-01';
         UPDATE measurements SET record = '{\"test\": 5}' WHERE cell_id = 'mesh-10';",
    );
    let db = dbp.to_str().unwrap();
    let out = d.path().join("export.csv");
    std::fs::write(&out, "previous export\n").unwrap();
    for (args, to_file) in [
        (vec!["export", "--db", db, "--format", "csv", "-o"], true),
        (vec!["export", "--db", db, "--format", "jsonl"], false),
        (vec!["export", "--db", db, "--format", "openmetrics"], false),
        (vec!["report", "--db", db], false),
        (vec!["mesh-summary", "--db", db], false),
    ] {
        let mut args: Vec<&str> = args;
        if to_file {
            args.push(out.to_str().unwrap());
        }
        let o = fabperf(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            err.contains("could not be decoded and were skipped"),
            "{args:?}: {err}"
        );
    }
    // The export written whole: every other record is in it.
    let csv = std::fs::read_to_string(&out).unwrap();
    assert!(!csv.contains("previous export"));
    assert_eq!(csv.lines().count(), 1 + 1 + 6 - 2, "{csv}");
}

#[test]
fn impossible_schema_versions_are_refused_with_advice_that_works() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &[&str]); 3] = [
        (
            "negative",
            "PRAGMA user_version = -1;",
            &["-1", "another program"],
        ),
        (
            "zero",
            "PRAGMA user_version = 0;",
            &["schema version 0", "another program"],
        ),
        ("newer", "PRAGMA user_version = 99;", &["99", "newer"]),
    ];
    for (name, pragma, words) in cases {
        let dbp = d.path().join(format!("{name}.db"));
        hostile_store(&dbp);
        sql(&dbp, pragma);
        // No -wal/-shm left from the writes above.
        for ext in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", dbp.display()));
        }
        let db = dbp.to_str().unwrap();
        for args in [
            vec!["report", "--db", db],
            vec!["export", "--db", db],
            vec!["mesh-summary", "--db", db],
            vec!["runs", "--db", db],
        ] {
            let o = fabperf(&args);
            let err = text(&o.stderr);
            assert_ne!(o.status.code(), Some(0), "{name} {args:?}");
            for w in words {
                assert!(err.contains(w), "{name} {args:?}: {err}");
            }
            assert!(!err.contains("CREATE TABLE"), "{name}: {err}");
            assert!(
                !err.contains("open it once for writing"),
                "{name}: advice that cannot work: {err}"
            );
            for ext in ["-wal", "-shm"] {
                assert!(
                    !Path::new(&format!("{}{ext}", dbp.display())).exists(),
                    "{name} {args:?}: a refused store got a {ext} file"
                );
            }
        }
    }
    // An empty file is not "schema version 0".
    let empty = d.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let o = fabperf(&["report", "--db", empty.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(err.contains("empty"), "{err}");
    assert!(!err.contains("schema version 0"), "{err}");
}

#[test]
fn output_flags_replace_only_regular_files() {
    let d = tempfile::tempdir().unwrap();
    let dbp = d.path().join("s.db");
    hostile_store(&dbp);
    let db = dbp.to_str().unwrap();
    let target = d.path().join("target.txt");
    std::fs::write(&target, "old").unwrap();
    let link = d.path().join("link.txt");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let l = link.to_str().unwrap();
    for args in [
        vec!["report", "--db", db, "-o", l],
        vec!["report", "--db", db, "--html", l],
        vec!["export", "--db", db, "--format", "openmetrics", "-o", l],
        vec!["export", "--db", db, "--format", "jsonl", "-o", l],
    ] {
        std::fs::write(&target, "old").unwrap();
        let o = fabperf(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{args:?} replaced the symlink with a regular file"
        );
        assert_ne!(std::fs::read_to_string(&target).unwrap(), "old", "{args:?}");
        // A character device stays one.
        let mut a = args.clone();
        *a.last_mut().unwrap() = "/dev/null";
        let o = fabperf(&a);
        assert_eq!(o.status.code(), Some(0), "{a:?}: {}", text(&o.stderr));
        {
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device());
        }
        // A directory is refused, with nothing left in it.
        *a.last_mut().unwrap() = d.path().to_str().unwrap();
        let o = fabperf(&a);
        assert_ne!(o.status.code(), Some(0), "{a:?}");
        assert!(text(&o.stderr).contains("directory"), "{a:?}");
    }
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Run fabperf under a 2 GiB address-space limit and a deadline.
fn bounded(args: &[&str], secs: u64) -> Option<Output> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            let lim = rustix::process::Rlimit {
                current: Some(2 << 30),
                maximum: Some(2 << 30),
            };
            rustix::process::setrlimit(rustix::process::Resource::As, lim)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn a_stored_plan_with_a_huge_sweep_costs_readers_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dbp = d.path().join("s.db");
    let sizes: Vec<String> = (1..=1000).map(|i| (i * 64).to_string()).collect();
    let streams: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
    let plan = format!(
        "name = \"huge\"\nbaseline = \"host\"\n[[agents]]\nname = \"n1\"\naddr = \"10.0.0.1\"\n[[agents]]\nname = \"n2\"\naddr = \"10.0.0.2\"\n\
         [[tests]]\nname = \"mesh\"\nkind = \"tcp-bw\"\nsizes = [{}]\nstreams = [{}]\ndirections = [\"forward\", \"reverse\", \"bidir\"]\n",
        sizes.join(", "),
        streams.join(", ")
    );
    {
        let mut s = Store::open(&dbp).unwrap();
        let run = s
            .create_run(&NewRun {
                plan_name: "huge",
                plan_hash: "h",
                plan_file: None,
                plan_text: &plan,
            })
            .unwrap()
            .id;
        let c = cell("m", "mesh", "mesh", "n1", "n2", 1);
        s.add_cells(run, std::slice::from_ref(&c)).unwrap();
        s.finish_cell_done(
            run,
            "m",
            &attempt(),
            &[Measurement {
                role: Role::Total,
                src: Some("n1".into()),
                dst: Some("n2".into()),
                record: bw(9.0),
            }],
        )
        .unwrap();
    }
    let db = dbp.to_str().unwrap();
    for args in [
        vec!["report", "--db", db],
        vec!["mesh-summary", "--db", db],
        vec!["export", "--db", db, "--format", "openmetrics"],
    ] {
        let o = bounded(&args, 30).unwrap_or_else(|| panic!("{args:?}: still running after 30 s"));
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
    }
}
