//! Each socket test end to end on loopback against an in-process agent,
//! bad parameters, and peers that stall or vanish.
//!
//! Assertions are about accounting and structure, and every record must be
//! self-consistent (`Record::check`). Figures are checked against oracles
//! fabperf does not compute itself: the kernel's pacing of a rate-limited
//! TCP sender (the achieved rate must fall within a band around it) and the
//! loopback interface's counters (the kernel must have carried at least
//! what fabperf counts). Never about speed: the tests must pass on a loaded
//! 2-core machine.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{connect_test, ClientConfig, ErrorCode, Limits, ProtoError, TestKind};
use fabperf_results::{LatencyKind, Record};
use fabperf_sock::*;
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn agent_with(kinds: Vec<Box<dyn TestKind>>, limits: Limits) -> AgentHandle {
    Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits,
        kinds,
        quiet: true,
        identity: None,
    })
    .unwrap()
    .spawn()
}

fn agent() -> AgentHandle {
    agent_with(
        kinds(),
        Limits {
            io_timeout: Duration::from_secs(10),
            ..Limits::default()
        },
    )
}

fn cfg() -> ClientConfig {
    ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_secs(10),
    }
}

fn total(recs: &[Record]) -> &Record {
    recs.iter()
        .find(|r| r.stream.is_none())
        .expect("a total record")
}

/// Every record obeys the record rules.
fn consistent(recs: &[Record]) {
    for r in recs {
        let bad = r.check();
        assert!(bad.is_empty(), "{bad:?} in {r:?}");
    }
}

/// The loopback interface's received bytes and packets (all traffic on
/// `lo`, other tests' included: an upper bound of what one test moved).
fn lo_counters() -> (u64, u64) {
    let read = |f: &str| -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/lo/statistics/{f}"))
            .expect("loopback counters in sysfs")
            .trim()
            .parse()
            .unwrap()
    };
    (read("rx_bytes"), read("rx_packets"))
}

#[test]
fn tcp_bw_forward_one_stream() {
    let a = agent();
    let p = TcpBwParams {
        duration_s: 0.5,
        omit_s: 0.1,
        ..Default::default()
    };
    let recs = run_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r.test, "tcp-bw");
    assert_eq!(r.direction.as_deref(), Some("forward"));
    assert!(r.bytes > 0 && r.bw_gbps.unwrap() > 0.0, "{r:?}");
    assert!(r.duration_s > 0.0);
    assert!(r.cpu_local_pct.is_some() && r.cpu_remote_pct.is_some());
    let (hl, hr) = (r.host_cpu_local.unwrap(), r.host_cpu_remote.unwrap());
    assert!(
        hl.cpus >= 1 && hr.cpus == hl.cpus,
        "one host here: {hl:?} {hr:?}"
    );
    assert!(r.retransmits.is_some(), "TCP_INFO retransmits on loopback");
    assert!(r.iterations.unwrap() > 0);
    assert_eq!(r.remote.as_deref(), Some(a.addr().to_string().as_str()));
}

