//! The result model shared by every fabperf test.
//!
//! One [`Record`] per measurement. Socket and RDMA tests, the suite and
//! (later) the matrix runner all emit the same record. Each export format
//! has its own module ([`json`], [`csv`], [`table`]); every warning a record
//! can carry is defined in [`warnings`].
//!
//! Rules: a key that does not apply to a test, or whose value is unknown,
//! is `None` (absent in JSON), never a fake zero; when a value is unknown a
//! warning says why. Every record is self-consistent ([`Record::check`]):
//! `bytes * 8 / duration_s / 1e9 == bw_gbps` and so on. Latency percentiles
//! come from an HdrHistogram holding every sample ([`LatencyHistogram`]),
//! which the record also carries (`lat_hist`).

mod check;
pub mod counters;
pub mod csv;
pub mod dims;
pub mod escape;
pub mod files;
pub mod finding;
pub mod interval;
pub mod json;
mod latency;
pub mod table;
pub mod warnings;

mod placement;
mod plausible;

pub use crate::counters::{CounterDelta, CounterSource, Counters, Unit};
pub use crate::csv::{csv_header, write_csv};
pub use finding::{Evidence, Finding, Severity};
pub use interval::{FlowSet, Interval, Progress, ProgressRecorder, WallClock};
pub use json::write_json_lines;
pub use latency::{HistError, LatencyHistogram, LatencyKind, LatencySummary, SendLag, V2Bytes};
pub use placement::{GpuMemory, Placement};
pub use plausible::BadValue;
pub use table::Table;
pub use warnings::{Note, Side, Warning};

use serde::{Deserialize, Serialize};

/// Version of the record layout. Bump when a key changes meaning or is
/// removed; adding an optional key does not need a bump.
///
/// 2: warnings are `{id, message}` objects; `udp.jitter_us` and
/// `udp.loss_pct` are absent when unknown; udp-lat reports late replies in
/// `udp.late` and its delay variation in `udp.ipdv_us` (no longer in
/// `reordered`/`jitter_us`); `bw_peak_gbps` is perftest's BW peak
/// (iteration mode only); bidirectional totals use the longer of the two
/// directions' intervals.
pub const SCHEMA_VERSION: u32 = 2;

/// The fabperf version string stamped into every record.
pub const FABPERF_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Transport of a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
    Rdma,
    /// ICMP echo (the `mtu` test's round trip).
    Icmp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Rdma => "rdma",
            Transport::Icmp => "icmp",
        }
    }
}

/// UDP accounting: the receiver's for udp-bw, the prober's for udp-lat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpStats {
    /// Datagrams (udp-bw) or probes (udp-lat) sent.
    pub sent: u64,
    /// Distinct datagrams the receiver got (duplicates and stale ones
    /// excluded), or probes answered in time.
    pub received: u64,
    /// sent - received: never received (udp-bw; reordered ones are not
    /// lost), or not answered within the probe timeout (udp-lat).
    pub lost: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// lost / sent * 100; absent when nothing was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
    /// udp-bw: datagrams that arrived after one with a higher sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reordered: Option<u64>,
    /// udp-bw: datagrams so far behind the newest (more than the reordering
    /// window) that a late one cannot be told from a duplicate; counted
    /// neither as received nor as duplicates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<u64>,
    /// udp-bw: RFC 3550 interarrival jitter, microseconds, from the
    /// sender's per-datagram timestamp and the receiving kernel's receive
    /// timestamp; absent when the receiver had no kernel timestamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_us: Option<f64>,
    /// udp-lat: replies that arrived after their probe was given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<u64>,
    /// udp-lat: delay variation between consecutive answered probes
    /// (|latency(n) - latency(n-1)|, RFC 5481's IPDV, smoothed with RFC
    /// 3550's 1/16 gain), microseconds, in the record's latency kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv_us: Option<f64>,
}

impl UdpStats {
    /// lost / sent * 100, or `None` when nothing was sent.
    pub fn loss_pct_of(lost: u64, sent: u64) -> Option<f64> {
        (sent > 0).then(|| lost as f64 * 100.0 / sent as f64)
    }
}

/// The host's CPU time over a test's measured interval (all CPUs, from
/// `/proc/stat`), in percent of one CPU: `cpus * 100` is a fully busy
/// host. Next to the test threads' own figure it shows the work the kernel
/// does for the test (a software RDMA device's protocol work is softirq
/// time no thread is charged with).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    /// User time (including nice).
    pub user_pct: f64,
    pub system_pct: f64,
    /// Hardware interrupt time.
    pub irq_pct: f64,
    /// Software interrupt time (network receive processing, rxe's work).
    pub softirq_pct: f64,
    /// Online CPUs the figures are summed over.
    pub cpus: u32,
}

