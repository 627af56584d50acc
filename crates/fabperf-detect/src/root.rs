//! Reading the host through a root prefix.
//!
//! Every sysfs/procfs read of the detector goes through [`Root`]: the live host is the root `/`,
//! a snapshot (a capture or a hand-written fixture) is any directory with the same layout. Symlinks
//! are resolved *inside* the root (an absolute target is taken relative to the root), so a snapshot
//! can never make the detector read the real host. A `Root` can also record what it read, which is
//! how `--capture` copies exactly the files the detector uses.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Maximum number of symlinks followed while resolving one path (the kernel uses 40).
const MAX_LINK_HOPS: usize = 40;

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
}

impl Root {
    /// The live host (`/`).
    pub fn live() -> Root {
        Root {
            base: PathBuf::from("/"),
            recorder: None,
        }
    }

    /// A snapshot directory in the `--root` layout.
    pub fn at(dir: impl Into<PathBuf>) -> Root {
        Root {
            base: dir.into(),
            recorder: None,
        }
    }

    /// Like [`Root::live`], recording every read for a capture.
    pub fn live_recording() -> Root {
        Root {
            base: PathBuf::from("/"),
            recorder: Some(Mutex::new(Recording::default())),
        }
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

    /// Resolve `host_path` inside the root, following symlinks; `None` if a component is missing.
    /// Returns the resolved host path components.
    fn resolve(&self, host_path: &str) -> Option<Vec<String>> {
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
            let md = fs::symlink_metadata(&disk).ok()?;
            if md.file_type().is_symlink() {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return None;
                }
                let target = fs::read_link(&disk).ok()?;
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
        Some(out)
    }

    /// Resolve a host path to its real host path inside the root (symlinks followed).
    pub fn canonical(&self, host_path: &str) -> Option<String> {
        let comps = self.resolve(host_path)?;
        let real = join(&comps);
        if let Some(rec) = &self.recorder {
            if let Ok(mut r) = rec.lock() {
                r.dirs.insert(host_path.to_string());
            }
        }
        Some(real)
    }

    /// Read a whole file (`None` when missing or unreadable, e.g. EINVAL from sysfs).
    pub fn read_bytes(&self, host_path: &str) -> Option<Vec<u8>> {
        let comps = self.resolve(host_path)?;
        let disk = self.on_disk(&comps);
        let data = fs::read(disk).ok()?;
        if let Some(rec) = &self.recorder {
            if let Ok(mut r) = rec.lock() {
                r.files.insert(host_path.to_string(), data.clone());
            }
        }
        Some(data)
    }

    /// Read a file as text with surrounding whitespace trimmed.
    pub fn read(&self, host_path: &str) -> Option<String> {
        self.read_bytes(host_path)
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
    }

    /// Names in a directory, sorted (empty when missing).
    pub fn list(&self, host_path: &str) -> Vec<String> {
        let Some(comps) = self.resolve(host_path) else {
            return Vec::new();
        };
        let Ok(rd) = fs::read_dir(self.on_disk(&comps)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        names.sort_by(|a, b| natural_cmp(a, b));
        if let Some(rec) = &self.recorder {
            if let Ok(mut r) = rec.lock() {
                r.dirs.insert(host_path.to_string());
            }
        }
        names
    }

    /// True when the path exists (after following symlinks) and is a directory.
    pub fn is_dir(&self, host_path: &str) -> bool {
        let Some(comps) = self.resolve(host_path) else {
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
    /// `sys/bus/pci/drivers/mlx5_core`.
    pub fn link_name(&self, host_path: &str) -> Option<String> {
        // Record the path for captures, as other reads do.
        let _ = self.canonical(host_path);
        let mut comps = split(host_path);
        let last = comps.pop()?;
        let mut real = self.resolve(&join(&comps))?;
        real.push(last);
        let disk = self.on_disk(&real);
        let md = fs::symlink_metadata(&disk).ok()?;
        let name = if md.file_type().is_symlink() {
            let t = fs::read_link(&disk).ok()?;
            let t = t.to_string_lossy();
            t.trim_end_matches('/').rsplit('/').next()?.to_string()
        } else {
            real.last()?.clone()
        };
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
