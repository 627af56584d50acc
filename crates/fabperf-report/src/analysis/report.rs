//! What a report holds: its rows, the figures of a row, incast and
//! bisection entries, failed cells, verdicts, the run it is about.

use crate::data::{Agent, FindingView};
use crate::flows::Leg;
use crate::stats::{self, Stats};
use crate::units::size_label;
use fabperf_run::summary::MeshAnalysis;
pub use fabperf_store::CellIds;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The kind of figure a row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// tcp-bw, rdma-bw: Gbit/s.
    Bandwidth,
    /// udp-bw: Gbit/s at a target rate, and loss.
    Udp,
    /// tcp-lat, udp-lat, rdma-lat: µs.
    Latency,
    /// http-load: requests per second, latency, errors by kind.
    Http,
    /// mtu: the largest packet that crosses, per method.
    Mtu,
}

impl Family {
    /// Every family, in the order a report shows them.
    pub const ALL: [Family; 5] = [
        Family::Bandwidth,
        Family::Udp,
        Family::Latency,
        Family::Http,
        Family::Mtu,
    ];

    pub fn of_kind(kind: &str) -> Option<Family> {
        match kind {
            "tcp-bw" | "rdma-bw" => Some(Family::Bandwidth),
            "udp-bw" => Some(Family::Udp),
            "tcp-lat" | "udp-lat" | "rdma-lat" => Some(Family::Latency),
            "http-load" => Some(Family::Http),
            "mtu" => Some(Family::Mtu),
            _ => None,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Family::Bandwidth => "Bandwidth (Gbit/s)",
            Family::Udp => "UDP at a target rate (Gbit/s, loss)",
            Family::Latency => "Latency (µs, p50 per repeat; p50/p99 over every sample)",
            Family::Http => "HTTP load (requests/s; latency over every request; errors by kind)",
            Family::Mtu => "Path MTU (bytes, the largest packet that crosses, per method)",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Family::Bandwidth | Family::Udp => "Gbit/s",
            Family::Latency => "us",
            Family::Http => "req/s",
            Family::Mtu => "bytes",
        }
    }

    /// Is a larger figure better (bandwidth, requests) or worse (latency)?
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Family::Latency)
    }
}

/// Where the latency percentiles of a row come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum LatSource {
    /// Every repeat's histogram, merged.
    Histograms { repeats: usize, samples: u64 },
    /// The mean of the repeats' stored percentiles (no histogram stored).
    StoredPercentiles,
}

/// Latency figures of a row, µs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatFigures {
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    /// half-RTT or RTT.
    pub kind: Option<String>,
    pub source: LatSource,
    /// (percentile, µs) for the percentile chart (histograms only).
    pub curve: Vec<(f64, f64)>,
}

/// CPU per Gbit/s at both ends: percent of one CPU spent per Gbit/s moved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuPerGbps {
    /// The client end (the flow's sender for `forward`).
    pub client: Option<f64>,
    /// The agent end.
    pub agent: Option<f64>,
    /// `host` (the whole host's CPU time, kernel work included) or
    /// `threads` (the test threads' own CPU time).
    pub source: &'static str,
}

/// The difference of a row to the same measurement on the baseline path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delta {
    pub path: String,
    pub kind: String,
    pub test: String,
    /// The baseline row's figure (Gbit/s, µs p50, requests/s, bytes).
    pub base_mean: f64,
    pub d_gbps: Option<f64>,
    pub d_pct: Option<f64>,
    /// Latency (and http-load): the difference of the rows' p50 figures —
    /// the mean of the repeats' p50, the statistic the noise test judges.
    pub d_p50_us: Option<f64>,
    /// The difference of the p99 over every sample (merged histograms).
    pub d_p99_us: Option<f64>,
    /// Loss-rate change, percentage points.
    pub d_loss_pp: Option<f64>,
    /// http-load: failed requests per 100 attempted, change in percentage
    /// points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub d_error_pp: Option<f64>,
    /// mtu: bytes fewer than the baseline path (the overhead it adds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub d_bytes: Option<i64>,
    /// Welch's two-sample t-test of the two rows' repeats (the same figure
    /// the difference is taken of); `None` when either has one repeat, or
    /// the row's instances are not repeats (a mesh's pairs).
    pub welch: Option<stats::Welch>,
    /// The difference is not significant (Welch's p ≥ 0.05): noise.
    pub within_noise: Option<bool>,
    /// How the baseline row differs from this one (rate, streams, op, MTU,
    /// kind); empty for a like-with-like comparison. Only with
    /// [`Options::unlike`](super::Options::unlike): without it an unlike
    /// row is never compared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlike: Vec<String>,
}

