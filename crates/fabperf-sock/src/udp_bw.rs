//! `udp-bw`: a paced UDP sender with sequence numbers and send timestamps;
//! the receiver counts lost, reordered (not lost), duplicated datagrams
//! and the RFC 3550 jitter, and its view is the reported figure.
//!
//! Flow: `Start` -> `Accept {session}`; the agent binds UDP on its own IP
//! and port number; the client sends hellos until the agent confirms on the
//! control channel (`Seen`), which also teaches the agent the client's
//! address as NAT rewrote it. Then the senders run for omit + duration
//! (datagrams after the warm-up carry the "measured" flag). Over the
//! control channel each side sends `Alive` twice a second (so a dead peer is
//! noticed within the timeout even when no datagram comes back), then
//! `SenderDone` when its sender ends and `RxReport` when its receiver has
//! drained (100 ms without a datagram after the peer's `SenderDone`). The
//! client ends with `Finished`.

use crate::cpu::{set_host_cpu, set_thread_cpu, HostReport};
use crate::error::SockError;
use crate::net;
use crate::params::{Direction, UdpBwParams};
use crate::udp::{self, Header, RxAccount, SeenWindow, F_BATCHED, F_MEASURED, T_DATA};
use fabperf_proto::cpu::{HostMeter, ThreadCpu};
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{
    connect_test, ClientConfig, Control, ErrorCode, Msg, ServeCtx, ServeError, TestKind,
};
use fabperf_results::{Record, Side, Transport, UdpStats, Warning};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Default socket buffers for UDP tests.
const DEFAULT_WINDOW: u64 = 8 << 20;
/// A receiver stops this long after the last datagram once the peer's
/// sender is done.
const DRAIN_IDLE: Duration = Duration::from_millis(100);
/// ... and at the latest this long after the peer's sender is done.
const DRAIN_MAX: Duration = Duration::from_secs(1);
const ALIVE_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Serialize, Deserialize)]
struct AcceptInfo {
    session: u32,
    /// The test's cookie (hex): its UDP hello carries it.
    cookie: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct SenderStats {
    pub sent_total: u64,
    /// Datagrams sent after the warm-up.
    pub sent: u64,
    pub bytes: u64,
    pub secs: f64,
    /// Thread CPU seconds (`None`: unknown).
    pub cpu_s: Option<f64>,
    /// Sends refused with ENOBUFS (local queue full), retried.
    pub enobufs: u64,
    /// NUMA node of the send buffers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buf_node: Option<u32>,
    /// Why the thread could not be pinned (`--cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RxStats {
    pub received: u64,
    pub bytes: u64,
    pub reordered: u64,
    pub duplicates: u64,
    /// Older than the reordering window (see `Seen::TooOld`).
    #[serde(default)]
    pub stale: u64,
    /// `None`: no kernel receive timestamps (`jitter_error` says why), or
    /// fewer than two timed datagrams.
    pub jitter_us: Option<f64>,
    #[serde(default)]
    pub jitter_error: Option<String>,
    pub secs: f64,
    /// Thread CPU seconds (`None`: unknown).
    pub cpu_s: Option<f64>,
    /// Receive buffer the kernel granted.
    pub rcvbuf: u64,
    /// Datagrams that were not this test's (ignored).
    pub foreign: u64,
    /// Datagrams from the warm-up (ignored).
    pub warmup: u64,
    /// NUMA node of the receive buffers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buf_node: Option<u32>,
    /// Why the thread could not be pinned (`--cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum UdpMsg {
    Seen,
    Alive,
    SenderDone(SenderStats),
    RxReport(RxStats),
    /// This end's host CPU over the exchange (after the warm-up).
    Host(HostReport),
    Finished,
}

struct SendPlan<'a> {
    session: u32,
    size: usize,
    rate_bps: Option<u64>,
    omit: Duration,
    duration: Duration,
    /// Test only: send these sequence numbers in this order instead.
    script: Option<&'a [u64]>,
}

