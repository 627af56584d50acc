//! The restore journal: before an agent changes anything it writes every
//! previous value here (write, fsync, rename, fsync of the directory), so
//! that the values can be put back at the end of the cell, on
//! SIGINT/SIGTERM, and after SIGKILL or a crash when the agent starts again
//! or `fabperf tune restore` runs.
//!
//! One journal per network namespace (`tune/netns-<inode>.journal` under
//! the state directory): sysctls and interfaces belong to a namespace, and
//! every agent of a namespace shares them. A lock file next to it (flock,
//! released by the kernel when its holder dies) tells a live holder from
//! one that died.
//!
//! A journal is untrusted when read back: it must be a regular file owned
//! by this user and writable by nobody else, at most 1 MiB, exactly this
//! format, and every name and value in it passes the same checks as a
//! profile's.

use crate::profile::{check_sysctl_name, parse_cpu_list};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Largest journal read back.
pub const MAX_JOURNAL_BYTES: u64 = 1 << 20;
pub const JOURNAL_VERSION: u32 = 1;

/// One saved setting: how to put it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Saved {
    Sysctl {
        name: String,
        previous: String,
    },
    Features {
        ifindex: u32,
        ifname: String,
        previous: BTreeMap<String, bool>,
    },
    Rings {
        ifindex: u32,
        ifname: String,
        rx: Option<u32>,
        tx: Option<u32>,
    },
    Channels {
        ifindex: u32,
        ifname: String,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    },
    Coalesce {
        ifindex: u32,
        ifname: String,
        previous: BTreeMap<String, u32>,
    },
    Mtu {
        ifindex: u32,
        ifname: String,
        previous: u32,
    },
    Irq {
        irq: u32,
        previous: String,
    },
    /// fabperf's nftables table was created: restore removes it.
    PolicyTable {
        table: String,
    },
}

impl Saved {
    /// What it is, for reports.
    pub fn label(&self) -> String {
        match self {
            Saved::Sysctl { name, .. } => name.clone(),
            Saved::Features {
                ifname, previous, ..
            } => format!(
                "{ifname} features {}",
                previous.keys().cloned().collect::<Vec<_>>().join(",")
            ),
            Saved::Rings { ifname, .. } => format!("{ifname} rings"),
            Saved::Channels { ifname, .. } => format!("{ifname} channels"),
            Saved::Coalesce { ifname, .. } => format!("{ifname} coalescing"),
            Saved::Mtu { ifname, .. } => format!("{ifname} MTU"),
            Saved::Irq { irq, .. } => format!("IRQ {irq} affinity"),
            Saved::PolicyTable { table } => format!("nftables table inet {table}"),
        }
    }

    fn check(&self) -> Result<(), String> {
        let ifname_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 15
                && n != "."
                && n != ".."
                && n.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
        };
        match self {
            Saved::Sysctl { name, previous } => {
                check_sysctl_name(name)?;
                if !sysctl_value_ok(previous) {
                    return Err(format!("saved value of {name} is not a sysctl value"));
                }
            }
            Saved::Features {
                ifname, previous, ..
            } => {
                if !ifname_ok(ifname) {
                    return Err("bad interface name".into());
                }
                if previous.len() > 256
                    || previous.keys().any(|k| {
                        k.is_empty()
                            || k.len() > 64
                            || !k
                                .bytes()
                                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    })
                {
                    return Err("bad feature names".into());
                }
            }
            Saved::Rings { ifname, .. }
            | Saved::Channels { ifname, .. }
            | Saved::Mtu { ifname, .. } => {
                if !ifname_ok(ifname) {
                    return Err("bad interface name".into());
                }
            }
            Saved::Coalesce {
                ifname, previous, ..
            } => {
                if !ifname_ok(ifname)
                    || previous
                        .keys()
                        .any(|k| !crate::ethtool::COALESCE_PARAMS.iter().any(|c| c.0 == k))
                {
                    return Err("bad coalescing entry".into());
                }
            }
            Saved::Irq { previous, .. } => {
                parse_cpu_list(previous)?;
            }
            Saved::PolicyTable { table } => {
                if table != crate::policy::TABLE {
                    return Err(format!("table {table:?} is not fabperf's"));
                }
            }
        }
        Ok(())
    }
}

