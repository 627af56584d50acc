//! `tcp-lat`: request/response ping-pong over one TCP connection with
//! TCP_NODELAY (netperf TCP_RR, sockperf ping-pong --tcp).
//!
//! The client sends `size` bytes, the agent reads exactly `size` bytes and
//! sends them back; the client times each round trip with the monotonic
//! clock and records every sample in an HdrHistogram (halved for the
//! default half-RTT report). With `busy_poll` both ends spin on
//! non-blocking receives (and set SO_BUSY_POLL), trading a core per end for
//! lower latency.

use crate::cpu::{set_host_cpu, set_thread_cpu, HostReport, LoopEnd};
use crate::error::SockError;
use crate::net;
use crate::params::TcpLatParams;
use fabperf_proto::cpu::ThreadCpu;
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{
    connect_test, open_data, ClientConfig, ErrorCode, Msg, ServeCtx, ServeError, TestKind,
};
use fabperf_results::{LatencyHistogram, LatencyKind, Record, Side, Transport, Warning};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

#[derive(Debug, Serialize, Deserialize)]
struct AcceptInfo {
    cookie: String,
    /// Whether the agent could set SO_BUSY_POLL.
    busy_poll_set: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum LatMsg {
    Ready,
    /// Client -> agent after the last round trip.
    Done {
        round_trips: u64,
    },
    /// Agent -> client: its CPU over the measured interval.
    Report {
        echoed: u64,
        cpu_s: Option<f64>,
        secs: f64,
        #[serde(default)]
        host: Box<HostReport>,
    },
}

/// How a receive waits.
#[derive(Clone, Copy)]
struct RecvMode {
    spin: bool,
    timeout: Duration,
}

/// Receive exactly `buf.len()` bytes. `Ok(false)` on a clean end of stream
/// before the first byte.
#[inline]
fn recv_exact(fd: BorrowedFd<'_>, buf: &mut [u8], mode: RecvMode) -> io::Result<bool> {
    let mut off = 0;
    let mut spins: u32 = 0;
    let mut spin_start: Option<Instant> = None;
    while off < buf.len() {
        let flags = if mode.spin { libc::MSG_DONTWAIT } else { 0 };
        match net::recv(fd, &mut buf[off..], flags) {
            Ok(0) => {
                if off == 0 {
                    return Ok(false);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection in the middle of a message",
                ));
            }
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if mode.spin && e.kind() == io::ErrorKind::WouldBlock => {
                spins = spins.wrapping_add(1);
                if spins & 0x3ff == 0 {
                    let t0 = *spin_start.get_or_insert_with(Instant::now);
                    if t0.elapsed() > mode.timeout {
                        return Err(net::timed_out());
                    }
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[inline]
fn send_all(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        match net::send(fd, &buf[off..], 0) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn prepare(s: &TcpStream, busy: bool, timeout: Duration) -> io::Result<bool> {
    let fd = s.as_fd();
    net::set_nodelay(fd)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    if busy {
        return Ok(net::set_busy_poll(fd, 50).is_ok());
    }
    Ok(false)
}

/// Client side of `tcp-lat`.
pub fn run_tcp_lat(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &TcpLatParams,
) -> Result<Vec<Record>, SockError> {
    p.validate().map_err(SockError::BadParams)?;
    let params = serde_json::to_value(p).expect("params serialize");
    let started_at = fabperf_results::now_rfc3339();
    let setup = EndSetup::for_socket(Side::Client, explain::local_ip_towards(addr), &p.cpu)
        .map_err(SockError::BadParams)?;
    let (mut ctl, info) = connect_test(addr, cfg, "tcp-lat", params)?;
    let info: AcceptInfo = serde_json::from_value(info)
        .map_err(|e| SockError::Protocol(format!("agent's accept info: {e}")))?;
    let s = open_data(&mut ctl, &info.cookie, cfg.timeout)?;
    let busy_local = prepare(&s, p.busy_poll, cfg.timeout)
        .map_err(|e| SockError::data("setting data socket options", e))?;
    let local = s.local_addr().ok();
    match ctl.recv_test::<LatMsg>("the agent's ready")? {
        LatMsg::Ready => {}
        other => {
            return Err(SockError::Protocol(format!(
                "expected ready, got {other:?}"
            )))
        }
    }
    let kind = if p.rtt {
        LatencyKind::Rtt
    } else {
        LatencyKind::HalfRtt
    };
    let mut hist = LatencyHistogram::new(kind);
    let fd = s.as_fd();
    let size = p.size as usize;
    // This thread measures: pinned for the test (its affinity comes back after), and its
    // buffers placed by it.
    let pinned = setup.pin();
    let mut out = vec![0x5au8; size];
    let mut inb = vec![0u8; size];
    explain::first_touch(&mut inb);
    let mode = RecvMode {
        spin: p.busy_poll,
        timeout: cfg.timeout,
    };
    let rt = |out: &mut [u8], inb: &mut [u8], i: u64| -> Result<(), SockError> {
        // A changing first byte catches a confused peer without extra cost.
        out[0] = i as u8;
        send_all(fd, out).map_err(|e| SockError::data("tcp-lat request", e))?;
        match recv_exact(fd, inb, mode) {
            Ok(true) if inb[0] == out[0] => Ok(()),
            Ok(true) => Err(SockError::Protocol(
                "the agent's reply does not match the request".into(),
            )),
            Ok(false) => Err(SockError::PeerGone(
                "the agent closed the data connection mid-test (did it stop? see its log)".into(),
            )),
            Err(e) => Err(SockError::data("tcp-lat reply", e)),
        }
    };
    // Round trips of the warm-up actually made (see below).
    let mut warmed: u64 = 0;
    let res = (|| -> Result<LoopEnd, SockError> {
        // The warm-up is `warmup` round trips, but never longer than the
        // measurement itself (`duration`, or 1 s for a count of iterations):
        // on a lossy link each round trip can wait for a retransmission
        // (200 ms and more), and a thousand of them would hold both agents
        // for minutes.
        let warm_for = if p.iterations.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::from_secs_f64(p.duration_s)
        };
        let warm_end = Instant::now() + warm_for;
        for i in 0..p.warmup {
            rt(&mut out, &mut inb, i)?;
            warmed += 1;
            if Instant::now() >= warm_end {
                break;
            }
        }
        let host = setup.meter();
        let cpu0 = ThreadCpu::start();
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs_f64(p.duration_s);
        let limit = p.iterations.unwrap_or(u64::MAX);
        let mut n: u64 = 0;
        // One clock read per round trip: the end of one is the start of
        // the next (the histogram update in between costs nanoseconds).
        let mut prev = t0;
        while n < limit {
            rt(&mut out, &mut inb, n)?;
            let now = Instant::now();
            hist.record_rtt_ns(now.duration_since(prev).as_nanos() as u64);
            prev = now;
            n += 1;
            if p.iterations.is_none() && now >= end {
                break;
            }
        }
        let secs = prev.duration_since(t0).as_secs_f64();
        let cpu = cpu0.used_secs();
        let pin_errors: Vec<String> = pinned.error.iter().cloned().collect();
        let report = setup.report(Some(&host), explain::buffer_node(&out), &pin_errors, "");
        Ok((n, secs, cpu, report))
    })();
    drop(pinned);
    let (n, secs, cpu, host) = match res {
        Ok(v) => v,
        Err(e) => {
            ctl.send_error(ErrorCode::TestFailed, &format!("client: {e}"));
            return Err(e);
        }
    };
    let _ = s.shutdown(Shutdown::Write);
    ctl.send_test(&LatMsg::Done { round_trips: n })?;
    let (echoed, rcpu, rsecs, rhost) = match ctl.recv_test::<LatMsg>("the agent's report")? {
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
    let mut r = Record::new("tcp-lat", Transport::Tcp, p.size, 1);
    r.started_at = started_at;
    r.op = Some("ping-pong".into());
    r.local = local.map(|a| a.to_string());
    r.remote = Some(addr.to_string());
    // Payload moved: request and response.
    r.set_throughput(n * p.size * 2, secs, Some(n));
    r.set_latency(&hist);
    if r.bw_gbps.is_none() {
        r.warn(Warning::NoInterval {
            what: "no round trip completed".into(),
        });
    }
    set_thread_cpu(&mut r, Side::Client, cpu, secs);
    set_thread_cpu(&mut r, Side::Agent, rcpu, rsecs);
    set_host_cpu(&mut r, Side::Client, &host.result());
    set_host_cpu(&mut r, Side::Agent, &rhost.result());
    if echoed != n + warmed {
        r.warn(Warning::CountMismatch {
            text: format!(
                "the agent echoed {echoed} messages, the client counted {}",
                n + warmed
            ),
        });
    }
    if warmed < p.warmup {
        r.warn(Warning::WarmupCut {
            done: warmed,
            asked: p.warmup,
        });
    }
    if let Some(text) = fabperf_proto::clock::slow_clock_warning() {
        r.warn(Warning::SlowClock { text });
    }
    if n < 1000 {
        r.warn(Warning::FewSamples {
            count: n,
            what: "round trips".into(),
            hint: "tail percentiles (p99.9 and up) need many more samples".into(),
        });
    }
    if p.busy_poll && (!busy_local || !info.busy_poll_set) {
        r.warn(Warning::BusyPollUnset);
    }
    let mut recs = vec![r];
    explain::apply(&mut recs, &host, &rhost, &explain::TestKindInfo::default());
    Ok(recs)
}

/// Agent side of `tcp-lat`.
pub struct TcpLat;

impl TestKind for TcpLat {
    fn name(&self) -> &'static str {
        "tcp-lat"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: TcpLatParams = fabperf_proto::decode_params("tcp-lat", params)?;
        p.validate().map_err(ServeError::bad_request)?;
        // Duration mode: the warm-up is a count of round trips, bounded by
        // the agent's limit; once it is done, the agent's clock allows the
        // measured duration plus the grace. Iteration mode keeps the
        // agent's limit as the bound.
        let measured = match p.iterations {
            None => {
                ctx.limits.check_duration(p.duration_s)?;
                Some(Duration::from_secs_f64(p.duration_s))
            }
            Some(_) => None,
        };
        ctx.limits.check_memory(p.size, "tcp-lat buffer")?;
        let setup = EndSetup::for_socket(Side::Agent, Some(ctx.local().ip()), &p.cpu)
            .map_err(ServeError::bad_request)?;
        let io = ctx.limits.io_timeout;
        let waiter = ctx.data.register(1);
        // Busy-poll capability is only known once the socket exists; report
        // what a probe socket allows.
        let busy_ok = p.busy_poll && probe_busy_poll();
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                cookie: waiter.cookie_hex(),
                busy_poll_set: busy_ok,
            })
            .expect("accept info serializes"),
        })?;
        let s = waiter.accept_watching(io, ctx.ctl)?;
        ctx.watch(&s);
        drop(waiter);
        prepare(&s, p.busy_poll, io)
            .map_err(|e| ServeError::failed(format!("data socket options: {e}")))?;
        ctx.ctl.send_test(&LatMsg::Ready)?;
        let fd = s.as_fd();
        // This connection's thread echoes: pinned for the test, its buffer placed by it.
        let pinned = setup.pin();
        let mut buf = vec![0u8; p.size as usize];
        explain::first_touch(&mut buf);
        let mode = RecvMode {
            spin: p.busy_poll,
            timeout: io,
        };
        let arm = |echoed: u64| {
            if let Some(m) = measured.filter(|_| echoed == p.warmup) {
                ctx.clock.arm(m);
            }
        };
        arm(0);
        let host = setup.meter();
        let cpu0 = ThreadCpu::start();
        let t0 = Instant::now();
        let mut echoed: u64 = 0;
        loop {
            match recv_exact(fd, &mut buf, mode) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    return Err(ServeError::failed(format!(
                        "tcp-lat receive after {echoed} messages: {e}"
                    )))
                }
            }
            send_all(fd, &buf).map_err(|e| ServeError::failed(format!("tcp-lat reply: {e}")))?;
            echoed += 1;
            arm(echoed);
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu0.used_secs();
        let pin_errors: Vec<String> = pinned.error.iter().cloned().collect();
        drop(pinned);
        let host = setup.report(Some(&host), explain::buffer_node(&buf), &pin_errors, "");
        match ctx.ctl.recv_test::<LatMsg>("the client's done")? {
            LatMsg::Done { .. } => {}
            other => {
                return Err(ServeError::bad_request(format!(
                    "expected done, got {other:?}"
                )))
            }
        }
        ctx.ctl.send_test(&LatMsg::Report {
            echoed,
            cpu_s: cpu,
            secs,
            host: Box::new(host),
        })?;
        Ok(())
    }
}

fn probe_busy_poll() -> bool {
    match std::net::UdpSocket::bind("127.0.0.1:0") {
        Ok(u) => net::set_busy_poll(u.as_fd(), 50).is_ok(),
        Err(_) => false,
    }
}
