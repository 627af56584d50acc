//! The runner's own costs: a bounded number of threads, the open files a
//! batch needs, and where a run's wall time goes.
//!
//! A batch of `F` concurrent flows (a mesh round of `N/2` pairs, an incast
//! of `N − 1` senders, a bisection of `N/2` flows) is driven by at most
//! [`FLOW_WORKERS`] threads, whatever `F` is: the drive sessions are set up
//! by a pool of workers (and at most [`crate::exec::SETUP_PER_RECEIVER`] of
//! them toward one receiver at a time), the `go` messages go out from one
//! thread, and the results are read by a pool of the same size, each worker
//! taking the next session whose results have not been read. Every session
//! waits for its results until its own deadline, whichever worker reads it;
//! past that deadline only what has already arrived is taken, so a hung
//! agent holds one worker, never the others' results.
//!
//! ```text
//! threads ≤ 3 + max(MAX_PROBE_THREADS, min(F, FLOW_WORKERS))        = 3 + max(32, min(F, 64))
//! open files ≤ BASE_FDS + 2·F + T                                   (T: tune sessions of the batch)
//! ```
//!
//! The 3 are the main thread, the signal watcher of the command line and one
//! watcher: while flows set up, the one that calls off a round's stragglers
//! (flows not ready [`crate::exec::straggle_limit`] after the last ready
//! one); while results are awaited, the one that closes the sessions on
//! SIGINT. Each flow holds its drive session's connection, and a duplicate
//! of it for that watcher while it sets up or its results are awaited; a cell with an environment
//! (a tuning profile, a policy count) holds one tune session per agent.
//! The runner raises its soft open-file limit to what its largest batch
//! needs before the run starts, and refuses the plan with what to raise when
//! the hard limit is lower.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most threads that drive one batch's flows (set-up, results, tune
/// sessions).
pub const FLOW_WORKERS: usize = 64;
/// Threads besides the workers: the main thread, the command line's
/// signal watcher, the interrupt watcher while results are awaited.
pub const FIXED_THREADS: usize = 3;
/// Open files besides the sessions: standard streams, the store (database,
/// WAL, shared memory, lease), a policy command's pipes, /proc reads, and
/// the resolver's sockets, with room to spare.
pub const BASE_FDS: u64 = 32;

/// Most threads a run has at once when its largest batch has `flows`
/// flows (discovery included).
pub fn max_threads(flows: usize) -> usize {
    FIXED_THREADS + crate::exec::MAX_PROBE_THREADS.max(flows.min(FLOW_WORKERS))
}

/// Open files a batch of `flows` flows with `tune_sessions` tune sessions
/// needs at most.
pub fn fds_needed(flows: usize, tune_sessions: usize) -> u64 {
    BASE_FDS + 2 * flows as u64 + tune_sessions as u64
}

/// Apply `f` to every item on at most `workers` threads (scoped), each
/// worker taking the next item not yet taken. Results come back in the
/// items' order; an item whose `f` panicked gets `panicked()`.
pub fn pooled<T: Send, R: Send>(
    items: Vec<T>,
    workers: usize,
    f: impl Fn(T) -> R + Sync,
    panicked: impl Fn() -> R + Sync,
) -> Vec<R> {
    let n = items.len();
    let items: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let out: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..n.min(workers.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = items.get(i) else { break };
                let Some(item) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() else {
                    continue;
                };
                let r = catch_unwind(AssertUnwindSafe(|| f(item))).unwrap_or_else(|_| panicked());
                *out[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
        // Every worker is running now: the thread count's high mark.
        note_usage();
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(&panicked)
        })
        .collect()
}

/// The process's threads, open files and resident memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub threads: u64,
    pub fds: u64,
    /// Resident set, KiB (for a peak: the kernel's high-water mark, VmHWM).
    pub rss_kib: u64,
}

fn proc_status(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn open_files() -> Option<u64> {
    // The directory's own descriptor is one of the entries.
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

impl Usage {
    /// What the process holds now (zeros where /proc cannot tell).
    pub fn now() -> Usage {
        Usage {
            threads: proc_status("Threads:").unwrap_or(0),
            fds: open_files().unwrap_or(0),
            rss_kib: proc_status("VmRSS:").unwrap_or(0),
        }
    }
}

static PEAK_THREADS: AtomicU64 = AtomicU64::new(0);
static PEAK_FDS: AtomicU64 = AtomicU64::new(0);

/// Record the process's threads and open files now, at a point where they
/// peak (every worker of a pool started, every session of a batch open).
pub fn note_usage() {
    let u = Usage::now();
    PEAK_THREADS.fetch_max(u.threads, Ordering::Relaxed);
    PEAK_FDS.fetch_max(u.fds, Ordering::Relaxed);
}

/// The highest threads and open files noted so far, and the resident
/// memory's high-water mark, of the whole process.
pub fn peak_usage() -> Usage {
    note_usage();
    Usage {
        threads: PEAK_THREADS.load(Ordering::Relaxed),
        fds: PEAK_FDS.load(Ordering::Relaxed),
        rss_kib: proc_status("VmHWM:").unwrap_or(0),
    }
}

/// Where a run's wall time went, in seconds. The phases of a batch follow
/// one another, so with `before` and `after` they add up to the wall time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Phases {
    /// Loading the plan, finding the agents, opening the store, up to the
    /// first batch.
    pub before_s: f64,
    /// Each batch's set-up: a policy command, tuning, the drive sessions
    /// opened and every flow set up, to the first `go`.
    pub setup_s: f64,
    /// From the first `go` to the common start instant.
    pub start_s: f64,
    /// From the start instant to the last result: the tests' warm-up and
    /// measured intervals, and what the slowest flow took beyond them to
    /// end and report.
    pub tests_s: f64,
    /// Restoring the environments and storing each batch's results.
    pub commit_s: f64,
    /// Back-off before retrying failed cells.
    pub backoff_s: f64,
    /// Between batches: analysing a mesh for the suspects to re-test.
    pub retest_s: f64,
    /// After the last batch (ending the run).
    pub after_s: f64,
}

impl Phases {
    pub fn total(&self) -> f64 {
        self.before_s
            + self.setup_s
            + self.start_s
            + self.tests_s
            + self.commit_s
            + self.backoff_s
            + self.retest_s
            + self.after_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_runs_every_item_once_in_order_on_at_most_its_workers() {
        let live = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let out = pooled(
            (0..200).collect(),
            7,
            |i: usize| {
                let n = live.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(1));
                live.fetch_sub(1, Ordering::SeqCst);
                if i == 13 {
                    panic!("item 13");
                }
                i * 2
            },
            || usize::MAX,
        );
        assert_eq!(out.len(), 200);
        for (i, r) in out.iter().enumerate() {
            assert_eq!(*r, if i == 13 { usize::MAX } else { i * 2 });
        }
        let most = most.load(Ordering::SeqCst);
        assert!((2..=7).contains(&most), "{most} at once");
        assert!(pooled(Vec::<u8>::new(), 4, |x| x, || 0).is_empty());
    }

    #[test]
    fn the_formulas() {
        assert_eq!(max_threads(1), 3 + 32);
        assert_eq!(max_threads(50), 3 + 50);
        assert_eq!(max_threads(128), 3 + 64);
        assert_eq!(max_threads(1024), 3 + 64);
        assert_eq!(fds_needed(255, 0), 32 + 510);
        assert_eq!(fds_needed(1024, 0), 32 + 2048);
        let u = Usage::now();
        assert!(u.threads >= 1 && u.fds >= 3 && u.rss_kib > 0, "{u:?}");
    }
}