fn run_sender(
    sock: &UdpSocket,
    plan: &SendPlan,
    abort: &AtomicBool,
) -> Result<SenderStats, SockError> {
    let fd = sock.as_fd();
    // Up to BATCH datagrams per sendmmsg(2): at full speed that is what
    // keeps the sender ahead of the system-call cost; when paced, the
    // datagrams due at the moment go out together.
    let mut batch = net::SendBatch::new(net::BATCH, plan.size, 0x5a);
    let start = Instant::now();
    let boundary = start + plan.omit;
    let end = boundary + plan.duration;
    // Nanoseconds between datagrams at the target rate.
    let gap_ns = plan
        .rate_bps
        .map(|r| (plan.size as f64 * 8.0 * 1e9 / r as f64).max(1.0));
    let mut st = SenderStats::default();
    let mut measuring = plan.omit.is_zero();
    let mut m_t0 = start;
    let mut cpu0 = ThreadCpu::start();
    let mut seq: u64 = 0;
    let mut h = Header {
        kind: T_DATA,
        flags: 0,
        session: plan.session,
        seq: 0,
        ts_ns: 0,
    };
    loop {
        let now = Instant::now();
        let mut k = batch.len();
        if let Some(script) = plan.script {
            if seq as usize >= script.len() {
                break;
            }
            measuring = true;
            k = k.min(script.len() - seq as usize);
        } else {
            if now >= end {
                break;
            }
            if !measuring && now >= boundary {
                measuring = true;
                m_t0 = now;
                cpu0 = ThreadCpu::start();
            }
        }
        if abort.load(Ordering::Relaxed) {
            return Err(SockError::PeerGone("stopped: the test was aborted".into()));
        }
        if let Some(gap) = gap_ns {
            // Paced: datagram n is due at start + n * gap.
            let elapsed = now.duration_since(start).as_nanos() as f64;
            let due_count = (elapsed / gap) as u64 + 1;
            if due_count <= seq {
                let due = start + Duration::from_nanos((seq as f64 * gap) as u64);
                let wait = due.saturating_duration_since(now);
                if wait > Duration::from_micros(60) {
                    std::thread::sleep(wait - Duration::from_micros(50));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            k = k.min((due_count - seq) as usize);
        }
        // The send time, read for this call just before it: the first
        // datagram of the call is handed to the kernel then, so its stamp is
        // its own send time. The others leave in the same call behind it;
        // they carry the same stamp flagged as the call's, not theirs, and
        // the receiver leaves them out of the jitter, so the spacing inside
        // a batch never counts as jitter. (A clock read for each of them
        // would be unused, and at full rate cost ~4 % of the send rate.)
        // Paced below the system-call rate, every call holds one datagram.
        let base_flags = if measuring { F_MEASURED } else { 0 };
        h.ts_ns = start.elapsed().as_nanos() as u64;
        for i in 0..k {
            h.flags = base_flags | if i > 0 { F_BATCHED } else { 0 };
            h.seq = match plan.script {
                Some(s) => s[seq as usize + i],
                None => seq + i as u64,
            };
            h.write(batch.slot(i));
        }
        match batch.send(fd, k) {
            Ok(m) => {
                seq += m as u64;
                st.sent_total += m as u64;
                if measuring {
                    st.sent += m as u64;
                    st.bytes += (m * plan.size) as u64;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                // The local queue is full: retry these datagrams.
                st.enobufs += 1;
                std::thread::yield_now();
            }
            Err(e) => return Err(SockError::data("UDP send", e)),
        }
    }
    let t_end = Instant::now();
    st.secs = t_end.duration_since(m_t0).as_secs_f64();
    if plan.script.is_some() {
        st.secs = t_end.duration_since(start).as_secs_f64();
    }
    st.cpu_s = cpu0.used_secs();
    st.buf_node = explain::buffer_node(batch.buffer());
    Ok(st)
}

struct RxCtl {
    abort: AtomicBool,
    /// Set when the peer's sender is done.
    drain: AtomicBool,
}

fn run_receiver(
    sock: &UdpSocket,
    session: u32,
    ctl: &RxCtl,
    rcvbuf: u64,
) -> Result<RxStats, SockError> {
    let fd = sock.as_fd();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| SockError::data("setting UDP receive timeout", e))?;
    // Kernel receive timestamps make the jitter independent of when this
    // thread gets to run, and let one recvmmsg(2) take many datagrams.
    // They are the only arrival clock: without them there is no jitter
    // figure (a user-space clock read per recvmmsg batch would count the
    // batch as jitter).
    let kernel_ts = net::RecvBatch::enable_timestamps(fd);
    let mut batch = net::RecvBatch::new(net::BATCH, 65536);
    explain::first_touch(batch.buffer_mut());
    let base = Instant::now();
    let mut acc = RxAccount::new();
    let mut st = RxStats {
        rcvbuf,
        jitter_error: kernel_ts
            .as_ref()
            .err()
            .map(|e| format!("SO_TIMESTAMPNS: {e}")),
        ..Default::default()
    };
    let kernel_ts = kernel_ts.is_ok();
    let mut untimed: u64 = 0;
    let mut cpu0: Option<ThreadCpu> = None;
    let mut last_any = base;
    let mut drain_since: Option<Instant> = None;
    loop {
        match batch.recv(fd) {
            Ok(k) => {
                let now = Instant::now();
                last_any = now;
                for i in 0..k {
                    let (d, ts) = batch.datagram(i);
                    match Header::read(d) {
                        Some(h) if h.session == session && h.kind == T_DATA => {
                            if h.flags & F_MEASURED != 0 {
                                if cpu0.is_none() {
                                    cpu0 = Some(ThreadCpu::start());
                                }
                                let stamps = match (kernel_ts, ts) {
                                    (true, Some(t)) if h.flags & F_BATCHED == 0 => {
                                        Some((h.ts_ns, t))
                                    }
                                    (true, None) => {
                                        untimed += 1;
                                        None
                                    }
                                    _ => None,
                                };
                                acc.on_datagram(h.seq, d.len(), stamps, now);
                            } else {
                                st.warmup += 1;
                            }
                        }
                        _ => st.foreign += 1,
                    }
                }
            }
            Err(e) if net::is_timeout(&e) || e.kind() == std::io::ErrorKind::Interrupted => {}
            // An ICMP error for our own sends (bidir) surfaces here too;
            // the sender reports it.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(SockError::data("UDP receive", e)),
        }
        if ctl.abort.load(Ordering::Relaxed) {
            return Err(SockError::PeerGone("stopped: the test was aborted".into()));
        }
        if ctl.drain.load(Ordering::Relaxed) {
            let now = Instant::now();
            let since = *drain_since.get_or_insert(now);
            if now.duration_since(last_any) >= DRAIN_IDLE || now.duration_since(since) >= DRAIN_MAX
            {
                break;
            }
        }
    }
    let _ = base;
    st.received = acc.received;
    st.bytes = acc.bytes;
    st.reordered = acc.reordered;
    st.duplicates = acc.duplicates;
    st.stale = acc.stale;
    st.jitter_us = acc.jitter_us();
    if kernel_ts && untimed > 0 && st.jitter_us.is_none() {
        st.jitter_error = Some(format!(
            "{untimed} datagrams came without a kernel timestamp"
        ));
    }
    if let (Some(a), Some(b)) = (acc.first_arrival, acc.last_arrival) {
        st.secs = b.duration_since(a).as_secs_f64();
    }
    st.cpu_s = match cpu0 {
        Some(c0) => c0.used_secs(),
        None => Some(0.0),
    };
    st.buf_node = explain::buffer_node(batch.buffer());
    Ok(st)
}

/// What one side learned by the end.
#[derive(Default)]
struct Outcome {
    my_send: Option<SenderStats>,
    my_rx: Option<RxStats>,
    my_host: Option<HostReport>,
    peer_send: Option<SenderStats>,
    peer_rx: Option<RxStats>,
    peer_host: Option<HostReport>,
}

/// Run this side's sender and receiver threads (pinned to this end's CPUs)
/// and the control exchange.
#[allow(clippy::too_many_arguments)]
fn exchange(
    ctl: &mut Control,
    setup: &EndSetup,
    is_agent: bool,
    sock: &UdpSocket,
    plan: &SendPlan,
    sends: bool,
    receives: bool,
    rcvbuf: u64,
    timeout: Duration,
) -> Result<Outcome, SockError> {
    let rx_ctl = RxCtl {
        abort: AtomicBool::new(false),
        drain: AtomicBool::new(false),
    };
    let peer_sends = receives;
    let peer_receives = sends;
    std::thread::scope(|s| {
        let (stx, srx) = mpsc::channel();
        let (rtx, rrx) = mpsc::channel();
        if sends {
            let abort = &rx_ctl.abort;
            std::thread::Builder::new()
                .name("fabperf-udp-tx".into())
                .spawn_scoped(s, move || {
                    let pinned = setup.pin();
                    let r = run_sender(sock, plan, abort).map(|mut st| {
                        st.pin_error = pinned.error.clone();
                        st
                    });
                    let _ = stx.send(r);
                })
                .expect("spawning the UDP sender");
        }
        if receives {
            let c = &rx_ctl;
            std::thread::Builder::new()
                .name("fabperf-udp-rx".into())
                .spawn_scoped(s, move || {
                    let pinned = setup.pin();
                    let r = run_receiver(sock, plan.session, c, rcvbuf).map(|mut st| {
                        st.pin_error = pinned.error.clone();
                        st
                    });
                    let _ = rtx.send(r);
                })
                .expect("spawning the UDP receiver");
        }
        let r = control_loop(
            ctl,
            setup,
            is_agent,
            plan.omit,
            &rx_ctl,
            srx,
            rrx,
            sends,
            receives,
            peer_sends,
            peer_receives,
            timeout,
        );
        if r.is_err() {
            rx_ctl.abort.store(true, Ordering::Relaxed);
        }
        r
    })
}

#[allow(clippy::too_many_arguments)]
fn control_loop(
    ctl: &mut Control,
    setup: &EndSetup,
    is_agent: bool,
    omit: Duration,
    rx_ctl: &RxCtl,
    srx: Receiver<Result<SenderStats, SockError>>,
    rrx: Receiver<Result<RxStats, SockError>>,
    sends: bool,
    receives: bool,
    peer_sends: bool,
    peer_receives: bool,
    timeout: Duration,
) -> Result<Outcome, SockError> {
    let peer = if is_agent { "the client" } else { "the agent" };
    let mut out = Outcome::default();
    let mut finished_peer = false; // agent: client said Finished
    let mut last_heard = Instant::now();
    let mut last_alive = Instant::now();
    // The host meter runs from the warm-up boundary until this end's
    // threads are done.
    let boundary = Instant::now() + omit;
    let mut host: Option<HostMeter> = None;
    // The agent's framework reports a failed serve to the client itself.
    let fail = |ctl: &mut Control, e: SockError| -> SockError {
        if !is_agent {
            ctl.send_error(ErrorCode::TestFailed, &format!("client: {e}"));
        }
        e
    };
    loop {
        if sends && out.my_send.is_none() {
            match srx.try_recv() {
                Ok(Ok(st)) => {
                    ctl.send_test(&UdpMsg::SenderDone(st.clone()))?;
                    out.my_send = Some(st);
                }
                Ok(Err(e)) => return Err(fail(ctl, e)),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    return Err(SockError::Protocol("the UDP sender thread vanished".into()))
                }
            }
        }
        if receives && out.my_rx.is_none() {
            match rrx.try_recv() {
                Ok(Ok(st)) => {
                    ctl.send_test(&UdpMsg::RxReport(st.clone()))?;
                    out.my_rx = Some(st);
                }
                Ok(Err(e)) => return Err(fail(ctl, e)),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    return Err(SockError::Protocol(
                        "the UDP receiver thread vanished".into(),
                    ))
                }
            }
        }
        if host.is_none() && Instant::now() >= boundary {
            host = Some(setup.meter());
        }
        let threads_done = (!sends || out.my_send.is_some()) && (!receives || out.my_rx.is_some());
        if threads_done && out.my_host.is_none() {
            let tx = out.my_send.as_ref();
            let rx = out.my_rx.as_ref();
            let buf_node = rx.and_then(|r| r.buf_node).or(tx.and_then(|t| t.buf_node));
            let pin_errors: Vec<String> = rx
                .and_then(|r| r.pin_error.clone())
                .into_iter()
                .chain(tx.and_then(|t| t.pin_error.clone()))
                .collect();
            let h = setup.report(
                host.as_ref(),
                buf_node,
                &pin_errors,
                "the test ended within its warm-up",
            );
            ctl.send_test(&UdpMsg::Host(h.clone()))?;
            out.my_host = Some(h);
        }
        let mine_done = threads_done && out.my_host.is_some();
        let theirs_done = (!peer_sends || out.peer_send.is_some())
            && (!peer_receives || out.peer_rx.is_some())
            && out.peer_host.is_some();
        if mine_done && theirs_done {
            if !is_agent {
                ctl.send_test(&UdpMsg::Finished)?;
                return Ok(out);
            }
            if finished_peer {
                return Ok(out);
            }
        }
        let now = Instant::now();
        if now.duration_since(last_alive) >= ALIVE_EVERY {
            ctl.send_test(&UdpMsg::Alive)?;
            last_alive = now;
        }
        if now.duration_since(last_heard) > timeout {
            return Err(SockError::PeerGone(format!(
                "{peer} sent nothing on the control connection for {:.1} s: it stalled, died or the path is down",
                timeout.as_secs_f64()
            )));
        }
        // Wake up at the warm-up boundary, so the host meter (and its counter snapshot)
        // starts there and not up to one poll later.
        let mut poll = Duration::from_millis(20);
        if host.is_none() {
            poll = poll.min(
                boundary
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(1)),
            );
        }
        let readable = net::wait_readable(ctl.stream().as_fd(), poll)
            .map_err(|e| SockError::data("waiting on the control connection", e))?;
        if !readable {
            continue;
        }
        last_heard = Instant::now();
        match ctl.recv_test::<UdpMsg>("a udp-bw control message")? {
            UdpMsg::Alive => {}
            UdpMsg::SenderDone(st) if peer_sends => {
                rx_ctl.drain.store(true, Ordering::Relaxed);
                out.peer_send = Some(st);
            }
            UdpMsg::RxReport(st) if peer_receives => out.peer_rx = Some(st),
            UdpMsg::Host(h) => out.peer_host = Some(h),
            UdpMsg::Finished if is_agent => finished_peer = true,
            other => {
                return Err(SockError::Protocol(format!(
                    "unexpected udp-bw message {other:?}"
                )))
            }
        }
    }
}

