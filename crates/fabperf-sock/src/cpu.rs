//! CPU figures of both ends in the records: the test threads' own time
//! and the hosts' (see `fabperf_proto::cpu`). An unknown figure leaves its
//! key absent and adds a warning.

pub(crate) use fabperf_proto::cpu::HostReport;
use fabperf_results::{HostCpu, Record, Side, Warning};

/// What a measuring loop ends with: its count, seconds, thread CPU
/// seconds and the host's report (CPU figure or why there is none, counters).
pub(crate) type LoopEnd = (u64, f64, Option<f64>, HostReport);

/// Set `side`'s thread CPU percentage from CPU seconds over `secs`.
pub(crate) fn set_thread_cpu(r: &mut Record, side: Side, cpu_s: Option<f64>, secs: f64) {
    let pct = match cpu_s {
        // An impossible figure (negative, not finite) can only come from a
        // peer's report: keep it, so the record's check names the field as
        // a protocol error instead of hiding it as "unknown".
        Some(c) => (secs > 0.0).then(|| c / secs * 100.0),
        None => {
            r.warn(Warning::CpuUnknown {
                side,
                why: "getrusage(RUSAGE_THREAD) failed".into(),
            });
            None
        }
    };
    match side {
        Side::Client => r.cpu_local_pct = pct,
        Side::Agent => r.cpu_remote_pct = pct,
    }
}

/// Set `side`'s host CPU figure, or warn why there is none.
pub(crate) fn set_host_cpu(r: &mut Record, side: Side, h: &Result<HostCpu, String>) {
    let v = match h {
        Ok(h) => Some(*h),
        Err(why) => {
            r.warn(Warning::HostCpuUnknown {
                side,
                why: why.clone(),
            });
            None
        }
    };
    match side {
        Side::Client => r.host_cpu_local = v,
        Side::Agent => r.host_cpu_remote = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabperf_results::Transport;

    #[test]
    fn unknown_figures_are_absent_and_explained() {
        let mut r = Record::new("tcp-lat", Transport::Tcp, 64, 1);
        set_thread_cpu(&mut r, Side::Client, Some(0.5), 2.0);
        assert_eq!(r.cpu_local_pct, Some(25.0));
        set_thread_cpu(&mut r, Side::Agent, None, 2.0);
        assert_eq!(r.cpu_remote_pct, None);
        assert!(r.has_warning("cpu-unknown"));
        set_host_cpu(&mut r, Side::Agent, &Err("no /proc".into()));
        assert!(r.host_cpu_remote.is_none() && r.has_warning("host-cpu-unknown"));
    }
}
