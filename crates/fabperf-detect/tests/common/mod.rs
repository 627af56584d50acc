#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copy a snapshot tree, keeping symlinks as symlinks.
pub fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let from = e.path();
        let to = dst.join(e.file_name());
        let ft = fs::symlink_metadata(&from).unwrap().file_type();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from).unwrap(), &to).unwrap();
        } else if ft.is_dir() {
            copy_tree(&from, &to);
        } else {
            fs::copy(&from, &to).unwrap();
        }
    }
}

/// A writable copy of a fixture.
pub fn scratch(name: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    copy_tree(&fixture(name), d.path());
    d
}

/// Write `text` at a host path inside a snapshot (through its symlinks).
pub fn put(root: &Path, host_path: &str, text: &str) {
    let p = root.join(host_path.trim_start_matches('/'));
    fs::write(&p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
}

/// Remove a file or directory at a host path inside a snapshot.
pub fn remove(root: &Path, host_path: &str) {
    let p = root.join(host_path.trim_start_matches('/'));
    let md = fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if md.is_dir() {
        fs::remove_dir_all(&p).unwrap();
    } else {
        fs::remove_file(&p).unwrap();
    }
}

/// Copy a snapshot tree the way `cp -rL` / `tar -h` / `rsync -L` do: every symlink replaced by
/// a copy of its target; links whose target is missing, or a directory being copied (a cycle,
/// such as `device/infiniband/mlx5_0/device`), are left out, as `cp -rL` leaves them.
pub fn copy_dereferenced(src: &Path, dst: &Path) {
    fn walk(src: &Path, dst: &Path, stack: &mut Vec<PathBuf>) {
        let real = fs::canonicalize(src).unwrap();
        stack.push(real);
        fs::create_dir_all(dst).unwrap();
        for e in fs::read_dir(src).unwrap() {
            let from = e.unwrap().path();
            let to = dst.join(from.file_name().unwrap());
            let Ok(md) = fs::metadata(&from) else {
                continue; // dangling link
            };
            if md.is_dir() {
                let target = fs::canonicalize(&from).unwrap();
                if stack.contains(&target) {
                    continue; // cyclic link
                }
                walk(&from, &to, stack);
            } else {
                fs::copy(&from, &to).unwrap();
            }
        }
        stack.pop();
    }
    walk(src, dst, &mut Vec::new());
}
