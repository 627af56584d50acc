//! The result model shared by every fabperf test.
//!
//! One [`Record`] per measurement. Socket and RDMA tests, the suite and
//! (later) the matrix runner all emit the same record, so the JSON Lines,
//! CSV and tables below are the single output path of the tool.
//!
//! Rules: a key that does not apply to a test is `None` (absent in JSON),
//! never a fake zero. Latency percentiles come from an HdrHistogram holding
//! every sample ([`LatencyHistogram`]).

mod check;
mod latency;
mod output;

pub use check::BadValue;

pub use latency::{LatencyHistogram, LatencyKind, LatencySummary};
pub use output::{csv_header, write_csv, write_json_lines, Table};

use serde::{Deserialize, Serialize};

/// Version of the record layout. Bump when a key changes meaning or is
/// removed; adding an optional key does not need a bump.
pub const SCHEMA_VERSION: u32 = 1;

/// The fabperf version string stamped into every record.
pub const FABPERF_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Transport of a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
    Rdma,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Rdma => "rdma",
        }
    }
}

/// UDP receiver-side accounting.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpStats {
    /// Datagrams the sender reports it sent.
    pub sent: u64,
    /// Distinct datagrams the receiver got (duplicates excluded).
    pub received: u64,
    /// Datagrams never received (sent - received); reordered ones are not lost.
    pub lost: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// lost / sent * 100.
    pub loss_pct: f64,
    /// RFC 3550 interarrival jitter estimate, microseconds.
    pub jitter_us: f64,
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
    /// Best short-window bandwidth (perftest's "BW peak"), Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bw_peak_gbps: Option<f64>,
    /// Messages per second / 1e6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg_rate_mpps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_us: Option<LatencySummary>,
    /// Successful requests (status below 400) completed per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_s: Option<f64>,
    /// Failed requests by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<RequestErrors>,
    /// CPU time of the local (client) side over wall time, percent of one core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_local_pct: Option<f64>,
    /// CPU time of the agent side over wall time, percent of one core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_remote_pct: Option<f64>,
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
    /// Scheduling of this end's polling loops: `normal` or `idle`
    /// (SCHED_IDLE, fabperf's default on software RDMA devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_priority_local: Option<String>,
    /// The same for the agent's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_priority_remote: Option<String>,
    /// Free-form warnings about this number (e.g. "sender was CPU bound").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
            requests_per_s: None,
            errors: None,
            cpu_local_pct: None,
            cpu_remote_pct: None,
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
            poll_priority_local: None,
            poll_priority_remote: None,
            warnings: Vec::new(),
            started_at: now_rfc3339(),
            fabperf_version: FABPERF_VERSION.to_string(),
        }
    }

    /// Fill `duration_s`, `bytes`, `bw_gbps` and (when `messages` is given)
    /// `msg_rate_mpps` from a byte count over an interval.
    pub fn set_throughput(&mut self, bytes: u64, duration_s: f64, messages: Option<u64>) {
        self.bytes = bytes;
        self.duration_s = duration_s;
        if duration_s > 0.0 {
            self.bw_gbps = Some(bytes as f64 * 8.0 / duration_s / 1e9);
            if let Some(m) = messages {
                self.msg_rate_mpps = Some(m as f64 / duration_s / 1e6);
            }
        }
        if let Some(m) = messages {
            self.iterations = Some(m);
        }
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
    }

    #[test]
    fn record_round_trips() {
        let mut r = Record::new("udp-bw", Transport::Udp, 1472, 1);
        r.udp = Some(UdpStats {
            sent: 10,
            received: 9,
            lost: 1,
            reordered: 2,
            duplicates: 0,
            loss_pct: 10.0,
            jitter_us: 3.5,
        });
        let s = serde_json::to_string(&r).unwrap();
        let back: Record = serde_json::from_str(&s).unwrap();
        assert_eq!(r, back);
        assert!(r.started_at.ends_with('Z'), "{}", r.started_at);
    }
}
