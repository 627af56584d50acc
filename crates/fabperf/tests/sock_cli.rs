//! The socket test commands through the real binary: JSON keys of the
//! schema, and peers that die or stall mid-test (separate processes,
//! SIGKILL / SIGSTOP). Timing assertions are generous upper bounds only.

use serde_json::Value;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

/// A port number free for both TCP and UDP on 127.0.0.1.
fn free_port() -> u16 {
    loop {
        let t = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = t.local_addr().unwrap().port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(agent_timeout: u32) -> Server {
        let port = free_port();
        let child = Command::new(BIN)
            .args(["server", "--bind", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--timeout", &agent_timeout.to_string(), "--quiet"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting fabperf server");
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "the agent did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

fn client(port: u16, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg(args[0])
        .arg("127.0.0.1")
        .arg("--port")
        .arg(port.to_string())
        .args(&args[1..]);
    c
}

fn run(port: u16, args: &[&str]) -> Output {
    client(port, args).output().expect("running fabperf")
}

/// Run a client to completion, retrying while the agent still reports
/// itself busy with an abandoned test.
fn run_when_free(port: u16, args: &[&str], within: Duration) -> Output {
    let deadline = Instant::now() + within;
    loop {
        let out = run(port, args);
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("busy") || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "fabperf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("each line is one JSON object");
            // Every line is a record that obeys the record rules.
            let r: fabperf_results::Record =
                serde_json::from_value(v.clone()).expect("each line is a fabperf record");
            let bad = r.check();
            assert!(bad.is_empty(), "{bad:?} in {l}");
            v
        })
        .collect()
}

fn has(v: &Value, keys: &[&str]) {
    let o = v.as_object().expect("a JSON object");
    for k in keys {
        assert!(o.contains_key(*k), "key {k} missing in {v}");
        assert!(!o[*k].is_null(), "key {k} is null in {v}");
    }
}

fn lacks(v: &Value, keys: &[&str]) {
    let o = v.as_object().unwrap();
    for k in keys {
        assert!(!o.contains_key(*k), "key {k} must be absent in {v}");
    }
}

const COMMON: &[&str] = &[
    "schema",
    "test",
    "transport",
    "size",
    "streams",
    "duration_s",
    "bytes",
    "started_at",
    "fabperf_version",
    "local",
    "remote",
    "cpu_local_pct",
    "cpu_remote_pct",
];
const LAT: &[&str] = &[
    "min", "p50", "p90", "p99", "p999", "p9999", "max", "mean", "stdev", "kind",
];
const UDP: &[&str] = &["sent", "received", "lost", "duplicates", "loss_pct"];
/// udp-bw's own UDP keys, and udp-lat's.
const UDP_BW: &[&str] = &["reordered", "stale", "jitter_us"];
const UDP_LAT: &[&str] = &["late", "ipdv_us"];

#[test]
fn json_schema_keys_of_every_socket_test() {
    let s = Server::start(10);
    let p = s.port;

    let v = json_lines(&run(
        p,
        &["tcp-bw", "-P", "2", "-t", "0.5", "--omit", "0", "--json"],
    ));
    assert_eq!(v.len(), 3, "total + 2 streams: {v:?}");
    for r in &v {
        has(r, COMMON);
        has(r, &["bw_gbps", "msg_rate_mpps", "retransmits", "direction"]);
        lacks(r, &["lat_us", "udp"]);
        assert_eq!(r["test"], "tcp-bw");
        assert_eq!(r["transport"], "tcp");
        assert_eq!(r["schema"], fabperf_results::SCHEMA_VERSION);
    }
    assert!(v[0].get("stream").is_none());
    assert_eq!(v[1]["stream"], 0);
    assert_eq!(v[2]["stream"], 1);

    let v = json_lines(&run(p, &["tcp-lat", "-n", "500", "--json"]));
    assert_eq!(v.len(), 1);
    has(&v[0], COMMON);
    has(&v[0]["lat_us"], LAT);
    assert_eq!(v[0]["lat_us"]["kind"], "half_rtt");
    assert_eq!(v[0]["op"], "ping-pong");
    lacks(&v[0], &["udp", "retransmits"]);

    let v = json_lines(&run(p, &["tcp-lat", "-n", "200", "--rtt", "--json"]));
    assert_eq!(v[0]["lat_us"]["kind"], "rtt");

    let v = json_lines(&run(
        p,
        &["udp-bw", "-b", "200M", "-t", "0.5", "--omit", "0", "--json"],
    ));
    assert_eq!(v.len(), 1);
    has(&v[0], COMMON);
    has(&v[0], &["bw_gbps", "udp", "direction"]);
    has(&v[0]["udp"], UDP);
    has(&v[0]["udp"], UDP_BW);
    lacks(&v[0]["udp"], UDP_LAT);
    assert_eq!(v[0]["transport"], "udp");
    lacks(&v[0], &["lat_us", "retransmits"]);

    let v = json_lines(&run(p, &["udp-lat", "-n", "300", "--json"]));
    has(&v[0], COMMON);
    has(&v[0]["lat_us"], LAT);
    has(&v[0], &["lat_hist"]);
    has(&v[0]["udp"], UDP);
    has(&v[0]["udp"], UDP_LAT);
    lacks(&v[0]["udp"], UDP_BW);
    lacks(&v[0], &["retransmits"]);

    // The human table labels the latency kind.
    let out = run(p, &["tcp-lat", "-n", "200"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("half-RTT"), "{text}");
}

/// `--cpu` reaches both ends and comes back in each end's placement; the human output says
/// where each end ran under the table; a reversed CPU list is refused before anything runs.
#[test]
fn cpu_option_places_both_ends() {
    let s = Server::start(10);
    let p = s.port;
    let v = json_lines(&run(
        p,
        &["tcp-lat", "-n", "200", "--cpu", "none", "--json"],
    ));
    for side in ["placement_local", "placement_remote"] {
        let pl = &v[0][side];
        assert_eq!(pl["cpu"], "none", "{side}: {pl}");
        assert!(pl.get("cpu_list").is_none(), "not pinned: {pl}");
        assert_eq!(pl["interface"], "lo");
        assert_eq!(pl["virtual_link"], true);
    }
    let v = json_lines(&run(p, &["udp-lat", "-n", "200", "--cpu", "0", "--json"]));
    for side in ["placement_local", "placement_remote"] {
        let pl = &v[0][side];
        assert_eq!(pl["cpu"], "list", "{side}: {pl}");
        assert_eq!(pl["cpu_list"], "0", "{side}: {pl}");
    }
    // Counters of both ends: loopback's netdev statistics moved during the run.
    for side in ["local", "remote"] {
        let groups = v[0]["counters"][side].as_array().expect("counter groups");
        assert!(
            groups
                .iter()
                .any(|g| g["source"] == "netdev" && g["deltas"]["rx_packets"].as_u64() > Some(0)),
            "{side}: {groups:?}"
        );
    }
    let out = run(p, &["tcp-lat", "-n", "200", "--cpu", "auto"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\nclient: lo, virtual link"), "{text}");
    assert!(text.contains("\nagent: lo, virtual link"), "{text}");
    let out = run(p, &["tcp-lat", "-n", "10", "--cpu", "3-1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cpu"));
}

#[test]
fn bad_arguments_exit_non_zero_with_a_message() {
    let s = Server::start(10);
    for args in [
        &["udp-bw", "-l", "70000"][..],
        &["udp-bw", "-b", "fast"][..],
        &["tcp-bw", "-P", "0"][..],
        &["tcp-bw", "-l", "12Q"][..],
        &["udp-lat", "--probe-timeout", "0"][..],
        &["tcp-lat", "-t", "-1"][..],
    ] {
        let out = run(s.port, args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.trim().is_empty(), "{args:?}: no message");
    }
    // Nothing listens: a clear error, non-zero exit.
    let port = free_port();
    let out = run(port, &["tcp-lat", "-n", "10", "--timeout", "2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fabperf server"), "{err}");
}

/// Test commands that run long enough to be interrupted.
const LONG: &[&[&str]] = &[
    &["tcp-bw", "-t", "60", "--omit", "0"],
    &["tcp-bw", "-t", "60", "--omit", "0", "-R"],
    &["tcp-lat", "-t", "60"],
    &["udp-bw", "-t", "60", "--omit", "0", "-b", "100M"],
    &["udp-bw", "-t", "60", "--omit", "0", "-b", "100M", "-R"],
    &["udp-lat", "-t", "60"],
];

/// Start a long client, let it run, do `what` to the agent, and check the
/// client fails (non-zero, with a message) well before the test's length.
fn agent_fault(sig: &str) {
    for args in LONG {
        let s = Server::start(10);
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--timeout", "3"]);
        let mut c = client(s.port, &full)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let t = Instant::now();
        signal(s.child.id(), sig);
        let deadline = t + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = c.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("{args:?}: client still running 30 s after SIG{sig} to the agent");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(!status.success(), "{args:?}: exit 0 after SIG{sig}");
        assert!(err.contains("error"), "{args:?}: {err}");
        eprintln!(
            "{args:?}: SIG{sig} to agent -> client exit in {:.1} s: {}",
            t.elapsed().as_secs_f64(),
            err.trim()
        );
    }
}

#[test]
fn agent_killed_mid_test_fails_the_client() {
    agent_fault("KILL");
}

#[test]
fn agent_stalled_mid_test_fails_the_client_within_its_timeout() {
    agent_fault("STOP");
}

/// Kill or stop a client mid-test: the agent must notice (within its
/// --timeout of 3 s) and serve the next client.
fn client_fault(sig: &str) {
    let s = Server::start(3);
    for args in LONG {
        let mut c = client(s.port, args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        signal(c.id(), sig);
        let out = run_when_free(
            s.port,
            &["tcp-lat", "-n", "100", "--warmup", "0", "--json"],
            Duration::from_secs(30),
        );
        let v = json_lines(&out);
        assert_eq!(v[0]["lat_us"]["samples"], 100, "{args:?}");
        signal(c.id(), "CONT");
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn client_killed_mid_test_agent_serves_the_next() {
    client_fault("KILL");
}

#[test]
fn client_stalled_mid_test_agent_serves_the_next() {
    client_fault("STOP");
}
