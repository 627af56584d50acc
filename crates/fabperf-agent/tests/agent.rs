//! The agent's handshake, errors and bounds, with small test kinds.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::data::RefusalReason;
use fabperf_proto::{
    connect_data, connect_test, ClientConfig, ErrorCode, Limits, Msg, ProtoError, ServeCtx,
    ServeError, TestKind, PROTO_VERSION,
};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Echoes `params.n` back after an optional hold (to test `busy`).
struct Echo {
    hold: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
}

impl TestKind for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let n = params["n"]
            .as_u64()
            .ok_or_else(|| ServeError::bad_request("n must be a number"))?;
        ctx.limits.check_memory(n, "echo buffer")?;
        ctx.ctl.send(&Msg::Accept { info: json!({}) })?;
        if params["hold"].as_bool() == Some(true) {
            if let Some(rx) = self.hold.lock().unwrap().take() {
                let _ = rx.recv_timeout(Duration::from_secs(20));
            }
        }
        let v: serde_json::Value = ctx.ctl.recv_test("ping")?;
        ctx.ctl.send_test(&json!({"n": n, "got": v}))?;
        Ok(())
    }
}

/// Reads all bytes of one data connection and reports the count.
struct Sink;

impl TestKind for Sink {
    fn name(&self) -> &'static str {
        "sink"
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, _params: serde_json::Value) -> Result<(), ServeError> {
        let w = ctx.data.register(1);
        ctx.ctl.send(&Msg::Accept {
            info: json!({"cookie": w.cookie_hex()}),
        })?;
        let mut s = w.accept(ctx.limits.io_timeout)?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)?;
        ctx.ctl.send_test(&json!({"bytes": buf.len()}))?;
        Ok(())
    }
}

fn start(token: Option<&[u8]>, io_timeout: Duration) -> (AgentHandle, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel();
    let agent = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: token.map(|t| t.to_vec()),
        insecure: false,
        limits: Limits {
            io_timeout,
            max_memory: 1000,
            ..Limits::default()
        },
        kinds: vec![
            Box::new(Echo {
                hold: Arc::new(Mutex::new(Some(rx))),
            }),
            Box::new(Sink),
        ],
        quiet: true,
        identity: None,
    })
    .unwrap();
    (agent.spawn(), tx)
}

fn cfg(token: Option<&[u8]>) -> ClientConfig {
    ClientConfig {
        group: None,
        token: token.map(|t| t.to_vec()),
        timeout: Duration::from_secs(5),
    }
}

fn echo_once(addr: SocketAddr, c: &ClientConfig) -> Result<serde_json::Value, ProtoError> {
    let (mut ctl, _) = connect_test(addr, c, "echo", json!({"n": 7}))?;
    ctl.send_test(&json!("hi"))?;
    let v: serde_json::Value = ctl.recv_test("echo reply")?;
    ctl.send(&Msg::Bye)?;
    Ok(v)
}

#[test]
fn happy_path() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let v = echo_once(h.addr(), &cfg(None)).unwrap();
    assert_eq!(v, json!({"n": 7, "got": "hi"}));
}

#[test]
fn unknown_test_is_refused_with_the_list() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let err = connect_test(h.addr(), &cfg(None), "nope", json!({})).unwrap_err();
    match err {
        ProtoError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::UnknownTest);
            assert!(
                message.contains("echo") && message.contains("sink"),
                "{message}"
            );
        }
        e => panic!("{e:?}"),
    }
    // The agent keeps serving.
    echo_once(h.addr(), &cfg(None)).unwrap();
}

#[test]
fn unknown_test_refused_by_agent_too() {
    // A client that skips its own check still gets the agent's refusal.
    let (h, _tx) = start(None, Duration::from_secs(5));
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(
        &fabperf_proto::Preamble {
            version: PROTO_VERSION,
        }
        .encode(),
    )
    .unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    let _hello =
        fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "hello").unwrap();
    fabperf_proto::write_frame(
        &mut s,
        &Msg::Start {
            group: None,
            test: "nope".into(),
            params: json!({}),
            fabperf_version: "x".into(),
        },
    )
    .unwrap();
    match fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "reply").unwrap() {
        Msg::Error { code, .. } => assert_eq!(code, ErrorCode::UnknownTest),
        m => panic!("{m:?}"),
    }
}