/// One instance of a row (a mesh pair, a bisection cut): its repeats.
#[derive(Debug, Clone, Serialize)]
pub struct Instance {
    /// `n1 -> n2` (a pair), `n1→n3, n2→n4` (a cut's flows).
    pub key: String,
    pub cells: CellIds,
    pub values: Vec<f64>,
    /// Over this instance's repeats only.
    pub stats: Option<Stats>,
    pub port_rate_gbps: Option<f64>,
}

/// A row's instances side by side: they are different links or cuts, not
/// repeats, so they get a range, not an interval.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// `pairs` or `cuts`.
    pub of: &'static str,
    pub count: usize,
    /// Over the instances' means.
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// The worst and the best instance (lowest bandwidth, highest latency).
    pub worst: String,
    pub best: String,
    /// Which figure stands for the row: `median` (a mesh: the typical pair)
    /// or `min` (a bisection: the slowest cut is the bisection bandwidth).
    pub headline: &'static str,
    /// Repeats per instance, fewest and most.
    pub repeats_min: usize,
    pub repeats_max: usize,
}

/// http-load figures of a row, summed over its repeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HttpFigures {
    /// Failed requests by kind (connect, write, read, timeout, status, parse).
    pub errors: BTreeMap<String, u64>,
    pub errors_total: u64,
    /// Successful requests over the measured intervals.
    pub ok: Option<u64>,
    /// Failed requests per 100 attempted.
    pub error_pct: Option<f64>,
}

/// mtu figures of a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtuFigures {
    /// forward, reverse, icmp.
    pub method: String,
    /// The smallest and largest MTU its repeats found.
    pub mtu_min: u64,
    pub mtu_max: u64,
    /// The payload of the largest packet that crossed.
    pub payload: Option<u64>,
    /// The interface the probes left through, as the record names it.
    pub interface: Option<String>,
    /// The encapsulation the record names (`VXLAN: 50 bytes (outer …)`).
    pub encapsulation: Option<String>,
}

/// One test × sweep point × path × pattern instance.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub family: Family,
    pub test: String,
    pub kind: String,
    pub path: String,
    pub pattern: String,
    /// The pattern instance in words (`fp-node1 -> fp-node2`, `mesh, 12 pairs`).
    pub scope: String,
    #[serde(skip)]
    pub scope_key: String,
    pub dims: Value,
    pub size: Option<u64>,
    pub streams: Option<u64>,
    pub op: Option<String>,
    pub direction: Option<String>,
    /// The row is one direction of cells that measured both at once (an
    /// incast's or a bisection's `bidir` test); `direction` says which.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub of_bidir: bool,
    pub mtu: Option<u64>,
    pub rate: Option<String>,
    /// The cell's environment dimensions (tuning profile, policy rules,
    /// HTTP connections), as a label: `profile wide-buffers`, `200 rules`,
    /// `c1000`.
    pub variant: Option<String>,
    pub nodes: Vec<String>,
    pub cells: CellIds,
    /// One figure per cell in run order: Gbit/s, p50 µs for latency,
    /// requests/s for http-load, bytes for mtu.
    pub values: Vec<f64>,
    /// Statistics over repeats of one instance: the row's only one, or the
    /// headline instance of a bisection (its slowest cut). `None` for a
    /// mesh of several pairs (see `spread`).
    pub stats: Option<Stats>,
    pub warnings: Vec<String>,
    pub port_rate_gbps: Option<f64>,
    pub pct_port: Option<f64>,
    pub cpu: Option<CpuPerGbps>,
    pub retransmits: Option<f64>,
    pub loss_pct: Option<f64>,
    pub lat: Option<LatFigures>,
    /// The instances of a row that holds several (a mesh's pairs, a
    /// bisection's cuts), each with the statistics of its own repeats.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<Instance>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// The figure is above the real port rate: the rate is wrong or the
    /// traffic was counted twice (no share of the port is given then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_finding: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu_path: Option<MtuFigures>,
    /// Concurrent flows (incast, bisection): how they overlapped and how
    /// far apart they started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// Repeats without a figure (failed cells, directions without a usable
    /// aggregate), with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedRepeat>,
    /// Instances with no figure at all (a bisection's cuts whose every
    /// cell failed): the row's figure does not cover them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<String>,
    pub base: Option<Delta>,
}

