//! Egress rate limits set with `tc`: what a shaped link really carries.
//!
//! A veth always reports `speed` 10000 and a NIC its line rate, whatever `tc` does to it; a root
//! `tbf`, an `htb` whose default class has a ceiling, or a `netem` with a `rate` cap what leaves
//! the interface. [`egress_limit`] computes that cap from the interface's qdiscs and classes
//! (read live through rtnetlink, or from a snapshot's `fabperf-tc.json`).

use netlink_packet_core::NlasIterator;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Value of the `schema` field of `fabperf-tc.json`.
pub const TC_SCHEMA: &str = "fabperf.tc/1";

/// A qdisc or class handle, `major:minor` in hex as `tc` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct TcHandle {
    pub major: u16,
    pub minor: u16,
}

impl TcHandle {
    /// `TC_H_ROOT`: the parent of a root qdisc.
    pub const ROOT: TcHandle = TcHandle {
        major: 0xffff,
        minor: 0xffff,
    };

    /// Parse `root`, `1:`, `1:10`, `ffff:fff1` (hex, as `tc` prints).
    pub fn parse(s: &str) -> Option<TcHandle> {
        if s == "root" {
            return Some(TcHandle::ROOT);
        }
        let (maj, min) = s.split_once(':')?;
        let major = u16::from_str_radix(maj, 16).ok()?;
        let minor = if min.is_empty() {
            0
        } else {
            u16::from_str_radix(min, 16).ok()?
        };
        Some(TcHandle { major, minor })
    }
}

impl fmt::Display for TcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == TcHandle::ROOT {
            f.write_str("root")
        } else if self.minor == 0 {
            write!(f, "{:x}:", self.major)
        } else {
            write!(f, "{:x}:{:x}", self.major, self.minor)
        }
    }
}

impl Serialize for TcHandle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TcHandle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TcHandle::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not a tc handle")))
    }
}

/// One qdisc or traffic class of an interface, with the rates fabperf understands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcObject {
    #[serde(default)]
    pub ifindex: u32,
    pub ifname: String,
    /// `tbf`, `htb`, `netem`, `mq`, `fq_codel`, ...
    pub kind: String,
    /// A traffic class (htb) rather than a qdisc.
    #[serde(default)]
    pub class: bool,
    pub handle: TcHandle,
    pub parent: TcHandle,
    /// Rate in bit/s: tbf `rate`, htb class `rate`, netem `rate` (null when none).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// htb class `ceil`, bit/s.
    #[serde(default)]
    pub ceil_bps: Option<u64>,
    /// htb qdisc `default` class minor number (null: unclassified traffic is not shaped).
    #[serde(default)]
    pub default_class: Option<u16>,
}

/// The `fabperf-tc.json` file of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcSnapshot {
    pub schema: String,
    pub objects: Vec<TcObject>,
}

const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_RATE64: u16 = 6;
const TCA_HTB_CEIL64: u16 = 7;
const TCA_NETEM_RATE: u16 = 6;
const TCA_NETEM_RATE64: u16 = 8;
/// `sizeof(struct tc_netem_qopt)`: netem's options start with it, attributes follow.
const NETEM_QOPT_LEN: usize = 24;
/// Offset of `rate` (bytes/s) in `struct tc_ratespec`.
const RATESPEC_RATE: usize = 8;
const RATESPEC_LEN: usize = 12;

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_of(b: &[u8]) -> Option<u64> {
    let s: [u8; 8] = b.get(..8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(s))
}

/// A 32-bit `tc_ratespec.rate` in bytes/s as bit/s; `u32::MAX` means "see the 64-bit attribute".
fn ratespec_bps(b: &[u8], at: usize) -> Option<u64> {
    let r = u32_at(b, at + RATESPEC_RATE)?;
    (r != 0 && r != u32::MAX).then(|| u64::from(r) * 8)
}

fn bytes64_bps(b: &[u8]) -> Option<u64> {
    u64_of(b).filter(|r| *r > 0).map(|r| r.saturating_mul(8))
}

/// Whether a qdisc kind has classes worth dumping (RTM_GETTCLASS).
pub fn has_classes(kind: &str) -> bool {
    kind == "htb"
}

