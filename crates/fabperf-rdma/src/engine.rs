//! The measuring loops (both ends) and the liveness protocol around them.
//!
//! While a side runs it sends `Progress` every second over the control
//! channel and a `SideDone` when its part is complete; a reader thread
//! watches the peer's frames. A peer that sends nothing for the timeout is
//! declared dead, so nothing hangs (perftest waits forever).

use crate::error::RdmaError;
use crate::msg::{SideStats, Step};
use crate::prio::IdleGuard;
use crate::verbs::{wr_count, wr_qp, Endpoint, Op, Wc, RECV_FLAG};
use fabperf_proto::cpu;
use fabperf_proto::{write_frame, Control, Msg, ProtoError};
use fabperf_results::{LatencyHistogram, LatencyKind};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BEAT: Duration = Duration::from_secs(1);
/// Most requests posted with one doorbell.
const POST_BATCH: u64 = 32;

/// Empty polls (bandwidth loop, send/read waits) between two looks at the
/// clock, for the window edges, heartbeats, timeouts and the yield policy.
/// A clock read is a vDSO call of ~20-60 ns with a TSC, but a system call
/// plus a trapped device access (~0.8 µs under QEMU TCG) when the kernel
/// has fallen back to hpet/acpi_pm; at one read per 64 polls that cost
/// fabperf ~10 % of soft-RoCE bandwidth and 5-20 % of latency against
/// perftest, which reads the TSC directly. Every 1024 polls is still every
/// ~10-100 µs.
const CHECK_EVERY_POLLS: u32 = 1024;
/// Loads of the polled byte (write latency) between two looks at the
/// clock and the completion queue: a load is much cheaper than a poll.
const CHECK_EVERY_LOADS: u32 = 16384;

/// Busy-wait policy: spin tightly (a real NIC answers in microseconds),
/// but after `YIELD_AFTER` without progress give the CPU away on every
/// check, so the kernel work a software device (rxe) needs, or the peer
/// process on an oversubscribed host, is not starved by our spinning.
/// The threshold sits well above a soft-RoCE round trip (~70 us under
/// TCG): yielding inside a normal wait (it was 20 us) cost 10-100 % in
/// latency against perftest, which never yields; 1 ms still rescues the
/// starved case (p50 of 1-2 ms without any yield). A bandwidth sender
/// with requests in flight follows it only on a single-CPU machine (see
/// `yield_with_requests_in_flight`).
const YIELD_AFTER: Duration = Duration::from_millis(1);

/// Whether a bandwidth sender keeps the `Idle` policy (yield after
/// `YIELD_AFTER` without a completion) while its own requests are in
/// flight. Only on a single-CPU machine: there the device's kernel work
/// (rxe) can run nowhere else, and yielding to it moved 1 MiB soft-RoCE
/// writes from 0.31-0.34 Gbit/s (perftest's rate: it never yields) to
/// 0.48-0.54. With a second CPU the kernel work runs there, and yielding
/// only pulls it onto the poller's CPU: ~5 times the context switches and
/// 0.95 x perftest at 1 MiB, against 1.01 x without (BENCHMARKS.md, stop
/// 11). Receivers and latency loops always keep the policy.
fn yield_with_requests_in_flight(online_cpus: Option<usize>) -> bool {
    online_cpus == Some(1)
}

#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    yielding: bool,
}

impl Idle {
    #[inline]
    fn progress(&mut self) {
        self.since = None;
        self.yielding = false;
    }

    /// Call on every slow check of an empty wait (one clock read per few
    /// hundred polls, not per poll).
    #[inline]
    fn wait_at(&mut self, now: Instant) {
        if self.yielding {
            std::thread::yield_now();
            return;
        }
        match self.since {
            None => self.since = Some(now),
            Some(s) if now.duration_since(s) >= YIELD_AFTER => self.yielding = true,
            Some(_) => {}
        }
    }
}

/// Receive the next step, skipping `Progress`.
pub fn recv_step(ctl: &mut Control, timeout: Duration, what: &str) -> Result<Step, ProtoError> {
    loop {
        match ctl.recv_test_within::<Step>(timeout, what)? {
            Step::Progress => continue,
            s => return Ok(s),
        }
    }
}

