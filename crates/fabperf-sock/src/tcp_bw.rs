//! `tcp-bw`: N TCP streams per direction, one thread per stream.
//!
//! Flow: the client sends `Start`; the agent validates, registers a data
//! cookie and accepts. The client opens one data connection per stream and
//! direction (to the agent's same port, `FBPD` + cookie + a 4-byte stream
//! header). When the agent has them all it sends `Ready`: the test is set
//! up. The client then sends `Go` with a start delay (0 for a test on its
//! own; the common start of concurrent flows otherwise, see
//! [`fabperf_proto::Start`]) and both ends start their threads at that
//! instant. A sender sends for omit + duration, then shuts its side down; a
//! receiver reads until end of stream. The bandwidth is the receiver's
//! view: bytes received after its warm-up boundary over the time from that
//! boundary to its last byte, and that interval in Unix time (with the
//! bytes received over time when the client asks for them). Each side then
//! reports its streams (client first), and the client builds the records.

use crate::cpu::{set_host_cpu, set_thread_cpu, HostReport};
use crate::error::SockError;
use crate::net;
use crate::params::{Direction, TcpBwParams};
use fabperf_proto::cpu::{HostMeter, ThreadCpu};
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{
    connect_test, open_data, ClientConfig, Control, Msg, ServeCtx, ServeError, Start, TestKind,
};
use fabperf_results::{
    Interval, Progress, ProgressRecorder, Record, Side, Transport, WallClock, Warning,
};
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
    /// System calls that moved bytes in the measured interval (sends or
    /// receives).
    #[serde(default)]
    pub calls: u64,
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
    /// Receivers: the measured interval in Unix seconds (this end's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_s: Option<f64>,
    /// Senders: when this end started sending (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_from_s: Option<f64>,
    /// Receivers, when the client asked for it: the bytes received over time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum BwMsg {
    Ready,
    /// Client: start `in_s` seconds after this message; record the bytes
    /// received over time when `progress`.
    Go {
        in_s: f64,
        #[serde(default)]
        progress: bool,
    },
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
    /// Receivers record the bytes received over time.
    progress: bool,
    /// A peer that moves no byte for this long is dead.
    timeout: Duration,
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
fn run_sender(
    c: &Conn,
    plan: &Plan,
    abort: &AtomicBool,
    clock: &WallClock,
) -> Result<StreamReport, SockError> {
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
    let mut calls: u64 = 0;
    let (mut m_bytes, mut m_msgs, mut m_calls, mut m_t0, mut m_cpu0, mut m_retr0) =
        (0u64, 0u64, 0u64, start, ThreadCpu::start(), None);
    let mut off = 0usize;
    let mut since_drain = 0u32;
    loop {
        let now = Instant::now();
        if !measuring && now >= boundary {
            measuring = true;
            m_bytes = total;
            m_msgs = messages;
            m_calls = calls;
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
                calls += 1;
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
        calls: calls - m_calls,
        secs: t_end.duration_since(m_t0).as_secs_f64(),
        cpu_s: cpu,
        retrans,
        buf_node,
        pin_error: None,
        from_s: None,
        to_s: None,
        sent_from_s: Some(clock.unix(start)),
        progress: None,
    })
}

/// The discarding receiver (the default) asks the kernel to wake it only
/// once this many bytes are queued (SO_RCVLOWAT). Woken for every segment
/// that arrives (64 KiB on a veth, or less), a receiver that has nothing to
/// copy goes back to sleep at once, and every wake-up is a cross-CPU
/// interrupt paid by the CPU that runs the receive path: on a veth pair or
/// loopback, the sender's (docs/sockets.md, "One stream across a veth
/// pair"). Measured on both: 64 KiB to
/// 256 KiB is as good as it gets for one stream; from 512 KiB two
/// unpinned streams on loopback stall on delayed ACKs while the reader
/// waits for its mark.
pub(crate) const DISCARD_LOWAT: usize = 128 << 10;
/// ... or this long after it went to sleep, with whatever has arrived by
/// then (SO_RCVTIMEO), so a slow stream is still read every few
/// milliseconds and its interval still ends at its last byte.
pub(crate) const DISCARD_WAKE: Duration = Duration::from_millis(5);
/// Bytes one discarding receive may take: more than the low-water mark, so
/// one call takes everything queued. The buffer is never written (the
/// kernel drops the bytes), so its pages are never allocated.
const DISCARD_READ: usize = 1 << 20;

