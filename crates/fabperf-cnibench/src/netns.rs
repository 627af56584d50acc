//! Fresh network namespaces for the sandboxes, made and removed with
//! iproute2 (`ip netns add/del`, pinned under /run/netns) like a runtime's
//! sandbox namespace; their creation is not part of the timed ADD.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes namespaces of concurrent benches in one process.
static SEQ: AtomicU64 = AtomicU64::new(0);

pub struct Netns {
    name: String,
    path: PathBuf,
}

pub fn check_privileges() -> Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!("cni-bench creates network namespaces and runs CNI plugins, which need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run it as root");
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run `ip` (iproute2)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            crate::exec::clean(String::from_utf8_lossy(&out.stderr).trim())
        );
    }
    Ok(())
}

impl Netns {
    pub fn create(n: u32) -> Result<Netns> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("fabperf-cnibench-{}-{seq}-{n}", std::process::id());
        ip(&["netns", "add", &name])?;
        let path = Path::new("/run/netns").join(&name);
        if !path.exists() {
            let _ = ip(&["netns", "del", &name]);
            bail!("`ip netns add {name}` did not create {}", path.display());
        }
        Ok(Netns { name, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn remove(self) -> Result<()> {
        let name = self.name.clone();
        std::mem::forget(self);
        ip(&["netns", "del", &name])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}
