//! `udp-lat`: request/response over UDP with loss-tolerant timeouts.
//!
//! The client sends one probe (sequence number + timestamp) and waits for
//! its reply for at most the probe timeout; a probe without a reply by then
//! is counted lost and the next one goes out. A reply that turns up after
//! its probe was given up is counted late (`udp.late`) and is never
//! mistaken for the reply to the current probe, because replies are
//! matched by sequence number. The delay variation between consecutive
//! answered probes is `udp.ipdv_us`. If no reply at all arrives for the client's
//! `--timeout`, the agent is declared gone.

use crate::cpu::{set_host_cpu, set_thread_cpu, HostReport};
use crate::error::SockError;
use crate::net;
use crate::params::UdpLatParams;
use crate::udp::{self, Header, Seen, SeenWindow, T_PROBE, T_REPLY};
use fabperf_proto::cpu::ThreadCpu;
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{connect_test, ClientConfig, ErrorCode, Msg, ServeCtx, ServeError, TestKind};
use fabperf_results::{LatencyHistogram, LatencyKind, Record, Side, Transport, UdpStats, Warning};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const LAT_WINDOW: u64 = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct AcceptInfo {
    session: u32,
    /// The test's cookie (hex): its UDP hello carries it.
    cookie: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum LatMsg {
    Seen,
    Done {
        probes: u64,
    },
    Report {
        echoed: u64,
        cpu_s: Option<f64>,
        secs: f64,
        #[serde(default)]
        host: Box<HostReport>,
    },
}

#[derive(Default)]
struct Counts {
    sent: u64,
    received: u64,
    lost: u64,
    late: u64,
    duplicates: u64,
}

enum Probe {
    Reply(Duration),
    Lost,
}

struct Prober<'a> {
    sock: &'a UdpSocket,
    session: u32,
    probe_timeout: Duration,
    peer_timeout: Duration,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
    seen: SeenWindow,
    base: Instant,
    last_reply: Instant,
}

impl Prober<'_> {
    fn probe(&mut self, seq: u64, c: &mut Counts) -> Result<Probe, SockError> {
        let fd = self.sock.as_fd();
        let t0 = Instant::now();
        Header {
            kind: T_PROBE,
            flags: 0,
            session: self.session,
            seq,
            ts_ns: t0.duration_since(self.base).as_nanos() as u64,
        }
        .write(&mut self.buf);
        loop {
            match net::send(fd, &self.buf, 0) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                Err(e) => return Err(SockError::data("udp-lat probe", e)),
            }
        }
        c.sent += 1;
        let deadline = t0 + self.probe_timeout;
        loop {
            match net::recv(fd, &mut self.rbuf, 0) {
                Ok(n) => {
                    let now = Instant::now();
                    let Some(h) = Header::read(&self.rbuf[..n]) else {
                        continue;
                    };
                    if h.session != self.session || h.kind != T_REPLY {
                        continue;
                    }
                    if h.seq == seq {
                        self.seen.mark(seq);
                        self.last_reply = now;
                        c.received += 1;
                        return Ok(Probe::Reply(now.duration_since(t0)));
                    }
                    if h.seq < seq {
                        // A reply to a probe already given up (late) or
                        // answered (duplicate): never the current one.
                        match self.seen.mark(h.seq) {
                            Seen::Duplicate => c.duplicates += 1,
                            _ => c.late += 1,
                        }
                    }
                    if now >= deadline {
                        break;
                    }
                }
                Err(e) if net::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                Err(e) => return Err(SockError::data("udp-lat reply", e)),
            }
        }
        c.lost += 1;
        if self.last_reply.elapsed() > self.peer_timeout {
            return Err(SockError::PeerGone(format!(
                "no UDP reply from the agent for {:.1} s: it stopped, or the path drops UDP",
                self.peer_timeout.as_secs_f64()
            )));
        }
        Ok(Probe::Lost)
    }
}

