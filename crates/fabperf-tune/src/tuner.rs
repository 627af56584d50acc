//! Applying a profile (and a policy-rule count) with guaranteed restore.
//!
//! Order of work for one cell: take the namespace's lock; restore what a
//! dead agent left (its journal); read every value about to change; write
//! the journal with those previous values (fsync); change; read back. At
//! the end of the cell, on a signal, or at the next start after a crash,
//! [`Tuner::restore`] / [`Tuner::recover`] put every value back, check it,
//! and remove the journal only when every value is back (what could not be
//! restored stays in it for a later attempt).
//!
//! Layout: this file holds the tuner and its reports; `tuner/plan.rs` reads
//! a profile against the current values, `tuner/change.rs` makes one change
//! and reads it back, `tuner/restore.rs` puts saved values back.

mod change;
mod plan;
mod restore;

pub use restore::{restore_entries, restore_from_state};

use crate::journal::Saved;
use crate::journal::{self, Journal, JournalError, Lock, Paths, JOURNAL_VERSION};
use crate::link;
use crate::policy::{self, PolicySpec};
use crate::profile::Profile;
use change::{do_change, Change};
use plan::Planned;
use restore::set_gone_aside;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What an agent lets runners change (`fabperf server --allow-tune`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allow {
    pub sysctl: bool,
    pub nic: bool,
    pub mtu: bool,
    pub irq: bool,
    pub policy: bool,
}

impl Allow {
    pub const NAMES: [&'static str; 5] = ["sysctl", "nic", "mtu", "irq", "policy"];

    pub fn all() -> Allow {
        Allow {
            sysctl: true,
            nic: true,
            mtu: true,
            irq: true,
            policy: true,
        }
    }

    /// `sysctl,nic,mtu,irq,policy`, `all` or `none`.
    pub fn parse(s: &str) -> Result<Allow, String> {
        let mut a = Allow::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => a = Allow::all(),
                "none" => {}
                "sysctl" => a.sysctl = true,
                "nic" => a.nic = true,
                "mtu" => a.mtu = true,
                "irq" => a.irq = true,
                "policy" => a.policy = true,
                other => {
                    return Err(format!(
                        "{other:?} is not something an agent may tune; use a list of {}, or all, or none",
                        Allow::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(a)
    }

    pub fn describe(&self) -> String {
        let on: Vec<&str> = Allow::NAMES
            .iter()
            .zip([self.sysctl, self.nic, self.mtu, self.irq, self.policy])
            .filter(|(_, b)| *b)
            .map(|(n, _)| *n)
            .collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}

/// What happened to one setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Applied {
        from: String,
        to: String,
    },
    /// Already at the wanted value.
    Unchanged {
        value: String,
    },
    /// The agent's `--allow-tune` does not include it.
    NotAllowed {
        why: String,
    },
    /// The kernel, device or namespace does not offer it.
    Unavailable {
        why: String,
    },
    /// Tried and refused.
    Failed {
        why: String,
    },
}

impl Outcome {
    pub fn took_effect(&self) -> bool {
        matches!(self, Outcome::Applied { .. } | Outcome::Unchanged { .. })
    }
}

/// One setting of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub setting: String,
    pub want: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What an agent did with a tune request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyReport {
    pub what: String,
    pub interface: Option<String>,
    pub items: Vec<Item>,
    /// The profile's `outside` entries (not applied by fabperf).
    #[serde(default)]
    pub outside: Vec<String>,
    /// Things done first (a dead agent's settings restored).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl ApplyReport {
    /// One line per setting that did not take effect, and per `outside`
    /// entry, naming `who` (the agent).
    pub fn warnings(&self, who: &str) -> Vec<String> {
        let mut w: Vec<String> = self
            .items
            .iter()
            .filter(|i| !i.outcome.took_effect())
            .map(|i| {
                let why = match &i.outcome {
                    Outcome::NotAllowed { why } => format!("not allowed: {why}"),
                    Outcome::Unavailable { why } => format!("not available: {why}"),
                    Outcome::Failed { why } => format!("failed: {why}"),
                    _ => String::new(),
                };
                format!(
                    "{} on {who}: {} = {} not applied, {why}",
                    self.what, i.setting, i.want
                )
            })
            .collect();
        for o in &self.outside {
            w.push(format!(
                "{} on {who}: not applied by fabperf (outside net.* sysctls, NIC, MTU, IRQ): {o}",
                self.what
            ));
        }
        w
    }

    pub fn applied(&self) -> usize {
        self.items
            .iter()
            .filter(|i| i.outcome.took_effect())
            .count()
    }
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// Settings put back and read back equal to their previous value.
    pub restored: Vec<String>,
    /// Settings whose interface is gone (nothing to restore).
    pub gone: Vec<String>,
    /// Settings that could not be put back (kept in the journal).
    pub failed: Vec<String>,
}

impl RestoreReport {
    pub fn ok(&self) -> bool {
        self.failed.is_empty()
    }
    pub fn summary(&self) -> String {
        let mut s = format!("{} setting(s) restored and verified", self.restored.len());
        if !self.gone.is_empty() {
            s.push_str(&format!(
                ", {} on interfaces that are gone",
                self.gone.len()
            ));
        }
        if !self.failed.is_empty() {
            s.push_str(&format!(
                "; NOT restored (kept in the journal): {}",
                self.failed.join("; ")
            ));
        }
        s
    }
}

/// Why a tune request failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TuneError {
    /// Another agent (or cell) holds the namespace's tuning.
    Busy(String),
    /// The journal cannot be written or read: nothing was changed.
    Journal(String),
    /// The request cannot be served (bad address, policy rules refused).
    Failed(String),
}

impl std::fmt::Display for TuneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TuneError::Busy(s) | TuneError::Journal(s) | TuneError::Failed(s) => f.write_str(s),
        }
    }
}

