//! Latency samples in an HdrHistogram, summarised in microseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Whether a latency is a half round trip (one-way estimate, what sockperf
/// and perftest's send/write latency print) or a full round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyKind {
    HalfRtt,
    Rtt,
}

impl LatencyKind {
    pub fn label(self) -> &'static str {
        match self {
            LatencyKind::HalfRtt => "half-RTT",
            LatencyKind::Rtt => "RTT",
        }
    }
}

/// Latency summary, microseconds. `p50` is perftest's `t_typical`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub mean: f64,
    pub stdev: f64,
    pub kind: LatencyKind,
    /// Number of samples behind the summary.
    pub samples: u64,
}

/// Every latency sample, recorded in nanoseconds with 3 significant digits
/// (0.1 % relative error), from 1 ns up to one hour.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    kind: LatencyKind,
    /// A divisor applied when recording: 2 turns measured round trips into
    /// half round trips.
    divisor: u64,
}

impl LatencyHistogram {
    /// A histogram that records samples of the given kind. Samples passed to
    /// [`record_rtt_ns`](Self::record_rtt_ns) are full round trips; for
    /// `HalfRtt` they are halved before recording.
    pub fn new(kind: LatencyKind) -> LatencyHistogram {
        let hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("static histogram bounds are valid");
        let divisor = match kind {
            LatencyKind::HalfRtt => 2,
            LatencyKind::Rtt => 1,
        };
        LatencyHistogram {
            hist,
            kind,
            divisor,
        }
    }

    pub fn kind(&self) -> LatencyKind {
        self.kind
    }

    /// Record one measured round trip, in nanoseconds.
    #[inline]
    pub fn record_rtt_ns(&mut self, rtt_ns: u64) {
        let v = (rtt_ns / self.divisor).max(1);
        // saturating_record clamps values above the top bound instead of failing.
        self.hist.saturating_record(v);
    }

    /// Merge another histogram of the same kind (e.g. from another thread).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both histograms share the same bounds, so `add` cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The summary, or `None` when no sample was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        if self.hist.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let h = &self.hist;
        Some(LatencySummary {
            min: us(h.min()),
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
            stdev: h.stdev() / 1000.0,
            kind: self.kind,
            samples: h.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_rtt_halves() {
        let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
        for _ in 0..100 {
            h.record_rtt_ns(20_000);
        }
        let s = h.summary().unwrap();
        assert!((s.p50 - 10.0).abs() < 0.02, "{s:?}");
        assert_eq!(s.kind, LatencyKind::HalfRtt);
        assert_eq!(s.samples, 100);
        assert!(s.stdev < 0.001);
    }

    #[test]
    fn percentiles_use_every_sample() {
        let mut h = LatencyHistogram::new(LatencyKind::Rtt);
        // 9990 fast samples and 10 slow ones: p99.9 must see the slow tail.
        for _ in 0..9990 {
            h.record_rtt_ns(1_000);
        }
        for _ in 0..10 {
            h.record_rtt_ns(1_000_000);
        }
        let s = h.summary().unwrap();
        assert!((s.p50 - 1.0).abs() < 0.01);
        assert!((s.p99 - 1.0).abs() < 0.01);
        assert!(s.p9999 > 990.0, "{s:?}");
        assert!(s.max > 990.0);
        // stdev is not truncated to an integer (perftest's t_stdev is).
        assert!(s.stdev > 1.0 && s.stdev < 100.0, "{s:?}");
    }

    #[test]
    fn empty_has_no_summary() {
        assert!(LatencyHistogram::new(LatencyKind::Rtt).summary().is_none());
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHistogram::new(LatencyKind::Rtt);
        let mut b = LatencyHistogram::new(LatencyKind::Rtt);
        a.record_rtt_ns(5_000);
        b.record_rtt_ns(7_000);
        a.merge(&b);
        assert_eq!(a.len(), 2);
    }
}
