//! Where a measurement sits in absolute time, so that concurrent flows can
//! be compared: each flow's measured interval (Unix time, the measuring
//! end's clock), optionally its progress (bytes received at fixed ticks), and
//! for an aggregate of concurrent flows the part of time they all measured.
//!
//! An aggregate over flows whose intervals differ is only right over their
//! *common* interval: a flow that ran for a while alone got more of the link
//! then, so its mean rate overstates its share of the common part. With the
//! progress counts a flow's bytes inside any sub-interval are known (to the
//! tick, interpolated linearly in between).

use serde::{Deserialize, Serialize};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Most progress counts a record holds; a longer test doubles the tick.
pub const MAX_PROGRESS: usize = 256;
/// The first tick of the progress counts, seconds.
pub const PROGRESS_TICK_S: f64 = 0.05;

/// A measurement's place in absolute time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Start of the measured interval (warm-up excluded): Unix time in
    /// seconds by the clock of the end that measured it (the receiver).
    pub start_s: f64,
    /// End of the measured interval.
    pub end_s: f64,
    /// When the sending end began (its warm-up included), Unix seconds by
    /// the sender's clock: the instant the test's start released it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_from_s: Option<f64>,
    /// The bytes received over time, to cut the interval to a part of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

/// Payload bytes received over time: counts at fixed ticks from `t0_s`,
/// and the last byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Unix seconds the counts start from (the receiving end's start; 0 bytes then).
    pub t0_s: f64,
    /// Seconds between two counts.
    pub tick_s: f64,
    /// `bytes[k]`: bytes received from `t0_s` to `t0_s + (k + 1) * tick_s`
    /// (cumulative, warm-up included).
    pub bytes: Vec<u64>,
    /// When the last byte arrived (Unix seconds) and the bytes received by
    /// then.
    pub last_s: f64,
    pub last_bytes: u64,
}

/// Every flow of an aggregate measured in the common interval: how much
/// of the longest flow's interval it covers, and how far apart the flows
/// started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSet {
    /// Flows in the aggregate (one per sender; one direction).
    pub count: u32,
    /// The common interval (when every flow was measuring) in percent of the
    /// longest flow's measured interval.
    pub overlap_pct: f64,
    /// Latest minus earliest start of the flows' senders
    /// (`interval.sent_from_s`), seconds; absent when a flow did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_skew_s: Option<f64>,
}

/// A pairing of the monotonic clock with the wall clock, taken once, to
/// turn measured instants into Unix time without reading the wall clock in
/// measuring loops (and without its steps).
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    inst: Instant,
    unix_s: f64,
}

impl WallClock {
    pub fn now() -> WallClock {
        let inst = Instant::now();
        let unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        WallClock { inst, unix_s }
    }

    /// The instant the pairing was taken.
    pub fn origin(&self) -> Instant {
        self.inst
    }

    /// Unix seconds of `t`.
    pub fn unix(&self, t: Instant) -> f64 {
        if t >= self.inst {
            self.unix_s + t.duration_since(self.inst).as_secs_f64()
        } else {
            self.unix_s - self.inst.duration_since(t).as_secs_f64()
        }
    }

    /// The instant of Unix time `s` (clamped to now when it lies far out).
    pub fn instant(&self, s: f64) -> Instant {
        let d = s - self.unix_s;
        if !d.is_finite() || d.abs() > 86_400.0 {
            return self.inst;
        }
        let off = std::time::Duration::from_secs_f64(d.abs());
        if d >= 0.0 {
            self.inst + off
        } else {
            self.inst.checked_sub(off).unwrap_or(self.inst)
        }
    }

    pub fn unix_now() -> f64 {
        WallClock::now().unix_s
    }
}

/// Records a receiver's progress: call [`ProgressRecorder::at`] with the
/// time and the byte count before each read is added.
#[derive(Debug, Clone)]
pub struct ProgressRecorder {
    t0: Instant,
    tick: f64,
    next: Instant,
    bytes: Vec<u64>,
    last: Option<(Instant, u64)>,
}

impl ProgressRecorder {
    pub fn new(t0: Instant) -> ProgressRecorder {
        ProgressRecorder {
            t0,
            tick: PROGRESS_TICK_S,
            next: t0 + std::time::Duration::from_secs_f64(PROGRESS_TICK_S),
            bytes: Vec::new(),
            last: None,
        }
    }

