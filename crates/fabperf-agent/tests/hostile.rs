//! The agent and the client against hostile peers: trickling handshakes,
//! floods of unauthenticated connections, oversized pre-authentication
//! frames, tests that never end, panicking test kinds, fake agents.
//! Timing assertions are generous upper bounds only.

use fabperf_agent::{Agent, AgentConfig, AgentHandle, MAX_PENDING, MAX_PENDING_PER_SOURCE};
use fabperf_proto::{
    auth, connect_test, query_agent, AgentIdentity, ClientConfig, ErrorCode, Limits, Msg,
    ProtoError, ServeCtx, ServeError, TestKind, MAX_FRAME, PROTO_VERSION,
};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Echoes one message; with `panic` it panics instead; with `forever` it
/// keeps answering pings until the client stops (or the agent stops it),
/// after asking for `length` seconds (if given).
struct Echo;

impl TestKind for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        if params["panic"].as_bool() == Some(true) {
            panic!("a test kind's bug");
        }
        if let Some(l) = params["length"].as_f64() {
            ctx.limit_duration(l)?;
        }
        ctx.ctl.send(&Msg::Accept { info: json!({}) })?;
        loop {
            let v: serde_json::Value = ctx.ctl.recv_test("ping")?;
            ctx.ctl.send_test(&json!({"got": v}))?;
            if params["forever"].as_bool() != Some(true) {
                return Ok(());
            }
        }
    }
}

fn agent(token: Option<&[u8]>, limits: Limits) -> AgentHandle {
    Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: token.map(|t| t.to_vec()),
        insecure: false,
        limits,
        kinds: vec![Box::new(Echo)],
        quiet: true,
        identity: Some(AgentIdentity {
            addr: None,
            node: "node-a".into(),
            path: "pod".into(),
            inventory: None,
        }),
    })
    .unwrap()
    .spawn()
}

fn limits(io: Duration) -> Limits {
    Limits {
        io_timeout: io,
        ..Limits::default()
    }
}

fn cfg(token: Option<&[u8]>, timeout: Duration) -> ClientConfig {
    ClientConfig {
        group: None,
        token: token.map(|t| t.to_vec()),
        timeout,
    }
}

fn echo_once(addr: SocketAddr, c: &ClientConfig) -> Result<(), ProtoError> {
    let (mut ctl, _) = connect_test(addr, c, "echo", json!({}))?;
    ctl.send_test(&json!("hi"))?;
    let _: serde_json::Value = ctl.recv_test("echo reply")?;
    ctl.send(&Msg::Bye)?;
    Ok(())
}

fn preamble() -> [u8; 8] {
    fabperf_proto::Preamble {
        version: PROTO_VERSION,
    }
    .encode()
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2_like::bind_connect(from, to)?;
    Ok(s)
}

/// Bind-then-connect: connect from a chosen 127.x.y.z source address
/// (all of 127/8 is local on Linux).
mod socket2_like {
    use rustix::net::{bind, connect, socket_with, AddressFamily, SocketFlags, SocketType};
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};

    pub fn bind_connect(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
        let SocketAddr::V4(to) = to else {
            return Err(std::io::ErrorKind::Unsupported.into());
        };
        let fd = socket_with(
            AddressFamily::INET,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        bind(&fd, &SocketAddrV4::new(from, 0))?;
        connect(&fd, &to)?;
        Ok(TcpStream::from(fd))
    }
}

/// True when the agent closed `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let end = Instant::now() + within;
    let mut b = [0u8; 4096];
    while Instant::now() < end {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_trickled_handshake_is_closed_at_the_timeout() {
    let h = agent(None, limits(Duration::from_secs(1)));
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(&preamble()).unwrap();
    let t0 = Instant::now();
    // One byte of a start frame every 200 ms: each read succeeds, the
    // handshake as a whole does not finish.
    let frame = fabperf_proto::encode_frame(&Msg::Start {
        group: None,
        test: "echo".into(),
        params: json!({"pad": "x".repeat(200)}),
        fabperf_version: "x".into(),
    })
    .unwrap();
    let mut closed = false;
    for b in frame {
        if s.write_all(&[b]).is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut s, Duration::from_millis(200)) {
            closed = true;
            break;
        }
        if t0.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    assert!(closed, "still open after {:?}", t0.elapsed());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "closed only after {:?}",
        t0.elapsed()
    );
    echo_once(h.addr(), &cfg(None, Duration::from_secs(5))).unwrap();
}

/// Opens `n` connections from `sources` (round robin), each sending the
/// preamble; returns the streams.
fn flood(addr: SocketAddr, sources: &[Ipv4Addr], n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = connect_from(sources[i % sources.len()], addr).unwrap();
            s.write_all(&preamble()).unwrap();
            s
        })
        .collect()
}

