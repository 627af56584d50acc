//! Applying a profile (and a policy-rule count) with guaranteed restore.
//!
//! Order of work for one cell: take the namespace's lock; restore what a
//! dead agent left (its journal); read every value about to change; write
//! the journal with those previous values (fsync); change; read back. At
//! the end of the cell, on a signal, or at the next start after a crash,
//! [`Tuner::restore`] / [`Tuner::recover`] put every value back, check it,
//! and remove the journal only when every value is back (what could not be
//! restored stays in it for a later attempt).

use crate::ethtool::{feature_group, Ethtool};
use crate::journal::{self, Journal, JournalError, Lock, Paths, Saved, JOURNAL_VERSION};
use crate::link::{self, Link};
use crate::policy::{self, PolicySpec};
use crate::profile::{parse_cpu_spec, Profile};
use crate::sysctl::{self, SysctlError};
use crate::{irq, nl::NlError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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

/// The previous value to save and the change to make, for one setting.
struct Planned {
    item: Item,
    saved: Option<Saved>,
    change: Option<Change>,
    /// One of the offload groups set by a single features request.
    feature_set: bool,
}

impl Planned {
    /// An item the tuner changes from `from` to `to`, with what restores it
    /// and the change itself.
    fn applied(setting: String, from: String, to: String, saved: Saved, change: Change) -> Planned {
        Planned {
            item: Item {
                setting,
                want: to.clone(),
                outcome: Outcome::Applied { from, to },
            },
            saved: Some(saved),
            change: Some(change),
            feature_set: false,
        }
    }

    /// An item that changes nothing (kept as is, not allowed, not
    /// available, failed at planning).
    fn nothing(item: Item) -> Planned {
        Planned {
            item,
            saved: None,
            change: None,
            feature_set: false,
        }
    }
}

enum Change {
    Sysctl(String, String),
    Features(u32, BTreeMap<String, bool>),
    Rings(u32, Option<u32>, Option<u32>),
    Channels(u32, Option<u32>, Option<u32>, Option<u32>),
    Coalesce(u32, BTreeMap<String, u32>),
    Mtu(u32, u32),
    Irq(u32, String),
    Policy(PolicySpec, IpAddr, u16),
}

fn nl_outcome(e: &NlError, what: &str) -> Outcome {
    if e.is_unsupported() {
        Outcome::Unavailable {
            why: format!("the device does not support changing {what} ({e})"),
        }
    } else if e.is_denied() {
        Outcome::NotAllowed {
            why: format!("the kernel refused ({e}): the agent needs CAP_NET_ADMIN"),
        }
    } else {
        Outcome::Failed { why: e.to_string() }
    }
}

fn sysctl_outcome(e: SysctlError) -> Outcome {
    match e {
        SysctlError::Absent => Outcome::Unavailable {
            why: SysctlError::Absent.to_string(),
        },
        SysctlError::Denied(s) => Outcome::NotAllowed { why: s },
        SysctlError::Failed(s) => Outcome::Failed { why: s },
    }
}

fn not_allowed(what: &str) -> Outcome {
    Outcome::NotAllowed {
        why: format!(
            "this agent does not change {what} (start it with --allow-tune including {what})"
        ),
    }
}

fn fmt_opt(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| v.to_string())
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

    fn plan_profile(&self, p: &Profile, link: Option<&Link>, plan: &mut Vec<Planned>) {
        for (name, want) in &p.sysctl {
            let (at_least, value) = match want.strip_prefix('>') {
                Some(v) => (true, v.to_string()),
                None => (false, want.clone()),
            };
            let mut item = Item {
                setting: name.clone(),
                want: want.clone(),
                outcome: Outcome::Unchanged {
                    value: String::new(),
                },
            };
            if !self.allow.sysctl {
                item.outcome = not_allowed("sysctl");
                plan.push(Planned::nothing(item));
                continue;
            }
            match sysctl::read(name) {
                Err(e) => {
                    item.outcome = sysctl_outcome(e);
                    plan.push(Planned::nothing(item));
                }
                Ok(cur) => {
                    let keep = cur == value
                        || (at_least
                            && cur
                                .parse::<i64>()
                                .ok()
                                .zip(value.parse::<i64>().ok())
                                .is_some_and(|(c, v)| c >= v));
                    if keep {
                        item.outcome = Outcome::Unchanged { value: cur };
                        plan.push(Planned::nothing(item));
                    } else {
                        item.outcome = Outcome::Applied {
                            from: cur.clone(),
                            to: value.clone(),
                        };
                        plan.push(Planned {
                            item,
                            saved: Some(Saved::Sysctl {
                                name: name.clone(),
                                previous: cur,
                            }),
                            change: Some(Change::Sysctl(name.clone(), value)),
                            feature_set: false,
                        });
                    }
                }
            }
        }
        let needs_link = !p.nic.is_empty() || p.mtu.is_some() || p.irq.is_some();
        let Some(l) = link else {
            if needs_link {
                plan.push(Planned::nothing(Item {
                    setting: "interface settings".into(),
                    want: "NIC, MTU, IRQ".into(),
                    outcome: Outcome::Unavailable {
                        why: "the agent's address is on no interface of this network namespace"
                            .into(),
                    },
                }));
            }
            return;
        };
        let nic_items = |plan: &mut Vec<Planned>, setting: String, want: String, o: Outcome| {
            plan.push(Planned::nothing(Item {
                setting,
                want,
                outcome: o,
            }))
        };
        if !p.nic.is_empty() {
            let want_desc = |k: &str| format!("{}/{k}", l.name);
            if !self.allow.nic {
                for (g, on) in &p.nic.features {
                    nic_items(plan, want_desc(g), on_off(*on), not_allowed("nic"));
                }
                if let Some(r) = &p.nic.rings {
                    nic_items(
                        plan,
                        want_desc("rings"),
                        format!("rx {} tx {}", fmt_opt(r.rx), fmt_opt(r.tx)),
                        not_allowed("nic"),
                    );
                }
                if let Some(c) = &p.nic.channels {
                    nic_items(
                        plan,
                        want_desc("channels"),
                        format!(
                            "rx {} tx {} combined {}",
                            fmt_opt(c.rx),
                            fmt_opt(c.tx),
                            fmt_opt(c.combined)
                        ),
                        not_allowed("nic"),
                    );
                }
                for (k, v) in &p.nic.coalesce {
                    nic_items(
                        plan,
                        want_desc(&format!("coalesce.{k}")),
                        v.to_string(),
                        not_allowed("nic"),
                    );
                }
            } else {
                match Ethtool::open() {
                    Err(e) => {
                        nic_items(
                            plan,
                            format!("{} NIC settings", l.name),
                            "ethtool".into(),
                            nl_outcome(&e, "NIC settings"),
                        );
                    }
                    Ok(mut et) => self.plan_nic(&mut et, p, l, plan),
                }
            }
        }
        if let Some(mtu) = p.mtu {
            let setting = format!("{}/mtu", l.name);
            let item_o = if !self.allow.mtu {
                Err(not_allowed("mtu"))
            } else if l.mtu == mtu {
                Err(Outcome::Unchanged {
                    value: mtu.to_string(),
                })
            } else if l.max_mtu.is_some_and(|m| mtu > m)
                || l.min_mtu.is_some_and(|m| m > 0 && mtu < m)
            {
                Err(Outcome::Unavailable {
                    why: format!(
                        "{} takes MTUs {}..={}",
                        l.name,
                        fmt_opt(l.min_mtu),
                        fmt_opt(l.max_mtu)
                    ),
                })
            } else {
                Ok(())
            };
            match item_o {
                Err(o) => nic_items(plan, setting, mtu.to_string(), o),
                Ok(()) => plan.push(Planned::applied(
                    setting,
                    l.mtu.to_string(),
                    mtu.to_string(),
                    Saved::Mtu {
                        ifindex: l.index,
                        ifname: l.name.clone(),
                        previous: l.mtu,
                    },
                    Change::Mtu(l.index, mtu),
                )),
            }
        }
        if let Some(i) = &p.irq {
            let setting = format!("{}/irq-affinity", l.name);
            let want = format!("{}{}", i.cpus, if i.spread { " spread" } else { "" });
            if !self.allow.irq {
                nic_items(plan, setting, want, not_allowed("irq"));
            } else {
                match irq::irqs_of(&l.name) {
                    Err(e) => nic_items(plan, setting, want, Outcome::Unavailable { why: e }),
                    Ok(irqs) if irqs.is_empty() => nic_items(
                        plan,
                        setting,
                        want,
                        Outcome::Unavailable {
                            why: format!(
                                "{} has no interrupts of its own (a virtual device)",
                                l.name
                            ),
                        },
                    ),
                    Ok(irqs) => {
                        let spec = parse_cpu_spec(&i.cpus).unwrap_or(crate::profile::CpuSpec::All);
                        match irq::resolve_cpus(&spec, &l.name) {
                            Err(e) => {
                                nic_items(plan, setting, want, Outcome::Unavailable { why: e })
                            }
                            Ok(cpus) => {
                                for (k, n) in irqs.iter().enumerate() {
                                    let target = if i.spread {
                                        cpus[k % cpus.len()].to_string()
                                    } else {
                                        irq::format_cpu_list(&cpus)
                                    };
                                    let s = format!("IRQ {n} ({})", l.name);
                                    match irq::read_affinity(*n) {
                                        Err(e) => nic_items(
                                            plan,
                                            s,
                                            target,
                                            Outcome::Unavailable { why: e },
                                        ),
                                        Ok(cur) if cur == target => nic_items(
                                            plan,
                                            s,
                                            target.clone(),
                                            Outcome::Unchanged { value: cur },
                                        ),
                                        Ok(cur) => plan.push(Planned::applied(
                                            s,
                                            cur.clone(),
                                            target.clone(),
                                            Saved::Irq {
                                                irq: *n,
                                                previous: cur,
                                            },
                                            Change::Irq(*n, target),
                                        )),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn plan_nic(&self, et: &mut Ethtool, p: &Profile, l: &Link, plan: &mut Vec<Planned>) {
        let push = |plan: &mut Vec<Planned>, setting: String, want: String, o: Outcome| {
            plan.push(Planned::nothing(Item {
                setting,
                want,
                outcome: o,
            }))
        };
        if !p.nic.features.is_empty() {
            match et.features(l.index) {
                Err(e) => {
                    for (g, on) in &p.nic.features {
                        push(
                            plan,
                            format!("{}/{g}", l.name),
                            on_off(*on),
                            nl_outcome(&e, "offloads"),
                        );
                    }
                }
                Ok(f) => {
                    let mut want: BTreeMap<String, bool> = BTreeMap::new();
                    let mut previous: BTreeMap<String, bool> = BTreeMap::new();
                    let first = plan.len();
                    for (g, on) in &p.nic.features {
                        let setting = format!("{}/{g}", l.name);
                        let names = feature_group(g, &f.hw);
                        let on_now = names.iter().all(|n| f.active.contains(n));
                        let off_now = names.iter().all(|n| !f.active.contains(n));
                        if (*on && on_now) || (!*on && off_now) {
                            push(
                                plan,
                                setting,
                                on_off(*on),
                                Outcome::Unchanged { value: on_off(*on) },
                            );
                            continue;
                        }
                        let fixed: Vec<&String> = names
                            .iter()
                            .filter(|n| !f.hw.contains(*n) || f.nochange.contains(*n))
                            .collect();
                        if !fixed.is_empty() {
                            push(
                                plan,
                                setting,
                                on_off(*on),
                                Outcome::Unavailable {
                                    why: format!(
                                        "{} cannot change {} (fixed by its driver)",
                                        l.name,
                                        fixed
                                            .iter()
                                            .map(|s| s.as_str())
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    ),
                                },
                            );
                            continue;
                        }
                        for n in &names {
                            previous.insert(n.clone(), f.wanted.contains(n));
                            want.insert(n.clone(), *on);
                        }
                        plan.push(Planned {
                            item: Item {
                                setting,
                                want: on_off(*on),
                                outcome: Outcome::Applied {
                                    from: on_off(on_now),
                                    to: on_off(*on),
                                },
                            },
                            saved: None,
                            change: None,
                            feature_set: true,
                        });
                    }
                    // One request for every feature bit; the first applied
                    // group's entry carries the saved values and the change.
                    if let Some(pl) = plan[first..].iter_mut().find(|x| x.feature_set) {
                        pl.saved = Some(Saved::Features {
                            ifindex: l.index,
                            ifname: l.name.clone(),
                            previous,
                        });
                        pl.change = Some(Change::Features(l.index, want));
                    }
                }
            }
        }
        if let Some(r) = &p.nic.rings {
            let setting = format!("{}/rings", l.name);
            let want = format!("rx {} tx {}", fmt_opt(r.rx), fmt_opt(r.tx));
            match et.rings(l.index) {
                Err(e) => push(plan, setting, want, nl_outcome(&e, "ring sizes")),
                Ok(cur) => {
                    let too_big = [(r.rx, cur.rx_max, "rx"), (r.tx, cur.tx_max, "tx")]
                        .iter()
                        .find_map(|(w, m, n)| match (w, m) {
                            (Some(w), Some(m)) if w > m => {
                                Some(format!("{} takes at most {m} {n} descriptors", l.name))
                            }
                            _ => None,
                        });
                    if let Some(why) = too_big {
                        push(plan, setting, want, Outcome::Unavailable { why });
                    } else if r.rx.is_none_or(|v| Some(v) == cur.rx)
                        && r.tx.is_none_or(|v| Some(v) == cur.tx)
                    {
                        push(
                            plan,
                            setting,
                            want.clone(),
                            Outcome::Unchanged { value: want },
                        );
                    } else {
                        plan.push(Planned::applied(
                            setting,
                            format!("rx {} tx {}", fmt_opt(cur.rx), fmt_opt(cur.tx)),
                            want,
                            Saved::Rings {
                                ifindex: l.index,
                                ifname: l.name.clone(),
                                rx: r.rx.and(cur.rx),
                                tx: r.tx.and(cur.tx),
                            },
                            Change::Rings(l.index, r.rx, r.tx),
                        ));
                    }
                }
            }
        }
        if let Some(c) = &p.nic.channels {
            let setting = format!("{}/channels", l.name);
            let want = format!(
                "rx {} tx {} combined {}",
                fmt_opt(c.rx),
                fmt_opt(c.tx),
                fmt_opt(c.combined)
            );
            match et.channels(l.index) {
                Err(e) => push(plan, setting, want, nl_outcome(&e, "channel counts")),
                Ok(cur) => {
                    let too_big = [
                        (c.rx, cur.rx_max, "rx"),
                        (c.tx, cur.tx_max, "tx"),
                        (c.combined, cur.combined_max, "combined"),
                    ]
                    .iter()
                    .find_map(|(w, m, n)| match (w, m) {
                        (Some(w), Some(m)) if w > m => {
                            Some(format!("{} has at most {m} {n} channels", l.name))
                        }
                        (Some(_), None) => Some(format!("{} has no {n} channels", l.name)),
                        _ => None,
                    });
                    let from = format!(
                        "rx {} tx {} combined {}",
                        fmt_opt(cur.rx),
                        fmt_opt(cur.tx),
                        fmt_opt(cur.combined)
                    );
                    if let Some(why) = too_big {
                        push(plan, setting, want, Outcome::Unavailable { why });
                    } else if c.rx.is_none_or(|v| Some(v) == cur.rx)
                        && c.tx.is_none_or(|v| Some(v) == cur.tx)
                        && c.combined.is_none_or(|v| Some(v) == cur.combined)
                    {
                        push(plan, setting, want, Outcome::Unchanged { value: from });
                    } else {
                        plan.push(Planned::applied(
                            setting,
                            from,
                            want,
                            Saved::Channels {
                                ifindex: l.index,
                                ifname: l.name.clone(),
                                rx: c.rx.and(cur.rx),
                                tx: c.tx.and(cur.tx),
                                combined: c.combined.and(cur.combined),
                            },
                            Change::Channels(l.index, c.rx, c.tx, c.combined),
                        ));
                    }
                }
            }
        }
        if !p.nic.coalesce.is_empty() {
            let setting = format!("{}/coalesce", l.name);
            let want = p
                .nic
                .coalesce
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(" ");
            match et.coalesce(l.index) {
                Err(e) => push(plan, setting, want, nl_outcome(&e, "interrupt coalescing")),
                Ok(cur) => {
                    let missing: Vec<&String> = p
                        .nic
                        .coalesce
                        .keys()
                        .filter(|k| !cur.contains_key(*k))
                        .collect();
                    if !missing.is_empty() {
                        push(
                            plan,
                            setting,
                            want,
                            Outcome::Unavailable {
                                why: format!(
                                    "{} reports no {}",
                                    l.name,
                                    missing
                                        .iter()
                                        .map(|s| s.as_str())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            },
                        );
                    } else if p.nic.coalesce.iter().all(|(k, v)| cur.get(k) == Some(v)) {
                        push(
                            plan,
                            setting,
                            want.clone(),
                            Outcome::Unchanged { value: want },
                        );
                    } else {
                        let previous: BTreeMap<String, u32> =
                            p.nic.coalesce.keys().map(|k| (k.clone(), cur[k])).collect();
                        let from = previous
                            .iter()
                            .map(|(k, v)| format!("{k} {v}"))
                            .collect::<Vec<_>>()
                            .join(" ");
                        plan.push(Planned::applied(
                            setting,
                            from,
                            want,
                            Saved::Coalesce {
                                ifindex: l.index,
                                ifname: l.name.clone(),
                                previous,
                            },
                            Change::Coalesce(l.index, p.nic.coalesce.clone()),
                        ));
                    }
                }
            }
        }
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

fn on_off(b: bool) -> String {
    if b {
        "on".into()
    } else {
        "off".into()
    }
}

fn do_change(change: Change, relink: &mut bool) -> Result<(), Outcome> {
    match change {
        Change::Sysctl(name, value) => {
            sysctl::write(&name, &value).map_err(sysctl_outcome)?;
            match sysctl::read(&name) {
                Ok(v) if v == value => Ok(()),
                Ok(v) => Err(Outcome::Failed {
                    why: format!("written, but the kernel reads back {v:?}"),
                }),
                Err(e) => Err(sysctl_outcome(e)),
            }
        }
        Change::Features(ifindex, want) => {
            let mut et = Ethtool::open().map_err(|e| nl_outcome(&e, "offloads"))?;
            et.set_features(ifindex, &want)
                .map_err(|e| nl_outcome(&e, "offloads"))?;
            let f = et
                .features(ifindex)
                .map_err(|e| nl_outcome(&e, "offloads"))?;
            let off: Vec<&String> = want
                .iter()
                .filter(|(n, on)| f.active.contains(*n) != **on)
                .map(|(n, _)| n)
                .collect();
            if off.is_empty() {
                Ok(())
            } else {
                Err(Outcome::Failed {
                    why: format!(
                        "requested, but the device did not follow for {} (a dependency, e.g. TSO needs scatter-gather)",
                        off.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                })
            }
        }
        Change::Rings(i, rx, tx) => {
            *relink = true;
            let mut et = Ethtool::open().map_err(|e| nl_outcome(&e, "ring sizes"))?;
            et.set_rings(i, rx, tx)
                .map_err(|e| nl_outcome(&e, "ring sizes"))
        }
        Change::Channels(i, rx, tx, c) => {
            *relink = true;
            let mut et = Ethtool::open().map_err(|e| nl_outcome(&e, "channel counts"))?;
            et.set_channels(i, rx, tx, c)
                .map_err(|e| nl_outcome(&e, "channel counts"))
        }
        Change::Coalesce(i, v) => {
            let mut et = Ethtool::open().map_err(|e| nl_outcome(&e, "interrupt coalescing"))?;
            et.set_coalesce(i, &v)
                .map_err(|e| nl_outcome(&e, "interrupt coalescing"))
        }
        Change::Mtu(i, m) => {
            *relink = true;
            link::set_mtu(i, m).map_err(|e| nl_outcome(&e, "the MTU"))
        }
        Change::Irq(n, cpus) => irq::write_affinity(n, &cpus).map_err(|e| {
            if e.starts_with("not allowed") {
                Outcome::NotAllowed { why: e }
            } else {
                Outcome::Failed { why: e }
            }
        }),
        Change::Policy(spec, addr, port) => {
            policy::install(&spec, addr, port).map_err(|why| Outcome::Failed { why })
        }
    }
}

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
fn set_gone_aside(paths: &Paths, j: &Journal, g: journal::Gone) -> Result<String, JournalError> {
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
