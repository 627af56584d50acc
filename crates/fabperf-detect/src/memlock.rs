//! Locked-memory limit and CAP_IPC_LOCK: whether this process may pin RDMA buffers.
//!
//! The kernel's `ib_umem_get` fails memory registration with ENOMEM ("ibv_reg_mr ... Cannot
//! allocate memory") when the pages pinned by a process exceed RLIMIT_MEMLOCK and the process
//! lacks CAP_IPC_LOCK. The RDMA engine calls [`check`] before registering buffers.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use serde::{Deserialize, Serialize};

/// CAP_IPC_LOCK bit number (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// Memory a fabperf RDMA benchmark registers at most with its defaults (message buffers of up
/// to 8 MiB per side and QP, queues, several QPs): below this, `memlock-low` is reported.
pub const BENCH_NEED_BYTES: u64 = 64 * 1024 * 1024;

/// RLIMIT_MEMLOCK and CAP_IPC_LOCK of a process.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MemlockStatus {
    /// Soft limit in bytes; null when unlimited.
    pub soft_bytes: Option<u64>,
    /// Hard limit in bytes; null when unlimited.
    pub hard_bytes: Option<u64>,
    /// True when the soft limit is unlimited.
    pub unlimited: bool,
    /// CAP_IPC_LOCK in the effective set (null when unreadable).
    pub cap_ipc_lock: Option<bool>,
}

/// Why buffers cannot be pinned, with the fix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct MemlockError(pub String);

fn parse_limit(s: &str) -> Option<Option<u64>> {
    if s == "unlimited" {
        Some(None)
    } else {
        s.parse::<u64>().ok().map(Some)
    }
}

/// Human form of a byte count (`64 KiB`, `8 MiB`).
pub fn human_bytes(b: u64) -> String {
    const K: u64 = 1024;
    if b >= K * K * K && b & (K * K * K - 1) == 0 {
        format!("{} GiB", b / (K * K * K))
    } else if b >= K * K && b & (K * K - 1) == 0 {
        format!("{} MiB", b / (K * K))
    } else if b >= K && b & (K - 1) == 0 {
        format!("{} KiB", b / K)
    } else {
        format!("{b} bytes")
    }
}

impl MemlockStatus {
    /// From the text of `/proc/<pid>/limits` and (optionally) `/proc/<pid>/status`.
    pub fn from_proc(limits: &str, status: Option<&str>) -> Option<MemlockStatus> {
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max locked memory"))?;
        let rest = line.trim_start_matches("Max locked memory");
        let mut it = rest.split_whitespace();
        let soft = parse_limit(it.next()?)?;
        let hard = parse_limit(it.next()?)?;
        let cap = status.and_then(cap_ipc_lock_from_status);
        Some(MemlockStatus {
            soft_bytes: soft,
            hard_bytes: hard,
            unlimited: soft.is_none(),
            cap_ipc_lock: cap,
        })
    }

    /// The calling process, via getrlimit(2) and /proc/self/status.
    pub fn current() -> std::io::Result<MemlockStatus> {
        let rl = getrlimit(Resource::Memlock);
        let status = std::fs::read_to_string("/proc/self/status").ok();
        Ok(MemlockStatus {
            soft_bytes: rl.current,
            hard_bytes: rl.maximum,
            unlimited: rl.current.is_none(),
            cap_ipc_lock: status.as_deref().and_then(cap_ipc_lock_from_status),
        })
    }

    /// True when `bytes` of memory can be pinned.
    pub fn can_lock(&self, bytes: u64) -> bool {
        self.unlimited
            || self.cap_ipc_lock == Some(true)
            || self.soft_bytes.is_some_and(|s| s >= bytes)
    }

    /// Soft limit as text (`unlimited`, `8 MiB`).
    pub fn soft_text(&self) -> String {
        match self.soft_bytes {
            None => "unlimited".into(),
            Some(b) => human_bytes(b),
        }
    }

    /// The fix, as commands for shells, systemd, containers and Kubernetes.
    pub fn fix_lines() -> Vec<String> {
        vec![
            "shell: `ulimit -l unlimited` (needs a hard limit of unlimited: set `* - memlock unlimited` in /etc/security/limits.d/rdma.conf and log in again)".into(),
            "systemd service: `LimitMEMLOCK=infinity` in the unit (containerd/kubelet too: `systemctl edit containerd` -> [Service] LimitMEMLOCK=infinity)".into(),
            "container: run as root with `securityContext.capabilities.add: [\"IPC_LOCK\"]` (IPC_LOCK has no effect for non-root containers; raise the runtime's memlock limit instead)".into(),
        ]
    }
}

/// This process's soft RLIMIT_MEMLOCK in bytes; `None` when unlimited.
pub fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Memlock).current
}

/// Set this process's RLIMIT_MEMLOCK, soft and hard, to `bytes` (raising it needs privilege).
pub fn set_limit(bytes: u64) -> std::io::Result<()> {
    setrlimit(
        Resource::Memlock,
        Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        },
    )
    .map_err(std::io::Error::from)
}

fn cap_ipc_lock_from_status(status: &str) -> Option<bool> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    let hex = line.trim_start_matches("CapEff:").trim();
    let v = u64::from_str_radix(hex, 16).ok()?;
    Some(v & (1u64 << CAP_IPC_LOCK) != 0)
}

/// Check that this process can pin `bytes` for RDMA; the error says what to change.
pub fn check(bytes: u64) -> Result<MemlockStatus, MemlockError> {
    let st = MemlockStatus::current()
        .map_err(|e| MemlockError(format!("cannot read RLIMIT_MEMLOCK: {e}")))?;
    if st.can_lock(bytes) {
        return Ok(st);
    }
    Err(MemlockError(format!(
        "RDMA needs to pin {} but the locked-memory limit (RLIMIT_MEMLOCK) is {} and the process lacks CAP_IPC_LOCK; memory registration would fail with ENOMEM. Fix: {}",
        human_bytes(bytes),
        st.soft_text(),
        MemlockStatus::fix_lines().join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max locked memory         8388608              8388608              bytes     \n";

    #[test]
    fn parses_proc_limits_and_caps() {
        let st = MemlockStatus::from_proc(LIMITS, Some("Name:\tx\nCapEff:\t0000000000000000\n"))
            .unwrap();
        assert_eq!(st.soft_bytes, Some(8 << 20));
        assert_eq!(st.cap_ipc_lock, Some(false));
        assert!(!st.can_lock(BENCH_NEED_BYTES));
        assert!(st.can_lock(4 << 20));
        let root = MemlockStatus::from_proc(LIMITS, Some("CapEff:\t000001fffeffffff\n")).unwrap();
        assert_eq!(root.cap_ipc_lock, Some(true));
        assert!(root.can_lock(u64::MAX));
        let unl = MemlockStatus::from_proc(
            "Max locked memory         unlimited            unlimited            bytes\n",
            None,
        )
        .unwrap();
        assert!(unl.unlimited && unl.can_lock(u64::MAX) && unl.cap_ipc_lock.is_none());
        assert_eq!(MemlockStatus::from_proc("garbage", None), None);
        assert_eq!(
            MemlockStatus::from_proc("Max locked memory  lots  lots bytes", None),
            None
        );
    }

    #[test]
    fn current_matches_proc() {
        let cur = MemlockStatus::current().unwrap();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert_eq!(
            MemlockStatus::from_proc(&limits, Some(&status)).unwrap(),
            cur
        );
        // check() agrees with can_lock() for a tiny request.
        assert_eq!(check(4096).is_ok(), cur.can_lock(4096));
        assert_eq!(soft_limit(), cur.soft_bytes);
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
