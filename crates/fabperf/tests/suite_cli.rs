//! `fabperf suite` and `fabperf server` as a user runs them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_fabperf")
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fabperf-suite-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn jsonl_records(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "one results file in {}", dir.display());
    let text = std::fs::read_to_string(files.pop().unwrap()).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect()
}

fn check_default_set(recs: &[serde_json::Value]) {
    let totals: Vec<_> = recs.iter().filter(|r| r.get("stream").is_none()).collect();
    let tests: Vec<(&str, u64, u64)> = totals
        .iter()
        .map(|r| {
            (
                r["test"].as_str().unwrap(),
                r["streams"].as_u64().unwrap(),
                r["size"].as_u64().unwrap(),
            )
        })
        .collect();
    for want in [("tcp-bw", 1), ("tcp-bw", 2)] {
        assert!(
            tests.iter().any(|t| (t.0, t.1) == want),
            "{want:?} missing from {tests:?}"
        );
    }
    assert!(tests.contains(&("tcp-lat", 1, 64)), "{tests:?}");
    assert!(tests.contains(&("udp-bw", 1, 1472)), "{tests:?}");
    assert!(tests.iter().any(|t| t.0 == "udp-lat"), "{tests:?}");
    for r in &totals {
        for k in [
            "schema",
            "test",
            "transport",
            "size",
            "streams",
            "duration_s",
            "bytes",
            "started_at",
            "fabperf_version",
        ] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        let t = r["test"].as_str().unwrap();
        if t.ends_with("-bw") {
            assert!(r["bw_gbps"].as_f64().unwrap() > 0.0, "{r}");
        }
        if t.ends_with("-lat") {
            let l = &r["lat_us"];
            for k in [
                "min", "p50", "p90", "p99", "p999", "p9999", "max", "mean", "stdev",
            ] {
                assert!(l[k].as_f64().is_some(), "lat_us.{k} in {r}");
            }
            assert_eq!(l["kind"], "half_rtt");
        }
        if t.starts_with("udp-bw") {
            assert!(r["udp"]["sent"].as_u64().unwrap() > 0);
        }
        if t == "tcp-bw" {
            assert!(r.get("retransmits").is_some());
        }
    }
}

#[test]
fn suite_in_process_writes_results() {
    let dir = tmpdir("local");
    let out = Command::new(bin())
        .args(["suite", "--duration", "0.6", "--no-rdma", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Gbit/s") && stdout.contains("tcp-lat"),
        "{stdout}"
    );
    assert!(stderr.contains("RDMA: skipped (--no-rdma)"), "{stderr}");
    check_default_set(&jsonl_records(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn suite_says_plainly_when_no_rdma_device() {
    // This host has no RDMA stack, or FABPERF_RDMA_DEVICE names a device
    // that does not exist: either way the suite says why it skips RDMA.
    let dir = tmpdir("nordma");
    let out = Command::new(bin())
        .args(["suite", "--duration", "0.3", "--out"])
        .arg(&dir)
        .env("FABPERF_RDMA_DEVICE", "no_such_dev9")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("RDMA:"))
        .unwrap_or_else(|| panic!("no RDMA line in {stderr}"));
    if line.contains("skipped") {
        assert!(line.contains("no usable RDMA device here"), "{line}");
        assert!(out.status.success(), "{stderr}");
    } else {
        // A host with a real device: the named one does not exist, so the
        // RDMA tests fail and the suite exits non-zero.
        assert!(!out.status.success(), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `fabperf server` on a free loopback port; wait for its log line.
fn server(extra: &[&str]) -> (Server, u16) {
    for _ in 0..20 {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = Command::new(bin())
            .args(["server", "--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut rd = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            line.clear();
            if rd.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if line.contains("listening on") {
                // Keep draining the log so the agent never blocks on stderr.
                std::thread::spawn(move || {
                    let mut sink = String::new();
                    while rd.read_line(&mut sink).unwrap_or(0) > 0 {
                        sink.clear();
                    }
                });
                return (Server(child), port);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("fabperf server did not start");
}

#[test]
fn suite_against_a_remote_agent_with_token() {
    let dir = tmpdir("peer");
    let tok = dir.join("token");
    std::fs::write(&tok, "a-shared-secret\n").unwrap();
    let (_srv, port) = server(&["--token-file", tok.to_str().unwrap()]);
    let res = dir.join("res");
    // Without the token: refused, non-zero, and the reason is printed.
    let out = Command::new(bin())
        .args([
            "suite",
            "--duration",
            "0.3",
            "--no-rdma",
            "--peer",
            "127.0.0.1",
        ])
        .args(["--port", &port.to_string(), "--out"])
        .arg(&res)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--token-file"), "{stderr}");
    // With it: the whole set runs.
    let _ = std::fs::remove_dir_all(&res);
    let out = Command::new(bin())
        .args([
            "suite",
            "--duration",
            "0.6",
            "--no-rdma",
            "--peer",
            "127.0.0.1",
        ])
        .args(["--port", &port.to_string(), "--token-file"])
        .arg(&tok)
        .arg("--out")
        .arg(&res)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    check_default_set(&jsonl_records(&res));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn suite_with_no_agent_fails_clearly() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tmpdir("dead");
    let out = Command::new(bin())
        .args([
            "suite",
            "--duration",
            "0.3",
            "--no-rdma",
            "--peer",
            "127.0.0.1",
        ])
        .args(["--port", &port.to_string(), "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is `fabperf server` running there"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn server_refuses_public_bind_without_token() {
    let out = Command::new(bin())
        .args(["server", "--bind", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--token-file") && stderr.contains("--insecure"),
        "{stderr}"
    );
}

#[test]
fn bad_usage_exits_2() {
    let out = Command::new(bin())
        .args(["suite", "--duration", "abc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin())
        .args(["suite", "--duration", "-1"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
}