/// Oracle: the kernel paces each sender to 80 Mbit/s (SO_MAX_PACING_RATE),
/// so each stream's measured rate, and the total, must sit in a band around
/// the paced rate, and the loopback interface must have carried at least
/// the bytes fabperf counted.
#[test]
fn tcp_bw_paced_streams_match_the_kernels_pacing() {
    let a = agent();
    let rate = 80_000_000u64;
    let p = TcpBwParams {
        streams: 3,
        size: 32 << 10,
        duration_s: 1.5,
        omit_s: 0.2,
        direction: Direction::Reverse,
        // send(2)/recv(2) through user buffers, like an application.
        copy: true,
        rate_bps: Some(rate),
        ..Default::default()
    };
    let (b0, _) = lo_counters();
    let recs = run_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    let (b1, _) = lo_counters();
    consistent(&recs);
    assert_eq!(recs.len(), 4, "{recs:?}");
    let t = total(&recs);
    assert_eq!(t.direction.as_deref(), Some("reverse"));
    let per: Vec<&Record> = recs.iter().filter(|r| r.stream.is_some()).collect();
    let mut idx: Vec<u32> = per.iter().map(|r| r.stream.unwrap()).collect();
    idx.sort();
    assert_eq!(idx, vec![0, 1, 2]);
    let band = |got: f64, want: f64, what: &str| {
        assert!(
            got > want * 0.75 && got < want * 1.05,
            "{what}: {:.1} Mbit/s measured, kernel paces {:.1} Mbit/s",
            got / 1e6,
            want / 1e6
        );
    };
    for r in &per {
        band(r.bw_gbps.unwrap() * 1e9, rate as f64, "stream");
    }
    band(t.bw_gbps.unwrap() * 1e9, 3.0 * rate as f64, "total");
    assert!(
        b1 - b0 >= t.bytes,
        "fabperf counted {} bytes, the loopback interface carried {}",
        t.bytes,
        b1 - b0
    );
}

/// The same oracle on the default path (sendfile, receive discarded in the
/// kernel, the receiver woken per 128 KiB or every few milliseconds): a
/// stream paced far below the receiver's low-water mark per wake-up still
/// measures the paced rate.
#[test]
fn tcp_bw_paced_stream_on_the_default_path() {
    let a = agent();
    let rate = 40_000_000u64;
    let p = TcpBwParams {
        duration_s: 1.5,
        omit_s: 0.2,
        rate_bps: Some(rate),
        ..Default::default()
    };
    let recs = run_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let got = total(&recs).bw_gbps.unwrap() * 1e9;
    assert!(
        got > rate as f64 * 0.75 && got < rate as f64 * 1.05,
        "{:.1} Mbit/s measured, kernel paces {:.1} Mbit/s",
        got / 1e6,
        rate as f64 / 1e6
    );
}

#[test]
fn tcp_bw_bidir_has_both_directions() {
    let a = agent();
    let p = TcpBwParams {
        duration_s: 0.5,
        omit_s: 0.0,
        direction: Direction::Bidir,
        window: Some(1 << 20),
        ..Default::default()
    };
    let recs = run_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let dirs: Vec<(Option<&str>, Option<u32>)> = recs
        .iter()
        .map(|r| (r.direction.as_deref(), r.stream))
        .collect();
    assert_eq!(
        dirs,
        vec![
            (Some("bidir"), None),
            (Some("forward"), None),
            (Some("reverse"), None),
            (Some("forward"), Some(0)),
            (Some("reverse"), Some(0)),
        ]
    );
    assert_eq!(recs[0].bytes, recs[1].bytes + recs[2].bytes);
    assert!(recs[1].bytes > 0 && recs[2].bytes > 0);
    // The total's interval is the longer direction's, so its rate is at
    // most the sum of the two.
    let sum = recs[1].bw_gbps.unwrap() + recs[2].bw_gbps.unwrap();
    assert!(recs[0].bw_gbps.unwrap() <= sum * (1.0 + 1e-9));
    assert!(recs[0].duration_s >= recs[1].duration_s.max(recs[2].duration_s) - 1e-12);
}

