//! Reading the renderer's inputs (plans, detect files, token files) with
//! limits, and writing its outputs all-or-nothing.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Largest plan or detect file the renderer reads.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;
/// Largest token file (a token is a few dozen bytes).
pub const MAX_TOKEN_BYTES: u64 = 4096;

/// Read a UTF-8 text file of at most `max` bytes: fabperf's one reader of
/// secret and plan files ([`fabperf_results::files::read_text`]). FIFOs,
/// devices, sockets and directories are refused before anything is read (a
/// FIFO would block forever, `/dev/zero` never ends).
pub fn read_text_capped(path: &Path, max: u64, what: &str) -> Result<String> {
    fabperf_results::files::read_text(path, max, what).map_err(anyhow::Error::msg)
}

/// A file to write: where, what, and whether only the owner may read it.
#[derive(Debug, Clone)]
pub struct Output {
    pub path: PathBuf,
    pub content: String,
    pub private: bool,
}

/// Files staged in temporary names next to their targets; nothing is
/// visible under the target names until [`Staged::commit`].
pub struct Staged {
    /// (temporary path, final path)
    moves: Vec<(PathBuf, PathBuf)>,
    /// Directories this staging created, outermost first (removed again,
    /// when empty, if nothing is committed).
    created_dirs: Vec<PathBuf>,
    committed: bool,
}

/// Create `dir` and its missing parents, remembering which ones were made.
fn create_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.as_os_str().is_empty() || p.exists() {
            break;
        }
        missing.push(p.to_path_buf());
        d = p.parent();
    }
    std::fs::create_dir_all(dir)?;
    created.extend(missing.into_iter().rev());
    Ok(())
}

fn tmp_name(target: &Path, n: usize) -> PathBuf {
    let name = target
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.fabperf-tmp-{}-{n}", std::process::id()))
}

/// Write every output under a temporary name in its final directory
/// (creating directories as needed). On any error the temporary files
/// written so far are removed and no target file has changed.
pub fn stage(outputs: &[Output]) -> Result<Staged> {
    let mut staged = Staged {
        moves: Vec::new(),
        created_dirs: Vec::new(),
        committed: false,
    };
    for (n, o) in outputs.iter().enumerate() {
        if let Some(parent) = o.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_dirs(parent, &mut staged.created_dirs)
                .with_context(|| format!("cannot create directory {}", parent.display()))?;
        }
        if o.path.is_dir() {
            bail!(
                "{} is a directory; the render writes a file there",
                o.path.display()
            );
        }
        let tmp = tmp_name(&o.path, n);
        write_new(&tmp, &o.content, o.private)
            .with_context(|| format!("cannot write {}", o.path.display()))?;
        staged.moves.push((tmp, o.path.clone()));
    }
    Ok(staged)
}

fn write_new(path: &Path, content: &str, private: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = opts.open(path)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()
}

impl Staged {
    /// Rename every staged file onto its target (atomic per file; the
    /// renames are in the target directories, so they cannot cross
    /// file systems).
    pub fn commit(mut self) -> Result<()> {
        for (tmp, dst) in &self.moves {
            std::fs::rename(tmp, dst)
                .with_context(|| format!("cannot move {} into place", dst.display()))?;
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            for (tmp, _) in &self.moves {
                let _ = std::fs::remove_file(tmp);
            }
            for d in self.created_dirs.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("fabperf-k8s-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn refuses_fifo_directory_and_oversize() {
        let d = tmpdir("read");
        assert!(read_text_capped(&d, 10, "plan")
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        let big = d.join("big");
        std::fs::write(&big, vec![b'a'; 100]).unwrap();
        let e = read_text_capped(&big, 10, "token file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than 10 bytes"), "{e}");
        assert_eq!(read_text_capped(&big, 100, "x").unwrap().len(), 100);
        let bin = d.join("bin");
        std::fs::write(&bin, [0xff, 0xfe]).unwrap();
        assert!(read_text_capped(&bin, 10, "x")
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
        #[cfg(unix)]
        {
            let dev = Path::new("/dev/zero");
            assert!(read_text_capped(dev, 10, "x").is_err());
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn nothing_moves_when_a_write_fails() {
        let d = tmpdir("stage");
        std::fs::write(d.join("a.yaml"), "old").unwrap();
        // The second target's parent is a file: create_dir_all fails.
        std::fs::write(d.join("blocker"), "x").unwrap();
        let outs = vec![
            Output {
                path: d.join("a.yaml"),
                content: "new".into(),
                private: false,
            },
            Output {
                path: d.join("blocker/b.yaml"),
                content: "b".into(),
                private: false,
            },
        ];
        assert!(stage(&outs).is_err());
        assert_eq!(std::fs::read_to_string(d.join("a.yaml")).unwrap(), "old");
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 2, "temporary files left behind: {left:?}");
        let ok = vec![Output {
            path: d.join("a.yaml"),
            content: "new".into(),
            private: true,
        }];
        stage(&ok).unwrap().commit().unwrap();
        assert_eq!(std::fs::read_to_string(d.join("a.yaml")).unwrap(), "new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(d.join("a.yaml"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
