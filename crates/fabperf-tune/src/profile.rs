//! Tuning profiles: the TOML a user writes, the validated form the runner
//! sends to agents, and the checks both sides run (an agent re-checks what
//! a runner sends: the runner may be hostile too).
//!
//! ```toml
//! name = "algebra-3-kernel-nic"
//! description = "kernel_optimizations + nic_optimizations"
//! outside = ["fs.file-max = 2097152: not a net.* sysctl"]   # parts of a published level fabperf does not apply
//!
//! [sysctl]                      # net.* only; dotted keys or quoted names
//! net.core.rmem_max = 16777216
//! "net.ipv4.tcp_rmem" = "4096 87380 16777216"
//! net.core.somaxconn = ">2048"  # at least (tuned's `>`): raised, never lowered
//!
//! [nic]                         # the agent's interface, through ethtool netlink
//! gro = true
//! lro = true
//! tso = false
//! gso = true
//! rings = { rx = 4096, tx = 4096 }
//! channels = { combined = 8 }
//! coalesce = { rx_usecs = 50, adaptive_rx = false }
//!
//! [link]
//! mtu = 9000
//!
//! [irq]
//! cpus = "local"                # "local" (the NIC's NUMA node), "all", or a list "0-3,8"
//! spread = true                 # one CPU per IRQ, round robin; false: every IRQ on the whole set
//! ```

use crate::ethtool::{COALESCE_PARAMS, FEATURE_GROUPS};
use fabperf_planfile::{Diagnostics, Spanned};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

/// Largest profile file read.
pub const MAX_PROFILE_BYTES: u64 = 256 << 10;
/// Most sysctls one profile may set.
pub const MAX_SYSCTLS: usize = 256;

/// Ring sizes to request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingsReq {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx: Option<u32>,
}

/// Channel (queue) counts to request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelsReq {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combined: Option<u32>,
}

/// NIC settings, applied to the interface the agent serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    /// Offload groups on or off: gro, lro, tso, gso, gro_hw.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rings: Option<RingsReq>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelsReq>,
    /// rx_usecs, rx_frames, tx_usecs, tx_frames, adaptive_rx, adaptive_tx.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub coalesce: BTreeMap<String, u32>,
}

impl Nic {
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
            && self.rings.is_none()
            && self.channels.is_none()
            && self.coalesce.is_empty()
    }
}

/// IRQ affinity of the interface's interrupts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Irq {
    /// `local`, `all` or a CPU list such as `0-3,8`.
    pub cpus: String,
    #[serde(default)]
    pub spread: bool,
}

/// A validated tuning profile (also the wire form the runner sends).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// net.* sysctl name -> value (fields separated by one space; a leading
    /// `>` means "at least").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctl: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Nic::is_empty")]
    pub nic: Nic,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq: Option<Irq>,
    /// Parts of the published level this profile stands for that fabperf
    /// does not apply (reported with every measurement).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside: Vec<String>,
}

