//! net.* sysctls through /proc/sys/net. Names are checked before they
//! reach a path ([`crate::profile::check_sysctl_name`]); files are opened
//! without following links and must be on procfs.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Why a sysctl could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SysctlError {
    /// No such setting here.
    Absent,
    /// The agent may not change it.
    Denied(String),
    /// The kernel refused the value, or another failure.
    Failed(String),
}

impl std::fmt::Display for SysctlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SysctlError::Absent => f.write_str(
                "this kernel has no such setting, or it is host-wide and this agent runs in a \
                 network namespace of its own (set it on the host)",
            ),
            SysctlError::Denied(s) => write!(f, "not allowed: {s}"),
            SysctlError::Failed(s) => f.write_str(s),
        }
    }
}

/// The /proc/sys path of a checked name.
pub fn path_of(name: &str) -> Result<PathBuf, SysctlError> {
    crate::profile::check_sysctl_name(name).map_err(SysctlError::Failed)?;
    Ok(PathBuf::from("/proc/sys").join(name.replace('.', "/")))
}

fn classify(e: std::io::Error, writing: bool) -> SysctlError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => SysctlError::Absent,
        Some(libc::EACCES) | Some(libc::EPERM) => {
            SysctlError::Denied(if writing && rustix::process::geteuid().is_root() {
                "the kernel lets only the host's network namespace change it (a host-wide setting: set it on the host)".into()
            } else if writing {
                "permission denied (the agent needs root or CAP_NET_ADMIN in its network namespace)"
                    .into()
            } else {
                "permission denied reading it".into()
            })
        }
        Some(libc::EROFS) => SysctlError::Denied(
            "/proc/sys is read-only for this agent (an unprivileged container)".into(),
        ),
        Some(libc::EINVAL) => SysctlError::Failed("the kernel refused the value (EINVAL)".into()),
        _ => SysctlError::Failed(crate::os_text(&e)),
    }
}

fn open(name: &str, writing: bool) -> Result<std::fs::File, SysctlError> {
    let path = path_of(name)?;
    let f = std::fs::OpenOptions::new()
        .read(!writing)
        .write(writing)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| classify(e, writing))?;
    // Only procfs: a bind-mounted impostor is refused.
    const PROC_SUPER_MAGIC: u32 = 0x9fa0;
    match rustix::fs::fstatfs(&f) {
        Ok(s) if s.f_type as u32 == PROC_SUPER_MAGIC => {}
        Ok(_) => {
            return Err(SysctlError::Failed(format!(
                "{} is not on procfs",
                path.display()
            )))
        }
        Err(e) => return Err(SysctlError::Failed(format!("fstatfs: {e}"))),
    }
    let meta = f
        .metadata()
        .map_err(|e| SysctlError::Failed(crate::os_text(&e)))?;
    if !meta.is_file() {
        return Err(SysctlError::Failed(format!(
            "{} is a directory, not a setting",
            path.display()
        )));
    }
    Ok(f)
}

/// A sysctl's value, its fields separated by one space.
pub fn read(name: &str) -> Result<String, SysctlError> {
    let mut f = open(name, false)?;
    let mut buf = Vec::new();
    (&mut f)
        .take(4096)
        .read_to_end(&mut buf)
        .map_err(|e| classify(e, false))?;
    let s = String::from_utf8_lossy(&buf);
    Ok(s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Write a sysctl (fields separated by spaces).
pub fn write(name: &str, value: &str) -> Result<(), SysctlError> {
    let mut f = open(name, true)?;
    f.write_all(format!("{value}\n").as_bytes())
        .map_err(|e| classify(e, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_net_sysctl_and_refuses_others() {
        let v = read("net.ipv4.tcp_rmem").unwrap();
        assert_eq!(v.split(' ').count(), 3, "{v}");
        assert_eq!(read("net.ipv4.no_such_thing"), Err(SysctlError::Absent));
        assert!(matches!(
            read("kernel.hostname"),
            Err(SysctlError::Failed(_))
        ));
        assert!(
            matches!(read("net.ipv4"), Err(SysctlError::Failed(_))),
            "a directory"
        );
        assert!(matches!(
            path_of("net.core/../../kernel"),
            Err(SysctlError::Failed(_))
        ));
    }
}
