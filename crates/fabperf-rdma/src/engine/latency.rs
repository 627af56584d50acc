//! The latency loops: the initiator's strict ping-pong on one QP (write
//! polls the last byte of the peer's write, send waits for the reply's
//! receive, read for its own completion) and the responder's answers.

use super::liveness::Beat;
use super::{cpu_pct, meter, Idle, CHECK_EVERY_POLLS};
use crate::error::RdmaError;
use crate::verbs::{Endpoint, Op, Wc, RECV_FLAG};
use fabperf_proto::cpu::{HostReport, ThreadCpu};
use fabperf_proto::explain::EndSetup;
use fabperf_results::{Interval, LatencyHistogram, LatencyKind, WallClock};
use std::time::{Duration, Instant};

/// Loads of the polled byte (write latency) between two looks at the
/// clock and the completion queue: a load is much cheaper than a poll.
const CHECK_EVERY_LOADS: u32 = 16384;

/// What the latency initiator measures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatPlan {
    pub op: Op,
    pub size: u32,
    pub iters: Option<u64>,
    /// Ping-pongs before the recorded ones (iteration mode).
    pub warmup_iters: u64,
    pub warmup: Duration,
    pub duration: Option<Duration>,
    pub inline: bool,
    pub tx_depth: u32,
    /// Send the first ping at this instant (the common start of concurrent
    /// tests, such as the rails of a run): after the counters' snapshot,
    /// which can take a while.
    pub start_at: Option<Instant>,
}

pub(crate) struct LatOutcome {
    pub hist: LatencyHistogram,
    pub cpu_pct: Option<f64>,
    pub secs: f64,
    pub host: HostReport,
    /// The measured round trips in Unix time, and when the first ping
    /// (warm-up included) went out: concurrent tests (the rails of a run)
    /// are compared on it.
    pub interval: Interval,
}

/// Ping-pong tag for iteration `i` (never 0, the initial byte).
#[inline]
pub(crate) fn tag(i: u64) -> u8 {
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
pub(crate) fn lat_initiator(
    ep: &mut Endpoint,
    p: LatPlan,
    beat: &mut Beat<'_>,
    timeout: Duration,
    setup: Option<&EndSetup>,
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
    // Read before the clock starts: the counters' snapshot is not inside the interval.
    let mut host = meter(setup);
    if let Some(at) = p.start_at {
        crate::prio::sleep_until(at);
    }
    let start = Instant::now();
    let clock = WallClock::now();
    let mut measuring = match p.duration {
        Some(_) => p.warmup.is_zero(),
        None => p.warmup_iters == 0,
    };
    let mut m_start = start;
    let mut m_cpu = ThreadCpu::start();
    let total = p.iters.map(|n| n + p.warmup_iters);
    let mut i: u64 = 0;
    loop {
        if let Some(n) = total {
            if i >= n {
                break;
            }
        }
        let mut t0 = Instant::now();
        let warm_done = match p.duration {
            Some(_) => t0.duration_since(start) >= p.warmup,
            None => i >= p.warmup_iters,
        };
        if !measuring && warm_done {
            measuring = true;
            // The counters are read before this round trip's clock starts.
            host = meter(setup);
            t0 = Instant::now();
            m_start = t0;
            m_cpu = ThreadCpu::start();
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
    let secs = end.duration_since(m_start).as_secs_f64();
    let cpu_pct = m_cpu.used_secs().and_then(|c| cpu_pct(c, secs));
    let host = host.finish_report();
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
        secs,
        host,
        interval: Interval {
            start_s: clock.unix(m_start),
            end_s: clock.unix(end.max(m_start)),
            sent_from_s: Some(clock.unix(start)),
            progress: None,
        },
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
/// until the initiator says it is done. Returns its thread CPU percent and
/// the host's CPU over the same time.
pub(crate) fn lat_responder(
    ep: &mut Endpoint,
    op: Op,
    size: u32,
    inline: bool,
    beat: &mut Beat<'_>,
    setup: Option<&EndSetup>,
) -> Result<(Option<f64>, HostReport), RdmaError> {
    // The responder has nothing of its own to finish.
    beat.done()?;
    let last = size as usize - 1;
    let mut wcs = Vec::with_capacity(64);
    let mut recvs: Vec<u64> = Vec::new();
    let mut sends_out: u64 = 0;
    let mut idle = Idle::default();
    let host = meter(setup);
    let start = Instant::now();
    let cpu0 = ThreadCpu::start();
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
    let wall = start.elapsed().as_secs_f64();
    let cpu_pct = cpu0.used_secs().and_then(|c| cpu_pct(c, wall));
    let host = host.finish_report();
    // Drain our own last sends.
    let t = Instant::now();
    while sends_out > 0 && t.elapsed() < Duration::from_secs(2) {
        reap(ep, &mut wcs, &mut sends_out, &mut recvs, op.as_str())?;
    }
    if !recvs.is_empty() {
        let n = recvs.len() as u32;
        ep.post_recvs(0, n)?;
    }
    Ok((cpu_pct, host))
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
}