impl Profile {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        self.sysctl.is_empty() && self.nic.is_empty() && self.mtu.is_none() && self.irq.is_none()
    }

    /// A short hash of the profile's content (cell ids include it, so an
    /// edited profile is another measurement).
    pub fn hash(&self) -> String {
        use sha2::Digest;
        let text = serde_json::to_string(self).unwrap_or_default();
        hex::encode(&sha2::Sha256::digest(text.as_bytes())[..8])
    }

    /// Every check a profile must pass; all problems, in order.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Err(e) = check_profile_name(&self.name) {
            p.push(e);
        }
        if let Some(d) = &self.description {
            if let Err(e) = check_text(d, 1000, "description") {
                p.push(e);
            }
        }
        if self.sysctl.len() > MAX_SYSCTLS {
            p.push(format!(
                "{} sysctls: at most {MAX_SYSCTLS} per profile",
                self.sysctl.len()
            ));
        }
        for (k, v) in &self.sysctl {
            if let Err(e) = check_sysctl_name(k) {
                p.push(e);
                continue;
            }
            match check_sysctl_value(k, v) {
                Ok(n) if &n != v => p.push(format!(
                    "sysctl {k}: value {:?} is not normalized (send {n:?})",
                    crate::clip(v)
                )),
                Ok(_) => {}
                Err(e) => p.push(e),
            }
        }
        for g in self.nic.features.keys() {
            if !FEATURE_GROUPS.contains(&g.as_str()) {
                p.push(format!(
                    "unknown NIC feature {g:?}; one of: {}",
                    FEATURE_GROUPS.join(", ")
                ));
            }
        }
        if let Some(r) = &self.nic.rings {
            if r.rx.is_none() && r.tx.is_none() {
                p.push("rings: give rx and/or tx".into());
            }
            for (what, v) in [("rx", r.rx), ("tx", r.tx)] {
                if let Some(v) = v {
                    if let Err(e) = check_range(v, 1, 1 << 16, &format!("rings.{what}")) {
                        p.push(e);
                    }
                }
            }
        }
        if let Some(c) = &self.nic.channels {
            if c.rx.is_none() && c.tx.is_none() && c.combined.is_none() {
                p.push("channels: give rx, tx and/or combined".into());
            }
            for (what, v) in [("rx", c.rx), ("tx", c.tx), ("combined", c.combined)] {
                if let Some(v) = v {
                    if let Err(e) = check_range(v, 1, 4096, &format!("channels.{what}")) {
                        p.push(e);
                    }
                }
            }
        }
        for (k, v) in &self.nic.coalesce {
            match COALESCE_PARAMS.iter().find(|(n, _, _)| n == k) {
                None => p.push(format!(
                    "unknown coalesce parameter {k:?}; one of: {}",
                    COALESCE_PARAMS.map(|c| c.0).join(", ")
                )),
                Some((_, _, true)) => {
                    if *v > 1 {
                        p.push(format!("coalesce.{k} is true or false, got {v}"));
                    }
                }
                Some((n, _, false)) => {
                    let max = if n.ends_with("usecs") {
                        100_000
                    } else {
                        65_536
                    };
                    if let Err(e) = check_range(*v, 0, max, &format!("coalesce.{k}")) {
                        p.push(e);
                    }
                }
            }
        }
        if let Some(m) = self.mtu {
            if let Err(e) = check_range(m, 576, 65_535, "mtu") {
                p.push(e);
            }
        }
        if let Some(i) = &self.irq {
            if let Err(e) = parse_cpu_spec(&i.cpus) {
                p.push(e);
            }
        }
        if self.outside.len() > 64 {
            p.push("outside: at most 64 entries".into());
        }
        for o in &self.outside {
            if let Err(e) = check_text(o, 300, "an `outside` entry") {
                p.push(e);
            }
        }
        p
    }

    /// The profile as received: every check passes or the first problems
    /// are the error.
    pub fn validate(&self) -> Result<(), String> {
        let p = self.problems();
        if p.is_empty() {
            Ok(())
        } else {
            Err(format!("profile {:?}: {}", self.name, p.join("; ")))
        }
    }
}

fn check_range(v: u32, lo: u32, hi: u32, what: &str) -> Result<(), String> {
    if v < lo || v > hi {
        Err(format!("{what} = {v} is out of range {lo}..={hi}"))
    } else {
        Ok(())
    }
}

fn check_text(s: &str, max: usize, what: &str) -> Result<(), String> {
    if s.chars().count() > max {
        return Err(format!("{what} is longer than {max} characters"));
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(format!("{what} holds control characters"));
    }
    Ok(())
}

/// A profile's name: letters, digits, `-`, `_`, `.`, 1 to 64, starting
/// with a letter or digit.
pub fn check_profile_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && n.as_bytes()[0].is_ascii_alphanumeric()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "profile name {:?}: 1 to 64 letters, digits, '-', '_', '.', starting with a letter or digit",
            crate::clip(n)
        ))
    }
}

