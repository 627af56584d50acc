//! From a run's cells to the report: one row per test × sweep point × path
//! × pattern instance with statistics over its repeats, the difference to
//! the baseline path, the share of the port rate, CPU per Gbit/s, merged
//! latency percentiles; incast fairness, bisection bandwidth, the mesh
//! matrices; verdicts in words per path and per node.

use crate::data::{load_head, Agent, FindingView, RecView, ReportError, RunData, Sample};
use crate::flows::{self, Leg};
use crate::hist::{self, Merged};
use crate::stats::{self, Stats};
use crate::units::{size_label, size_words};
use fabperf_results::dims::text as dim_str;
use fabperf_run::summary::{self, MeshAnalysis};
use fabperf_store::{CellRow, CellState, Role, Store};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

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
    /// [`Options::unlike`]: without it an unlike row is never compared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlike: Vec<String>,
}

/// One instance of a row (a mesh pair, a bisection cut): its repeats.
#[derive(Debug, Clone, Serialize)]
pub struct Instance {
    /// `n1 -> n2` (a pair), `n1→n3, n2→n4` (a cut's flows).
    pub key: String,
    pub cells: Vec<String>,
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
    pub cells: Vec<String>,
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

    /// The row `row` is compared with under a `KEY=VALUE` baseline: the same
    /// test, path, pattern instance and other dimensions, with `key` at
    /// `val`.
    pub fn counterpart_dim(&self, row: &Row, key: &str, val: &str) -> Option<&Row> {
        let mine = dims_without(&row.dims, key);
        self.rows.iter().find(|b| {
            b.path == row.path
                && b.test == row.test
                && b.family == row.family
                && b.scope_key == row.scope_key
                && b.mean().is_some()
                && dim_is(&b.dims, key, val)
                && dims_without(&b.dims, key) == mine
        })
    }

    /// The row on `path` that `row` is compared with: like with like — the
    /// same family, environment, size, direction, pattern instance, streams,
    /// op, MTU and rate. The same test kind is taken when the path measured
    /// it; else another kind of the family (an `rdma-bw` row against the
    /// host's `tcp-bw`: the transport is what the comparison is about), the
    /// TCP one when there are several, and then the op is the kind's own.
    pub fn counterpart(&self, row: &Row, path: &str) -> Option<&Row> {
        self.matching(row, path, false).map(|(b, _)| b)
    }

    /// [`Report::counterpart`], or with `unlike` the closest row that
    /// differs in streams, op, MTU or rate, with the differences in words.
    pub fn matching(&self, row: &Row, path: &str, unlike: bool) -> Option<(&Row, Vec<String>)> {
        let dir = |r: &Row| r.direction.clone().unwrap_or_else(|| "forward".into());
        let cands: Vec<(usize, &Row)> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.path == path
                    && b.family == row.family
                    && b.variant == row.variant
                    && b.size == row.size
                    && dir(b) == dir(row)
                    && b.of_bidir == row.of_bidir
                    && b.scope_key == row.scope_key
                    && b.mean().is_some()
            })
            .collect();
        let same_kind = cands.iter().any(|(_, b)| b.kind == row.kind);
        let kind_ok = |b: &Row| {
            if same_kind {
                b.kind == row.kind
            } else {
                let others: BTreeSet<&str> = cands.iter().map(|(_, c)| c.kind.as_str()).collect();
                others.len() == 1 || b.kind.starts_with("tcp-")
            }
        };
        let diffs = |b: &Row| -> Vec<String> {
            let mut d = Vec::new();
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
            if b.streams != row.streams {
                let n = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
                d.push(format!("streams {} vs {}", n(row.streams), n(b.streams)));
            }
            if b.kind == row.kind && b.op != row.op {
                d.push(format!("op {} vs {}", show(&row.op), show(&b.op)));
            }
            if b.mtu != row.mtu {
                let n = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
                d.push(format!("MTU {} vs {}", n(row.mtu), n(b.mtu)));
            }
            if b.rate != row.rate {
                d.push(format!("rate {} vs {}", show(&row.rate), show(&b.rate)));
            }
            if b.kind != row.kind && !kind_ok(b) {
                d.push(format!("kind {} vs {}", row.kind, b.kind));
            }
            d
        };
        if let Some((_, b)) = cands
            .iter()
            .find(|(_, b)| kind_ok(b) && diffs(b).is_empty())
        {
            return Some((b, Vec::new()));
        }
        if !unlike {
            return None;
        }
        // The closest unlike row: fewest differences, the plan's first on ties.
        cands
            .iter()
            .map(|(i, b)| (diffs(b), *i, *b))
            .min_by_key(|(d, i, _)| (d.len(), *i))
            .map(|(d, _, b)| (b, d))
    }
}

/// Options of a report.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub run: Option<i64>,
    /// Overrides the plan's baseline path.
    pub baseline: Option<String>,
    /// Compare a row with the closest baseline row even when it differs in
    /// rate, streams, op or MTU, and say how (`--compare-unlike`). Without
    /// it such a row has no difference, and a note says why.
    pub unlike: bool,
}

/// Build the report of a run.
pub fn build(store: &Store, opts: &Options) -> Result<Report, ReportError> {
    let mut data = load_head(store, opts.run)?;
    // The mesh matrices are read in the same pass as the tables.
    let mut meshes: Vec<summary::MeshFeed> = summary::mesh_tests(store, data.run.id)?
        .iter()
        .map(|t| summary::MeshFeed::new(t))
        .collect();
    let (mut report, seen) = assemble(store, &mut data, &mut meshes, opts)?;
    // The mesh matrices, with the plan's rule per test.
    for feed in meshes {
        let test = feed.test().to_string();
        let rule = data
            .mesh_rules
            .get(&test)
            .map(|r| summary::Rule::new(r.kind, r.bw_fraction, r.lat_factor))
            .unwrap_or_default();
        match feed.finish(store, data.run.id, &rule) {
            Ok(a) => report.meshes.push(a),
            // A store that fails while the suspects' re-test templates are
            // read costs the matrix, not the whole report.
            Err(e) => report
                .notes
                .push(format!("mesh test {test}: no matrix: {e}")),
        }
    }
    report.verdicts = verdicts(&report, &data, &seen);
    Ok(report)
}

/// A UDP target rate as the plan spells rates: `500M`, `2.5G`, `max` (the
/// row's `rate`, which every label of a row then shows as it is).
fn rate_label(dims: &Value) -> Option<String> {
    let v = dims.get("rate")?;
    if let Some(b) = v.as_f64().filter(|b| *b > 0.0) {
        for (unit, f) in [("G", 1e9), ("M", 1e6), ("K", 1e3)] {
            if b >= f {
                let x = b / f;
                return Some(if x.fract() == 0.0 {
                    format!("{x:.0}{unit}")
                } else {
                    format!("{}{unit}", format!("{x:.3}").trim_end_matches('0'))
                });
            }
        }
        return Some(format!("{b}"));
    }
    dim_str(dims, "rate")
}

fn dim_u64(dims: &Value, k: &str) -> Option<u64> {
    dims.get(k)?.as_u64()
}

/// The dimensions that set a cell's environment rather than its test:
/// HTTP connections, the tuning profile, the policy-rule count (the row's
/// `variant`, shown as it is by the chart groups and the sweep column).
fn variant_label(dims: &Value) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(c) = dim_u64(dims, "connections") {
        parts.push(format!("c{c}"));
    }
    if let Some(p) = dim_str(dims, "profile") {
        parts.push(format!("profile {p}"));
    }
    if let Some(n) = dim_u64(dims, "policies") {
        let ct = if dims.get("policy_conntrack") == Some(&Value::Bool(true)) {
            " +conntrack"
        } else {
            ""
        };
        parts.push(format!("{n} rules{ct}"));
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// A baseline given as `KEY=VALUE` (a plan dimension and one of its
/// values, e.g. `profile=algebra-1-default` or `policies=0`) rather than a
/// path: every row is compared with the row of the same test, path and
/// other dimensions at that value.
pub fn dim_baseline(b: &str) -> Option<(&str, &str)> {
    let (k, v) = b.split_once('=')?;
    (!k.is_empty() && !v.is_empty()).then_some((k.trim(), v.trim()))
}

/// Does `dims` hold `key` at `val` (compared as the plan wrote it)?
fn dim_is(dims: &Value, key: &str, val: &str) -> bool {
    dim_str(dims, key).is_some_and(|v| v == val)
}

/// `dims` without `key`.
fn dims_without(dims: &Value, key: &str) -> Value {
    let mut d = dims.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove(key);
    }
    d
}

/// The record that stands for a single-flow cell: its total (cells of
/// concurrent flows go by direction, [`flows::legs_of`]).
fn main_sample(samples: &[Sample]) -> Option<&Sample> {
    samples.iter().find(|s| s.role == Role::Total)
}

/// Port rate of a flow: the slower end's.
fn flow_port(data: &RunData, path: &str, src: &str, dst: &str) -> Option<f64> {
    let a = data.agent(path, src)?.inventory.port_rate_gbps?;
    let b = data.agent(path, dst)?.inventory.port_rate_gbps?;
    Some(a.min(b))
}

