//! perftest's "BW peak", computed exactly and online.
//!
//! perftest records the time of every post (`tposted[i]`) and of every
//! completion (`tcompleted[j]`) and reports
//! `size / min over i <= j of (tcompleted[j] - tposted[i]) / (j - i + 1)`:
//! the best message rate over any span from the post of one message to the
//! completion of a later one. It does so with two nested loops over the
//! run; it computes none in duration mode (`-D`).
//!
//! Here a post batch starting at message `g` (messages posted before it)
//! at time `tp` is the point `A = (g, tp)`, and a completion that brings
//! the completed count to `c` at time `tc` is `B = (c, tc)`. The span's
//! time per message is the slope from `A` to `B`, over pairs with `g < c`.
//! The smallest slope from `B` to points on its left is reached on the
//! upper convex hull of those points, where the slopes to `B` are
//! unimodal: each completion costs a binary search, each post an amortised
//! constant, and memory is the hull (plus the posts not yet completed),
//! not the whole run. Same result as perftest's double loop (tested
//! against it), in O(n log n).

use std::collections::VecDeque;

/// Most points kept (hull + pending posts) before giving up on the peak.
pub(crate) const MAX_POINTS: usize = 1 << 22;

#[derive(Debug, Clone)]
pub(crate) struct PeakTracker {
    /// Posts not yet usable: their batch starts at or after the completed count.
    pending: VecDeque<(u64, u64)>,
    /// Upper hull of usable posts, increasing `g`.
    hull: Vec<(u64, u64)>,
    /// Best span so far: (messages, nanoseconds).
    best: Option<(u64, u64)>,
    /// Set when the points outgrew `MAX_POINTS`.
    overflow: bool,
    cap: usize,
}

/// `(b - a) x (c - a)` in the plane of (messages, ns); > 0 when `c` lies
/// to the left of the line a -> b.
fn cross(a: (u64, u64), b: (u64, u64), c: (u64, u64)) -> i128 {
    let (ax, ay) = (a.0 as i128, a.1 as i128);
    (b.0 as i128 - ax) * (c.1 as i128 - ay) - (b.1 as i128 - ay) * (c.0 as i128 - ax)
}

impl PeakTracker {
    pub fn new() -> PeakTracker {
        PeakTracker::with_cap(MAX_POINTS)
    }

    pub fn with_cap(cap: usize) -> PeakTracker {
        PeakTracker {
            pending: VecDeque::new(),
            hull: Vec::new(),
            best: None,
            overflow: false,
            cap,
        }
    }

    /// A post batch: `before` messages had been posted before it, at `t_ns`.
    #[inline]
    pub fn post(&mut self, before: u64, t_ns: u64) {
        if self.overflow {
            return;
        }
        if self.pending.len() + self.hull.len() >= self.cap {
            self.overflow = true;
            self.pending = VecDeque::new();
            self.hull = Vec::new();
            return;
        }
        self.pending.push_back((before, t_ns));
    }

