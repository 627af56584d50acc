//! The load generator against servers that misbehave in known ways: errors
//! are counted by kind, a stalled response delays later requests' latency
//! in open loop (coordinated omission corrected) but not in closed loop,
//! and a bad target is refused before the load with what to do.

use fabperf_http::{run_load, LoadError, LoadParams, Target};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A server that answers each request of each connection with what
/// `answer(n)` says (n counts requests over all connections); `None`
/// closes the connection.
fn fake(answer: impl Fn(u64) -> Option<Vec<u8>> + Send + Sync + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let answer = Arc::new(answer);
    let n = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let (answer, n) = (answer.clone(), n.clone());
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request head (no bodies in these tests).
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    let i = n.fetch_add(1, Ordering::SeqCst);
                    match answer(i) {
                        Some(resp) => {
                            if s.write_all(&resp).is_err() {
                                return;
                            }
                        }
                        None => return,
                    }
                }
            });
        }
    });
    addr
}

fn ok(body: &[u8]) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    v.extend_from_slice(body);
    v
}

fn params(conns: u32, secs: f64) -> LoadParams {
    LoadParams {
        connections: conns,
        threads: 1,
        duration_s: secs,
        warmup_s: 0.0,
        size: 4,
        rate: None,
        upload: false,
        timeout_s: 1.0,
    }
}