/// Read until end of stream. The warm-up boundary is `omit` after the
/// first byte; the interval ends at the last byte. The bytes of a receive
/// arrived after the previous receive (which took everything queued) or
/// the previous empty wait, so the interval of the first counted receive
/// starts there, not at its own return.
fn run_receiver(c: &Conn, plan: &Plan, clock: &WallClock) -> Result<StreamReport, SockError> {
    let fd = c.stream.as_fd();
    let discard = !plan.copy;
    let mut buf = if discard {
        vec![0u8; DISCARD_READ.max(plan.size)]
    } else {
        let mut b = vec![0u8; plan.size];
        // Place the pages now, on this (pinned) thread's node.
        explain::first_touch(&mut b);
        b
    };
    if discard {
        net::set_rcvlowat(fd, DISCARD_LOWAT)
            .map_err(|e| SockError::data("setting SO_RCVLOWAT", e))?;
        c.stream
            .set_read_timeout(Some(DISCARD_WAKE))
            .map_err(|e| SockError::data("setting the receive timeout", e))?;
    }
    // Without --copy the kernel discards the bytes (no copy to user space).
    let rflags = if discard { libc::MSG_TRUNC } else { 0 };
    let mut total: u64 = 0;
    let mut reads: u64 = 0;
    let mut first: Option<Instant> = None;
    let mut boundary = Instant::now();
    let mut measuring = false;
    let (mut m_bytes, mut m_reads, mut m_t0) = (0u64, 0u64, boundary);
    let mut m_cpu0 = ThreadCpu::start();
    // The last byte, and the latest moment at which nothing was queued.
    let mut last = boundary;
    // Counted from the end's start (common to its streams).
    let mut progress = plan.progress.then(|| ProgressRecorder::new(clock.origin()));
    let mut drained = boundary;
    loop {
        let got = net::recv(fd, &mut buf, rflags);
        let now = Instant::now();
        let n = match got {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if discard && net::is_timeout(&e) => {
                // A short wait that found nothing: the peer is dead only
                // after the whole timeout without a byte.
                if now.duration_since(last) >= plan.timeout {
                    return Err(SockError::data(
                        format!("stream {} receive", c.idx),
                        net::timed_out(),
                    ));
                }
                drained = now;
                continue;
            }
            Err(e) => return Err(SockError::data(format!("stream {} receive", c.idx), e)),
        };
        if let Some(p) = progress.as_mut() {
            p.at(now, total, total + n as u64);
        }
        if first.is_none() {
            first = Some(now);
            boundary = now + plan.omit;
        }
        if !measuring && now >= boundary {
            measuring = true;
            m_bytes = total;
            m_reads = reads;
            m_t0 = drained.max(first.unwrap_or(now));
            m_cpu0 = ThreadCpu::start();
        }
        total += n as u64;
        reads += 1;
        last = now;
        drained = now;
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
        calls: reads - m_reads,
        secs,
        cpu_s: cpu,
        retrans: None,
        buf_node: if discard {
            None
        } else {
            explain::buffer_node(&buf)
        },
        pin_error: None,
        from_s: measuring.then(|| clock.unix(m_t0)),
        to_s: measuring.then(|| clock.unix(last)),
        sent_from_s: None,
        progress: progress.map(|p| p.finish(clock)),
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
    let clock = WallClock::now();
    let clock = &clock;
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
                        run_sender(c, plan, abort, clock)
                    } else {
                        run_receiver(c, plan, clock)
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

fn plan_of(p: &TcpBwParams, timeout: Duration) -> Plan {
    Plan {
        size: p.size as usize,
        omit: Duration::from_secs_f64(p.omit_s),
        duration: Duration::from_secs_f64(p.duration_s),
        zerocopy: p.zerocopy,
        copy: p.copy,
        pacing: p.rate_bps.map(|r| (r / 8).max(1)),
        progress: false,
        timeout,
    }
}

/// Client side of `tcp-bw`: set up, then start at once.
pub fn run_tcp_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &TcpBwParams,
) -> Result<Vec<Record>, SockError> {
    prepare_tcp_bw(addr, cfg, p)?.run(Start::now())
}

/// A `tcp-bw` test set up to its start: connected, authenticated, every
/// data connection open, the agent ready.
pub struct TcpBwPrepared {
    addr: SocketAddr,
    p: TcpBwParams,
    ctl: Control,
    conns: Vec<Conn>,
    setup: EndSetup,
    local: Option<SocketAddr>,
    /// A peer that moves no byte for this long is dead.
    timeout: Duration,
}

/// Set a `tcp-bw` test up against the agent at `addr`, up to the start.
pub fn prepare_tcp_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &TcpBwParams,
) -> Result<TcpBwPrepared, SockError> {
    p.validate().map_err(SockError::BadParams)?;
    let params = serde_json::to_value(p).expect("params serialize");
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
    Ok(TcpBwPrepared {
        addr,
        p: p.clone(),
        ctl,
        conns,
        setup,
        local,
        timeout: cfg.timeout,
    })
}