#[test]
fn bad_request_and_limit_are_reported() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let e = connect_test(h.addr(), &cfg(None), "echo", json!({"n": "x"})).unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::Remote {
                code: ErrorCode::BadRequest,
                ..
            }
        ),
        "{e:?}"
    );
    let e = connect_test(h.addr(), &cfg(None), "echo", json!({"n": 5000})).unwrap_err();
    match e {
        ProtoError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::LimitExceeded);
            assert!(message.contains("--max-memory"), "{message}");
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn version_mismatch_both_sides() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(
        &fabperf_proto::Preamble {
            version: PROTO_VERSION + 7,
        }
        .encode(),
    )
    .unwrap();
    // The agent answers with its own preamble (so the client can tell the
    // versions apart) and an error frame.
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    assert_eq!(&pre[..4], b"FBPF");
    assert_eq!(u16::from_be_bytes([pre[4], pre[5]]), PROTO_VERSION);
    match fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "error").unwrap() {
        Msg::Error { code, message } => {
            assert_eq!(code, ErrorCode::VersionMismatch);
            assert!(
                message.contains(&format!("v{}", PROTO_VERSION + 7)),
                "{message}"
            );
        }
        m => panic!("{m:?}"),
    }
    echo_once(h.addr(), &cfg(None)).unwrap();
}

#[test]
fn client_reports_agent_version_mismatch() {
    // A fake agent that speaks a newer version.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(&fabperf_proto::Preamble { version: 99 }.encode())
            .unwrap();
        let mut b = [0u8; 8];
        let _ = s.read_exact(&mut b);
    });
    let e = connect_test(addr, &cfg(None), "echo", json!({})).unwrap_err();
    assert!(
        matches!(e, ProtoError::VersionMismatch { remote: 99, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("same fabperf version"));
    t.join().unwrap();
}

/// v4 is the one version after the two incompatible v3s (one start for
/// concurrent flows; data connections and UDP hellos answered): a peer of
/// either v3, or older, gets both versions named on both sides.
#[test]
fn older_peers_are_refused_with_both_versions() {
    assert_eq!(PROTO_VERSION, 4);
    let (h, _tx) = start(None, Duration::from_secs(5));
    for old in [3u16, 2, 1] {
        // An older client: the agent's preamble, then the error in words.
        let mut s = TcpStream::connect(h.addr()).unwrap();
        s.write_all(&fabperf_proto::Preamble { version: old }.encode())
            .unwrap();
        let mut pre = [0u8; 8];
        s.read_exact(&mut pre).unwrap();
        assert_eq!(u16::from_be_bytes([pre[4], pre[5]]), 4);
        match fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "error").unwrap() {
            Msg::Error { code, message } => {
                assert_eq!(code, ErrorCode::VersionMismatch);
                assert!(
                    message.starts_with(&format!("client speaks protocol v{old}, this agent"))
                        && message.contains(") v4; run the same fabperf version on both ends"),
                    "{message}"
                );
            }
            m => panic!("{m:?}"),
        }
        // An older agent: the client stops at its preamble.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(&fabperf_proto::Preamble { version: old }.encode())
                .unwrap();
            let mut b = [0u8; 8];
            let _ = s.read_exact(&mut b);
        });
        let e = connect_test(addr, &cfg(None), "echo", json!({})).unwrap_err();
        assert!(
            matches!(e, ProtoError::VersionMismatch { local: 4, remote } if remote == old),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!("protocol version mismatch: this side speaks v4, the peer v{old}; run the same fabperf version on both ends")
        );
        t.join().unwrap();
    }
    echo_once(h.addr(), &cfg(None)).unwrap();
}

