//! Scheduling of the busy-polling loops.
//!
//! Every measuring loop spins on its completion queue (or on a byte of
//! memory), as perftest does: on a NIC that costs nothing but one CPU.
//! On a software device (rxe, siw) the kernel does the protocol work —
//! segmenting, copying, acknowledging — in work queues and softirqs on the
//! same CPUs, so a poller at normal priority takes CPU time from the very
//! link it measures. There the pollers run at SCHED_IDLE: they still spin
//! (a halted vCPU is slow to wake), but any kernel worker that becomes
//! runnable gets the CPU at once. Soft-RoCE under QEMU TCG, one boot, 8
//! rounds against perftest at normal priority: 64 KiB write 0.973 -> 1.002 x,
//! send 1.007 -> 1.055 x, send latency p50 1.178 -> 1.018 x. perftest run at
//! SCHED_IDLE gains as much (BENCHMARKS.md, limits of software RDMA).

use crate::sys;
use serde::{Deserialize, Serialize};

/// `--poll-priority`: how the busy-polling loops are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollPriority {
    /// SCHED_IDLE on a software RDMA device, normal on a NIC.
    #[default]
    Auto,
    /// The caller's scheduling (perftest's behaviour).
    Normal,
    /// SCHED_IDLE: spin only when no other task wants the CPU.
    Idle,
}

impl PollPriority {
    const ALL: [PollPriority; 3] = [PollPriority::Auto, PollPriority::Normal, PollPriority::Idle];

    pub fn as_str(self) -> &'static str {
        match self {
            PollPriority::Auto => "auto",
            PollPriority::Normal => "normal",
            PollPriority::Idle => "idle",
        }
    }

    /// Whether the pollers should run at SCHED_IDLE on this device.
    pub fn wants_idle(self, software_device: bool) -> bool {
        match self {
            PollPriority::Auto => software_device,
            PollPriority::Normal => false,
            PollPriority::Idle => true,
        }
    }
}

impl std::str::FromStr for PollPriority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PollPriority::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("'{s}' is not a poll priority: use auto, normal or idle"))
    }
}

/// What a side's pollers run at: SCHED_IDLE or not, and why not when it
/// was wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pollers {
    pub idle: bool,
    pub warning: Option<String>,
}

impl Pollers {
    /// Resolve `want` for a device, checking on a throwaway thread that this
    /// process may move a thread to SCHED_IDLE (a seccomp profile may
    /// forbid it); the measuring threads are left untouched here.
    pub fn resolve(want: PollPriority, software_device: bool) -> Pollers {
        if !want.wants_idle(software_device) {
            return Pollers {
                idle: false,
                warning: None,
            };
        }
        let probe = std::thread::Builder::new()
            .name("fabperf-prio".into())
            .spawn(|| sys::set_thread_sched_policy(sys::SCHED_IDLE))
            .map_err(|e| e.to_string())
            .and_then(|h| h.join().map_err(|_| "probe thread panicked".to_string()))
            .and_then(|r| r.map_err(|e| e.to_string()));
        match probe {
            Ok(()) => Pollers {
                idle: true,
                warning: None,
            },
            Err(e) => Pollers {
                idle: false,
                warning: Some(format!(
                    "the polling loops could not run at SCHED_IDLE ({e}), so they competed with \
                     the kernel's {} work for the CPU; allow sched_setscheduler or pass \
                     --poll-priority normal to silence this",
                    if software_device {
                        "soft-RDMA protocol"
                    } else {
                        "other"
                    }
                )),
            },
        }
    }

    pub fn label(&self) -> &'static str {
        label(self.idle)
    }
}

/// How records name a side's scheduling: `idle` or `normal`.
pub fn label(idle: bool) -> &'static str {
    if idle {
        "idle"
    } else {
        "normal"
    }
}

/// Runs the calling thread at SCHED_IDLE while it lives, when `idle`; puts
/// the previous policy back on drop where the kernel allows that (root or
/// CAP_SYS_NICE, or a permissive RLIMIT_NICE). Where it does not, the thread
/// stays at SCHED_IDLE: the client measures on a thread of its own and the
/// agent on one thread per connection, so nothing else runs on it later.
pub struct IdleGuard {
    restore: Option<sys::SchedPolicy>,
}