/// Requests that failed, by kind (request/response tests such as
/// `http-load`). A request counts once, under the first thing that failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestErrors {
    /// Connections that could not be opened (refused, unreachable, timed out).
    pub connect: u64,
    /// Requests that could not be sent (reset, broken pipe).
    pub write: u64,
    /// Responses cut short (reset, or closed before the response ended).
    pub read: u64,
    /// Requests without a complete response within the request timeout.
    pub timeout: u64,
    /// Responses with a status of 400 or more.
    pub status: u64,
    /// Responses that are not valid HTTP/1.x.
    pub parse: u64,
}

impl RequestErrors {
    pub fn total(&self) -> u64 {
        self.connect
            .saturating_add(self.write)
            .saturating_add(self.read)
            .saturating_add(self.timeout)
            .saturating_add(self.status)
            .saturating_add(self.parse)
    }

    pub fn add(&mut self, o: &RequestErrors) {
        self.connect = self.connect.saturating_add(o.connect);
        self.write = self.write.saturating_add(o.write);
        self.read = self.read.saturating_add(o.read);
        self.timeout = self.timeout.saturating_add(o.timeout);
        self.status = self.status.saturating_add(o.status);
        self.parse = self.parse.saturating_add(o.parse);
    }
}

/// One measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub schema: u32,
    /// Test name, e.g. `tcp-bw`, `rdma-lat`.
    pub test: String,
    pub transport: Transport,
    /// Operation where relevant (`write`, `read`, `send` for RDMA; `ping-pong` ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Direction of data for bandwidth tests: `forward` (client sends),
    /// `reverse` (agent sends) or `bidir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// Per-stream record: the stream (or QP) index. `None` on the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u32>,
    /// Bytes per message.
    pub size: u64,
    /// Streams or queue pairs.
    pub streams: u32,
    /// Measured interval (warm-up excluded), seconds.
    pub duration_s: f64,
    /// Payload bytes moved during `duration_s`.
    pub bytes: u64,
    /// Messages (or iterations) completed during `duration_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Payload bits per second / 1e9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bw_gbps: Option<f64>,
    /// perftest's "BW peak", Gbit/s: size x the best message rate over any
    /// span from the post of one message to the completion of a later one
    /// (iteration mode only; perftest computes none in duration mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bw_peak_gbps: Option<f64>,
    /// Messages per second / 1e6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg_rate_mpps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_us: Option<LatencySummary>,
    /// Every latency sample: HdrHistogram's compressed V2 encoding in
    /// base64 (values in nanoseconds of `lat_us.kind`), so percentiles can
    /// be recomputed and repeats merged ([`LatencyHistogram::from_base64`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_hist: Option<String>,
    /// Successful requests (status below 400) completed per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_s: Option<f64>,
    /// Failed requests by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<RequestErrors>,
    /// http-load at a rate (open loop): how late the generator sent the
    /// requests that came due on an idle connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_us: Option<SendLag>,
    /// CPU time of the local (client) side's test threads over the measured
    /// time, percent of one core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_local_pct: Option<f64>,
    /// The same for the agent side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_remote_pct: Option<f64>,
    /// The client host's CPU time over the measured interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu_local: Option<HostCpu>,
    /// The agent host's CPU time over its measured interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu_remote: Option<HostCpu>,
    /// TCP retransmitted segments of the sending side (TCP_INFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpStats>,
    /// Local endpoint (address:port or device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// Remote endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    // ---- RDMA addressing (transport = rdma) ----
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ib_port: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    /// Path MTU in bytes (RDMA: the IB MTU used by the QPs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// RDMA service level of the QPs' address vector (InfiniBand SL; on
    /// RoCE the priority the NIC maps it to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sl: Option<u8>,
    /// RDMA traffic class in the GRH (RoCE: DSCP = tclass >> 2, ECN = the
    /// low two bits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tclass: Option<u8>,
    /// Scheduling of this end's polling loops: `normal` or `idle`
    /// (SCHED_IDLE, fabperf's default on software RDMA devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_priority_local: Option<String>,
    /// The same for the agent's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_priority_remote: Option<String>,
    /// Rate of the link the test used, Gbit/s: the smaller of the two ends' port rates
    /// (`placement_*.port_rate_gbps`); absent when neither end has one (virtual links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_rate_gbps: Option<f64>,
    /// `bw_gbps` in percent of `port_rate_gbps` (not on bidirectional totals, which add two
    /// directions of a full-duplex link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bw_pct_of_port: Option<f64>,
    /// Where the client's end ran: link, port rate, NUMA node of the NIC and of the buffers,
    /// the CPUs of its data threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_local: Option<Placement>,
    /// The same for the agent's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_remote: Option<Placement>,
    /// Counters that moved on both ends over the measured interval, grouped by source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    /// What the counters (and the placement) say went wrong, with evidence and the fix;
    /// the same findings `fabperf doctor` prints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// Why this number may mislead, or why a key is absent (see
    /// [`warnings`] for every id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Note>,
    /// The measured interval in absolute time (the measuring end's clock),
    /// and the bytes received over it: concurrent flows are compared on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// On the aggregate of concurrent flows: how many, how much their
    /// intervals overlap, how far apart they started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<FlowSet>,
    /// RFC 3339 UTC time at which the measurement started.
    pub started_at: String,
    pub fabperf_version: String,
}