    /// `completed` messages have completed by `t_ns`.
    #[inline]
    pub fn complete(&mut self, completed: u64, t_ns: u64) {
        if self.overflow {
            return;
        }
        while let Some(&p) = self.pending.front() {
            if p.0 >= completed {
                break;
            }
            self.pending.pop_front();
            self.push_hull(p);
        }
        if self.hull.is_empty() {
            return;
        }
        let b = (completed, t_ns);
        // Slope from hull[i] to b: (b.1 - h.1) / (b.0 - h.0). Find its
        // minimum: on an upper hull the slopes to a point on the right
        // fall, then rise.
        let slope_le = |i: usize, j: usize| -> bool {
            // slope(i) <= slope(j)
            let (hi, hj) = (self.hull[i], self.hull[j]);
            let (ni, di) = (b.1 as i128 - hi.1 as i128, (b.0 - hi.0) as i128);
            let (nj, dj) = (b.1 as i128 - hj.1 as i128, (b.0 - hj.0) as i128);
            ni * dj <= nj * di
        };
        let (mut lo, mut hi) = (0usize, self.hull.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if slope_le(mid + 1, mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let a = self.hull[lo];
        let msgs = completed - a.0;
        let ns = t_ns.saturating_sub(a.1);
        if ns == 0 {
            // Same clock reading for post and completion: no rate to take.
            return;
        }
        let better = match self.best {
            None => true,
            // msgs / ns > bm / bns
            Some((bm, bns)) => (msgs as u128) * (bns as u128) > (bm as u128) * (ns as u128),
        };
        if better {
            self.best = Some((msgs, ns));
        }
    }

    fn push_hull(&mut self, p: (u64, u64)) {
        // Keep the hull concave (upper): drop the last point while it is
        // not strictly above the segment from the one before it to p.
        while self.hull.len() >= 2 {
            let n = self.hull.len();
            if cross(self.hull[n - 2], self.hull[n - 1], p) >= 0 {
                self.hull.pop();
            } else {
                break;
            }
        }
        self.hull.push(p);
    }

    /// The peak in Gbit/s for `size`-byte messages, or why there is none.
    pub fn peak_gbps(&self, size: u64) -> Result<Option<f64>, String> {
        if self.overflow {
            return Err(format!(
                "more than {} post and completion points to keep",
                self.cap
            ));
        }
        Ok(self.best.map(|(m, ns)| (m * size) as f64 * 8.0 / ns as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perftest's double loop over per-message times.
    fn brute(posted: &[u64], completed: &[u64], size: u64) -> Option<f64> {
        let mut best: Option<f64> = None;
        for (i, &tp) in posted.iter().enumerate() {
            for (j, &tc) in completed.iter().enumerate().skip(i) {
                let dt = tc.saturating_sub(tp);
                if dt == 0 {
                    continue;
                }
                let g = ((j - i + 1) as u64 * size) as f64 * 8.0 / dt as f64;
                best = Some(best.map_or(g, |b: f64| b.max(g)));
            }
        }
        best
    }

    /// Simple xorshift, for reproducible random runs.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn equals_perftests_double_loop_on_random_runs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for run in 0..200 {
            let n = 1 + (rng(&mut seed) % 60) as usize;
            let depth = 1 + rng(&mut seed) % 8;
            let batch = 1 + rng(&mut seed) % 4;
            let cq_mod = 1 + rng(&mut seed) % 5;
            let size = 4096;
            // Simulate: posts in batches while fewer than `depth` are in
            // flight; completions every cq_mod messages (and the last one).
            let (mut posted_t, mut completed_t) = (vec![0u64; n], vec![0u64; n]);
            let mut tracker = PeakTracker::new();
            let (mut posted, mut done, mut t) = (0usize, 0usize, 0u64);
            while done < n {
                if posted < n && (posted - done) < depth as usize {
                    let k = (batch as usize)
                        .min(n - posted)
                        .min(depth as usize - (posted - done));
                    t += rng(&mut seed) % 50;
                    tracker.post(posted as u64, t);
                    posted_t[posted..posted + k].fill(t);
                    posted += k;
                } else {
                    let target = ((done as u64 / cq_mod + 1) * cq_mod).min(n as u64) as usize;
                    let c = target.min(posted);
                    t += 1 + rng(&mut seed) % 300;
                    completed_t[done..c].fill(t);
                    done = c;
                    tracker.complete(done as u64, t);
                }
            }
            // perftest knows completion times only at signaled completions;
            // every message of one completes at its time.
            let want = brute(&posted_t, &completed_t, size);
            let got = tracker.peak_gbps(size).unwrap();
            match (want, got) {
                (Some(w), Some(g)) => assert!((w - g).abs() <= 1e-9 * w, "run {run}: {w} vs {g}"),
                (w, g) => assert_eq!(w.is_some(), g.is_some(), "run {run}: {w:?} vs {g:?}"),
            }
        }
    }

    #[test]
    fn steady_rate_peak_is_that_rate_and_a_burst_raises_it() {
        // 1 message per µs, posted 10 µs ahead of its completion.
        let mut t = PeakTracker::new();
        for k in 0..1000u64 {
            t.post(k, k * 1000);
            t.complete(k + 1, k * 1000 + 10_000);
        }
        // The best span is the longest: 1000 msgs over 1000 µs + 10 µs... or
        // any span ending late; never above 1 msg/µs over the lag.
        let g = t.peak_gbps(1000).unwrap().unwrap();
        let avg = 1000.0 * 1000.0 * 8.0 / (999_000.0 + 10_000.0);
        assert!(g >= avg - 1e-9 && g <= 8.0 + 1e-9, "{g} vs avg {avg}");
        // Burst: 100 messages completing 10 ns apart.
        let mut t = PeakTracker::new();
        t.post(0, 0);
        for k in 1..=100u64 {
            t.complete(k, 1_000_000 + k * 10);
        }
        let g = t.peak_gbps(8).unwrap().unwrap();
        assert!((g - 100.0 * 64.0 / 1_001_000.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn nothing_completed_means_no_peak_and_overflow_says_why() {
        let mut t = PeakTracker::new();
        t.post(0, 5);
        assert_eq!(t.peak_gbps(64).unwrap(), None);
        // A completion at the very instant of the post gives no rate.
        t.complete(1, 5);
        assert_eq!(t.peak_gbps(64).unwrap(), None);
        let mut t = PeakTracker::with_cap(4);
        for k in 0..10 {
            t.post(k, k);
        }
        t.complete(10, 100);
        assert!(t.peak_gbps(64).unwrap_err().contains("more than 4"));
    }
}