/// Client side of `udp-lat`.
pub fn run_udp_lat(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &UdpLatParams,
) -> Result<Vec<Record>, SockError> {
    p.validate().map_err(SockError::BadParams)?;
    let params = serde_json::to_value(p).expect("params serialize");
    let started_at = fabperf_results::now_rfc3339();
    let sock = udp::client_socket(addr)?;
    udp::size_buffers(&sock, 1 << 20);
    let local = sock.local_addr().ok();
    let setup = EndSetup::for_socket(Side::Client, local.map(|a| a.ip()), &p.cpu)
        .map_err(SockError::BadParams)?;
    let (mut ctl, info) = connect_test(addr, cfg, "udp-lat", params)?;
    let info: AcceptInfo = serde_json::from_value(info)
        .map_err(|e| SockError::Protocol(format!("agent's accept info: {e}")))?;
    let cookie = udp::cookie_of(&info.cookie)?;
    match udp::client_hello::<LatMsg>(&sock, &mut ctl, info.session, &cookie, cfg.timeout, addr)? {
        LatMsg::Seen => {}
        other => return Err(SockError::Protocol(format!("expected seen, got {other:?}"))),
    }
    let probe_timeout = Duration::from_millis(p.probe_timeout_ms);
    // Each receive waits at most the probe timeout (bounded, no per-probe
    // setsockopt).
    sock.set_read_timeout(Some(probe_timeout))
        .map_err(|e| SockError::data("setting the UDP receive timeout", e))?;
    let kind = if p.rtt {
        LatencyKind::Rtt
    } else {
        LatencyKind::HalfRtt
    };
    let mut hist = LatencyHistogram::new(kind);
    // This thread probes: pinned for the test (its affinity comes back after), its buffers
    // placed by it.
    let pinned = setup.pin();
    let now = Instant::now();
    let mut pr = Prober {
        sock: &sock,
        session: info.session,
        probe_timeout,
        peer_timeout: cfg.timeout,
        buf: vec![0x5au8; p.size as usize],
        rbuf: vec![0u8; 65536],
        seen: SeenWindow::with_window(LAT_WINDOW),
        base: now,
        last_reply: now,
    };
    let mut c = Counts::default();
    let mut ipdv_ns = 0.0f64;
    let mut ipdv_n = 0u64;
    let div = if p.rtt { 1 } else { 2 };
    explain::first_touch(&mut pr.rbuf);
    let res = (|| -> Result<(f64, Option<f64>, HostReport), SockError> {
        let mut seq = 0u64;
        for _ in 0..p.warmup {
            pr.probe(seq, &mut c)?;
            seq += 1;
        }
        c = Counts::default();
        let host = setup.meter();
        let cpu0 = ThreadCpu::start();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs_f64(p.duration_s);
        let limit = p.iterations.unwrap_or(u64::MAX);
        let mut prev: Option<u64> = None;
        while c.sent < limit {
            if let Probe::Reply(rtt) = pr.probe(seq, &mut c)? {
                let ns = rtt.as_nanos() as u64;
                hist.record_rtt_ns(ns);
                let v = ns / div;
                if let Some(pv) = prev {
                    let d = v.abs_diff(pv) as f64;
                    ipdv_ns += (d - ipdv_ns) / 16.0;
                    ipdv_n += 1;
                }
                prev = Some(v);
            }
            seq += 1;
            if p.iterations.is_none() && Instant::now() >= end {
                break;
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu0.used_secs();
        let pin_errors: Vec<String> = pinned.error.iter().cloned().collect();
        let report = setup.report(Some(&host), explain::buffer_node(&pr.buf), &pin_errors, "");
        Ok((secs, cpu, report))
    })();
    drop(pinned);
    let (secs, cpu, host) = match res {
        Ok(v) => v,
        Err(e) => {
            ctl.send_error(ErrorCode::TestFailed, &format!("client: {e}"));
            return Err(e);
        }
    };
    ctl.send_test(&LatMsg::Done { probes: c.sent })?;
    let (_echoed, rcpu, rsecs, rhost) = match ctl.recv_test::<LatMsg>("the agent's report")? {
        LatMsg::Report {
            echoed,
            cpu_s,
            secs,
            host,
        } => (echoed, cpu_s, secs, *host),
        other => {
            return Err(SockError::Protocol(format!(
                "expected report, got {other:?}"
            )))
        }
    };
    let _ = ctl.send(&Msg::Bye);
    let mut r = Record::new("udp-lat", Transport::Udp, p.size, 1);
    r.started_at = started_at;
    r.op = Some("ping-pong".into());
    r.local = local.map(|a| a.to_string());
    r.remote = Some(addr.to_string());
    r.set_throughput(c.received * p.size * 2, secs, Some(c.received));
    r.set_latency(&hist);
    if r.bw_gbps.is_none() {
        r.warn(Warning::NoInterval {
            what: "the test ended before a probe was sent".into(),
        });
    }
    set_thread_cpu(&mut r, Side::Client, cpu, secs);
    set_thread_cpu(&mut r, Side::Agent, rcpu, rsecs);
    set_host_cpu(&mut r, Side::Client, &host.result());
    set_host_cpu(&mut r, Side::Agent, &rhost.result());
    r.udp = Some(UdpStats {
        sent: c.sent,
        received: c.received,
        lost: c.lost,
        duplicates: c.duplicates,
        loss_pct: UdpStats::loss_pct_of(c.lost, c.sent),
        late: Some(c.late),
        ipdv_us: (ipdv_n > 0).then_some(ipdv_ns / 1000.0),
        ..Default::default()
    });
    if c.lost > 0 {
        r.warn(Warning::ProbesLost {
            lost: c.lost,
            sent: c.sent,
            timeout_ms: p.probe_timeout_ms,
            late: c.late,
        });
    }
    if let Some(text) = fabperf_proto::clock::slow_clock_warning() {
        r.warn(Warning::SlowClock { text });
    }
    if c.received < 1000 {
        r.warn(Warning::FewSamples {
            count: c.received,
            what: "replies".into(),
            hint: "tail percentiles (p99.9 and up) need many more samples".into(),
        });
    }
    let mut recs = vec![r];
    explain::apply(&mut recs, &host, &rhost, &explain::TestKindInfo::default());
    Ok(recs)
}

/// Agent side of `udp-lat`.
pub struct UdpLat;

/// Echo probes until `stop`; `last_probe` holds the milliseconds since
/// `t0` at which the last probe arrived (for the stall check).
fn echo(
    sock: &UdpSocket,
    session: u32,
    stop: &AtomicBool,
    t0: Instant,
    last_probe: &AtomicU64,
    setup: &EndSetup,
) -> io::Result<(u64, Option<f64>, f64, HostReport)> {
    let fd = sock.as_fd();
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let pinned = setup.pin();
    let mut buf = vec![0u8; 65536];
    explain::first_touch(&mut buf);
    let mut echoed = 0u64;
    let host = setup.meter();
    let cpu0 = ThreadCpu::start();
    while !stop.load(Ordering::Relaxed) {
        match net::recv(fd, &mut buf, 0) {
            Ok(n) => {
                if let Some(h) = Header::read(&buf[..n]) {
                    if h.session == session && h.kind == T_PROBE {
                        last_probe.store(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
                        buf[4] = T_REPLY;
                        match net::send(fd, &buf[..n], 0) {
                            Ok(_) => echoed += 1,
                            // A full queue or a vanished client loses this
                            // reply; the client counts it lost.
                            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
            Err(e) if net::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(e),
        }
    }
    let cpu = cpu0.used_secs();
    let secs = t0.elapsed().as_secs_f64();
    let pin_errors: Vec<String> = pinned.error.iter().cloned().collect();
    Ok((
        echoed,
        cpu,
        secs,
        setup.report(Some(&host), explain::buffer_node(&buf), &pin_errors, ""),
    ))
}

impl TestKind for UdpLat {
    fn name(&self) -> &'static str {
        "udp-lat"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: UdpLatParams = fabperf_proto::decode_params("udp-lat", params)?;
        p.validate().map_err(ServeError::bad_request)?;
        let io = ctx.limits.io_timeout;
        if p.iterations.is_none() {
            ctx.limits.check_duration(p.duration_s)?;
            // The warm-up probes may each wait a probe timeout; the agent's
            // limit bounds the whole (iteration mode keeps that bound).
            let warm = Duration::from_millis(p.probe_timeout_ms)
                .checked_mul(u32::try_from(p.warmup).unwrap_or(u32::MAX))
                .unwrap_or(Duration::MAX);
            let length = Duration::from_secs_f64(p.duration_s).saturating_add(warm);
            ctx.clock.arm(length.min(ctx.limits.max_duration));
        }
        let setup = EndSetup::for_socket(Side::Agent, Some(ctx.local().ip()), &p.cpu)
            .map_err(ServeError::bad_request)?;
        let (sock, _door, cookie) = udp::agent_socket(ctx)?;
        udp::size_buffers(&sock, 1 << 20);
        let session = udp::new_session();
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                session,
                cookie: udp::cookie_hex(&cookie),
            })
            .expect("accept info serializes"),
        })?;
        udp::agent_wait_hello(&sock, session, &cookie, io, ctx)?;
        ctx.ctl.send_test(&LatMsg::Seen)?;
        // The client reports within the test's length (warm-up probes may
        // each wait a probe timeout) plus the I/O timeout; it can never
        // keep the agent longer than the agent's own duration limit.
        // The agent's clock ends the test at its length plus a grace, by
        // shutting the control connection down (which ends the loop below).
        // A client that stops probing (stalled, or gone without closing the
        // control connection) is dropped after this long.
        let idle_limit = io.max(Duration::from_millis(p.probe_timeout_ms).saturating_mul(2));
        let clock = ctx.clock;
        let stop = AtomicBool::new(false);
        let last_probe = AtomicU64::new(0);
        let t0 = Instant::now();
        let ctl = &mut *ctx.ctl;
        let (res, done) = std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .name("fabperf-udp-echo".into())
                .spawn_scoped(s, || echo(&sock, session, &stop, t0, &last_probe, &setup))
                .expect("spawning the UDP echo thread");
            let fd = ctl.stream().as_fd();
            let done = loop {
                match net::wait_readable(fd, Duration::from_millis(100)) {
                    Ok(true) => {
                        break ctl
                            .recv_test::<LatMsg>("the client's done")
                            .map_err(ServeError::from)
                    }
                    Ok(false) => {}
                    Err(e) => break Err(ServeError::failed(format!("control connection: {e}"))),
                }
                let idle = t0
                    .elapsed()
                    .saturating_sub(Duration::from_millis(last_probe.load(Ordering::Relaxed)));
                if idle > idle_limit {
                    break Err(ServeError::new(
                        ErrorCode::Timeout,
                        format!(
                            "no probe from the client for {:.1} s: it stalled or vanished",
                            idle.as_secs_f64()
                        ),
                    ));
                }
                if clock.is_stopped() {
                    break Err(ServeError::new(
                        ErrorCode::LimitExceeded,
                        "the client did not finish within the test's length",
                    ));
                }
            };
            stop.store(true, Ordering::Relaxed);
            (h.join(), done)
        });
        let done = done?;
        if !matches!(done, LatMsg::Done { .. }) {
            return Err(ServeError::bad_request(format!(
                "expected done, got {done:?}"
            )));
        }
        let (echoed, cpu_s, secs, host) = match res {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(ServeError::failed(format!("udp-lat echo: {e}"))),
            Err(_) => return Err(ServeError::failed("the udp-lat echo thread panicked")),
        };
        ctl.send_test(&LatMsg::Report {
            echoed,
            cpu_s,
            secs,
            host: Box::new(host),
        })?;
        Ok(())
    }
}