/// Fill the rates of `obj` from its raw `TCA_OPTIONS` payload. Anything malformed leaves the
/// rates unknown.
pub fn decode_options(obj: &mut TcObject, opts: &[u8]) {
    let attrs = |b: &[u8]| -> Vec<(u16, Vec<u8>)> {
        NlasIterator::new(b)
            .map_while(|n| n.ok())
            .map(|n| (n.kind(), n.value().to_vec()))
            .collect()
    };
    match (obj.kind.as_str(), obj.class) {
        ("tbf", false) => {
            let mut r32 = None;
            let mut r64 = None;
            for (k, v) in attrs(opts) {
                match k {
                    TCA_TBF_PARMS => r32 = ratespec_bps(&v, 0),
                    TCA_TBF_RATE64 => r64 = bytes64_bps(&v),
                    _ => {}
                }
            }
            obj.rate_bps = r64.or(r32);
        }
        ("htb", false) => {
            for (k, v) in attrs(opts) {
                if k == TCA_HTB_INIT {
                    obj.default_class = u32_at(&v, 8)
                        .filter(|d| *d != 0)
                        .and_then(|d| u16::try_from(d).ok());
                }
            }
        }
        ("htb", true) => {
            let (mut r32, mut c32, mut r64, mut c64) = (None, None, None, None);
            for (k, v) in attrs(opts) {
                match k {
                    TCA_HTB_PARMS => {
                        r32 = ratespec_bps(&v, 0);
                        c32 = ratespec_bps(&v, RATESPEC_LEN);
                    }
                    TCA_HTB_RATE64 => r64 = bytes64_bps(&v),
                    TCA_HTB_CEIL64 => c64 = bytes64_bps(&v),
                    _ => {}
                }
            }
            obj.rate_bps = r64.or(r32);
            obj.ceil_bps = c64.or(c32);
        }
        ("netem", false) => {
            let Some(rest) = opts.get(NETEM_QOPT_LEN..) else {
                return;
            };
            let mut r32 = None;
            let mut r64 = None;
            for (k, v) in attrs(rest) {
                match k {
                    TCA_NETEM_RATE => {
                        r32 = u32_at(&v, 0).filter(|r| *r > 0).map(|r| u64::from(r) * 8)
                    }
                    TCA_NETEM_RATE64 => r64 = bytes64_bps(&v),
                    _ => {}
                }
            }
            obj.rate_bps = r64.or(r32);
        }
        _ => {}
    }
}

/// A rate as people write it: `1 Gbit/s`, `250 Mbit/s`, `1.5 Gbit/s`.
pub fn rate_text(bps: u64) -> String {
    let (v, unit) = if bps >= 1_000_000_000 {
        (bps as f64 / 1e9, "Gbit/s")
    } else if bps >= 1_000_000 {
        (bps as f64 / 1e6, "Mbit/s")
    } else if bps >= 1_000 {
        (bps as f64 / 1e3, "kbit/s")
    } else {
        (bps as f64, "bit/s")
    };
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {unit}")
}

/// The egress cap of an interface and the `tc` objects that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaping {
    pub rate_bps: u64,
    /// E.g. `tbf 8001: (root qdisc) rate 1 Gbit/s`.
    pub text: String,
}

/// Deepest qdisc nesting followed (a snapshot can describe a cycle).
const MAX_DEPTH: usize = 8;