/// Shared state between a measuring loop and the control reader.
#[derive(Default)]
pub struct PeerState {
    done: AtomicBool,
    failed: AtomicBool,
    error: Mutex<Option<RdmaError>>,
    local_finished: AtomicBool,
}

impl PeerState {
    fn fail(&self, e: RdmaError) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }
    fn take_error(&self) -> Option<RdmaError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The loop's handle: heartbeats out, peer state in.
pub struct Beat<'a> {
    w: TcpStream,
    last: Instant,
    sent_done: bool,
    peer: &'a PeerState,
}

impl Beat<'_> {
    /// Send `Progress` when a second has passed; fail when the peer failed.
    #[inline]
    pub fn tick(&mut self, now: Instant) -> Result<(), RdmaError> {
        if self.peer.failed.load(Ordering::Acquire) {
            return Err(self
                .peer
                .take_error()
                .unwrap_or_else(|| RdmaError::Stalled("the peer failed".into())));
        }
        if !self.sent_done && now.duration_since(self.last) >= BEAT {
            self.last = now;
            write_frame(&mut self.w, &step_msg(&Step::Progress))?;
        }
        Ok(())
    }

    /// This side's part is complete.
    pub fn done(&mut self) -> Result<(), RdmaError> {
        if !self.sent_done {
            self.sent_done = true;
            write_frame(&mut self.w, &step_msg(&Step::SideDone))?;
        }
        Ok(())
    }

    #[inline]
    pub fn peer_done(&self) -> bool {
        self.peer.done.load(Ordering::Acquire)
    }
}

fn step_msg(s: &Step) -> Msg {
    Msg::Test {
        body: serde_json::to_value(s).unwrap_or(serde_json::Value::Null),
    }
}

/// Run `f` while a reader thread watches the peer. The reader ends at the
/// peer's `SideDone`, on an error frame, on a closed connection, or when
/// the peer has been silent for `timeout`. With `idle`, `f` (a polling
/// loop) runs at SCHED_IDLE; the reader, started before, keeps the
/// caller's scheduling.
pub fn with_peer<R>(
    ctl: &mut Control,
    timeout: Duration,
    idle: bool,
    f: impl FnOnce(&mut Beat<'_>) -> Result<R, RdmaError>,
) -> Result<R, RdmaError> {
    let w = ctl
        .stream()
        .try_clone()
        .map_err(|e| ProtoError::io("cloning the control connection", e))?;
    let peer = PeerState::default();
    std::thread::scope(|s| {
        let peer_ref = &peer;
        let reader = s.spawn(move || watch_peer(ctl, timeout, peer_ref));
        let mut beat = Beat {
            w,
            last: Instant::now(),
            sent_done: false,
            peer: &peer,
        };
        let guard = IdleGuard::enter(idle);
        let r = f(&mut beat);
        drop(guard);
        peer.local_finished.store(true, Ordering::Release);
        let _ = reader.join();
        r
    })
}

fn watch_peer(ctl: &mut Control, timeout: Duration, peer: &PeerState) {
    let slice = Duration::from_millis(100).min(timeout);
    let mut last = Instant::now();
    loop {
        if peer.local_finished.load(Ordering::Acquire) {
            return;
        }
        match ctl.recv_test_within::<Step>(slice, "the peer's progress") {
            Ok(Step::Progress) => last = Instant::now(),
            Ok(Step::SideDone) => {
                peer.done.store(true, Ordering::Release);
                return;
            }
            Ok(other) => {
                peer.fail(RdmaError::Proto(ProtoError::Unexpected {
                    expected: "progress or side_done".into(),
                    got: format!("{other:?}"),
                }));
                return;
            }
            Err(ProtoError::Timeout { .. }) => {
                if last.elapsed() >= timeout {
                    peer.fail(RdmaError::Stalled(format!(
                        "the peer sent nothing for {:.1} s during the test: it died or stalled \
                         (raise --timeout if it is only slow)",
                        timeout.as_secs_f64()
                    )));
                    return;
                }
            }
            Err(e) => {
                peer.fail(match e {
                    ProtoError::Closed { .. } => RdmaError::Stalled(
                        "the peer closed the control connection during the test (it exited or crashed)"
                            .into(),
                    ),
                    other => RdmaError::Proto(other),
                });
                return;
            }
        }
    }
}

/// A passive side (its memory is the target of the peer's writes/reads):
/// wait, without spinning, until the peer says it is done.
pub fn passive_wait(ctl: &mut Control, timeout: Duration) -> Result<(), RdmaError> {
    let mut w = ctl
        .stream()
        .try_clone()
        .map_err(|e| ProtoError::io("cloning the control connection", e))?;
    write_frame(&mut w, &step_msg(&Step::SideDone))?;
    let peer = PeerState::default();
    watch_peer(ctl, timeout, &peer);
    if peer.done.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(peer
            .take_error()
            .unwrap_or_else(|| RdmaError::Stalled("the peer went away".into())))
    }
}