/// Client side of `udp-bw`.
pub fn run_udp_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &UdpBwParams,
) -> Result<Vec<Record>, SockError> {
    client(addr, cfg, p, None)
}

/// Like [`run_udp_bw`] (forward direction) but the client sends exactly
/// the sequence numbers of `script`, in order (to exercise the receiver's
/// accounting with drops, reordering and duplicates). The record's `sent`
/// is `intended`: how many distinct datagrams a correct sender would have
/// sent. For tests only.
pub fn run_udp_bw_scripted(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &UdpBwParams,
    script: &[u64],
    intended: u64,
) -> Result<Vec<Record>, SockError> {
    if p.direction != Direction::Forward {
        return Err(SockError::BadParams(
            "scripted sending is forward only".into(),
        ));
    }
    client(addr, cfg, p, Some((script, intended)))
}

fn client(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &UdpBwParams,
    script: Option<(&[u64], u64)>,
) -> Result<Vec<Record>, SockError> {
    p.validate().map_err(SockError::BadParams)?;
    let params = serde_json::to_value(p).expect("params serialize");
    let started_at = fabperf_results::now_rfc3339();
    let sock = udp::client_socket(addr)?;
    let want = p.window.unwrap_or(DEFAULT_WINDOW);
    let rcvbuf = udp::size_buffers(&sock, want);
    let local = sock.local_addr().ok();
    let setup = EndSetup::for_socket(Side::Client, local.map(|a| a.ip()), &p.cpu)
        .map_err(SockError::BadParams)?;
    let (mut ctl, info) = connect_test(addr, cfg, "udp-bw", params)?;
    let info: AcceptInfo = serde_json::from_value(info)
        .map_err(|e| SockError::Protocol(format!("agent's accept info: {e}")))?;
    let cookie = udp::cookie_of(&info.cookie)?;
    match udp::client_hello::<UdpMsg>(&sock, &mut ctl, info.session, &cookie, cfg.timeout, addr)? {
        UdpMsg::Seen => {}
        other => return Err(SockError::Protocol(format!("expected seen, got {other:?}"))),
    }
    let plan = SendPlan {
        session: info.session,
        size: p.size as usize,
        rate_bps: p.rate_bps,
        omit: Duration::from_secs_f64(p.omit_s),
        duration: Duration::from_secs_f64(p.duration_s),
        script: script.map(|s| s.0),
    };
    let mut out = exchange(
        &mut ctl,
        &setup,
        false,
        &sock,
        &plan,
        p.direction.client_sends(),
        p.direction.agent_sends(),
        rcvbuf,
        cfg.timeout,
    )?;
    let _ = ctl.send(&Msg::Bye);
    if let (Some((_, intended)), Some(s)) = (script, out.my_send.as_mut()) {
        s.sent = intended;
    }
    let base = |direction: &str| {
        let mut r = Record::new("udp-bw", Transport::Udp, p.size, 1);
        r.started_at = started_at.clone();
        r.direction = Some(direction.to_string());
        r.local = local.map(|a| a.to_string());
        r.remote = Some(addr.to_string());
        r
    };
    let my_report = out.my_host.clone().unwrap_or_default();
    let peer_report = out.peer_host.clone().unwrap_or_default();
    let my_host = my_report.result();
    let peer_host = peer_report.result();
    let mut recs = Vec::new();
    if let (Some(tx), Some(rx)) = (&out.my_send, &out.peer_rx) {
        let mut r = base("forward");
        fill(&mut r, p, tx, rx, Side::Client, Side::Agent, want);
        set_thread_cpu(&mut r, Side::Client, tx.cpu_s, tx.secs);
        set_thread_cpu(&mut r, Side::Agent, rx.cpu_s, rx.secs);
        recs.push(r);
    }
    if let (Some(tx), Some(rx)) = (&out.peer_send, &out.my_rx) {
        let mut r = base("reverse");
        fill(&mut r, p, tx, rx, Side::Agent, Side::Client, want);
        set_thread_cpu(&mut r, Side::Client, rx.cpu_s, rx.secs);
        set_thread_cpu(&mut r, Side::Agent, tx.cpu_s, tx.secs);
        recs.push(r);
    }
    if p.direction == Direction::Bidir && recs.len() == 2 {
        let mut t = base("bidir");
        let (a, b) = (&recs[0], &recs[1]);
        // Both directions' bytes over the longer of their intervals; a sum
        // that overflows can only come from an impossible report.
        let over = |f: &str| {
            SockError::Protocol(format!(
                "the two directions' {f} overflow when added up: a report is impossible"
            ))
        };
        let bytes = a.bytes.checked_add(b.bytes).ok_or_else(|| over("bytes"))?;
        let secs = a.duration_s.max(b.duration_s);
        let msgs = a
            .iterations
            .unwrap_or(0)
            .checked_add(b.iterations.unwrap_or(0))
            .ok_or_else(|| over("datagrams"))?;
        t.set_throughput(bytes, secs, Some(msgs));
        let (ua, ub) = (
            a.udp.clone().unwrap_or_default(),
            b.udp.clone().unwrap_or_default(),
        );
        let sum = |x: u64, y: u64, f: &str| x.checked_add(y).ok_or_else(|| over(f));
        let sent = sum(ua.sent, ub.sent, "sent datagrams")?;
        let received = sum(ua.received, ub.received, "received datagrams")?;
        let lost = sent.saturating_sub(received);
        let add = |x: Option<u64>, y: Option<u64>| x.zip(y).and_then(|(x, y)| x.checked_add(y));
        t.udp = Some(UdpStats {
            sent,
            received,
            lost,
            duplicates: sum(ua.duplicates, ub.duplicates, "duplicate datagrams")?,
            loss_pct: UdpStats::loss_pct_of(lost, sent),
            reordered: add(ua.reordered, ub.reordered),
            stale: add(ua.stale, ub.stale),
            // Per direction only: two directions' jitter do not combine.
            jitter_us: None,
            ..Default::default()
        });
        t.cpu_local_pct = sum_opt(a.cpu_local_pct, b.cpu_local_pct);
        t.cpu_remote_pct = sum_opt(a.cpu_remote_pct, b.cpu_remote_pct);
        let notes: Vec<_> = a
            .warnings
            .iter()
            .chain(b.warnings.iter())
            .cloned()
            .collect();
        t.add_notes(&notes);
        if t.bw_gbps.is_none() && !t.has_warning("no-interval") {
            t.warn(Warning::NoInterval {
                what: "no datagram arrived after the warm-up in either direction".into(),
            });
        }
        recs.insert(0, t);
    }
    for r in recs.iter_mut() {
        set_host_cpu(r, Side::Client, &my_host);
        set_host_cpu(r, Side::Agent, &peer_host);
    }
    if recs.is_empty() {
        return Err(SockError::Protocol(
            "the agent's reports were incomplete".into(),
        ));
    }
    explain::apply(
        &mut recs,
        &my_report,
        &peer_report,
        &explain::TestKindInfo {
            full_rate_bandwidth: p.rate_bps.is_none() && script.is_none(),
            one: "one UDP stream".into(),
            more_streams_hint: "larger datagrams (-l up to the path MTU, or 8972 with jumbo frames) carry more per system call; several udp-bw runs at once (fabperf run) show what the link carries".into(),
        },
    );
    Ok(recs)
}

