//! Making one planned change and reading it back.

use super::plan::{nl_outcome, sysctl_outcome};
use super::Outcome;
use crate::ethtool::Ethtool;
use crate::policy::{self, PolicySpec};
use crate::{irq, link, sysctl};
use std::collections::BTreeMap;
use std::net::IpAddr;

pub(super) enum Change {
    Sysctl(String, String),
    Features(u32, BTreeMap<String, bool>),
    Rings(u32, Option<u32>, Option<u32>),
    Channels(u32, Option<u32>, Option<u32>, Option<u32>),
    Coalesce(u32, BTreeMap<String, u32>),
    Mtu(u32, u32),
    Irq(u32, String),
    Policy(PolicySpec, IpAddr, u16),
}

pub(super) fn do_change(change: Change, relink: &mut bool) -> Result<(), Outcome> {
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