impl TcpBwPrepared {
    /// Start at `start` (the agent starts its side at the same instant),
    /// measure, and build the records.
    pub fn run(self, start: Start) -> Result<Vec<Record>, SockError> {
        let TcpBwPrepared {
            addr,
            p,
            mut ctl,
            conns,
            setup,
            local,
            timeout,
        } = self;
        let in_s = match fabperf_proto::start::check_delay(start.delay_s()) {
            Ok(d) => d,
            Err(e) => {
                ctl.send_error(fabperf_proto::ErrorCode::BadRequest, &e);
                return Err(SockError::BadParams(e));
            }
        };
        ctl.send_test(&BwMsg::Go {
            in_s,
            progress: start.progress,
        })?;
        start.wait();
        let started_at = fabperf_results::now_rfc3339();
        let plan = Plan {
            progress: start.progress,
            ..plan_of(&p, timeout)
        };
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
        let mut recs = build_records(&p, &mine, &theirs, &started_at, local, addr)?;
        explain::apply(
            &mut recs,
            &mine.host,
            &theirs.host,
            &explain::TestKindInfo {
                full_rate_bandwidth: p.rate_bps.is_none(),
                one: "one stream".into(),
                more_streams_hint:
                    "more streams (-P 4) and larger messages (-l 1M) show what the link carries"
                        .into(),
            },
        );
        Ok(recs)
    }
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
    /// The receivers' measured interval (the hull of the streams').
    interval: Option<Interval>,
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
            interval: match (rcv.from_s, rcv.to_s) {
                (Some(a), Some(b)) => Some(Interval {
                    start_s: a,
                    end_s: b,
                    sent_from_s: snd.sent_from_s,
                    progress: rcv.progress.clone(),
                }),
                _ => None,
            },
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
        let parts: Vec<&Agg> = parts.into_iter().collect();
        t.interval = hull(parts.iter().map(|a| a.interval.as_ref()));
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
        r.interval = self.interval.clone();
    }
}

/// The smallest interval holding every one given (None when one is
/// missing): earliest start, latest end, earliest sender start, the summed
/// progress when every part has one.
fn hull<'a>(parts: impl Iterator<Item = Option<&'a Interval>>) -> Option<Interval> {
    let parts: Option<Vec<&Interval>> = parts.collect();
    let parts = parts?;
    let first = parts.first()?;
    let progress: Option<Vec<&Progress>> = parts.iter().map(|i| i.progress.as_ref()).collect();
    let sent: Option<Vec<f64>> = parts.iter().map(|i| i.sent_from_s).collect();
    Some(Interval {
        start_s: parts
            .iter()
            .map(|i| i.start_s)
            .fold(first.start_s, f64::min),
        end_s: parts.iter().map(|i| i.end_s).fold(first.end_s, f64::max),
        sent_from_s: sent.and_then(|v| v.into_iter().reduce(f64::min)),
        progress: progress.and_then(|v| Progress::sum(&v)),
    })
}

/// Refuse a peer's stream report whose times are not times.
fn check_times(v: &[StreamReport], who: &str) -> Result<(), SockError> {
    for r in v {
        let bad =
            |what: &str| SockError::Protocol(format!("{who}'s report of stream {}: {what}", r.idx));
        for t in [r.from_s, r.to_s, r.sent_from_s].into_iter().flatten() {
            if !t.is_finite() {
                return Err(bad(&format!("time {t} is not a time")));
            }
        }
        if let (Some(a), Some(b)) = (r.from_s, r.to_s) {
            if b < a {
                return Err(bad("its interval ends before it starts"));
            }
        }
        if let Some(p) = &r.progress {
            if let Some(m) = p.check().into_iter().next() {
                return Err(bad(&m));
            }
        }
    }
    Ok(())
}