/// A sysctl name fabperf may write: `net.` followed by 1 to 7 components of
/// letters, digits, `_` and `-` (no `/`, no `..`: the name maps to a path
/// under /proc/sys/net and nowhere else).
pub fn check_sysctl_name(n: &str) -> Result<(), String> {
    let parts: Vec<&str> = n.split('.').collect();
    if parts.first() != Some(&"net") {
        return Err(format!(
            "sysctl {:?}: fabperf changes only net.* sysctls (networking); others (kernel.*, vm.*, fs.*) are host-wide and outside what a network test may touch: list them under `outside` if the level you reproduce sets them",
            crate::clip(n)
        ));
    }
    if n.len() > 128
        || parts.len() < 2
        || parts.len() > 8
        || parts[1..].iter().any(|p| {
            p.is_empty()
                || p.len() > 64
                || !p
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
    {
        return Err(format!(
            "sysctl {:?} is not a sysctl name (net.COMPONENT[.COMPONENT...], letters, digits, '_' and '-'; no '/', '..' or empty parts)",
            crate::clip(n)
        ));
    }
    Ok(())
}

/// Bounds of well-known sysctls: (name, fields, min, max). Values outside
/// are refused as absurd.
const BOUNDS: &[(&str, usize, i64, i64)] = &[
    ("net.core.rmem_max", 1, 4096, 1 << 30),
    ("net.core.wmem_max", 1, 4096, 1 << 30),
    ("net.core.rmem_default", 1, 4096, 1 << 30),
    ("net.core.wmem_default", 1, 4096, 1 << 30),
    ("net.core.optmem_max", 1, 1024, 1 << 24),
    ("net.core.netdev_max_backlog", 1, 1, 1 << 24),
    ("net.core.netdev_budget", 1, 1, 1 << 20),
    ("net.core.somaxconn", 1, 1, 1 << 24),
    ("net.core.busy_poll", 1, 0, 100_000),
    ("net.core.busy_read", 1, 0, 100_000),
    ("net.ipv4.tcp_rmem", 3, 1, 1 << 30),
    ("net.ipv4.tcp_wmem", 3, 1, 1 << 30),
    ("net.ipv4.tcp_mem", 3, 1, 1 << 40),
    ("net.ipv4.udp_mem", 3, 1, 1 << 40),
    ("net.ipv4.tcp_fin_timeout", 1, 1, 600),
    ("net.ipv4.tcp_max_syn_backlog", 1, 1, 1 << 24),
    ("net.ipv4.tcp_max_tw_buckets", 1, 0, 1 << 26),
    ("net.ipv4.tcp_fastopen", 1, 0, 0x7ff),
    ("net.ipv4.tcp_notsent_lowat", 1, 1, u32::MAX as i64),
    ("net.ipv4.tcp_sack", 1, 0, 1),
    ("net.ipv4.tcp_timestamps", 1, 0, 2),
    ("net.ipv4.tcp_window_scaling", 1, 0, 1),
    ("net.ipv4.tcp_slow_start_after_idle", 1, 0, 1),
    ("net.ipv4.tcp_low_latency", 1, 0, 1),
];

/// Check and normalize a sysctl value: fields separated by one space, each
/// an integer (within the name's bounds, else between -2^31 and 2^32) or a
/// word such as `bbr`; a leading `>` means "at least" (one integer field).
pub fn check_sysctl_value(name: &str, v: &str) -> Result<String, String> {
    let (at_least, body) = match v.trim().strip_prefix('>') {
        Some(rest) => (true, rest.trim()),
        None => (false, v.trim()),
    };
    let what = || format!("sysctl {name} = {:?}", crate::clip(v));
    if v.len() > 256 {
        return Err(format!("{}: longer than 256 characters", what()));
    }
    let fields: Vec<&str> = body.split_whitespace().collect();
    if fields.is_empty() || fields.len() > 8 {
        return Err(format!("{}: give 1 to 8 fields", what()));
    }
    let bounds = BOUNDS.iter().find(|b| b.0 == name);
    let mut nums = Vec::new();
    for f in &fields {
        match f.parse::<i64>() {
            Ok(n) => {
                let (lo, hi) = bounds.map_or((-(1i64 << 31), 1i64 << 32), |b| (b.2, b.3));
                if n < lo || n > hi {
                    return Err(format!(
                        "{}: {n} is out of the sane range {lo}..={hi} for this setting",
                        what()
                    ));
                }
                nums.push(n);
            }
            Err(_) => {
                let word = f.len() <= 64
                    && f.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
                    });
                if !word || bounds.is_some() {
                    return Err(format!(
                        "{}: {:?} is not {}",
                        what(),
                        crate::clip(f),
                        if bounds.is_some() {
                            "an integer"
                        } else {
                            "an integer or a word of letters, digits, '_', '-', '.', ':'"
                        }
                    ));
                }
            }
        }
    }
    if let Some(b) = bounds {
        if fields.len() != b.1 {
            return Err(format!("{}: {} takes {} field(s)", what(), name, b.1));
        }
        if b.1 == 3 && (nums[0] > nums[1] || nums[1] > nums[2]) {
            return Err(format!("{}: min <= default <= max is required", what()));
        }
    }
    if at_least && (fields.len() != 1 || nums.len() != 1) {
        return Err(format!("{}: `>N` (at least N) takes one integer", what()));
    }
    let joined = fields.join(" ");
    Ok(if at_least {
        format!(">{joined}")
    } else {
        joined
    })
}