/// What one side sends.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub op: Op,
    pub size: u32,
    /// Iterations per QP (iteration mode).
    pub iters: Option<u64>,
    pub warmup: Duration,
    /// Measured time (duration mode).
    pub duration: Option<Duration>,
    pub tx_depth: u32,
    pub cq_mod: u32,
    pub inline: bool,
}

/// Result of one side's bandwidth loop.
pub struct BwOutcome {
    pub stats: Option<SideStats>,
    pub cpu_pct: f64,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

/// The bandwidth loop: post `plan` (if any), repost receives (if `recv`),
/// until this side is done and the peer said `SideDone`.
pub fn bw_side(
    ep: &mut Endpoint,
    plan: Option<Plan>,
    recv: bool,
    rx_depth: u32,
    beat: &mut Beat<'_>,
    timeout: Duration,
) -> Result<BwOutcome, RdmaError> {
    let nqp = ep.nqps();
    if plan.is_none() {
        beat.done()?;
    }
    let mut posted = vec![0u64; nqp];
    let mut completed = vec![0u64; nqp];
    let mut recv_outstanding = vec![rx_depth as u64; nqp];
    let mut repost = vec![0u32; nqp];
    let mut wcs = Vec::with_capacity(64);
    let start = Instant::now();
    let mut phase = match plan {
        Some(p) if p.duration.is_some() && !p.warmup.is_zero() => Phase::Warmup,
        _ => Phase::Measure,
    };
    let cpu0 = cpu::thread_cpu_time();
    let mut m_start = start;
    let mut m_cpu = cpu0;
    let mut m_done = vec![0u64; nqp];
    let mut m_end: Option<(Instant, Vec<u64>, Duration)> = None;
    // Duration mode: the first and last completion inside the window; the
    // rate between them does not depend on where the window edges fall
    // between two (possibly far apart) signaled completions.
    let mut m_first: Option<(Instant, Vec<u64>)> = None;
    let mut m_last: Option<(Instant, Vec<u64>)> = None;
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut last_sample = start;
    let mut last_completion = start;
    let mut sender_done = plan.is_none();
    let size = plan.map(|p| p.size as u64).unwrap_or(0);
    let mut spins: u32 = 0;
    let mut idle = Idle::default();
    let yield_in_flight = yield_with_requests_in_flight(crate::sys::online_cpus());
    loop {
        if let Some(p) = plan {
            if phase != Phase::Drain && !sender_done {
                for q in 0..nqp {
                    let remaining = p.iters.map(|n| n - posted[q]).unwrap_or(u64::MAX);
                    let room = p.tx_depth as u64 - (posted[q] - completed[q]);
                    let n = remaining.min(room).min(POST_BATCH);
                    if n > 0 {
                        ep.post_run(
                            q, p.op, p.size, p.inline, posted[q], n as u32, p.cq_mod, p.iters,
                        )?;
                        posted[q] += n;
                    }
                }
            } else if phase == Phase::Drain && !sender_done {
                // Finish up to the next signaled request so every posted
                // one is accounted for by a completion.
                let cq = p.cq_mod.max(1) as u64;
                for q in 0..nqp {
                    let rem = posted[q] % cq;
                    if rem != 0 {
                        let n = cq - rem;
                        if posted[q] - completed[q] + n <= p.tx_depth as u64 {
                            ep.post_run(
                                q, p.op, p.size, p.inline, posted[q], n as u32, p.cq_mod, None,
                            )?;
                            posted[q] += n;
                        }
                    }
                }
            }
        }
        let n = ep.poll(&mut wcs)?;
        spins = spins.wrapping_add(1);
        // Read the clock only when something happened or every
        // CHECK_EVERY_POLLS empty polls (see there).
        if n == 0 && spins & (CHECK_EVERY_POLLS - 1) != 0 {
            continue;
        }
        let now = Instant::now();
        let mut got_send = false;
        if n > 0 {
            for wc in &wcs {
                if wc.status != 0 {
                    let what = if wc.wr_id & RECV_FLAG != 0 {
                        "a receive"
                    } else {
                        plan.map(|p| p.op.as_str()).unwrap_or("a request")
                    };
                    return Err(ep.completion_error(wc, what));
                }
                let q = wr_qp(wc.wr_id);
                if q >= nqp {
                    continue;
                }
                if wc.wr_id & RECV_FLAG != 0 {
                    recv_outstanding[q] -= 1;
                    repost[q] += 1;
                } else {
                    completed[q] += wr_count(wc.wr_id) as u64;
                    last_completion = now;
                    got_send = true;
                }
            }
            if got_send && phase == Phase::Measure && m_end.is_none() {
                if m_first.is_none() {
                    m_first = Some((now, completed.clone()));
                } else {
                    // Reuse the vector: no allocation per completion.
                    let (t, c) = m_last.get_or_insert_with(|| (now, completed.clone()));
                    *t = now;
                    c.copy_from_slice(&completed);
                }
            }
            if recv {
                for q in 0..nqp {
                    // Repost in batches (one doorbell for many).
                    if repost[q] >= 16 || recv_outstanding[q] < (rx_depth as u64) / 2 {
                        ep.post_recvs(q, repost[q])?;
                        recv_outstanding[q] += repost[q] as u64;
                        repost[q] = 0;
                    }
                }
            }
            if phase == Phase::Measure
                && plan.is_some()
                && now.duration_since(last_sample) >= Duration::from_micros(100)
                && samples.len() < 4_000_000
            {
                last_sample = now;
                let done: u64 = completed.iter().sum::<u64>() - m_done.iter().sum::<u64>();
                samples.push((now.duration_since(m_start).as_nanos() as u64, done * size));
            }
        }
        // Our own requests not yet completed (never more completed than posted).
        let in_flight = !sender_done && (0..nqp).any(|q| completed[q] < posted[q]);
        if let Some(p) = plan {
            match (phase, p.duration) {
                (Phase::Warmup, _) if now.duration_since(start) >= p.warmup => {
                    phase = Phase::Measure;
                    m_start = now;
                    m_cpu = cpu::thread_cpu_time();
                    m_done = completed.clone();
                    last_sample = now;
                }
                (Phase::Measure, Some(d)) if now.duration_since(m_start) >= d => {
                    phase = Phase::Drain;
                    m_end = Some((now, completed.clone(), cpu::thread_cpu_time()));
                }
                _ => {}
            }
            if !sender_done {
                let finished = match p.duration {
                    Some(_) => phase == Phase::Drain && !in_flight,
                    None => p.iters.is_some_and(|n| (0..nqp).all(|q| completed[q] == n)),
                };
                if finished {
                    if m_end.is_none() {
                        m_end = Some((last_completion, completed.clone(), cpu::thread_cpu_time()));
                    }
                    sender_done = true;
                    beat.done()?;
                }
                if in_flight && now.duration_since(last_completion) >= timeout {
                    let r = ep.remote.as_ref().map(|r| r.describe()).unwrap_or_default();
                    return Err(RdmaError::Stalled(format!(
                        "no {} completed for {:.1} s: the peer ({r}) stopped answering or the path drops packets",
                        p.op.as_str(),
                        timeout.as_secs_f64()
                    )));
                }
            }
        }
        if sender_done && beat.peer_done() {
            break;
        }
        // Still right if `sender_done` was just set: that needs nothing in flight.
        if n > 0 || (in_flight && !yield_in_flight) {
            idle.progress();
        } else {
            idle.wait_at(now);
        }
        beat.tick(now)?;
    }
    // Leave receives posted for the next size.
    if recv {
        for (q, n) in repost.iter().enumerate() {
            ep.post_recvs(q, *n)?;
        }
    }
    let end_cpu = cpu::thread_cpu_time();
    let Some(p) = plan else {
        let wall = start.elapsed();
        return Ok(BwOutcome {
            stats: None,
            cpu_pct: cpu::percent(end_cpu.saturating_sub(cpu0), wall),
        });
    };
    let (t_end, done_end, cpu_end) = m_end.unwrap_or((last_completion, completed.clone(), end_cpu));
    let cpu_pct = cpu::percent(cpu_end.saturating_sub(m_cpu), t_end.duration_since(m_start));
    let mut note = None;
    let (secs, per_qp): (f64, Vec<u64>) = match (p.duration, &m_first, &m_last) {
        (None, _, _) => (
            t_end.duration_since(m_start).as_secs_f64(),
            (0..nqp).map(|q| done_end[q] - m_done[q]).collect(),
        ),
        (Some(_), Some((ta, ca)), Some((tb, cb))) if tb > ta => (
            tb.duration_since(*ta).as_secs_f64(),
            (0..nqp).map(|q| cb[q] - ca[q]).collect(),
        ),
        (Some(_), _, _) => {
            note = Some(format!(
                "fewer than two completions inside the measured window (the link moved less than \
                 2 x --cq-mod {} messages); the figure covers the whole run including warm-up — \
                 use a longer --duration or a smaller --cq-mod",
                p.cq_mod
            ));
            (
                last_completion.duration_since(start).as_secs_f64(),
                completed.clone(),
            )
        }
    };
    let msgs: u64 = per_qp.iter().sum();
    let bytes = msgs * p.size as u64;
    // The samples are relative to the window start.
    let w_secs = t_end.duration_since(m_start).as_secs_f64();
    let w_bytes = (0..nqp).map(|q| done_end[q] - m_done[q]).sum::<u64>() * p.size as u64;
    let avg = if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e9
    } else {
        0.0
    };
    let peak = peak_gbps(&samples, w_secs, w_bytes).map(|g| g.max(avg));
    Ok(BwOutcome {
        stats: Some(SideStats {
            bytes,
            secs,
            msgs,
            peak_gbps: peak,
            per_qp_msgs: per_qp,
            note,
        }),
        cpu_pct,
    })
}