fn build_records(
    p: &TcpBwParams,
    mine: &EndReport,
    theirs: &EndReport,
    started_at: &str,
    local: Option<SocketAddr>,
    remote: SocketAddr,
) -> Result<Vec<Record>, SockError> {
    check_times(&theirs.streams, "the agent")?;
    check_times(&mine.streams, "this end")?;
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
                // A stream's row keeps its interval, not its progress.
                if let Some(i) = rec.interval.as_mut() {
                    i.progress = None;
                }
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
        // The two directions' progress are on their own records.
        if let Some(i) = rec.interval.as_mut() {
            i.progress = None;
        }
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
        // Set up: wait for the client's start (concurrent flows start
        // together, when the last of them is set up: up to the I/O
        // timeout), then run from that instant.
        ctx.clock
            .arm(io + Duration::from_secs_f64(p.duration_s + p.omit_s));
        let (in_s, progress) = match ctx.ctl.recv_test::<BwMsg>("the client's start")? {
            BwMsg::Go { in_s, progress } => (
                fabperf_proto::start::check_delay(in_s).map_err(ServeError::bad_request)?,
                progress,
            ),
            other => {
                return Err(ServeError::bad_request(format!(
                    "expected go, got {other:?}"
                )))
            }
        };
        let start = Start::after(in_s, progress);
        // The agent's clock counts from the start.
        ctx.limit_duration(in_s + p.duration_s + p.omit_s)?;
        start.wait();
        let plan = Plan {
            progress,
            ..plan_of(&p, io)
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn plan(size: usize, copy: bool) -> Plan {
        Plan {
            size,
            omit: Duration::from_millis(100),
            duration: Duration::from_secs(1),
            zerocopy: false,
            copy,
            pacing: None,
            progress: false,
            timeout: Duration::from_secs(10),
        }
    }

    /// A receiver on one end of a loopback connection whose other end
    /// writes `bytes` in `chunk`-byte writes, pausing `pause` between
    /// bursts of `burst` writes, then closes.
    fn receive(p: &Plan, bytes: usize, chunk: usize, pause: Duration) -> StreamReport {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let tx = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let buf = vec![7u8; chunk];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk);
                s.write_all(&buf[..n]).unwrap();
                left -= n;
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
        });
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(p.timeout)).unwrap();
        let c = Conn {
            idx: 0,
            dir: C2A,
            sender: false,
            stream: s,
        };
        let r = run_receiver(&c, p, &WallClock::now()).unwrap();
        tx.join().unwrap();
        r
    }

    /// The discarding receiver waits for its low-water mark and takes
    /// everything queued: its receives return more than one message (`-l`)
    /// on average, which a receive of `-l` bytes never can.
    #[test]
    fn discarding_receiver_reads_in_large_gulps() {
        let size = 16 << 10;
        // No omit: a loopback stream of 256 MiB can end inside one.
        let p = Plan {
            omit: Duration::ZERO,
            ..plan(size, false)
        };
        let r = receive(&p, 256 << 20, 256 << 10, Duration::ZERO);
        assert_eq!(r.total_bytes, 256 << 20);
        assert!(r.calls > 0 && r.bytes > 0, "{r:?}");
        let per_call = r.bytes / r.calls;
        assert!(
            per_call > 2 * size as u64,
            "{per_call} bytes per receive with {size}-byte messages: {r:?}"
        );
        // --copy reads `-l` bytes per call, like an application.
        let p = Plan {
            omit: Duration::ZERO,
            ..plan(size, true)
        };
        let r = receive(&p, 64 << 20, 256 << 10, Duration::ZERO);
        assert_eq!(r.total_bytes, 64 << 20);
        assert!(r.bytes / r.calls.max(1) <= size as u64, "{r:?}");
    }

    /// A slow stream (far below the low-water mark per wake-up) is still
    /// read as it arrives: the measured rate matches what the sender wrote
    /// per unit of time, and no read waits for the mark.
    #[test]
    fn discarding_receiver_keeps_up_with_a_slow_stream() {
        // 32 KiB every 10 ms: ~3.3 MB/s, a quarter of the mark per wake-up.
        let chunk = 32 << 10;
        let pause = Duration::from_millis(10);
        let t = Instant::now();
        let r = receive(&plan(128 << 10, false), 100 * chunk, chunk, pause);
        let wall = t.elapsed().as_secs_f64();
        assert_eq!(r.total_bytes, 100 * chunk as u64);
        let sent_rate = (100 * chunk) as f64 / wall;
        let got = r.bytes as f64 / r.secs;
        assert!(
            got > sent_rate * 0.8 && got < sent_rate * 1.25,
            "measured {got:.0} B/s, the writer averaged {sent_rate:.0} B/s: {r:?}"
        );
        // Read about as often as written, never batched up to the mark.
        assert!(r.calls * chunk as u64 >= r.bytes / 2, "{r:?}");
    }
}
