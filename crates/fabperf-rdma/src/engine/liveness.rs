//! The liveness protocol around a measuring loop: `Progress` every second
//! and `SideDone` out, a reader thread watching the peer's frames in. A
//! peer silent for the timeout is declared dead, so nothing hangs.

use crate::error::RdmaError;
use crate::msg::Step;
use crate::prio::IdleGuard;
use fabperf_proto::{write_frame, Control, Msg, ProtoError};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BEAT: Duration = Duration::from_secs(1);

/// Receive the next step, skipping `Progress`.
pub(crate) fn recv_step(
    ctl: &mut Control,
    timeout: Duration,
    what: &str,
) -> Result<Step, ProtoError> {
    loop {
        match ctl.recv_test_within::<Step>(timeout, what)? {
            Step::Progress => continue,
            s => return Ok(s),
        }
    }
}

/// Shared state between a measuring loop and the control reader.
#[derive(Default)]
pub(crate) struct PeerState {
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
pub(crate) struct Beat<'a> {
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
pub(crate) fn with_peer<R>(
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
pub(crate) fn passive_wait(ctl: &mut Control, timeout: Duration) -> Result<(), RdmaError> {
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

#[cfg(test)]
impl PeerState {
    /// A peer that has already said `SideDone` (the loops' own tests).
    pub(crate) fn done_already() -> PeerState {
        let p = PeerState::default();
        p.done.store(true, Ordering::Release);
        p
    }
}

#[cfg(test)]
impl<'a> Beat<'a> {
    /// Heartbeats to `w`, the peer's state in `peer` (the loops' own tests).
    pub(crate) fn for_tests(w: TcpStream, peer: &'a PeerState) -> Beat<'a> {
        Beat {
            w,
            last: Instant::now(),
            sent_done: false,
            peer,
        }
    }
}
