//! `tcp-bw`: N TCP streams per direction, one thread per stream.
//!
//! Flow: the client sends `Start`; the agent validates, registers a data
//! cookie and accepts. The client opens one data connection per stream and
//! direction (to the agent's same port, `FBPD` + cookie + a 4-byte stream
//! header). When the agent has them all it sends `Ready`; both ends start
//! their threads. A sender sends for omit + duration, then shuts its side
//! down; a receiver reads until end of stream. The bandwidth is the
//! receiver's view: bytes received after its warm-up boundary over the time
//! from that boundary to its last byte. Each side then reports its streams
//! (client first), and the client builds the records.

use crate::cpu::{set_host_cpu, set_thread_cpu, HostReport};
use crate::error::SockError;
use crate::net;
use crate::params::{Direction, TcpBwParams};
use fabperf_proto::cpu::{HostMeter, ThreadCpu};
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{connect_test, open_data, ClientConfig, Msg, ServeCtx, ServeError, TestKind};
use fabperf_results::{Record, Side, Transport, Warning};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Data flows client -> agent on this connection.
const C2A: u8 = 0;
/// Data flows agent -> client.
const A2C: u8 = 1;

/// What one end measured on one connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct StreamReport {
    pub idx: u32,
    /// `C2A` or `A2C`.
    pub dir: u8,
    pub sender: bool,
    pub total_bytes: u64,
    /// Bytes inside the measured interval.
    pub bytes: u64,
    pub messages: u64,
    /// Measured interval, seconds.
    pub secs: f64,
    /// Thread CPU seconds during the measured interval (`None`: unknown).
    pub cpu_s: Option<f64>,
    /// Retransmitted segments during the measured interval (senders).
    pub retrans: Option<u64>,
    /// NUMA node of the thread's user buffer (`--copy`, `--zerocopy`; the default path
    /// has none: sendfile from a file, receive discarded in the kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buf_node: Option<u32>,
    /// Why the thread could not be pinned (`--cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum BwMsg {
    Ready,
    Report {
        streams: Vec<StreamReport>,
        /// This end's host CPU over the measured interval, or why not.
        #[serde(default)]
        host: Box<HostReport>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct AcceptInfo {
    cookie: String,
}

/// A data connection with its role.
struct Conn {
    idx: u32,
    dir: u8,
    sender: bool,
    stream: TcpStream,
}

struct Plan {
    size: usize,
    omit: Duration,
    duration: Duration,
    zerocopy: bool,
    copy: bool,
    /// Pace each sender to this many bytes per second (SO_MAX_PACING_RATE).
    pacing: Option<u64>,
}

/// How a sender hands bytes to the kernel.
enum Source {
    /// send(2) from a user buffer (optionally MSG_ZEROCOPY).
    Buffer(Vec<u8>, libc::c_int),
    /// sendfile(2) from an in-memory file holding one message.
    File(std::fs::File),
}

fn memfd_with(size: usize) -> std::io::Result<std::fs::File> {
    let fd = rustix::fs::memfd_create(c"fabperf-tcp-bw", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut f = std::fs::File::from(fd);
    let chunk = vec![0x5au8; size.min(1 << 20)];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n])?;
        left -= n;
    }
    Ok(f)
}

