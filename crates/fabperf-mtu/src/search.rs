//! The search for the largest packet that crosses: a binary search over
//! packet sizes, each size tried a few times (a lost probe is not a
//! verdict, a "too big" answer is), shortened by what an ICMP error names,
//! and checked again at the end so a run of losses cannot end it low.

use crate::sys::TooBig;
use std::io;

/// One probe's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It crossed (and its answer came back).
    Pass,
    /// Nothing came back in time.
    Lost,
    /// A definite no: this host's stack refused to send it, or an ICMP
    /// error (or the peer) said it is too big.
    TooBig(TooBig),
}

/// What a search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The largest packet size (bytes of the IP packet) that crossed.
    pub largest: usize,
    /// True when that is the upper bound searched (the size of the
    /// sending interface): nothing larger could have been tried.
    pub at_bound: bool,
    pub probes: u32,
    /// The last "too big" report seen.
    pub too_big: Option<TooBig>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchError {
    /// Not even the smallest packet crossed.
    NothingCrosses {
        smallest: usize,
        probes: u32,
    },
    Io(String),
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::NothingCrosses { smallest, probes } => write!(
                f,
                "not even a {smallest}-byte packet crossed ({probes} probes): the probes are blocked or lost, not cut by the MTU"
            ),
            SearchError::Io(e) => f.write_str(e),
        }
    }
}

struct Searcher<F> {
    probe: F,
    attempts: u32,
    probes: u32,
    too_big: Option<TooBig>,
}

impl<F: FnMut(usize) -> io::Result<Outcome>> Searcher<F> {
    fn passes(&mut self, size: usize) -> Result<bool, SearchError> {
        for _ in 0..self.attempts {
            self.probes += 1;
            match (self.probe)(size).map_err(|e| SearchError::Io(e.to_string()))? {
                Outcome::Pass => return Ok(true),
                Outcome::Lost => {}
                Outcome::TooBig(t) => {
                    self.too_big = Some(t);
                    return Ok(false);
                }
            }
        }
        Ok(false)
    }
}

/// The largest size in `lo..=hi` for which `probe` passes, trying each
/// size up to `attempts` times. `lo` must pass.
pub fn search(
    lo: usize,
    hi: usize,
    attempts: u32,
    probe: impl FnMut(usize) -> io::Result<Outcome>,
) -> Result<Found, SearchError> {
    let hi = hi.max(lo);
    let mut s = Searcher {
        probe,
        attempts: attempts.max(1),
        probes: 0,
        too_big: None,
    };
    if !s.passes(lo)? {
        return Err(SearchError::NothingCrosses {
            smallest: lo,
            probes: s.probes,
        });
    }
    if s.passes(hi)? {
        return Ok(Found {
            largest: hi,
            at_bound: true,
            probes: s.probes,
            too_big: s.too_big,
        });
    }
    let (mut good, mut bad) = (lo, hi);
    // A named MTU is worth checking first: often it is the answer.
    if let Some(t) = s.too_big {
        let m = t.mtu as usize;
        if m >= good && m < bad {
            if m == good || s.passes(m)? {
                good = m;
                if m + 1 < bad && !s.passes(m + 1)? {
                    bad = m + 1;
                }
            } else {
                bad = m;
            }
        }
    }
    // The final check may find the search was misled by losses; then it
    // goes on above (at most twice).
    for _ in 0..3 {
        while bad - good > 1 {
            let mid = good + (bad - good) / 2;
            if s.passes(mid)? {
                good = mid;
            } else {
                bad = mid;
            }
        }
        if bad >= hi || !s.passes(bad)? {
            break;
        }
        good = bad;
        bad = hi;
    }
    Ok(Found {
        largest: good,
        at_bound: good >= hi,
        probes: s.probes,
        too_big: s.too_big,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that carries packets up to `mtu`, loses `loss` of the probes
    /// (a fixed pseudo-random sequence) and, when `icmp`, answers bigger
    /// ones with "too big" naming the MTU.
    fn path(mtu: usize, loss: f64, icmp: bool) -> impl FnMut(usize) -> io::Result<Outcome> {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        move |size| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lost = (x % 10_000) as f64 / 10_000.0 < loss;
            Ok(if size > mtu {
                if icmp {
                    Outcome::TooBig(TooBig {
                        mtu: mtu as u32,
                        from: None,
                    })
                } else {
                    Outcome::Lost
                }
            } else if lost {
                Outcome::Lost
            } else {
                Outcome::Pass
            })
        }
    }

    #[test]
    fn finds_the_mtu_with_and_without_icmp() {
        for mtu in [68, 576, 1280, 1450, 1500, 8950, 9000] {
            let f = search(68, 9000, 3, path(mtu, 0.0, false)).unwrap();
            assert_eq!(f.largest, mtu);
            assert_eq!(f.at_bound, mtu == 9000);
            let g = search(68, 9000, 3, path(mtu, 0.0, true)).unwrap();
            assert_eq!(g.largest, mtu);
            // An ICMP error that names the MTU ends the search at once.
            assert!(g.probes <= 5, "{mtu}: {} probes", g.probes);
        }
    }

    #[test]
    fn losses_do_not_end_it_low() {
        for seed_mtu in [1450, 1500, 4000, 8950] {
            let f = search(68, 9000, 3, path(seed_mtu, 0.3, false)).unwrap();
            assert_eq!(f.largest, seed_mtu, "30 % loss");
        }
    }

    #[test]
    fn nothing_crossing_is_an_error_not_a_tiny_mtu() {
        let e = search(68, 1500, 3, |_| Ok(Outcome::Lost)).unwrap_err();
        assert_eq!(
            e,
            SearchError::NothingCrosses {
                smallest: 68,
                probes: 3
            }
        );
        assert!(e.to_string().contains("blocked or lost"));
        let e = search(68, 1500, 3, |_| Err(io::Error::other("boom"))).unwrap_err();
        assert_eq!(e, SearchError::Io("boom".into()));
    }

    #[test]
    fn a_bogus_named_mtu_does_not_mislead() {
        // The "router" names 9000 (above the truth) and then 100 (below).
        let mut calls = 0;
        let f = search(68, 9000, 2, |size| {
            calls += 1;
            Ok(if size > 1400 {
                Outcome::TooBig(TooBig {
                    mtu: if calls % 2 == 0 { 9000 } else { 100 },
                    from: None,
                })
            } else {
                Outcome::Pass
            })
        })
        .unwrap();
        assert_eq!(f.largest, 1400);
    }
}