impl Row {
    /// Which row a gate message is about, whole (test, kind, every sweep
    /// dimension, path, scope): `bw (tcp-bw) size 16K on path host, n1 -> n2`.
    pub fn label(&self) -> String {
        let mut s = if self.test == self.kind {
            self.test.clone()
        } else {
            format!("{} ({})", self.test, self.kind)
        };
        if let Some(op) = &self.op {
            s.push_str(&format!(" op {op}"));
        }
        if let Some(b) = self.size {
            s.push_str(&format!(" size {}", size_label(b)));
        }
        if let Some(n) = self.streams.filter(|n| *n > 1) {
            s.push_str(&format!(" x{n}"));
        }
        if let Some(d) = self.direction_words() {
            s.push_str(&format!(" {d}"));
        }
        if let Some(r) = &self.rate {
            s.push_str(&format!(" rate {r}"));
        }
        s.push_str(&format!(" on path {}, {}", self.path, self.scope));
        s
    }

    /// The direction when it is not plain `forward`: `reverse`, `bidir`,
    /// or one direction of a bidir cell (`forward of bidir`).
    pub fn direction_words(&self) -> Option<String> {
        let d = self.direction.as_deref().unwrap_or("forward");
        if self.of_bidir {
            Some(format!("{d} of bidir"))
        } else {
            (d != "forward").then(|| d.to_string())
        }
    }

    /// The row's figure: the mean over its repeats; for a mesh the median
    /// over its pairs, for a bisection the slowest cut's mean.
    pub fn mean(&self) -> Option<f64> {
        match (&self.stats, &self.spread) {
            (Some(s), _) => Some(s.mean),
            (None, Some(sp)) => Some(sp.median),
            _ => None,
        }
    }

    /// Repeats per instance in words: `3`, or `1-3` when they differ.
    pub fn repeats_label(&self) -> String {
        match (&self.spread, &self.stats) {
            (Some(sp), _) if sp.repeats_min != sp.repeats_max => {
                format!("{}-{}", sp.repeats_min, sp.repeats_max)
            }
            (Some(sp), _) => sp.repeats_min.to_string(),
            (None, Some(s)) => s.n.to_string(),
            _ => String::new(),
        }
    }
}

/// One incast cell in one direction: every sender into one receiver at
/// once (`forward`), or the receiver back to them (`reverse`, the other
/// half of a `bidir` incast). A failed cell is one entry with its reason.
#[derive(Debug, Clone, Serialize)]
pub struct Incast {
    pub test: String,
    pub path: String,
    pub receiver: String,
    pub repeat: u32,
    pub cell: String,
    pub dims: Value,
    /// The cell's planned flows (sender, receiver).
    #[serde(skip)]
    pub cell_flows: Vec<(String, String)>,
    /// The direction's aggregate, flows, fairness, overlap and port share
    /// (the port: the receiver's, or its peers' sum if smaller).
    #[serde(flatten)]
    pub leg: Leg,
}

