//! A drive aims only at fabperf agents of its own cluster: a plain HTTP
//! server gets no load, mapped and unspecified addresses are judged on
//! their canonical form, and a target that does not prove itself gets the
//! same answer — same text, same code, not before the timeout — whatever
//! the reason (closed port, no route, another program, another token), so
//! a token holder cannot use an agent as a port scanner.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{connect_test, ClientConfig, ErrorCode, Limits, ProtoError, TestKind};
use fabperf_run::drive::{DriveParams, DriveResult};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(1);

fn agent(token: Option<&[u8]>, drive: bool) -> AgentHandle {
    let mut kinds: Vec<Box<dyn TestKind>> = fabperf_sock::kinds();
    if drive {
        kinds.push(Box::new(fabperf_run::DriveKind::new(
            token.map(<[u8]>::to_vec),
            TIMEOUT,
        )));
    }
    Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: token.map(<[u8]>::to_vec),
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(5),
            ..Limits::default()
        },
        kinds,
        quiet: true,
        identity: None,
    })
    .unwrap()
    .spawn()
}

/// A plain HTTP/1.1 server on loopback: answers every request with a
/// 1 KiB body, and keeps what it received.
struct PlainHttp {
    addr: SocketAddr,
    conns: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<u8>>>,
}

fn plain_http(bind: &str) -> PlainHttp {
    let l = TcpListener::bind(bind).unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, s) = (conns.clone(), seen.clone());
    std::thread::spawn(move || {
        for st in l.incoming() {
            let Ok(mut st) = st else { continue };
            c.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = st.set_read_timeout(Some(Duration::from_secs(3)));
                let mut buf = [0u8; 4096];
                while let Ok(n) = st.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    s.lock().unwrap().extend_from_slice(&buf[..n]);
                    let body = vec![b'x'; 1024];
                    let _ = st.write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
                            .as_bytes(),
                    );
                    let _ = st.write_all(&body);
                }
            });
        }
    });
    PlainHttp { addr, conns, seen }
}

fn cfg(token: Option<&[u8]>) -> ClientConfig {
    ClientConfig {
        token: token.map(<[u8]>::to_vec),
        timeout: Duration::from_secs(10),
        group: None,
    }
}

/// Ask `driver` to run `test` toward `target`; the agent's error.
fn drive(
    driver: SocketAddr,
    token: Option<&[u8]>,
    target: SocketAddr,
    test: &str,
    params: serde_json::Value,
) -> Result<DriveResult, (ErrorCode, String)> {
    let p = serde_json::to_value(DriveParams {
        target,
        test: test.into(),
        params,
        sync: false,
        group: None,
    })
    .unwrap();
    let remote = |e: ProtoError| match e {
        ProtoError::Remote { code, message } => (code, message),
        other => panic!("{other:?}"),
    };
    let (mut ctl, _) = connect_test(driver, &cfg(token), "drive", p).map_err(remote)?;
    ctl.recv_test_within::<DriveResult>(Duration::from_secs(20), "the drive's result")
        .map_err(remote)
}

fn http_params() -> serde_json::Value {
    json!({"connections": 4, "duration_s": 0.5, "warmup_s": 0.0, "size": 1024})
}

#[test]
fn a_plain_http_server_on_loopback_receives_no_load() {
    let a = agent(None, true);
    let http = plain_http("127.0.0.1:0");
    let e = drive(a.addr(), None, http.addr, "http-load", http_params())
        .expect_err("a plain HTTP server is not an agent");
    assert_eq!(e.0, ErrorCode::Timeout, "{e:?}");
    assert!(e.1.contains("did not prove"), "{e:?}");
    std::thread::sleep(Duration::from_millis(200));
    let seen = http.seen.lock().unwrap().clone();
    // At most fabperf's 8-byte preamble reached it: no request.
    assert!(seen.len() <= 8, "{} bytes reached it", seen.len());
    assert!(
        !String::from_utf8_lossy(&seen).contains("HTTP/1.1"),
        "it got HTTP requests: {:?}",
        String::from_utf8_lossy(&seen)
    );
    assert!(http.conns.load(Ordering::SeqCst) <= 1);
    // tcp-bw toward it: no data connection either.
    let _ = drive(
        a.addr(),
        None,
        http.addr,
        "tcp-bw",
        json!({"duration_s": 0.3, "omit_s": 0.0}),
    )
    .expect_err("not an agent");
    assert!(http.conns.load(Ordering::SeqCst) <= 2);
}

