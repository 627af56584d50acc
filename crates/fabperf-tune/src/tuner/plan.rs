//! What a profile asks for, read against the current values: one planned
//! item per setting (the value to save, the change to make), or the reason
//! it changes nothing (kept, not allowed, not available, failed).

use super::change::Change;
use super::{Item, Outcome, Tuner};
use crate::ethtool::{feature_group, Ethtool};
use crate::journal::Saved;
use crate::link::Link;
use crate::profile::{parse_cpu_spec, Profile};
use crate::sysctl::{self, SysctlError};
use crate::{irq, nl::NlError};
use std::collections::BTreeMap;

/// The previous value to save and the change to make, for one setting.
pub(super) struct Planned {
    pub(super) item: Item,
    pub(super) saved: Option<Saved>,
    pub(super) change: Option<Change>,
    /// One of the offload groups set by a single features request.
    pub(super) feature_set: bool,
}

impl Planned {
    /// An item the tuner changes from `from` to `to`, with what restores it
    /// and the change itself.
    pub(super) fn applied(
        setting: String,
        from: String,
        to: String,
        saved: Saved,
        change: Change,
    ) -> Planned {
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
    pub(super) fn nothing(item: Item) -> Planned {
        Planned {
            item,
            saved: None,
            change: None,
            feature_set: false,
        }
    }
}

pub(super) fn nl_outcome(e: &NlError, what: &str) -> Outcome {
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

pub(super) fn sysctl_outcome(e: SysctlError) -> Outcome {
    match e {
        SysctlError::Absent => Outcome::Unavailable {
            why: SysctlError::Absent.to_string(),
        },
        SysctlError::Denied(s) => Outcome::NotAllowed { why: s },
        SysctlError::Failed(s) => Outcome::Failed { why: s },
    }
}

pub(super) fn not_allowed(what: &str) -> Outcome {
    Outcome::NotAllowed {
        why: format!(
            "this agent does not change {what} (start it with --allow-tune including {what})"
        ),
    }
}

pub(super) fn fmt_opt(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

impl Tuner {
    pub(super) fn plan_profile(&self, p: &Profile, link: Option<&Link>, plan: &mut Vec<Planned>) {
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
}

pub(super) fn on_off(b: bool) -> String {
    if b {
        "on".into()
    } else {
        "off".into()
    }
}
