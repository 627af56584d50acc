//! One record per chain and command, with the latency summary of
//! fabperf-results (HdrHistogram of every sample, microseconds), written as
//! JSON Lines, flat CSV or a table like the other fabperf commands.

use crate::conf::Chain;
use crate::exec::CniCommand;
use crate::Options;
use fabperf_results::{LatencySummary, Table, FABPERF_VERSION};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// Version of the cni-bench record layout.
pub const CNI_RECORD_SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CniRecord {
    pub schema: u32,
    /// Always `cni-bench`.
    pub test: String,
    /// `add` (pod network set-up) or `del` (tear-down).
    pub op: String,
    /// The network's `name`.
    pub network: String,
    /// The chain: plugin types with their IPAM, e.g. `bridge+host-local, tuning`.
    pub plugins: String,
    pub cni_version: String,
    /// The file (and NAD) it came from.
    pub source: String,
    /// Recorded sandboxes.
    pub iterations: u64,
    /// Sandboxes run before recording.
    pub warmup: u32,
    /// Wall time of the recorded sandboxes (namespace set-up, ADD, DEL, removal), seconds.
    pub wall_s: f64,
    /// Time of the whole chain's ADD (or DEL) per sandbox, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_us: Option<LatencySummary>,
    pub ifname: String,
    pub started_at: String,
    pub fabperf_version: String,
}

impl CniRecord {
    pub fn new(
        chain: &Chain,
        cmd: CniCommand,
        opts: &Options,
        lat: Option<LatencySummary>,
        wall_s: f64,
        started_at: &str,
    ) -> CniRecord {
        let label = chain.label();
        let plugins = label
            .strip_prefix(&format!("{} (", chain.name))
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or(&label)
            .to_string();
        CniRecord {
            schema: CNI_RECORD_SCHEMA,
            test: "cni-bench".into(),
            op: cmd.as_str().to_ascii_lowercase(),
            network: chain.name.clone(),
            plugins,
            cni_version: chain.cni_version.clone(),
            source: chain.source.clone(),
            iterations: lat.as_ref().map_or(0, |l| l.samples),
            warmup: opts.warmup,
            wall_s,
            lat_us: lat,
            ifname: opts.ifname.clone(),
            started_at: started_at.to_string(),
            fabperf_version: FABPERF_VERSION.to_string(),
        }
    }
}

pub fn write_json_lines<W: Write>(mut w: W, records: &[CniRecord]) -> io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut w, r)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

pub fn csv_header() -> Vec<&'static str> {
    vec![
        "schema",
        "test",
        "op",
        "network",
        "plugins",
        "cni_version",
        "source",
        "iterations",
        "warmup",
        "wall_s",
        "lat_us_min",
        "lat_us_p50",
        "lat_us_p90",
        "lat_us_p99",
        "lat_us_p999",
        "lat_us_max",
        "lat_us_mean",
        "lat_us_stdev",
        "ifname",
        "started_at",
        "fabperf_version",
    ]
}

pub fn write_csv<W: Write>(w: W, records: &[CniRecord], with_header: bool) -> io::Result<()> {
    let mut wr = csv::WriterBuilder::new().has_headers(false).from_writer(w);
    let map = |e: csv::Error| io::Error::other(e.to_string());
    if with_header {
        wr.write_record(csv_header()).map_err(map)?;
    }
    for r in records {
        let l = |f: fn(&LatencySummary) -> f64| {
            r.lat_us
                .as_ref()
                .map(|s| f(s).to_string())
                .unwrap_or_default()
        };
        wr.write_record(
            [
                r.schema.to_string(),
                r.test.clone(),
                r.op.clone(),
                r.network.clone(),
                r.plugins.clone(),
                r.cni_version.clone(),
                r.source.clone(),
                r.iterations.to_string(),
                r.warmup.to_string(),
                r.wall_s.to_string(),
                l(|s| s.min),
                l(|s| s.p50),
                l(|s| s.p90),
                l(|s| s.p99),
                l(|s| s.p999),
                l(|s| s.max),
                l(|s| s.mean),
                l(|s| s.stdev),
                r.ifname.clone(),
                r.started_at.clone(),
                r.fabperf_version.clone(),
            ]
            .iter()
            .map(|f| fabperf_results::escape::csv_field(f).into_owned()),
        )
        .map_err(map)?;
    }
    wr.flush()
}

/// The human table: one row per chain and op, milliseconds.
pub fn table(records: &[CniRecord]) -> String {
    let mut t = Table::new([
        "network", "plugins", "op", "n", "min ms", "p50 ms", "p90 ms", "p99 ms", "max ms",
        "mean ms",
    ]);
    for r in records {
        let ms = |f: fn(&LatencySummary) -> f64| {
            r.lat_us
                .as_ref()
                .map(|s| format!("{:.2}", f(s) / 1000.0))
                .unwrap_or_else(|| "-".into())
        };
        t.row([
            r.network.clone(),
            r.plugins.clone(),
            r.op.to_ascii_uppercase(),
            r.iterations.to_string(),
            ms(|s| s.min),
            ms(|s| s.p50),
            ms(|s| s.p90),
            ms(|s| s.p99),
            ms(|s| s.max),
            ms(|s| s.mean),
        ]);
    }
    t.render()
}
