//! Socket tests through an address that balances over several agents, as a
//! Kubernetes Service with several endpoints does: every TCP connection
//! goes to the next agent in turn, and UDP to an agent chosen on its own.
//! The test must fail at once with "this address balanced your … to another
//! agent", naming both agents — never a timeout or a firewall guess — and
//! leave the agent that took the control connection free. Through an
//! address with one agent behind it (a single-endpoint Service) every kind
//! measures that agent.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{AgentIdentity, ClientConfig, ErrorCode, Limits, ProtoError};
use fabperf_sock::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &[u8] = b"balanced-test-token-0123456789";

fn agent(ip: &str, node: &str) -> AgentHandle {
    Agent::bind(AgentConfig {
        bind: format!("{ip}:0").parse().unwrap(),
        token: Some(TOKEN.to_vec()),
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(8),
            ..Limits::default()
        },
        kinds: kinds(),
        quiet: true,
        identity: Some(AgentIdentity {
            node: node.into(),
            path: "pod".into(),
            addr: None,
            inventory: None,
        }),
    })
    .unwrap()
    .spawn()
}

fn cfg() -> ClientConfig {
    ClientConfig {
        group: None,
        token: Some(TOKEN.to_vec()),
        timeout: Duration::from_secs(8),
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// A TCP front that sends connection i to `targets[i % n]`, and a UDP
/// front on the same port that sends every client flow to `udp_target`
/// (and its answers back), as kube-proxy's conntrack entries do.
struct Balancer {
    addr: SocketAddr,
}

fn balancer(targets: Vec<SocketAddr>, udp_target: SocketAddr) -> Balancer {
    // The TCP and UDP fronts share one port number, as a Service port does.
    let (l, udp) = loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Ok(u) = UdpSocket::bind(l.local_addr().unwrap()) {
            break (l, u);
        }
    };
    let addr = l.local_addr().unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Ok(up) = TcpStream::connect(targets[i % targets.len()]) else {
                continue;
            };
            let (c2, up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || pipe(c, up));
            std::thread::spawn(move || pipe(up2, c2));
        }
    });
    let udp = Arc::new(udp);
    let flows: Arc<Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>> = Arc::default();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        loop {
            let Ok((n, from)) = udp.recv_from(&mut buf) else {
                continue;
            };
            let up = flows
                .lock()
                .unwrap()
                .entry(from)
                .or_insert_with(|| {
                    let s = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
                    s.connect(udp_target).unwrap();
                    let (back, front) = (s.clone(), udp.clone());
                    std::thread::spawn(move || {
                        let mut b = vec![0u8; 65536];
                        while let Ok(n) = back.recv(&mut b) {
                            let _ = front.send_to(&b[..n], from);
                        }
                    });
                    s
                })
                .clone();
            let _ = up.send(&buf[..n]);
        }
    });
    Balancer { addr }
}

fn wrong_agent(e: &SockError, what: &str) -> String {
    let m = e.to_string();
    assert!(
        matches!(e, SockError::Proto(ProtoError::WrongAgent(_))),
        "not a wrong-agent error: {e:?}"
    );
    assert!(
        m.starts_with(&format!(
            "this address balanced your {what} to another agent: "
        )),
        "{m}"
    );
    assert!(
        m.contains("node node-a") && m.contains("node node-b"),
        "{m}"
    );
    assert!(!m.contains("firewall") && !m.contains("timed out"), "{m}");
    m
}

/// The agent that took the control connection is free again at once (it
/// may still be finishing the failed test for a moment, as after any
/// test: a client asks again, as `fabperf run` does), not after its
/// timeout of 8 s.
/// Run a test, again while the agent is still busy with the one before
/// (it frees its slot just after the client has its results), for up to 2 s.
fn unless_busy<T>(mut f: impl FnMut() -> Result<T, SockError>) -> Result<T, SockError> {
    let t0 = Instant::now();
    loop {
        match f() {
            Err(SockError::Proto(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            })) if t0.elapsed() < Duration::from_secs(2) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r,
        }
    }
}

