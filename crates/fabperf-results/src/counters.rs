//! Counter deltas over a measurement, as records carry them (`counters`).
//!
//! Each end of a test reads its counters just before and just after the measured interval
//! (`fabperf_detect::counters` reads them) and reports the counters that grew, grouped by
//! source: the RDMA port's counters and hardware counters, the netdev's statistics and its
//! driver's `ethtool -S` set, and the host's `/proc/net/snmp` and `/proc/net/netstat`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a group of counters comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSource {
    /// `/sys/class/infiniband/<dev>/ports/<p>/counters/`.
    RdmaPort,
    /// `/sys/class/infiniband/<dev>/ports/<p>/hw_counters/`.
    RdmaHw,
    /// `/sys/class/net/<if>/statistics/`.
    Netdev,
    /// The driver's statistics (`ethtool -S <if>`: the `SIOCETHTOOL` `ETHTOOL_GSTATS` set).
    Ethtool,
    /// `/proc/net/snmp` (`Ip.`, `Icmp.`, `Tcp.`, `Udp.`, ... keys).
    Snmp,
    /// `/proc/net/netstat` (`TcpExt.`, `IpExt.`, ... keys).
    Netstat,
}

impl CounterSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CounterSource::RdmaPort => "rdma_port",
            CounterSource::RdmaHw => "rdma_hw",
            CounterSource::Netdev => "netdev",
            CounterSource::Ethtool => "ethtool",
            CounterSource::Snmp => "snmp",
            CounterSource::Netstat => "netstat",
        }
    }
}

/// The unit of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Events or packets.
    Count,
    /// Bytes.
    Bytes,
    /// 4-byte words (IB PMA `port_xmit_data` / `port_rcv_data`): multiply by 4 for bytes.
    FourByteWords,
    /// Microseconds (mlx5 `*_pause_duration`).
    Microseconds,
}

/// The unit of counter `name` of `source`.
pub fn unit(source: CounterSource, name: &str) -> Unit {
    match (source, name) {
        (CounterSource::RdmaPort, "port_xmit_data" | "port_rcv_data") => Unit::FourByteWords,
        (CounterSource::Netdev | CounterSource::Ethtool, n) if n.ends_with("_bytes") => Unit::Bytes,
        (CounterSource::Ethtool, n) if n.ends_with("_pause_duration") => Unit::Microseconds,
        (CounterSource::Snmp | CounterSource::Netstat, n) if n.ends_with("Octets") => Unit::Bytes,
        _ => Unit::Count,
    }
}

/// What changed in one group of counters over the measured interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDelta {
    pub source: CounterSource,
    /// `mlx5_0 port 1`, `eth0`, or `host`.
    pub subject: String,
    /// The directory or file read (or `SIOCETHTOOL eth0` for the driver's set).
    pub path: String,
    /// Non-zero increases, in the counter's own unit (see `units`).
    pub deltas: BTreeMap<String, u64>,
    /// Units of the counters in `deltas` that are not plain counts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, Unit>,
    /// Counters that went down (reset, driver reload, or a 32-bit counter that wrapped): their
    /// change is unknown, so they are listed here instead of given a wrong delta.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset: Vec<String>,
}

impl CounterDelta {
    /// The delta of `name` in bytes, when its unit is bytes or 4-byte words.
    pub fn bytes(&self, name: &str) -> Option<u64> {
        let d = *self.deltas.get(name)?;
        match unit(self.source, name) {
            Unit::Bytes => Some(d),
            Unit::FourByteWords => d.checked_mul(4),
            Unit::Count | Unit::Microseconds => None,
        }
    }

    /// Apply `f` to every text field.
    pub fn map_text(&mut self, f: &impl Fn(&str) -> String) {
        self.subject = f(&self.subject);
        self.path = f(&self.path);
        self.deltas = std::mem::take(&mut self.deltas)
            .into_iter()
            .map(|(k, v)| (f(&k), v))
            .collect();
        self.units = std::mem::take(&mut self.units)
            .into_iter()
            .map(|(k, v)| (f(&k), v))
            .collect();
        for r in &mut self.reset {
            *r = f(r);
        }
    }
}