#[test]
fn not_fabperf_peer() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.contains("fabperf protocol"), "{out}");
    // HTTP, on an agent without --http: an HTTP answer saying how to turn it on.
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
    assert!(out.contains("x-fabperf-reason: http-off"), "{out}");
    assert!(out.contains("--http"), "{out}");

    // And a client talking to something that is not an agent.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").unwrap();
    });
    let e = connect_test(addr, &cfg(None), "echo", json!({})).unwrap_err();
    assert!(matches!(e, ProtoError::BadMagic { .. }), "{e:?}");
    t.join().unwrap();
}

#[test]
fn bad_frame_after_hello() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    for junk in [
        &[0u8, 0, 0, 3, b'x', b'y', b'z'][..],
        &[0xff, 0xff, 0xff, 0xff][..],
        &[0, 0, 0, 0][..],
    ] {
        let mut s = TcpStream::connect(h.addr()).unwrap();
        s.write_all(
            &fabperf_proto::Preamble {
                version: PROTO_VERSION,
            }
            .encode(),
        )
        .unwrap();
        let mut pre = [0u8; 8];
        s.read_exact(&mut pre).unwrap();
        let _hello =
            fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "hello").unwrap();
        s.write_all(junk).unwrap();
        match fabperf_proto::read_frame(&mut s, fabperf_proto::MAX_FRAME, None, "reply") {
            Ok(Msg::Error { code, .. }) => assert_eq!(code, ErrorCode::BadFrame),
            r => panic!("{junk:?}: {r:?}"),
        }
    }
    echo_once(h.addr(), &cfg(None)).unwrap();
}

#[test]
fn busy_agent_refuses_second_client() {
    let (h, tx) = start(None, Duration::from_secs(10));
    let addr = h.addr();
    let (mut first, _) =
        connect_test(addr, &cfg(None), "echo", json!({"n": 1, "hold": true})).unwrap();
    let e = connect_test(addr, &cfg(None), "echo", json!({"n": 1})).unwrap_err();
    match e {
        ProtoError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::Busy);
            assert!(
                message.contains("echo") && message.contains("retry"),
                "{message}"
            );
        }
        e => panic!("{e:?}"),
    }
    tx.send(()).unwrap();
    first.send_test(&json!(1)).unwrap();
    let _: serde_json::Value = first.recv_test("reply").unwrap();
    drop(first);
    // Free again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match echo_once(addr, &cfg(None)) {
            Ok(_) => break,
            Err(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn auth_required_failed_ok() {
    let (h, _tx) = start(Some(b"s3cret"), Duration::from_secs(5));
    let e = connect_test(h.addr(), &cfg(None), "echo", json!({"n": 1})).unwrap_err();
    assert!(matches!(e, ProtoError::Auth(_)), "{e:?}");
    assert!(e.to_string().contains("--token-file"), "{e}");
    let e = connect_test(h.addr(), &cfg(Some(b"wrong")), "echo", json!({"n": 1})).unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::Remote {
                code: ErrorCode::AuthFailed,
                ..
            }
        ),
        "{e:?}"
    );
    echo_once(h.addr(), &cfg(Some(b"s3cret"))).unwrap();
}

#[test]
fn non_loopback_needs_token_or_insecure() {
    let mk = |token: Option<Vec<u8>>, insecure| AgentConfig {
        bind: "0.0.0.0:0".parse().unwrap(),
        token,
        insecure,
        limits: Limits::default(),
        kinds: vec![],
        quiet: true,
        identity: None,
    };
    let e = Agent::bind(mk(None, false)).err().unwrap();
    assert!(
        e.contains("--token-file") && e.contains("--insecure"),
        "{e}"
    );
    Agent::bind(mk(Some(b"t".to_vec()), false)).unwrap();
    Agent::bind(mk(None, true)).unwrap();
}

#[test]
fn port_in_use_is_explained() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let e = Agent::bind(AgentConfig {
        bind: h.addr(),
        token: None,
        insecure: false,
        limits: Limits::default(),
        kinds: vec![],
        quiet: true,
        identity: None,
    })
    .err()
    .unwrap();
    assert!(e.contains("--port"), "{e}");
}