/// Run a sender until omit + duration has passed, or `abort` is set.
fn run_sender(c: &Conn, plan: &Plan, abort: &AtomicBool) -> Result<StreamReport, SockError> {
    let fd = c.stream.as_fd();
    let mut flags = 0;
    if plan.zerocopy {
        net::enable_zerocopy(fd).map_err(|e| {
            SockError::data(
                "enabling SO_ZEROCOPY (MSG_ZEROCOPY needs Linux 4.14 or newer)",
                e,
            )
        })?;
        flags = libc::MSG_ZEROCOPY;
    }
    if let Some(rate) = plan.pacing {
        net::set_max_pacing_rate(fd, rate)
            .map_err(|e| SockError::data("setting SO_MAX_PACING_RATE (--rate)", e))?;
    }
    let src = if plan.copy || plan.zerocopy {
        // Filled by this (pinned) thread: its pages are on this thread's node.
        Source::Buffer(vec![0x5au8; plan.size], flags)
    } else {
        Source::File(
            memfd_with(plan.size)
                .map_err(|e| SockError::data("creating the in-memory send file (memfd)", e))?,
        )
    };
    let start = Instant::now();
    let boundary = start + plan.omit;
    let end = boundary + plan.duration;
    let mut total: u64 = 0;
    let mut messages: u64 = 0;
    let mut measuring = false;
    let (mut m_bytes, mut m_msgs, mut m_t0, mut m_cpu0, mut m_retr0) =
        (0u64, 0u64, start, ThreadCpu::start(), None);
    let mut off = 0usize;
    let mut since_drain = 0u32;
    loop {
        let now = Instant::now();
        if !measuring && now >= boundary {
            measuring = true;
            m_bytes = total;
            m_msgs = messages;
            m_t0 = now;
            m_cpu0 = ThreadCpu::start();
            m_retr0 = net::tcp_total_retrans(fd);
        }
        if now >= end && off == 0 {
            break;
        }
        if abort.load(Ordering::Relaxed) {
            return Err(SockError::PeerGone("stopped: another stream failed".into()));
        }
        let sent = match &src {
            Source::Buffer(buf, fl) => net::send(fd, &buf[off..], *fl),
            Source::File(f) => net::sendfile(fd, f.as_fd(), off, plan.size - off),
        };
        match sent {
            Ok(n) => {
                total += n as u64;
                off += n;
                if off == plan.size {
                    off = 0;
                    messages += 1;
                }
                if flags != 0 {
                    since_drain += 1;
                    if since_drain >= 256 {
                        since_drain = 0;
                        net::drain_errqueue(fd);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if flags != 0 && e.raw_os_error() == Some(libc::ENOBUFS) => {
                // Too many zerocopy notifications outstanding: read them.
                if net::drain_errqueue(fd) == 0 {
                    let _ = net::wait_readable(fd, Duration::from_millis(1));
                }
            }
            Err(e) => return Err(SockError::data(format!("stream {} send", c.idx), e)),
        }
    }
    let t_end = Instant::now();
    let cpu = m_cpu0.used_secs();
    let retrans = match (m_retr0, net::tcp_total_retrans(fd)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let _ = c.stream.shutdown(Shutdown::Write);
    let buf_node = match &src {
        Source::Buffer(b, _) => explain::buffer_node(b),
        Source::File(_) => None,
    };
    Ok(StreamReport {
        idx: c.idx,
        dir: c.dir,
        sender: true,
        total_bytes: total,
        bytes: total - m_bytes,
        messages: messages - m_msgs,
        secs: t_end.duration_since(m_t0).as_secs_f64(),
        cpu_s: cpu,
        retrans,
        buf_node,
        pin_error: None,
    })
}

/// Read until end of stream. The warm-up boundary is `omit` after the
/// first byte; the interval ends at the last byte.
fn run_receiver(c: &Conn, plan: &Plan) -> Result<StreamReport, SockError> {
    let fd = c.stream.as_fd();
    let mut buf = vec![0u8; plan.size];
    if plan.copy {
        // Place the pages now, on this (pinned) thread's node.
        explain::first_touch(&mut buf);
    }
    // Without --copy the kernel discards the bytes (no copy to user space).
    let rflags = if plan.copy { 0 } else { libc::MSG_TRUNC };
    let mut total: u64 = 0;
    let mut reads: u64 = 0;
    let mut first: Option<Instant> = None;
    let mut boundary = Instant::now();
    let mut measuring = false;
    let (mut m_bytes, mut m_reads, mut m_t0) = (0u64, 0u64, boundary);
    let mut m_cpu0 = ThreadCpu::start();
    let mut last = boundary;
    loop {
        let n = match net::recv(fd, &mut buf, rflags) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(SockError::data(format!("stream {} receive", c.idx), e)),
        };
        let now = Instant::now();
        if first.is_none() {
            first = Some(now);
            boundary = now + plan.omit;
        }
        if !measuring && now >= boundary {
            measuring = true;
            m_bytes = total;
            m_reads = reads;
            m_t0 = now;
            m_cpu0 = ThreadCpu::start();
        }
        total += n as u64;
        reads += 1;
        last = now;
    }
    let cpu = if measuring {
        m_cpu0.used_secs()
    } else {
        Some(0.0)
    };
    let (bytes, secs) = if measuring {
        (total - m_bytes, last.duration_since(m_t0).as_secs_f64())
    } else {
        (0, 0.0)
    };
    let size = plan.size as u64;
    Ok(StreamReport {
        idx: c.idx,
        dir: c.dir,
        sender: false,
        total_bytes: total,
        bytes,
        // Receivers see a byte stream; report whole messages' worth.
        messages: if measuring {
            bytes / size
        } else {
            reads - m_reads
        },
        secs,
        cpu_s: cpu,
        retrans: None,
        buf_node: if plan.copy {
            explain::buffer_node(&buf)
        } else {
            None
        },
        pin_error: None,
    })
}

/// What one end's streams measured, and its host's report (CPU, counters,
/// placement) over the interval from the warm-up boundary to the end of the
/// last stream.
struct EndReport {
    streams: Vec<StreamReport>,
    host: HostReport,
}

/// Run every connection on its own thread (pinned to this end's CPUs); on
/// the first failure shut all connections down so the other threads end at
/// once.
fn run_streams(conns: &[Conn], plan: &Plan, setup: &EndSetup) -> Result<EndReport, SockError> {
    let abort = AtomicBool::new(false);
    let boundary = Instant::now() + plan.omit;
    let mut host: Option<HostMeter> = None;
    let (tx, rx) = mpsc::channel::<Result<StreamReport, SockError>>();
    let mut reports = Vec::with_capacity(conns.len());
    let mut first_err: Option<SockError> = None;
    std::thread::scope(|s| {
        for c in conns {
            let tx = tx.clone();
            let abort = &abort;
            std::thread::Builder::new()
                .name(format!("fabperf-tcp-{}", c.idx))
                .spawn_scoped(s, move || {
                    let pinned = setup.pin();
                    let r = if c.sender {
                        run_sender(c, plan, abort)
                    } else {
                        run_receiver(c, plan)
                    };
                    let r = r.map(|mut rep| {
                        rep.pin_error = pinned.error.clone();
                        rep
                    });
                    let _ = tx.send(r);
                })
                .expect("spawning a stream thread");
        }
        drop(tx);
        loop {
            // The host meter starts at the warm-up boundary (or when the
            // first stream ends, if that is earlier).
            let wait = boundary.saturating_duration_since(Instant::now());
            let r = if host.is_none() && !wait.is_zero() {
                match rx.recv_timeout(wait) {
                    Ok(r) => r,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        host = Some(setup.meter());
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                if host.is_none() {
                    host = Some(setup.meter());
                }
                match rx.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                }
            };
            match r {
                Ok(rep) => reports.push(rep),
                Err(e) => {
                    if first_err.is_none() {
                        abort.store(true, Ordering::Relaxed);
                        for c in conns {
                            let _ = c.stream.shutdown(Shutdown::Both);
                        }
                        first_err = Some(e);
                    }
                }
            }
        }
    });
    if let Some(e) = first_err {
        return Err(e);
    }
    reports.sort_by_key(|r| (r.dir, r.idx));
    let buf_node = reports.iter().find_map(|r| r.buf_node);
    let pin_errors: Vec<String> = reports.iter().filter_map(|r| r.pin_error.clone()).collect();
    let host = setup.report(host.as_ref(), buf_node, &pin_errors, "no measured interval");
    Ok(EndReport {
        streams: reports,
        host,
    })
}

fn prepare(stream: &TcpStream, window: Option<u64>, timeout: Duration) -> std::io::Result<()> {
    let fd = stream.as_fd();
    if let Some(w) = window {
        net::set_buffer(fd, true, w)?;
        net::set_buffer(fd, false, w)?;
    }
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(())
}

fn plan_of(p: &TcpBwParams) -> Plan {
    Plan {
        size: p.size as usize,
        omit: Duration::from_secs_f64(p.omit_s),
        duration: Duration::from_secs_f64(p.duration_s),
        zerocopy: p.zerocopy,
        copy: p.copy,
        pacing: p.rate_bps.map(|r| (r / 8).max(1)),
    }
}

/// Client side of `tcp-bw`.
pub fn run_tcp_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &TcpBwParams,
) -> Result<Vec<Record>, SockError> {
    p.validate().map_err(SockError::BadParams)?;
    let params = serde_json::to_value(p).expect("params serialize");
    let started_at = fabperf_results::now_rfc3339();
    let setup = EndSetup::for_socket(Side::Client, explain::local_ip_towards(addr), &p.cpu)
        .map_err(SockError::BadParams)?;
    let (mut ctl, info) = connect_test(addr, cfg, "tcp-bw", params)?;
    let info: AcceptInfo = serde_json::from_value(info)
        .map_err(|e| SockError::Protocol(format!("agent's accept info: {e}")))?;
    let mut conns = Vec::new();
    let mut plan_dirs = Vec::new();
    if p.direction.client_sends() {
        plan_dirs.push(C2A);
    }
    if p.direction.agent_sends() {
        plan_dirs.push(A2C);
    }
    let mut local = None;
    for &dir in &plan_dirs {
        for idx in 0..p.streams {
            let mut s = open_data(&mut ctl, &info.cookie, cfg.timeout)?;
            prepare(&s, p.window, cfg.timeout)
                .map_err(|e| SockError::data("setting data socket options", e))?;
            let mut hdr = [0u8; 8];
            hdr[..4].copy_from_slice(&idx.to_be_bytes());
            hdr[4] = dir;
            s.write_all(&hdr)
                .map_err(|e| SockError::data("sending stream header", e))?;
            local = local.or_else(|| s.local_addr().ok());
            conns.push(Conn {
                idx,
                dir,
                sender: dir == C2A,
                stream: s,
            });
        }
    }
    match ctl.recv_test::<BwMsg>("the agent's ready")? {
        BwMsg::Ready => {}
        other => {
            return Err(SockError::Protocol(format!(
                "expected ready, got {other:?}"
            )))
        }
    }
    let plan = plan_of(p);
    let mine = match run_streams(&conns, &plan, &setup) {
        Ok(r) => r,
        Err(e) => {
            ctl.send_error(
                fabperf_proto::ErrorCode::TestFailed,
                &format!("client: {e}"),
            );
            return Err(e);
        }
    };
    ctl.send_test(&BwMsg::Report {
        streams: mine.streams.clone(),
        host: Box::new(mine.host.clone()),
    })?;
    let theirs = match ctl.recv_test::<BwMsg>("the agent's stream report")? {
        BwMsg::Report { streams, host } => EndReport {
            streams,
            host: *host,
        },
        other => {
            return Err(SockError::Protocol(format!(
                "expected report, got {other:?}"
            )))
        }
    };
    let _ = ctl.send(&Msg::Bye);
    let mut recs = build_records(p, &mine, &theirs, &started_at, local, addr)?;
    explain::apply(
        &mut recs,
        &mine.host,
        &theirs.host,
        &explain::TestKindInfo {
            full_rate_bandwidth: p.rate_bps.is_none(),
            one: "one stream".into(),
            more_streams_hint:
                "more streams (-P 4) and larger messages (-l 1M) show what the link carries".into(),
        },
    );
    Ok(recs)
}

fn find(v: &[StreamReport], idx: u32, dir: u8) -> Option<&StreamReport> {
    v.iter().find(|r| r.idx == idx && r.dir == dir)
}

/// The figures of a set of streams (one stream, one direction, or both).
/// Bytes and messages add up; the interval is the longest receiver's, so
/// `bytes * 8 / secs` is the rate of the set; CPU is the sum of the
/// threads' CPU seconds over the longest interval of each end.
#[derive(Default)]
struct Agg {
    bytes: u64,
    msgs: u64,
    secs: f64,
    cpu_l: Option<f64>,
    cpu_r: Option<f64>,
    secs_l: f64,
    secs_r: f64,
    retrans: Option<u64>,
    warnings: Vec<Warning>,
    empty: bool,
}

impl Agg {
    fn one(l: &StreamReport, r: &StreamReport) -> Agg {
        let (snd, rcv) = if l.sender { (l, r) } else { (r, l) };
        Agg {
            bytes: rcv.bytes,
            msgs: rcv.messages,
            secs: rcv.secs,
            cpu_l: l.cpu_s,
            cpu_r: r.cpu_s,
            secs_l: l.secs,
            secs_r: r.secs,
            retrans: snd.retrans,
            warnings: Vec::new(),
            empty: false,
        }
    }

    /// Sums streams; a sum that overflows can only come from a report no
    /// real stream produces (a protocol error naming the field).
    fn sum<'a>(parts: impl IntoIterator<Item = &'a Agg>) -> Result<Agg, SockError> {
        let over = |field: &str| {
            SockError::Protocol(format!(
                "the streams' {field} overflow when added up: a report is impossible"
            ))
        };
        let mut t = Agg {
            cpu_l: Some(0.0),
            cpu_r: Some(0.0),
            retrans: Some(0),
            empty: true,
            ..Agg::default()
        };
        for o in parts {
            t.empty = false;
            t.bytes = t.bytes.checked_add(o.bytes).ok_or_else(|| over("bytes"))?;
            t.msgs = t.msgs.checked_add(o.msgs).ok_or_else(|| over("messages"))?;
            t.secs = t.secs.max(o.secs);
            t.cpu_l = t.cpu_l.zip(o.cpu_l).map(|(a, b)| a + b);
            t.cpu_r = t.cpu_r.zip(o.cpu_r).map(|(a, b)| a + b);
            t.secs_l = t.secs_l.max(o.secs_l);
            t.secs_r = t.secs_r.max(o.secs_r);
            t.retrans = match t.retrans.zip(o.retrans) {
                Some((a, b)) => Some(a.checked_add(b).ok_or_else(|| over("retransmits"))?),
                None => None,
            };
            for w in &o.warnings {
                if !t.warnings.contains(w) {
                    t.warnings.push(w.clone());
                }
            }
        }
        if t.empty {
            t.cpu_l = None;
            t.cpu_r = None;
        }
        Ok(t)
    }

    fn fill(&self, r: &mut Record) {
        r.set_throughput(self.bytes, self.secs, Some(self.msgs));
        if r.bw_gbps.is_none() {
            r.warn(Warning::NoInterval {
                what: "no byte arrived after the warm-up".into(),
            });
        }
        set_thread_cpu(r, Side::Client, self.cpu_l, self.secs_l);
        set_thread_cpu(r, Side::Agent, self.cpu_r, self.secs_r);
        r.retransmits = self.retrans;
        for w in &self.warnings {
            r.warn(w.clone());
        }
    }
}

fn build_records(
    p: &TcpBwParams,
    mine: &EndReport,
    theirs: &EndReport,
    started_at: &str,
    local: Option<SocketAddr>,
    remote: SocketAddr,
) -> Result<Vec<Record>, SockError> {
    let mut dirs = Vec::new();
    if p.direction.client_sends() {
        dirs.push(C2A);
    }
    if p.direction.agent_sends() {
        dirs.push(A2C);
    }
    let base = |stream: Option<u32>, direction: &str| {
        let mut r = Record::new("tcp-bw", Transport::Tcp, p.size, p.streams);
        r.started_at = started_at.to_string();
        r.direction = Some(direction.to_string());
        r.stream = stream;
        r.local = local.map(|a| a.to_string());
        r.remote = Some(remote.to_string());
        r
    };
    // The hosts' CPU goes on every record that is not a single stream's.
    let host = |r: &mut Record| {
        set_host_cpu(r, Side::Client, &mine.host.result());
        set_host_cpu(r, Side::Agent, &theirs.host.result());
    };
    let mut per_dir = Vec::new();
    let mut rows = Vec::new();
    for &dir in &dirs {
        let dname = if dir == C2A { "forward" } else { "reverse" };
        let mut parts = Vec::new();
        for idx in 0..p.streams {
            let (l, r) = match (
                find(&mine.streams, idx, dir),
                find(&theirs.streams, idx, dir),
            ) {
                (Some(l), Some(r)) => (l, r),
                _ => {
                    return Err(SockError::Protocol(format!(
                        "stream {idx} ({dname}) missing from a report"
                    )))
                }
            };
            let mut a = Agg::one(l, r);
            let rcv = if l.sender { r } else { l };
            if rcv.secs > 0.0 && rcv.secs < 0.5 {
                a.warnings.push(Warning::ShortInterval { secs: rcv.secs });
            }
            for (rep, side) in [(l, Side::Client), (r, Side::Agent)] {
                if let Some(cpu) = rep.cpu_s.filter(|_| rep.secs > 0.0) {
                    if cpu / rep.secs > 0.95 {
                        a.warnings.push(Warning::CpuBound {
                            role: format!(
                                "{} thread",
                                if rep.sender { "sender" } else { "receiver" }
                            ),
                            side,
                            pct: cpu / rep.secs * 100.0,
                            hint: "try more --streams".into(),
                        });
                    }
                }
            }
            if p.streams > 1 || p.direction == Direction::Bidir {
                let mut rec = base(Some(idx), dname);
                a.fill(&mut rec);
                rows.push(rec);
            }
            parts.push(a);
        }
        per_dir.push((dname, Agg::sum(&parts)?));
    }
    let mut out = Vec::new();
    if p.direction == Direction::Bidir {
        let total = Agg::sum(per_dir.iter().map(|(_, d)| d))?;
        let mut rec = base(None, "bidir");
        total.fill(&mut rec);
        host(&mut rec);
        out.push(rec);
    }
    for (dname, d) in &per_dir {
        let mut rec = base(None, dname);
        d.fill(&mut rec);
        host(&mut rec);
        out.push(rec);
    }
    out.extend(rows);
    Ok(out)
}

/// Agent side of `tcp-bw`.
pub struct TcpBw;

impl TestKind for TcpBw {
    fn name(&self) -> &'static str {
        "tcp-bw"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: TcpBwParams = fabperf_proto::decode_params("tcp-bw", params)?;
        p.validate().map_err(ServeError::bad_request)?;
        ctx.limits.check_streams(p.streams)?;
        ctx.limit_duration(p.duration_s + p.omit_s)?;
        let nconn = p.connections();
        ctx.limits
            .check_memory(p.size * nconn as u64, "tcp-bw buffers (size x connections)")?;
        let setup = EndSetup::for_socket(Side::Agent, Some(ctx.local().ip()), &p.cpu)
            .map_err(ServeError::bad_request)?;
        let io = ctx.limits.io_timeout;
        let waiter = ctx.data.register(nconn as usize);
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                cookie: waiter.cookie_hex(),
            })
            .expect("accept info serializes"),
        })?;
        let mut conns: Vec<Conn> = Vec::with_capacity(nconn as usize);
        for _ in 0..nconn {
            let mut s = waiter.accept_watching(io, ctx.ctl)?;
            ctx.watch(&s);
            prepare(&s, p.window, io)
                .map_err(|e| ServeError::failed(format!("data socket options: {e}")))?;
            let mut hdr = [0u8; 8];
            s.read_exact(&mut hdr)
                .map_err(|e| ServeError::failed(format!("reading stream header: {e}")))?;
            let idx = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let dir = hdr[4];
            let dir_ok = (dir == C2A && p.direction.client_sends())
                || (dir == A2C && p.direction.agent_sends());
            if idx >= p.streams || !dir_ok || conns.iter().any(|c| c.idx == idx && c.dir == dir) {
                return Err(ServeError::bad_request(format!(
                    "unexpected data connection (stream {idx}, direction {dir})"
                )));
            }
            conns.push(Conn {
                idx,
                dir,
                sender: dir == A2C,
                stream: s,
            });
        }
        drop(waiter);
        ctx.ctl.send_test(&BwMsg::Ready)?;
        let plan = plan_of(&p);
        let mine = run_streams(&conns, &plan, &setup)?;
        // The client reports when its threads are done; they end at most
        // one timeout after ours.
        match ctx.ctl.recv_test::<BwMsg>("the client's stream report")? {
            BwMsg::Report { .. } => {}
            other => {
                return Err(ServeError::bad_request(format!(
                    "expected report, got {other:?}"
                )))
            }
        }
        ctx.ctl.send_test(&BwMsg::Report {
            streams: mine.streams,
            host: Box::new(mine.host),
        })?;
        Ok(())
    }
}
