//! NIC settings through the ethtool generic netlink family: offload
//! features (GRO, LRO, TSO, GSO), ring sizes, channel counts and interrupt
//! coalescing, read and written by interface index.
//!
//! Message and attribute numbers are those of the kernel's UAPI
//! (`include/uapi/linux/ethtool_netlink_generated.h`, family `ethtool`
//! version 1); bitsets are sent and read in the verbose form (bits by
//! name), so no feature index table is needed.

use crate::nl::{find, genl_family, parse_attrs, Attr, Attrs, Nl, NlError, NETLINK_GENERIC};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

const MSG_FEATURES_GET: u8 = 11;
const MSG_FEATURES_SET: u8 = 12;
const MSG_RINGS_GET: u8 = 15;
const MSG_RINGS_SET: u8 = 16;
const MSG_CHANNELS_GET: u8 = 17;
const MSG_CHANNELS_SET: u8 = 18;
const MSG_COALESCE_GET: u8 = 19;
const MSG_COALESCE_SET: u8 = 20;

const A_HEADER: u16 = 1;
const A_HEADER_DEV_INDEX: u16 = 1;
const A_HEADER_FLAGS: u16 = 3;
/// ETHTOOL_FLAG_OMIT_REPLY: no reply message to a set request.
const FLAG_OMIT_REPLY: u32 = 1 << 1;

const A_FEATURES_HW: u16 = 2;
const A_FEATURES_WANTED: u16 = 3;
const A_FEATURES_ACTIVE: u16 = 4;
const A_FEATURES_NOCHANGE: u16 = 5;
const A_BITSET_NOMASK: u16 = 1;
const A_BITSET_BITS: u16 = 3;
const A_BITSET_BITS_BIT: u16 = 1;
const A_BITSET_BIT_NAME: u16 = 2;
const A_BITSET_BIT_VALUE: u16 = 3;

const A_RINGS_RX_MAX: u16 = 2;
const A_RINGS_TX_MAX: u16 = 5;
const A_RINGS_RX: u16 = 6;
const A_RINGS_TX: u16 = 9;

const A_CHANNELS_RX_MAX: u16 = 2;
const A_CHANNELS_TX_MAX: u16 = 3;
const A_CHANNELS_COMBINED_MAX: u16 = 5;
const A_CHANNELS_RX_COUNT: u16 = 6;
const A_CHANNELS_TX_COUNT: u16 = 7;
const A_CHANNELS_COMBINED_COUNT: u16 = 9;

/// Coalescing parameters fabperf sets: (profile name, attribute, is a flag byte).
pub const COALESCE_PARAMS: [(&str, u16, bool); 6] = [
    ("rx_usecs", 2, false),
    ("rx_frames", 3, false),
    ("tx_usecs", 6, false),
    ("tx_frames", 7, false),
    ("adaptive_rx", 11, true),
    ("adaptive_tx", 12, true),
];

/// The offload groups a profile names, and the kernel features each
/// stands for (as `ethtool -K` groups them).
pub fn feature_group(group: &str, hw: &BTreeSet<String>) -> Vec<String> {
    match group {
        "gro" => vec!["rx-gro".into()],
        "lro" => vec!["rx-lro".into()],
        "gso" => vec!["tx-generic-segmentation".into()],
        "gro_hw" => vec!["rx-gro-hw".into()],
        // Every TCP segmentation feature the device has (IPv4, IPv6, ECN,
        // mangle-id, ...), as `ethtool -K tso` does.
        "tso" => {
            let mut v: Vec<String> = hw
                .iter()
                .filter(|f| f.starts_with("tx-tcp") && f.ends_with("-segmentation"))
                .cloned()
                .collect();
            if v.is_empty() {
                v.push("tx-tcp-segmentation".into());
            }
            v
        }
        _ => Vec::new(),
    }
}

/// The offload groups a profile may name.
pub const FEATURE_GROUPS: [&str; 5] = ["gro", "lro", "tso", "gso", "gro_hw"];