impl Record {
    /// A record with the mandatory keys filled and every optional key `None`.
    pub fn new(test: &str, transport: Transport, size: u64, streams: u32) -> Record {
        Record {
            schema: SCHEMA_VERSION,
            test: test.to_string(),
            transport,
            op: None,
            direction: None,
            stream: None,
            size,
            streams,
            duration_s: 0.0,
            bytes: 0,
            iterations: None,
            bw_gbps: None,
            bw_peak_gbps: None,
            msg_rate_mpps: None,
            lat_us: None,
            lat_hist: None,
            requests_per_s: None,
            errors: None,
            send_lag_us: None,
            cpu_local_pct: None,
            cpu_remote_pct: None,
            host_cpu_local: None,
            host_cpu_remote: None,
            retransmits: None,
            udp: None,
            local: None,
            remote: None,
            device: None,
            ib_port: None,
            gid_index: None,
            gid_type: None,
            link_layer: None,
            mtu: None,
            sl: None,
            tclass: None,
            poll_priority_local: None,
            poll_priority_remote: None,
            port_rate_gbps: None,
            bw_pct_of_port: None,
            placement_local: None,
            placement_remote: None,
            counters: None,
            findings: Vec::new(),
            warnings: Vec::new(),
            interval: None,
            flows: None,
            started_at: now_rfc3339(),
            fabperf_version: FABPERF_VERSION.to_string(),
        }
    }

    /// Fill `duration_s`, `bytes`, `bw_gbps` and (when `messages` is given)
    /// `iterations` and `msg_rate_mpps` from a count over an interval. A
    /// zero-length (or non-finite) interval leaves the rates absent; the
    /// caller adds the [`Warning::NoInterval`] that says why.
    pub fn set_throughput(&mut self, bytes: u64, duration_s: f64, messages: Option<u64>) {
        self.bytes = bytes;
        self.duration_s = if duration_s.is_finite() && duration_s > 0.0 {
            duration_s
        } else {
            0.0
        };
        self.bw_gbps = None;
        self.msg_rate_mpps = None;
        if self.duration_s > 0.0 {
            self.bw_gbps = Some(bytes as f64 * 8.0 / self.duration_s / 1e9);
            if let Some(m) = messages {
                self.msg_rate_mpps = Some(m as f64 / self.duration_s / 1e6);
            }
        }
        self.iterations = messages;
    }

    /// Add a warning (once: the same id and message are not repeated).
    pub fn warn(&mut self, w: Warning) {
        let n = w.note();
        if !self.warnings.contains(&n) {
            self.warnings.push(n);
        }
    }