/// The port rate a cell's main figure is bounded by.
fn cell_port(data: &RunData, cell: &CellRow, direction: Option<&str>) -> Option<f64> {
    let s = &cell.spec;
    let ports: Option<Vec<f64>> = s
        .flows
        .iter()
        .map(|(a, b)| flow_port(data, &s.path, a, b))
        .collect();
    let ports = ports?;
    let one_way = match s.pattern.as_str() {
        "incast" => {
            let recv = data
                .agent(&s.path, &s.flows.first()?.1)?
                .inventory
                .port_rate_gbps?;
            let senders: Option<Vec<f64>> = s
                .flows
                .iter()
                .map(|(a, _)| data.agent(&s.path, a)?.inventory.port_rate_gbps)
                .collect();
            recv.min(senders?.iter().sum())
        }
        "bisection" => ports.iter().sum(),
        _ => ports.iter().copied().fold(f64::INFINITY, f64::min),
    };
    if !one_way.is_finite() {
        return None;
    }
    Some(if direction == Some("bidir") {
        2.0 * one_way
    } else {
        one_way
    })
}

/// The port rate the flows of a pair or mesh cell are bounded by (the
/// slowest flow's; twice that for `bidir`), as [`cell_port`] gives it.
fn flows_port(data: &RunData, path: &str, flows: &[(String, String)], bidir: bool) -> Option<f64> {
    let ports: Option<Vec<f64>> = flows
        .iter()
        .map(|(a, b)| flow_port(data, path, a, b))
        .collect();
    let one_way = ports?.iter().copied().fold(f64::INFINITY, f64::min);
    if !one_way.is_finite() {
        return None;
    }
    Some(if bidir { 2.0 * one_way } else { one_way })
}

/// Test order, dims, path, pattern instance key, its words, method (mtu).
type GroupKey = (usize, String, String, String, String, String);

/// A mean kept as it goes: the same sum in the same order as over a list
/// of the values (`Iterator::sum` starts at −0), so the figure is the same
/// bit for bit, without the list.
#[derive(Clone, Copy)]
struct Mean {
    sum: f64,
    n: usize,
    /// Values pushed, present or not.
    pushed: usize,
}

impl Default for Mean {
    fn default() -> Mean {
        Mean {
            sum: -0.0,
            n: 0,
            pushed: 0,
        }
    }
}

impl Mean {
    fn push(&mut self, v: f64) {
        self.sum += v;
        self.n += 1;
        self.pushed += 1;
    }

    fn push_opt(&mut self, v: Option<f64>) {
        match v {
            Some(v) => self.push(v),
            None => self.pushed += 1,
        }
    }

    /// The mean of the values present.
    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// The mean, absent when one value was.
    fn mean_of_all(&self) -> Option<f64> {
        (self.n == self.pushed).then(|| self.mean()).flatten()
    }
}

/// The repeats' own latency percentiles, for a row without histograms:
/// the extremes and the means.
#[derive(Default)]
struct StoredLat {
    count: usize,
    min: Option<f64>,
    max: Option<f64>,
    p50: Mean,
    p90: Mean,
    p99: Mean,
    p999: Mean,
    mean: Mean,
}

impl StoredLat {
    fn push(&mut self, l: &crate::data::LatView) {
        self.count += 1;
        if let Some(v) = l.min {
            self.min = Some(self.min.map_or(v, |a| a.min(v)));
        }
        if let Some(v) = l.max {
            self.max = Some(self.max.map_or(v, |a| a.max(v)));
        }
        for (m, v) in [
            (&mut self.p50, l.p50),
            (&mut self.p90, l.p90),
            (&mut self.p99, l.p99),
            (&mut self.p999, l.p999),
            (&mut self.mean, l.mean),
        ] {
            if let Some(v) = v {
                m.push(v);
            }
        }
    }
}

/// What bounds an instance's figure: a port rate known when its cell was
/// read (concurrent flows, read last), or the flows of a cell whose ports
/// are looked up once every record has said which links are virtual.
#[derive(Debug, Clone, PartialEq)]
enum PortOf {
    Known(Option<f64>),
    Flows(Vec<(String, String)>, bool),
}

/// One pattern instance of a row (a mesh pair, a bisection cut) as its
/// cells are read.
struct InstAcc {
    key: String,
    cells: Vec<String>,
    values: Vec<f64>,
    ports: Vec<PortOf>,
    /// When its first cell came (instances are listed in that order).
    first: Option<usize>,
}

#[derive(Default)]
struct Acc {
    cells: Vec<String>,
    /// The figure of each cell with one, in run order.
    values: Vec<f64>,
    /// The instances, by key.
    inst_at: HashMap<String, usize>,
    insts: Vec<InstAcc>,
    /// Nodes by number, and the (sender, receiver) pairs measured.
    node_ids: HashMap<String, u32>,
    pairs: HashSet<(u32, u32)>,
    size: Option<u64>,
    streams: Option<u64>,
    op: Option<String>,
    direction: Option<String>,
    mtu: Option<u64>,
    cpu_client: Mean,
    cpu_agent: Mean,
    cpu_host: bool,
    retrans: Mean,
    loss: Mean,
    hists: Merged,
    hist_missing: usize,
    stored: StoredLat,
    lat_kind: Option<String>,
    errors: BTreeMap<String, u64>,
    errors_seen: bool,
    ok_requests: Option<u64>,
    mtu_payload: Option<u64>,
    mtu_iface: Option<String>,
    mtu_encap: Option<String>,
    /// Concurrent flows: one direction of bidir cells.
    of_bidir: bool,
    /// Concurrent flows: per cell with a figure, the overlap (%) and the
    /// start skew (s).
    overlaps: Vec<f64>,
    skews: Vec<Option<f64>>,
    /// Repeats without a figure.
    failed: Vec<FailedRepeat>,
    /// An incast whose data left the receiver: why.
    outcast: Option<String>,
}

impl Acc {
    fn inst(&mut self, key: &str) -> &mut InstAcc {
        let i = match self.inst_at.get(key) {
            Some(&i) => i,
            None => {
                self.inst_at.insert(key.to_string(), self.insts.len());
                self.insts.push(InstAcc {
                    key: key.to_string(),
                    cells: Vec::new(),
                    values: Vec::new(),
                    ports: Vec::new(),
                    first: None,
                });
                self.insts.len() - 1
            }
        };
        &mut self.insts[i]
    }

    /// A cell of instance `inst` counted in the row.
    fn add_cell(&mut self, inst: &str, cell: &str) {
        self.cells.push(cell.to_string());
        let n = self.cells.len();
        let x = self.inst(inst);
        x.first.get_or_insert(n);
        if !x.cells.iter().any(|c| c == cell) {
            x.cells.push(cell.to_string());
        }
    }

    fn add_value(&mut self, inst: &str, v: f64) {
        self.values.push(v);
        self.inst(inst).values.push(v);
    }

    fn add_port(&mut self, inst: &str, p: PortOf) {
        let x = self.inst(inst);
        if !x.ports.contains(&p) {
            x.ports.push(p);
        }
    }

    fn add_flows(&mut self, flows: &[(String, String)]) {
        for (a, b) in flows {
            let mut id = |n: &String| {
                let k = self.node_ids.len() as u32;
                *self.node_ids.entry(n.clone()).or_insert(k)
            };
            let p = (id(a), id(b));
            self.pairs.insert(p);
        }
    }
}

fn cpu_per_gbps(rec: &RecView, host: bool) -> (Option<f64>, Option<f64>) {
    let bw = match rec.bw_gbps {
        Some(b) if b > 0.0 => b,
        _ => return (None, None),
    };
    if host {
        (
            rec.host_cpu_local.map(|h| h.total_pct / bw),
            rec.host_cpu_remote.map(|h| h.total_pct / bw),
        )
    } else {
        (
            rec.cpu_local_pct.map(|c| c / bw),
            rec.cpu_remote_pct.map(|c| c / bw),
        )
    }
}

/// An mtu record's interface and encapsulation, from the notes fabperf mtu
/// writes (`interface vxlan0 (MTU 1450, vxlan), 50 bytes of encapsulation
/// (outer Ethernet 14 + ...)`).
fn mtu_interface(rec: &RecView) -> (Option<String>, Option<String>) {
    for w in &rec.warnings {
        let Some(rest) = w.strip_prefix("interface ") else {
            continue;
        };
        let (iface, encap) = match rest.split_once("), ") {
            Some((a, b)) => (&rest[..a.len() + 1], Some(b)),
            None => (rest, None),
        };
        let encap = encap.and_then(|e| {
            let (bytes, parts) = e.split_once(" bytes of encapsulation")?;
            let parts = parts.trim().trim_start_matches('(').trim_end_matches(')');
            let kind = iface
                .rsplit_once(", ")
                .map(|(_, k)| k.trim_end_matches(')'))
                .unwrap_or("encapsulation");
            Some(format!("{kind} {} B ({parts})", bytes.trim()))
        });
        return (Some(iface.to_string()), encap);
    }
    (None, None)
}

/// How a pattern's cells are told apart: (row key, row words, instance).
/// Pairs and incast receivers are rows of their own; a mesh's pairs and a
/// bisection's cuts are instances of one row.
fn instance_of(s: &fabperf_store::CellSpec) -> (String, String, String) {
    let pair = |(a, b): &(String, String)| format!("{a} -> {b}");
    match s.pattern.as_str() {
        "pairs" => match s.flows.first() {
            Some((a, b)) => (
                format!("pair:{a}>{b}"),
                format!("{a} -> {b}"),
                format!("{a} -> {b}"),
            ),
            None => ("pair:".into(), "pair".into(), String::new()),
        },
        "mesh" => (
            "mesh".into(),
            "mesh".into(),
            s.flows.first().map(pair).unwrap_or_default(),
        ),
        "incast" => {
            let r = s.flows.first().map(|f| f.1.clone()).unwrap_or_default();
            (format!("incast:{r}"), format!("incast into {r}"), r)
        }
        "bisection" => {
            let mut f: Vec<String> = s.flows.iter().map(|(a, b)| format!("{a}→{b}")).collect();
            f.sort();
            ("bisection".into(), "bisection".into(), f.join(", "))
        }
        p => (p.to_string(), p.to_string(), String::new()),
    }
}