    /// `total` bytes had arrived by `now` (before the bytes of a read that
    /// completes at `now` are counted); `after` is the count with them.
    pub fn at(&mut self, now: Instant, total: u64, after: u64) {
        while self.next <= now {
            self.bytes.push(total);
            if self.bytes.len() >= MAX_PROGRESS {
                // Keep every second count: the tick doubles.
                self.bytes = self.bytes.iter().skip(1).step_by(2).copied().collect();
                self.tick *= 2.0;
            }
            self.next = self.t0
                + std::time::Duration::from_secs_f64(self.tick * (self.bytes.len() + 1) as f64);
        }
        if after > total {
            self.last = Some((now, after));
        }
    }

    /// The counts in Unix time.
    pub fn finish(&self, clock: &WallClock) -> Progress {
        let (last_s, last_bytes) = match self.last {
            Some((t, b)) => (clock.unix(t), b),
            None => (clock.unix(self.t0), 0),
        };
        Progress {
            t0_s: clock.unix(self.t0),
            tick_s: self.tick,
            bytes: self.bytes.clone(),
            last_s,
            last_bytes,
        }
    }
}

impl Progress {
    /// The (time, cumulative bytes) points, in order.
    fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        let ticks = self
            .bytes
            .iter()
            .enumerate()
            .map(|(k, &b)| (self.t0_s + self.tick_s * (k + 1) as f64, b as f64))
            .take_while(|(t, _)| *t < self.last_s);
        std::iter::once((self.t0_s, 0.0))
            .chain(ticks)
            .chain(std::iter::once((self.last_s, self.last_bytes as f64)))
    }

    /// Bytes received by Unix time `t` (linear between two counts; all of
    /// them after the last byte).
    pub fn bytes_at(&self, t: f64) -> f64 {
        let mut prev = (self.t0_s, 0.0);
        if t <= prev.0 {
            return 0.0;
        }
        for (pt, pb) in self.points() {
            if t <= pt {
                let span = pt - prev.0;
                if span <= 0.0 {
                    return pb;
                }
                return prev.1 + (pb - prev.1) * (t - prev.0) / span;
            }
            prev = (pt, pb);
        }
        self.last_bytes as f64
    }

    /// Bytes received between Unix times `a` and `b`.
    pub fn bytes_between(&self, a: f64, b: f64) -> f64 {
        (self.bytes_at(b) - self.bytes_at(a)).max(0.0)
    }

    /// The sum of several receivers' progress (the streams of one flow and
    /// direction): counts at the coarsest tick, from the earliest start.
    pub fn sum(parts: &[&Progress]) -> Option<Progress> {
        let first = parts.first()?;
        let t0 = parts.iter().map(|p| p.t0_s).fold(first.t0_s, f64::min);
        let tick = parts.iter().map(|p| p.tick_s).fold(first.tick_s, f64::max);
        let last_s = parts.iter().map(|p| p.last_s).fold(first.last_s, f64::max);
        let last_bytes = parts.iter().map(|p| p.last_bytes).sum();
        let mut bytes = Vec::new();
        let mut k = 1.0;
        while t0 + tick * k < last_s && bytes.len() < MAX_PROGRESS {
            let t = t0 + tick * k;
            bytes.push(parts.iter().map(|p| p.bytes_at(t)).sum::<f64>().round() as u64);
            k += 1.0;
        }
        Some(Progress {
            t0_s: t0,
            tick_s: tick,
            bytes,
            last_s,
            last_bytes,
        })
    }

    /// What breaks the rules (empty when sound).
    pub fn check(&self) -> Vec<String> {
        let mut bad = Vec::new();
        if !(self.t0_s.is_finite() && self.last_s.is_finite() && self.last_s >= self.t0_s) {
            bad.push(format!(
                "progress runs from {} to {}: not an interval",
                self.t0_s, self.last_s
            ));
        }
        if !(self.tick_s.is_finite() && self.tick_s > 0.0) {
            bad.push(format!("progress tick {} is not positive", self.tick_s));
        }
        if self.bytes.len() > MAX_PROGRESS {
            bad.push(format!(
                "progress holds {} counts, more than {MAX_PROGRESS}",
                self.bytes.len()
            ));
        }
        let mono = self.bytes.windows(2).all(|w| w[0] <= w[1])
            && self.bytes.last().is_none_or(|&b| b <= self.last_bytes);
        if !mono {
            bad.push("progress counts go down".into());
        }
        bad
    }
}

impl Interval {
    pub fn len_s(&self) -> f64 {
        (self.end_s - self.start_s).max(0.0)
    }