/// A value a net sysctl can hold, as [`crate::sysctl::read`] returns it
/// (fields separated by one space): empty (`ip_local_reserved_ports`),
/// numbers, words, CPU bitmaps with commas (`rps_default_mask`), ranges
/// and lists (`1-3,8`), addresses and keys with `:` and `-`. The one check
/// of a saved value: applied when the journal is written and when it is
/// read back, so every value that can be saved can be restored.
pub fn sysctl_value_ok(s: &str) -> bool {
    s.len() <= 4096
        && (s.is_empty()
            || s.split(' ').all(|f| {
                !f.is_empty()
                    && f.len() <= 256
                    && f.bytes().all(|b| {
                        b.is_ascii_alphanumeric()
                            || matches!(b, b'_' | b'-' | b'.' | b':' | b',' | b'/' | b'+')
                    })
            }))
}

/// Why a journal's settings are gone with what held them: the machine
/// rebooted since it was written, or its network namespace no longer exists
/// (the journal names another). The same check for the agent's start-up
/// recovery, for `apply` and for `fabperf tune restore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    EarlierBoot,
    OtherNetns,
}

impl Gone {
    /// The tag in the name the journal is set aside under.
    pub fn tag(self) -> &'static str {
        match self {
            Gone::EarlierBoot => "earlier-boot",
            Gone::OtherNetns => "gone-netns",
        }
    }

    /// What it means, for a log line.
    pub fn describe(self, j: &Journal) -> String {
        match self {
            Gone::EarlierBoot => format!(
                "journal of an earlier boot ({} setting(s) by pid {}): a reboot resets them, nothing to restore",
                j.entries.len(),
                j.pid
            ),
            Gone::OtherNetns => format!(
                "journal of a network namespace that no longer exists ({} setting(s) by pid {}): its settings went with it",
                j.entries.len(),
                j.pid
            ),
        }
    }
}

/// Whether `j` belongs to this boot and this network namespace (`None`)
/// or to something that is gone.
pub fn gone(j: &Journal) -> Option<Gone> {
    let boot = boot_id();
    if !j.boot_id.is_empty() && !boot.is_empty() && j.boot_id != boot {
        return Some(Gone::EarlierBoot);
    }
    let (ino, cookie) = netns_identity();
    if j.netns != ino || (j.netns_cookie.is_some() && cookie.is_some() && j.netns_cookie != cookie)
    {
        return Some(Gone::OtherNetns);
    }
    None
}

/// The journal file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    pub version: u32,
    /// The network namespace's inode and, where the kernel has it, its
    /// cookie (never reused while the machine runs).
    pub netns: u64,
    pub netns_cookie: Option<u64>,
    /// /proc/sys/kernel/random/boot_id when written.
    pub boot_id: String,
    pub pid: u32,
    pub created_at: String,
    /// What was applied (a profile's name, the policy count).
    pub what: String,
    pub entries: Vec<Saved>,
}

impl Journal {
    pub fn check(&self) -> Result<(), String> {
        if self.version != JOURNAL_VERSION {
            return Err(format!(
                "journal version {} (this fabperf reads {JOURNAL_VERSION})",
                self.version
            ));
        }
        if self.boot_id.len() > 64
            || !self
                .boot_id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            return Err("bad boot id".into());
        }
        if self.what.len() > 200 || self.what.chars().any(char::is_control) {
            return Err("bad description".into());
        }
        if self.created_at.len() > 64 {
            return Err("bad time".into());
        }
        if self.entries.len() > 10_000 {
            return Err(format!("{} entries", self.entries.len()));
        }
        for (i, e) in self.entries.iter().enumerate() {
            e.check().map_err(|m| format!("entry {}: {m}", i + 1))?;
        }
        Ok(())
    }
}

/// Why a journal cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalError {
    /// Not a regular file (a symlink, FIFO, directory, device).
    NotRegular(String),
    /// Owned by someone else or writable by others.
    Unsafe(String),
    /// Unreadable, too big, not this format, or failing the checks.
    Corrupt(String),
    /// The file system refused.
    Io(String),
}