fn free_again(a: &AgentHandle) {
    let t0 = Instant::now();
    let p = TcpLatParams {
        iterations: Some(50),
        warmup: 0,
        ..TcpLatParams::default()
    };
    loop {
        match run_tcp_lat(a.addr(), &cfg(), &p) {
            Ok(_) => break,
            Err(SockError::Proto(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            })) if t0.elapsed() < Duration::from_secs(2) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("the agent does not serve the next test: {e}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn every_kind_through_a_balancing_address_says_so_at_once() {
    let a = agent("127.0.0.2", "node-a");
    let b = agent("127.0.0.3", "node-b");

    // Per connection: control on a, the first data connection on b.
    let lb = balancer(vec![a.addr(), b.addr()], b.addr());
    let t0 = Instant::now();
    let e = unless_busy(|| {
        run_tcp_bw(
            lb.addr,
            &cfg(),
            &TcpBwParams {
                duration_s: 1.0,
                omit_s: 0.0,
                streams: 4,
                ..TcpBwParams::default()
            },
        )
    })
    .unwrap_err();
    wrong_agent(&e, "data connection");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    free_again(&a);

    let lb = balancer(vec![a.addr(), b.addr()], b.addr());
    let e = unless_busy(|| {
        run_tcp_lat(
            lb.addr,
            &cfg(),
            &TcpLatParams {
                iterations: Some(100),
                ..TcpLatParams::default()
            },
        )
    })
    .unwrap_err();
    wrong_agent(&e, "data connection");
    free_again(&a);

    // TCP on a, UDP on b: kube-proxy chooses for each service port on its
    // own (sessionAffinity: ClientIP too).
    let lb = balancer(vec![a.addr()], b.addr());
    for direction in [Direction::Forward, Direction::Reverse, Direction::Bidir] {
        let t0 = Instant::now();
        let e = unless_busy(|| {
            run_udp_bw(
                lb.addr,
                &cfg(),
                &UdpBwParams {
                    duration_s: 1.0,
                    omit_s: 0.0,
                    rate_bps: Some(10_000_000),
                    direction,
                    ..UdpBwParams::default()
                },
            )
        })
        .unwrap_err();
        let m = wrong_agent(&e, "UDP datagrams");
        assert!(m.contains("per service port"), "{m}");
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        free_again(&a);
    }
    let e = unless_busy(|| {
        run_udp_lat(
            lb.addr,
            &cfg(),
            &UdpLatParams {
                iterations: Some(100),
                ..UdpLatParams::default()
            },
        )
    })
    .unwrap_err();
    wrong_agent(&e, "UDP datagrams");
    free_again(&a);
    // b was never disturbed: its door answered, no test of it ran.
    free_again(&b);
}

#[test]
fn through_an_address_with_one_agent_every_kind_measures_it() {
    let a = agent("127.0.0.4", "node-a");
    let lb = balancer(vec![a.addr()], a.addr());
    let tcp = run_tcp_bw(
        lb.addr,
        &cfg(),
        &TcpBwParams {
            duration_s: 0.5,
            omit_s: 0.0,
            streams: 2,
            ..TcpBwParams::default()
        },
    )
    .unwrap();
    assert!(tcp.iter().any(|r| r.bytes > 0));
    run_tcp_lat(
        lb.addr,
        &cfg(),
        &TcpLatParams {
            iterations: Some(200),
            ..TcpLatParams::default()
        },
    )
    .unwrap();
    for direction in [Direction::Forward, Direction::Reverse] {
        let r = run_udp_bw(
            lb.addr,
            &cfg(),
            &UdpBwParams {
                duration_s: 0.5,
                omit_s: 0.0,
                rate_bps: Some(20_000_000),
                direction,
                ..UdpBwParams::default()
            },
        )
        .unwrap();
        assert!(r.iter().any(|r| r.bytes > 0), "{direction:?}");
    }
    run_udp_lat(
        lb.addr,
        &cfg(),
        &UdpLatParams {
            iterations: Some(200),
            ..UdpLatParams::default()
        },
    )
    .unwrap();
    // After its UDP tests the agent holds its UDP port again: a hello for
    // another agent's test is answered (at once, not after a retry delay).
    let other = fabperf_proto::data::CookieMint::new(Some(TOKEN)).issue();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 1024];
    let t0 = Instant::now();
    let answer = loop {
        s.send_to(&fabperf_proto::data::udp_hello(9, &other), a.addr())
            .unwrap();
        if let Ok((n, _)) = s.recv_from(&mut buf) {
            break fabperf_proto::data::DataRefusal::decode_udp(&buf[..n]);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the door stayed shut"
        );
    };
    let (_, r) = answer.expect("a refusal");
    assert_eq!(r.reason, fabperf_proto::data::RefusalReason::OtherAgent);
    assert_eq!(r.node.as_deref(), Some("node-a"));
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}