/// Merge a record's histogram into the row's; the repeat's p50 (from its
/// histogram, else its stored percentile).
fn add_latency(acc: &mut Acc, rec: &RecView, cell: &str, notes: &mut Vec<String>) -> Option<f64> {
    acc.lat_kind = acc
        .lat_kind
        .clone()
        .or(rec.lat.as_ref().and_then(|l| l.kind.clone()));
    // Read sparsely (a mesh report merges a histogram per pair), each
    // repeat's p50 from its own buckets in the merged histogram's layout.
    let decoded = rec.lat_hist.as_deref().map(hist::decode_counts);
    let mut hp50 = None;
    match decoded {
        Some(Ok(c)) if c.iter().any(|&(_, n)| n > 0) => {
            hp50 = acc.hists.quantile_of_counts_us(&c, 0.5);
            if let Err(e) = acc.hists.add_counts(&c) {
                notes.push(format!("cell {cell}: {e}"));
                acc.hist_missing += 1;
            }
        }
        Some(Err(e)) => {
            notes.push(format!("cell {cell}: {e}; its stored percentiles are used"));
            acc.hist_missing += 1;
        }
        _ => acc.hist_missing += 1,
    }
    let stored = rec.lat.clone().unwrap_or_default();
    let p50 = hp50.or(stored.p50);
    acc.stored.push(&stored);
    p50
}

/// The instances of a row in run order, each with its repeats' statistics;
/// `port` gives the port rate a cell's flows are bounded by.
fn instances(insts: Vec<InstAcc>, port: &dyn Fn(&PortOf) -> Option<f64>) -> Vec<Instance> {
    let mut with: Vec<InstAcc> = insts.into_iter().filter(|x| x.first.is_some()).collect();
    with.sort_by_key(|x| x.first);
    with.into_iter()
        .map(|x| {
            let p: Option<Vec<f64>> = x.ports.iter().map(port).collect();
            Instance {
                stats: Stats::of(&x.values),
                key: x.key,
                cells: x.cells,
                values: x.values,
                port_rate_gbps: p
                    .map(|p| p.iter().copied().fold(f64::INFINITY, f64::min))
                    .filter(|v| v.is_finite()),
            }
        })
        .collect()
}

/// The range over a row's instances; `None` for fewer than two with a
/// figure. `headline` is `min` for a bisection, else `median`.
fn spread_of(
    insts: &[Instance],
    family: Family,
    of: &'static str,
    headline: &'static str,
) -> Option<Spread> {
    let with: Vec<(&Instance, f64)> = insts
        .iter()
        .filter_map(|i| Some((i, i.stats.as_ref()?.mean)))
        .collect();
    if with.len() < 2 {
        return None;
    }
    let means: Vec<f64> = with.iter().map(|w| w.1).collect();
    let lo = with.iter().min_by(|a, b| a.1.total_cmp(&b.1)).expect("two");
    let hi = with.iter().max_by(|a, b| a.1.total_cmp(&b.1)).expect("two");
    let (worst, best) = if family.higher_is_better() {
        (lo, hi)
    } else {
        (hi, lo)
    };
    let reps: Vec<usize> = with.iter().map(|w| w.0.values.len()).collect();
    Some(Spread {
        of,
        count: with.len(),
        min: lo.1,
        median: stats::median(&means),
        max: hi.1,
        worst: worst.0.key.clone(),
        best: best.0.key.clone(),
        headline,
        repeats_min: reps.iter().copied().min().unwrap_or(0),
        repeats_max: reps.iter().copied().max().unwrap_or(0),
    })
}

/// Is `v` above the real port rate `p` (beyond rounding)?
fn above_port(v: f64, p: f64) -> bool {
    p > 0.0 && v > p * (1.0 + 1e-9)
}

/// The finding for a figure above the port rate, in words.
pub fn port_finding_text(v: f64, p: f64) -> String {
    format!(
        "{} Gbit/s measured is above the {} Gbit/s port rate: the rate is wrong (a virtual link's \
         label, a cap not seen) or the traffic was counted twice; no share of the port is given",
        fmt_num(v),
        fmt_num(p)
    )
}

/// One row from its group's cells.
fn row_of(data: &RunData, cell: &CellRow, scope_key: String, first: String, mut acc: Acc) -> Row {
    let s = &cell.spec;
    let family = Family::of_kind(&s.kind).expect("grouped by known kinds");
    let values: Vec<f64> = std::mem::take(&mut acc.values);
    let port_of = |p: &PortOf| match p {
        PortOf::Known(p) => *p,
        PortOf::Flows(flows, bidir) => flows_port(data, &s.path, flows, *bidir),
    };
    acc.inst_at = HashMap::new();
    let insts = instances(std::mem::take(&mut acc.insts), &port_of);
    let multi = insts.len() > 1;
    let unit = family.unit();
    let mut warnings: Vec<String> = Vec::new();
    let (stats, spread, headline_port) = if !multi {
        let st = Stats::of(&values);
        if let Some(st) = &st {
            warnings.extend(stats::warnings(&values, st).iter().map(|w| w.text(unit)));
        }
        let port = insts.first().and_then(|i| i.port_rate_gbps);
        (st, None, port)
    } else if s.pattern == "bisection" {
        // The bisection bandwidth is the slowest cut's.
        let sp = spread_of(&insts, family, "cuts", "min");
        let slow = sp
            .as_ref()
            .and_then(|sp| insts.iter().find(|i| i.key == sp.worst));
        if let (Some(sp), Some(i)) = (&sp, slow) {
            warnings.push(format!(
                "bisection bandwidth: the slowest of {} cuts ({}); cuts range {}–{} {unit} (median {}); \
                 the interval is over that cut's repeats",
                sp.count,
                sp.worst,
                fmt_num(sp.min),
                fmt_num(sp.max),
                fmt_num(sp.median)
            ));
            if let Some(st) = &i.stats {
                warnings.extend(stats::warnings(&i.values, st).iter().map(|w| w.text(unit)));
            }
        }
        // Fewer than two cuts with a figure: the one that has one.
        let slow = slow.or_else(|| insts.iter().find(|i| i.stats.is_some()));
        let st = slow.and_then(|i| i.stats.clone());
        let port = slow.and_then(|i| i.port_rate_gbps);
        (st, sp, port)
    } else {
        let sp = spread_of(&insts, family, "pairs", "median");
        if let Some(sp) = &sp {
            warnings.push(format!(
                "{} pairs, {} repeat(s) each: worst {} ({}), median {}, best {} ({}) {unit}; \
                 the figure is the median pair and there is no interval across pairs (they are \
                 different links, not repeats); the matrix below has each pair",
                sp.count,
                if sp.repeats_min == sp.repeats_max {
                    sp.repeats_min.to_string()
                } else {
                    format!("{}-{}", sp.repeats_min, sp.repeats_max)
                },
                fmt_num(if family.higher_is_better() {
                    sp.min
                } else {
                    sp.max
                }),
                sp.worst,
                fmt_num(sp.median),
                fmt_num(if family.higher_is_better() {
                    sp.max
                } else {
                    sp.min
                }),
                sp.best
            ));
        }
        let ports: Option<Vec<f64>> = insts.iter().map(|i| i.port_rate_gbps).collect();
        let port = ports
            .map(|p| p.iter().copied().fold(f64::INFINITY, f64::min))
            .filter(|x| x.is_finite());
        // Fewer than two pairs with a figure: the one that has one.
        let st = if sp.is_none() {
            insts.iter().find_map(|i| i.stats.clone())
        } else {
            None
        };
        (st, sp, port)
    };
    let scope = match s.pattern.as_str() {
        "pairs" | "incast" => first,
        "mesh" => format!("mesh, {} pairs", acc.pairs.len()),
        "bisection" => match insts.len() {
            0 => "bisection, no cut measured".into(),
            1 => "bisection, 1 cut".into(),
            k => format!("bisection, min of {k} cuts"),
        },
        p => p.to_string(),
    };
    // Repeats without a figure are named, never averaged; a bisection cut
    // without any leaves the minimum over the cuts that were measured.
    let dir = acc.direction.clone().unwrap_or_else(|| "forward".into());
    let mut unmeasured: Vec<&str> = Vec::new();
    for f in &acc.failed {
        let measured = insts
            .iter()
            .any(|i| i.key == f.instance && !i.values.is_empty());
        if s.pattern == "bisection" && !measured {
            if unmeasured.contains(&f.instance.as_str()) {
                continue;
            }
            unmeasured.push(&f.instance);
            let n = acc
                .failed
                .iter()
                .filter(|g| g.instance == f.instance)
                .count();
            warnings.push(format!(
                "cut {} has no {dir} figure ({n} cell{}, first: {}): the bisection bandwidth is \
                 the slowest of the cuts measured, and a cut not measured may be slower",
                f.instance,
                if n == 1 { "" } else { "s" },
                f.reason
            ));
        } else {
            warnings.push(format!(
                "repeat {} ({}{}) has no {dir} figure and is not averaged: {}",
                f.repeat + 1,
                f.cell,
                if s.pattern == "bisection" {
                    format!(", cut {}", f.instance)
                } else {
                    String::new()
                },
                f.reason
            ));
        }
    }
    let concurrency = (!acc.overlaps.is_empty()).then(|| {
        let skews: Option<Vec<f64>> = acc.skews.iter().copied().collect();
        let lo = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Concurrency {
            cells: acc.overlaps.len(),
            overlap_pct_min: lo(&acc.overlaps),
            overlap_pct_max: hi(&acc.overlaps),
            start_skew_s_min: skews.as_deref().map(lo),
            start_skew_s_max: skews.as_deref().map(hi),
        }
    });
    if let Some(c) = &concurrency {
        warnings.push(c.words());
    }
    if let Some(o) = &acc.outcast {
        warnings.push(format!(
            "outcast: {o}; its figure is what left the receiver"
        ));
    }
    let figure = match (&stats, &spread) {
        (Some(st), _) => Some(st.mean),
        (None, Some(sp)) => Some(sp.median),
        _ => None,
    };
    let bw_family = matches!(family, Family::Bandwidth | Family::Udp);
    let port = if bw_family { headline_port } else { None };
    let mut port_finding = None;
    let pct_port = match (figure, port) {
        (Some(v), Some(p)) if bw_family && p > 0.0 => {
            // The best instance must fit too: a mesh pair above the port
            // is as wrong as a pair row.
            let top = spread.as_ref().map_or(v, |sp| sp.max.max(v));
            if above_port(top, p) {
                port_finding = Some(port_finding_text(top, p));
                None
            } else {
                Some(v / p * 100.0)
            }
        }
        _ => None,
    };
    if let Some(f) = &port_finding {
        warnings.push(f.clone());
    }
    let cpu = (acc.cpu_client.pushed > 0).then(|| CpuPerGbps {
        client: acc.cpu_client.mean_of_all(),
        agent: acc.cpu_agent.mean_of_all(),
        source: if acc.cpu_host { "host" } else { "threads" },
    });
    let cpu = cpu.filter(|c| c.client.is_some() || c.agent.is_some());
    let lat = matches!(family, Family::Latency | Family::Http).then(|| lat_figures(&acc));
    if let Some(l) = &lat {
        if l.source == LatSource::StoredPercentiles && acc.stored.count > 0 {
            warnings.push(
                "no latency histogram stored: p50/p99 are the mean of the repeats' own percentiles, not percentiles over every sample".into(),
            );
        }
    }
    let http = (family == Family::Http).then(|| {
        let total: u64 = acc.errors.values().fold(0u64, |a, v| a.saturating_add(*v));
        HttpFigures {
            errors: acc.errors.clone(),
            errors_total: total,
            ok: acc.ok_requests,
            error_pct: acc
                .ok_requests
                .filter(|ok| ok.saturating_add(total) > 0 && acc.errors_seen)
                .map(|ok| total as f64 * 100.0 / (ok as f64 + total as f64)),
        }
    });
    let mtu_path = (family == Family::Mtu && !values.is_empty()).then(|| MtuFigures {
        method: acc.op.clone().unwrap_or_default(),
        mtu_min: values.iter().copied().fold(f64::INFINITY, f64::min) as u64,
        mtu_max: values.iter().copied().fold(0.0, f64::max) as u64,
        payload: acc.mtu_payload,
        interface: acc.mtu_iface.clone(),
        encapsulation: acc.mtu_encap.clone(),
    });
    Row {
        family,
        test: s.test.clone(),
        kind: s.kind.clone(),
        path: s.path.clone(),
        pattern: s.pattern.clone(),
        scope,
        scope_key: if family == Family::Mtu {
            format!("{scope_key}|{}", acc.op.clone().unwrap_or_default())
        } else {
            scope_key
        },
        dims: s.dims.clone(),
        size: if family == Family::Mtu {
            None
        } else {
            acc.size
        },
        streams: acc.streams,
        op: acc.op.clone(),
        direction: acc.direction.clone(),
        of_bidir: acc.of_bidir,
        mtu: acc.mtu,
        rate: rate_label(&s.dims),
        variant: variant_label(&s.dims),
        nodes: {
            let mut n: Vec<String> = acc.node_ids.keys().cloned().collect();
            n.sort();
            n
        },
        cells: std::mem::take(&mut acc.cells),
        values,
        stats,
        warnings,
        port_rate_gbps: port,
        pct_port,
        cpu,
        retransmits: acc.retrans.mean(),
        loss_pct: acc.loss.mean(),
        lat,
        instances: if multi { insts } else { Vec::new() },
        spread,
        port_finding,
        http,
        mtu_path,
        concurrency,
        unmeasured: unmeasured.iter().map(|u| u.to_string()).collect(),
        failed: acc.failed.clone(),
        base: None,
    }
}

