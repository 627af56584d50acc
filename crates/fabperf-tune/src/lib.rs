//! Tuning levels with guaranteed restore.
//!
//! A tuning profile ([`profile::Profile`], TOML) names net.* sysctls, NIC
//! settings (offloads, rings, channels, interrupt coalescing through the
//! ethtool netlink interface), the MTU and IRQ affinity; a policy spec
//! ([`policy::PolicySpec`]) a number of policy rules for the rule-count
//! model. `fabperf run` makes them plan dimensions: for each cell the
//! runner asks every agent of the cell (test kind [`kind::TUNE`]) to apply
//! them; the agent journals every previous value before it changes
//! anything ([`journal`]), and restores at the end of the cell, on
//! SIGINT/SIGTERM, and — after SIGKILL or a crash — when it starts again or
//! on `fabperf tune restore` ([`tuner`]). Settings an agent may not or
//! cannot change are reported, setting by setting, never skipped in
//! silence.
//!
//! Layout: one file per kind of setting (sysctl, ethtool, link, irq, policy) and the
//! profile/journal formats; `tuner/` applies a profile: plan, change, restore.

pub mod ethtool;
pub mod irq;
pub mod journal;
pub mod kind;
pub mod link;
pub mod nl;
pub mod policy;
pub mod profile;
pub mod sysctl;
pub mod tuner;

pub use kind::{end_tune, open_tune, TuneKind, TuneParams, TUNE};
pub use policy::PolicySpec;
pub use profile::{load_profile, parse_profile, Profile};
pub use tuner::{Allow, ApplyReport, RestoreReport, Tuner};

/// Text from a file or a peer, cut and escaped for a message.
pub(crate) fn clip(s: &str) -> String {
    let mut t: String = s.chars().take(80).collect();
    if s.chars().count() > 80 {
        t.push('…');
    }
    fabperf_proto::text::escape(&t)
}

/// An OS error without Rust's "(os error N)" suffix.
pub(crate) fn os_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