struct Active {
    _lock: Lock,
    paths: Paths,
    journal: Journal,
}

#[derive(Default)]
struct Inner {
    active: Option<Active>,
    /// A journal that cannot be used: tuning is refused until an operator
    /// deals with it.
    blocked: Option<String>,
}

/// An agent's tuner: one namespace, one journal.
pub struct Tuner {
    state_dir: PathBuf,
    allow: Allow,
    inner: Mutex<Inner>,
}

impl Tuner {
    pub fn new(state_dir: PathBuf, allow: Allow) -> Tuner {
        Tuner {
            state_dir,
            allow,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn allow(&self) -> Allow {
        self.allow
    }

    pub fn state_dir(&self) -> &std::path::Path {
        &self.state_dir
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn paths(&self) -> Paths {
        Paths::for_netns(&self.state_dir, journal::netns_identity().0)
    }

    /// At start (and before tuning): restore what an agent that died left
    /// in this namespace's journal. Returns log lines. A journal that
    /// cannot be used blocks tuning (with the reason) but not testing.
    pub fn recover(&self) -> Vec<String> {
        let mut inner = self.inner();
        self.recover_locked(&mut inner)
    }

    fn recover_locked(&self, inner: &mut Inner) -> Vec<String> {
        let paths = self.paths();
        let mut log = Vec::new();
        match journal::check_dir(&paths.dir, false) {
            Ok(false) => return log,
            Ok(true) => {}
            Err(e) => {
                inner.blocked = Some(e.to_string());
                log.push(format!("tuning disabled: {e}"));
                return log;
            }
        }
        let lock = match journal::try_lock(&paths) {
            Ok(Some(l)) => l,
            Ok(None) => {
                log.push(format!(
                    "another fabperf agent holds the tuning of this network namespace ({}); its journal is left to it",
                    paths.lock.display()
                ));
                return log;
            }
            Err(e) => {
                inner.blocked = Some(e.to_string());
                log.push(format!("tuning disabled: {e}"));
                return log;
            }
        };
        match journal::read(&paths) {
            Ok(None) => {}
            Ok(Some(j)) => {
                if let Some(g) = journal::gone(&j) {
                    match set_gone_aside(&paths, &j, g) {
                        Ok(line) => log.push(line),
                        Err(e) => log.push(e.to_string()),
                    }
                } else {
                    let r = restore_entries(&paths, &j);
                    log.push(format!(
                        "restored the settings of {} left by pid {} (which ended without restoring): {}",
                        j.what,
                        j.pid,
                        r.summary()
                    ));
                    if !r.ok() {
                        inner.blocked = Some(format!(
                            "settings left by pid {} could not all be restored ({}); run `fabperf tune restore` after fixing the cause",
                            j.pid,
                            r.failed.join("; ")
                        ));
                    }
                }
            }
            Err(e) => {
                let msg = match &e {
                    JournalError::Corrupt(_) | JournalError::NotRegular(_) | JournalError::Unsafe(_) => format!(
                        "{e}; tuning is disabled on this agent until it is dealt with (`fabperf tune restore --discard` moves it aside)"
                    ),
                    JournalError::Io(_) => format!("{e}; tuning is disabled on this agent"),
                };
                inner.blocked = Some(msg.clone());
                log.push(msg);
            }
        }
        drop(lock);
        log
    }

    /// Apply a profile and/or a policy-rule count for the agent serving
    /// `addr` (its test address; `port` its port). Every setting gets an
    /// outcome; the whole request fails only when nothing may be changed
    /// safely (journal, lock) or the policy rules cannot be installed.
    /// The namespace's lock is held until [`Tuner::restore`], even when
    /// nothing had to change, so that no other agent of the namespace
    /// retunes it during the cell.
    pub fn apply(
        &self,
        profile: Option<&Profile>,
        policies: Option<&PolicySpec>,
        addr: IpAddr,
        port: u16,
    ) -> Result<ApplyReport, TuneError> {
        let mut inner = self.inner();
        if inner.active.is_some() {
            return Err(TuneError::Busy(
                "this agent's tuning is already in use by another cell".into(),
            ));
        }
        let mut report = ApplyReport {
            what: match (profile, policies) {
                (Some(p), Some(s)) => format!("profile {} + {} policy rules", p.name, s.rules),
                (Some(p), None) => format!("profile {}", p.name),
                (None, Some(s)) => format!("{} policy rules", s.rules),
                (None, None) => "nothing".into(),
            },
            outside: profile.map(|p| p.outside.clone()).unwrap_or_default(),
            ..ApplyReport::default()
        };
        if let Some(p) = profile {
            p.validate().map_err(TuneError::Failed)?;
        }
        if let Some(spec) = policies {
            spec.validate().map_err(TuneError::Failed)?;
            if spec.rules > 0 && !self.allow.policy {
                return Err(TuneError::Failed(format!(
                    "{} policy rules requested, but this agent does not install policy rules (start it with --allow-tune including policy)",
                    spec.rules
                )));
            }
        }
        let wants_policy = policies.is_some_and(|s| s.rules > 0);
        if profile.is_none_or(Profile::is_empty) && !wants_policy {
            return Ok(report);
        }
        if let Some(b) = &inner.blocked {
            return Err(TuneError::Journal(format!(
                "tuning refused, nothing changed: {b}"
            )));
        }
        // The namespace's lock, then what a dead agent left.
        let paths = self.paths();
        let lock = match journal::try_lock(&paths) {
            Ok(Some(l)) => l,
            Ok(None) => {
                return Err(TuneError::Busy(format!(
                    "another fabperf agent holds the tuning of this network namespace ({}); retry when its cell ends",
                    paths.lock.display()
                )))
            }
            Err(e) => return Err(TuneError::Journal(format!("nothing changed: {e}"))),
        };
        match journal::read(&paths) {
            Ok(None) => {}
            // Settings of another boot or namespace are gone with it:
            // nothing of them is written into this namespace.
            Ok(Some(old)) if journal::gone(&old).is_some() => {
                let g = journal::gone(&old).expect("checked");
                match set_gone_aside(&paths, &old, g) {
                    Ok(line) => report.notes.push(line),
                    Err(e) => return Err(TuneError::Journal(format!("nothing changed: {e}"))),
                }
            }
            Ok(Some(old)) => {
                let r = restore_entries(&paths, &old);
                report.notes.push(format!(
                    "first restored the settings of {} left by pid {}: {}",
                    old.what,
                    old.pid,
                    r.summary()
                ));
                if !r.ok() {
                    return Err(TuneError::Journal(format!(
                        "settings left by pid {} could not all be restored ({}); nothing new changed",
                        old.pid,
                        r.failed.join("; ")
                    )));
                }
            }
            Err(e) => {
                inner.blocked = Some(e.to_string());
                return Err(TuneError::Journal(format!("nothing changed: {e}")));
            }
        }
        // Plan: read every value about to change.
        let link = link::link_of_addr(addr)
            .map_err(|e| TuneError::Failed(format!("finding the interface of {addr}: {e}")))?;
        report.interface = link.as_ref().map(|l| l.name.clone());
        let mut plan: Vec<Planned> = Vec::new();
        if let Some(spec) = policies.filter(|s| s.rules > 0) {
            let want = format!(
                "{} rules{}",
                spec.rules,
                if spec.conntrack {
                    " (established flows first)"
                } else {
                    ""
                }
            );
            plan.push(Planned::applied(
                "policy rules".into(),
                "none".into(),
                want,
                Saved::PolicyTable {
                    table: policy::TABLE.into(),
                },
                Change::Policy(*spec, addr, port),
            ));
        }
        if let Some(p) = profile {
            self.plan_profile(p, link.as_ref(), &mut plan);
        }
        let (ino, cookie) = journal::netns_identity();
        let j = Journal {
            version: JOURNAL_VERSION,
            netns: ino,
            netns_cookie: cookie,
            boot_id: journal::boot_id(),
            pid: std::process::id(),
            created_at: fabperf_results::now_rfc3339(),
            what: report.what.clone(),
            entries: plan.iter().filter_map(|p| p.saved.clone()).collect(),
        };
        if !j.entries.is_empty() {
            journal::write(&paths, &j)
                .map_err(|e| TuneError::Journal(format!("nothing changed: {e}")))?;
        }
        // From here on every change is journaled.
        let mut relink = false;
        for p in &mut plan {
            let Some(change) = p.change.take() else {
                continue;
            };
            if let Err(o) = do_change(change, &mut relink) {
                p.item.outcome = o;
            }
        }
        // The offload groups share one request: one outcome for all.
        if let Some(o) = plan
            .iter()
            .find(|p| p.feature_set && p.saved.is_some() && !p.item.outcome.took_effect())
            .map(|p| p.item.outcome.clone())
        {
            for p in plan.iter_mut().filter(|p| p.feature_set) {
                p.item.outcome = o.clone();
            }
        }
        if relink {
            if let Some(l) = &link {
                if !link::wait_up(l.index, Duration::from_secs(10)) {
                    report.notes.push(format!(
                        "{} was not up again within 10 s after the change",
                        l.name
                    ));
                }
            }
        }
        let policy_failed = plan.iter().find_map(|p| match (&p.saved, &p.item.outcome) {
            (Some(Saved::PolicyTable { .. }), Outcome::Failed { why }) => Some(why.clone()),
            _ => None,
        });
        report.items = plan.into_iter().map(|p| p.item).collect();
        inner.active = Some(Active {
            _lock: lock,
            paths,
            journal: j,
        });
        if let Some(why) = policy_failed {
            // The dimension is the rules: without them the cell measures
            // something else. Put everything back.
            let r = self.restore_locked(&mut inner);
            return Err(TuneError::Failed(format!(
                "installing the policy rules failed ({why}); every setting was restored: {}",
                r.map(|r| r.summary()).unwrap_or_default()
            )));
        }
        Ok(report)
    }

    /// Put back what the active tuning changed (end of a cell, a signal).
    /// `None` when nothing is active.
    pub fn restore(&self) -> Option<RestoreReport> {
        let mut inner = self.inner();
        self.restore_locked(&mut inner)
    }

    fn restore_locked(&self, inner: &mut Inner) -> Option<RestoreReport> {
        let active = inner.active.take()?;
        if active.journal.entries.is_empty() {
            return Some(RestoreReport::default());
        }
        let r = restore_entries(&active.paths, &active.journal);
        if !r.ok() {
            inner.blocked = Some(format!(
                "settings could not all be restored ({}); run `fabperf tune restore` after fixing the cause",
                r.failed.join("; ")
            ));
        }
        Some(r)
    }

    /// Whether a tuning is active now.
    pub fn is_active(&self) -> bool {
        self.inner().active.is_some()
    }
}
