//! CPU time accounting for "CPU of both ends".
//!
//! Two figures per end:
//! - the test's own threads: each data thread reads its own CPU time
//!   (`RUSAGE_THREAD`) at the start and end of the measured interval, so
//!   the figure is right whether the agent is a separate process or runs
//!   inside the client (`fabperf suite`);
//! - the host: user, system, irq and softirq time of all CPUs from
//!   `/proc/stat` over the same interval. It shows the kernel's share of
//!   the work that no thread is charged with (network receive processing;
//!   on a software RDMA device, the whole protocol).
//!
//! A figure that cannot be read is an error here and an absent key plus a
//! warning in the record, never a zero.

use fabperf_detect::counters::{CounterSnapshot, CounterSpec};
use fabperf_results::{CounterDelta, HostCpu, Note, Placement};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;
use nix::unistd::{sysconf, SysconfVar};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tv(t: TimeVal) -> Duration {
    Duration::new(t.tv_sec() as u64, (t.tv_usec() as u32) * 1000)
}

fn rusage(who: UsageWho) -> io::Result<Duration> {
    let ru = getrusage(who)?;
    Ok(tv(ru.user_time()) + tv(ru.system_time()))
}

/// User + system CPU time of the calling thread.
pub fn thread_cpu_time() -> io::Result<Duration> {
    rusage(UsageWho::RUSAGE_THREAD)
}

/// User + system CPU time of the whole process.
pub fn process_cpu_time() -> io::Result<Duration> {
    rusage(UsageWho::RUSAGE_SELF)
}

/// CPU time over wall time in percent of one core (can exceed 100 when
/// several threads run); `None` for a zero-length interval.
pub fn percent(cpu: Duration, wall: Duration) -> Option<f64> {
    (!wall.is_zero()).then(|| cpu.as_secs_f64() / wall.as_secs_f64() * 100.0)
}

/// The calling thread's CPU time from a starting point. Create it on the
/// thread that is measured and read it there.
#[derive(Debug)]
pub struct ThreadCpu {
    start: io::Result<Duration>,
}

impl ThreadCpu {
    pub fn start() -> ThreadCpu {
        ThreadCpu {
            start: thread_cpu_time(),
        }
    }

    /// CPU seconds the calling thread used since [`start`](Self::start);
    /// `None` when either reading failed.
    pub fn used_secs(&self) -> Option<f64> {
        let a = self.start.as_ref().ok()?;
        let b = thread_cpu_time().ok()?;
        Some(b.saturating_sub(*a).as_secs_f64())
    }
}

/// Cumulative CPU time of the whole host, in clock ticks, from the `cpu`
/// line of `/proc/stat`, and the number of CPUs listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    pub cpus: u32,
}

impl HostTimes {
    /// Read `/proc/stat`.
    pub fn read() -> Result<HostTimes, String> {
        let text = std::fs::read_to_string("/proc/stat")
            .map_err(|e| format!("reading /proc/stat: {e}"))?;
        HostTimes::parse(&text)
    }

    /// Parse `/proc/stat` text: the aggregate `cpu` line (at least the
    /// eight fields up to `steal`; kernels before 2.6.11 have fewer and are
    /// refused) and the `cpuN` lines.
    pub fn parse(text: &str) -> Result<HostTimes, String> {
        let mut total: Option<HostTimes> = None;
        let mut cpus = 0u32;
        for line in text.lines() {
            let mut f = line.split_ascii_whitespace();
            match f.next() {
                Some("cpu") if total.is_none() => {
                    let v: Vec<u64> = f
                        .take(8)
                        .map(|x| x.parse::<u64>())
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("/proc/stat: bad number in the cpu line: {e}"))?;
                    if v.len() < 8 {
                        return Err(format!(
                            "/proc/stat: the cpu line has {} fields, 8 expected",
                            v.len()
                        ));
                    }
                    total = Some(HostTimes {
                        user: v[0],
                        nice: v[1],
                        system: v[2],
                        idle: v[3],
                        iowait: v[4],
                        irq: v[5],
                        softirq: v[6],
                        steal: v[7],
                        cpus: 0,
                    });
                }
                Some(name)
                    if name.len() > 3
                        && name.starts_with("cpu")
                        && name[3..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    cpus = cpus.saturating_add(1)
                }
                _ => {}
            }
        }
        let mut t = total.ok_or_else(|| "/proc/stat has no cpu line".to_string())?;
        if cpus == 0 {
            return Err("/proc/stat lists no cpuN line".into());
        }
        t.cpus = cpus;
        Ok(t)
    }

    /// The host's CPU use between `earlier` and `self`, `wall` apart, in
    /// percent of one CPU. `None` for a zero-length interval, a counter
    /// that went backwards, or a changed CPU count (hot-plug).
    pub fn usage_since(
        &self,
        earlier: &HostTimes,
        wall: Duration,
        ticks_per_sec: u64,
    ) -> Option<HostCpu> {
        if wall.is_zero() || ticks_per_sec == 0 || self.cpus != earlier.cpus {
            return None;
        }
        let d = |a: u64, b: u64| a.checked_sub(b);
        let pct = |ticks: u64| ticks as f64 / ticks_per_sec as f64 / wall.as_secs_f64() * 100.0;
        Some(HostCpu {
            user_pct: pct(d(self.user, earlier.user)? + d(self.nice, earlier.nice)?),
            system_pct: pct(d(self.system, earlier.system)?),
            irq_pct: pct(d(self.irq, earlier.irq)?),
            softirq_pct: pct(d(self.softirq, earlier.softirq)?),
            cpus: self.cpus,
        })
    }
}