impl IdleGuard {
    pub fn enter(idle: bool) -> IdleGuard {
        if !idle {
            return IdleGuard { restore: None };
        }
        match sys::thread_sched_policy() {
            Ok(p) if p.is_idle() => IdleGuard { restore: None },
            Ok(p) => match sys::set_thread_sched_policy(sys::SCHED_IDLE) {
                Ok(()) => IdleGuard { restore: Some(p) },
                // `Pollers::resolve` checked this; a failure now leaves the
                // thread as it was, which only costs speed.
                Err(_) => IdleGuard { restore: None },
            },
            Err(_) => IdleGuard { restore: None },
        }
    }
}

impl Drop for IdleGuard {
    fn drop(&mut self) {
        if let Some(p) = self.restore {
            let _ = sys::set_thread_sched_policy(p);
        }
    }
}

/// Sleep until `at` (a test's common start) at the normal policy when the
/// calling thread runs at SCHED_IDLE and the kernel lets it back (as
/// [`IdleGuard`] does on drop), then go back to SCHED_IDLE: an idle thread
/// that wakes on a busy machine runs only when nothing else wants a CPU,
/// so its start would slip by as long as the others keep it busy.
pub(crate) fn sleep_until(at: std::time::Instant) {
    let left = at.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return;
    }
    let was_idle = sys::thread_sched_policy().is_ok_and(|p| p.is_idle());
    let normal = was_idle && sys::set_thread_sched_policy(sys::SCHED_OTHER).is_ok();
    std::thread::sleep(at.saturating_duration_since(std::time::Instant::now()));
    if normal {
        let _ = sys::set_thread_sched_policy(sys::SCHED_IDLE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_idle_only_on_software_devices() {
        assert!(PollPriority::Auto.wants_idle(true));
        assert!(!PollPriority::Auto.wants_idle(false));
        assert!(!PollPriority::Normal.wants_idle(true));
        assert!(PollPriority::Idle.wants_idle(false));
        for p in PollPriority::ALL {
            assert_eq!(p.as_str().parse::<PollPriority>(), Ok(p));
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
        }
        assert!("low"
            .parse::<PollPriority>()
            .unwrap_err()
            .contains("auto, normal or idle"));
    }

    /// The wait for a common start runs at the normal policy (where the
    /// kernel allows going back, as for root), the test after it idle again.
    #[test]
    fn the_wait_for_the_start_is_not_idle() {
        let root = sys::is_root();
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            let _g = IdleGuard::enter(true);
            // SAFETY: gettid has no arguments and cannot fail.
            tx.send(unsafe { libc::gettid() }).unwrap();
            let at = std::time::Instant::now() + std::time::Duration::from_millis(400);
            sleep_until(at);
            assert!(std::time::Instant::now() >= at);
            sys::thread_sched_policy().unwrap().is_idle()
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150));
        // SAFETY: reads another thread's policy by its id; no memory is passed.
        let during = unsafe { libc::sched_getscheduler(tid) };
        assert!(sleeper.join().unwrap(), "idle again after the wait");
        if root {
            assert_eq!(
                during,
                libc::SCHED_OTHER,
                "the wait runs at the normal policy"
            );
        }
    }

    #[test]
    fn guard_lowers_the_thread_and_restores_it_when_allowed() {
        let root = sys::is_root();
        std::thread::spawn(move || {
            let before = sys::thread_sched_policy().unwrap();
            assert!(!before.is_idle());
            {
                let _g = IdleGuard::enter(true);
                assert!(sys::thread_sched_policy().unwrap().is_idle());
            }
            let after = sys::thread_sched_policy().unwrap();
            if root {
                assert_eq!(after, before);
            }
            // Not idle requested: nothing changes.
            let _g = IdleGuard::enter(false);
            assert_eq!(sys::thread_sched_policy().unwrap(), after);
        })
        .join()
        .unwrap();
        // The probe runs on its own thread: this one is untouched.
        let mine = sys::thread_sched_policy().unwrap();
        let p = Pollers::resolve(PollPriority::Auto, true);
        assert_eq!((p.idle, p.warning), (true, None));
        assert_eq!(sys::thread_sched_policy().unwrap(), mine);
        assert!(!Pollers::resolve(PollPriority::Auto, false).idle);
    }
}