/// A prepared test starts when it is told to, on both ends (the agent's
/// senders too), and its records carry the measured interval in Unix time
/// and, when asked, the bytes received over time.
#[test]
fn tcp_bw_prepared_test_starts_at_the_given_instant_on_both_ends() {
    let a = agent();
    let p = TcpBwParams {
        duration_s: 0.4,
        omit_s: 0.1,
        direction: Direction::Bidir,
        window: Some(1 << 20),
        ..Default::default()
    };
    let prepared = prepare_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    // Set up: nothing flows until the start, 0.5 s from now.
    std::thread::sleep(Duration::from_millis(100));
    let start = fabperf_proto::Start::after(0.5, true);
    let want = fabperf_results::WallClock::now().unix(start.at);
    let recs = prepared.run(start).unwrap();
    consistent(&recs);
    for r in recs
        .iter()
        .filter(|r| r.stream.is_none() && r.direction.as_deref() != Some("bidir"))
    {
        let i = r.interval.as_ref().expect("a measured interval");
        let sent = i.sent_from_s.expect("the sender's start");
        // Both ends started at the instant (the agent's senders included).
        assert!(
            (sent - want).abs() < 0.05,
            "{:?} started {:.3} s off the start",
            r.direction,
            sent - want
        );
        // The interval begins after the warm-up and lasts the duration.
        assert!(i.start_s >= want + 0.1 - 0.01, "{i:?}");
        assert!(
            (i.len_s() - r.duration_s).abs() < 1e-6,
            "{i:?} vs {}",
            r.duration_s
        );
        let pr = i.progress.as_ref().expect("progress when asked for");
        // The counts hold the interval's bytes.
        let counted = pr.bytes_between(i.start_s, i.end_s);
        assert!(
            (counted - r.bytes as f64).abs() <= r.bytes as f64 * 0.02 + 65536.0,
            "progress says {counted}, the record {}",
            r.bytes
        );
    }
    // Without a start of its own a test starts at once, without progress.
    let recs = run_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    let i = total(&recs).interval.as_ref().unwrap();
    assert!(i.progress.is_none());
}

