//! The bandwidth loop (`bw_side`), both ends: post and complete requests
//! per QP with checked books, the measured window (iterations or
//! duration, after the warm-up), perftest's peak, progress over time.

use super::liveness::Beat;
use super::{cpu_pct, meter, Idle, CHECK_EVERY_POLLS};
use crate::error::RdmaError;
use crate::msg::SideStats;
use crate::peak::PeakTracker;
use crate::verbs::{wr_qp, wr_seq, Endpoint, Op, Wc, RECV_FLAG};
use fabperf_proto::cpu::{HostReport, ThreadCpu};
use fabperf_proto::explain::EndSetup;
use fabperf_results::{Interval, ProgressRecorder, WallClock, Warning};
use std::time::{Duration, Instant};

/// Most requests posted with one doorbell.
const POST_BATCH: u64 = 32;

/// Whether a bandwidth sender keeps the `Idle` policy (yield after
/// `YIELD_AFTER` without a completion) while its own requests are in
/// flight. Only on a single-CPU machine: there the device's kernel work
/// (rxe) can run nowhere else, and yielding to it moved 1 MiB soft-RoCE
/// writes from 0.31-0.34 Gbit/s (perftest's rate: it never yields) to
/// 0.48-0.54. With a second CPU the kernel work runs there, and yielding
/// only pulls it onto the poller's CPU: ~5 times the context switches and
/// 0.95 x perftest at 1 MiB, against 1.01 x without (soft-RoCE under TCG).
/// Receivers and latency loops always keep the policy.
fn yield_with_requests_in_flight(online_cpus: Option<usize>) -> bool {
    online_cpus == Some(1)
}

/// What one side sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub op: Op,
    pub size: u32,
    /// Iterations per QP (iteration mode), after `warmup_iters`.
    pub iters: Option<u64>,
    /// Iterations per QP run and completed before the measured ones
    /// (iteration mode).
    pub warmup_iters: u64,
    pub warmup: Duration,
    /// Measured time (duration mode).
    pub duration: Option<Duration>,
    pub tx_depth: u32,
    pub cq_mod: u32,
    pub inline: bool,
    /// Record the bytes completed over time (concurrent flows).
    pub progress: bool,
    /// Start sending at this instant (the common start of concurrent
    /// flows): after the counters' snapshot, which can take a while.
    pub start_at: Option<Instant>,
}