/// A CPU set: `local`, `all`, or a list such as `0-3,8`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuSpec {
    Local,
    All,
    List(Vec<u32>),
}

/// Parse a CPU list (`0-3,8,10-11`), CPUs below 8192.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Err("an empty CPU list".into());
    }
    for part in s.trim().split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: u32 = a
            .parse()
            .map_err(|_| format!("CPU list {:?}: {part:?} is not N or N-M", crate::clip(s)))?;
        let b: u32 = b
            .parse()
            .map_err(|_| format!("CPU list {:?}: {part:?} is not N or N-M", crate::clip(s)))?;
        if a > b || b >= 8192 {
            return Err(format!(
                "CPU list {:?}: {part:?} is not a range of CPUs below 8192",
                crate::clip(s)
            ));
        }
        out.extend(a..=b);
        if out.len() > 8192 {
            return Err("CPU list names more than 8192 CPUs".into());
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

pub fn parse_cpu_spec(s: &str) -> Result<CpuSpec, String> {
    match s {
        "local" => Ok(CpuSpec::Local),
        "all" => Ok(CpuSpec::All),
        _ if s.len() > 256 => Err("irq.cpus is longer than 256 characters".into()),
        _ => parse_cpu_list(s)
            .map(CpuSpec::List)
            .map_err(|e| format!("irq.cpus: {e} (or \"local\", \"all\")")),
    }
}

// ------------------------------------------------------------ TOML

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    name: Option<Spanned<String>>,
    description: Option<Spanned<String>>,
    #[serde(default)]
    outside: Vec<Spanned<String>>,
    sysctl: Option<Spanned<toml::Table>>,
    nic: Option<Spanned<RawNic>>,
    link: Option<Spanned<RawLink>>,
    irq: Option<Spanned<Irq>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNic {
    gro: Option<bool>,
    lro: Option<bool>,
    tso: Option<bool>,
    gso: Option<bool>,
    gro_hw: Option<bool>,
    rings: Option<Spanned<RingsReq>>,
    channels: Option<Spanned<ChannelsReq>>,
    coalesce: Option<Spanned<BTreeMap<String, toml::Value>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    mtu: Option<Spanned<i64>>,
}

/// Flatten `[sysctl]`'s nested tables (`net.core.x = 1` is a dotted key)
/// into dotted names.
fn flatten(prefix: &str, t: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in t {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) => flatten(&name, inner, out),
            other => out.push((name, other.clone())),
        }
    }
}

