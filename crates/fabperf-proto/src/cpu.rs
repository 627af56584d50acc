//! CPU time accounting for "CPU of both ends".
//!
//! Each data thread reads its own CPU time (`RUSAGE_THREAD`) at the start
//! and end of the measured interval, so the figure is right whether the
//! agent is a separate process or runs inside the client (`fabperf suite`).

use std::time::Duration;

fn tv(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000)
}

fn rusage(who: libc::c_int) -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage struct; getrusage only writes it.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return Duration::ZERO;
    }
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system CPU time of the calling thread.
pub fn thread_cpu_time() -> Duration {
    rusage(libc::RUSAGE_THREAD)
}

/// User + system CPU time of the whole process.
pub fn process_cpu_time() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// CPU time over wall time in percent of one core (can exceed 100 when
/// several threads run).
pub fn percent(cpu: Duration, wall: Duration) -> f64 {
    if wall.is_zero() {
        return 0.0;
    }
    cpu.as_secs_f64() / wall.as_secs_f64() * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_thread_uses_cpu() {
        let start = thread_cpu_time();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let used = thread_cpu_time() - start;
        assert!(used > Duration::from_millis(10), "{used:?}");
        assert!(process_cpu_time() >= used);
        assert!((percent(Duration::from_secs(1), Duration::from_secs(2)) - 50.0).abs() < 1e-9);
    }
}