/// perftest's "BW peak": the best bandwidth over a window of 5 % of the
/// measured time (at least 1 ms), from samples of (ns, bytes) taken at
/// most every 100 µs. Never below the average.
pub fn peak_gbps(samples: &[(u64, u64)], secs: f64, bytes: u64) -> Option<f64> {
    if secs <= 0.0 {
        return None;
    }
    let avg = bytes as f64 * 8.0 / secs / 1e9;
    // At least a few completion gaps wide, or one burst of completions
    // would look like a peak.
    let gap = secs * 1e9 / (samples.len() as f64 + 1.0);
    let window = ((secs * 1e9 / 20.0) as u64)
        .max(1_000_000)
        .max((4.0 * gap) as u64);
    let mut pts = Vec::with_capacity(samples.len() + 2);
    pts.push((0u64, 0u64));
    pts.extend_from_slice(samples);
    pts.push(((secs * 1e9) as u64, bytes));
    let mut best = avg;
    let mut i = 0;
    for j in 0..pts.len() {
        while i + 1 < j && pts[j].0 - pts[i + 1].0 >= window {
            i += 1;
        }
        let dt = pts[j].0.saturating_sub(pts[i].0);
        if dt >= window {
            let g = (pts[j].1.saturating_sub(pts[i].1)) as f64 * 8.0 / dt as f64;
            if g > best {
                best = g;
            }
        }
    }
    Some(best)
}

