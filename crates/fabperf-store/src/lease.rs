//! The runner's lease on a store: one `fabperf run` writes into a store at a
//! time.
//!
//! The lease is an exclusive `flock(2)` on a file beside the store
//! (`<store>.lease`). The kernel drops the lock when its holder exits in any
//! way — SIGKILL, a crash, an evicted pod — so a lease never outlives its
//! process and needs no expiry. The holder writes who it is into the file
//! (pid, host, start time, what it runs), so a runner that is refused can say
//! who holds it. The file is left in place when the lease ends: removing it
//! would let a waiting runner lock a file that is no longer the lease.
//!
//! Any process that writes runs takes the same lease the same way: the
//! command line, or a runner inside a cluster with the store on a shared
//! volume (NFS and most CSI file volumes carry `flock` as a POSIX lock to the
//! server).

use crate::StoreError;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most of a lease file that is read (a holder's description is a few
/// hundred bytes; anything longer is not one).
const MAX_HOLDER_BYTES: u64 = 4096;

/// Who holds a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseHolder {
    pub pid: u32,
    pub host: String,
    /// RFC 3339, when the lease was taken.
    pub started_at: String,
    /// What the holder does, e.g. `fabperf run plan.toml (run 3)`.
    pub what: String,
}

impl LeaseHolder {
    /// This process, now, doing `what`.
    pub fn this_process(what: impl Into<String>) -> LeaseHolder {
        LeaseHolder {
            pid: std::process::id(),
            host: hostname(),
            started_at: fabperf_results::now_rfc3339(),
            what: what.into(),
        }
    }

    /// "fabperf run plan.toml (run 3), pid 1234 on host node1, since …",
    /// with control characters shown escaped (the file is anyone's to write).
    pub fn describe(&self) -> String {
        format!(
            "{}, pid {} on host {}, since {}",
            printable(&self.what),
            self.pid,
            printable(&self.host),
            printable(&self.started_at)
        )
    }
}

/// The host's name (the pod's name in a Kubernetes pod).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Text from the lease file (anyone's to write) as shown in a message:
/// the shared terminal escaping, cut to 200 characters.
fn printable(s: &str) -> String {
    fabperf_results::escape::terminal_cut(s, 200)
}

/// A held lease; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct Lease {
    file: File,
    path: PathBuf,
}

impl Lease {
    /// The lease file of the store at `db`.
    pub fn path_for(db: &Path) -> PathBuf {
        let mut p = db.as_os_str().to_owned();
        p.push(".lease");
        PathBuf::from(p)
    }

    /// Take the lease of the store at `db` for `holder`. When another
    /// process holds it, ask again every 200 ms for up to `wait`, then give
    /// up with [`StoreError::Leased`] naming the holder.
    pub fn acquire(db: &Path, holder: &LeaseHolder, wait: Duration) -> Result<Lease, StoreError> {
        let path = Self::path_for(db);
        let io = |what: &str, e: std::io::Error| StoreError::Open {
            path: path.clone(),
            msg: format!("{what} the store's lease file: {e}"),
        };
        if let Ok(m) = std::fs::symlink_metadata(&path) {
            if !m.file_type().is_file() {
                return Err(StoreError::Open {
                    path: path.clone(),
                    msg: "the store's lease file is not a regular file; remove it".into(),
                });
            }
        }
        // Not truncated on open: the holder's description stays readable
        // until the lock is ours.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io("opening", e))?;
        let t0 = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if t0.elapsed() >= wait {
                        return Err(StoreError::Leased {
                            path: db.to_path_buf(),
                            holder: Self::holder_text(&path),
                            waited: if wait.is_zero() {
                                String::new()
                            } else {
                                format!("; waited {:.1} s", wait.as_secs_f64())
                            },
                        });
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io("locking", e)),
            }
        }
        let mut lease = Lease { file, path };
        lease.update(holder)?;
        Ok(lease)
    }

    /// Rewrite the holder's description (e.g. once the run is known).
    pub fn update(&mut self, holder: &LeaseHolder) -> Result<(), StoreError> {
        let text = serde_json::to_string(holder).unwrap_or_default() + "\n";
        let r = (|| {
            self.file.set_len(0)?;
            self.file.seek(SeekFrom::Start(0))?;
            self.file.write_all(text.as_bytes())?;
            self.file.flush()
        })();
        r.map_err(|e| StoreError::Open {
            path: self.path.clone(),
            msg: format!("writing the store's lease file: {e}"),
        })
    }

    /// Who holds (or last held) the lease of the store at `db`, as written
    /// in its lease file; `None` when there is none or it is unreadable.
    pub fn holder(db: &Path) -> Option<LeaseHolder> {
        read_holder(&Self::path_for(db))
    }

    fn holder_text(path: &Path) -> String {
        match read_holder(path) {
            Some(h) => h.describe(),
            None => format!(
                "a process that has not (yet) written who it is into {}",
                printable(&path.display().to_string())
            ),
        }
    }
}

fn read_holder(path: &Path) -> Option<LeaseHolder> {
    let f = File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(MAX_HOLDER_BYTES).read_to_end(&mut buf).ok()?;
    serde_json::from_slice(buf.trim_ascii()).ok()
}