#[test]
fn mapped_and_unspecified_targets_are_judged_on_their_canonical_form() {
    let a = agent(None, true);
    let http = plain_http("0.0.0.0:0");
    let port = http.addr.port();
    for t in [
        format!("[::ffff:0.0.0.0]:{port}"),
        format!("0.0.0.0:{port}"),
        format!("[::]:{port}"),
        format!("[::ffff:255.255.255.255]:{port}"),
    ] {
        let target: SocketAddr = t.parse().unwrap();
        let e = drive(a.addr(), None, target, "http-load", http_params())
            .expect_err("not an agent address");
        assert_eq!(e.0, ErrorCode::BadRequest, "{t}: {e:?}");
        assert!(e.1.contains("not an agent address"), "{t}: {e:?}");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        http.conns.load(Ordering::SeqCst),
        0,
        "a refused target got a connection"
    );
    // A mapped loopback agent address is the agent it names.
    let b = agent(None, true);
    let mapped: SocketAddr = format!("[::ffff:127.0.0.1]:{}", b.addr().port())
        .parse()
        .unwrap();
    let r = drive(
        a.addr(),
        None,
        mapped,
        "tcp-bw",
        json!({"duration_s": 0.2, "omit_s": 0.0}),
    )
    .expect("an agent behind a mapped address");
    assert!(r.records[0].bytes > 0);
}

/// Every reason a target can fail its proof gives one text and one code,
/// after the full timeout. Run in a network namespace of its own (only
/// loopback up), where any other address has no route.
#[test]
fn a_target_that_does_not_prove_itself_gets_one_answer_whatever_the_reason() {
    if !rustix_root() {
        eprintln!("skipped: needs root (a network namespace of its own)");
        return;
    }
    std::thread::spawn(|| {
        // SAFETY: unsharing the network namespace affects this thread (and
        // the threads it starts) only.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "unshare: {}", std::io::Error::last_os_error());
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(up.success());
        let token = b"cluster-token".as_slice();
        let a = agent(Some(token), true);
        let other = agent(Some(b"another-token".as_slice()), false);
        let open = agent(None, false);
        let http = plain_http("127.0.0.1:0");
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let targets: Vec<(&str, SocketAddr)> = vec![
            ("closed port", closed),
            ("no route", "10.9.9.9:5301".parse().unwrap()),
            ("plain HTTP server", http.addr),
            ("agent with another token", other.addr()),
            ("agent without a token", open.addr()),
        ];
        let mut answers = Vec::new();
        for (what, t) in &targets {
            let t0 = Instant::now();
            let e = drive(
                a.addr(),
                Some(token),
                *t,
                "tcp-bw",
                json!({"duration_s": 0.2, "omit_s": 0.0}),
            )
            .expect_err(what);
            let took = t0.elapsed();
            assert!(
                took >= TIMEOUT - Duration::from_millis(50),
                "{what}: answered after {took:?}, before the timeout"
            );
            // The same text but for the address.
            answers.push((e.0, e.1.replace(&t.to_string(), "TARGET")));
        }
        for (i, ans) in answers.iter().enumerate() {
            assert_eq!(
                ans, &answers[0],
                "{} and {} are told apart",
                targets[i].0, targets[0].0
            );
        }
        assert!(answers[0].1.contains("did not prove"), "{:?}", answers[0]);
        // An agent of the cluster proves itself: the test runs.
        let b = agent(Some(token), false);
        let r = drive(
            a.addr(),
            Some(token),
            b.addr(),
            "tcp-bw",
            json!({"duration_s": 0.2, "omit_s": 0.0}),
        )
        .expect("an agent of the cluster");
        assert!(r.records[0].bytes > 0);
    })
    .join()
    .expect("the namespace thread panicked");
}

fn rustix_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