/// The sum when both are known (a partial sum would read as a whole).
fn sum_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a + b)
}

fn fill(
    r: &mut Record,
    p: &UdpBwParams,
    tx: &SenderStats,
    rx: &RxStats,
    txs: Side,
    rxs: Side,
    want: u64,
) {
    // The receiver's bytes over the sender's measured interval.
    r.set_throughput(rx.bytes, tx.secs, Some(rx.received));
    let lost = tx.sent.saturating_sub(rx.received);
    r.udp = Some(UdpStats {
        sent: tx.sent,
        received: rx.received,
        lost,
        duplicates: rx.duplicates,
        loss_pct: UdpStats::loss_pct_of(lost, tx.sent),
        reordered: Some(rx.reordered),
        stale: Some(rx.stale),
        jitter_us: rx.jitter_us,
        ..Default::default()
    });
    if r.bw_gbps.is_none() {
        r.warn(Warning::NoInterval {
            what: "the sender's measured interval had no length".into(),
        });
    }
    if rx.received > tx.sent {
        r.warn(Warning::CountMismatch {
            text: format!(
                "the receiver counted {} datagrams but the sender reported {}: datagrams from the \
                 warm-up boundary or a confused peer",
                rx.received, tx.sent
            ),
        });
    }
    if tx.sent == 0 {
        r.warn(Warning::NothingSent);
    } else if rx.received == 0 {
        r.warn(Warning::UdpBlocked { from: txs, to: rxs });
    }
    if rx.stale > 0 {
        r.warn(Warning::StaleDatagrams {
            count: rx.stale,
            window: SeenWindow::WINDOW,
        });
    }
    if rx.jitter_us.is_none() && rx.received > 1 {
        r.warn(Warning::NoJitter {
            side: rxs,
            why: rx
                .jitter_error
                .clone()
                .unwrap_or_else(|| "fewer than two timed datagrams".into()),
        });
    }
    // A paced sender spins between datagrams, so its CPU says nothing then.
    if let Some(cpu) = tx.cpu_s {
        if p.rate_bps.is_none() && tx.secs > 0.0 && cpu / tx.secs > 0.95 {
            r.warn(Warning::CpuBound {
                role: "sender".into(),
                side: txs,
                pct: cpu / tx.secs * 100.0,
                hint: String::new(),
            });
        }
    }
    if let Some(cpu) = rx.cpu_s {
        if rx.secs > 0.0 && cpu / rx.secs > 0.95 && lost > 0 {
            r.warn(Warning::ReceiverCpuLoss {
                side: rxs,
                pct: cpu / rx.secs * 100.0,
            });
        }
    }
    if rx.rcvbuf.saturating_add(4096) < want {
        r.warn(Warning::SmallReceiveBuffer {
            side: rxs,
            got: rx.rcvbuf,
            want,
        });
    }
    if let Some(rate) = p.rate_bps {
        let offered = tx.bytes as f64 * 8.0 / tx.secs.max(1e-9);
        if tx.sent > 0 && offered < rate as f64 * 0.9 {
            r.warn(Warning::RateNotReached {
                reached_gbps: offered / 1e9,
                asked_gbps: rate as f64 / 1e9,
            });
        }
    }
    if tx.enobufs > 0 {
        r.warn(Warning::SendQueueFull {
            side: txs,
            count: tx.enobufs,
        });
    }
    if tx.secs > 0.0 && tx.secs < 0.5 && p.duration_s >= 0.5 {
        r.warn(Warning::ShortInterval { secs: tx.secs });
    }
}