#[test]
fn a_client_gets_through_hundreds_of_stalled_handshakes() {
    // Long timeout: only the caps can make room here.
    let h = agent(Some(b"tok"), limits(Duration::from_secs(60)));
    let sources: Vec<Ipv4Addr> = (0..40).map(|i| Ipv4Addr::new(127, 1, 0, 10 + i)).collect();
    let mut conns = flood(h.addr(), &sources, 400);
    // Plus a single source holding as many as it can.
    conns.extend(flood(h.addr(), &[Ipv4Addr::new(127, 2, 0, 1)], 100));
    let t0 = Instant::now();
    echo_once(h.addr(), &cfg(Some(b"tok"), Duration::from_secs(5))).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    drop(conns);
}

#[test]
fn the_oldest_handshake_makes_room_and_one_source_cannot_hog() {
    let h = agent(None, limits(Duration::from_secs(60)));
    // One source: beyond its cap, its own oldest connection goes.
    let one = Ipv4Addr::new(127, 3, 0, 1);
    let mut mine = flood(h.addr(), &[one], MAX_PENDING_PER_SOURCE + 1);
    assert!(closed_within(&mut mine[0], Duration::from_secs(3)));
    assert!(!closed_within(&mut mine[1], Duration::from_millis(300)));
    // Many sources: at the global cap the oldest overall goes.
    let sources: Vec<Ipv4Addr> = (0..MAX_PENDING)
        .map(|i| Ipv4Addr::new(127, 4, (i / 200) as u8, (i % 200) as u8 + 1))
        .collect();
    let mut many = flood(h.addr(), &sources, MAX_PENDING);
    // mine[1..] were older than all of `many`: they were closed first.
    assert!(closed_within(&mut mine[1], Duration::from_secs(3)));
    assert!(!closed_within(
        &mut many[MAX_PENDING - 1],
        Duration::from_millis(300)
    ));
}

