//! Reading the host through a root prefix.
//!
//! Every sysfs/procfs read of the detector goes through [`Root`]: the live host is the root `/`,
//! a snapshot (a capture or a hand-written fixture) is any directory with the same layout. Symlinks
//! are resolved *inside* the root (an absolute target is taken relative to the root, `..` stops at
//! the root), so a snapshot can never make the detector read the real host. The resolved path is
//! then opened component by component with `O_NOFOLLOW` (a symlink swapped in after resolution
//! fails the open instead of being followed), the last one with `O_NONBLOCK` so that a FIFO cannot
//! block, and `fstat` must say regular file (or directory, for listings) before a byte is read.
//! Reads are capped ([`MAX_ATTR_BYTES`] for sysfs/procfs attributes, [`MAX_JSON_BYTES`] for the
//! snapshot's JSON files). Inputs that exist but cannot be read (permission denied, not a regular
//! file, too large, a symlink loop) are remembered as [`Problem`]s, so the inventory can say that
//! it is incomplete instead of reporting an absence. A `Root` can also record what it read, which
//! is how `--capture` copies exactly the files the detector uses.

use rustix::fs::{fstat, openat, readlinkat, statat, AtFlags, Dir, FileType, Mode, OFlags, CWD};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Maximum number of symlinks followed while resolving one path (the kernel uses 40).
const MAX_LINK_HOPS: usize = 40;

/// Largest sysfs/procfs attribute read (the kernel's are at most a page; `/proc/self/status`
/// and `limits` a few KiB).
pub const MAX_ATTR_BYTES: u64 = 64 * 1024;

/// Largest JSON input of a snapshot (`ip-addr.json`, `ip-route.json`, `fabperf-tc.json`) and of
/// a `detect --json` file: thousands of interfaces fit in a few MiB.
pub const MAX_JSON_BYTES: u64 = 16 * 1024 * 1024;

/// Most entries listed from one directory.
const MAX_DIR_ENTRIES: usize = 65_536;

/// Why an input could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Absent: an unknown value, not a problem.
    #[error("no such file or directory")]
    NotFound,
    #[error("permission denied")]
    Denied,
    #[error("not a regular file ({0}); refused")]
    NotRegular(&'static str),
    #[error("not a directory ({0})")]
    NotDirectory(&'static str),
    #[error("larger than the {0}-byte limit; refused")]
    TooBig(u64),
    #[error("too many levels of symbolic links")]
    Loop,
    /// Any other read error (sysfs answers EINVAL/EIO for values it does not have): unknown.
    #[error("{0}")]
    Other(String),
}

impl ReadError {
    fn from_io(e: &std::io::Error) -> ReadError {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => ReadError::NotFound,
            K::PermissionDenied => ReadError::Denied,
            _ if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                ReadError::Loop
            }
            _ if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
                ReadError::NotFound
            }
            _ => ReadError::Other(e.to_string()),
        }
    }

    fn from_errno(e: rustix::io::Errno) -> ReadError {
        Self::from_io(&std::io::Error::from(e))
    }

    /// True for errors that mean "the input exists but the inventory cannot see it".
    pub fn is_problem(&self) -> bool {
        !matches!(self, ReadError::NotFound | ReadError::Other(_))
    }
}

fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "unknown file type",
    }
}

/// An input that exists but could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Host path (`/sys/class/infiniband`), as the detector asked for it.
    pub host_path: String,
    /// True when a directory listing failed (a whole part of the inventory is missing).
    pub directory: bool,
    pub error: ReadError,
}

/// What a recording [`Root`] saw: the inputs a capture must reproduce.
#[derive(Debug, Default, Clone)]
pub struct Recording {
    /// Host paths of files read, with the bytes read.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Host paths of directories listed or resolved (they must exist in a capture).
    pub dirs: BTreeSet<String>,
}

