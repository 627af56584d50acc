//! Putting saved values back: one journal entry at a time (last change
//! first), after a cell, a signal, a crash, or `fabperf tune restore`.

use super::plan::fmt_opt;
use super::RestoreReport;
use crate::ethtool::Ethtool;
use crate::journal::{self, Journal, JournalError, Paths, Saved};
use crate::{irq, link, policy, sysctl};
use std::time::Duration;

/// The interface a saved entry belongs to, if it is still the same one.
fn same_link(ifindex: u32, ifname: &str) -> bool {
    link::link(ifindex).is_ok_and(|l| l.name == ifname)
}

/// Restore one entry and read it back.
fn restore_one(e: &Saved) -> Result<bool, String> {
    let gone = |ifindex: u32, ifname: &str| !same_link(ifindex, ifname);
    match e {
        Saved::Sysctl { name, previous } => {
            // A value that never changed (its write was refused) needs no
            // write, and may not allow one.
            if sysctl::read(name).is_ok_and(|v| &v == previous) {
                return Ok(true);
            }
            sysctl::write(name, previous).map_err(|e| e.to_string())?;
            let back = sysctl::read(name).map_err(|e| e.to_string())?;
            if &back != previous {
                return Err(format!("reads back {back:?}, not {previous:?}"));
            }
        }
        Saved::Features {
            ifindex,
            ifname,
            previous,
        } => {
            if gone(*ifindex, ifname) {
                return Ok(false);
            }
            let mut et = Ethtool::open().map_err(|e| e.to_string())?;
            let now = et.features(*ifindex).map_err(|e| e.to_string())?;
            if previous.iter().all(|(n, on)| now.wanted.contains(n) == *on) {
                return Ok(true);
            }
            et.set_features(*ifindex, previous)
                .map_err(|e| e.to_string())?;
            let f = et.features(*ifindex).map_err(|e| e.to_string())?;
            let wrong: Vec<&String> = previous
                .iter()
                .filter(|(n, on)| f.wanted.contains(*n) != **on)
                .map(|(n, _)| n)
                .collect();
            if !wrong.is_empty() {
                return Err(format!(
                    "{} not back",
                    wrong
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Saved::Rings {
            ifindex,
            ifname,
            rx,
            tx,
        } => {
            if gone(*ifindex, ifname) {
                return Ok(false);
            }
            let mut et = Ethtool::open().map_err(|e| e.to_string())?;
            let now = et.rings(*ifindex).map_err(|e| e.to_string())?;
            if rx.is_none_or(|v| now.rx == Some(v)) && tx.is_none_or(|v| now.tx == Some(v)) {
                return Ok(true);
            }
            et.set_rings(*ifindex, *rx, *tx)
                .map_err(|e| e.to_string())?;
            let r = et.rings(*ifindex).map_err(|e| e.to_string())?;
            if rx.is_some_and(|v| r.rx != Some(v)) || tx.is_some_and(|v| r.tx != Some(v)) {
                return Err(format!(
                    "rings read back rx {} tx {}",
                    fmt_opt(r.rx),
                    fmt_opt(r.tx)
                ));
            }
            let _ = link::wait_up(*ifindex, Duration::from_secs(10));
        }
        Saved::Channels {
            ifindex,
            ifname,
            rx,
            tx,
            combined,
        } => {
            if gone(*ifindex, ifname) {
                return Ok(false);
            }
            let mut et = Ethtool::open().map_err(|e| e.to_string())?;
            let now = et.channels(*ifindex).map_err(|e| e.to_string())?;
            if rx.is_none_or(|v| now.rx == Some(v))
                && tx.is_none_or(|v| now.tx == Some(v))
                && combined.is_none_or(|v| now.combined == Some(v))
            {
                return Ok(true);
            }
            et.set_channels(*ifindex, *rx, *tx, *combined)
                .map_err(|e| e.to_string())?;
            let c = et.channels(*ifindex).map_err(|e| e.to_string())?;
            if rx.is_some_and(|v| c.rx != Some(v))
                || tx.is_some_and(|v| c.tx != Some(v))
                || combined.is_some_and(|v| c.combined != Some(v))
            {
                return Err("channels read back different".into());
            }
            let _ = link::wait_up(*ifindex, Duration::from_secs(10));
        }
        Saved::Coalesce {
            ifindex,
            ifname,
            previous,
        } => {
            if gone(*ifindex, ifname) {
                return Ok(false);
            }
            let mut et = Ethtool::open().map_err(|e| e.to_string())?;
            let now = et.coalesce(*ifindex).map_err(|e| e.to_string())?;
            if previous.iter().all(|(k, v)| now.get(k) == Some(v)) {
                return Ok(true);
            }
            et.set_coalesce(*ifindex, previous)
                .map_err(|e| e.to_string())?;
            let c = et.coalesce(*ifindex).map_err(|e| e.to_string())?;
            if previous.iter().any(|(k, v)| c.get(k) != Some(v)) {
                return Err("coalescing reads back different".into());
            }
        }
        Saved::Mtu {
            ifindex,
            ifname,
            previous,
        } => {
            if gone(*ifindex, ifname) {
                return Ok(false);
            }
            if link::link(*ifindex).is_ok_and(|l| l.mtu == *previous) {
                return Ok(true);
            }
            link::set_mtu(*ifindex, *previous).map_err(|e| e.to_string())?;
            let l = link::link(*ifindex).map_err(|e| e.to_string())?;
            if l.mtu != *previous {
                return Err(format!("MTU reads back {}", l.mtu));
            }
            let _ = link::wait_up(*ifindex, Duration::from_secs(10));
        }
        Saved::Irq { irq: n, previous } => {
            let same = |s: &str| {
                crate::profile::parse_cpu_list(s).ok()
                    == crate::profile::parse_cpu_list(previous).ok()
            };
            if irq::read_affinity(*n).is_ok_and(|v| same(&v)) {
                return Ok(true);
            }
            irq::write_affinity(*n, previous)?;
            let back = irq::read_affinity(*n)?;
            let norm = |s: &str| crate::profile::parse_cpu_list(s).unwrap_or_default();
            if norm(&back) != norm(previous) {
                return Err(format!("reads back {back}"));
            }
        }
        Saved::PolicyTable { .. } => {
            if policy::nft_binary().is_none() {
                return Ok(false);
            }
            policy::remove()?;
            if policy::table_exists()? {
                return Err("the table is still there".into());
            }
        }
    }
    Ok(true)
}

/// Restore every entry of a journal (last change first); remove the
/// journal when all are back, else keep the ones that are not.
pub fn restore_entries(paths: &Paths, j: &Journal) -> RestoreReport {
    let mut r = RestoreReport::default();
    let mut keep = Vec::new();
    for e in j.entries.iter().rev() {
        match restore_one(e) {
            Ok(true) => r.restored.push(e.label()),
            Ok(false) => r.gone.push(e.label()),
            Err(why) => {
                r.failed.push(format!("{}: {why}", e.label()));
                keep.push(e.clone());
            }
        }
    }
    let res = if keep.is_empty() {
        journal::remove(paths)
    } else {
        keep.reverse();
        journal::write(
            paths,
            &Journal {
                entries: keep,
                ..j.clone()
            },
        )
    };
    if let Err(e) = res {
        r.failed.push(format!("journal: {e}"));
    }
    r
}

/// Set a journal of a gone boot or namespace aside; the line that says so.
pub(super) fn set_gone_aside(
    paths: &Paths,
    j: &Journal,
    g: journal::Gone,
) -> Result<String, JournalError> {
    let to = journal::set_aside(paths, g.tag())?;
    Ok(format!("{}; kept as {}", g.describe(j), to.display()))
}

/// `fabperf tune restore`: restore this namespace's journal (or, with
/// `discard`, move a journal that cannot be used aside). Returns what was
/// done, or why it could not be.
pub fn restore_from_state(state_dir: &std::path::Path, discard: bool) -> Result<String, String> {
    let (ino, _) = journal::netns_identity();
    let paths = Paths::for_netns(state_dir, ino);
    let mut out = Vec::new();
    if !journal::check_dir(&paths.dir, false).map_err(|e| e.to_string())? {
        return Ok(format!(
            "nothing to restore: no journal directory {}",
            paths.dir.display()
        ));
    }
    // Journals of other namespaces are named, not touched.
    if let Ok(rd) = std::fs::read_dir(&paths.dir) {
        for e in rd.flatten().take(1000) {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".journal") && e.path() != paths.journal {
                out.push(format!(
                    "{} belongs to another network namespace: run `fabperf tune restore` inside it (e.g. ip netns exec NAME fabperf tune restore)",
                    e.path().display()
                ));
            }
        }
    }
    let lock = journal::try_lock(&paths)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "a running fabperf agent holds this namespace's tuning ({}); it restores at the end of its cell (or stop it with SIGTERM)",
                paths.lock.display()
            )
        })?;
    match journal::read(&paths) {
        Ok(None) => out.push(format!(
            "nothing to restore in this network namespace ({} is absent)",
            paths.journal.display()
        )),
        // The checks the agent's start-up recovery makes: a journal of
        // another boot or namespace is set aside, never restored here.
        Ok(Some(j)) if journal::gone(&j).is_some() => {
            let g = journal::gone(&j).expect("checked");
            out.push(set_gone_aside(&paths, &j, g).map_err(|e| e.to_string())?);
        }
        Ok(Some(j)) => {
            let r = restore_entries(&paths, &j);
            let line = format!("{} (pid {}): {}", j.what, j.pid, r.summary());
            if !r.ok() {
                return Err(line);
            }
            out.push(line);
        }
        Err(e) if discard => {
            let to = journal::set_aside(&paths, "discarded").map_err(|e2| format!("{e}; {e2}"))?;
            out.push(format!(
                "{e}\nmoved aside to {} (nothing restored)",
                to.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "{e}\n(`fabperf tune restore --discard` moves it aside without restoring anything)"
            ))
        }
    }
    drop(lock);
    Ok(out.join("\n"))
}