    /// What breaks the rules (empty when sound).
    pub fn check(&self) -> Vec<String> {
        let mut bad = Vec::new();
        if !(self.start_s.is_finite() && self.end_s.is_finite() && self.end_s >= self.start_s) {
            bad.push(format!(
                "interval from {} to {} is not an interval",
                self.start_s, self.end_s
            ));
        }
        if let Some(s) = self.sent_from_s {
            if !s.is_finite() {
                bad.push(format!("interval.sent_from_s {s} is not a time"));
            }
        }
        if let Some(p) = &self.progress {
            bad.extend(p.check());
        }
        bad
    }
}

/// The part of time in which every interval was measuring, and that part in
/// percent of the longest interval (0 when they do not overlap).
pub fn common_interval(intervals: &[&Interval]) -> Option<(f64, f64, f64)> {
    let first = intervals.first()?;
    let start = intervals
        .iter()
        .map(|i| i.start_s)
        .fold(first.start_s, f64::max);
    let end = intervals
        .iter()
        .map(|i| i.end_s)
        .fold(first.end_s, f64::min);
    let longest = intervals.iter().map(|i| i.len_s()).fold(0.0, f64::max);
    let common = (end - start).max(0.0);
    let pct = if longest > 0.0 {
        common / longest * 100.0
    } else {
        0.0
    };
    Some((start, end.max(start), pct))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn steady(t0: f64, rate: f64, secs: f64) -> Progress {
        // `rate` bytes per second from t0 for `secs`, counted every 0.1 s.
        let n = (secs / 0.1) as usize;
        Progress {
            t0_s: t0,
            tick_s: 0.1,
            bytes: (1..n).map(|k| (rate * 0.1 * k as f64) as u64).collect(),
            last_s: t0 + secs,
            last_bytes: (rate * secs) as u64,
        }
    }

    #[test]
    fn bytes_between_interpolates_and_clamps() {
        let p = steady(100.0, 1000.0, 2.0);
        assert!(p.check().is_empty(), "{:?}", p.check());
        assert_eq!(p.bytes_at(99.0), 0.0);
        assert!((p.bytes_at(100.55) - 550.0).abs() < 1e-6);
        assert!((p.bytes_between(100.5, 101.5) - 1000.0).abs() < 1e-6);
        assert_eq!(p.bytes_at(1e12), 2000.0);
    }

    #[test]
    fn recorder_counts_at_ticks_and_doubles_when_full() {
        let t0 = Instant::now();
        let mut r = ProgressRecorder::new(t0);
        let step = Duration::from_millis(10);
        let mut total = 0;
        for i in 1..=2000u32 {
            let now = t0 + step * i;
            r.at(now, total, total + 100);
            total += 100;
        }
        let c = WallClock::now();
        let p = r.finish(&c);
        assert!(p.bytes.len() <= MAX_PROGRESS);
        assert!(p.tick_s > PROGRESS_TICK_S, "{}", p.tick_s);
        assert!(p.check().is_empty(), "{:?}", p.check());
        // 100 bytes every 10 ms: 10 kB/s all along.
        let mid = p.t0_s + 10.0;
        assert!(
            (p.bytes_at(mid) - 100_000.0).abs() < 200.0,
            "{}",
            p.bytes_at(mid)
        );
        assert_eq!(p.last_bytes, 200_000);
    }

    #[test]
    fn sums_of_streams_add_up() {
        let a = steady(10.0, 1000.0, 3.0);
        let b = steady(10.05, 2000.0, 2.9);
        let s = Progress::sum(&[&a, &b]).unwrap();
        assert!(s.check().is_empty(), "{:?}", s.check());
        assert_eq!(s.last_bytes, 3000 + 5800);
        let want = a.bytes_between(11.0, 12.0) + b.bytes_between(11.0, 12.0);
        assert!((s.bytes_between(11.0, 12.0) - want).abs() < 50.0);
    }

    #[test]
    fn common_interval_of_flows() {
        let i = |a: f64, b: f64| Interval {
            start_s: a,
            end_s: b,
            sent_from_s: None,
            progress: None,
        };
        let (a, b, pct) = common_interval(&[&i(0.0, 10.0), &i(1.0, 11.0)]).unwrap();
        assert_eq!((a, b), (1.0, 10.0));
        assert!((pct - 90.0).abs() < 1e-9);
        let (_, _, pct) = common_interval(&[&i(0.0, 1.0), &i(2.0, 3.0)]).unwrap();
        assert_eq!(pct, 0.0);
        assert!(i(2.0, 1.0).check().len() == 1);
    }

    #[test]
    fn wall_clock_round_trips() {
        let c = WallClock::now();
        let later = Instant::now() + Duration::from_millis(1500);
        let s = c.unix(later);
        let back = c.instant(s);
        let d = if back > later {
            back - later
        } else {
            later - back
        };
        assert!(d < Duration::from_micros(10), "{d:?}");
    }
}