/// A filesystem root the detector reads from.
#[derive(Debug)]
pub struct Root {
    base: PathBuf,
    recorder: Option<Mutex<Recording>>,
    problems: Mutex<BTreeMap<String, Problem>>,
}

impl Root {
    fn new(base: PathBuf, record: bool) -> Root {
        Root {
            base,
            recorder: record.then(|| Mutex::new(Recording::default())),
            problems: Mutex::new(BTreeMap::new()),
        }
    }

    /// The live host (`/`).
    pub fn live() -> Root {
        Root::new(PathBuf::from("/"), false)
    }

    /// A snapshot directory in the `--root` layout.
    pub fn at(dir: impl Into<PathBuf>) -> Root {
        Root::new(dir.into(), false)
    }

    /// Like [`Root::live`], recording every read for a capture.
    pub fn live_recording() -> Root {
        Root::new(PathBuf::from("/"), true)
    }

    /// True for the live host.
    pub fn is_live(&self) -> bool {
        self.base == Path::new("/")
    }

    /// The root directory.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// What was read so far (empty unless recording).
    pub fn recording(&self) -> Recording {
        match &self.recorder {
            Some(m) => m.lock().map(|r| r.clone()).unwrap_or_default(),
            None => Recording::default(),
        }
    }

    /// Inputs met so far that exist but could not be read, by host path.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems
            .lock()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The problem recorded for this host path, if any.
    pub fn problem(&self, host_path: &str) -> Option<Problem> {
        self.problems
            .lock()
            .ok()
            .and_then(|p| p.get(host_path).cloned())
    }

    fn note(&self, host_path: &str, directory: bool, e: &ReadError) {
        if !e.is_problem() {
            return;
        }
        if let Ok(mut p) = self.problems.lock() {
            p.entry(host_path.to_string()).or_insert_with(|| Problem {
                host_path: host_path.to_string(),
                directory,
                error: e.clone(),
            });
        }
    }

    /// The path as it is read on disk, for evidence (`/sys/...` live, `DIR/sys/...` in a snapshot).
    pub fn display(&self, host_path: &str) -> String {
        if self.is_live() {
            host_path.to_string()
        } else {
            self.base
                .join(host_path.trim_start_matches('/'))
                .display()
                .to_string()
        }
    }

    fn on_disk(&self, comps: &[String]) -> PathBuf {
        let mut p = self.base.clone();
        for c in comps {
            p.push(c);
        }
        p
    }

