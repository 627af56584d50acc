//! The measuring loops (both ends) and the liveness protocol around them.
//!
//! While a side runs it sends `Progress` every second over the control
//! channel and a `SideDone` when its part is complete; a reader thread
//! watches the peer's frames. A peer that sends nothing for the timeout is
//! declared dead, so nothing hangs (perftest waits forever).
//!
//! `liveness` holds that protocol, `bandwidth` the bandwidth loop and its
//! per-QP books, `latency` the ping-pong loops; here is what both loops
//! share: the busy-wait policy and the CPU meters.

mod bandwidth;
mod latency;
mod liveness;

pub(crate) use bandwidth::{bw_side, Plan};
pub(crate) use latency::{lat_initiator, lat_responder, LatPlan};
pub(crate) use liveness::{passive_wait, recv_step, with_peer};

use fabperf_proto::cpu::HostMeter;
use fabperf_proto::explain::EndSetup;
use std::time::{Duration, Instant};

/// Empty polls (bandwidth loop, send/read waits) between two looks at the
/// clock, for the window edges, heartbeats, timeouts and the yield policy.
/// A clock read is a vDSO call of ~20-60 ns with a TSC, but a system call
/// plus a trapped device access (~0.8 µs under QEMU TCG) when the kernel
/// has fallen back to hpet/acpi_pm; at one read per 64 polls that cost
/// fabperf ~10 % of soft-RoCE bandwidth and 5-20 % of latency against
/// perftest, which reads the TSC directly. Every 1024 polls is still every
/// ~10-100 µs.
const CHECK_EVERY_POLLS: u32 = 1024;

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

/// A host meter for this end: with its counters when the test has an
/// [`EndSetup`] (the engine's own tests run without).
fn meter(setup: Option<&EndSetup>) -> HostMeter {
    setup.map_or_else(HostMeter::start, |s| s.meter())
}

/// CPU seconds over wall seconds, % of one core.
fn cpu_pct(cpu_s: f64, wall_s: f64) -> Option<f64> {
    (wall_s > 0.0).then(|| cpu_s / wall_s * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