/// Clock ticks per second of `/proc/stat` (USER_HZ).
pub fn ticks_per_sec() -> u64 {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(n)) if n > 0 => n as u64,
        // Linux has had USER_HZ = 100 on every architecture for decades.
        _ => 100,
    }
}

/// Fewest clock ticks an interval must span for a host figure.
pub const MIN_TICKS: f64 = 20.0;

/// The host's CPU use over an interval: [`start`](Self::start) at the
/// beginning, [`finish`](Self::finish) at the end; with a counter spec
/// ([`start_with`](Self::start_with)) also the counters that moved.
#[derive(Debug, Clone)]
pub struct HostMeter {
    t0: Instant,
    start: Result<HostTimes, String>,
    counters: Option<(Arc<CounterSpec>, CounterSnapshot)>,
}

impl HostMeter {
    pub fn start() -> HostMeter {
        HostMeter::start_with(None)
    }

    /// Start metering, and snapshot the counters of `spec` (read before the clock starts, so
    /// their cost is not inside the interval).
    pub fn start_with(spec: Option<Arc<CounterSpec>>) -> HostMeter {
        let counters = spec.map(|s| {
            let snap = crate::explain::snapshot(&s);
            (s, snap)
        });
        HostMeter {
            t0: Instant::now(),
            start: HostTimes::read(),
            counters,
        }
    }

    /// The figure since `start` and the counters that moved since then, as a report.
    pub fn finish_report(&self) -> HostReport {
        let mut r = HostReport::of(self.finish());
        if let Some((spec, before)) = &self.counters {
            let (d, missing) = crate::explain::deltas(spec, before);
            r.counters = Some(d);
            r.counters_missing = missing;
        }
        r
    }

    /// The figure since `start`, or why there is none.
    pub fn finish(&self) -> Result<HostCpu, String> {
        let a = self.start.as_ref().map_err(|e| e.clone())?;
        let wall = self.t0.elapsed();
        let tps = ticks_per_sec();
        // /proc/stat counts whole ticks: over fewer than MIN_TICKS of them
        // one tick more or less would swing the figure by more than 5 %
        // of a CPU.
        if (wall.as_secs_f64() * tps as f64) < MIN_TICKS {
            return Err(format!(
                "a {:.3} s interval is shorter than the {:.1} s that /proc/stat's 1/{tps} s \
                 ticks need",
                wall.as_secs_f64(),
                MIN_TICKS / tps as f64
            ));
        }
        let b = HostTimes::read()?;
        b.usage_since(a, wall, tps).ok_or_else(|| {
            "the host's CPU counters changed inconsistently during the test (CPU hot-plug?)"
                .to_string()
        })
    }
}

/// What one end of a test reports to the other about its host over the
/// measured interval: the CPU figure, the counters that moved, where the end
/// ran (`fabperf_proto::explain`), and its own warnings. Every field but the
/// first two is optional on the wire (an older peer sends none of them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCpu>,
    /// Why there is no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
    /// Counters that grew over the interval (`None`: not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Vec<CounterDelta>>,
    /// Counter sources that could not be read, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters_missing: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// This end's warnings (NUMA placement, pinning, unreadable counters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

impl HostReport {
    pub fn of(r: Result<HostCpu, String>) -> HostReport {
        match r {
            Ok(h) => HostReport {
                host: Some(h),
                ..HostReport::default()
            },
            Err(e) => HostReport {
                host_error: Some(e),
                ..HostReport::default()
            },
        }
    }