    /// Resolve `host_path` inside the root, following symlinks.
    /// Returns the resolved host path components (none of them a symlink).
    fn resolve(&self, host_path: &str) -> Result<Vec<String>, ReadError> {
        let mut pending: Vec<String> = split(host_path);
        pending.reverse(); // used as a stack: last = next component
        let mut out: Vec<String> = Vec::new();
        let mut hops = 0usize;
        while let Some(c) = pending.pop() {
            if c == "." {
                continue;
            }
            if c == ".." {
                out.pop();
                continue;
            }
            out.push(c);
            let disk = self.on_disk(&out);
            let md = fs::symlink_metadata(&disk).map_err(|e| ReadError::from_io(&e))?;
            if md.file_type().is_symlink() {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(ReadError::Loop);
                }
                let target = fs::read_link(&disk).map_err(|e| ReadError::from_io(&e))?;
                let t = target.to_string_lossy().to_string();
                out.pop();
                if t.starts_with('/') {
                    out.clear();
                }
                let mut tc = split(&t);
                tc.reverse();
                pending.extend(tc);
            }
        }
        Ok(out)
    }

    /// Open the directory `comps` (already resolved) one component at a time with
    /// `O_NOFOLLOW` and `O_PATH`, so nothing outside the root can be reached even if the
    /// snapshot changes while it is read.
    fn open_dir_walk(&self, comps: &[String]) -> Result<OwnedFd, ReadError> {
        let mut fd = openat(
            CWD,
            &self.base,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(ReadError::from_errno)?;
        for c in comps {
            fd = openat(
                &fd,
                c.as_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(ReadError::from_errno)?;
        }
        Ok(fd)
    }

    /// Open the last of `comps` for reading, after checking with `lstat` that it has the
    /// wanted type: a FIFO, socket or device node is never opened (opening some devices has
    /// effects), and `O_NONBLOCK | O_NOFOLLOW` cover a swap between the check and the open.
    fn open_checked(&self, comps: &[String], want: FileType) -> Result<OwnedFd, ReadError> {
        let (last, parent) = match comps.split_last() {
            Some((l, p)) => (l.as_str(), p),
            None => (".", comps),
        };
        let dirfd = self.open_dir_walk(parent)?;
        let st = statat(&dirfd, last, AtFlags::SYMLINK_NOFOLLOW).map_err(ReadError::from_errno)?;
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft != want {
            return Err(if want == FileType::Directory {
                ReadError::NotDirectory(type_name(ft))
            } else {
                ReadError::NotRegular(type_name(ft))
            });
        }
        let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if want == FileType::Directory {
            flags |= OFlags::DIRECTORY;
        }
        let fd = openat(&dirfd, last, flags, Mode::empty()).map_err(ReadError::from_errno)?;
        let st2 = fstat(&fd).map_err(ReadError::from_errno)?;
        if FileType::from_raw_mode(st2.st_mode) != want || st2.st_ino != st.st_ino {
            return Err(ReadError::Other("changed while being opened".into()));
        }
        Ok(fd)
    }

    /// Read a regular file of at most `limit` bytes.
    pub fn try_read_limited(&self, host_path: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        let r = self.read_inner(host_path, limit);
        if let Err(e) = &r {
            self.note(host_path, false, e);
        }
        r
    }

    fn read_inner(&self, host_path: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        let comps = self.resolve(host_path)?;
        if comps.is_empty() {
            return Err(ReadError::NotRegular("directory"));
        }
        let fd = self.open_checked(&comps, FileType::RegularFile)?;
        let st = fstat(&fd).map_err(ReadError::from_errno)?;
        // sysfs reports 4096 and procfs 0 whatever the content: the capped read decides.
        if u64::try_from(st.st_size).unwrap_or(0) > limit.max(4096) {
            return Err(ReadError::TooBig(limit));
        }
        let mut data = Vec::new();
        fs::File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut data)
            .map_err(|e| ReadError::from_io(&e))?;
        if data.len() as u64 > limit {
            return Err(ReadError::TooBig(limit));
        }
        if let Some(rec) = &self.recorder {
            if let Ok(mut r) = rec.lock() {
                r.files.insert(host_path.to_string(), data.clone());
            }
        }
        Ok(data)
    }

    /// Resolve a host path to its real host path inside the root (symlinks followed).
    pub fn canonical(&self, host_path: &str) -> Option<String> {
        let comps = match self.resolve(host_path) {
            Ok(c) => c,
            Err(e) => {
                self.note(host_path, false, &e);
                return None;
            }
        };
        let real = join(&comps);
        if let Some(rec) = &self.recorder {
            if let Ok(mut r) = rec.lock() {
                r.dirs.insert(host_path.to_string());
            }
        }
        Some(real)
    }

    /// Read a sysfs/procfs attribute (`None` when missing or unreadable, e.g. EINVAL from sysfs).
    pub fn read_bytes(&self, host_path: &str) -> Option<Vec<u8>> {
        self.try_read_limited(host_path, MAX_ATTR_BYTES).ok()
    }

    /// Read a file as text with surrounding whitespace trimmed.
    pub fn read(&self, host_path: &str) -> Option<String> {
        self.read_bytes(host_path)
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
    }

    /// Names in a directory, sorted.
    pub fn try_list(&self, host_path: &str) -> Result<Vec<String>, ReadError> {
        let r = self.list_inner(host_path);
        if let Err(e) = &r {
            self.note(host_path, true, e);
        }
        r
    }

    fn list_inner(&self, host_path: &str) -> Result<Vec<String>, ReadError> {
        let comps = self.resolve(host_path)?;
        let fd = self.open_checked(&comps, FileType::Directory)?;
        let dir = Dir::new(fd).map_err(ReadError::from_errno)?;
        let mut names = Vec::new();
        for e in dir {
            let e = e.map_err(ReadError::from_errno)?;
            let n = e.file_name().to_string_lossy().to_string();
            if n == "." || n == ".." {
                continue;
            }
            names.push(n);
            if names.len() > MAX_DIR_ENTRIES {
                return Err(ReadError::TooBig(MAX_DIR_ENTRIES as u64));
            }
        }
        names.sort_by(|a, b| natural_cmp(a, b));
        if let Some(rec) = &self.recorder {
            if let Ok(mut r) = rec.lock() {
                r.dirs.insert(host_path.to_string());
            }
        }
        Ok(names)
    }

    /// Names in a directory, sorted (empty when missing or unreadable; see [`Root::problems`]).
    pub fn list(&self, host_path: &str) -> Vec<String> {
        self.try_list(host_path).unwrap_or_default()
    }

    /// True when the path exists (after following symlinks) and is a directory.
    pub fn is_dir(&self, host_path: &str) -> bool {
        let Ok(comps) = self.resolve(host_path) else {
            return false;
        };
        let ok = self.on_disk(&comps).is_dir();
        if ok {
            if let Some(rec) = &self.recorder {
                if let Ok(mut r) = rec.lock() {
                    r.dirs.insert(host_path.to_string());
                }
            }
        }
        ok
    }

    /// Last component of a symlink's target (e.g. the driver name behind `device/driver`).
    ///
    /// Only the link itself has to exist: its target may be absent, as in a
    /// snapshot kept in git, which drops empty directories such as
    /// `sys/bus/pci/drivers/mlx5_core`. `None` when the path is not a symlink (a dereferenced
    /// copy has a real directory there, whose name says nothing).
    pub fn link_name(&self, host_path: &str) -> Option<String> {
        // Record the path for captures, as other reads do.
        let _ = self.canonical(host_path);
        let mut comps = split(host_path);
        let last = comps.pop()?;
        let parent = self.resolve(&join(&comps)).ok()?;
        let dirfd = self.open_dir_walk(&parent).ok()?;
        let t = readlinkat(&dirfd, last.as_str(), Vec::new()).ok()?;
        let t = t.to_string_lossy();
        let name = t.trim_end_matches('/').rsplit('/').next()?.to_string();
        if name.is_empty() || name == "." || name == ".." {
            return None;
        }
        Some(name)
    }
}

