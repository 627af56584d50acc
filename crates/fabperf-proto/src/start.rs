//! One start for concurrent flows.
//!
//! A test that runs as one of several concurrent flows (the senders of an
//! incast, the flows of a bisection) is set up completely first — connected,
//! authenticated, data connections open, buffers registered, queue pairs
//! ready — and then started at an instant given to it. The instant travels
//! as a delay ("start in 0.25 s"), measured from when the message is sent,
//! so neither end needs the other's clock: the flows start within the
//! spread of the messages' one-way delays.

use std::time::{Duration, Instant};

/// Longest start delay an agent accepts.
pub const MAX_START_DELAY_S: f64 = 30.0;

/// When a prepared test starts.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// The instant both ends start sending.
    pub at: Instant,
    /// Record the bytes received over time (`Interval::progress`), so the
    /// flow can be cut to the common interval of several.
    pub progress: bool,
}

impl Start {
    /// Start now, without progress counts (a test on its own).
    pub fn now() -> Start {
        Start {
            at: Instant::now(),
            progress: false,
        }
    }

    /// Start `secs` from now.
    pub fn after(secs: f64, progress: bool) -> Start {
        let d = Duration::try_from_secs_f64(secs.clamp(0.0, MAX_START_DELAY_S)).unwrap_or_default();
        Start {
            at: Instant::now() + d,
            progress,
        }
    }

    /// Seconds from now to the start (0 when it has passed).
    pub fn delay_s(&self) -> f64 {
        self.at
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    }

    /// Sleep until the start.
    pub fn wait(&self) {
        let left = self.at.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
}

/// Check a start delay a peer asked for.
pub fn check_delay(secs: f64) -> Result<f64, String> {
    if secs.is_finite() && (0.0..=MAX_START_DELAY_S).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!(
            "start delay {secs} s is not between 0 and {MAX_START_DELAY_S} s"
        ))
    }
}