impl std::fmt::Display for JournalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalError::NotRegular(s)
            | JournalError::Unsafe(s)
            | JournalError::Corrupt(s)
            | JournalError::Io(s) => f.write_str(s),
        }
    }
}

/// This process's network namespace: (inode, cookie).
pub fn netns_identity() -> (u64, Option<u64>) {
    let ino = std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0);
    (ino, netns_cookie())
}

fn netns_cookie() -> Option<u64> {
    const SO_NETNS_COOKIE: libc::c_int = 71;
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))
        .ok()?;
    use std::os::fd::AsRawFd;
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: a valid socket, a u64 buffer and its length.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            &mut v as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0 && len as usize == std::mem::size_of::<u64>()).then_some(v)
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The default state directory: /var/lib/fabperf for root, else
/// $XDG_STATE_HOME/fabperf (or ~/.local/state/fabperf).
pub fn default_state_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/fabperf");
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("fabperf");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/state/fabperf"),
        None => PathBuf::from("/tmp/fabperf-state"),
    }
}

/// Where one namespace's journal and lock live.
#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
    pub journal: PathBuf,
    pub lock: PathBuf,
}

impl Paths {
    pub fn for_netns(state_dir: &Path, netns: u64) -> Paths {
        let dir = state_dir.join("tune");
        Paths {
            journal: dir.join(format!("netns-{netns}.journal")),
            lock: dir.join(format!("netns-{netns}.lock")),
            dir,
        }
    }
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Check (and with `create`, make) the journal directory: a directory, not
/// a link, ours, writable by nobody else.
pub fn check_dir(dir: &Path, create: bool) -> Result<bool, JournalError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Ok(false);
            }
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    JournalError::Io(format!(
                        "cannot create the state directory {}: {} (agent option --state-dir)",
                        dir.display(),
                        crate::os_text(&e)
                    ))
                })?;
            check_dir(dir, false)
        }
        Err(e) => Err(JournalError::Io(format!(
            "{}: {}",
            dir.display(),
            crate::os_text(&e)
        ))),
        Ok(m) => {
            if !m.is_dir() {
                return Err(JournalError::NotRegular(format!(
                    "{} is not a directory (a link or a file); the journal needs a directory of its own (agent option --state-dir)",
                    dir.display()
                )));
            }
            if m.uid() != euid() || m.mode() & 0o022 != 0 {
                return Err(JournalError::Unsafe(format!(
                    "{} is owned by uid {} with mode {:o}: a journal directory must be this user's and writable by nobody else (chmod 700, or another --state-dir)",
                    dir.display(),
                    m.uid(),
                    m.mode() & 0o7777
                )));
            }
            Ok(true)
        }
    }
}

fn fsync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| JournalError::Io(format!("fsync {}: {}", dir.display(), crate::os_text(&e))))
}

/// Write the journal durably: a temporary file, fsync, rename, fsync of the
/// directory.
pub fn write(paths: &Paths, j: &Journal) -> Result<(), JournalError> {
    // What could not be read back is not written: nothing is changed on
    // the strength of a journal that cannot restore it.
    j.check().map_err(|e| {
        JournalError::Corrupt(format!(
            "the journal cannot hold these settings ({e}); nothing was changed"
        ))
    })?;
    check_dir(&paths.dir, true)?;
    let tmp = paths.dir.join(format!(
        ".{}.tmp",
        paths
            .journal
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("journal")
    ));
    let _ = std::fs::remove_file(&tmp);
    let text = serde_json::to_vec_pretty(j)
        .map_err(|e| JournalError::Io(format!("encoding the journal: {e}")))?;
    let io = |e: std::io::Error| {
        JournalError::Io(format!(
            "writing the journal {}: {}",
            paths.journal.display(),
            crate::os_text(&e)
        ))
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(&text).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, &paths.journal).map_err(io)?;
    fsync_dir(&paths.dir)
}

