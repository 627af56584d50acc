//! The open-file limit (RLIMIT_NOFILE): every connection is a descriptor.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The soft and hard limits now.
pub fn nofile() -> Result<(u64, u64), String> {
    getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("reading the open-file limit: {e}"))
}

fn set(soft: u64, hard: u64) -> std::io::Result<()> {
    Ok(setrlimit(Resource::RLIMIT_NOFILE, soft, hard)?)
}

/// Make at least `need` descriptors available: raise the soft limit
/// (toward the hard limit), and the hard limit too where the process may
/// (root with CAP_SYS_RESOURCE). Returns the soft limit in force, or what
/// to do when `need` cannot be had.
pub fn ensure_nofile(need: u64, what: &str) -> Result<u64, String> {
    let (soft, hard) = nofile()?;
    if soft >= need {
        return Ok(soft);
    }
    if hard >= need {
        set(need, hard).map_err(|e| {
            format!("{what} needs {need} open files; raising the limit from {soft} failed: {e}")
        })?;
        return Ok(need);
    }
    match set(need, need) {
        Ok(()) => Ok(need),
        Err(e) => Err(format!(
            "{what} needs {need} open files, above this process's hard limit of {hard} \
             (raising it: {e}); raise it (`ulimit -n {need}` as root, LimitNOFILE= in a systemd \
             unit, or a higher nofile in /etc/security/limits.conf) or ask for fewer connections"
        )),
    }
}

/// Raise the soft limit to the hard limit (what a server that may hold
/// many connections does at start); returns the soft limit in force.
pub fn raise_to_hard() -> Result<u64, String> {
    let (soft, hard) = nofile()?;
    if soft < hard {
        set(hard, hard).map_err(|e| format!("raising the open-file limit to {hard}: {e}"))?;
    }
    Ok(hard.max(soft))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_need_is_explained() {
        let (soft, _) = nofile().unwrap();
        assert!(ensure_nofile(soft.min(64), "x").unwrap() >= soft.min(64));
        // Far above any kernel's nr_open.
        let e = ensure_nofile(1 << 40, "a load of many connections").unwrap_err();
        assert!(
            e.contains("hard limit") && e.contains("fewer connections"),
            "{e}"
        );
    }
}