/// What the latency initiator measures.
#[derive(Debug, Clone, Copy)]
pub struct LatPlan {
    pub op: Op,
    pub size: u32,
    pub iters: Option<u64>,
    pub warmup: Duration,
    pub duration: Option<Duration>,
    pub inline: bool,
    pub tx_depth: u32,
}

pub struct LatOutcome {
    pub hist: LatencyHistogram,
    pub cpu_pct: f64,
    pub secs: f64,
}

/// Ping-pong tag for iteration `i` (never 0, the initial byte).
#[inline]
pub fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Reap send completions without waiting; error on a failed one.
#[inline]
fn reap(
    ep: &mut Endpoint,
    wcs: &mut Vec<Wc>,
    sends: &mut u64,
    recvs: &mut Vec<u64>,
    what: &str,
) -> Result<(), RdmaError> {
    if ep.poll(wcs)? > 0 {
        for wc in wcs.iter() {
            if wc.status != 0 {
                let w = if wc.wr_id & RECV_FLAG != 0 {
                    "a receive"
                } else {
                    what
                };
                return Err(ep.completion_error(wc, w));
            }
            if wc.wr_id & RECV_FLAG != 0 {
                recvs.push(wc.wr_id);
            } else {
                *sends = sends.saturating_sub(1);
            }
        }
    }
    Ok(())
}