    /// Add already built notes (e.g. from the peer), without repeats.
    pub fn add_notes<'a>(&mut self, notes: impl IntoIterator<Item = &'a Note>) {
        for n in notes {
            if !self.warnings.contains(n) {
                self.warnings.push(n.clone());
            }
        }
    }

    /// Add findings, without repeats.
    pub fn add_findings<'a>(&mut self, findings: impl IntoIterator<Item = &'a Finding>) {
        for f in findings {
            if !self.findings.contains(f) {
                self.findings.push(f.clone());
            }
        }
    }

    /// Whether a finding with this id is present.
    pub fn has_finding(&self, id: &str) -> bool {
        self.findings.iter().any(|f| f.id == id)
    }

    /// Set `port_rate_gbps` from the two ends' placements (the smaller known rate) and
    /// `bw_pct_of_port` from it (not on a bidirectional total).
    pub fn set_port_rate(&mut self) {
        let rates = [&self.placement_local, &self.placement_remote]
            .into_iter()
            .flatten()
            .filter_map(|p| p.port_rate_gbps)
            .filter(|r| r.is_finite() && *r > 0.0);
        self.port_rate_gbps = rates.reduce(f64::min);
        self.bw_pct_of_port = match (self.bw_gbps, self.port_rate_gbps) {
            (Some(bw), Some(port)) if self.direction.as_deref() != Some("bidir") => {
                Some(bw / port * 100.0)
            }
            _ => None,
        };
    }

    /// Whether a warning with this id is present.
    pub fn has_warning(&self, id: &str) -> bool {
        self.warnings.iter().any(|n| n.id == id)
    }

    /// Set the latency summary and the serialized histogram from `h`.
    pub fn set_latency(&mut self, h: &LatencyHistogram) {
        self.lat_us = h.summary();
        self.lat_hist = (!h.is_empty()).then(|| h.to_base64());
    }

    /// Whether the record is self-consistent. Returns every broken rule
    /// (empty when the record is fine). The rules hold for every record
    /// kind; tests run every engine's records through this, and a reader
    /// of stored records can do the same.
    pub fn check(&self) -> Vec<String> {
        check::check(self)
    }

    /// True for the per-stream rows of a multi-stream measurement.
    pub fn is_per_stream(&self) -> bool {
        self.stream.is_some()
    }
}

/// The current UTC time in RFC 3339 with millisecond precision.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let ms = now.millisecond();
    let now = now.replace_millisecond(ms).unwrap_or(now);
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| now.unix_timestamp().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_keys_are_not_serialized() {
        let r = Record::new("tcp-bw", Transport::Tcp, 131072, 1);
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        let o = v.as_object().unwrap();
        for k in [
            "schema",
            "test",
            "transport",
            "size",
            "streams",
            "duration_s",
            "bytes",
            "started_at",
            "fabperf_version",
        ] {
            assert!(o.contains_key(k), "missing {k}");
        }
        for k in ["lat_us", "udp", "retransmits", "bw_gbps", "device", "op"] {
            assert!(!o.contains_key(k), "{k} must be absent, not a fake zero");
        }
        assert_eq!(o["transport"], "tcp");
        assert_eq!(o["schema"], SCHEMA_VERSION);
    }

    #[test]
    fn throughput_math() {
        let mut r = Record::new("tcp-bw", Transport::Tcp, 1000, 1);
        r.set_throughput(1_250_000_000, 1.0, Some(1_250_000));
        assert!((r.bw_gbps.unwrap() - 10.0).abs() < 1e-9);
        assert!((r.msg_rate_mpps.unwrap() - 1.25).abs() < 1e-9);
        assert_eq!(r.iterations, Some(1_250_000));
        assert!(r.check().is_empty(), "{:?}", r.check());
        // A zero-length interval gives no rate, not a fake 0.
        r.set_throughput(0, 0.0, Some(0));
        assert_eq!((r.bw_gbps, r.msg_rate_mpps), (None, None));
        r.set_throughput(10, f64::NAN, None);
        assert_eq!((r.duration_s, r.bw_gbps), (0.0, None));
    }

    #[test]
    fn warnings_are_not_repeated() {
        let mut r = Record::new("udp-bw", Transport::Udp, 1472, 1);
        r.warn(Warning::NothingSent);
        r.warn(Warning::NothingSent);
        assert_eq!(r.warnings.len(), 1);
        assert!(r.has_warning("nothing-sent"));
        let other = vec![Warning::BusyPollUnset.note(), Warning::NothingSent.note()];
        r.add_notes(&other);
        assert_eq!(r.warnings.len(), 2);
    }

    #[test]
    fn record_round_trips() {
        let mut r = Record::new("udp-bw", Transport::Udp, 1472, 1);
        r.udp = Some(UdpStats {
            sent: 10,
            received: 9,
            lost: 1,
            reordered: Some(2),
            duplicates: 0,
            loss_pct: Some(10.0),
            jitter_us: Some(3.5),
            ..Default::default()
        });
        r.warn(Warning::NothingSent);
        r.host_cpu_local = Some(HostCpu {
            user_pct: 12.5,
            system_pct: 30.0,
            irq_pct: 0.0,
            softirq_pct: 55.0,
            cpus: 2,
        });
        let s = serde_json::to_string(&r).unwrap();
        let back: Record = serde_json::from_str(&s).unwrap();
        assert_eq!(r, back);
        assert!(r.started_at.ends_with('Z'), "{}", r.started_at);
    }
}