/// A device's features by kernel name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// Features the user may change.
    pub hw: BTreeSet<String>,
    pub wanted: BTreeSet<String>,
    pub active: BTreeSet<String>,
    /// Features fixed by the driver.
    pub nochange: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rings {
    pub rx: Option<u32>,
    pub tx: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx_max: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channels {
    pub rx: Option<u32>,
    pub tx: Option<u32>,
    pub combined: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx_max: Option<u32>,
    pub combined_max: Option<u32>,
}

/// An ethtool netlink session.
pub struct Ethtool {
    nl: Nl,
    family: u16,
}

fn header(a: &mut Attrs, ifindex: u32, flags: u32) {
    a.nest(A_HEADER).u32(A_HEADER_DEV_INDEX, ifindex);
    if flags != 0 {
        a.u32(A_HEADER_FLAGS, flags);
    }
    a.end();
}

/// The set bits of a verbose bitset attribute.
pub fn bitset_names(attr: &Attr<'_>) -> Result<BTreeSet<String>, NlError> {
    let inner = attr.nested()?;
    let list = find(&inner, A_BITSET_NOMASK).is_some();
    let mut out = BTreeSet::new();
    if let Some(bits) = find(&inner, A_BITSET_BITS) {
        for bit in bits.nested()? {
            if bit.kind != A_BITSET_BITS_BIT {
                continue;
            }
            let b = bit.nested()?;
            let Some(name) = find(&b, A_BITSET_BIT_NAME).map(Attr::string) else {
                continue;
            };
            // In list form every listed bit is set; otherwise the VALUE
            // flag says so.
            if list || find(&b, A_BITSET_BIT_VALUE).is_some() {
                out.insert(name);
            }
        }
    }
    Ok(out)
}

/// Parse a FEATURES_GET reply's attributes.
pub fn parse_features(payload: &[u8]) -> Result<Features, NlError> {
    let attrs = parse_attrs(payload)?;
    let get = |k| -> Result<BTreeSet<String>, NlError> {
        find(&attrs, k)
            .map(bitset_names)
            .unwrap_or(Ok(BTreeSet::new()))
    };
    Ok(Features {
        hw: get(A_FEATURES_HW)?,
        wanted: get(A_FEATURES_WANTED)?,
        active: get(A_FEATURES_ACTIVE)?,
        nochange: get(A_FEATURES_NOCHANGE)?,
    })
}

fn opt_u32(attrs: &[Attr<'_>], k: u16) -> Result<Option<u32>, NlError> {
    find(attrs, k).map(Attr::u32).transpose()
}

impl Ethtool {
    pub fn open() -> Result<Ethtool, NlError> {
        let mut nl = Nl::new(NETLINK_GENERIC)?;
        let family = genl_family(&mut nl, "ethtool").map_err(|e| match e {
            NlError::Kernel { errno, .. } if errno == libc::ENOENT => NlError::Kernel {
                errno,
                msg: Some("this kernel has no ethtool netlink interface (CONFIG_ETHTOOL_NETLINK, Linux 5.6+)".into()),
            },
            e => e,
        })?;
        Ok(Ethtool { nl, family })
    }

    fn call(&mut self, cmd: u8, attrs: &Attrs) -> Result<Vec<Vec<u8>>, NlError> {
        let mut p = vec![cmd, 1, 0, 0];
        p.extend_from_slice(attrs.bytes());
        let replies = self.nl.request(self.family, 0, &p)?;
        Ok(replies
            .into_iter()
            .filter(|r| r.msg_type == self.family)
            .map(|r| r.payload.get(4..).unwrap_or(&[]).to_vec())
            .collect())
    }

    fn get(&mut self, cmd: u8, ifindex: u32) -> Result<Vec<u8>, NlError> {
        let mut a = Attrs::new();
        header(&mut a, ifindex, 0);
        self.call(cmd, &a)?
            .into_iter()
            .next()
            .ok_or_else(|| NlError::Malformed(format!("no reply to ethtool command {cmd}")))
    }

    pub fn features(&mut self, ifindex: u32) -> Result<Features, NlError> {
        parse_features(&self.get(MSG_FEATURES_GET, ifindex)?)
    }

    /// Ask for features on or off (by kernel name).
    pub fn set_features(
        &mut self,
        ifindex: u32,
        want: &BTreeMap<String, bool>,
    ) -> Result<(), NlError> {
        let mut a = Attrs::new();
        header(&mut a, ifindex, FLAG_OMIT_REPLY);
        a.nest(A_FEATURES_WANTED).nest(A_BITSET_BITS);
        for (name, on) in want {
            a.nest(A_BITSET_BITS_BIT).str(A_BITSET_BIT_NAME, name);
            if *on {
                a.flag(A_BITSET_BIT_VALUE);
            }
            a.end();
        }
        a.end().end();
        self.call(MSG_FEATURES_SET, &a).map(|_| ())
    }

    pub fn rings(&mut self, ifindex: u32) -> Result<Rings, NlError> {
        let p = self.get(MSG_RINGS_GET, ifindex)?;
        let a = parse_attrs(&p)?;
        Ok(Rings {
            rx: opt_u32(&a, A_RINGS_RX)?,
            tx: opt_u32(&a, A_RINGS_TX)?,
            rx_max: opt_u32(&a, A_RINGS_RX_MAX)?,
            tx_max: opt_u32(&a, A_RINGS_TX_MAX)?,
        })
    }

    pub fn set_rings(
        &mut self,
        ifindex: u32,
        rx: Option<u32>,
        tx: Option<u32>,
    ) -> Result<(), NlError> {
        let mut a = Attrs::new();
        header(&mut a, ifindex, 0);
        if let Some(v) = rx {
            a.u32(A_RINGS_RX, v);
        }
        if let Some(v) = tx {
            a.u32(A_RINGS_TX, v);
        }
        self.call(MSG_RINGS_SET, &a).map(|_| ())
    }

    pub fn channels(&mut self, ifindex: u32) -> Result<Channels, NlError> {
        let p = self.get(MSG_CHANNELS_GET, ifindex)?;
        let a = parse_attrs(&p)?;
        Ok(Channels {
            rx: opt_u32(&a, A_CHANNELS_RX_COUNT)?,
            tx: opt_u32(&a, A_CHANNELS_TX_COUNT)?,
            combined: opt_u32(&a, A_CHANNELS_COMBINED_COUNT)?,
            rx_max: opt_u32(&a, A_CHANNELS_RX_MAX)?,
            tx_max: opt_u32(&a, A_CHANNELS_TX_MAX)?,
            combined_max: opt_u32(&a, A_CHANNELS_COMBINED_MAX)?,
        })
    }

    pub fn set_channels(
        &mut self,
        ifindex: u32,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    ) -> Result<(), NlError> {
        let mut a = Attrs::new();
        header(&mut a, ifindex, 0);
        for (k, v) in [
            (A_CHANNELS_RX_COUNT, rx),
            (A_CHANNELS_TX_COUNT, tx),
            (A_CHANNELS_COMBINED_COUNT, combined),
        ] {
            if let Some(v) = v {
                a.u32(k, v);
            }
        }
        self.call(MSG_CHANNELS_SET, &a).map(|_| ())
    }

    /// The coalescing parameters fabperf knows ([`COALESCE_PARAMS`]) that
    /// the device reports.
    pub fn coalesce(&mut self, ifindex: u32) -> Result<BTreeMap<String, u32>, NlError> {
        let p = self.get(MSG_COALESCE_GET, ifindex)?;
        let a = parse_attrs(&p)?;
        let mut out = BTreeMap::new();
        for (name, k, flag) in COALESCE_PARAMS {
            if let Some(at) = find(&a, k) {
                let v = if flag { at.u8()? as u32 } else { at.u32()? };
                out.insert(name.to_string(), v);
            }
        }
        Ok(out)
    }

    pub fn set_coalesce(
        &mut self,
        ifindex: u32,
        values: &BTreeMap<String, u32>,
    ) -> Result<(), NlError> {
        let mut a = Attrs::new();
        header(&mut a, ifindex, 0);
        for (name, k, flag) in COALESCE_PARAMS {
            if let Some(v) = values.get(name) {
                if flag {
                    a.u8(k, u8::from(*v != 0));
                } else {
                    a.u32(k, *v);
                }
            }
        }
        self.call(MSG_COALESCE_SET, &a).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bit(a: &mut Attrs, name: &str, on: bool) {
        a.nest(A_BITSET_BITS_BIT)
            .u32(1, 0)
            .str(A_BITSET_BIT_NAME, name);
        if on {
            a.flag(A_BITSET_BIT_VALUE);
        }
        a.end();
    }

    #[test]
    fn verbose_bitsets_in_list_and_mask_form() {
        let mut a = Attrs::new();
        // HW in list form: every listed bit is set.
        a.nest(A_FEATURES_HW)
            .flag(A_BITSET_NOMASK)
            .nest(A_BITSET_BITS);
        bit(&mut a, "rx-gro", false);
        bit(&mut a, "tx-tcp-segmentation", false);
        bit(&mut a, "tx-tcp6-segmentation", false);
        a.end().end();
        // ACTIVE in mask form: only bits with the value flag are set.
        a.nest(A_FEATURES_ACTIVE).nest(A_BITSET_BITS);
        bit(&mut a, "rx-gro", true);
        bit(&mut a, "rx-lro", false);
        a.end().end();
        let f = parse_features(a.bytes()).unwrap();
        assert_eq!(f.hw.len(), 3);
        assert!(f.active.contains("rx-gro") && !f.active.contains("rx-lro"));
        let tso = feature_group("tso", &f.hw);
        assert_eq!(tso, vec!["tx-tcp-segmentation", "tx-tcp6-segmentation"]);
        assert!(feature_group("nope", &f.hw).is_empty());
    }

    #[test]
    fn malformed_feature_replies_are_errors() {
        // A bitset whose BITS overruns, a truncated nest.
        let mut bad = Attrs::new();
        bad.nest(A_FEATURES_ACTIVE)
            .nest(A_BITSET_BITS)
            .u32(1, 1)
            .end()
            .end();
        let mut bytes = bad.bytes().to_vec();
        bytes[4] = 0xff;
        assert!(parse_features(&bytes).is_err());
        let _ = parse_features(&bytes[..6]);
        assert_eq!(parse_features(&[]).unwrap(), Features::default());
    }
}
