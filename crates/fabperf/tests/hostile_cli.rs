//! The real `fabperf server` and clients against hostile peers and bad
//! input: usage errors, tests that never end, UDP hellos from a third
//! address, log and terminal injection, impossible results. Timing
//! assertions are generous upper bounds only.

use fabperf_agent::{Agent, AgentConfig};
use fabperf_proto::{
    connect_data, connect_test, ClientConfig, ErrorCode, Limits, Msg, ProtoError, ServeCtx,
    ServeError, TestKind,
};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

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
    addr: SocketAddr,
}

impl Server {
    /// `fabperf server` on loopback; its log goes to a pipe when `log`.
    fn start(args: &[&str], log: bool) -> Server {
        let port = free_port();
        let child = Command::new(BIN)
            .args(["server", "--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(args)
            .args(if log { &[][..] } else { &["--quiet"][..] })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if log { Stdio::piped() } else { Stdio::null() })
            .spawn()
            .unwrap();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let t0 = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "agent did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, addr }
    }

    /// Stop the agent and return its log.
    fn log(mut self) -> String {
        let _ = self.child.kill();
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fabperf(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn cfg() -> ClientConfig {
    ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_secs(5),
    }
}

#[test]
fn every_bad_value_is_a_usage_error() {
    let port = free_port().to_string();
    let p = port.as_str();
    let cases: &[(&[&str], &str)] = &[
        (&["tcp-bw", "127.0.0.1", "-p", p, "-P", "0"], "--streams"),
        (
            &["tcp-bw", "127.0.0.1", "-p", p, "-l", "0"],
            "smallest size",
        ),
        (
            &["tcp-bw", "127.0.0.1", "-p", p, "-t", "NaN"],
            "not a duration",
        ),
        (&["tcp-bw", "127.0.0.1", "-p", p, "-t", "-1"], "negative"),
        (&["tcp-bw", "127.0.0.1", "-p", p, "-t", "0"], "positive"),
        (
            &["tcp-bw", "127.0.0.1", "-p", p, "--omit", "-1"],
            "negative",
        ),
        (
            &["tcp-bw", "127.0.0.1", "-p", p, "--timeout", "1e30"],
            "too long",
        ),
        (
            &["tcp-lat", "127.0.0.1", "-p", p, "-n", "0"],
            "--iterations",
        ),
        (
            &["tcp-lat", "127.0.0.1", "-p", p, "-t", "1", "-n", "5"],
            "cannot be used with",
        ),
        (
            &["udp-lat", "127.0.0.1", "-p", p, "-t", "1", "-n", "5"],
            "cannot be used with",
        ),
        (
            &["udp-bw", "127.0.0.1", "-p", p, "-l", "8"],
            "smallest size",
        ),
        (&["udp-bw", "127.0.0.1", "-p", p, "-b", "fast"], "rate"),
        (
            &["udp-lat", "127.0.0.1", "-p", p, "--probe-timeout", "0"],
            "positive",
        ),
        (
            &["rdma-bw", "127.0.0.1", "-p", p, "-l", "0"],
            "smallest size",
        ),
        (
            &["rdma-bw", "127.0.0.1", "-p", p, "-n", "10", "-t", "1"],
            "cannot be used with",
        ),
        (
            &["rdma-lat", "127.0.0.1", "-p", p, "--mtu", "1500"],
            "IB MTU",
        ),
        (&["server", "--timeout", "1e30"], "too long"),
        (&["server", "--timeout", "-1"], "negative"),
        (
            &["server", "--max-duration", "18446744073709551615"],
            "too long",
        ),
        (&["server", "--max-duration", "NaN"], "not a duration"),
        (&["server", "--max-memory", "lots"], "size"),
        (&["suite", "--duration", "-3"], "negative"),
    ];
    for (args, want) in cases {
        let o = fabperf(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_snapshot_onto_a_file_is_a_usage_error() {
    let f = std::env::temp_dir().join(format!("fabperf-capture-file-{}", std::process::id()));
    std::fs::write(&f, "x").unwrap();
    let o = fabperf(&["detect", "--capture", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not a directory"), "{err}");
    std::fs::remove_file(&f).unwrap();
}

#[test]
fn refused_connection_says_the_os_error_once() {
    let port = free_port().to_string();
    let o = fabperf(&["tcp-lat", "127.0.0.1", "-p", &port, "-n", "10"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("os error 111").count(), 1, "{err}");
}

/// Wait for the agent's error after the client misbehaves; the agent must
/// stop the test by its own clock.
fn expect_stopped(ctl: &mut fabperf_proto::Control, t0: Instant) {
    loop {
        match ctl.recv_within(Duration::from_secs(15), "anything") {
            Ok(_) => {}
            Err(ProtoError::Remote { code, message }) => {
                assert_eq!(code, ErrorCode::LimitExceeded, "{message}");
                assert!(message.contains("time limit"), "{message}");
                break;
            }
            Err(e) => panic!("{e:?} after {:?}", t0.elapsed()),
        }
    }
    // 1 s asked for + max(2 s, --timeout 1) grace.
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
}

fn limited_server() -> Server {
    Server::start(&["--max-duration", "1", "--timeout", "1"], false)
}

#[test]
fn tcp_bw_client_that_never_stops_sending() {
    let srv = limited_server();
    let (mut ctl, info) = connect_test(
        srv.addr,
        &cfg(),
        "tcp-bw",
        json!({"duration_s": 1.0, "omit_s": 0.0, "streams": 1}),
    )
    .unwrap();
    let t0 = Instant::now();
    let mut d = connect_data(
        srv.addr,
        info["cookie"].as_str().unwrap(),
        Duration::from_secs(5),
    )
    .unwrap();
    d.write_all(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    let _ready: Value = ctl.recv_test("ready").unwrap();
    // Start at once, then never stop.
    ctl.send_test(&json!({"t": "go", "in_s": 0.0})).unwrap();
    let sender = std::thread::spawn(move || {
        let buf = vec![0u8; 65536];
        while d.write_all(&buf).is_ok() {}
    });
    expect_stopped(&mut ctl, t0);
    sender.join().unwrap();
}

#[test]
fn tcp_lat_client_that_pings_slowly_forever() {
    let srv = limited_server();
    let (mut ctl, info) = connect_test(
        srv.addr,
        &cfg(),
        "tcp-lat",
        json!({"duration_s": 1.0, "warmup": 0}),
    )
    .unwrap();
    let t0 = Instant::now();
    let mut d = connect_data(
        srv.addr,
        info["cookie"].as_str().unwrap(),
        Duration::from_secs(5),
    )
    .unwrap();
    let _ready: Value = ctl.recv_test("ready").unwrap();
    let pinger = std::thread::spawn(move || {
        let mut b = [7u8; 64];
        while d.write_all(&b).is_ok() && d.read_exact(&mut b).is_ok() {
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    expect_stopped(&mut ctl, t0);
    pinger.join().unwrap();
}

/// fabperf's UDP hello for `session`.
/// The test's UDP hello: its session and cookie from the accept info.
fn udp_hello(info: &Value) -> Vec<u8> {
    let session = info["session"].as_u64().unwrap() as u32;
    let cookie: [u8; 16] = fabperf_proto::auth::from_hex(info["cookie"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    fabperf_proto::data::udp_hello(session, &cookie)
}

#[test]
fn udp_bw_client_that_keeps_the_control_alive_forever() {
    let srv = limited_server();
    let (mut ctl, info) = connect_test(
        srv.addr,
        &cfg(),
        "udp-bw",
        json!({"duration_s": 1.0, "omit_s": 0.0}),
    )
    .unwrap();
    let t0 = Instant::now();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(srv.addr).unwrap();
    let fd = ctl.stream().try_clone().unwrap();
    fd.set_nonblocking(true).unwrap();
    // Hellos until the agent confirms on the control channel.
    loop {
        u.send(&udp_hello(&info)).unwrap();
        let mut b = [0u8; 1];
        if fd.peek(&mut b).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    fd.set_nonblocking(false).unwrap();
    let _seen: Value = ctl.recv_test("seen").unwrap();
    // Never SenderDone: only "alive", twice a second, and read what comes.
    loop {
        if let Err(e) = ctl.send_test(&json!({"t": "alive"})) {
            panic!("{e:?}");
        }
        match ctl.recv_within(Duration::from_millis(500), "anything") {
            Ok(_) | Err(ProtoError::Timeout { .. }) => {}
            Err(ProtoError::Remote { code, message }) => {
                assert_eq!(code, ErrorCode::LimitExceeded, "{message}");
                break;
            }
            Err(e) => panic!("{e:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(8), "never stopped");
    }
}

#[test]
fn the_reverse_udp_stream_goes_only_to_the_control_peer() {
    let srv = Server::start(&["--timeout", "2"], false);
    let (ctl, info) = connect_test(
        srv.addr,
        &cfg(),
        "udp-bw",
        json!({"duration_s": 1.0, "omit_s": 0.0, "direction": "reverse", "rate_bps": 10_000_000}),
    )
    .unwrap();
    // A third host (another loopback address) knows the session and says
    // hello first.
    let evil = UdpSocket::bind("127.0.0.2:0").unwrap();
    evil.connect(srv.addr).unwrap();
    for _ in 0..10 {
        evil.send(&udp_hello(&info)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let good = UdpSocket::bind("127.0.0.1:0").unwrap();
    good.connect(srv.addr).unwrap();
    let fd = ctl.stream().try_clone().unwrap();
    fd.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    loop {
        good.send(&udp_hello(&info)).unwrap();
        let mut b = [0u8; 1];
        if fd.peek(&mut b).is_ok() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no confirmation");
        std::thread::sleep(Duration::from_millis(50));
    }
    let count = |s: &UdpSocket| {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 2048];
        let mut n = 0;
        let end = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < end {
            if s.recv(&mut b).is_ok() {
                n += 1;
            }
        }
        n
    };
    let (g, e) = std::thread::scope(|sc| {
        let g = sc.spawn(|| count(&good));
        let e = sc.spawn(|| count(&evil));
        (g.join().unwrap(), e.join().unwrap())
    });
    assert_eq!(e, 0, "datagrams went to a third address");
    assert!(g > 0, "the client got nothing");
}

#[test]
fn peer_text_is_escaped_in_the_agent_log() {
    let srv = Server::start(&[], true);
    let evil = "x\n2026-01-01T00:00:00Z fabperf agent: all good\x1b[31m\u{202e}";
    let e = connect_test(srv.addr, &cfg(), "tcp-bw", json!({}))
        .map(|_| ())
        .err();
    assert!(e.is_none(), "{e:?}");
    // A raw start with a hostile test name.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(
        &fabperf_proto::Preamble {
            version: fabperf_proto::PROTO_VERSION,
        }
        .encode(),
    )
    .unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    let _ = fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "hello").unwrap();
    fabperf_proto::write_frame(
        &mut s,
        &Msg::Start {
            group: None,
            test: evil.into(),
            params: json!({}),
            fabperf_version: evil.into(),
        },
    )
    .unwrap();
    let _ = fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "reply");
    std::thread::sleep(Duration::from_millis(300));
    let log = srv.log();
    assert!(log.contains("all good"), "{log}");
    assert!(!log.contains('\x1b') && !log.contains('\u{202e}'), "{log}");
    assert!(
        log.lines().all(|l| l.contains(" fabperf agent: ")),
        "a forged line: {log}"
    );
}

#[test]
fn a_client_without_a_token_is_logged_as_an_authentication_failure() {
    let dir = std::env::temp_dir().join(format!("fabperf-tok-{}", std::process::id()));
    std::fs::write(&dir, "s3cret\n").unwrap();
    let srv = Server::start(&["--token-file", dir.to_str().unwrap()], true);
    let port = srv.addr.port().to_string();
    let o = fabperf(&["tcp-lat", "127.0.0.1", "-p", &port, "-n", "10"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--token-file"));
    std::thread::sleep(Duration::from_millis(300));
    let log = srv.log();
    std::fs::remove_file(&dir).unwrap();
    let line = log
        .lines()
        .find(|l| {
            !l.contains("listening")
                && !l.contains("no preamble")
                && !l.contains("tuning allowed")
                && !l.contains("agent: tune: ")
        })
        .unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("authentication failed"), "{line}");
    assert!(!line.contains("internal error"), "{line}");
}

/// A fake `tcp-bw` agent side that reports impossible figures.
struct LyingTcpBw(Value);

impl TestKind for LyingTcpBw {
    fn name(&self) -> &'static str {
        "tcp-bw"
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, params: Value) -> Result<(), ServeError> {
        let streams = params["streams"].as_u64().unwrap_or(1) as u32;
        let w = ctx.data.register(streams as usize);
        ctx.ctl.send(&Msg::Accept {
            info: json!({"cookie": w.cookie_hex()}),
        })?;
        let mut conns = Vec::new();
        for _ in 0..streams {
            conns.push(w.accept(Duration::from_secs(5))?);
        }
        ctx.ctl.send_test(&json!({"t": "ready"}))?;
        let _: Value = ctx.ctl.recv_test("go")?;
        for mut c in conns {
            let mut sink = Vec::new();
            let _ = c.read_to_end(&mut sink);
        }
        let _: Value = ctx.ctl.recv_test("report")?;
        let reports: Vec<Value> = (0..streams)
            .map(|i| {
                let mut r = self.0.clone();
                r["idx"] = json!(i);
                r
            })
            .collect();
        ctx.ctl
            .send_test(&json!({"t": "report", "streams": reports}))?;
        Ok(())
    }
}

fn lying_agent(report: Value) -> fabperf_agent::AgentHandle {
    Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits: Limits::default(),
        kinds: vec![Box::new(LyingTcpBw(report))],
        quiet: true,
        identity: None,
    })
    .unwrap()
    .spawn()
}

#[test]
fn impossible_results_are_a_protocol_error_naming_the_field() {
    let base = json!({"dir": 0, "sender": false, "total_bytes": 1000, "bytes": 1000,
                      "messages": 1, "secs": 1.0, "cpu_s": 0.1, "retrans": null});
    let cases = [
        // u64::MAX bytes on two streams: the sum overflows.
        (
            json!({"bytes": u64::MAX, "total_bytes": u64::MAX}),
            "2",
            "bytes",
        ),
        // A negative CPU time.
        (json!({"cpu_s": -5.0}), "1", "cpu_remote_pct"),
        // CPU time that makes an infinite share.
        (
            json!({"cpu_s": 1e308, "secs": 1e-300}),
            "1",
            "cpu_remote_pct",
        ),
        // A measured interval that ends before it starts.
        (json!({"from_s": 2e9, "to_s": 1e9}), "1", "interval"),
        // Progress counts that go down.
        (
            json!({"from_s": 1e9, "to_s": 1e9 + 1.0, "progress":
                   {"t0_s": 1e9, "tick_s": 0.05, "bytes": [5, 3], "last_s": 1e9 + 1.0, "last_bytes": 9}}),
            "1",
            "progress",
        ),
    ];
    for (spoil, streams, field) in cases {
        let mut r = base.clone();
        for (k, v) in spoil.as_object().unwrap() {
            r[k] = v.clone();
        }
        let h = lying_agent(r);
        let port = h.addr().port().to_string();
        let o = fabperf(&[
            "tcp-bw",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "0.3",
            "--omit",
            "0",
            "-P",
            streams,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{field}: {err}");
        assert!(err.contains(field), "{field}: {err}");
        assert!(err.contains("protocol"), "{field}: {err}");
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

#[test]
fn an_agents_escape_sequences_do_not_reach_the_terminal() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut pre = [0u8; 8];
        let _ = s.read_exact(&mut pre);
        let _ = s.write_all(
            &fabperf_proto::Preamble {
                version: fabperf_proto::PROTO_VERSION,
            }
            .encode(),
        );
        let _ = fabperf_proto::write_frame(
            &mut s,
            &Msg::Error {
                code: ErrorCode::Busy,
                message: "\x1b]0;owned\x07\x1b[2J\nfabperf: all tests passed".into(),
            },
        );
        std::thread::sleep(Duration::from_millis(500));
    });
    let o = fabperf(&["tcp-lat", "127.0.0.1", "-p", &port, "-n", "10"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    t.join().unwrap();
}