/// Both ends' counter deltas (`counters` in a record). An empty list means the end read its
/// counters and none changed; sources it could not read are in `*_missing`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    #[serde(default)]
    pub local: Vec<CounterDelta>,
    #[serde(default)]
    pub remote: Vec<CounterDelta>,
    /// Sources the client could not read, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_missing: Vec<String>,
    /// Sources the agent could not read, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_missing: Vec<String>,
}

impl Counters {
    /// Apply `f` to every text field.
    pub fn map_text(&mut self, f: &impl Fn(&str) -> String) {
        for d in self.local.iter_mut().chain(self.remote.iter_mut()) {
            d.map_text(f);
        }
        for m in self
            .local_missing
            .iter_mut()
            .chain(self.remote_missing.iter_mut())
        {
            *m = f(m);
        }
    }
}

/// Word parts of counter names that explain a figure going wrong: errors, retransmits and
/// timeouts, sequence errors, pauses, drops and discards, buffer overruns, congestion marks.
const MATTERS: &[&str] = &[
    "err",
    "retrans",
    "retry",
    "timeout",
    "seq",
    "duplicate",
    "pause",
    "discard",
    "drop",
    "out_of_buffer",
    "overrun",
    "missed",
    "fifo",
    "ecn",
    "cnp",
    "nak",
    "rnr",
    "symbol",
    "crc",
    "link_down",
    "Lost",
    "Overflow",
];

/// Whether a counter is one of the few the human output prints under the table (the JSON
/// and CSV carry all of them). Traffic totals (`*_bytes`, `*_packets`, `port_xmit_data`) are
/// left out.
pub fn matters(name: &str) -> bool {
    let short = name.rsplit('.').next().unwrap_or(name);
    MATTERS.iter().any(|m| short.contains(m))
        || short.contains("Err")
        || short.contains("Retrans")
        || short.contains("Drop")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bytes() {
        assert_eq!(
            unit(CounterSource::RdmaPort, "port_xmit_data"),
            Unit::FourByteWords
        );
        assert_eq!(unit(CounterSource::Netdev, "rx_bytes"), Unit::Bytes);
        assert_eq!(
            unit(CounterSource::Ethtool, "rx_prio3_pause_duration"),
            Unit::Microseconds
        );
        assert_eq!(unit(CounterSource::Snmp, "IpExt.InOctets"), Unit::Bytes);
        assert_eq!(unit(CounterSource::RdmaHw, "out_of_sequence"), Unit::Count);
        let d = CounterDelta {
            source: CounterSource::RdmaPort,
            subject: "mlx5_0 port 1".into(),
            path: "/sys".into(),
            deltas: [("port_xmit_data".to_string(), u64::MAX / 2)]
                .into_iter()
                .collect(),
            units: BTreeMap::new(),
            reset: vec![],
        };
        assert_eq!(d.bytes("port_xmit_data"), None, "overflow is unknown");
        assert_eq!(d.bytes("absent"), None);
    }

    #[test]
    fn the_counters_that_matter() {
        for n in [
            "out_of_sequence",
            "packet_seq_err",
            "rcvd_seq_err",
            "local_ack_timeout_err",
            "rx_prio3_pause",
            "tx_pause_storm_warning_events",
            "rx_discards_phy",
            "rx_out_of_buffer",
            "rx_dropped",
            "Udp.RcvbufErrors",
            "Udp.InErrors",
            "Tcp.RetransSegs",
            "TcpExt.TCPLostRetransmit",
            "np_ecn_marked_roce_packets",
            "rp_cnp_handled",
            "symbol_error",
            "rx_crc_errors_phy",
            "duplicate_request",
            "completer_retry_err",
        ] {
            assert!(matters(n), "{n}");
        }
        for n in [
            "rx_bytes",
            "tx_packets",
            "port_xmit_data",
            "Tcp.OutSegs",
            "Udp.InDatagrams",
            "sent_pkts",
            "rdma_sends",
        ] {
            assert!(!matters(n), "{n}");
        }
    }

    #[test]
    fn counters_serialize_both_ends_even_when_empty() {
        let v = serde_json::to_value(Counters::default()).unwrap();
        assert_eq!(v, serde_json::json!({"local": [], "remote": []}));
        let back: Counters = serde_json::from_str("{}").unwrap();
        assert_eq!(back, Counters::default());
    }
}
