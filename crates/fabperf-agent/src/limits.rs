//! The agent's caps: connections and handshakes in flight, the tests of one
//! group, and what the open-file and thread limits leave for them.

use super::*;

/// Most connection threads at once; a connection beyond it is closed.
/// (Handshakes are capped far lower by [`MAX_PENDING`]: beyond them only
/// the authenticated tests of one group run at once, at most
/// [`MAX_GROUP_TESTS`].)
pub const MAX_CONNECTIONS: usize = MAX_GROUP_TESTS + 2 * MAX_PENDING;

/// Most connections in their handshake (not yet authenticated and
/// started) at once. At the cap, the oldest is closed to make room for the
/// new one, so a flood of stalled connections cannot lock clients out.
pub const MAX_PENDING: usize = 128;

/// Most handshakes at once from one source address (IPv4 address, or IPv6
/// /64 prefix); beyond it, that source's oldest is closed.
pub const MAX_PENDING_PER_SOURCE: usize = 16;

/// Most connections that have not yet sent their first four bytes (which
/// say what they are). They wait on the event loop, not on a thread, so
/// the cap is high: an HTTP load opens thousands of connections at once
/// from one host. At the cap the oldest is closed.
pub const MAX_UNSORTED: usize = 8192;

/// Most such connections from one source (its oldest is closed beyond).
pub const MAX_UNSORTED_PER_SOURCE: usize = 4096;

/// Open files kept for fabperf tests, logs and the agent itself when the
/// caps above and the HTTP connection limit are sized to the open-file
/// limit.
pub const FD_RESERVE: u64 = 512;

/// Listen backlog asked for (the kernel caps it at net.core.somaxconn).
pub const LISTEN_BACKLOG: i32 = 4096;

/// Most tests of one group running at once (an incast's senders): the
/// incast of a 1025-node cluster. Lower when the agent's open files or
/// threads cannot hold that many ([`capacity`]); the agent announces what
/// it admits in its hello.
pub const MAX_GROUP_TESTS: usize = 1024;

/// Open files (and threads) one test of a group needs at least: its
/// control connection and one data connection, a thread each.
pub const PER_GROUP_TEST: u64 = 2;

/// Threads kept for handshakes, the event loop and the agent itself.
pub const THREAD_RESERVE: u64 = MAX_PENDING as u64 + 64;

/// What the agent can give the tests of one group: the open files left
/// beside the caps on new connections (`nofile`: the open-file limit,
/// `held`: what those caps may take), the threads left (`threads`: how
/// many more this process may start, `None`: no limit found), and from
/// them how many tests (each at least [`PER_GROUP_TEST`] of both).
pub fn capacity(nofile: u64, held: u64, threads: Option<u64>) -> AgentCapacity {
    let fds = nofile
        .saturating_sub(held)
        .saturating_sub(FD_RESERVE / 2)
        .max(FD_RESERVE / 2);
    let threads = threads.unwrap_or(u64::MAX).saturating_sub(THREAD_RESERVE);
    let tests = (fds.min(threads) / PER_GROUP_TEST).min(MAX_GROUP_TESTS as u64) as u32;
    AgentCapacity {
        group_tests: tests.max(1),
        group_fds: fds,
        group_threads: threads.min(1 << 32),
    }
}

/// How many more threads this process may start: the smallest of the
/// kernel's `threads-max` and `pid_max` less the threads running now, and
/// its cgroup's `pids.max` less `pids.current` (`None`: no limit found).
pub fn thread_headroom() -> Option<u64> {
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    // /proc/loadavg's fourth field: running/total scheduling entities.
    let running: Option<u64> = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok());
    let mut best: Option<u64> = None;
    let mut take = |v: Option<u64>| {
        if let Some(v) = v {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
    };
    for k in ["/proc/sys/kernel/threads-max", "/proc/sys/kernel/pid_max"] {
        take(read(k).zip(running).map(|(m, r)| m.saturating_sub(r)));
    }
    // This process's cgroup: "0::/path" (v2) or "N:pids:/path" (v1).
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for l in cgroups.lines() {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        let dir = match ctrl {
            "" => format!("/sys/fs/cgroup{}", path.trim_end_matches('/')),
            c if c.split(',').any(|c| c == "pids") => {
                format!("/sys/fs/cgroup/pids{}", path.trim_end_matches('/'))
            }
            _ => continue,
        };
        let max = read(&format!("{dir}/pids.max"));
        let cur = read(&format!("{dir}/pids.current"));
        take(max.zip(cur).map(|(m, c)| m.saturating_sub(c)));
    }
    best
}

/// The soft open-file limit (1024 when it cannot be read).
pub(super) fn open_file_limit() -> u64 {
    fabperf_http::rlimit::nofile().map_or(1024, |(soft, _)| soft)
}

/// Caps sized to the open-file limit `nofile`: the unsorted connections'
/// (total, per source) and the HTTP connections', and a note when a cap is
/// lower than asked.
pub(super) fn fd_caps(
    nofile: u64,
    http: Option<usize>,
) -> (usize, usize, Option<usize>, Option<String>) {
    let budget = nofile.saturating_sub(FD_RESERVE).max(64) as usize;
    let http_share = http.map_or(0, |h| h.min(budget / 2));
    let unsorted = MAX_UNSORTED.min(budget - http_share).max(32);
    let per_source = MAX_UNSORTED_PER_SOURCE.min(unsorted / 2).max(16);
    let http_cap = http.map(|h| h.min(budget - unsorted.min(budget - http_share)).max(1));
    // Without HTTP, a few hundred silent connections are plenty: no note.
    let low = http
        .zip(http_cap)
        .is_some_and(|(h, c)| c < h || unsorted < MAX_UNSORTED);
    let note = low.then(|| {
        format!(
            "the open-file limit of {nofile} holds at most {unsorted} new connections{}; \
             raise it (LimitNOFILE=, ulimit -n) for more",
            http_cap.map_or(String::new(), |c| format!(" and {c} HTTP connections"))
        )
    });
    (unsorted, per_source, http_cap, note)
}