/// A cell of concurrent flows (incast, bisection): one row group and one
/// table entry per direction, the figure that direction's aggregate; a
/// direction (or a failed cell) without a usable aggregate is a repeat
/// without a figure, with its reason.
#[allow(clippy::too_many_arguments)]
fn add_multi(
    data: &RunData,
    cell: &CellRow,
    samples: &[Sample],
    family: Family,
    idx: usize,
    groups: &mut BTreeMap<GroupKey, (CellRow, Acc)>,
    incasts: &mut Vec<Incast>,
    bisections: &mut Vec<Bisection>,
) {
    let s = &cell.spec;
    let (scope_key, first, inst) = instance_of(s);
    // One way: each direction is carried by the link one way.
    let port = cell_port(data, cell, None);
    let legs: Vec<Leg> = flows::legs_of(cell, samples)
        .into_iter()
        .map(|mut l| {
            set_port(&mut l, port);
            l
        })
        .collect();
    // The flows' own test settings (an aggregate's `streams` counts flows).
    let flow_rec = samples
        .iter()
        .find(|m| m.role == Role::Flow)
        .map(|m| &m.rec);
    for l in &legs {
        match s.pattern.as_str() {
            "incast" => incasts.push(Incast {
                test: s.test.clone(),
                path: s.path.clone(),
                receiver: s.flows.first().map(|f| f.1.clone()).unwrap_or_default(),
                repeat: s.repeat,
                cell: s.cell_id.clone(),
                dims: s.dims.clone(),
                cell_flows: s.flows.clone(),
                leg: l.clone(),
            }),
            _ => bisections.push(Bisection {
                test: s.test.clone(),
                path: s.path.clone(),
                cut: 0,
                repeat: s.repeat,
                cell: s.cell_id.clone(),
                dims: s.dims.clone(),
                cell_flows: s.flows.clone(),
                leg: l.clone(),
            }),
        }
        // A message size splits a direction's rows only when the cell
        // measured several (a failed cell, which has none, joins the row of
        // the one size its direction has).
        let split_size = l.size.filter(|_| {
            legs.iter()
                .any(|o| o.direction == l.direction && o.size != l.size)
        });
        // A failed cell stands for each direction it was to measure.
        let dirs = if cell.state == CellState::Failed {
            flows::directions_of(&l.direction)
        } else {
            vec![l.direction.clone()]
        };
        for d in dirs {
            let key = (
                idx,
                s.dims.to_string(),
                s.path.clone(),
                format!("{scope_key}|{d}"),
                first.clone(),
                format!(
                    "{d}|{}",
                    split_size.map(|z| z.to_string()).unwrap_or_default()
                ),
            );
            let (_, acc) = groups
                .entry(key)
                .or_insert_with(|| (cell.clone(), Acc::default()));
            acc.add_flows(&s.flows);
            acc.size = acc
                .size
                .or(dim_u64(&s.dims, "size"))
                .or(l.size)
                .or(flow_rec.and_then(|r| r.size));
            acc.streams = acc
                .streams
                .or(dim_u64(&s.dims, "streams"))
                .or(flow_rec.and_then(|r| r.streams));
            acc.op = acc
                .op
                .clone()
                .or(dim_str(&s.dims, "op"))
                .or(flow_rec.and_then(|r| r.op.clone()));
            acc.direction = Some(d.clone());
            acc.of_bidir = l.of_bidir;
            if acc.outcast.is_none() {
                acc.outcast = l.outcast.clone();
            }
            acc.mtu = acc.mtu.or(dim_u64(&s.dims, "mtu"));
            acc.add_port(&inst, PortOf::Known(port));
            match (l.aggregate_gbps, &l.failed) {
                (Some(g), None) if family != Family::Mtu => {
                    acc.add_cell(&inst, &s.cell_id);
                    acc.add_value(&inst, g);
                    if let Some(o) = l.overlap_pct {
                        acc.overlaps.push(o);
                        acc.skews.push(l.start_skew_s);
                    }
                }
                _ => acc.failed.push(FailedRepeat {
                    cell: s.cell_id.clone(),
                    repeat: s.repeat,
                    instance: inst.clone(),
                    reason: l.failed.clone().unwrap_or_else(|| "no figure".to_string()),
                }),
            }
        }
    }
}

/// The one-way port rate of a direction, its share or the finding that it
/// is above it.
fn set_port(l: &mut Leg, port: Option<f64>) {
    l.port_rate_gbps = port;
    if let (Some(a), Some(p)) = (l.aggregate_gbps, port.filter(|p| *p > 0.0)) {
        if above_port(a, p) {
            l.port_finding = Some(port_finding_text(a, p));
        } else {
            l.pct_port = Some(a / p * 100.0);
        }
    }
}