/// A hostile client's start delay (an hour, or not a number) is refused
/// by the agent as a bad request, not slept on.
#[test]
fn tcp_bw_agent_refuses_a_start_delay_it_cannot_honour() {
    use std::io::Write;
    let a = agent();
    for bad in [json!(3600.0), json!(-1.0), json!("soon")] {
        let p = TcpBwParams {
            duration_s: 0.2,
            omit_s: 0.0,
            ..Default::default()
        };
        let (mut ctl, info) = connect_test(
            a.addr(),
            &cfg(),
            "tcp-bw",
            serde_json::to_value(&p).unwrap(),
        )
        .unwrap();
        let cookie = info["cookie"].as_str().unwrap().to_string();
        let mut d = fabperf_proto::connect_data(a.addr(), &cookie, Duration::from_secs(5)).unwrap();
        d.write_all(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        let ready: serde_json::Value = ctl.recv_test("ready").unwrap();
        assert_eq!(ready["t"], "ready");
        ctl.send_test(&json!({"t": "go", "in_s": bad})).unwrap();
        let t0 = Instant::now();
        match ctl.recv_test::<serde_json::Value>("the answer") {
            // Out of range: a bad request; not a number: a malformed message.
            Err(ProtoError::Remote { code, .. }) => assert!(
                matches!(code, ErrorCode::BadRequest | ErrorCode::BadFrame),
                "{bad}: {code:?}"
            ),
            other => panic!("{bad}: {other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
}

/// A start delay no agent accepts is refused before anything is sent.
#[test]
fn tcp_bw_refuses_an_absurd_start_delay() {
    let a = agent();
    let p = TcpBwParams {
        duration_s: 0.2,
        omit_s: 0.0,
        ..Default::default()
    };
    let prepared = prepare_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    let start = fabperf_proto::Start {
        at: Instant::now() + Duration::from_secs(3600),
        progress: false,
    };
    let e = prepared.run(start).unwrap_err().to_string();
    assert!(e.contains("start delay"), "{e}");
}

#[test]
fn tcp_bw_zerocopy_runs() {
    let a = agent();
    let p = TcpBwParams {
        duration_s: 0.3,
        omit_s: 0.0,
        zerocopy: true,
        ..Default::default()
    };
    let recs = run_tcp_bw(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    assert!(recs[0].bytes > 0);
}

#[test]
fn tcp_lat_counts_every_sample() {
    let a = agent();
    let p = TcpLatParams {
        iterations: Some(3000),
        warmup: 100,
        ..Default::default()
    };
    let recs = run_tcp_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let l = r.lat_us.as_ref().unwrap();
    assert_eq!(l.samples, 3000);
    // The serialized histogram holds every sample.
    let h = fabperf_results::LatencyHistogram::from_base64(r.lat_hist.as_ref().unwrap(), l.kind)
        .unwrap();
    assert_eq!(h.len(), 3000);
    assert_eq!(r.iterations, Some(3000));
    assert_eq!(l.kind, LatencyKind::HalfRtt);
    assert!(l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.max, "{l:?}");
    // Nothing to warn about but, on a loaded machine, a slow clock read,
    // and a run too short for /proc/stat's ticks (no host CPU figure).
    assert!(
        r.warnings
            .iter()
            .all(|w| w.id == "slow-clock" || w.id == "host-cpu-unknown"),
        "{:?}",
        r.warnings
    );
    assert_eq!(r.bytes, 3000 * 64 * 2);

    let p = TcpLatParams {
        iterations: Some(500),
        warmup: 0,
        rtt: true,
        size: 4000,
        ..Default::default()
    };
    let recs = run_tcp_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    assert_eq!(r.lat_us.as_ref().unwrap().kind, LatencyKind::Rtt);
    assert_eq!(r.lat_us.as_ref().unwrap().samples, 500);
}

#[test]
fn tcp_lat_busy_poll_and_duration() {
    let a = agent();
    let p = TcpLatParams {
        duration_s: 0.3,
        busy_poll: true,
        warmup: 10,
        ..Default::default()
    };
    let recs = run_tcp_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let l = r.lat_us.as_ref().unwrap();
    assert!(l.samples > 0);
    assert_eq!(r.iterations, Some(l.samples));
}

#[test]
fn tcp_lat_warmup_never_outlasts_the_measurement() {
    // Ten million warm-up round trips would take minutes; the warm-up
    // stops at the measurement's length (0.2 s) and says so, and the
    // agent's echo count still matches the client's.
    let a = agent();
    let p = TcpLatParams {
        duration_s: 0.2,
        warmup: 10_000_000,
        ..Default::default()
    };
    let recs = run_tcp_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let ids: Vec<&str> = r.warnings.iter().map(|w| w.id.as_str()).collect();
    assert!(ids.contains(&"warmup-cut"), "{ids:?}");
    assert!(!ids.contains(&"count-mismatch"), "{:?}", r.warnings);
    assert!(r.lat_us.as_ref().unwrap().samples > 0);
}

fn udp_consistent(r: &Record) {
    consistent(std::slice::from_ref(r));
    let u = r.udp.as_ref().unwrap();
    assert_eq!(u.sent, u.received + u.lost, "{u:?}");
    // Loopback gives kernel receive timestamps: jitter is known.
    assert!(u.received < 2 || u.jitter_us.is_some(), "{u:?}");
    assert_eq!(r.bytes, u.received * r.size);
}

/// A rate-limited sender: 100 Mbit/s offered, so the receiver's rate must
/// come out in a band around it, and the loopback interface must have
/// carried at least as many datagrams as the receiver counted.
#[test]
fn udp_bw_forward_at_a_rate() {
    let a = agent();
    let rate = 100_000_000u64;
    let p = UdpBwParams {
        rate_bps: Some(rate),
        duration_s: 1.0,
        omit_s: 0.1,
        ..Default::default()
    };
    let (_, p0) = lo_counters();
    let recs = run_udp_bw(a.addr(), &cfg(), &p).unwrap();
    let (_, p1) = lo_counters();
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.direction.as_deref(), Some("forward"));
    udp_consistent(r);
    let u = r.udp.as_ref().unwrap();
    assert!(u.sent > 100, "{u:?}");
    let got = r.bw_gbps.unwrap() * 1e9;
    // The receiver's interval starts at its first datagram after the
    // warm-up: a scheduling stall of a loaded machine at that boundary
    // shortens it by a few per cent against the sender's paced interval.
    assert!(
        got > rate as f64 * 0.8 && got < rate as f64 * 1.10,
        "{:.1} Mbit/s received of {:.1} Mbit/s offered ({u:?})",
        got / 1e6,
        rate as f64 / 1e6
    );
    assert!(
        p1 - p0 >= u.received,
        "lo saw {} packets, fabperf counted {}",
        p1 - p0,
        u.received
    );
    assert!(r.cpu_local_pct.is_some() && r.cpu_remote_pct.is_some());
    assert!(r.host_cpu_local.is_some() && r.host_cpu_remote.is_some());
}

#[test]
fn udp_bw_reverse_and_bidir() {
    let a = agent();
    let p = UdpBwParams {
        rate_bps: Some(50_000_000),
        duration_s: 0.4,
        omit_s: 0.0,
        direction: Direction::Reverse,
        size: 1000,
        ..Default::default()
    };
    let recs = run_udp_bw(a.addr(), &cfg(), &p).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].direction.as_deref(), Some("reverse"));
    udp_consistent(&recs[0]);
    assert!(recs[0].udp.as_ref().unwrap().received > 0);

    let p = UdpBwParams {
        direction: Direction::Bidir,
        ..p
    };
    let recs = run_udp_bw(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let dirs: Vec<&str> = recs
        .iter()
        .map(|r| r.direction.as_deref().unwrap())
        .collect();
    assert_eq!(dirs, vec!["bidir", "forward", "reverse"]);
    udp_consistent(&recs[1]);
    udp_consistent(&recs[2]);
    assert_eq!(recs[0].bytes, recs[1].bytes + recs[2].bytes);
}

#[test]
fn udp_bw_max_rate_runs() {
    let a = agent();
    let p = UdpBwParams {
        rate_bps: None,
        duration_s: 0.3,
        omit_s: 0.1,
        ..Default::default()
    };
    let r = &run_udp_bw(a.addr(), &cfg(), &p).unwrap()[0];
    udp_consistent(r);
    assert!(r.udp.as_ref().unwrap().sent > 0);
}

/// The receiver's accounting, end to end: a sender that drops, swaps and
/// duplicates datagrams. Reordered datagrams must not count as lost.
#[test]
fn udp_accounting_with_a_misbehaving_sender() {
    let a = agent();
    let n: u64 = 2000;
    let dropped: Vec<u64> = vec![5, 77, 500, 501, 502, 1999];
    let mut script: Vec<u64> = (0..n).filter(|s| !dropped.contains(s)).collect();
    // Swap 10 adjacent pairs: each swap delivers one datagram late.
    let mut swaps = 0;
    let mut i = 10;
    while swaps < 10 {
        script.swap(i, i + 1);
        swaps += 1;
        i += 97;
    }
    // Duplicate 7 already-sent datagrams (one twice), well after the swaps.
    for (k, s) in [3u64, 3, 40, 600, 800, 900, 10].iter().enumerate() {
        let at = 1000 + k * 100;
        script.insert(at, *s);
    }
    // Move one datagram far back (arrives 1000 places late).
    let pos = script.iter().position(|&s| s == 300).unwrap();
    let s = script.remove(pos);
    script.insert(pos + 1000, s);

    let p = UdpBwParams {
        size: 200,
        rate_bps: Some(20_000_000),
        duration_s: 1.0,
        omit_s: 0.0,
        ..Default::default()
    };
    let recs = test_support::run_udp_bw_scripted(a.addr(), &cfg(), &p, &script, n).unwrap();
    consistent(&recs);
    let u = recs[0].udp.as_ref().unwrap();
    assert_eq!(u.sent, n);
    assert_eq!(u.duplicates, 7, "{u:?}");
    assert_eq!(u.lost, dropped.len() as u64, "{u:?}");
    assert_eq!(u.received, n - dropped.len() as u64);
    assert_eq!(u.reordered, Some(11), "{u:?}");
    assert_eq!(u.stale, Some(0), "{u:?}");
    assert!((u.loss_pct.unwrap() - 100.0 * 6.0 / 2000.0).abs() < 1e-9);
}

#[test]
fn udp_lat_counts_every_probe() {
    let a = agent();
    let p = UdpLatParams {
        iterations: Some(2000),
        warmup: 50,
        ..Default::default()
    };
    let recs = run_udp_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let u = r.udp.as_ref().unwrap();
    assert_eq!(u.sent, 2000);
    // udp-lat's own keys; udp-bw's are absent.
    assert!(u.late.is_some() && u.ipdv_us.is_some(), "{u:?}");
    assert!(u.reordered.is_none() && u.jitter_us.is_none(), "{u:?}");
    assert_eq!(u.sent, u.received + u.lost);
    assert_eq!(r.lat_us.as_ref().unwrap().samples, u.received);
    assert_eq!(r.lat_us.as_ref().unwrap().kind, LatencyKind::HalfRtt);
    assert_eq!(r.op.as_deref(), Some("ping-pong"));
}

/// A fake `udp-lat` agent speaking the wire format by hand: it drops every
/// 10th probe and answers every 7th only after the probe timeout (and
/// twice), so the client must count those lost or late and never take a
/// stale reply for the current probe.
mod lossy {
    use fabperf_proto::{Msg, ServeCtx, ServeError, TestKind};
    use serde_json::json;
    use std::time::{Duration, Instant};

    pub struct LossyEcho;

    fn seq(b: &[u8]) -> u64 {
        u64::from_be_bytes(b[16..24].try_into().unwrap())
    }

    impl TestKind for LossyEcho {
        fn name(&self) -> &'static str {
            "udp-lat"
        }
        fn serve(&self, ctx: &mut ServeCtx<'_>, _p: serde_json::Value) -> Result<(), ServeError> {
            // The agent's UDP door holds the port while no UDP test runs.
            let (sock, _door) = ctx
                .data
                .udp_socket(ctx.local())
                .map_err(ServeError::failed)?;
            let session: u32 = 0x1234_5678;
            let cookie = fabperf_proto::auth::to_hex(&ctx.data.issue());
            ctx.ctl.send(&Msg::Accept {
                info: json!({ "session": session, "cookie": cookie }),
            })?;
            let mut buf = [0u8; 2048];
            let (_, from) = sock.recv_from(&mut buf).map_err(ServeError::failed)?;
            sock.connect(from).map_err(ServeError::failed)?;
            ctx.ctl.send_test(&json!({"t": "seen"}))?;
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            let mut held: Vec<(Instant, Vec<u8>)> = Vec::new();
            let stream = ctx.ctl.stream().try_clone().unwrap();
            stream.set_nonblocking(true).unwrap();
            loop {
                let mut peek = [0u8; 1];
                match stream.peek(&mut peek) {
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(ServeError::failed(e)),
                }
                let now = Instant::now();
                held.retain(|(at, d)| {
                    if now >= *at {
                        let _ = sock.send(d);
                        let _ = sock.send(d);
                        false
                    } else {
                        true
                    }
                });
                let n = match sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(_) => continue,
                };
                if n < 32 || buf[4] != 3 {
                    continue;
                }
                buf[4] = 4;
                let s = seq(&buf);
                if s % 10 == 9 {
                    continue;
                }
                if s % 7 == 6 {
                    held.push((now + Duration::from_millis(60), buf[..n].to_vec()));
                    continue;
                }
                sock.send(&buf[..n]).map_err(ServeError::failed)?;
            }
            stream.set_nonblocking(false).unwrap();
            let _done: serde_json::Value = ctx.ctl.recv_test("done")?;
            ctx.ctl
                .send_test(&json!({"t": "report", "echoed": 0, "cpu_s": 0.0, "secs": 1.0}))?;
            Ok(())
        }
    }
}

#[test]
fn udp_lat_lost_and_late_replies() {
    let a = agent_with(vec![Box::new(lossy::LossyEcho)], Limits::default());
    let p = UdpLatParams {
        iterations: Some(140),
        warmup: 0,
        probe_timeout_ms: 20,
        ..Default::default()
    };
    let recs = run_udp_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let u = r.udp.as_ref().unwrap();
    // Of 140 probes (seq 0..139): 14 dropped (s%10==9) and the s%7==6
    // ones not dropped (20 - 2 that are also s%10==9) answered too late.
    let dropped = (0..140u64).filter(|s| s % 10 == 9).count() as u64;
    let late = (0..140u64).filter(|s| s % 7 == 6 && s % 10 != 9).count() as u64;
    assert_eq!(u.sent, 140);
    assert_eq!(u.lost, dropped + late, "{u:?}");
    assert_eq!(u.received, 140 - dropped - late);
    assert_eq!(r.lat_us.as_ref().unwrap().samples, u.received);
    // Every held reply arrives (twice) later, while another probe is
    // waiting: late the first time, duplicate the second. The very last
    // held replies may come after the client stopped listening.
    let got_late = u.late.unwrap();
    assert!(got_late <= late && got_late + 2 >= late, "{u:?}");
    assert!(r.has_warning("probes-lost"));
    assert!(u.duplicates <= late && u.duplicates + 2 >= late, "{u:?}");
    // No sample can be a stale reply: all are far below the 60 ms hold.
    assert!(r.lat_us.as_ref().unwrap().max < 30_000.0);
}

#[test]
fn bad_params_are_rejected_on_both_sides() {
    let a = agent();
    // Client side: refused before anything is sent.
    let e = run_tcp_bw(
        a.addr(),
        &cfg(),
        &TcpBwParams {
            streams: 0,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, SockError::BadParams(_)), "{e}");
    assert!(e.to_string().contains("streams"), "{e}");
    let e = run_udp_bw(
        a.addr(),
        &cfg(),
        &UdpBwParams {
            size: 70000,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("65507"), "{e}");
    let e = run_udp_lat(
        a.addr(),
        &cfg(),
        &UdpLatParams {
            size: 10,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, SockError::BadParams(_)), "{e}");
    let e = run_tcp_lat(
        a.addr(),
        &cfg(),
        &TcpLatParams {
            iterations: Some(0),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, SockError::BadParams(_)), "{e}");

    // Agent side: a client that skips validation still gets a refusal.
    for (test, params) in [
        ("tcp-bw", json!({"streams": 0})),
        ("tcp-bw", json!({"bogus": 1})),
        ("tcp-lat", json!({"size": 0})),
        ("udp-bw", json!({"size": 16})),
        ("udp-lat", json!({"probe_timeout_ms": 0})),
    ] {
        match connect_test(a.addr(), &cfg(), test, params.clone()) {
            Err(ProtoError::Remote { code, message }) => {
                assert_eq!(code, ErrorCode::BadRequest, "{test} {params}: {message}")
            }
            Err(e) => panic!("{test}: {e}"),
            Ok(_) => panic!("{test} {params} was accepted"),
        }
    }
    // The agent still serves after the refusals.
    let r = run_tcp_lat(
        a.addr(),
        &cfg(),
        &TcpLatParams {
            iterations: Some(10),
            warmup: 0,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r[0].lat_us.as_ref().unwrap().samples, 10);
}

#[test]
fn agent_limits_apply() {
    let a = agent_with(
        kinds(),
        Limits {
            max_streams: 2,
            max_duration: Duration::from_secs(5),
            max_memory: 1 << 20,
            ..Limits::default()
        },
    );
    let cases: Vec<(&str, serde_json::Value)> = vec![
        ("tcp-bw", json!({"streams": 3})),
        ("tcp-bw", json!({"duration_s": 10.0})),
        ("tcp-bw", json!({"size": 4194304})),
        ("udp-bw", json!({"duration_s": 30.0})),
        ("tcp-lat", json!({"duration_s": 60.0})),
        ("udp-lat", json!({"duration_s": 60.0})),
    ];
    for (test, params) in cases {
        match connect_test(a.addr(), &cfg(), test, params.clone()) {
            Err(ProtoError::Remote { code, .. }) => {
                assert_eq!(code, ErrorCode::LimitExceeded, "{test} {params}")
            }
            Err(e) => panic!("{test}: {e}"),
            Ok(_) => panic!("{test} {params} was accepted"),
        }
    }
}

/// A `tcp-bw` agent that accepts the data connections, says ready, then
/// never reads: the client's sends block and must fail within its timeout.
mod stalled {
    use fabperf_proto::{Msg, ServeCtx, ServeError, TestKind};
    use serde_json::json;
    use std::time::Duration;

    pub struct Stalled;

    impl TestKind for Stalled {
        fn name(&self) -> &'static str {
            "tcp-bw"
        }
        fn serve(&self, ctx: &mut ServeCtx<'_>, _p: serde_json::Value) -> Result<(), ServeError> {
            let w = ctx.data.register(1);
            ctx.ctl.send(&Msg::Accept {
                info: json!({"cookie": w.cookie_hex()}),
            })?;
            let s = w.accept(Duration::from_secs(10))?;
            ctx.ctl.send_test(&json!({"t": "ready"}))?;
            // Hold the connection without reading, until the client gives up
            // (its start comes on the control connection: not an end).
            while ctx
                .ctl
                .recv_within(Duration::from_secs(60), "anything")
                .is_ok()
            {}
            drop(s);
            Ok(())
        }
    }
}

#[test]
fn stalled_agent_fails_the_client_within_its_timeout() {
    let a = agent_with(vec![Box::new(stalled::Stalled)], Limits::default());
    let c = ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_secs(2),
    };
    let p = TcpBwParams {
        duration_s: 30.0,
        omit_s: 0.0,
        ..Default::default()
    };
    let t = Instant::now();
    let e = run_tcp_bw(a.addr(), &c, &p).unwrap_err();
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "took {took:?} for a 2 s timeout: {e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("timeout") || msg.contains("stalled"), "{msg}");
}

/// A client that vanishes in the middle of each test kind: the agent must
/// notice and serve the next client.
#[test]
fn vanished_client_does_not_block_the_agent() {
    let a = agent_with(
        kinds(),
        Limits {
            io_timeout: Duration::from_secs(3),
            ..Limits::default()
        },
    );
    // tcp-bw: open the data connection, then drop everything.
    {
        let (ctl, info) =
            connect_test(a.addr(), &cfg(), "tcp-bw", json!({"duration_s": 30.0})).unwrap();
        let cookie = info["cookie"].as_str().unwrap().to_string();
        let mut d = fabperf_proto::connect_data(a.addr(), &cookie, Duration::from_secs(5)).unwrap();
        std::io::Write::write_all(&mut d, &[0u8; 8]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(d);
        drop(ctl);
    }
    // udp-bw: start and vanish before the UDP hello. The agent may still be
    // noticing that the tcp-bw client is gone: it answers `busy` until then.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match connect_test(a.addr(), &cfg(), "udp-bw", json!({"duration_s": 30.0})) {
            Ok(_) => break,
            Err(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("{e}"),
        }
    }
    // Both are cleaned up; the next client runs (retry while the agent
    // finishes noticing: it answers `busy` until then).
    let addr: SocketAddr = a.addr();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match run_tcp_lat(
            addr,
            &cfg(),
            &TcpLatParams {
                iterations: Some(100),
                warmup: 0,
                ..Default::default()
            },
        ) {
            Ok(r) => {
                assert_eq!(r[0].lat_us.as_ref().unwrap().samples, 100);
                break;
            }
            Err(SockError::Proto(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            })) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("{e}"),
        }
    }
}