/// The latency initiator (client): one QP, strict ping-pong.
pub fn lat_initiator(
    ep: &mut Endpoint,
    p: LatPlan,
    beat: &mut Beat<'_>,
    timeout: Duration,
) -> Result<LatOutcome, RdmaError> {
    let kind = if p.op == Op::Read {
        LatencyKind::Rtt
    } else {
        LatencyKind::HalfRtt
    };
    let mut hist = LatencyHistogram::new(kind);
    let last = p.size as usize - 1;
    let mut wcs = Vec::with_capacity(64);
    let mut recvs: Vec<u64> = Vec::new();
    let mut sends_out: u64 = 0;
    let mut idle = Idle::default();
    let start = Instant::now();
    let mut measuring = p.duration.is_none() || p.warmup.is_zero();
    let mut m_start = start;
    let mut m_cpu = cpu::thread_cpu_time();
    let mut i: u64 = 0;
    loop {
        if let Some(n) = p.iters {
            if i >= n {
                break;
            }
        }
        let t0 = Instant::now();
        if !measuring && t0.duration_since(start) >= p.warmup {
            measuring = true;
            m_start = t0;
            m_cpu = cpu::thread_cpu_time();
        }
        if let Some(d) = p.duration {
            if measuring && t0.duration_since(m_start) >= d {
                break;
            }
        }
        if sends_out >= p.tx_depth as u64 {
            // Should not happen in ping-pong; wait for the send queue.
            while sends_out >= p.tx_depth as u64 {
                reap(ep, &mut wcs, &mut sends_out, &mut recvs, p.op.as_str())?;
                if t0.elapsed() >= timeout {
                    return Err(stalled(ep, p.op, timeout));
                }
            }
        }
        let t = tag(i);
        idle.progress();
        match p.op {
            Op::Write => {
                ep.src.store(last, t);
                ep.post(0, Op::Write, 1, p.size, p.inline)?;
                sends_out += 1;
                let mut spins: u32 = 0;
                while ep.dst.load(last) != t {
                    spins = spins.wrapping_add(1);
                    if spins & (CHECK_EVERY_LOADS - 1) == 0 {
                        reap(ep, &mut wcs, &mut sends_out, &mut recvs, "write")?;
                        let now = Instant::now();
                        idle.wait_at(now);
                        if now.duration_since(t0) >= timeout {
                            return Err(stalled(ep, p.op, timeout));
                        }
                        beat.tick(now)?;
                    }
                }
            }
            Op::Send | Op::Read => {
                // Send: done when the peer's reply arrives as a receive.
                // Read: done when our own read completes. Reads are never inline.
                let send = p.op == Op::Send;
                ep.post(0, p.op, 1, p.size, send && p.inline)?;
                sends_out += 1;
                let mut spins: u32 = 0;
                while if send {
                    recvs.is_empty()
                } else {
                    sends_out > 0
                } {
                    reap(ep, &mut wcs, &mut sends_out, &mut recvs, p.op.as_str())?;
                    spins = spins.wrapping_add(1);
                    if spins & (CHECK_EVERY_POLLS - 1) == 0 {
                        let now = Instant::now();
                        idle.wait_at(now);
                        if now.duration_since(t0) >= timeout {
                            return Err(stalled(ep, p.op, timeout));
                        }
                        beat.tick(now)?;
                    }
                }
            }
        }
        let t1 = Instant::now();
        if measuring {
            hist.record_rtt_ns(t1.duration_since(t0).as_nanos() as u64);
        }
        if recvs.pop().is_some() {
            ep.post_recvs(0, 1)?;
        }
        if p.op == Op::Write && sends_out > 0 {
            reap(ep, &mut wcs, &mut sends_out, &mut recvs, "write")?;
        }
        i += 1;
        if i & 255 == 0 {
            beat.tick(t1)?;
        }
    }
    let end = Instant::now();
    let cpu_pct = cpu::percent(
        cpu::thread_cpu_time().saturating_sub(m_cpu),
        end.duration_since(m_start),
    );
    // Let the last sends complete so the QP is clean for the next size.
    let t = Instant::now();
    while sends_out > 0 && t.elapsed() < timeout {
        reap(ep, &mut wcs, &mut sends_out, &mut recvs, p.op.as_str())?;
    }
    if !recvs.is_empty() {
        let n = recvs.len() as u32;
        ep.post_recvs(0, n)?;
    }
    beat.done()?;
    Ok(LatOutcome {
        hist,
        cpu_pct,
        secs: end.duration_since(m_start).as_secs_f64(),
    })
}