/// Result of one side's bandwidth loop.
pub(crate) struct BwOutcome {
    pub stats: Option<SideStats>,
    /// Thread CPU over the measured interval, % of one core (`None`: unknown).
    pub cpu_pct: Option<f64>,
    /// The host's CPU and the counters that moved over the same interval.
    pub host: HostReport,
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

/// What the bandwidth loop needs of an endpoint (a real one, or a fake
/// completion queue in the tests).
pub(crate) trait BwEp {
    fn nqps(&self) -> usize;
    #[allow(clippy::too_many_arguments)]
    fn post_run(
        &mut self,
        qp: usize,
        op: Op,
        size: u32,
        inline: bool,
        done: u64,
        n: u32,
        cq_mod: u32,
        last: Option<u64>,
    ) -> Result<(), RdmaError>;
    fn post_recvs(&mut self, qp: usize, n: u32) -> Result<(), RdmaError>;
    fn poll(&mut self, out: &mut Vec<Wc>) -> Result<usize, RdmaError>;
    fn completion_error(&self, wc: &Wc, what: &str) -> RdmaError;
    /// This end's device and the peer, for error texts.
    fn describe(&self) -> (String, String);
}

impl BwEp for Endpoint {
    fn nqps(&self) -> usize {
        Endpoint::nqps(self)
    }
    fn post_run(
        &mut self,
        qp: usize,
        op: Op,
        size: u32,
        inline: bool,
        done: u64,
        n: u32,
        cq_mod: u32,
        last: Option<u64>,
    ) -> Result<(), RdmaError> {
        Endpoint::post_run(self, qp, op, size, inline, done, n, cq_mod, last)
    }
    fn post_recvs(&mut self, qp: usize, n: u32) -> Result<(), RdmaError> {
        Endpoint::post_recvs(self, qp, n)
    }
    fn poll(&mut self, out: &mut Vec<Wc>) -> Result<usize, RdmaError> {
        Endpoint::poll(self, out)
    }
    fn completion_error(&self, wc: &Wc, what: &str) -> RdmaError {
        Endpoint::completion_error(self, wc, what)
    }
    fn describe(&self) -> (String, String) {
        (
            self.dev.name.clone(),
            self.remote
                .as_ref()
                .map(|r| r.describe())
                .unwrap_or_default(),
        )
    }
}

/// The error for completions the device should never have produced.
fn accounting_error(ep: &impl BwEp, q: usize, what: String) -> RdmaError {
    let (dev, peer) = ep.describe();
    RdmaError::Completion(format!(
        "QP {q} on {dev} (peer {peer}): {what}; a provider that delivers a completion twice \
         (rdma-core 44's rxe through the extended-CQ API did) makes every figure of this run \
         wrong, so the test stops"
    ))
}

/// Per QP accounting of one side's bandwidth loop, with checked
/// arithmetic: a completion the device reports twice is an error, never
/// an underflow.
struct Books {
    posted: Vec<u64>,
    completed: Vec<u64>,
    recv_outstanding: Vec<u64>,
    repost: Vec<u32>,
    total_posted: u64,
    total_completed: u64,
}

impl Books {
    fn new(nqp: usize, rx_depth: u32) -> Books {
        Books {
            posted: vec![0; nqp],
            completed: vec![0; nqp],
            recv_outstanding: vec![rx_depth as u64; nqp],
            repost: vec![0; nqp],
            total_posted: 0,
            total_completed: 0,
        }
    }

    fn in_flight(&self, q: usize) -> u64 {
        // completed <= posted is kept by `complete`.
        self.posted[q] - self.completed[q]
    }

    /// A completion for request number `seq` (modulo 2^32) of QP `q`: it
    /// completes every request up to it. It must be newer than the last
    /// completion and not beyond what was posted.
    fn complete(&mut self, ep: &impl BwEp, q: usize, seq: u32) -> Result<(), RdmaError> {
        let count = seq.wrapping_sub(self.completed[q] as u32) as u64;
        let in_flight = self.in_flight(q);
        if count == 0 || count > in_flight {
            let k = self.completed[q] + count;
            return Err(accounting_error(
                ep,
                q,
                if count == 0 {
                    format!(
                        "the completion of request {} was delivered twice",
                        self.completed[q]
                    )
                } else {
                    format!(
                        "a completion for request {seq} (mod 2^32) with requests {}..={} in \
                         flight: delivered twice, or for a request never posted (would be {k})",
                        self.completed[q] + 1,
                        self.posted[q]
                    )
                },
            ));
        }
        self.completed[q] += count;
        self.total_completed += count;
        Ok(())
    }