fn split(p: &str) -> Vec<String> {
    p.split('/')
        .filter(|c| !c.is_empty())
        .map(|c| c.to_string())
        .collect()
}

fn join(comps: &[String]) -> String {
    let mut s = String::new();
    for c in comps {
        s.push('/');
        s.push_str(c);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

/// Order names so that `gids/2` sorts before `gids/10` and `eth2` before `eth10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(s: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut text = String::new();
        let mut num = String::new();
        for ch in s.chars() {
            if ch.is_ascii_digit() {
                num.push(ch);
            } else {
                if !num.is_empty() {
                    out.push((std::mem::take(&mut text), num.parse().unwrap_or(u64::MAX)));
                    num.clear();
                }
                text.push(ch);
            }
        }
        out.push((text, num.parse().unwrap_or(0)));
        out
    }
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}

/// Mirror the recorded reads of a live host into `dest`: real directories and files at their
/// resolved paths, the kernel's symlinks recreated as relative symlinks (so `--root dest` resolves
/// them exactly as the live host does). Returns the number of files written and the paths that
/// vanished between reading and copying.
pub fn mirror_recording(rec: &Recording, dest: &Path) -> std::io::Result<(usize, Vec<String>)> {
    let mut vanished = Vec::new();
    for d in &rec.dirs {
        // mirror_path creates every real directory on the way, the last one included.
        if mirror_path(d, dest)?.is_none() {
            vanished.push(d.clone());
        }
    }
    let mut written = 0usize;
    for (f, data) in &rec.files {
        match mirror_path(f, dest)? {
            Some(real) => {
                let p = on_dest(dest, &real);
                if let Some(parent) = p.parent() {
                    fs::create_dir_all(parent)?;
                }
                fs::write(&p, data)?;
                written += 1;
            }
            None => vanished.push(f.clone()),
        }
    }
    Ok((written, vanished))
}