/// One bisection split in one direction: half the nodes into the other
/// half at once.
#[derive(Debug, Clone, Serialize)]
pub struct Bisection {
    pub test: String,
    pub path: String,
    /// Which cut (1, 2, …: the same flows in every repeat), in the order
    /// the run measured them.
    pub cut: usize,
    pub repeat: u32,
    pub cell: String,
    pub dims: Value,
    /// The cell's planned flows (the cut).
    #[serde(skip)]
    pub cell_flows: Vec<(String, String)>,
    /// The direction's aggregate, flows, fairness, overlap and port share
    /// (the port: the sum over the flows of the slower end's).
    #[serde(flatten)]
    pub leg: Leg,
}

/// A repeat of a row that has no figure: its cell failed, or the direction
/// has no usable aggregate. It is named, never averaged.
#[derive(Debug, Clone, Serialize)]
pub struct FailedRepeat {
    pub cell: String,
    pub repeat: u32,
    /// The pattern instance (a bisection's cut).
    pub instance: String,
    pub reason: String,
}

/// How the concurrent flows of a row's cells ran together: the common
/// interval in % of the longest flow's, and the senders' start skew, over
/// the cells with a figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Concurrency {
    pub cells: usize,
    pub overlap_pct_min: f64,
    pub overlap_pct_max: f64,
    pub start_skew_s_min: Option<f64>,
    pub start_skew_s_max: Option<f64>,
}

impl Concurrency {
    /// `start skew 1.6–9.6 ms, overlap 98–99 % of the longest interval`.
    pub fn words(&self) -> String {
        let range = |a: f64, b: f64, d: usize| {
            if format!("{a:.d$}") == format!("{b:.d$}") {
                format!("{a:.d$}")
            } else {
                format!("{a:.d$}–{b:.d$}")
            }
        };
        let skew = match (self.start_skew_s_min, self.start_skew_s_max) {
            (Some(a), Some(b)) => format!("start skew {} ms", range(a * 1e3, b * 1e3, 1)),
            _ => "start skew not recorded".into(),
        };
        format!(
            "concurrent flows: {skew}, common interval {} % of the longest flow's ({} cell{})",
            range(self.overlap_pct_min, self.overlap_pct_max, 1),
            self.cells,
            if self.cells == 1 { "" } else { "s" }
        )
    }
}

/// How bad a verdict is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Ok,
    Warn,
    Bad,
}

impl Level {
    pub fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "WARN",
            Level::Bad => "BAD",
        }
    }
}

/// A verdict in words about a path or a node.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `path` or `node`.
    pub scope: &'static str,
    pub subject: String,
    pub level: Level,
    pub text: String,
}

/// A cell that failed.
#[derive(Debug, Clone, Serialize)]
pub struct FailedCell {
    pub cell: String,
    pub test: String,
    pub path: String,
    pub pattern: String,
    pub flows: Vec<(String, String)>,
    pub error: String,
}

/// The run a report is about.
#[derive(Debug, Clone, Serialize)]
pub struct RunMeta {
    pub id: i64,
    pub plan: String,
    pub description: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub fabperf_version: String,
    pub cells_done: usize,
    pub cells_failed: usize,
    pub cells_pending: usize,
}

/// A whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub run: RunMeta,
    pub baseline: Option<String>,
    /// `plan` or `--baseline`.
    pub baseline_from: Option<&'static str>,
    pub rows: Vec<Row>,
    pub meshes: Vec<MeshAnalysis>,
    pub incasts: Vec<Incast>,
    pub bisections: Vec<Bisection>,
    pub agents: Vec<Agent>,
    pub findings: Vec<FindingView>,
    pub verdicts: Vec<Verdict>,
    pub failed: Vec<FailedCell>,
    pub notes: Vec<String>,
    /// Filled by [`crate::gate::evaluate`] when gates were given.
    pub gates: Vec<crate::gate::GateOutcome>,
}

impl Report {
    /// The paths measured, baseline first.
    pub fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        if let Some(b) = &self.baseline {
            if self.rows.iter().any(|r| &r.path == b) {
                v.push(b.clone());
            }
        }
        for r in &self.rows {
            if !v.contains(&r.path) {
                v.push(r.path.clone());
            }
        }
        v
    }
}
