//! Files a user names on the command line or in a plan, read and written
//! the same way by every command.
//!
//! Reading ([`read_capped`], [`read_text`]): secrets (token files), plans,
//! profiles and result files. The file is opened without blocking (a FIFO
//! is not waited on), must be a regular file (`/dev/zero`, a FIFO, a
//! socket or a directory is refused before a byte is read; a symlink is
//! followed, as a Kubernetes Secret mount needs), and its size is checked
//! against a cap before it is read, and again while it is read (a sparse
//! 1 GB file or a file that grows is refused, not read whole).
//!
//! Writing ([`Output`], [`write_output`]): every output flag (`-o`,
//! `--html`, ...). A new path or a regular file is written atomically (a
//! temporary file in the same directory, fsync, rename), keeping an
//! existing file's permission bits; anything else is written through, not
//! replaced: a symlink's target, a character device (`/dev/null`,
//! `/dev/stdout`) or a FIFO stays what it is. A directory or a block device
//! is refused. On an error (or a drop without [`Output::commit`]) the
//! temporary file is removed and the target is unchanged.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The OS error text without Rust's "(os error N)" suffix.
fn os_text(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn kind_of(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Read `path` whole: a regular file of at most `max` bytes. `what` names
/// it in errors ("token file", "plan", ...).
pub fn read_capped(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot read {what} {shown}: {}", os_text(&e)))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot read {what} {shown}: {}", os_text(&e)))?;
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(format!(
            "{what} {shown} is {} — not a regular file; give the path of a file",
            kind_of(&ft)
        ));
    }
    if meta.len() > max {
        return Err(format!(
            "{what} {shown} is {} bytes, larger than {max} bytes; that is not a {what}",
            meta.len()
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read {what} {shown}: {}", os_text(&e)))?;
    if buf.len() as u64 > max {
        return Err(format!(
            "{what} {shown} grew while it was read, larger than {max} bytes; that is not a {what}"
        ));
    }
    Ok(buf)
}

/// [`read_capped`] for UTF-8 text.
pub fn read_text(path: &Path, max: u64, what: &str) -> Result<String, String> {
    let b = read_capped(path, max, what)?;
    String::from_utf8(b).map_err(|_| format!("{what} {} is not UTF-8 text", path.display()))
}

enum Target {
    /// Written under `tmp`, renamed onto `path` by commit.
    Atomic { file: File, tmp: PathBuf },
    /// Written through an existing non-regular file (device, FIFO) or a
    /// symlink.
    Through { file: File },
}

/// An output file being written; see the module's rules.
pub struct Output {
    path: PathBuf,
    target: Option<Target>,
}

fn tmp_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(
        ".{name}.fabperf-{}-{}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}

impl Output {
    /// Start writing `path` (nothing is visible there until
    /// [`Output::commit`] when it is written atomically).
    pub fn create(path: &Path) -> Result<Output, String> {
        let shown = path.display();
        let err = |e: io::Error| format!("cannot write {shown}: {}", os_text(&e));
        let existing = match std::fs::symlink_metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(err(e)),
        };
        let target = match existing {
            Some(m) if m.file_type().is_dir() => {
                return Err(format!(
                    "cannot write {shown}: it is a directory; give a file name"
                ))
            }
            None => Self::atomic(path, None).map_err(err)?,
            Some(m) if m.file_type().is_file() => {
                Self::atomic(path, Some(m.permissions().mode() & 0o7777)).map_err(err)?
            }
            Some(_) => {
                // A symlink (followed; the kernel's protected_symlinks
                // rules apply), a device or a FIFO: written through.
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(path)
                    .map_err(err)?;
                let m = file.metadata().map_err(err)?;
                let ft = m.file_type();
                if ft.is_block_device() || ft.is_dir() {
                    return Err(format!(
                        "cannot write {shown}: it is {}; give a file name",
                        kind_of(&ft)
                    ));
                }
                if ft.is_file() {
                    file.set_len(0).map_err(err)?;
                }
                Target::Through { file }
            }
        };
        Ok(Output {
            path: path.to_path_buf(),
            target: Some(target),
        })
    }

    fn atomic(path: &Path, mode: Option<u32>) -> io::Result<Target> {
        let tmp = tmp_name(path);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o666)
            .open(&tmp)?;
        if let Some(m) = mode {
            if let Err(e) = file.set_permissions(std::fs::Permissions::from_mode(m)) {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        }
        Ok(Target::Atomic { file, tmp })
    }

    fn file(&mut self) -> io::Result<&mut File> {
        match &mut self.target {
            Some(Target::Atomic { file, .. }) | Some(Target::Through { file }) => Ok(file),
            None => Err(io::Error::other("output already committed")),
        }
    }

    /// Finish: flush and, for an atomic write, move the file into place.
    pub fn commit(mut self) -> Result<(), String> {
        let shown = self.path.display().to_string();
        let err = |e: io::Error| format!("cannot write {shown}: {}", os_text(&e));
        match self.target.take() {
            Some(Target::Atomic { file, tmp }) => {
                let r = file
                    .sync_all()
                    .and_then(|_| std::fs::rename(&tmp, &self.path));
                if let Err(e) = r {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(err(e));
                }
                Ok(())
            }
            Some(Target::Through { mut file }) => file.flush().map_err(err),
            None => Ok(()),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file()?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file()?.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Some(Target::Atomic { tmp, .. }) = &self.target {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Write `bytes` to `path` by the module's rules.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut o = Output::create(path)?;
    o.write_all(bytes)
        .map_err(|e| format!("cannot write {}: {}", path.display(), os_text(&e)))?;
    o.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fabperf-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn reads_only_small_regular_files() {
        let d = dir("read");
        let ok = d.join("token");
        std::fs::write(&ok, "s3cret\n").unwrap();
        assert_eq!(read_text(&ok, 100, "token file").unwrap(), "s3cret\n");
        // Through a symlink (a Secret mount).
        std::os::unix::fs::symlink(&ok, d.join("link")).unwrap();
        assert_eq!(read_text(&d.join("link"), 100, "x").unwrap(), "s3cret\n");
        // A FIFO is refused at once, not waited on.
        mkfifo(&d.join("fifo"));
        let t0 = std::time::Instant::now();
        let e = read_capped(&d.join("fifo"), 100, "token file").unwrap_err();
        assert!(
            e.contains("a FIFO") && e.contains("not a regular file"),
            "{e}"
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        let e = read_capped(Path::new("/dev/zero"), 100, "plan").unwrap_err();
        assert!(e.contains("character device"), "{e}");
        let e = read_capped(&d, 100, "plan").unwrap_err();
        assert!(e.contains("a directory"), "{e}");
        // A sparse file is refused by its size, before it is read.
        let sparse = d.join("sparse");
        File::create(&sparse).unwrap().set_len(1 << 30).unwrap();
        let e = read_capped(&sparse, 4096, "token file").unwrap_err();
        assert!(e.contains("1073741824 bytes, larger than 4096"), "{e}");
        std::fs::write(d.join("bin"), [0xff, 0xfe]).unwrap();
        assert!(read_text(&d.join("bin"), 10, "x")
            .unwrap_err()
            .contains("UTF-8"));
        assert!(read_text(&d.join("none"), 10, "plan")
            .unwrap_err()
            .contains("cannot read plan"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn outputs_replace_regular_files_and_write_through_the_rest() {
        let d = dir("write");
        // A new path, then a regular file replaced (its mode kept).
        let p = d.join("report.txt");
        write_output(&p, b"one").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let ino = std::fs::metadata(&p).unwrap().ino();
        write_output(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_ne!(m.ino(), ino, "replaced atomically");
        // A symlink stays a symlink; its target gets the text.
        let target = d.join("target.txt");
        std::fs::write(&target, "old").unwrap();
        let link = d.join("link.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_output(&link, b"via link").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"via link");
        // A device stays a device.
        write_output(Path::new("/dev/null"), b"nothing").unwrap();
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        // A directory is refused.
        assert!(write_output(&d, b"x").unwrap_err().contains("directory"));
        // Dropped without commit: nothing changes, no temporary file left.
        {
            let mut o = Output::create(&p).unwrap();
            o.write_all(b"partial").unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