#[test]
fn a_large_frame_before_authentication_is_refused_at_once() {
    let h = agent(Some(b"tok"), limits(Duration::from_secs(30)));
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(&preamble()).unwrap();
    let mut pre = [0u8; 8];
    s.read_exact(&mut pre).unwrap();
    let _hello = fabperf_proto::read_frame(&mut s, MAX_FRAME, None, "hello").unwrap();
    // Announce 100 KB and send nothing more.
    s.write_all(&100_000u32.to_be_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    match fabperf_proto::read_frame(&mut s, MAX_FRAME, None, "reply") {
        Ok(Msg::Error { code, message }) => {
            assert_eq!(code, ErrorCode::BadFrame);
            assert!(message.contains("authentication"), "{message}");
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn panics_become_errors_and_free_their_slot() {
    let h = agent(None, limits(Duration::from_secs(5)));
    let c = cfg(None, Duration::from_secs(5));
    // More panics than the agent has connection slots.
    for _ in 0..(fabperf_agent::MAX_CONNECTIONS + 20) {
        match connect_test(h.addr(), &c, "echo", json!({"panic": true})) {
            Err(ProtoError::Remote { code, message }) => {
                assert_eq!(code, ErrorCode::Internal);
                assert!(message.contains("internal error"), "{message}");
            }
            r => panic!("{:?}", r.map(|_| ())),
        }
    }
    echo_once(h.addr(), &c).unwrap();
}

#[test]
fn the_agent_ends_a_test_at_its_length_whatever_the_client_does() {
    let h = agent(None, limits(Duration::from_millis(500)));
    let c = cfg(None, Duration::from_secs(5));
    let (mut ctl, _) = connect_test(
        h.addr(),
        &c,
        "echo",
        json!({"forever": true, "length": 0.5}),
    )
    .unwrap();
    let t0 = Instant::now();
    // The client keeps pinging well past 0.5 s + the 2 s grace.
    let err = loop {
        let r = ctl
            .send_test(&json!("ping"))
            .and_then(|_| ctl.recv_test::<serde_json::Value>("pong"));
        if let Err(e) = r {
            break e;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never stopped");
        std::thread::sleep(Duration::from_millis(50));
    };
    match err {
        ProtoError::Remote { code, message } => {
            assert_eq!(code, ErrorCode::LimitExceeded);
            assert!(message.contains("time limit"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(2400),
        "stopped early: {took:?}"
    );
    assert!(took < Duration::from_secs(6), "stopped late: {took:?}");
    echo_once(h.addr(), &c).unwrap();
}

#[test]
fn a_test_without_a_length_is_bounded_by_max_duration() {
    let h = agent(
        None,
        Limits {
            io_timeout: Duration::from_millis(500),
            max_duration: Duration::from_secs(1),
            ..Limits::default()
        },
    );
    let c = cfg(None, Duration::from_secs(5));
    let (mut ctl, _) = connect_test(h.addr(), &c, "echo", json!({"forever": true})).unwrap();
    let t0 = Instant::now();
    while ctl
        .send_test(&json!("ping"))
        .and_then(|_| ctl.recv_test::<serde_json::Value>("pong"))
        .is_ok()
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "never stopped");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
}

/// A fake agent: accepts one connection and runs `script` on it after the
/// preambles.
fn fake_agent(script: impl FnOnce(&mut TcpStream) + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut pre = [0u8; 8];
        let _ = s.read_exact(&mut pre);
        let _ = s.write_all(&preamble());
        script(&mut s);
    });
    addr
}

fn hello(auth_required: bool, nonce: Option<String>) -> Msg {
    Msg::Hello {
        fabperf_version: "0".into(),
        auth_required,
        nonce,
        tests: vec!["echo".into()],
        agent: None,
        capacity: None,
    }
}

#[test]
fn a_client_with_a_token_refuses_an_agent_that_asks_for_none() {
    let addr = fake_agent(|s| {
        fabperf_proto::write_frame(s, &hello(false, None)).unwrap();
        // Would accept anything.
        let _ = fabperf_proto::read_frame(s, MAX_FRAME, None, "start");
        let _ = fabperf_proto::write_frame(s, &Msg::Accept { info: json!({}) });
        std::thread::sleep(Duration::from_secs(1));
    });
    let e = connect_test(
        addr,
        &cfg(Some(b"tok"), Duration::from_secs(5)),
        "echo",
        json!({}),
    )
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(e, ProtoError::Auth(_)), "{e:?}");
    assert!(e.to_string().contains("cannot prove"), "{e}");
}

#[test]
fn a_client_refuses_an_agent_that_cannot_prove_the_token() {
    let addr = fake_agent(|s| {
        fabperf_proto::write_frame(s, &hello(true, Some(auth::new_nonce()))).unwrap();
        // Reads the client's proof, answers with a made-up one.
        let _ = fabperf_proto::read_frame(s, MAX_FRAME, None, "auth");
        let _ = fabperf_proto::write_frame(
            s,
            &Msg::AuthOk {
                proof: "00".repeat(32),
            },
        );
        std::thread::sleep(Duration::from_secs(1));
    });
    let e = connect_test(
        addr,
        &cfg(Some(b"tok"), Duration::from_secs(5)),
        "echo",
        json!({}),
    )
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(e, ProtoError::Auth(_)), "{e:?}");
    assert!(e.to_string().contains("could not prove"), "{e}");
}

#[test]
fn mutual_authentication_with_the_real_agent() {
    let h = agent(Some(b"s3cret"), limits(Duration::from_secs(5)));
    echo_once(h.addr(), &cfg(Some(b"s3cret"), Duration::from_secs(5))).unwrap();
    let e = echo_once(h.addr(), &cfg(Some(b"wrong"), Duration::from_secs(5))).unwrap_err();
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
    // The agent's identity reaches the client.
    let hello = query_agent(h.addr(), &cfg(Some(b"s3cret"), Duration::from_secs(5))).unwrap();
    let id = hello.agent.unwrap();
    assert_eq!((id.node.as_str(), id.path.as_str()), ("node-a", "pod"));
    assert!(hello.tests.contains(&"echo".to_string()));
}

#[test]
fn the_client_handshake_has_a_deadline() {
    // A fake agent that trickles its hello one byte every 300 ms.
    let addr = fake_agent(|s| {
        let f = fabperf_proto::encode_frame(&hello(false, None)).unwrap();
        for b in f {
            if s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let t0 = Instant::now();
    let e = connect_test(addr, &cfg(None, Duration::from_secs(1)), "echo", json!({}))
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, ProtoError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
fn an_agents_error_text_is_escaped_for_the_terminal() {
    let addr = fake_agent(|s| {
        let _ = fabperf_proto::write_frame(
            s,
            &Msg::Error {
                code: ErrorCode::Busy,
                message: "busy\x1b[2J\nfabperf: all tests passed\u{202e}".into(),
            },
        );
        std::thread::sleep(Duration::from_millis(500));
    });
    let e = connect_test(addr, &cfg(None, Duration::from_secs(5)), "echo", json!({}))
        .map(|_| ())
        .unwrap_err();
    let text = e.to_string();
    assert!(!text.contains('\x1b') && !text.contains('\n') && !text.contains('\u{202e}'));
    assert!(text.contains("\\x1b[2J\\nfabperf"), "{text}");
}