fn stalled(ep: &Endpoint, op: Op, timeout: Duration) -> RdmaError {
    let r = ep.remote.as_ref().map(|r| r.describe()).unwrap_or_default();
    RdmaError::Stalled(format!(
        "no {} reply for {:.1} s: the peer ({r}) died or stalled",
        op.as_str(),
        timeout.as_secs_f64()
    ))
}

/// The latency responder (agent) for write and send: answer every ping
/// until the initiator says it is done. Returns its CPU percent.
pub fn lat_responder(
    ep: &mut Endpoint,
    op: Op,
    size: u32,
    inline: bool,
    beat: &mut Beat<'_>,
) -> Result<f64, RdmaError> {
    // The responder has nothing of its own to finish.
    beat.done()?;
    let last = size as usize - 1;
    let mut wcs = Vec::with_capacity(64);
    let mut recvs: Vec<u64> = Vec::new();
    let mut sends_out: u64 = 0;
    let mut idle = Idle::default();
    let start = Instant::now();
    let cpu0 = cpu::thread_cpu_time();
    let mut i: u64 = 0;
    let mut spins: u32 = 0;
    'outer: loop {
        let t = tag(i);
        idle.progress();
        match op {
            Op::Write => {
                while ep.dst.load(last) != t {
                    spins = spins.wrapping_add(1);
                    if spins & (CHECK_EVERY_LOADS - 1) == 0 {
                        if beat.peer_done() {
                            break 'outer;
                        }
                        reap(ep, &mut wcs, &mut sends_out, &mut recvs, "write")?;
                        let now = Instant::now();
                        idle.wait_at(now);
                        beat.tick(now)?;
                    }
                }
                ep.src.store(last, t);
                ep.post(0, Op::Write, 1, size, inline)?;
                sends_out += 1;
                while sends_out >= (ep.tx_depth as u64 / 2).max(1) {
                    reap(ep, &mut wcs, &mut sends_out, &mut recvs, "write")?;
                    if beat.peer_done() {
                        break;
                    }
                }
            }
            Op::Send => {
                while recvs.is_empty() {
                    reap(ep, &mut wcs, &mut sends_out, &mut recvs, "send")?;
                    spins = spins.wrapping_add(1);
                    if spins & (CHECK_EVERY_POLLS - 1) == 0 {
                        if beat.peer_done() {
                            break 'outer;
                        }
                        let now = Instant::now();
                        idle.wait_at(now);
                        beat.tick(now)?;
                    }
                }
                ep.post(0, Op::Send, 1, size, inline)?;
                sends_out += 1;
                while sends_out >= (ep.tx_depth as u64 / 2).max(1) {
                    reap(ep, &mut wcs, &mut sends_out, &mut recvs, "send")?;
                    if beat.peer_done() {
                        break;
                    }
                }
                // One ping answered: give its receive back.
                recvs.pop();
                ep.post_recvs(0, 1)?;
            }
            Op::Read => {
                return Err(RdmaError::BadRequest(
                    "read latency has no responder".into(),
                ))
            }
        }
        i += 1;
    }
    let cpu_pct = cpu::percent(cpu::thread_cpu_time().saturating_sub(cpu0), start.elapsed());
    // Drain our own last sends.
    let t = Instant::now();
    while sends_out > 0 && t.elapsed() < Duration::from_secs(2) {
        reap(ep, &mut wcs, &mut sends_out, &mut recvs, op.as_str())?;
    }
    if !recvs.is_empty() {
        let n = recvs.len() as u32;
        ep.post_recvs(0, n)?;
    }
    Ok(cpu_pct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_cycle_without_zero() {
        assert_eq!(tag(0), 1);
        assert_eq!(tag(254), 255);
        assert_eq!(tag(255), 1);
        assert!((0..10_000).all(|i| tag(i) != 0 && tag(i) != tag(i + 1)));
    }

    #[test]
    fn peak_is_best_window_and_at_least_average() {
        // 1 s at 8 Gbit/s average, with a burst at 2x for 100 ms.
        let mut s = Vec::new();
        let mut bytes = 0u64;
        for ms in 1..=1000u64 {
            bytes += if (400..500).contains(&ms) {
                2_000_000
            } else {
                1_000_000
            };
            s.push((ms * 1_000_000, bytes));
        }
        let secs = 1.0;
        let p = peak_gbps(&s, secs, bytes).unwrap();
        let avg = bytes as f64 * 8.0 / 1e9;
        assert!(p > avg * 1.5, "peak {p} avg {avg}");
        assert!(p <= 16.0 + 1e-6, "{p}");
        // Flat traffic: peak equals average.
        let flat: Vec<_> = (1..=100u64)
            .map(|ms| (ms * 1_000_000, ms * 1_000_000))
            .collect();
        let p = peak_gbps(&flat, 0.1, 100_000_000).unwrap();
        assert!((p - 8.0).abs() < 0.01, "{p}");
        assert!(peak_gbps(&[], 0.0, 0).is_none());
    }

    #[test]
    fn senders_yield_with_requests_in_flight_only_on_one_cpu() {
        assert!(yield_with_requests_in_flight(Some(1)));
        assert!(!yield_with_requests_in_flight(Some(2)));
        assert!(!yield_with_requests_in_flight(Some(256)));
        // Unknown: behave like perftest (never yield).
        assert!(!yield_with_requests_in_flight(None));
    }

    #[test]
    fn idle_yields_only_after_the_threshold_and_resets_on_progress() {
        let t0 = Instant::now();
        let mut idle = Idle::default();
        idle.wait_at(t0);
        assert!(!idle.yielding);
        idle.wait_at(t0 + YIELD_AFTER / 2);
        assert!(!idle.yielding);
        idle.wait_at(t0 + YIELD_AFTER);
        assert!(idle.yielding);
        idle.progress();
        assert!(!idle.yielding && idle.since.is_none());
        // The wait starts again from the next empty check.
        idle.wait_at(t0 + YIELD_AFTER * 3);
        assert!(!idle.yielding);
    }
}