#[test]
fn stalled_client_is_dropped_and_next_served() {
    let (h, _tx) = start(None, Duration::from_millis(500));
    // Connects and says nothing.
    let mut silent = TcpStream::connect(h.addr()).unwrap();
    // Starts a test and then stalls inside it.
    let (_stalled, _) = connect_test(h.addr(), &cfg(None), "echo", json!({"n": 1})).unwrap();
    // The agent gives up on both within its timeout and serves the next.
    let t0 = Instant::now();
    loop {
        match echo_once(h.addr(), &cfg(None)) {
            Ok(_) => break,
            Err(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }) => {
                assert!(t0.elapsed() < Duration::from_secs(10), "agent stayed busy");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert_eq!(silent.read(&mut b).unwrap_or(0), 0, "silent client closed");
}

#[test]
fn client_times_out_on_stalled_agent() {
    // A listener that accepts and never answers.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let keep = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let c = ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_millis(300),
    };
    let t0 = Instant::now();
    let e = connect_test(addr, &c, "echo", json!({})).unwrap_err();
    assert!(matches!(e, ProtoError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    keep.join().unwrap();
}

#[test]
fn data_connections_are_routed_by_cookie() {
    let (h, _tx) = start(None, Duration::from_secs(5));
    let (mut ctl, info) = connect_test(h.addr(), &cfg(None), "sink", json!({})).unwrap();
    // A cookie no agent issued is refused, and the client is told why.
    let bad = connect_data(
        h.addr(),
        "00112233445566778899aabbccddeeff",
        Duration::from_secs(2),
    )
    .unwrap_err();
    match bad {
        ProtoError::Refused(r) => assert_eq!(r.reason, RefusalReason::Unknown),
        e => panic!("{e:?}"),
    }
    let mut d = connect_data(
        h.addr(),
        info["cookie"].as_str().unwrap(),
        Duration::from_secs(2),
    )
    .unwrap();
    d.write_all(&[7u8; 12345]).unwrap();
    drop(d);
    let v: serde_json::Value = ctl.recv_test("sink result").unwrap();
    assert_eq!(v["bytes"], 12345);
}

#[test]
fn tests_of_one_group_run_together_and_others_wait() {
    let (h, tx) = start(None, Duration::from_secs(10));
    let addr = h.addr();
    let grouped = |g: &str| ClientConfig {
        group: Some(g.to_string()),
        ..cfg(None)
    };
    // The first sender of an incast holds the agent.
    let (mut first, _) = connect_test(
        addr,
        &grouped("0123456789abcdef"),
        "echo",
        json!({"n": 1, "hold": true}),
    )
    .unwrap();
    // A second sender of the same group is admitted at once.
    let (mut second, _) =
        connect_test(addr, &grouped("0123456789abcdef"), "echo", json!({"n": 2})).unwrap();
    second.send_test(&json!(2)).unwrap();
    let v: serde_json::Value = second.recv_test("reply").unwrap();
    assert_eq!(v["n"], 2);
    // Another group, and an ungrouped test, find it busy.
    for c in [grouped("fedcba9876543210"), cfg(None)] {
        match connect_test(addr, &c, "echo", json!({"n": 3})).unwrap_err() {
            ProtoError::Remote { code, message } => {
                assert_eq!(code, ErrorCode::Busy);
                assert!(message.contains("echo"), "{message}");
            }
            e => panic!("{e:?}"),
        }
    }
    // A malformed group id is refused as a bad request.
    match connect_test(addr, &grouped("NOT-HEX!"), "echo", json!({"n": 3})).unwrap_err() {
        ProtoError::Remote { code, .. } => assert_eq!(code, ErrorCode::BadRequest),
        e => panic!("{e:?}"),
    }
    tx.send(()).unwrap();
    first.send_test(&json!(1)).unwrap();
    let _: serde_json::Value = first.recv_test("reply").unwrap();
    drop(first);
    drop(second);
    // Free again for anyone.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match echo_once(addr, &cfg(None)) {
            Ok(_) => break,
            Err(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// An agent with a token and a name, serving `sink`.
fn named(ip: &str, node: &str, token: &[u8]) -> AgentHandle {
    Agent::bind(AgentConfig {
        bind: format!("{ip}:0").parse().unwrap(),
        token: Some(token.to_vec()),
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(5),
            ..Limits::default()
        },
        kinds: vec![Box::new(Sink)],
        quiet: true,
        identity: Some(fabperf_proto::AgentIdentity {
            node: node.into(),
            path: "pod".into(),
            addr: None,
            inventory: None,
        }),
    })
    .unwrap()
    .spawn()
}

fn refused(e: ProtoError) -> fabperf_proto::data::DataRefusal {
    match e {
        ProtoError::Refused(r) => r,
        e => panic!("not a refusal: {e:?}"),
    }
}

#[test]
fn data_connections_say_whose_cookie_they_carry() {
    let tok = b"a-shared-token-for-both-agents";
    let a = named("127.0.0.5", "node-a", tok);
    let b = named("127.0.0.6", "node-b", tok);
    let stranger = named("127.0.0.7", "node-c", b"another-token-entirely-0123");
    let (mut ctl, info) = connect_test(a.addr(), &cfg(Some(tok)), "sink", json!({})).unwrap();
    let cookie = info["cookie"].as_str().unwrap().to_string();
    let t = Duration::from_secs(2);
    // Another agent sharing the token knows the cookie is a's, and names
    // itself.
    let r = refused(connect_data(b.addr(), &cookie, t).unwrap_err());
    assert_eq!(r.reason, RefusalReason::OtherAgent);
    assert_eq!(
        (r.node.as_deref(), r.path.as_deref()),
        (Some("node-b"), Some("pod"))
    );
    // An agent with another token cannot tell.
    let r = refused(connect_data(stranger.addr(), &cookie, t).unwrap_err());
    assert_eq!(r.reason, RefusalReason::Unknown);
    // The test takes one connection: a second is refused as such.
    let mut d = connect_data(a.addr(), &cookie, t).unwrap();
    let r = refused(connect_data(a.addr(), &cookie, t).unwrap_err());
    assert_eq!(r.reason, RefusalReason::Full);
    d.write_all(b"12345").unwrap();
    drop(d);
    let v: serde_json::Value = ctl.recv_test("sink result").unwrap();
    assert_eq!(v["bytes"], 5);
    // After the test, its own cookie is one that ended.
    let r = refused(connect_data(a.addr(), &cookie, t).unwrap_err());
    assert_eq!(r.reason, RefusalReason::Ended);
    assert_eq!(r.node.as_deref(), Some("node-a"));
}

#[test]
fn udp_door_answers_hellos_for_other_agents_tests() {
    use fabperf_proto::data::{udp_hello, DataRefusal, UDP_HELLO_LEN};
    let tok = b"a-shared-token-for-both-agents";
    let a = named("127.0.0.8", "node-a", tok);
    let b = named("127.0.0.9", "node-b", tok);
    let (_ctl, info) = connect_test(a.addr(), &cfg(Some(tok)), "sink", json!({})).unwrap();
    let cookie: [u8; 16] = fabperf_proto::auth::from_hex(info["cookie"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 2048];
    // The door may take a moment to open after the agent starts.
    let mut answer = None;
    for _ in 0..20 {
        s.send_to(&udp_hello(0x0102_0304, &cookie), b.addr())
            .unwrap();
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            assert_eq!(from, b.addr());
            assert!(n <= UDP_HELLO_LEN);
            answer = DataRefusal::decode_udp(&buf[..n]);
            break;
        }
    }
    let (session, r) = answer.expect("the door answers");
    assert_eq!(session, [1, 2, 3, 4]);
    assert_eq!(r.reason, RefusalReason::OtherAgent);
    assert_eq!(r.node.as_deref(), Some("node-b"));
    // A short hello is not answered: the answer could be larger than it.
    s.send_to(&udp_hello(7, &cookie)[..64], b.addr()).unwrap();
    assert!(s.recv_from(&mut buf).is_err());
    // Nor is anything else.
    s.send_to(&[0u8; UDP_HELLO_LEN], b.addr()).unwrap();
    assert!(s.recv_from(&mut buf).is_err());
}

#[test]
fn a_published_token_is_refused_with_how_to_rotate_it() {
    let e = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: Some(b"fabperf-example-token-change-me".to_vec()),
        insecure: false,
        limits: Limits::default(),
        kinds: vec![Box::new(Sink)],
        quiet: true,
        identity: None,
    })
    .err()
    .expect("refused");
    assert!(e.starts_with("refusing to serve: the token is"), "{e}");
    assert!(e.contains("Rotate it"), "{e}");
}

/// The agent admits the senders of a cluster-size incast at once — far more
/// than 64 — up to what it announces in its hello, and a sender beyond a
/// full group is told the agent is busy.
#[test]
fn a_group_holds_what_the_hello_announces_and_no_more() {
    let (h, _tx) = start(None, Duration::from_secs(20));
    let addr = h.addr();
    let hello = fabperf_proto::query_agent(addr, &cfg(None)).unwrap();
    let cap = hello.capacity.expect("the hello says what the agent holds");
    assert!(cap.group_tests >= 100, "{cap:?}");
    assert!(cap.group_fds >= 2 * u64::from(cap.group_tests), "{cap:?}");
    let grouped = ClientConfig {
        group: Some("00112233aabbccdd".into()),
        ..cfg(None)
    };
    // 200 tests of one group at once (each holds its test until pinged).
    let n = 200.min(cap.group_tests as usize);
    let mut held = Vec::new();
    for i in 0..n {
        let (ctl, _) = connect_test(addr, &grouped, "echo", json!({"n": i}))
            .unwrap_or_else(|e| panic!("sender {i} of the group: {e}"));
        held.push(ctl);
    }
    for (i, ctl) in held.iter_mut().enumerate() {
        ctl.send_test(&json!(i)).unwrap();
        let v: serde_json::Value = ctl.recv_test("reply").unwrap();
        assert_eq!(v["n"], i as u64);
    }
    drop(held);
    // An agent that admits 3: the fourth sender is busy, with the reason.
    let (tx, rx) = mpsc::channel::<()>();
    drop(tx);
    let mut a = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits: Limits::default(),
        kinds: vec![Box::new(Echo {
            hold: Arc::new(Mutex::new(Some(rx))),
        })],
        quiet: true,
        identity: None,
    })
    .unwrap();
    a.limit_group(3).unwrap();
    assert_eq!(a.capacity().group_tests, 3);
    let h3 = a.spawn();
    let hello = fabperf_proto::query_agent(h3.addr(), &cfg(None)).unwrap();
    assert_eq!(hello.capacity.unwrap().group_tests, 3);
    let mut three = Vec::new();
    for i in 0..3 {
        three.push(connect_test(h3.addr(), &grouped, "echo", json!({"n": i})).unwrap());
    }
    match connect_test(h3.addr(), &grouped, "echo", json!({"n": 4})).unwrap_err() {
        ProtoError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::Busy);
            assert!(message.contains("3 tests of this group"), "{message}");
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn capacity_follows_open_files_and_threads() {
    use fabperf_agent::{capacity, MAX_GROUP_TESTS, PER_GROUP_TEST};
    // Plenty of both: the cap.
    let c = capacity(1 << 20, 8192, None);
    assert_eq!(c.group_tests as usize, MAX_GROUP_TESTS);
    // A small open-file limit holds fewer tests, each at least two files.
    let c = capacity(1024, 512, None);
    assert!(c.group_tests >= 64 && c.group_tests < 1024, "{c:?}");
    assert!(
        u64::from(c.group_tests) * PER_GROUP_TEST <= c.group_fds,
        "{c:?}"
    );
    // Few threads left: fewer tests.
    let c = capacity(1 << 20, 8192, Some(500));
    assert!(
        u64::from(c.group_tests) * PER_GROUP_TEST <= c.group_threads.max(2),
        "{c:?}"
    );
    assert!(c.group_tests < 256, "{c:?}");
}