    /// The figure, or why there is none.
    pub fn result(&self) -> Result<HostCpu, String> {
        self.host.ok_or_else(|| {
            self.host_error
                .clone()
                .unwrap_or_else(|| "the peer did not report it".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_thread_uses_cpu() {
        let meter = ThreadCpu::start();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        // Spin until the thread has been charged 20 ms (a loaded machine
        // may give it little of the wall time), at most 10 s.
        while meter.used_secs().expect("getrusage works here") < 0.02 {
            for _ in 0..100_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no CPU time charged");
        }
        std::hint::black_box(x);
        let used = meter.used_secs().unwrap();
        assert!(process_cpu_time().unwrap().as_secs_f64() >= used);
        assert_eq!(
            percent(Duration::from_secs(1), Duration::from_secs(2)),
            Some(50.0)
        );
        assert_eq!(percent(Duration::from_secs(1), Duration::ZERO), None);
    }

    const STAT: &str = "cpu  100 5 200 1000 7 3 40 2 0 0\n\
        cpu0 50 5 100 500 3 1 20 1 0 0\n\
        cpu1 50 0 100 500 4 2 20 1 0 0\n\
        intr 12345 0 0\nctxt 99\nbtime 1700000000\n";

    #[test]
    fn proc_stat_is_parsed_and_differenced() {
        let a = HostTimes::parse(STAT).unwrap();
        assert_eq!((a.user, a.softirq, a.steal, a.cpus), (100, 40, 2, 2));
        let b = HostTimes {
            user: 150,
            nice: 15,
            system: 300,
            softirq: 140,
            irq: 3,
            ..a
        };
        // 2 s at 100 ticks/s: 60 ticks of user+nice = 30 % of one CPU.
        let u = b.usage_since(&a, Duration::from_secs(2), 100).unwrap();
        assert_eq!(u.user_pct, 30.0);
        assert_eq!(u.system_pct, 50.0);
        assert_eq!(u.softirq_pct, 50.0);
        assert_eq!(u.irq_pct, 0.0);
        assert_eq!(u.cpus, 2);
        // Backwards counters, a zero interval, a changed CPU count: no figure.
        assert!(a.usage_since(&b, Duration::from_secs(2), 100).is_none());
        assert!(b.usage_since(&a, Duration::ZERO, 100).is_none());
        let c = HostTimes { cpus: 3, ..b };
        assert!(c.usage_since(&a, Duration::from_secs(1), 100).is_none());
    }

    #[test]
    fn bad_proc_stat_is_refused_with_the_reason() {
        for (text, why) in [
            ("", "no cpu line"),
            ("cpu 1 2 3\ncpu0 1 2 3\n", "8 expected"),
            ("cpu 1 2 3 x 5 6 7 8\ncpu0 1\n", "bad number"),
            ("cpu 1 2 3 4 5 6 7 8\n", "no cpuN"),
            ("cpu -1 2 3 4 5 6 7 8\ncpu0\n", "bad number"),
            (
                "cpu 99999999999999999999999 2 3 4 5 6 7 8\ncpu0\n",
                "bad number",
            ),
        ] {
            let e = HostTimes::parse(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        // Lines that only look like CPUs are not counted; the first cpu line counts.
        let t = HostTimes::parse("cpu 1 2 3 4 5 6 7 8\ncpu0 1\ncpufreq 3\ncpu 9\n").unwrap();
        assert_eq!(t.cpus, 1);
    }

    #[test]
    fn host_reports_round_trip() {
        let h = HostReport::of(Err("x".into()));
        assert_eq!(h.result(), Err("x".into()));
        let v = serde_json::to_value(HostReport::default()).unwrap();
        assert_eq!(v, serde_json::json!({}));
        assert!(HostReport::default()
            .result()
            .unwrap_err()
            .contains("did not report"));
    }

    #[test]
    fn this_host_has_a_figure() {
        let m = HostMeter::start();
        let e = m.finish().unwrap_err();
        assert!(e.contains("shorter than"), "{e}");
        std::thread::sleep(Duration::from_secs_f64(
            MIN_TICKS / ticks_per_sec() as f64 + 0.01,
        ));
        let h = m.finish().expect("/proc/stat is readable on Linux");
        assert!(h.cpus >= 1);
        let total = h.user_pct + h.system_pct + h.irq_pct + h.softirq_pct;
        assert!(
            total >= 0.0 && total <= h.cpus as f64 * 100.0 * 1.5 + 50.0,
            "{h:?}"
        );
    }
}
