//! What `fabperf mtu` found for a path, as JSON (`fabperf.mtu/1`) and text.

use crate::path::Interface;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Value of the report's `schema` field.
pub const MTU_SCHEMA: &str = "fabperf.mtu/1";

/// A whole `fabperf mtu` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MtuReport {
    pub schema: String,
    /// The node the probes were sent from.
    pub hostname: String,
    pub paths: Vec<PathReport>,
}

/// One direction's (or the ICMP round trip's) result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crossing {
    /// The largest IP packet that crossed unfragmented (DF set), bytes.
    pub mtu: u32,
    /// Its payload: UDP payload, or ICMP echo data.
    pub payload: u32,
    /// `sending interface` when that was the largest size that could be
    /// sent (the path may carry more), else `path`.
    pub limited_by: String,
    pub probes: u32,
    /// The last "too big" report: the MTU it named and who sent it (absent
    /// when this host's own stack refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_big_mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_big_from: Option<IpAddr>,
}

/// One path: from this host to one address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// The host as given (name or address).
    pub target: String,
    pub addr: SocketAddr,
    /// This host's address toward it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
    /// The interface the probes left through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<Interface>,
    /// The interface the agent answered from, as it reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_interface: Option<Interface>,
    /// UDP probes to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<Crossing>,
    /// UDP datagrams the agent sent back on request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Crossing>,
    /// ICMP echo (a request and its same-size reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp: Option<Crossing>,
    /// Methods not run, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Configured MTUs the path does not carry, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<Mismatch>,
}

/// An interface configured for more than the path carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// `local` (this host's interface) or `agent` (the agent's).
    pub side: String,
    pub interface: String,
    pub configured: u32,
    pub measured: u32,
    /// `forward`, `reverse` or `icmp`.
    pub by: String,
}

impl PathReport {
    /// The smallest MTU measured from this host's side (forward UDP, else
    /// the ICMP round trip).
    pub fn measured_local(&self) -> Option<(u32, &'static str)> {
        self.local_crossing().map(|(c, by)| (c.mtu, by))
    }

    /// The crossing measured from this host's side and how.
    pub fn local_crossing(&self) -> Option<(&Crossing, &'static str)> {
        match (&self.forward, &self.icmp) {
            (Some(f), _) => Some((f, "forward")),
            (None, Some(i)) => Some((i, "icmp")),
            _ => None,
        }
    }

    /// Fill `mismatches` from the figures.
    pub fn judge(&mut self) {
        let mut m = Vec::new();
        // Only a limit found on the path counts: a search that ended at the
        // largest packet the interface could send (loopback's 65536 is
        // above the largest IP packet) found no limit at all.
        if let (Some(i), Some((c, by))) = (&self.interface, self.local_crossing()) {
            let got = c.mtu;
            if c.limited_by == "path" && i.mtu > got {
                m.push(Mismatch {
                    side: "local".into(),
                    interface: i.name.clone(),
                    configured: i.mtu,
                    measured: got,
                    by: by.into(),
                });
            }
        }
        if let (Some(i), Some(r)) = (&self.agent_interface, &self.reverse) {
            if r.limited_by == "path" && i.mtu > r.mtu {
                m.push(Mismatch {
                    side: "agent".into(),
                    interface: i.name.clone(),
                    configured: i.mtu,
                    measured: r.mtu,
                    by: "reverse".into(),
                });
            }
        }
        self.mismatches = m;
    }

    /// The report in words (several lines).
    pub fn text(&self) -> String {
        // Names come from the agent (or a results file): escaped.
        let e = fabperf_results::escape::terminal;
        let mut s = format!("path to {} ({})", self.addr, e(&self.target));
        if let Some(l) = self.local {
            s.push_str(&format!(" from {l}"));
        }
        if let Some(i) = &self.interface {
            s.push_str(&format!(
                " via {} (MTU {}, {})",
                e(&i.name),
                i.mtu,
                e(&i.kind)
            ));
        }
        s.push('\n');
        for (who, i) in [
            ("this host", &self.interface),
            ("the agent", &self.agent_interface),
        ] {
            if let Some(d) = i.as_ref().and_then(Interface::describe_overhead) {
                s.push_str(&format!(
                    "  {who}: {}: {d}\n",
                    e(i.as_ref().map_or("", |i| i.name.as_str()))
                ));
            }
        }
        let row = |name: &str, c: &Option<Crossing>| -> String {
            match c {
                None => String::new(),
                Some(c) => {
                    let mut r = format!(
                        "  {name:<22} {:>6} bytes (payload {}), limited by the {}, {} probes",
                        c.mtu,
                        c.payload,
                        e(&c.limited_by),
                        c.probes
                    );
                    if let Some(m) = c.too_big_mtu {
                        r.push_str(&format!(
                            "; \"too big\" naming MTU {m} from {}",
                            c.too_big_from
                                .map_or("this host's stack".to_string(), |a| a.to_string())
                        ));
                    }
                    r.push('\n');
                    r
                }
            }
        };
        s.push_str(&row("forward (UDP, DF)", &self.forward));
        s.push_str(&row("reverse (UDP, DF)", &self.reverse));
        s.push_str(&row("round trip (ICMP, DF)", &self.icmp));
        for k in &self.skipped {
            s.push_str(&format!("  skipped: {}\n", e(k)));
        }
        if self.mismatches.is_empty() {
            if self.forward.is_some() || self.icmp.is_some() {
                s.push_str("  ok: the configured MTUs cross this path\n");
            }
        } else {
            for m in &self.mismatches {
                s.push_str(&format!(
                    "  MTU MISMATCH: {} {} is configured for {} but only {} crosses ({}): packets of {} to {} bytes are dropped; set its MTU to {}\n",
                    if m.side == "local" { "this host's" } else { "the agent's" },
                    e(&m.interface),
                    m.configured,
                    m.measured,
                    m.by,
                    m.measured + 1,
                    m.configured,
                    m.measured
                ));
            }
        }
        s
    }
}
