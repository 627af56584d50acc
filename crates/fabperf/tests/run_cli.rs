//! `fabperf run` through the real binary against real agent processes on
//! loopback addresses: SIGKILL and SIGINT in the middle of a run, resume,
//! and every cell stored exactly once; bad plans and bad stores exit with
//! the documented codes.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

/// A port free for TCP and UDP on 127.0.0.1..=n.
fn free_port(n: u8) -> u16 {
    'next: loop {
        let t = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = t.local_addr().unwrap().port();
        drop(t);
        for i in 1..=n {
            let ip = Ipv4Addr::new(127, 0, 0, i);
            if TcpListener::bind((ip, port)).is_err() || UdpSocket::bind((ip, port)).is_err() {
                continue 'next;
            }
        }
        return port;
    }
}

struct Agents {
    children: Vec<Child>,
    port: u16,
}

impl Agents {
    fn start(n: u8) -> Agents {
        let port = free_port(n);
        let mut children = Vec::new();
        for i in 1..=n {
            let ip = format!("127.0.0.{i}");
            children.push(
                Command::new(BIN)
                    .args([
                        "server",
                        "--bind",
                        &ip,
                        "--port",
                        &port.to_string(),
                        "--quiet",
                    ])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("starting fabperf server"),
            );
            let addr = SocketAddr::from((Ipv4Addr::new(127, 0, 0, i), port));
            let deadline = Instant::now() + Duration::from_secs(20);
            while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
                assert!(Instant::now() < deadline, "agent {i} did not start");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Agents { children, port }
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn write_plan(dir: &Path, port: u16, n: u8, tests: &str) -> std::path::PathBuf {
    let mut t =
        "name = \"cli\"\ntimeout = \"5s\"\nretries = 3\nretry_delay = \"300ms\"\n".to_string();
    for i in 1..=n {
        t.push_str(&format!(
            "[[agents]]\nname = \"n{i}\"\naddr = \"127.0.0.{i}:{port}\"\n"
        ));
    }
    t.push_str(tests);
    let p = dir.join("plan.toml");
    std::fs::write(&p, t).unwrap();
    p
}

fn kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

/// (cells, done, pending, failed, measurements of role total/flow/aggregate
/// per cell) straight from SQLite.
fn census(db: &Path) -> (usize, usize, usize, usize) {
    let store = fabperf_store::Store::open_read_only(db).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let run = store.latest_run().unwrap().unwrap();
    let cells = store.cells(run.id).unwrap();
    let ms = store.measurements(run.id, None).unwrap();
    let mut done = 0;
    let mut pending = 0;
    let mut failed = 0;
    for c in &cells {
        let mine: Vec<_> = ms.iter().filter(|(id, _)| *id == c.spec.cell_id).collect();
        match c.state {
            fabperf_store::CellState::Done => {
                done += 1;
                // Exactly one result row per flow, plus the aggregate.
                let flows = c.spec.flows.len();
                let heads = mine
                    .iter()
                    .filter(|(_, m)| m.role != fabperf_store::Role::Stream)
                    .count();
                let want = if flows > 1 { flows + 1 } else { 1 };
                assert_eq!(heads, want, "cell {c:?}");
            }
            fabperf_store::CellState::Pending => {
                pending += 1;
                assert!(mine.is_empty());
            }
            fabperf_store::CellState::Failed => failed += 1,
        }
    }
    // No cell id twice.
    let mut ids: Vec<&str> = cells.iter().map(|c| c.spec.cell_id.as_str()).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n);
    (cells.len(), done, pending, failed)
}

const TESTS: &str = "[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = \"0.4s\"\nparams = { omit_s = 0.1 }\nrepeats = 2\nretest = 0\nordered = false\n\
[[tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\nduration = \"0.3s\"\nretest = 0\nordered = false\n";

#[test]
fn sigkill_then_resume_stores_every_cell_once() {
    let agents = Agents::start(3);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = write_plan(d.path(), agents.port, 3, TESTS);
    let mut child = Command::new(BIN)
        .args([
            "run",
            plan.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--plain",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let a few cells finish, then kill mid-cell.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        if db.exists() {
            if let Ok(s) = fabperf_store::Store::open_read_only(&db) {
                if let Ok(Some(r)) = s.latest_run() {
                    let done = s
                        .cells(r.id)
                        .unwrap()
                        .iter()
                        .filter(|c| c.state == fabperf_store::CellState::Done)
                        .count();
                    if done >= 2 {
                        break;
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "no cell finished");
    }
    std::thread::sleep(Duration::from_millis(250));
    child.kill().unwrap();
    child.wait().unwrap();
    let (cells, done, pending, failed) = census(&db);
    assert_eq!(cells, 9);
    assert!(
        done >= 2 && pending >= 1,
        "killed mid-run: {done} done, {pending} pending"
    );
    assert_eq!(failed, 0);
    // The agents may still finish the killed cell's test; the resume
    // retries them as busy until they are free.
    let out = Command::new(BIN)
        .args([
            "run",
            plan.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--plain",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("resuming run 1"), "{err}");
    assert_eq!(census(&db), (9, 9, 0, 0));
}

#[test]
fn sigint_stops_cleanly_with_130_and_keeps_what_finished() {
    let agents = Agents::start(2);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = write_plan(
        d.path(),
        agents.port,
        2,
        "[[tests]]\nkind = \"tcp-lat\"\nduration = \"1s\"\nrepeats = 20\nordered = false\n",
    );
    let child = Command::new(BIN)
        .args([
            "run",
            plan.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--plain",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let t0 = Instant::now();
    kill(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "SIGINT took {:?}",
        t0.elapsed()
    );
    assert!(
        err.contains("interrupted") && err.contains("resumes"),
        "{err}"
    );
    let (cells, done, pending, failed) = census(&db);
    assert_eq!(cells, 20);
    assert!(
        done >= 1 && pending >= 1 && failed == 0,
        "{done} done {pending} pending"
    );
}

#[test]
fn bad_plans_and_stores_exit_with_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let plan = d.path().join("bad.toml");
    std::fs::write(&plan, "name = \"x\"\n[[tests]]\nkind = \"nope\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["run", plan.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml:3:8: unknown test kind"), "{err}");

    let missing = d.path().join("missing.toml");
    let out = Command::new(BIN)
        .args(["run", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read plan"));

    // A store that is not one.
    let junk = d.path().join("junk.db");
    std::fs::write(&junk, b"not sqlite at all, just text\n".repeat(200)).unwrap();
    for args in [
        vec!["export", "--db", junk.to_str().unwrap()],
        vec!["runs", "--db", junk.to_str().unwrap()],
        vec!["mesh-summary", "--db", junk.to_str().unwrap()],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("not a fabperf results store"),
            "{args:?}: {err}"
        );
    }
    let out = Command::new(BIN)
        .args(["mesh-summary", "--db", "/nonexistent/x.db"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("fabperf run"));
    let out = Command::new(BIN)
        .args(["mesh-summary", "--db", "x.db", "--bw-threshold", "1.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Two `fabperf run` on one store: the second is refused, naming the first
/// (pid, host, start); the first killed with SIGKILL frees the store, and
/// the next run resumes.
#[test]
fn a_second_runner_on_the_same_store_is_refused() {
    let agents = Agents::start(2);
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("r.db");
    let plan = write_plan(
        d.path(),
        agents.port,
        2,
        // No re-tests: a pair the loaded machine slows would add cells.
        "[[tests]]\nkind = \"tcp-lat\"\nduration = \"0.5s\"\nrepeats = 8\nretest = 0\n",
    );
    let run = |extra: &[&str]| {
        let mut c = Command::new(BIN);
        c.args([
            "run",
            plan.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--plain",
        ])
        .args(extra);
        c
    };
    let first = run(&[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until it measures.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the first run never finished a cell"
        );
        std::thread::sleep(Duration::from_millis(100));
        // The store may be still being created: only a readable one counts.
        let done = fabperf_store::Store::open_read_only(&db)
            .and_then(|s| {
                let run = s.latest_run()?.map(|r| r.id).unwrap_or(0);
                s.count(
                    "SELECT count(*) FROM cells WHERE run_id = ?1 AND state = 'done'",
                    run,
                )
            })
            .unwrap_or(0);
        if done >= 1 {
            break;
        }
    }
    let t0 = Instant::now();
    let out = run(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(3), "refused at once");
    for want in [
        "is in use by fabperf run".to_string(),
        format!("pid {} on host", first.id()),
        "since 20".to_string(),
        "another --db file".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} missing: {err}");
    }
    // --wait: refused after waiting, and says so.
    let out = run(&["--wait", "0.5s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("waited 0.5 s"), "{err}");
    let mut first = first;
    kill(first.id(), "KILL");
    let _ = first.wait();
    let out = run(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("resuming run 1"), "{err}");
    assert_eq!(census(&db), (16, 16, 0, 0), "8 repeats, both directions");
}