/// Agent side of `udp-bw`.
pub struct UdpBw;

impl TestKind for UdpBw {
    fn name(&self) -> &'static str {
        "udp-bw"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: UdpBwParams = fabperf_proto::decode_params("udp-bw", params)?;
        p.validate().map_err(ServeError::bad_request)?;
        ctx.limit_duration(p.duration_s + p.omit_s)?;
        let want = p.window.unwrap_or(DEFAULT_WINDOW);
        ctx.limits
            .check_memory(want * 2 + (1 << 20), "udp-bw socket buffers and window")?;
        let io = ctx.limits.io_timeout;
        let setup = EndSetup::for_socket(Side::Agent, Some(ctx.local().ip()), &p.cpu)
            .map_err(ServeError::bad_request)?;
        let (sock, _door, cookie) = udp::agent_socket(ctx)?;
        let rcvbuf = udp::size_buffers(&sock, want);
        let session = udp::new_session();
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                session,
                cookie: udp::cookie_hex(&cookie),
            })
            .expect("accept info serializes"),
        })?;
        udp::agent_wait_hello(&sock, session, &cookie, io, ctx)?;
        ctx.ctl.send_test(&UdpMsg::Seen)?;
        let plan = SendPlan {
            session,
            size: p.size as usize,
            rate_bps: p.rate_bps,
            omit: Duration::from_secs_f64(p.omit_s),
            duration: Duration::from_secs_f64(p.duration_s),
            script: None,
        };
        exchange(
            ctx.ctl,
            &setup,
            true,
            &sock,
            &plan,
            p.direction.agent_sends(),
            p.direction.client_sends(),
            rcvbuf,
            io,
        )?;
        Ok(())
    }
}