fn on_dest(dest: &Path, comps: &[String]) -> PathBuf {
    let mut p = dest.to_path_buf();
    for c in comps {
        p.push(c);
    }
    p
}

/// Walk `host_path` on the live host; recreate every symlink met on the way under `dest` and
/// create the real parent directories. Returns the resolved components (`None` if it vanished).
fn mirror_path(host_path: &str, dest: &Path) -> std::io::Result<Option<Vec<String>>> {
    let mut pending = split(host_path);
    pending.reverse();
    let mut out: Vec<String> = Vec::new();
    let mut hops = 0usize;
    while let Some(c) = pending.pop() {
        if c == "." {
            continue;
        }
        if c == ".." {
            out.pop();
            continue;
        }
        out.push(c);
        let live = PathBuf::from(join(&out));
        let Ok(md) = fs::symlink_metadata(&live) else {
            return Ok(None);
        };
        if md.file_type().is_symlink() {
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Ok(None);
            }
            let target = fs::read_link(&live)?;
            let t = target.to_string_lossy().to_string();
            let link_at = on_dest(dest, &out);
            if let Some(parent) = link_at.parent() {
                fs::create_dir_all(parent)?;
            }
            let rel = if let Some(abs) = t.strip_prefix('/') {
                // Absolute target: make it relative so it stays inside the capture.
                let depth = out.len() - 1;
                format!("{}{}", "../".repeat(depth), abs)
            } else {
                t.clone()
            };
            match fs::symlink_metadata(&link_at) {
                Ok(_) => {}
                Err(_) => std::os::unix::fs::symlink(&rel, &link_at)?,
            }
            out.pop();
            if t.starts_with('/') {
                out.clear();
            }
            let mut tc = split(&t);
            tc.reverse();
            pending.extend(tc);
        } else if md.is_dir() {
            fs::create_dir_all(on_dest(dest, &out))?;
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["10", "2", "1", "eth10", "eth2"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, vec!["1", "2", "10", "eth2", "eth10"]);
    }

    #[test]
    fn symlinks_stay_inside_root() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        fs::create_dir_all(base.join("sys/devices/x")).unwrap();
        fs::write(base.join("sys/devices/x/value"), "42\n").unwrap();
        fs::create_dir_all(base.join("sys/class")).unwrap();
        std::os::unix::fs::symlink("../devices/x", base.join("sys/class/rel")).unwrap();
        std::os::unix::fs::symlink("/sys/devices/x", base.join("sys/class/abs")).unwrap();
        // Absolute link pointing at a path that only exists on the real host.
        std::os::unix::fs::symlink("/proc/self", base.join("sys/class/escape")).unwrap();
        let r = Root::at(base);
        assert_eq!(r.read("/sys/class/rel/value").as_deref(), Some("42"));
        assert_eq!(r.read("/sys/class/abs/value").as_deref(), Some("42"));
        assert_eq!(r.read("/sys/class/escape/status"), None);
        assert_eq!(
            r.canonical("/sys/class/rel").as_deref(),
            Some("/sys/devices/x")
        );
        assert_eq!(r.link_name("/sys/class/abs").as_deref(), Some("x"));
        // A link loop is an unknown, not a hang.
        std::os::unix::fs::symlink("loop", base.join("sys/class/loop")).unwrap();
        assert_eq!(r.read("/sys/class/loop/x"), None);
    }
}