/// Remove the journal (durably).
pub fn remove(paths: &Paths) -> Result<(), JournalError> {
    match std::fs::remove_file(&paths.journal) {
        Ok(()) => fsync_dir(&paths.dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(JournalError::Io(format!(
            "removing {}: {}",
            paths.journal.display(),
            crate::os_text(&e)
        ))),
    }
}

/// Move a journal that cannot be used aside (kept for the operator), under
/// a name that says why.
pub fn set_aside(paths: &Paths, why: &str) -> Result<PathBuf, JournalError> {
    let base = format!(
        "{}.{why}-{}",
        paths
            .journal
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("journal"),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    );
    let io = |e: std::io::Error| {
        JournalError::Io(format!(
            "moving {} aside: {}",
            paths.journal.display(),
            crate::os_text(&e)
        ))
    };
    // A new name each time (a second set-aside in the same second gets
    // `-2`, ...): a hard link fails rather than replace an existing file.
    for n in 1..=1000u32 {
        let to = paths.dir.join(if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        match std::fs::hard_link(&paths.journal, &to) {
            Ok(()) => {
                std::fs::remove_file(&paths.journal).map_err(io)?;
                fsync_dir(&paths.dir)?;
                return Ok(to);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            // A directory cannot be linked: renamed onto a name not taken.
            Err(_) if std::fs::symlink_metadata(&to).is_err() => {
                std::fs::rename(&paths.journal, &to).map_err(io)?;
                fsync_dir(&paths.dir)?;
                return Ok(to);
            }
            Err(e) => return Err(io(e)),
        }
    }
    Err(JournalError::Io(format!(
        "moving {} aside: 1000 journals of this second are already kept there; remove old ones",
        paths.journal.display()
    )))
}

/// Read a journal back. `Ok(None)` when there is none.
pub fn read(paths: &Paths) -> Result<Option<Journal>, JournalError> {
    let shown = paths.journal.display().to_string();
    let m = match std::fs::symlink_metadata(&paths.journal) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(JournalError::Io(format!("{shown}: {}", crate::os_text(&e)))),
        Ok(m) => m,
    };
    if !m.file_type().is_file() {
        return Err(JournalError::NotRegular(format!(
            "the journal {shown} is not a regular file (a link, FIFO, directory or device); it was not read and nothing was restored: remove it after checking what put it there"
        )));
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&paths.journal)
        .map_err(|e| JournalError::Io(format!("{shown}: {}", crate::os_text(&e))))?;
    let fm = f
        .metadata()
        .map_err(|e| JournalError::Io(format!("{shown}: {}", crate::os_text(&e))))?;
    if !fm.is_file() || fm.ino() != m.ino() {
        return Err(JournalError::NotRegular(format!(
            "the journal {shown} changed while it was opened; nothing was restored"
        )));
    }
    if fm.uid() != euid() || fm.permissions().mode() & 0o077 != 0 {
        return Err(JournalError::Unsafe(format!(
            "the journal {shown} is owned by uid {} with mode {:o}: only a journal this user wrote (mode 600) is trusted; nothing was restored",
            fm.uid(),
            fm.permissions().mode() & 0o7777
        )));
    }
    if fm.len() > MAX_JOURNAL_BYTES {
        return Err(JournalError::Corrupt(format!(
            "the journal {shown} is {} bytes, more than a journal can be ({MAX_JOURNAL_BYTES})",
            fm.len()
        )));
    }
    let mut buf = Vec::new();
    (&mut f)
        .take(MAX_JOURNAL_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| JournalError::Io(format!("{shown}: {}", crate::os_text(&e))))?;
    let j: Journal = serde_json::from_slice(&buf)
        .map_err(|e| JournalError::Corrupt(format!("the journal {shown} is corrupt ({e})")))?;
    j.check()
        .map_err(|e| JournalError::Corrupt(format!("the journal {shown} is corrupt ({e})")))?;
    Ok(Some(j))
}

/// The namespace's lock, held while settings are changed.
pub struct Lock {
    _file: File,
}

/// Take the namespace's lock without waiting. `Ok(None)` when a live
/// process holds it.
pub fn try_lock(paths: &Paths) -> Result<Option<Lock>, JournalError> {
    check_dir(&paths.dir, true)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&paths.lock)
        .map_err(|e| {
            JournalError::Io(format!(
                "opening the lock {}: {}",
                paths.lock.display(),
                crate::os_text(&e)
            ))
        })?;
    let m = f
        .metadata()
        .map_err(|e| JournalError::Io(crate::os_text(&e)))?;
    if !m.is_file() {
        return Err(JournalError::NotRegular(format!(
            "the lock {} is not a regular file",
            paths.lock.display()
        )));
    }
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(Lock { _file: f })),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(JournalError::Io(format!(
            "locking {}: {e}",
            paths.lock.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            netns: 42,
            netns_cookie: Some(7),
            boot_id: "0a1b-2c".into(),
            pid: 1,
            created_at: "2026-12-01T00:00:00Z".into(),
            what: "profile x".into(),
            entries: vec![
                Saved::Sysctl {
                    name: "net.ipv4.tcp_rmem".into(),
                    previous: "4096 131072 6291456".into(),
                },
                Saved::Features {
                    ifindex: 2,
                    ifname: "fab0".into(),
                    previous: [("rx-gro".to_string(), false)].into(),
                },
                Saved::Mtu {
                    ifindex: 2,
                    ifname: "fab0".into(),
                    previous: 9000,
                },
                Saved::PolicyTable {
                    table: crate::policy::TABLE.into(),
                },
            ],
        }
    }

    #[test]
    fn a_journal_round_trips_durably() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 42);
        assert_eq!(read(&p).unwrap(), None);
        write(&p, &sample()).unwrap();
        assert_eq!(read(&p).unwrap(), Some(sample()));
        let mode = std::fs::metadata(&p.journal).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        remove(&p).unwrap();
        assert_eq!(read(&p).unwrap(), None);
        remove(&p).unwrap();
    }

    #[test]
    fn corrupt_and_hostile_journals_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 42);
        check_dir(&p.dir, true).unwrap();
        let put = |bytes: &[u8]| {
            let _ = std::fs::remove_file(&p.journal);
            std::fs::write(&p.journal, bytes).unwrap();
            std::fs::set_permissions(&p.journal, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        for (bytes, want) in [
            (&b"{not json"[..], "corrupt"),
            (b"", "corrupt"),
            (b"{}", "corrupt"),
            (b"\xff\xfe", "corrupt"),
        ] {
            put(bytes);
            let e = read(&p).unwrap_err();
            assert!(matches!(e, JournalError::Corrupt(_)), "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
        // Entries that would reach outside net.*, or write odd values.
        for (mutate, want) in [
            (
                Box::new(|j: &mut Journal| {
                    j.entries.push(Saved::Sysctl {
                        name: "kernel.core_pattern".into(),
                        previous: "x".into(),
                    })
                }) as Box<dyn Fn(&mut Journal)>,
                "only net.*",
            ),
            (
                Box::new(|j: &mut Journal| {
                    j.entries.push(Saved::Sysctl {
                        name: "net.core.x".into(),
                        previous: "|/bin/sh -c evil".into(),
                    })
                }),
                "not a sysctl value",
            ),
            (
                Box::new(|j: &mut Journal| {
                    j.entries.push(Saved::PolicyTable {
                        table: "filter".into(),
                    })
                }),
                "not fabperf's",
            ),
            (
                Box::new(|j: &mut Journal| {
                    j.entries.push(Saved::Mtu {
                        ifindex: 1,
                        ifname: "../../x".into(),
                        previous: 1500,
                    })
                }),
                "interface",
            ),
            (Box::new(|j: &mut Journal| j.version = 9), "version"),
        ] {
            let mut j = sample();
            mutate(&mut j);
            put(&serde_json::to_vec(&j).unwrap());
            let e = read(&p).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        // Unknown fields.
        let mut v = serde_json::to_value(sample()).unwrap();
        v["run"] = serde_json::json!("rm -rf /");
        put(&serde_json::to_vec(&v).unwrap());
        assert!(matches!(read(&p).unwrap_err(), JournalError::Corrupt(_)));
        // Too big.
        put(&vec![b' '; (MAX_JOURNAL_BYTES + 10) as usize]);
        assert!(read(&p).unwrap_err().to_string().contains("more than"));
        // World-writable.
        put(&serde_json::to_vec(&sample()).unwrap());
        std::fs::set_permissions(&p.journal, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(read(&p).unwrap_err(), JournalError::Unsafe(_)));
    }

    #[test]
    fn a_journal_that_is_not_a_regular_file_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 42);
        check_dir(&p.dir, true).unwrap();
        // A symlink to a good journal elsewhere.
        let other = d.path().join("elsewhere.json");
        std::fs::write(&other, serde_json::to_vec(&sample()).unwrap()).unwrap();
        std::os::unix::fs::symlink(&other, &p.journal).unwrap();
        assert!(matches!(read(&p).unwrap_err(), JournalError::NotRegular(_)));
        std::fs::remove_file(&p.journal).unwrap();
        // A directory, and a FIFO (never opened: it would block).
        std::fs::create_dir(&p.journal).unwrap();
        assert!(matches!(read(&p).unwrap_err(), JournalError::NotRegular(_)));
        std::fs::remove_dir(&p.journal).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p.journal,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(read(&p).unwrap_err(), JournalError::NotRegular(_)));
        // Writing over a planted link is refused, not followed.
        std::fs::remove_file(&p.journal).unwrap();
        let tmp = p.dir.join(".netns-42.journal.tmp");
        std::os::unix::fs::symlink(&other, &tmp).unwrap();
        write(&p, &sample()).unwrap();
        assert_eq!(
            std::fs::read(&other).unwrap(),
            serde_json::to_vec(&sample()).unwrap(),
            "the link's target is untouched"
        );
    }

    #[test]
    fn every_value_that_can_be_saved_can_be_read_back() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 42);
        let mut j = sample();
        // What net sysctls hold: empty (ip_local_reserved_ports), CPU
        // bitmaps with commas (rps_default_mask), lists and ranges.
        for v in [
            "",
            "00000000,00000003",
            "40000-40010,40020",
            "4096 131072 6291456",
            "fq_codel",
        ] {
            j.entries = vec![Saved::Sysctl {
                name: "net.ipv4.ip_local_reserved_ports".into(),
                previous: v.into(),
            }];
            write(&p, &j).unwrap();
            // As after a SIGKILL: a new reader of the durable file.
            assert_eq!(read(&p).unwrap(), Some(j.clone()), "{v:?}");
        }
        // What the reader would refuse is not written at all.
        j.entries = vec![Saved::Sysctl {
            name: "net.core.x".into(),
            previous: "a\nb".into(),
        }];
        assert!(matches!(write(&p, &j), Err(JournalError::Corrupt(_))));
        assert!(read(&p).unwrap().is_some(), "the previous journal stays");
    }

    #[test]
    fn journals_set_aside_in_one_second_are_all_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 42);
        let mut kept = Vec::new();
        for _ in 0..3 {
            write(&p, &sample()).unwrap();
            kept.push(set_aside(&p, "discarded").unwrap());
        }
        kept.sort();
        kept.dedup();
        assert_eq!(kept.len(), 3, "{kept:?}");
        for k in &kept {
            assert!(k.exists(), "{k:?}");
        }
    }

    #[test]
    fn a_journal_readable_by_others_is_refused_as_the_message_says() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 42);
        write(&p, &sample()).unwrap();
        std::fs::set_permissions(&p.journal, std::fs::Permissions::from_mode(0o644)).unwrap();
        match read(&p) {
            Err(JournalError::Unsafe(m)) => {
                assert!(m.contains("mode 600") && m.contains("644"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unsafe_state_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            check_dir(&open, true).unwrap_err(),
            JournalError::Unsafe(_)
        ));
        let file = d.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            check_dir(&file, true).unwrap_err(),
            JournalError::NotRegular(_)
        ));
        assert!(!check_dir(&d.path().join("absent"), false).unwrap());
    }

    #[test]
    fn the_lock_is_exclusive_and_dies_with_its_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::for_netns(d.path(), 1);
        let held = try_lock(&p).unwrap().unwrap();
        assert!(try_lock(&p).unwrap().is_none());
        drop(held);
        assert!(try_lock(&p).unwrap().is_some());
    }
}