    fn receive(&mut self, ep: &impl BwEp, q: usize) -> Result<(), RdmaError> {
        self.recv_outstanding[q] = self.recv_outstanding[q].checked_sub(1).ok_or_else(|| {
            accounting_error(
                ep,
                q,
                "more receive completions than receives posted".into(),
            )
        })?;
        self.repost[q] += 1;
        Ok(())
    }
}

/// The end of the measured interval: when, the completed counts per QP,
/// the thread's CPU seconds and the host's report up to then.
type WindowEnd = (Instant, Vec<u64>, Option<f64>, HostReport);

/// The bandwidth loop: post `plan` (if any), repost receives (if `recv`),
/// until this side is done and the peer said `SideDone`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bw_side(
    ep: &mut impl BwEp,
    plan: Option<Plan>,
    recv: bool,
    rx_depth: u32,
    beat: &mut Beat<'_>,
    timeout: Duration,
    setup: Option<&EndSetup>,
) -> Result<BwOutcome, RdmaError> {
    let nqp = ep.nqps();
    if let Some(p) = plan {
        // More unsignaled requests than fit in the queue would never
        // complete (`BwParams::effective_cq_mod` caps it).
        if p.cq_mod > p.tx_depth || p.cq_mod == 0 {
            return Err(RdmaError::BadRequest(format!(
                "completion moderation {} must be 1 .. the send queue depth {}",
                p.cq_mod, p.tx_depth
            )));
        }
    } else {
        beat.done()?;
    }
    let mut b = Books::new(nqp, rx_depth);
    let mut wcs = Vec::with_capacity(64);
    // Read before the clock starts: the counters' snapshot is not inside the interval.
    let mut host = meter(setup);
    if let Some(at) = plan.and_then(|p| p.start_at) {
        crate::prio::sleep_until(at);
    }
    let start = Instant::now();
    let clock = WallClock::now();
    let mut progress = plan
        .filter(|p| p.progress)
        .map(|_| ProgressRecorder::new(start));
    let warm_iters = plan.map(|p| p.warmup_iters).unwrap_or(0);
    let mut phase = match plan {
        Some(p) if p.duration.is_some() && !p.warmup.is_zero() => Phase::Warmup,
        Some(p) if p.iters.is_some() && p.warmup_iters > 0 => Phase::Warmup,
        _ => Phase::Measure,
    };
    // Iteration mode: requests per QP in all (warm-up included).
    let total_iters = plan.and_then(|p| p.iters).map(|n| n + warm_iters);
    let mut cpu = ThreadCpu::start();
    let mut m_start = start;
    let mut m_done = vec![0u64; nqp];
    let mut m_total_posted = 0u64;
    let mut m_total_done = 0u64;
    let mut m_end: Option<WindowEnd> = None;
    // Duration mode: the first and last completion inside the window; the
    // rate between them does not depend on where the window edges fall
    // between two (possibly far apart) signaled completions.
    let mut m_first: Option<(Instant, Vec<u64>)> = None;
    let mut m_last: Option<(Instant, Vec<u64>)> = None;
    // Iteration mode: perftest's peak over the measured requests.
    let mut peak = plan
        .filter(|p| p.iters.is_some())
        .map(|_| PeakTracker::new());
    let mut last_completion = start;
    let mut sender_done = plan.is_none();
    let size = plan.map(|p| p.size as u64).unwrap_or(0);
    let mut spins: u32 = 0;
    let mut idle = Idle::default();
    let yield_in_flight = yield_with_requests_in_flight(crate::sys::online_cpus());
    loop {
        if let Some(p) = plan {
            if phase != Phase::Drain && !sender_done {
                // Iteration mode posts the warm-up requests first, then
                // (once they all completed) the measured ones.
                let limit = match (phase, total_iters) {
                    (Phase::Warmup, Some(_)) => Some(warm_iters),
                    (_, t) => t,
                };
                for q in 0..nqp {
                    let remaining = limit.map(|l| l - b.posted[q]).unwrap_or(u64::MAX);
                    let room = (p.tx_depth as u64).saturating_sub(b.in_flight(q));
                    let n = remaining.min(room).min(POST_BATCH);
                    if n > 0 {
                        if let Some(t) = peak.as_mut().filter(|_| phase == Phase::Measure) {
                            t.post(
                                b.total_posted - m_total_posted,
                                Instant::now().duration_since(m_start).as_nanos() as u64,
                            );
                        }
                        ep.post_run(
                            q,
                            p.op,
                            p.size,
                            p.inline,
                            b.posted[q],
                            n as u32,
                            p.cq_mod,
                            limit,
                        )?;
                        b.posted[q] += n;
                        b.total_posted += n;
                    }
                }
            } else if phase == Phase::Drain && !sender_done {
                // Finish up to the next signaled request so every posted
                // one is accounted for by a completion.
                let cq = p.cq_mod.max(1) as u64;
                for q in 0..nqp {
                    // Duration mode signals only every cq-th request.
                    let rem = b.posted[q] % cq;
                    if rem != 0 {
                        let n = cq - rem;
                        if b.in_flight(q) + n <= p.tx_depth as u64 {
                            ep.post_run(
                                q,
                                p.op,
                                p.size,
                                p.inline,
                                b.posted[q],
                                n as u32,
                                p.cq_mod,
                                None,
                            )?;
                            b.posted[q] += n;
                            b.total_posted += n;
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
        let done_before = b.total_completed;
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
                    return Err(accounting_error(
                        ep,
                        q,
                        format!("a completion for a QP this end does not have ({nqp} QPs)"),
                    ));
                }
                if wc.wr_id & RECV_FLAG != 0 {
                    b.receive(ep, q)?;
                } else {
                    b.complete(ep, q, wr_seq(wc.wr_id))?;
                    last_completion = now;
                    got_send = true;
                }
            }
            if let Some(r) = progress.as_mut().filter(|_| got_send) {
                r.at(now, done_before * size, b.total_completed * size);
            }
            if got_send && phase == Phase::Measure {
                if let Some(t) = peak.as_mut() {
                    t.complete(
                        b.total_completed - m_total_done,
                        now.duration_since(m_start).as_nanos() as u64,
                    );
                }
                if m_end.is_none() && plan.is_some_and(|p| p.duration.is_some()) {
                    if m_first.is_none() {
                        m_first = Some((now, b.completed.clone()));
                    } else {
                        // Reuse the vector: no allocation per completion.
                        let (t, c) = m_last.get_or_insert_with(|| (now, b.completed.clone()));
                        *t = now;
                        c.copy_from_slice(&b.completed);
                    }
                }
            }
            if recv {
                for q in 0..nqp {
                    // Repost in batches (one doorbell for many).
                    if b.repost[q] >= 16 || b.recv_outstanding[q] < (rx_depth as u64) / 2 {
                        ep.post_recvs(q, b.repost[q])?;
                        b.recv_outstanding[q] += b.repost[q] as u64;
                        b.repost[q] = 0;
                    }
                }
            }
        }
        // Our own requests not yet completed.
        let in_flight = !sender_done && (0..nqp).any(|q| b.in_flight(q) > 0);
        if let Some(p) = plan {
            let warm_done = match (phase, p.duration) {
                (Phase::Warmup, Some(_)) => now.duration_since(start) >= p.warmup,
                // Every warm-up request completed: nothing in flight.
                (Phase::Warmup, None) => (0..nqp).all(|q| b.completed[q] == warm_iters),
                _ => false,
            };
            if warm_done {
                phase = Phase::Measure;
                // The counters are read first, so their cost is not in the interval.
                host = meter(setup);
                m_start = Instant::now();
                cpu = ThreadCpu::start();
                m_done.copy_from_slice(&b.completed);
                m_total_posted = b.total_posted;
                m_total_done = b.total_completed;
            }
            if let (Phase::Measure, Some(d)) = (phase, p.duration) {
                if now.duration_since(m_start) >= d {
                    phase = Phase::Drain;
                    let cpu_used = cpu.used_secs();
                    m_end = Some((now, b.completed.clone(), cpu_used, host.finish_report()));
                }
            }
            if !sender_done {
                let finished = match p.duration {
                    Some(_) => phase == Phase::Drain && !in_flight,
                    None => total_iters.is_some_and(|n| (0..nqp).all(|q| b.completed[q] == n)),
                };
                if finished {
                    if m_end.is_none() {
                        let cpu_used = cpu.used_secs();
                        m_end = Some((
                            last_completion,
                            b.completed.clone(),
                            cpu_used,
                            host.finish_report(),
                        ));
                    }
                    sender_done = true;
                    beat.done()?;
                }
                if in_flight && now.duration_since(last_completion) >= timeout {
                    let (_, peer) = ep.describe();
                    return Err(RdmaError::Stalled(format!(
                        "no {} completed for {:.1} s: the peer ({peer}) stopped answering or the path drops packets",
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
        for (q, n) in b.repost.iter().enumerate() {
            ep.post_recvs(q, *n)?;
        }
    }
    let Some(p) = plan else {
        // A receiver only: its CPU over the whole loop.
        return Ok(BwOutcome {
            stats: None,
            cpu_pct: cpu
                .used_secs()
                .and_then(|c| cpu_pct(c, start.elapsed().as_secs_f64())),
            host: host.finish_report(),
        });
    };
    let (t_end, done_end, cpu_used, host_fig) = m_end.unwrap_or_else(|| {
        (
            last_completion,
            b.completed.clone(),
            cpu.used_secs(),
            host.finish_report(),
        )
    });
    let window_secs = t_end.duration_since(m_start).as_secs_f64();
    let cpu_pct = cpu_used.and_then(|c| cpu_pct(c, window_secs));
    let mut notes = Vec::new();
    let (secs, per_qp, from, to): (f64, Vec<u64>, Instant, Instant) =
        match (p.duration, &m_first, &m_last) {
            (None, _, _) => (
                window_secs,
                (0..nqp).map(|q| done_end[q] - m_done[q]).collect(),
                m_start,
                t_end,
            ),
            (Some(_), Some((ta, ca)), Some((tb, cb))) if tb > ta => (
                tb.duration_since(*ta).as_secs_f64(),
                (0..nqp).map(|q| cb[q] - ca[q]).collect(),
                *ta,
                *tb,
            ),
            (Some(_), _, _) => {
                notes.push(Warning::WindowTooFewCompletions { cq_mod: p.cq_mod }.note());
                (
                    last_completion.duration_since(start).as_secs_f64(),
                    b.completed.clone(),
                    start,
                    last_completion,
                )
            }
        };
    let interval = Interval {
        start_s: clock.unix(from),
        end_s: clock.unix(to.max(from)),
        sent_from_s: Some(clock.unix(start)),
        progress: progress.map(|r| r.finish(&clock)),
    };
    let msgs: u64 = per_qp.iter().sum();
    let bytes = msgs * p.size as u64;
    let peak_gbps = match peak.as_ref().map(|t| t.peak_gbps(size)) {
        None => None,
        Some(Ok(g)) => g,
        Some(Err(why)) => {
            notes.push(Warning::NoPeak { why }.note());
            None
        }
    };
    Ok(BwOutcome {
        stats: Some(SideStats {
            bytes,
            secs,
            msgs,
            peak_gbps,
            per_qp_msgs: per_qp,
            notes,
            interval: Some(interval),
        }),
        cpu_pct,
        host: host_fig,
    })
}

#[cfg(test)]
mod tests {
    use super::super::liveness::PeerState;
    use super::*;

    use crate::verbs::{signaled, wr_id};
    use std::collections::VecDeque;
    use std::net::{TcpListener, TcpStream};

    /// A fake device: each signaled request completes at once (one
    /// completion per signaled request, carrying its number, as RC send
    /// queues do), optionally delivering one completion twice.
    struct FakeCq {
        nqp: usize,
        queue: VecDeque<Wc>,
        /// Deliver the n-th completion (counting from 0) twice.
        duplicate: Option<usize>,
        delivered: usize,
        posted: Vec<u64>,
        recvs: Vec<u64>,
    }

    impl FakeCq {
        fn new(nqp: usize) -> FakeCq {
            FakeCq {
                nqp,
                queue: VecDeque::new(),
                duplicate: None,
                delivered: 0,
                posted: vec![0; nqp],
                recvs: vec![0; nqp],
            }
        }
    }

    impl BwEp for FakeCq {
        fn nqps(&self) -> usize {
            self.nqp
        }
        fn post_run(
            &mut self,
            qp: usize,
            _op: Op,
            _size: u32,
            _inline: bool,
            done: u64,
            n: u32,
            cq_mod: u32,
            last: Option<u64>,
        ) -> Result<(), RdmaError> {
            assert_eq!(done, self.posted[qp], "posts continue where the last ended");
            for k in done + 1..=done + n as u64 {
                if signaled(k, cq_mod.max(1) as u64, last) {
                    self.queue.push_back(Wc {
                        wr_id: wr_id(qp, k as u32),
                        status: 0,
                        vendor_err: 0,
                    });
                }
            }
            self.posted[qp] += n as u64;
            Ok(())
        }
        fn post_recvs(&mut self, qp: usize, n: u32) -> Result<(), RdmaError> {
            self.recvs[qp] += n as u64;
            Ok(())
        }
        fn poll(&mut self, out: &mut Vec<Wc>) -> Result<usize, RdmaError> {
            out.clear();
            while out.len() < 32 {
                let Some(wc) = self.queue.pop_front() else {
                    break;
                };
                if self.duplicate == Some(self.delivered) {
                    out.push(wc);
                }
                self.delivered += 1;
                out.push(wc);
            }
            Ok(out.len())
        }
        fn completion_error(&self, wc: &Wc, what: &str) -> RdmaError {
            RdmaError::Completion(format!("{what}: status {}", wc.status))
        }
        fn describe(&self) -> (String, String) {
            ("fake0".into(), "fake peer".into())
        }
    }

    /// Run `bw_side` against `ep` with a peer that is already done.
    fn run(ep: &mut FakeCq, plan: Plan) -> Result<BwOutcome, RdmaError> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let w = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _r = l.accept().unwrap();
        let peer = PeerState::done_already();
        let mut beat = Beat::for_tests(w, &peer);
        bw_side(
            ep,
            Some(plan),
            false,
            0,
            &mut beat,
            Duration::from_secs(5),
            None,
        )
    }

    fn plan(iters: Option<u64>, warmup_iters: u64, cq_mod: u32, tx_depth: u32) -> Plan {
        Plan {
            op: Op::Write,
            size: 4096,
            iters,
            warmup_iters,
            warmup: Duration::ZERO,
            duration: None,
            tx_depth,
            cq_mod,
            inline: false,
            progress: true,
            start_at: None,
        }
    }

    #[test]
    fn cq_mod_remainder_is_accounted_for() {
        // 1050 per QP with one completion per 100: the last one stands for 50.
        let mut ep = FakeCq::new(2);
        let o = run(&mut ep, plan(Some(1050), 0, 100, 128)).unwrap();
        let st = o.stats.unwrap();
        assert_eq!(st.per_qp_msgs, vec![1050, 1050]);
        assert_eq!((st.msgs, st.bytes), (2100, 2100 * 4096));
        assert_eq!(ep.posted, vec![1050, 1050], "nothing posted beyond the run");
        assert!(st.secs > 0.0);
        let peak = st.peak_gbps.expect("iteration mode has perftest's peak");
        let avg = st.bytes as f64 * 8.0 / st.secs / 1e9;
        assert!(peak >= avg * (1.0 - 1e-9), "peak {peak} avg {avg}");
        assert!(st.notes.is_empty(), "{:?}", st.notes);
        // The interval in Unix time, after the sender's start, with the
        // bytes completed over time (every request, warm-up included).
        let i = st.interval.expect("the measured interval");
        assert!(i.check().is_empty(), "{:?}", i.check());
        assert!(i.start_s >= i.sent_from_s.unwrap() && i.end_s >= i.start_s);
        assert!((i.len_s() - st.secs).abs() < 1e-6, "{i:?} vs {}", st.secs);
        let pr = i.progress.expect("progress when asked for");
        assert_eq!(pr.last_bytes, 2100 * 4096);
    }

    #[test]
    fn a_sender_starts_at_the_given_instant() {
        let at = Instant::now() + Duration::from_millis(200);
        let want = WallClock::now().unix(at);
        let mut ep = FakeCq::new(1);
        let p = Plan {
            start_at: Some(at),
            ..plan(Some(100), 0, 10, 16)
        };
        let o = run(&mut ep, p).unwrap();
        let i = o.stats.unwrap().interval.unwrap();
        let sent = i.sent_from_s.unwrap();
        assert!(sent >= want - 0.002, "started {:.3} s early", want - sent);
        assert!(sent < want + 0.5, "started {:.3} s late", sent - want);
    }

    #[test]
    fn warmup_iterations_are_run_but_not_counted() {
        // 130 warm-up requests (cq-mod 100: the 130th is signaled and
        // stands for 30), then 70 measured ones (the 200th stands for 70).
        let mut ep = FakeCq::new(1);
        let o = run(&mut ep, plan(Some(70), 130, 100, 128)).unwrap();
        let st = o.stats.unwrap();
        assert_eq!(ep.posted, vec![200]);
        assert_eq!((st.msgs, st.per_qp_msgs.clone()), (70, vec![70]));
        assert!(st.peak_gbps.is_some());
    }

    #[test]
    fn duration_mode_drains_to_a_signaled_request() {
        let mut ep = FakeCq::new(3);
        let p = Plan {
            iters: None,
            duration: Some(Duration::from_millis(30)),
            warmup: Duration::from_millis(5),
            ..plan(None, 0, 10, 16)
        };
        let o = run(&mut ep, p).unwrap();
        let st = o.stats.unwrap();
        // Every posted request was completed (the loop waits for that),
        // so each QP stopped on a multiple of the moderation.
        for (q, &n) in ep.posted.iter().enumerate() {
            assert_eq!(n % 10, 0, "QP {q} posted {n}");
        }
        assert!(ep.queue.is_empty());
        assert!(st.msgs > 0 && st.secs > 0.0);
        // perftest computes no peak in duration mode.
        assert_eq!(st.peak_gbps, None);
    }

    #[test]
    fn a_duplicate_completion_is_an_error_not_an_underflow() {
        for dup in [0, 3, 9] {
            let mut ep = FakeCq::new(1);
            ep.duplicate = Some(dup);
            let e = match run(&mut ep, plan(Some(1000), 0, 100, 128)) {
                Ok(_) => panic!("completion {dup} delivered twice went unnoticed"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("delivered twice") && e.contains("fake0"), "{e}");
        }
        // A completion for a request that was never posted.
        let mut ep = FakeCq::new(1);
        ep.queue.push_back(Wc {
            wr_id: wr_id(0, 77),
            status: 0,
            vendor_err: 0,
        });
        let e = run(&mut ep, plan(Some(10), 0, 10, 16))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("never posted"), "{e}");
        let e = run(&mut FakeCq::new(1), plan(Some(10), 0, 10, 8))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("moderation 10"), "{e}");
        // A completion for a QP this end does not have.
        let mut ep = FakeCq::new(1);
        ep.queue.push_back(Wc {
            wr_id: wr_id(5, 1),
            status: 0,
            vendor_err: 0,
        });
        let e = run(&mut ep, plan(Some(10), 0, 10, 16))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("does not have"), "{e}");
    }

    #[test]
    fn senders_yield_with_requests_in_flight_only_on_one_cpu() {
        assert!(yield_with_requests_in_flight(Some(1)));
        assert!(!yield_with_requests_in_flight(Some(2)));
        assert!(!yield_with_requests_in_flight(Some(256)));
        // Unknown: behave like perftest (never yield).
        assert!(!yield_with_requests_in_flight(None));
    }
}