#[test]
fn errors_are_counted_by_kind() {
    // Request 0 is the pre-flight HEAD. Then: every 5th closes the
    // connection, every 7th is a 500, every 11th is garbage.
    let addr = fake(|i| {
        if i == 0 {
            return Some(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n".to_vec());
        }
        if i % 5 == 0 {
            None
        } else if i % 7 == 0 {
            Some(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n".to_vec())
        } else if i % 11 == 0 {
            Some(b"HTTP/1.1 200 OK\r\nContent-Length: zz\r\n\r\n".to_vec())
        } else {
            Some(ok(b"abcd"))
        }
    });
    let r = &run_load(&Target::new(addr), &params(4, 1.0)).unwrap()[0];
    let e = r.errors.clone().unwrap();
    assert!(e.read > 0, "{e:?}");
    assert!(e.status > 0, "{e:?}");
    assert!(e.parse > 0, "{e:?}");
    assert_eq!(e.connect + e.timeout, 0, "{e:?}");
    let okn = r.iterations.unwrap();
    assert!(okn > 0);
    assert_eq!(r.bytes, okn * 4);
    assert!((r.requests_per_s.unwrap() - okn as f64).abs() < 1e-6);
    assert_eq!(r.lat_us.as_ref().unwrap().samples, okn);
}

#[test]
fn a_stalled_server_gives_timeouts() {
    let addr = fake(|i| {
        if i == 0 {
            return Some(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n".to_vec());
        }
        std::thread::sleep(Duration::from_millis(700));
        Some(ok(b"abcd"))
    });
    let mut p = params(2, 1.5);
    p.timeout_s = 0.3;
    let r = &run_load(&Target::new(addr), &p).unwrap()[0];
    let e = r.errors.clone().unwrap();
    assert!(e.timeout >= 2, "{e:?}");
    assert_eq!(r.iterations, Some(0));
    assert!(
        r.warnings.iter().any(|w| w.id == "no-requests"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn open_loop_charges_a_stall_to_the_requests_it_delayed() {
    // One connection, 100 requests/s: request 10 stalls 500 ms. In closed
    // loop that is one slow sample; in open loop the ~50 requests that
    // were due during the stall count from their due time.
    let stall = |i: u64| {
        if i == 10 {
            std::thread::sleep(Duration::from_millis(500));
        }
        Some(ok(b"abcd"))
    };
    let mut p = params(1, 2.0);
    p.rate = Some(100.0);
    let open = &run_load(&Target::new(fake(stall)), &p).unwrap()[0];
    p.rate = None;
    let closed = &run_load(&Target::new(fake(stall)), &p).unwrap()[0];
    let (o, c) = (open.lat_us.clone().unwrap(), closed.lat_us.clone().unwrap());
    // Open loop: at least 10 % of its ~200 samples are over 100 ms.
    assert!(o.p90 > 100_000.0, "open loop {o:?}");
    assert!(c.p90 < 100_000.0, "closed loop {c:?}");
    assert!(o.max > 400_000.0 && c.max > 400_000.0);
    // The schedule was kept on average.
    let rps = open.requests_per_s.unwrap();
    assert!((80.0..=110.0).contains(&rps), "{rps}");
    // The stall is the server's: the requests it delayed are late, not the
    // generator's send lag, which covers only requests due on an idle
    // connection.
    let lag = open
        .send_lag_us
        .clone()
        .expect("open loop reports its send lag");
    assert!(lag.max < 100_000.0, "{lag:?}");
    assert!(lag.samples + 10 <= open.iterations.unwrap(), "{lag:?}");
    assert!(closed.send_lag_us.is_none(), "{closed:?}");
}

/// wrk2's rule: every open-loop request counts from when it was due, also
/// one due on an idle connection, whose generator-side delay (the timer's
/// granularity, scheduling) is then both in its latency and, apart, in
/// `send_lag_us`. Each such latency is its lag plus the exchange, and the
/// lag covers a subset of the requests, so the latencies' sum and maximum
/// are at least the lags'.
#[test]
fn open_loop_counts_every_request_from_its_due_time() {
    let addr = fake(|_| Some(ok(b"abcd")));
    let mut p = params(2, 1.0);
    p.rate = Some(200.0);
    let r = &run_load(&Target::new(addr), &p).unwrap()[0];
    let bad = r.check();
    assert!(bad.is_empty(), "{bad:?}");
    let lat = r.lat_us.clone().unwrap();
    let lag = r.send_lag_us.clone().expect("send lag in open loop");
    assert!(
        lag.samples > 0 && lag.samples <= r.iterations.unwrap(),
        "{lag:?}"
    );
    // HdrHistogram's 3 significant digits: 0.1 % either way.
    let ge = |a: f64, b: f64| a * 1.002 >= b;
    // Request by request a latency is at least its lag, so the k-th largest
    // of m lags is at most the k-th largest of n latencies: the lags' q
    // quantile is at most the latencies' (n - m + qm) / n quantile. With a
    // few lags fewer than latencies (requests due on a busy connection have
    // none) the same percentile can sit a rank higher among the lags (p99
    // of 199 samples is the 2nd largest, of 200 the 3rd), so each lag
    // percentile is held against the next latency percentile up, where the
    // count of missing lags allows it.
    let (n, m) = (r.iterations.unwrap() as f64, lag.samples as f64);
    let within = |q: f64, up: f64| (n - m + (q * m).ceil()) / n <= up;
    if within(0.5, 0.9) {
        assert!(
            ge(lat.p90, lag.p50),
            "latency {lat:?} below send lag {lag:?}"
        );
    }
    if within(0.9, 0.99) {
        assert!(
            ge(lat.p99, lag.p90),
            "latency {lat:?} below send lag {lag:?}"
        );
    }
    assert!(
        ge(lat.max, lag.p99) && ge(lat.max, lag.max),
        "latency {lat:?} below send lag {lag:?}"
    );
}

/// `cpu_local_pct` is over the measured interval: a warm-up that keeps the
/// generator busy (instant answers) before a measured interval in which it
/// only waits (answers 300 ms late) must not lend the interval its CPU.
#[test]
fn cpu_is_measured_over_the_measured_interval_only() {
    let t0 = std::time::Instant::now();
    let addr = fake(move |_| {
        if t0.elapsed() > Duration::from_millis(1300) {
            std::thread::sleep(Duration::from_millis(300));
        }
        Some(ok(b"abcd"))
    });
    let mut p = params(4, 1.2);
    p.warmup_s = 1.2;
    let r = &run_load(&Target::new(addr), &p).unwrap()[0];
    let cpu = r.cpu_local_pct.expect("a CPU figure");
    assert!(
        cpu < 10.0,
        "{cpu} % of a core while waiting for slow answers"
    );
}

#[test]
fn bad_targets_are_refused_before_the_load() {
    // Nothing listening.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = l.local_addr().unwrap();
    drop(l);
    let e = run_load(&Target::new(gone), &params(1, 1.0)).unwrap_err();
    assert!(matches!(e, LoadError::Target(_)));
    assert!(e.to_string().contains("--http"), "{e}");
    // Not HTTP.
    let ssh = fake(|_| Some(b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec()));
    let e = run_load(&Target::new(ssh), &params(1, 1.0)).unwrap_err();
    assert!(e.to_string().contains("not an HTTP server"), "{e}");
    // An agent with HTTP off.
    let off = fake(|_| {
        Some(b"HTTP/1.1 503 Service Unavailable\r\nx-fabperf-reason: http-off\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let e = run_load(&Target::new(off), &params(1, 1.0)).unwrap_err();
    assert!(e.to_string().contains("fabperf server --http"), "{e}");
    // A size above the agent's limit.
    let small = fake(|_| {
        Some(b"HTTP/1.1 413 Too Large\r\nx-fabperf-reason: size-limit=1000\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let e = run_load(&Target::new(small), &params(1, 1.0)).unwrap_err();
    assert!(e.to_string().contains("limit of 1000 bytes"), "{e}");
    // Bad parameters are a usage error.
    let e = run_load(&Target::new(gone), &params(0, 1.0)).unwrap_err();
    assert!(matches!(e, LoadError::BadParams(_)), "{e}");
}

#[test]
fn a_server_that_closes_every_connection_is_served_by_reconnecting() {
    // HTTP/1.0 style: one response per connection, close-delimited.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabcd");
                let _ = s.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    let r = &run_load(&Target::new(addr), &params(2, 1.0)).unwrap()[0];
    let e = r.errors.clone().unwrap();
    assert_eq!(e.total(), 0, "{e:?}");
    assert!(r.iterations.unwrap() > 10);
    assert_eq!(r.bytes, r.iterations.unwrap() * 4);
}