/// A cell of one flow (a pair, a mesh pair): its record(s) into its row.
fn add_single(
    cell: &CellRow,
    samples: &[Sample],
    family: Family,
    order: &mut BTreeMap<String, usize>,
    groups: &mut BTreeMap<GroupKey, (CellRow, Acc)>,
    notes: &mut Vec<String>,
) {
    let s = &cell.spec;
    // An mtu cell stores one record per method that measured; every
    // other cell one record that stands for it.
    let recs: Vec<&Sample> = if family == Family::Mtu {
        samples.iter().filter(|m| m.role == Role::Total).collect()
    } else {
        main_sample(samples).into_iter().collect()
    };
    if recs.is_empty() {
        notes.push(format!(
            "cell {} ({} on {}) is done but has no total record; left out",
            s.cell_id, s.test, s.path,
        ));
        return;
    }
    let (scope_key, first, inst) = instance_of(s);
    let n = order.len();
    let idx = *order.entry(s.test.clone()).or_insert(n);
    for main in recs {
        let rec = &main.rec;
        let method = if family == Family::Mtu {
            rec.op.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let key = (
            idx,
            s.dims.to_string(),
            s.path.clone(),
            scope_key.clone(),
            first.clone(),
            method.clone(),
        );
        let (_, acc) = groups
            .entry(key)
            .or_insert_with(|| (cell.clone(), Acc::default()));
        acc.add_cell(&inst, &s.cell_id);
        acc.add_flows(&s.flows);
        acc.size = acc.size.or(dim_u64(&s.dims, "size")).or(rec.size);
        acc.streams = acc.streams.or(dim_u64(&s.dims, "streams")).or(rec.streams);
        acc.op = acc.op.clone().or(dim_str(&s.dims, "op")).or(rec.op.clone());
        acc.direction = acc
            .direction
            .clone()
            .or(dim_str(&s.dims, "direction"))
            .or(rec.direction.clone());
        acc.mtu = acc.mtu.or(dim_u64(&s.dims, "mtu"));
        // Looked up at the end, once every record has said which links
        // are virtual.
        let bidir = acc.direction.as_deref() == Some("bidir");
        acc.add_port(&inst, PortOf::Flows(s.flows.clone(), bidir));
        if let Some(r) = rec.retransmits {
            acc.retrans.push(r as f64);
        }
        if let Some(l) = rec.udp_loss_pct {
            acc.loss.push(l);
        }
        let push = |acc: &mut Acc, v: Option<f64>| {
            if let Some(v) = v {
                acc.add_value(&inst, v);
            }
        };
        match family {
            Family::Bandwidth | Family::Udp => {
                push(acc, rec.bw_gbps);
                if s.flows.len() == 1 {
                    let host = rec.host_cpu_local.is_some() && rec.host_cpu_remote.is_some();
                    if acc.cells.len() == 1 {
                        acc.cpu_host = host;
                    }
                    let (c, a) = cpu_per_gbps(rec, acc.cpu_host && host);
                    acc.cpu_client.push_opt(c);
                    acc.cpu_agent.push_opt(a);
                }
            }
            Family::Latency | Family::Http => {
                let p50 = add_latency(acc, rec, &s.cell_id, notes);
                if family == Family::Latency {
                    push(acc, p50);
                } else {
                    push(acc, rec.requests_per_s);
                    if let Some(e) = &rec.errors {
                        acc.errors_seen = true;
                        for (k, v) in e {
                            let c = acc.errors.entry(k.clone()).or_default();
                            *c = c.saturating_add(*v);
                        }
                    }
                    // The record counts successful requests as iterations
                    // (requests/s × the measured interval).
                    if let (Some(r), Some(d)) = (rec.requests_per_s, rec.duration_s) {
                        let ok = (r * d).round() as u64;
                        acc.ok_requests = Some(acc.ok_requests.unwrap_or(0).saturating_add(ok));
                    }
                }
            }
            Family::Mtu => {
                acc.op = Some(method.clone());
                push(acc, rec.mtu.map(|m| m as f64));
                acc.mtu_payload = acc.mtu_payload.or(rec.size);
                let (iface, encap) = mtu_interface(rec);
                acc.mtu_iface = acc.mtu_iface.take().or(iface);
                acc.mtu_encap = acc.mtu_encap.take().or(encap);
            }
        }
    }
}

/// What the verdicts need of the cells besides the rows: the nodes their
/// flows name, and the cells of concurrent flows that finished.
#[derive(Default)]
pub(crate) struct Seen {
    nodes: BTreeSet<String>,
    done_multi: HashSet<String>,
}

/// Everything but the mesh analyses (which need the store) and verdicts,
/// read one cell at a time: what is kept is per row (a mesh's row keeps a
/// figure per cell and the statistics per pair, not the records), so a
/// mesh of a thousand nodes fits in memory.
pub(crate) fn assemble(
    store: &Store,
    data: &mut RunData,
    meshes: &mut [summary::MeshFeed],
    opts: &Options,
) -> Result<(Report, Seen), ReportError> {
    let mut notes = Vec::new();
    let mut groups: BTreeMap<GroupKey, (CellRow, Acc)> = BTreeMap::new();
    let mut order: BTreeMap<String, usize> = BTreeMap::new();
    let mut incasts = Vec::new();
    let mut bisections = Vec::new();
    let mut unknown_kinds = BTreeSet::new();
    let mut seen = Seen::default();
    let mut failed: Vec<FailedCell> = Vec::new();
    let (mut done, mut failed_n, mut pending) = (0usize, 0usize, 0usize);
    // Cells of concurrent flows are few: they are taken last, once every
    // record has said which links are virtual (their port rates then hold).
    let mut multis: Vec<(usize, CellRow, Vec<Sample>, Family)> = Vec::new();
    crate::data::each_cell_feeding(store, data, meshes, &mut |_, cell, samples| {
        let s = &cell.spec;
        for (a, b) in &s.flows {
            for n in [a, b] {
                if !seen.nodes.contains(n) {
                    seen.nodes.insert(n.clone());
                }
            }
        }
        match cell.state {
            CellState::Done => done += 1,
            CellState::Failed => {
                failed_n += 1;
                failed.push(FailedCell {
                    cell: s.cell_id.clone(),
                    test: s.test.clone(),
                    path: s.path.clone(),
                    pattern: s.pattern.clone(),
                    flows: s.flows.clone(),
                    // On one line (a stored reason may carry line breaks and
                    // runs of spaces).
                    error: flows::one_line(cell.error.as_deref().unwrap_or_default()),
                });
            }
            CellState::Pending => {
                pending += 1;
                return Ok(());
            }
        }
        if !matches!(
            s.pattern.as_str(),
            "pairs" | "mesh" | "incast" | "bisection"
        ) {
            return Ok(());
        }
        // A failed cell of concurrent flows is a repeat of its rows without
        // a figure; other failed cells are listed on their own.
        let multi = flows::is_multi(&s.pattern);
        if cell.state == CellState::Failed && !multi {
            return Ok(());
        }
        let Some(family) = Family::of_kind(&s.kind) else {
            if cell.state == CellState::Done {
                unknown_kinds.insert(s.kind.clone());
            }
            return Ok(());
        };
        if multi {
            if cell.state == CellState::Done {
                seen.done_multi.insert(s.cell_id.clone());
            }
            let n = order.len();
            let idx = *order.entry(s.test.clone()).or_insert(n);
            multis.push((idx, cell, samples, family));
            return Ok(());
        }
        add_single(&cell, &samples, family, &mut order, &mut groups, &mut notes);
        Ok(())
    })?;
    for (idx, cell, samples, family) in &multis {
        add_multi(
            data,
            cell,
            samples,
            *family,
            *idx,
            &mut groups,
            &mut incasts,
            &mut bisections,
        );
    }
    drop(multis);
    // Number the cuts of each bisection test: the same flows are one cut.
    let mut cuts: Vec<(String, String, String, String)> = Vec::new();
    for b in &mut bisections {
        let mut f: Vec<String> = b
            .cell_flows
            .iter()
            .map(|(a, c)| format!("{a}→{c}"))
            .collect();
        f.sort();
        let key = (
            b.test.clone(),
            b.path.clone(),
            b.dims.to_string(),
            f.join(", "),
        );
        let same =
            |k: &(String, String, String, String)| k.0 == key.0 && k.1 == key.1 && k.2 == key.2;
        b.cut = match cuts.iter().position(|k| *k == key) {
            Some(_) => {
                cuts.iter()
                    .filter(|k| same(k))
                    .position(|k| *k == key)
                    .unwrap_or(0)
                    + 1
            }
            None => {
                let n = cuts.iter().filter(|k| same(k)).count() + 1;
                cuts.push(key);
                n
            }
        };
    }
    if !unknown_kinds.is_empty() {
        notes.push(format!(
            "cells of test kinds this report does not know are left out: {}",
            unknown_kinds.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let mut rows = Vec::new();
    for ((_, _, _, scope_key, first, _), (cell, acc)) in groups {
        rows.push(row_of(data, &cell, scope_key, first, acc));
    }
    // Within a test: sizes ascending, then the other dims, paths in the
    // order first seen, baseline first.
    let baseline_from = if opts.baseline.is_some() {
        Some("--baseline")
    } else if data.plan_baseline.is_some() {
        Some("plan")
    } else {
        None
    };
    let baseline = opts.baseline.clone().or(data.plan_baseline.clone());
    let paths_seen: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for r in &rows {
            if !v.contains(&r.path) {
                v.push(r.path.clone());
            }
        }
        v
    };
    let by_dim = baseline.as_deref().and_then(dim_baseline);
    if let Some((key, val)) = by_dim {
        if !rows.iter().any(|r| dim_is(&r.dims, key, val)) {
            let mut seen: Vec<String> = rows.iter().filter_map(|r| dim_str(&r.dims, key)).collect();
            seen.sort();
            seen.dedup();
            let msg = format!(
                "no cell of run {} has {key} = {val}; values measured: {}",
                data.run.id,
                if seen.is_empty() {
                    "none (no such dimension in this run)".to_string()
                } else {
                    seen.join(", ")
                }
            );
            if opts.baseline.is_some() {
                return Err(ReportError::Usage(format!(
                    "{msg}; give --baseline a path or KEY=VALUE of a measured dimension"
                )));
            }
            notes.push(format!("{msg}; no differences are computed"));
        }
    } else if let Some(b) = &baseline {
        if !paths_seen.contains(b) {
            let msg = format!(
                "the baseline path {b:?} has no measurement in run {}; paths measured: {}",
                data.run.id,
                if paths_seen.is_empty() {
                    "none".to_string()
                } else {
                    paths_seen.join(", ")
                }
            );
            if opts.baseline.is_some() {
                return Err(ReportError::Usage(format!(
                    "{msg}; give one of them to --baseline"
                )));
            }
            notes.push(format!("{msg}; no differences are computed"));
        }
    }
    let path_rank = |p: &str| {
        if Some(p) == baseline.as_deref() {
            0
        } else {
            1 + paths_seen.iter().position(|x| x == p).unwrap_or(0)
        }
    };
    let test_rank: BTreeMap<String, usize> = order;
    // Under a KEY=VALUE baseline its rows come first, then the others in
    // the order of their dimension's values (numerically where they are
    // numbers: 0, 50, 100, 200 rules).
    let variant_rank = |r: &Row| {
        let first = by_dim.is_some_and(|(k, v)| dim_is(&r.dims, k, v));
        let key = by_dim.map(|(k, _)| k);
        let num = key
            .and_then(|k| r.dims.get(k))
            .and_then(Value::as_f64)
            .map(|x| (x * 1000.0) as i64);
        (!first, num, r.variant.clone())
    };
    rows.sort_by(|a, b| {
        (
            a.family,
            test_rank.get(&a.test),
            a.size,
            a.op.clone(),
            a.streams,
            a.direction.clone(),
            a.rate.clone(),
            a.mtu,
            a.scope_key.clone(),
            path_rank(&a.path),
            variant_rank(a),
        )
            .cmp(&(
                b.family,
                test_rank.get(&b.test),
                b.size,
                b.op.clone(),
                b.streams,
                b.direction.clone(),
                b.rate.clone(),
                b.mtu,
                b.scope_key.clone(),
                path_rank(&b.path),
                variant_rank(b),
            ))
    });
    let description = toml::from_str::<toml::Value>(&data.run.plan_text)
        .ok()
        .and_then(|v| v.get("description")?.as_str().map(str::to_string));
    notes.append(&mut data.notes);
    let mut report = Report {
        run: RunMeta {
            id: data.run.id,
            plan: data.run.plan_name.clone(),
            description,
            started_at: data.run.started_at.clone(),
            ended_at: data.run.ended_at.clone(),
            fabperf_version: data.run.fabperf_version.clone(),
            cells_done: done,
            cells_failed: failed_n,
            cells_pending: pending,
        },
        baseline: baseline.clone(),
        baseline_from,
        rows,
        meshes: Vec::new(),
        incasts,
        bisections,
        agents: data.agents.clone(),
        findings: data.findings.clone(),
        verdicts: Vec::new(),
        failed,
        notes,
        gates: Vec::new(),
    };
    if let Some(b) = &baseline {
        let deltas: Vec<(Option<Delta>, Option<String>)> = report
            .rows
            .iter()
            .map(|r| match by_dim {
                Some((key, val)) => {
                    if dim_is(&r.dims, key, val) {
                        return (None, None);
                    }
                    let Some(base) = report.counterpart_dim(r, key, val) else {
                        return (None, None);
                    };
                    let mut d = delta(r, base);
                    d.path = b.clone();
                    (Some(d), None)
                }
                None => {
                    if &r.path == b {
                        return (None, None);
                    }
                    match report.matching(r, b, true) {
                        Some((base, unlike)) if unlike.is_empty() => (Some(delta(r, base)), None),
                        Some((base, unlike)) if opts.unlike => {
                            let why = format!(
                                "compared with an unlike row on {b} ({}; --compare-unlike): the \
                                 difference mixes the path with that",
                                unlike.join(", ")
                            );
                            let mut d = delta(r, base);
                            d.unlike = unlike;
                            // An unlike difference is shown, never judged.
                            d.within_noise = None;
                            d.welch = None;
                            (Some(d), Some(why))
                        }
                        Some((_, unlike)) => (
                            None,
                            Some(format!(
                                "no like row on {b} to compare with (the closest differs: {}); \
                                 --compare-unlike shows that difference, marked",
                                unlike.join(", ")
                            )),
                        ),
                        None => (None, None),
                    }
                }
            })
            .collect();
        for (r, (d, why)) in report.rows.iter_mut().zip(deltas) {
            r.base = d;
            r.warnings.extend(why);
        }
    }
    Ok((report, seen))
}

fn lat_figures(acc: &Acc) -> LatFigures {
    if acc.hist_missing == 0 && acc.hists.parts > 0 {
        let h = &acc.hists;
        return LatFigures {
            min: h.min_us(),
            p50: h.quantile_us(0.5),
            p90: h.quantile_us(0.9),
            p99: h.quantile_us(0.99),
            p999: h.quantile_us(0.999),
            max: h.max_us(),
            mean: h.mean_us(),
            kind: acc.lat_kind.clone(),
            source: LatSource::Histograms {
                repeats: h.parts,
                samples: h.samples(),
            },
            curve: h.curve(),
        };
    }
    let st = &acc.stored;
    let (min, max) = (st.min, st.max);
    LatFigures {
        min,
        p50: st.p50.mean(),
        p90: st.p90.mean(),
        p99: st.p99.mean(),
        p999: st.p999.mean(),
        max,
        mean: st.mean.mean(),
        kind: acc.lat_kind.clone(),
        source: LatSource::StoredPercentiles,
        curve: Vec::new(),
    }
}

fn delta(r: &Row, b: &Row) -> Delta {
    let (ra, rb) = (r.mean(), b.mean());
    let base_mean = rb.unwrap_or(f64::NAN);
    // The test judges the figure the difference is taken of: the repeats
    // of the row's (headline) instance on both sides; a mesh of several
    // pairs has no repeats to test (`stats` is `None`).
    let welch = match (&r.stats, &b.stats) {
        (Some(x), Some(y)) => stats::welch(x, y),
        _ => None,
    };
    let mut d = Delta {
        path: b.path.clone(),
        kind: b.kind.clone(),
        test: b.test.clone(),
        base_mean,
        d_gbps: None,
        d_pct: None,
        d_p50_us: None,
        d_p99_us: None,
        d_loss_pp: None,
        d_error_pp: None,
        d_bytes: None,
        within_noise: welch.map(|w| !w.significant()),
        welch,
        unlike: Vec::new(),
    };
    let pct = |a: f64, c: f64| (c > 0.0).then(|| (a - c) / c * 100.0);
    match r.family {
        Family::Bandwidth | Family::Udp => {
            if let (Some(a), Some(c)) = (ra, rb) {
                d.d_gbps = Some(a - c);
                d.d_pct = pct(a, c);
            }
            if let (Some(a), Some(c)) = (r.loss_pct, b.loss_pct) {
                d.d_loss_pp = Some(a - c);
            }
        }
        Family::Latency | Family::Http => {
            let (la, lb) = (r.lat.as_ref(), b.lat.as_ref());
            if r.family == Family::Latency {
                d.d_p50_us = ra.zip(rb).map(|(a, c)| a - c);
            } else {
                // Requests/s is the figure; latency at p50 over every request.
                if let (Some(a), Some(c)) = (ra, rb) {
                    d.d_pct = pct(a, c);
                }
                d.d_p50_us = la
                    .and_then(|l| l.p50)
                    .zip(lb.and_then(|l| l.p50))
                    .map(|(a, c)| a - c);
                d.d_error_pp = r
                    .http
                    .as_ref()
                    .and_then(|h| h.error_pct)
                    .zip(b.http.as_ref().and_then(|h| h.error_pct))
                    .map(|(a, c)| a - c);
            }
            d.d_p99_us = la
                .and_then(|l| l.p99)
                .zip(lb.and_then(|l| l.p99))
                .map(|(a, c)| a - c);
        }
        Family::Mtu => {
            d.d_bytes = ra.zip(rb).map(|(a, c)| (c - a).round() as i64);
        }
    }
    d
}

/// A number in words: two decimals below 10, one below 100, none above.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A signed number with a real minus sign.
pub fn signed(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    if v < 0.0 && s.trim_start_matches(['0', '.']).chars().any(|c| c != '0') {
        format!("−{s}")
    } else {
        format!("+{s}")
    }
}

/// Where on the sweep a verdict's figure was measured, in words (the path
/// is the verdict's own): `at 64 KiB ×4 at rate 2.5G`.
fn where_(r: &Row) -> String {
    let mut s = match r.size {
        Some(b) => format!("at {}", size_words(b)),
        None => String::new(),
    };
    if let Some(op) = &r.op {
        s.push_str(&format!(" {op}"));
    }
    if let Some(n) = r.streams.filter(|n| *n > 1) {
        s.push_str(&format!(" ×{n}"));
    }
    if let Some(rate) = &r.rate {
        s.push_str(&format!(" at rate {rate}"));
    }
    s.trim().to_string()
}

fn verdicts(rep: &Report, data: &RunData, seen: &Seen) -> Vec<Verdict> {
    let mut out = Vec::new();
    let base = rep.baseline.as_deref();
    let doctor: Vec<&FindingView> = rep
        .findings
        .iter()
        .filter(|f| f.kind == "doctor" && f.severity.as_deref() != Some("info"))
        .collect();
    for path in rep.paths() {
        let rows: Vec<&Row> = rep.rows.iter().filter(|r| r.path == path).collect();
        let mut parts: Vec<String> = Vec::new();
        let mut level = Level::Ok;
        let nodes: BTreeSet<&str> = rows
            .iter()
            .flat_map(|r| r.nodes.iter().map(String::as_str))
            .collect();
        if Some(path.as_str()) == base {
            parts.push("baseline".into());
        }
        // Bandwidth against the baseline: the worst difference.
        // Unlike comparisons (--compare-unlike) are shown, never judged.
        let like = |r: &&&Row| r.base.as_ref().is_some_and(|d| d.unlike.is_empty());
        let worst_bw = rows
            .iter()
            .filter(|r| matches!(r.family, Family::Bandwidth | Family::Udp))
            .filter(like)
            .filter_map(|r| Some((r, r.base.as_ref()?.d_pct?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((r, pct)) = worst_bw {
            let d = r.base.as_ref().expect("filtered on base");
            // Within the two intervals: a small difference is noise; a large
            // one is reported, softened, with the reason (too few repeats).
            let noise = d.within_noise == Some(true);
            let caveat = if noise {
                "; not significant over its repeats (Welch's t-test), so more repeats are needed to be sure"
            } else {
                ""
            };
            if pct <= -5.0 && !(noise && pct > -25.0) {
                parts.push(format!(
                    "{} % vs {} {} ({} {} vs {} Gbit/s{caveat})",
                    signed(pct, 0),
                    d.path,
                    where_(r),
                    r.kind,
                    fmt_num(r.mean().unwrap_or(f64::NAN)),
                    fmt_num(d.base_mean)
                ));
                level = level.max(if pct <= -25.0 && (!noise || pct <= -50.0) {
                    Level::Bad
                } else {
                    Level::Warn
                });
            } else if pct >= 5.0 && !noise {
                parts.push(format!(
                    "{} % vs {} {} ({})",
                    signed(pct, 0),
                    d.path,
                    where_(r),
                    r.kind
                ));
            } else {
                parts.push(format!(
                    "bandwidth on par with {} (worst {} %{})",
                    d.path,
                    signed(pct, 1),
                    if noise { ", within the noise" } else { "" }
                ));
            }
        }
        // Latency against the baseline: the largest p50 increase.
        let worst_lat = rows
            .iter()
            .filter(|r| r.family == Family::Latency)
            .filter(like)
            .filter_map(|r| Some((r, r.base.as_ref()?.d_p50_us?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((r, d50)) = worst_lat {
            let d = r.base.as_ref().expect("filtered on base");
            let rel = if d.base_mean > 0.0 {
                d50 / d.base_mean
            } else {
                0.0
            };
            let d99 = d
                .d_p99_us
                .map(|x| format!(", {} µs at p99", signed(x, 1)))
                .unwrap_or_default();
            // The same figure the noise test judged: the repeats' p50.
            let noise = d.within_noise == Some(true);
            parts.push(format!(
                "{} µs at p50{d99} {} ({}{})",
                signed(d50, 1),
                where_(r),
                r.kind,
                if noise {
                    "; not significant over its repeats (Welch's t-test)"
                } else {
                    ""
                }
            ));
            if rel > 0.5 && d50 > 1.0 && !noise {
                level = level.max(Level::Bad);
            } else if rel > 0.1 && d50 > 0.5 {
                level = level.max(Level::Warn);
            }
        }
        // HTTP load against the baseline: the worst requests/s, errors added.
        if let Some((r, pct)) = rows
            .iter()
            .filter(|r| r.family == Family::Http)
            .filter(like)
            .filter_map(|r| Some((r, r.base.as_ref()?.d_pct?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
        {
            let d = r.base.as_ref().expect("filtered on base");
            let noise = d.within_noise == Some(true);
            let errs = d
                .d_error_pp
                .filter(|e| *e > 0.0)
                .map(|e| format!(", errors {} pp", signed(e, 2)))
                .unwrap_or_default();
            parts.push(format!(
                "{} % requests/s vs {} {} ({} {} vs {} req/s{errs}{})",
                signed(pct, 0),
                d.path,
                where_(r),
                r.kind,
                fmt_num(r.mean().unwrap_or(f64::NAN)),
                fmt_num(d.base_mean),
                if noise { "; not significant" } else { "" }
            ));
            if pct <= -25.0 && !noise {
                level = level.max(Level::Bad);
            } else if (pct <= -5.0 && !noise) || !errs.is_empty() {
                level = level.max(Level::Warn);
            }
        }
        // Path MTU: the bytes an overlay takes, named.
        for r in rows.iter().filter(|r| r.family == Family::Mtu) {
            if r.base
                .as_ref()
                .and_then(|d| d.d_bytes)
                .is_some_and(|b| b != 0)
            {
                parts.push(format!(
                    "MTU {} {} ({})",
                    fmt_num(r.mean().unwrap_or(f64::NAN)),
                    r.op.as_deref().unwrap_or(""),
                    crate::text::overhead_words(r)
                ));
            }
        }
        // UDP loss against the baseline.
        if let Some((r, pp)) = rows
            .iter()
            .filter_map(|r| Some((r, r.base.as_ref()?.d_loss_pp?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
        {
            if pp > 0.1 {
                parts.push(format!(
                    "loses {:.2} % of datagrams {} ({} pp vs {})",
                    r.loss_pct.unwrap_or(0.0),
                    where_(r),
                    signed(pp, 2),
                    r.base.as_ref().map(|d| d.path.as_str()).unwrap_or("")
                ));
                level = level.max(Level::Warn);
            }
        }
        // A figure above a real port rate: a wrong rate or wrong counting.
        for r in rows.iter().filter(|r| r.port_finding.is_some()) {
            parts.push(format!(
                "{} {}: {}",
                r.test,
                where_(r),
                r.port_finding.as_deref().unwrap_or_default()
            ));
            level = level.max(Level::Warn);
        }
        // Share of the port rate.
        if let Some((r, pct)) = rows
            .iter()
            .filter(|r| r.family == Family::Bandwidth && r.pattern == "pairs")
            .filter_map(|r| Some((r, r.pct_port?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
        {
            parts.push(format!(
                "best {:.0} % of the {} Gbit/s port {}",
                pct,
                fmt_num(r.port_rate_gbps.unwrap_or(f64::NAN)),
                where_(r)
            ));
            if pct < 50.0 {
                level = level.max(Level::Warn);
            }
        }
        for m in rep.meshes.iter().flat_map(|m| &m.groups) {
            if m.path != path {
                continue;
            }
            if !m.bad_nodes.is_empty() || !m.bad_links.is_empty() || !m.bad_rails.is_empty() {
                parts.push(format!(
                    "mesh {}: suspect node(s) {}{}, link(s) {}",
                    m.test,
                    list_or_none(m.bad_nodes.iter().map(String::as_str)),
                    if m.bad_rails.is_empty() {
                        String::new()
                    } else {
                        format!(", rail(s) {}", m.bad_rails.join(", "))
                    },
                    list_or_none(m.bad_links.iter().map(|(a, b)| format!("{a}-{b}")))
                ));
                level = level.max(Level::Warn);
            }
        }
        // Incast fairness and bisection bandwidth, in one phrase each, per
        // direction.
        let ics: Vec<&Incast> = rep.incasts.iter().filter(|i| i.path == path).collect();
        if let Some(worst) = ics.iter().filter(|i| i.leg.jain.is_some()).min_by(|a, b| {
            a.leg
                .jain
                .unwrap_or(1.0)
                .total_cmp(&b.leg.jain.unwrap_or(1.0))
        }) {
            let l = &worst.leg;
            parts.push(format!(
                "incast: Jain's index {:.2} at worst (into {}{}){}",
                l.jain.unwrap_or(1.0),
                worst.receiver,
                if l.is_plain() {
                    String::new()
                } else {
                    format!(", {}", l.direction_words())
                },
                l.pct_port
                    .map(|p| format!(", {p:.0} % of its port"))
                    .unwrap_or_default()
            ));
        }
        let mut outcasts: Vec<(&str, &str)> = Vec::new();
        for ic in &ics {
            if let Some(o) = &ic.leg.outcast {
                if !outcasts.contains(&(ic.test.as_str(), o.as_str())) {
                    outcasts.push((&ic.test, o));
                    parts.push(format!("incast {} into {}: {o}", ic.test, ic.receiver));
                    level = level.max(Level::Warn);
                }
            }
        }
        for ic in &ics {
            let l = &ic.leg;
            let what = format!(
                "incast into {} (repeat {}, {})",
                ic.receiver,
                ic.repeat + 1,
                l.direction_words()
            );
            if let Some(f) = &l.port_finding {
                parts.push(format!("{what}: {f}"));
                level = level.max(Level::Warn);
            }
        }
        // A done cell whose direction has no usable aggregate (failed cells
        // are counted below).
        let done_without = |cell: &str| seen.done_multi.contains(cell);
        for (what, l, cell) in ics
            .iter()
            .map(|i| {
                (
                    format!("incast into {} (repeat {}", i.receiver, i.repeat + 1),
                    &i.leg,
                    &i.cell,
                )
            })
            .chain(rep.bisections.iter().filter(|b| b.path == path).map(|b| {
                (
                    format!("bisection cut {} (repeat {}", b.cut, b.repeat + 1),
                    &b.leg,
                    &b.cell,
                )
            }))
        {
            if let Some(f) = l.failed.as_ref().filter(|_| done_without(cell)) {
                parts.push(format!("{what}, {}): no figure: {f}", l.direction_words()));
                level = level.max(Level::Warn);
            }
        }
        // Bisection: the slowest cut is the bisection bandwidth.
        for b in rows.iter().filter(|r| r.pattern == "bisection") {
            let Some(v) = b.mean() else { continue };
            let cuts = b.spread.as_ref().map_or(1, |sp| sp.count);
            let dir = b
                .direction_words()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            let missing = if b.unmeasured.is_empty() {
                String::new()
            } else {
                level = level.max(Level::Warn);
                format!(
                    "; {} more cut(s) without a figure, which may be slower",
                    b.unmeasured.len()
                )
            };
            match b.pct_port {
                Some(p) => {
                    parts.push(format!(
                        "bisection{dir}: {} Gbit/s, the slowest of {cuts} cut(s) of test {}, {p:.0} % of its flows' port rates{missing}",
                        fmt_num(v),
                        b.test
                    ));
                    if p < 50.0 {
                        level = level.max(Level::Warn);
                    }
                }
                None => parts.push(format!(
                    "bisection{dir}: {} Gbit/s, the slowest of {cuts} cut(s) of test {}{missing}",
                    fmt_num(v),
                    b.test
                )),
            }
        }
        let failed = rep.failed.iter().filter(|f| f.path == path).count();
        if failed > 0 {
            parts.push(format!("{failed} cell(s) failed"));
            level = level.max(Level::Warn);
        }
        // The findings of this path's nodes explain what the figures show.
        let see: Vec<String> = doctor
            .iter()
            .filter(|f| nodes.contains(f.node.as_str()))
            .map(|f| {
                format!(
                    "see doctor finding {}{}",
                    f.label(),
                    f.summary
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        if level > Level::Ok {
            parts.extend(see);
        }
        if parts.is_empty() {
            parts.push("measured; no baseline to compare with".into());
        }
        out.push(Verdict {
            scope: "path",
            subject: path.clone(),
            level,
            text: parts.join("; "),
        });
    }
    // Nodes.
    let mut nodes: BTreeSet<String> = data.agents.iter().map(|a| a.name.clone()).collect();
    nodes.extend(seen.nodes.iter().cloned());
    for n in nodes {
        let mut parts = Vec::new();
        let mut level = Level::Ok;
        for f in rep.findings.iter().filter(|f| f.node == n) {
            let l = match f.severity.as_deref() {
                Some("error") => Level::Bad,
                Some("warning") | Some("warn") => Level::Warn,
                _ => Level::Ok,
            };
            level = level.max(l);
            parts.push(format!(
                "{} finding {}{}",
                f.kind,
                f.id.as_deref().unwrap_or(&f.subject),
                f.summary
                    .as_deref()
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default()
            ));
        }
        for m in rep.meshes.iter().flat_map(|m| &m.groups) {
            // The mesh summary says why it names a node (all its pairs, its
            // sends or receives, or every cell failed), confirmed or not.
            for f in m.node_findings.iter().filter(|f| f.node == n) {
                parts.push(format!(
                    "{}suspect node in mesh {} on {}: {}",
                    if f.confirmed { "" } else { "unconfirmed " },
                    m.test,
                    m.path,
                    f.text
                ));
                level = level.max(if f.confirmed { Level::Bad } else { Level::Warn });
            }
            for (a, b) in &m.bad_links {
                if *a == n || *b == n {
                    parts.push(format!(
                        "suspect link {a}-{b} in mesh {} on {}",
                        m.test, m.path
                    ));
                    level = level.max(Level::Warn);
                }
            }
        }
        // An incast share below half the fair one, per direction: into the
        // receiver (the node a sender), out of it (the node a peer it sends to).
        for ic in &rep.incasts {
            let l = &ic.leg;
            let k = l.flows.len();
            if k < 2 {
                continue;
            }
            let reverse = l.to_clients;
            let mine = l
                .flows
                .iter()
                .find(|f| if reverse { f.dst == n } else { f.src == n });
            if let Some(f) = mine {
                let fair = 1.0 / k as f64;
                if f.share < 0.5 * fair {
                    parts.push(if reverse {
                        format!(
                            "got {:.0} % of the bandwidth out of {} as one of its {k} incast peers ({}; test {}; fair share {:.0} %)",
                            f.share * 100.0,
                            ic.receiver,
                            l.direction_words(),
                            ic.test,
                            fair * 100.0
                        )
                    } else {
                        format!(
                            "got {:.0} % of the bandwidth into {} as one of {k} incast senders ({}test {}; fair share {:.0} %)",
                            f.share * 100.0,
                            ic.receiver,
                            if l.of_bidir {
                                format!("{}; ", l.direction_words())
                            } else {
                                String::new()
                            },
                            ic.test,
                            fair * 100.0
                        )
                    });
                    level = level.max(Level::Warn);
                }
            }
        }
        // Inventory: a port rate or MTU unlike the rest of the path's nodes.
        for a in data.agents.iter().filter(|a| a.name == n) {
            if let Some(u) = &a.unreachable {
                parts.push(format!("agent on path {} unreachable: {u}", a.path));
                level = Level::Bad;
            }
            let peers: Vec<&Agent> = data
                .agents
                .iter()
                .filter(|p| p.path == a.path && p.name != n)
                .collect();
            if let Some(mine) = a.inventory.port_rate_gbps {
                if let Some(common) =
                    majority(peers.iter().filter_map(|p| p.inventory.port_rate_gbps))
                {
                    if (mine - common).abs() > 1e-9 {
                        parts.push(format!(
                            "port rate {} Gbit/s on path {} where its peers have {}",
                            fmt_num(mine),
                            a.path,
                            fmt_num(common)
                        ));
                        level = level.max(Level::Warn);
                    }
                }
            }
            if let Some(mine) = a.inventory.mtu {
                if let Some(common) = majority(
                    peers
                        .iter()
                        .filter_map(|p| p.inventory.mtu.map(|m| m as f64)),
                ) {
                    if (mine as f64 - common).abs() > 0.5 {
                        parts.push(format!(
                            "MTU {mine} on path {} where its peers have {common:.0}",
                            a.path
                        ));
                        level = level.max(Level::Warn);
                    }
                }
            }
        }
        let failed: Vec<&FailedCell> = rep
            .failed
            .iter()
            .filter(|f| f.flows.iter().any(|(a, b)| *a == n || *b == n))
            .collect();
        if !failed.is_empty() {
            parts.push(format!(
                "{} cell(s) with it failed (first: {})",
                failed.len(),
                failed[0].error
            ));
            level = level.max(Level::Warn);
        }
        if parts.is_empty() {
            parts.push("no issue found".into());
        }
        out.push(Verdict {
            scope: "node",
            subject: n,
            level,
            text: parts.join("; "),
        });
    }
    out
}

fn list_or_none<S: AsRef<str>>(it: impl Iterator<Item = S>) -> String {
    let v: Vec<String> = it.map(|s| s.as_ref().to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The value most of `vals` share (ties: the larger); `None` when empty.
fn majority(vals: impl Iterator<Item = f64>) -> Option<f64> {
    let mut counts: Vec<(f64, usize)> = Vec::new();
    for v in vals {
        match counts.iter_mut().find(|(x, _)| (*x - v).abs() < 1e-9) {
            Some(c) => c.1 += 1,
            None => counts.push((v, 1)),
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.total_cmp(&b.0)))
        .map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let r = |v: Value| rate_label(&serde_json::json!({ "rate": v }));
        assert_eq!(r(serde_json::json!(500_000_000)).as_deref(), Some("500M"));
        assert_eq!(
            r(serde_json::json!(2_500_000_000u64)).as_deref(),
            Some("2.5G")
        );
        assert_eq!(r(serde_json::json!("max")).as_deref(), Some("max"));
        assert_eq!(r(serde_json::json!("500M")).as_deref(), Some("500M"));
        assert_eq!(rate_label(&serde_json::json!({})), None);
    }

    #[test]
    fn mtu_notes_name_the_interface_and_encapsulation() {
        let rec = |w: &[&str]| RecView {
            warnings: w.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let (i, e) = mtu_interface(&rec(&[
            "limited by the path",
            "interface vxlan0 (MTU 1450, vxlan), 50 bytes of encapsulation (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8)",
        ]));
        assert_eq!(i.as_deref(), Some("vxlan0 (MTU 1450, vxlan)"));
        assert_eq!(
            e.as_deref(),
            Some("vxlan 50 B (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8)")
        );
        let (i, e) = mtu_interface(&rec(&["interface eth0 (MTU 9000, ethernet)"]));
        assert_eq!((i.as_deref(), e), (Some("eth0 (MTU 9000, ethernet)"), None));
        // Odd notes never panic.
        for w in [
            "interface ",
            "interface ), ",
            "interface (), x bytes of encapsulation",
            "interface é), ü",
        ] {
            let _ = mtu_interface(&rec(&[w]));
        }
        assert_eq!(mtu_interface(&rec(&[])), (None, None));
    }

    #[test]
    fn signs_and_numbers() {
        assert_eq!(signed(-41.2, 0), "−41");
        assert_eq!(signed(3.0, 1), "+3.0");
        assert_eq!(signed(-0.001, 1), "+0.0");
        assert_eq!(fmt_num(9.412), "9.41");
        assert_eq!(fmt_num(94.12), "94.1");
        assert_eq!(fmt_num(941.2), "941");
        assert_eq!(majority([100.0, 100.0, 25.0].into_iter()), Some(100.0));
        assert_eq!(majority(std::iter::empty()), None);
    }
}