fn min_shaping(a: Option<Shaping>, b: Option<Shaping>) -> Option<Shaping> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.rate_bps < a.rate_bps { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn qdisc_limit(objs: &[&TcObject], q: &TcObject, depth: usize) -> Option<Shaping> {
    if depth > MAX_DEPTH {
        return None;
    }
    let where_ = if q.parent == TcHandle::ROOT {
        "root qdisc".to_string()
    } else {
        format!("under {}", q.parent)
    };
    let children = |parent_filter: &dyn Fn(&TcHandle) -> bool| -> Vec<&TcObject> {
        objs.iter()
            .copied()
            .filter(|o| !o.class && o.handle != q.handle && parent_filter(&o.parent))
            .collect()
    };
    match q.kind.as_str() {
        "tbf" | "netem" => {
            let own = q.rate_bps.map(|r| Shaping {
                rate_bps: r,
                text: format!("{} {} ({where_}) rate {}", q.kind, q.handle, rate_text(r)),
            });
            let inner = children(&|p| p.major == q.handle.major)
                .into_iter()
                .filter_map(|c| qdisc_limit(objs, c, depth + 1))
                .min_by_key(|s| s.rate_bps);
            min_shaping(own, inner)
        }
        "htb" => {
            let def = TcHandle {
                major: q.handle.major,
                minor: q.default_class?,
            };
            // From the default class up to the top: the smallest ceiling caps it.
            let mut best: Option<Shaping> = None;
            let mut at = def;
            for _ in 0..MAX_DEPTH {
                let Some(c) = objs.iter().find(|o| o.class && o.handle == at) else {
                    break;
                };
                if let Some(r) = c.ceil_bps.or(c.rate_bps) {
                    best = min_shaping(
                        best,
                        Some(Shaping {
                            rate_bps: r,
                            text: format!(
                                "htb {} ({where_}) default class {def}: class {} ceil {}",
                                q.handle,
                                c.handle,
                                rate_text(r)
                            ),
                        }),
                    );
                }
                if c.parent.minor == 0 || c.parent == TcHandle::ROOT {
                    break;
                }
                at = c.parent;
            }
            // No such class: the kernel sends unclassified traffic unshaped (direct queue).
            best.as_ref()?;
            let leaf = children(&|p| *p == def)
                .into_iter()
                .filter_map(|c| qdisc_limit(objs, c, depth + 1))
                .min_by_key(|s| s.rate_bps);
            min_shaping(best, leaf)
        }
        "mq" | "mqprio" | "multiq" => {
            // One child per transmit queue: the sum, when every queue is capped.
            let kids = children(&|p| p.major == q.handle.major);
            if kids.is_empty() {
                return None;
            }
            let mut sum = 0u64;
            let mut texts = Vec::new();
            for c in kids {
                let s = qdisc_limit(objs, c, depth + 1)?;
                sum = sum.saturating_add(s.rate_bps);
                texts.push(s.text);
            }
            Some(Shaping {
                rate_bps: sum,
                text: format!(
                    "{} {} ({where_}), sum over its queues: {}",
                    q.kind,
                    q.handle,
                    texts.join("; ")
                ),
            })
        }
        _ => None,
    }
}

/// The egress rate cap `tc` puts on `ifname`, if any.
pub fn egress_limit(objs: &[TcObject], ifname: &str) -> Option<Shaping> {
    let mine: Vec<&TcObject> = objs.iter().filter(|o| o.ifname == ifname).collect();
    let root = mine
        .iter()
        .find(|o| !o.class && o.parent == TcHandle::ROOT)?;
    qdisc_limit(&mine, root, 0)
}

/// Parse a snapshot's `fabperf-tc.json`.
pub fn parse_tc_json(text: &str) -> Result<Vec<TcObject>, String> {
    let s: TcSnapshot = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    if s.schema != TC_SCHEMA {
        return Err(format!("schema {:?}, expected {TC_SCHEMA:?}", s.schema));
    }
    Ok(s.objects)
}

/// Write `fabperf-tc.json`.
pub fn to_tc_json(objects: &[TcObject]) -> String {
    serde_json::to_string_pretty(&TcSnapshot {
        schema: TC_SCHEMA.into(),
        objects: objects.to_vec(),
    })
    .expect("tc snapshot serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(kind: &str, handle: &str, parent: &str) -> TcObject {
        TcObject {
            ifindex: 2,
            ifname: "eth0".into(),
            kind: kind.into(),
            class: false,
            handle: TcHandle::parse(handle).unwrap(),
            parent: TcHandle::parse(parent).unwrap(),
            rate_bps: None,
            ceil_bps: None,
            default_class: None,
        }
    }

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut v = Vec::new();
        v.extend_from_slice(&(len as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn ratespec(bytes_per_s: u32) -> Vec<u8> {
        let mut r = vec![0u8; RATESPEC_LEN];
        r[RATESPEC_RATE..].copy_from_slice(&bytes_per_s.to_ne_bytes());
        r
    }

    #[test]
    fn handles_print_and_parse_like_tc() {
        for s in ["root", "1:", "1:10", "8001:", "ffff:fff1"] {
            assert_eq!(TcHandle::parse(s).unwrap().to_string(), s);
        }
        for bad in ["", "x:", "1", "10000:", "1:2:3"] {
            assert_eq!(TcHandle::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn tbf_rate_from_options_32_and_64_bit() {
        let mut parms = ratespec(125_000_000); // 1 Gbit/s
        parms.extend(vec![0u8; 24]);
        let mut t = q("tbf", "8001:", "root");
        decode_options(&mut t, &nla(TCA_TBF_PARMS, &parms));
        assert_eq!(t.rate_bps, Some(1_000_000_000));
        // 100 Gbit/s does not fit 32 bits of bytes/s: rate = ~0 and TCA_TBF_RATE64.
        let mut parms = ratespec(u32::MAX);
        parms.extend(vec![0u8; 24]);
        let mut opts = nla(TCA_TBF_PARMS, &parms);
        opts.extend(nla(TCA_TBF_RATE64, &12_500_000_000u64.to_ne_bytes()));
        let mut t = q("tbf", "8001:", "root");
        decode_options(&mut t, &opts);
        assert_eq!(t.rate_bps, Some(100_000_000_000));
        assert_eq!(
            egress_limit(&[t], "eth0").unwrap().text,
            "tbf 8001: (root qdisc) rate 100 Gbit/s"
        );
    }

    #[test]
    fn htb_default_class_chain_and_netem_rate() {
        let mut root = q("htb", "1:", "root");
        let mut glob = vec![0u8; 20];
        glob[8..12].copy_from_slice(&0x10u32.to_ne_bytes());
        decode_options(&mut root, &nla(TCA_HTB_INIT, &glob));
        assert_eq!(root.default_class, Some(0x10));
        let mk_class = |h: &str, p: &str, rate: u32, ceil: u32| {
            let mut c = q("htb", h, p);
            c.class = true;
            let mut o = ratespec(rate);
            o.extend(ratespec(ceil));
            o.extend(vec![0u8; 20]);
            decode_options(&mut c, &nla(TCA_HTB_PARMS, &o));
            c
        };
        let top = mk_class("1:1", "1:", 125_000_000, 125_000_000);
        let leaf = mk_class("1:10", "1:1", 12_500_000, 250_000_000);
        assert_eq!(leaf.ceil_bps, Some(2_000_000_000));
        let objs = vec![root.clone(), top.clone(), leaf.clone()];
        let s = egress_limit(&objs, "eth0").unwrap();
        assert_eq!(s.rate_bps, 1_000_000_000, "{s:?}");
        assert!(s.text.contains("class 1:1 ceil 1 Gbit/s"), "{}", s.text);
        // No default class: unclassified traffic leaves unshaped.
        let mut nodef = root.clone();
        nodef.default_class = None;
        assert_eq!(egress_limit(&[nodef, top, leaf], "eth0"), None);
        // netem's options: struct tc_netem_qopt, then attributes.
        let mut n = q("netem", "2:", "root");
        let mut opts = vec![0u8; NETEM_QOPT_LEN];
        let mut rate = 1_250_000u32.to_ne_bytes().to_vec(); // 10 Mbit/s
        rate.extend(vec![0u8; 12]);
        opts.extend(nla(TCA_NETEM_RATE, &rate));
        decode_options(&mut n, &opts);
        assert_eq!(n.rate_bps, Some(10_000_000));
        // tbf over a netem child: the smaller one wins.
        let mut t = q("tbf", "1:", "root");
        t.rate_bps = Some(1_000_000_000);
        let mut child = n.clone();
        child.parent = TcHandle::parse("1:1").unwrap();
        let s = egress_limit(&[t, child], "eth0").unwrap();
        assert_eq!(s.rate_bps, 10_000_000);
        assert!(s.text.starts_with("netem 2: (under 1:1)"), "{}", s.text);
    }

    #[test]
    fn mq_sums_capped_queues_and_ignores_uncapped() {
        let mq = q("mq", "1:", "root");
        let mut a = q("tbf", "10:", "1:1");
        a.rate_bps = Some(500_000_000);
        let mut b = q("tbf", "20:", "1:2");
        b.rate_bps = Some(500_000_000);
        let objs = vec![mq.clone(), a.clone(), b];
        assert_eq!(egress_limit(&objs, "eth0").unwrap().rate_bps, 1_000_000_000);
        let fq = q("fq_codel", "20:", "1:2");
        assert_eq!(egress_limit(&[mq, a, fq], "eth0"), None);
    }

    #[test]
    fn malformed_options_and_cycles_are_unknown_not_panics() {
        for kind in ["tbf", "htb", "netem"] {
            for class in [false, true] {
                for bytes in [
                    vec![],
                    vec![0xff; 3],
                    vec![4, 0, 1, 0],
                    vec![200, 0, 1, 0, 1, 2],
                    nla(1, &[1, 2, 3]),
                    nla(2, &[]),
                    nla(6, &[9; 3]),
                ] {
                    let mut o = q(kind, "1:", "root");
                    o.class = class;
                    decode_options(&mut o, &bytes);
                    assert_eq!(o.rate_bps, None, "{kind} {bytes:?}");
                }
            }
        }
        // A snapshot claiming a qdisc is its own grandchild terminates.
        let mut a = q("tbf", "1:", "root");
        a.rate_bps = Some(8);
        let mut b = q("tbf", "2:", "1:1");
        b.rate_bps = Some(16);
        let mut c = q("tbf", "1:", "2:1");
        c.rate_bps = Some(4);
        assert!(egress_limit(&[a, b, c], "eth0").is_some());
        assert!(parse_tc_json("{").is_err());
        assert!(parse_tc_json(r#"{"schema":"x","objects":[]}"#).is_err());
        assert!(parse_tc_json(
            r#"{"schema":"fabperf.tc/1","objects":[{"ifname":"a","kind":"tbf","handle":"zz","parent":"root"}]}"#
        )
        .is_err());
    }

    #[test]
    fn snapshot_round_trip() {
        let mut t = q("tbf", "8001:", "root");
        t.rate_bps = Some(1_000_000_000);
        let text = to_tc_json(std::slice::from_ref(&t));
        assert_eq!(parse_tc_json(&text).unwrap(), vec![t]);
        assert_eq!(rate_text(1_000_000_000), "1 Gbit/s");
        assert_eq!(rate_text(1_500_000_000), "1.5 Gbit/s");
        assert_eq!(rate_text(250_000_000), "250 Mbit/s");
    }
}
