//! What one read of the clock costs here, and a warning when it is too
//! dear to time with.
//!
//! fabperf times with `CLOCK_MONOTONIC` (`Instant`). With a TSC, kvm-clock
//! or the Arm generic timer that read is a few tens of nanoseconds in the
//! vDSO. When the kernel has fallen back to `hpet` or `acpi_pm` (it does so
//! when its watchdog marks the TSC unstable, which happens in VMs and under
//! emulation) every read is a system call plus a trapped device access:
//! 0.8 µs measured in the soft-RoCE guest, against 60 ns with the TSC. Each
//! latency sample then carries part of that, and busy loops that look at the
//! clock slow down — the record says so instead of leaving the reader to
//! guess.

use std::sync::OnceLock;
use std::time::Instant;

/// Above this many nanoseconds per read the clock gets a warning.
pub const SLOW_CLOCK_NS: f64 = 250.0;

const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

/// The cost of one `Instant::now()` and the kernel's clocksource.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockCost {
    /// Nanoseconds per read (best of a few batches).
    pub read_ns: f64,
    /// `current_clocksource` from sysfs, when readable.
    pub source: Option<String>,
}

/// Measure the cost of a clock read: the best of 5 batches of 200 reads, so
/// a preemption during one batch does not count. About 1 ms even when a
/// read is a system call.
pub fn measure_read_ns() -> f64 {
    const BATCH: u32 = 200;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..BATCH {
            std::hint::black_box(Instant::now());
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(BATCH);
        best = best.min(ns);
    }
    best
}

/// The kernel's current clocksource (Linux), e.g. `tsc`, `kvm-clock`, `hpet`.
pub fn clocksource() -> Option<String> {
    std::fs::read_to_string(CLOCKSOURCE)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// This process's clock cost, measured once.
pub fn cost() -> &'static ClockCost {
    static COST: OnceLock<ClockCost> = OnceLock::new();
    COST.get_or_init(|| ClockCost {
        read_ns: measure_read_ns(),
        source: clocksource(),
    })
}

/// The warning for a record timed with this clock, if it is slow.
pub fn warning_for(c: &ClockCost) -> Option<String> {
    if c.read_ns <= SLOW_CLOCK_NS {
        return None;
    }
    let source = match c.source.as_deref() {
        Some(s) => format!("clocksource {s}"),
        None => "clocksource unknown".to_string(),
    };
    // The fallbacks without a vDSO fast path (fabperf-detect holds the list).
    let (why, hint) = match c.source.as_deref() {
        Some(s) if fabperf_detect::clocksource_is_slow(s) => (
            "every timestamp is a system call",
            " The kernel uses it when it has marked the TSC unstable (`dmesg | grep -i tsc`); \
             on a VM prefer kvm-clock, or boot with tsc=reliable where the TSC is known good.",
        ),
        // A vDSO clocksource measured slow: an emulated CPU or a machine
        // too loaded to measure on (seen in the soft-RoCE guest under CI).
        _ => (
            "the machine is emulated or overloaded",
            " Figures from this run are less trustworthy than usual.",
        ),
    };
    Some(format!(
        "a clock read costs {:.0} ns here ({source}; a TSC or kvm-clock read is ~20-60 ns): \
         {why}, so latency samples include part of it and busy-polling loops slow down.{hint}",
        c.read_ns
    ))
}

/// [`warning_for`] this process's clock.
pub fn slow_clock_warning() -> Option<String> {
    warning_for(cost())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpet_gets_a_warning_with_the_figure_and_the_fix() {
        let w = warning_for(&ClockCost {
            read_ns: 815.4,
            source: Some("hpet".into()),
        })
        .expect("slow clock warned");
        assert!(w.contains("815 ns"), "{w}");
        assert!(w.contains("clocksource hpet"), "{w}");
        assert!(w.contains("tsc=reliable"), "{w}");
    }

    #[test]
    fn fast_clock_has_no_warning_and_unknown_source_says_so() {
        let fast = ClockCost {
            read_ns: 60.0,
            source: Some("tsc".into()),
        };
        assert_eq!(warning_for(&fast), None);
        let w = warning_for(&ClockCost {
            read_ns: 900.0,
            source: None,
        })
        .unwrap();
        assert!(w.contains("clocksource unknown"), "{w}");
        assert!(!w.contains("tsc=reliable"), "{w}");
        // A TSC that reads slowly (emulated CPU, loaded host) is not a
        // system call: the warning must not say it is.
        let w = warning_for(&ClockCost {
            read_ns: 262.0,
            source: Some("tsc".into()),
        })
        .unwrap();
        assert!(w.contains("262 ns") && w.contains("clocksource tsc"), "{w}");
        assert!(
            !w.contains("system call") && !w.contains("tsc=reliable"),
            "{w}"
        );
        assert!(w.contains("emulated or overloaded"), "{w}");
    }

    #[test]
    fn measured_cost_is_plausible() {
        let ns = measure_read_ns();
        // A read takes time, and even a trapped one is far below 100 µs.
        assert!(ns > 0.0 && ns < 100_000.0, "{ns}");
    }
}