/// Parse and check a profile's text on the plan-file layer
/// (`fabperf-planfile`). Errors are `FILE:LINE:COL: message`, all at once.
pub fn parse_profile(text: &str, file: &str) -> Result<Profile, Vec<String>> {
    fabperf_planfile::parse(text, file, check_raw)
        .map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

/// Every check of a profile's TOML, each problem recorded at its place.
fn check_raw(cx: &mut Diagnostics<'_>, raw: RawProfile) -> Profile {
    let text = cx.text();
    let mut p = Profile::default();
    match &raw.name {
        Some(n) => {
            if let Err(e) = check_profile_name(n.get_ref()) {
                cx.at(n.span(), e);
            }
            p.name = n.get_ref().clone();
        }
        None => cx.at(
            0..0,
            "a profile needs `name = \"...\"` (what reports call it)",
        ),
    }
    if let Some(d) = &raw.description {
        if let Err(e) = check_text(d.get_ref(), 1000, "description") {
            cx.at(d.span(), e);
        }
        p.description = Some(d.get_ref().clone());
    }
    for o in &raw.outside {
        if let Err(e) = check_text(o.get_ref(), 300, "an `outside` entry") {
            cx.at(o.span(), e);
        }
        p.outside.push(o.get_ref().clone());
    }
    if p.outside.len() > 64 {
        cx.at(raw.outside[64].span(), "outside: at most 64 entries");
    }
    if let Some(s) = &raw.sysctl {
        let mut flat = Vec::new();
        flatten("", s.get_ref(), &mut flat);
        // Locate each name in the table's text for errors.
        let region = s.span();
        let locate = |name: &str| -> Range<usize> {
            let last = name.rsplit('.').next().unwrap_or(name);
            // The table's span may cover only its header: search on.
            let hay = text.get(region.start..).unwrap_or("");
            hay.find(name)
                .or_else(|| hay.find(last))
                .map(|i| region.start + i..region.start + i + 1)
                .unwrap_or(region.clone())
        };
        if flat.len() > MAX_SYSCTLS {
            cx.at(
                region.clone(),
                format!("{} sysctls: at most {MAX_SYSCTLS} per profile", flat.len()),
            );
        }
        for (name, v) in flat {
            if let Err(e) = check_sysctl_name(&name) {
                cx.at(locate(&name), e);
                continue;
            }
            let text_v = match &v {
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::String(s) => s.clone(),
                toml::Value::Boolean(b) => u8::from(*b).to_string(),
                other => {
                    cx.at(
                        locate(&name),
                        format!(
                            "sysctl {name}: give a number, a string or true/false, not a {}",
                            other.type_str()
                        ),
                    );
                    continue;
                }
            };
            match check_sysctl_value(&name, &text_v) {
                Ok(_) if p.sysctl.contains_key(&name) => cx.at(
                    locate(&name),
                    format!("sysctl {name} is set twice (a quoted and a dotted key)"),
                ),
                Ok(n) => {
                    p.sysctl.insert(name, n);
                }
                Err(e) => cx.at(locate(&name), e),
            }
        }
    }
    if let Some(n) = &raw.nic {
        let nspan = n.span();
        let n = n.get_ref();
        for (g, v) in [
            ("gro", n.gro),
            ("lro", n.lro),
            ("tso", n.tso),
            ("gso", n.gso),
            ("gro_hw", n.gro_hw),
        ] {
            if let Some(v) = v {
                p.nic.features.insert(g.to_string(), v);
            }
        }
        p.nic.rings = n.rings.as_ref().map(|r| *r.get_ref());
        p.nic.channels = n.channels.as_ref().map(|c| *c.get_ref());
        if let Some(c) = &n.coalesce {
            for (k, v) in c.get_ref() {
                let val = match v {
                    toml::Value::Integer(i) if (0..=u32::MAX as i64).contains(i) => *i as u32,
                    toml::Value::Boolean(b) => u32::from(*b),
                    _ => {
                        cx.at(
                            c.span(),
                            format!("coalesce.{k}: give a non-negative integer or true/false"),
                        );
                        continue;
                    }
                };
                p.nic.coalesce.insert(k.clone(), val);
            }
        }
        let probe = Profile {
            name: "x".into(),
            nic: p.nic.clone(),
            ..Profile::default()
        };
        for e in probe.problems() {
            let span = if e.starts_with("rings") {
                n.rings.as_ref().map_or(nspan.clone(), |r| r.span())
            } else if e.starts_with("channels") {
                n.channels.as_ref().map_or(nspan.clone(), |r| r.span())
            } else if e.contains("coalesce") {
                n.coalesce.as_ref().map_or(nspan.clone(), |r| r.span())
            } else {
                nspan.clone()
            };
            cx.at(span, e);
        }
    }
    if let Some(l) = &raw.link {
        if let Some(m) = &l.get_ref().mtu {
            let v = *m.get_ref();
            if !(576..=65_535).contains(&v) {
                cx.at(m.span(), format!("mtu = {v} is out of range 576..=65535"));
            } else {
                p.mtu = Some(v as u32);
            }
        }
    }
    if let Some(i) = &raw.irq {
        if let Err(e) = parse_cpu_spec(&i.get_ref().cpus) {
            cx.at(i.span(), e);
        }
        p.irq = Some(i.get_ref().clone());
    }
    p
}

/// Read and check a profile file (read as every plan file is: a regular
/// file of at most [`MAX_PROFILE_BYTES`], UTF-8).
pub fn load_profile(path: &Path) -> Result<Profile, Vec<String>> {
    let f = fabperf_planfile::read_as(path, MAX_PROFILE_BYTES, "profile").map_err(|e| vec![e])?;
    parse_profile(&f.text, &f.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "algebra-3"
outside = ["fs.file-max = 2097152"]
[sysctl]
net.core.rmem_max = 16777216
"net.ipv4.tcp_rmem" = "4096   87380 16777216"
net.core.somaxconn = ">2048"
net.ipv4.tcp_sack = true
net.ipv4.tcp_congestion_control = "bbr"
[nic]
gro = true
tso = false
rings = { rx = 4096, tx = 4096 }
coalesce = { rx_usecs = 50, adaptive_rx = false }
[link]
mtu = 9000
[irq]
cpus = "0-3"
spread = true
"#;

    #[test]
    fn a_good_profile_parses_and_normalizes() {
        let p = parse_profile(GOOD, "p.toml").unwrap();
        assert_eq!(p.sysctl["net.ipv4.tcp_rmem"], "4096 87380 16777216");
        assert_eq!(p.sysctl["net.core.somaxconn"], ">2048");
        assert_eq!(p.sysctl["net.ipv4.tcp_sack"], "1");
        assert!(!p.nic.features["tso"]);
        assert_eq!(p.nic.coalesce["adaptive_rx"], 0);
        assert_eq!(p.mtu, Some(9000));
        p.validate().unwrap();
        // The wire form round-trips and keeps its hash.
        let back: Profile = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.hash(), p.hash());
        let mut other = p.clone();
        other.mtu = Some(1500);
        assert_ne!(other.hash(), p.hash());
    }

    #[test]
    fn paths_outside_net_and_traversals_are_refused() {
        for (name, want) in [
            ("kernel.numa_balancing", "only net.*"),
            ("vm.swappiness", "only net.*"),
            ("fs.file-max", "only net.*"),
            ("net", "not a sysctl name"),
            ("net..core", "not a sysctl name"),
            ("net.core/../../kernel.x", "not a sysctl name"),
            ("net.core.rmem_max/", "not a sysctl name"),
            ("net./etc/passwd", "not a sysctl name"),
            ("net.ipv4.conf.a\u{202e}b.rp_filter", "not a sysctl name"),
            ("net.ipv4.tcp_rmem\n", "not a sysctl name"),
            ("../net.core.x", "only net.*"),
        ] {
            let e = check_sysctl_name(name).unwrap_err();
            assert!(e.contains(want), "{name:?}: {e}");
        }
        let e = parse_profile(
            "name = \"x\"\n[sysctl]\nnet.core.x = 1\n\"net.core.x\" = 2\n",
            "twice.toml",
        )
        .unwrap_err();
        assert!(e[0].contains("set twice"), "{e:?}");
        let text = "name = \"x\"\n[sysctl]\n\"kernel.sched_min_granularity_ns\" = 1\n\"net.core.x/../y\" = 1\n";
        let e = parse_profile(text, "bad.toml").unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("bad.toml:3:"), "{e:?}");
        assert!(e[1].starts_with("bad.toml:4:"), "{e:?}");
    }

    #[test]
    fn absurd_values_are_refused() {
        for (k, v, want) in [
            ("net.core.rmem_max", "99999999999999", "sane range"),
            ("net.core.rmem_max", "-1", "sane range"),
            ("net.core.rmem_max", "lots", "not an integer"),
            ("net.ipv4.tcp_rmem", "4096 87380", "3 field"),
            ("net.ipv4.tcp_rmem", "16777216 87380 4096", "min <= default"),
            ("net.core.busy_poll", "5000000", "sane range"),
            ("net.ipv4.tcp_fin_timeout", "0", "sane range"),
            ("net.ipv4.foo", "99999999999", "sane range"),
            ("net.ipv4.foo", "$(reboot)", "not an integer or a word"),
            ("net.ipv4.foo", "a b c d e f g h i", "1 to 8 fields"),
            ("net.ipv4.foo", "", "1 to 8 fields"),
            ("net.ipv4.foo", ">abc", "at least"),
        ] {
            let e = check_sysctl_value(k, v).unwrap_err();
            assert!(e.contains(want), "{k} = {v:?}: {e}");
        }
        let long = "1 ".repeat(200);
        assert!(check_sysctl_value("net.ipv4.foo", &long).is_err());
        let text = "name = \"x\"\n[nic]\nrings = { rx = 0 }\nchannels = { combined = 100000 }\ncoalesce = { rx_usecs = 10000000, warp = 1 }\nfoo = true\n";
        let e = parse_profile(text, "n.toml").unwrap_err();
        assert!(e.iter().any(|m| m.contains("unknown field")), "{e:?}");
        let text = "name = \"x\"\n[nic]\nrings = { rx = 0 }\nchannels = { combined = 100000 }\ncoalesce = { rx_usecs = 10000000, warp = 1 }\n";
        let e = parse_profile(text, "n.toml").unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e[0].contains("rings.rx = 0") && e[0].starts_with("n.toml:3:"),
            "{e:?}"
        );
        assert!(e.iter().any(|m| m.contains("warp")), "{e:?}");
        let e = parse_profile("name = \"x\"\n[link]\nmtu = 68\n", "m.toml").unwrap_err();
        assert!(e[0].contains("576..=65535"), "{e:?}");
        let e = parse_profile("name = \"x\"\n[irq]\ncpus = \"3-1\"\n", "i.toml").unwrap_err();
        assert!(e[0].contains("CPU"), "{e:?}");
        assert!(parse_cpu_list("0-99999").is_err());
        assert_eq!(parse_cpu_list("0-2,7,2").unwrap(), vec![0, 1, 2, 7]);
    }

    #[test]
    fn a_hostile_wire_profile_is_refused_by_the_agent_check() {
        let mut p = parse_profile(GOOD, "p.toml").unwrap();
        p.sysctl.insert("kernel.panic".into(), "1".into());
        assert!(p.validate().unwrap_err().contains("only net.*"));
        let mut p = parse_profile(GOOD, "p.toml").unwrap();
        p.sysctl.insert("net.ipv4.tcp_rmem".into(), "1  2 3".into());
        assert!(p.validate().unwrap_err().contains("normalized"));
        let mut p = parse_profile(GOOD, "p.toml").unwrap();
        p.name = "../../etc".into();
        assert!(p.validate().is_err());
        let mut p = parse_profile(GOOD, "p.toml").unwrap();
        p.nic.features.insert("rx-all".into(), true);
        assert!(p.validate().unwrap_err().contains("unknown NIC feature"));
        let mut p = parse_profile(GOOD, "p.toml").unwrap();
        p.outside.push("a\x1b[2Jb".into());
        assert!(p.validate().unwrap_err().contains("control"));
        // Unknown wire fields are refused too.
        let e = serde_json::from_str::<Profile>(r#"{"name":"x","exec":"rm -rf /"}"#);
        assert!(e.is_err());
    }

    #[test]
    fn files_that_are_not_profiles_are_refused() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_profile(d.path()).unwrap_err()[0].contains("not a regular file"));
        let big = d.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; (MAX_PROFILE_BYTES + 1) as usize]).unwrap();
        assert!(load_profile(&big).unwrap_err()[0].contains("larger than"));
        let bin = d.path().join("bin.toml");
        std::fs::write(&bin, [0xff, 0xfe, 0]).unwrap();
        assert!(load_profile(&bin).unwrap_err()[0].contains("UTF-8"));
        assert!(
            load_profile(&d.path().join("missing.toml")).unwrap_err()[0].contains("cannot read")
        );
        let e = parse_profile("name = \n", "t.toml").unwrap_err();
        assert!(e[0].starts_with("t.toml:1:"), "{e:?}");
    }
}
