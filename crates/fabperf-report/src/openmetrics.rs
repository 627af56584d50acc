//! Every stored measurement as OpenMetrics gauges (the text format that
//! Prometheus scrapes), labelled so dashboards can slice by test, size,
//! path and node pair, and a small Pushgateway client.
//!
//! Families (base units, as OpenMetrics asks: bytes and seconds):
//!
//! | family | unit | what |
//! |---|---|---|
//! | `fabperf_bandwidth_bytes_per_second` | bytes/s | payload bandwidth of a measurement |
//! | `fabperf_latency_seconds{stat=…, latency_kind=half_rtt\|rtt}` | seconds | min, p50, p90, p99, p999, max, mean |
//! | `fabperf_cpu_ratio{end=client\|agent, source=threads\|host}` | ratio | CPU time over wall time (1 = one CPU busy) |
//! | `fabperf_tcp_retransmits` | — | retransmitted segments during the measured interval |
//! | `fabperf_udp_loss_ratio` | ratio | datagrams lost / sent |
//! | `fabperf_duration_seconds` | seconds | the measured interval |
//! | `fabperf_flows_overlap_ratio` | ratio | concurrent flows, per direction: the common interval over the longest flow's |
//! | `fabperf_flows_start_skew_seconds` | seconds | concurrent flows, per direction: latest minus earliest sender start |
//! | `fabperf_flows_jain_index` | — | concurrent flows, per direction: Jain's index over the direction's flows |
//! | `fabperf_http_requests_per_second` | — | http-load: successful requests per second |
//! | `fabperf_http_failed_requests{error=…}` | — | http-load: failed requests in the interval, by kind |
//! | `fabperf_path_mtu_bytes` | bytes | mtu: the largest packet that crossed, per method (`op`) |
//! | `fabperf_port_rate_bytes_per_second` | bytes/s | a real port rate from an agent's inventory (none for virtual links) |
//! | `fabperf_run_cells{state=…}` | — | cells of a run by state |
//!
//! Cardinality is bounded by default: a series is a measurement's place in
//! the plan (test, sweep point, path, pattern, nodes, the cut of a
//! bisection), its value the mean over the repeats; per-stream records are
//! left out. A cell of concurrent flows (incast, bisection) is exported per
//! direction: its flows' `forward` and `reverse` records (never a flow's
//! `bidir` total as well) and each direction's aggregate, only when that
//! aggregate is usable (over a common interval of at least 90 % overlap),
//! with its overlap, start skew and Jain's index under the aggregate's
//! labels. [`Series::PerMeasurement`] adds `repeat`, `cell` and `stream`
//! (one series per stored record, as unbounded as the store).
//!
//! The writer is hand-written, not prometheus-client's: its Registry holds
//! every metric object at once and has no mean over repeats, while a run of
//! a million cells is read here one cell at a time into running sums.

use crate::data::{load, load_head, ReportError, RunData, Sample};
use crate::flows::{self, Leg};
use fabperf_store::{CellRow, CellState, Store};
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// Which series an exposition has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Series {
    /// One series per measurement place, the mean over its repeats (no
    /// per-measurement label: bounded by the plan, not the store).
    #[default]
    Bounded,
    /// One series per stored record, with `repeat`, `cell` and `stream`.
    PerMeasurement,
}

/// Label names a measurement's series may carry, in order (`repeat`, `cell`
/// and `stream` only with [`Series::PerMeasurement`]).
pub const LABELS: [&str; 19] = [
    "run",
    "plan",
    "test",
    "kind",
    "op",
    "size",
    "streams",
    "direction",
    "mtu",
    "rate",
    "path",
    "pattern",
    "role",
    "src_node",
    "dst_node",
    "cut",
    "repeat",
    "cell",
    "stream",
];

/// Escape a label value: backslash, double quote and line feed.
pub fn escape_label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    push_escaped(&mut o, v);
    o
}

/// [`escape_label`] appended to `o`.
fn push_escaped(o: &mut String, v: &str) {
    if !v.contains(['\\', '"', '\n']) {
        o.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
}

/// A sample value (finite numbers only: the caller skips the others)
/// appended to `o`.
fn push_value(o: &mut String, v: f64) {
    use std::fmt::Write;
    if v == v.trunc() && v.abs() < 1e15 {
        let _ = write!(o, "{v:.0}");
    } else {
        let _ = write!(o, "{v}");
    }
}

struct Family {
    name: &'static str,
    unit: Option<&'static str>,
    help: &'static str,
    /// Its series, in first-seen order: (labels, sum of the values, count).
    /// Bounded series merge repeats into their mean; per-measurement ones
    /// keep every sample.
    series: Vec<(Key, f64, u32)>,
    /// Bounded series: where each labels' series is.
    at: FxHashMap<Key, u32>,
}

/// A series' labels: the measurement's (interned) and the family's own
/// extra ones (interned), rendered at the end ([`Labels::render`]).
type Key = (u32, u32);

/// Label sets, interned: a mesh of a thousand nodes repeats each pair's
/// labels in every family and repeat; each set is held once.
#[derive(Default)]
struct Labels {
    at: FxHashMap<Box<str>, u32>,
}

impl Labels {
    /// The number of the label set `inner` (rendered, without braces).
    fn id(&mut self, inner: &str) -> u32 {
        if let Some(&n) = self.at.get(inner) {
            return n;
        }
        let n = self.at.len() as u32;
        self.at.insert(inner.into(), n);
        n
    }

    /// Every set by its number.
    fn by_id(&self) -> Vec<&str> {
        let mut v = vec![""; self.at.len()];
        for (k, &i) in &self.at {
            v[i as usize] = k;
        }
        v
    }
}

/// `k="v",…` of the non-empty labels (a series' labels, without the braces).
fn inner(pairs: &[(&str, &str)]) -> String {
    let mut o = String::new();
    push_labels(&mut o, pairs);
    o
}

/// [`push_label`] of each pair, in order.
fn push_labels(o: &mut String, pairs: &[(&str, &str)]) {
    for (k, v) in pairs {
        push_label(o, k, v);
    }
}

/// One label appended to a series' labels `o` (`k="v"`, after a comma when
/// `o` has some already); nothing for an empty value.
fn push_label(o: &mut String, k: &str, v: &str) {
    if v.is_empty() {
        return;
    }
    if !o.is_empty() {
        o.push(',');
    }
    o.push_str(k);
    o.push_str("=\"");
    push_escaped(o, v);
    o.push('"');
}

/// A dimension's value as a label value: as the plan wrote it, empty when
/// the cell has none.
fn dim(dims: &serde_json::Value, k: &str) -> String {
    fabperf_results::dims::text(dims, k).unwrap_or_default()
}

fn family(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
    Family {
        name,
        unit,
        help,
        series: Vec::new(),
        at: FxHashMap::default(),
    }
}

/// The families, in the order an exposition lists them.
fn all_families() -> Vec<Family> {
    vec![
        family(
        "fabperf_bandwidth_bytes_per_second",
        Some("bytes_per_second"),
        "Payload bandwidth of a fabperf measurement.",
    ),
        family(
        "fabperf_latency_seconds",
        Some("seconds"),
        "Latency of a fabperf measurement by statistic; latency_kind says whether it is half a round trip (half_rtt) or a full one (rtt).",
    ),
        family(
        "fabperf_cpu_ratio",
        Some("ratio"),
        "CPU time over wall time during a measurement at one end (1 = one CPU fully busy).",
    ),
        family(
        "fabperf_tcp_retransmits",
        None,
        "TCP segments the sender retransmitted during the measured interval.",
    ),
        family(
        "fabperf_udp_loss_ratio",
        Some("ratio"),
        "UDP datagrams lost over datagrams sent.",
    ),
        family(
        "fabperf_duration_seconds",
        Some("seconds"),
        "Measured interval of a fabperf measurement (warm-up excluded).",
    ),
        family(
        "fabperf_flows_overlap_ratio",
        Some("ratio"),
        "Concurrent flows (incast, bisection), per direction: the common interval, in which every flow measured, over the longest flow's measured interval.",
    ),
        family(
        "fabperf_flows_start_skew_seconds",
        Some("seconds"),
        "Concurrent flows (incast, bisection), per direction: latest minus earliest start of the flows' senders.",
    ),
        family(
        "fabperf_flows_jain_index",
        None,
        "Concurrent flows (incast, bisection), per direction: Jain's fairness index over the direction's flows (1 = equal shares, 1/n = one flow takes everything).",
    ),
        family(
        "fabperf_http_requests_per_second",
        None,
        "http-load: successful requests (status below 400) completed per second.",
    ),
        family(
        "fabperf_http_failed_requests",
        None,
        "http-load: requests that failed during the measured interval, by the first thing that failed (connect, write, read, timeout, status, parse).",
    ),
        family(
        "fabperf_path_mtu_bytes",
        Some("bytes"),
        "Path MTU: the largest IP packet that crossed unfragmented, per method (op: forward, reverse, icmp).",
    ),
        family(
        "fabperf_port_rate_bytes_per_second",
        Some("bytes_per_second"),
        "Port rate of the link an agent serves on, from its inventory; none for a virtual link, whose speed is a label.",
    ),
        family(
        "fabperf_run_cells",
        None,
        "Cells of a fabperf run by state.",
    ),
    ]
}

const BW: usize = 0;
const LAT: usize = 1;
const CPU: usize = 2;
const RETR: usize = 3;
const LOSS: usize = 4;
const DUR: usize = 5;
const OVERLAP: usize = 6;
const SKEW: usize = 7;
const JAIN: usize = 8;
const RPS: usize = 9;
const HTTP_ERR: usize = 10;
const MTU: usize = 11;
const PORT: usize = 12;
const CELLS: usize = 13;

/// A cell's sweep point as label values (empty when it has none).
struct CellDims {
    op: String,
    size: String,
    direction: String,
    mtu: String,
    rate: String,
}

/// An exposition being made: every family's series, from cells given one
/// at a time. Hand-written rather than prometheus-client's Registry: the
/// registry holds every metric object at once and has no mean over repeats,
/// while a mesh of a million pairs is read here one cell at a time and each
/// series is a few numbers.
struct Exposer {
    series: Series,
    families: Vec<Family>,
    labels: Labels,
    extras: Labels,
    /// The cuts of bisection cells: (test|path|dims, flows) numbered per
    /// test, path and sweep point in the order the run measured them.
    cuts: HashMap<String, usize>,
    cut_seen: HashMap<String, usize>,
    /// Scratch text for the labels being made.
    scratch: String,
}

impl Exposer {
    fn new(series: Series) -> Exposer {
        Exposer {
            series,
            families: all_families(),
            labels: Labels::default(),
            extras: Labels::default(),
            cuts: HashMap::new(),
            cut_seen: HashMap::new(),
            scratch: String::new(),
        }
    }

    fn push(&mut self, family: usize, base: u32, extra: &[(&str, &str)], v: f64) {
        if !v.is_finite() {
            return;
        }
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        push_labels(&mut text, extra);
        let key = (base, self.extras.id(&text));
        self.scratch = text;
        let f = &mut self.families[family];
        if self.series == Series::PerMeasurement {
            f.series.push((key, v, 1));
            return;
        }
        match f.at.get(&key) {
            Some(&i) => {
                let x = &mut f.series[i as usize];
                x.1 += v;
                x.2 += 1;
            }
            None => {
                f.at.insert(key, f.series.len() as u32);
                f.series.push((key, v, 1));
            }
        }
    }

    /// The cut of a bisection cell (every current cell is given, in order).
    fn cut(&mut self, c: &CellRow) -> Option<usize> {
        let s = &c.spec;
        if s.pattern != "bisection" {
            return None;
        }
        let mut f: Vec<String> = s.flows.iter().map(|(a, b)| format!("{a}>{b}")).collect();
        f.sort();
        let group = format!("{}|{}|{}", s.test, s.path, s.dims);
        let key = format!("{group}|{}", f.join(","));
        let n = match self.cut_seen.get(&key) {
            Some(n) => *n,
            None => {
                let n = self.cuts.entry(group).or_default();
                *n += 1;
                self.cut_seen.insert(key, *n);
                *n
            }
        };
        Some(n)
    }

    /// One current cell of run `data` and its samples.
    fn cell(&mut self, data: &RunData, c: &CellRow, samples: &[Sample]) {
        let cut = self.cut(c);
        if samples.is_empty() {
            return;
        }
        let detail = self.series == Series::PerMeasurement;
        let run = data.run.id.to_string();
        let plan = data.run.plan_name.clone();
        let s = &c.spec;
        let dims = CellDims {
            op: dim(&s.dims, "op"),
            size: dim(&s.dims, "size"),
            direction: dim(&s.dims, "direction"),
            mtu: dim(&s.dims, "mtu"),
            rate: dim(&s.dims, "rate"),
        };
        let cut_text = cut.map(|n| n.to_string()).unwrap_or_default();
        // Concurrent flows go by direction: an aggregate only when usable.
        let multi = flows::is_multi(&s.pattern);
        let legs: Vec<Leg> = if multi {
            flows::legs_of(c, samples)
        } else {
            Vec::new()
        };
        for m in samples {
            if !detail && m.role == fabperf_store::Role::Stream {
                continue;
            }
            // A record of concurrent flows by the direction it measured;
            // one that cannot be attributed (no direction in a bidir cell)
            // or a flow's bidir total is not exported.
            let dir = if multi && m.role != fabperf_store::Role::Stream {
                match flows::record_direction(s, m) {
                    Some(d) => d,
                    None => continue,
                }
            } else {
                m.rec.direction.clone().unwrap_or_else(|| "forward".into())
            };
            let dir = dir.as_str();
            if multi && m.role == fabperf_store::Role::Flow && dir == "bidir" {
                continue;
            }
            let leg = if multi && m.role == fabperf_store::Role::Aggregate {
                match legs
                    .iter()
                    .find(|l| l.direction == dir && (l.size.is_none() || l.size == m.rec.size))
                {
                    Some(l) if l.failed.is_none() => Some(l),
                    _ => continue,
                }
            } else {
                None
            };
            let r = &m.rec;
            // The measurement's labels, in the order of [`LABELS`].
            let mut text = std::mem::take(&mut self.scratch);
            text.clear();
            let num = |x: Option<u64>, or: &str| match x {
                Some(x) => x.to_string(),
                None => or.to_string(),
            };
            push_labels(
                &mut text,
                &[
                    ("run", run.as_str()),
                    ("plan", plan.as_str()),
                    ("test", s.test.as_str()),
                    ("kind", s.kind.as_str()),
                    ("op", r.op.as_deref().unwrap_or(&dims.op)),
                    ("size", &num(r.size, &dims.size)),
                    ("streams", &num(r.streams, "")),
                    (
                        "direction",
                        r.direction.as_deref().unwrap_or(&dims.direction),
                    ),
                    ("mtu", &dims.mtu),
                    ("rate", &dims.rate),
                    ("path", &s.path),
                    ("pattern", &s.pattern),
                    ("role", m.role.as_str()),
                    ("src_node", m.src.as_deref().unwrap_or_default()),
                    ("dst_node", m.dst.as_deref().unwrap_or_default()),
                    ("cut", &cut_text),
                ],
            );
            if detail {
                push_labels(
                    &mut text,
                    &[
                        ("repeat", &s.repeat.to_string()),
                        ("cell", &s.cell_id),
                        ("stream", &num(r.stream, "")),
                    ],
                );
            }
            let lb = self.labels.id(&text);
            self.scratch = text;
            if let Some(b) = r.bw_gbps {
                self.push(BW, lb, &[], b * 1e9 / 8.0);
            }
            if let Some(l) = &r.lat {
                let kind = l.kind.as_deref().unwrap_or("");
                for (stat, v) in [
                    ("min", l.min),
                    ("p50", l.p50),
                    ("p90", l.p90),
                    ("p99", l.p99),
                    ("p999", l.p999),
                    ("max", l.max),
                    ("mean", l.mean),
                ] {
                    if let Some(v) = v {
                        self.push(LAT, lb, &[("stat", stat), ("latency_kind", kind)], v / 1e6);
                    }
                }
            }
            for (end, v) in [("client", r.cpu_local_pct), ("agent", r.cpu_remote_pct)] {
                if let Some(v) = v {
                    self.push(CPU, lb, &[("end", end), ("source", "threads")], v / 100.0);
                }
            }
            for (end, h) in [("client", r.host_cpu_local), ("agent", r.host_cpu_remote)] {
                if let Some(h) = h {
                    self.push(
                        CPU,
                        lb,
                        &[("end", end), ("source", "host")],
                        h.total_pct / 100.0,
                    );
                }
            }
            if let Some(x) = r.retransmits {
                self.push(RETR, lb, &[], x as f64);
            }
            if let Some(x) = r.udp_loss_pct {
                self.push(LOSS, lb, &[], x / 100.0);
            }
            if let Some(x) = r.duration_s {
                self.push(DUR, lb, &[], x);
            }
            if let Some(x) = r.requests_per_s {
                self.push(RPS, lb, &[], x);
            }
            if let Some(e) = &r.errors {
                for (k, v) in e {
                    self.push(HTTP_ERR, lb, &[("error", k)], *v as f64);
                }
            }
            if s.kind == "mtu" {
                if let Some(x) = r.mtu {
                    self.push(MTU, lb, &[], x as f64);
                }
            }
            if let Some(l) = leg {
                if let Some(o) = l.overlap_pct {
                    self.push(OVERLAP, lb, &[], o / 100.0);
                }
                if let Some(k) = l.start_skew_s {
                    self.push(SKEW, lb, &[], k);
                }
                if let Some(j) = l.jain {
                    self.push(JAIN, lb, &[], j);
                }
            }
        }
    }

    /// What a run gives besides its cells: the agents' port rates (once
    /// every record has said which links are virtual) and the cells by
    /// state.
    fn run_end(&mut self, data: &RunData, states: [usize; 3]) {
        let run = data.run.id.to_string();
        let plan = data.run.plan_name.clone();
        for a in &data.agents {
            if let Some(p) = a.inventory.port_rate_gbps {
                let lb = self.labels.id(&inner(&[
                    ("run", &run),
                    ("plan", &plan),
                    ("node", &a.name),
                    ("path", &a.path),
                    ("iface", a.inventory.iface.as_deref().unwrap_or_default()),
                ]));
                self.push(PORT, lb, &[], p * 1e9 / 8.0);
            }
        }
        for (st, k) in [CellState::Done, CellState::Failed, CellState::Pending]
            .into_iter()
            .zip(states)
        {
            let lb = self.labels.id(&inner(&[
                ("run", &run),
                ("plan", &plan),
                ("state", st.as_str()),
            ]));
            self.push(CELLS, lb, &[], k as f64);
        }
    }

    /// A whole run read into memory ([`load`]).
    fn run(&mut self, data: &RunData) {
        let mut states = [0usize; 3];
        for c in &data.cells {
            states[state_index(c.state)] += 1;
            self.cell(data, c, data.samples_of(&c.spec.cell_id));
        }
        self.run_end(data, states);
    }

    /// A run read from the store one cell at a time.
    fn run_of_store(&mut self, store: &Store, id: i64) -> Result<(), ReportError> {
        let mut data = load_head(store, Some(id))?;
        let mut states = [0usize; 3];
        crate::data::each_cell(store, &mut data, &mut |data, c, samples| {
            states[state_index(c.state)] += 1;
            self.cell(data, c, samples);
            Ok(())
        })?;
        self.run_end(&data, states);
        Ok(())
    }

    /// The text, and the number of samples in it.
    fn text(&self, flavor: Flavor) -> (String, usize) {
        let mut o = Vec::new();
        let n = self.write(flavor, &mut o).expect("writing to memory");
        (String::from_utf8(o).expect("labels and values are text"), n)
    }

    /// The text written to `o` as it is made; the number of samples.
    fn write(&self, flavor: Flavor, o: &mut dyn std::io::Write) -> std::io::Result<usize> {
        let (labels, extras) = (self.labels.by_id(), self.extras.by_id());
        let mut n = 0;
        for f in &self.families {
            if f.series.is_empty() {
                continue;
            }
            writeln!(o, "# HELP {} {}", f.name, f.help)?;
            writeln!(o, "# TYPE {} gauge", f.name)?;
            if let (Some(u), Flavor::OpenMetrics) = (f.unit, flavor) {
                writeln!(o, "# UNIT {} {u}", f.name)?;
            }
            let mut line = String::new();
            for ((b, x), sum, k) in &f.series {
                let (b, x) = (labels[*b as usize], extras[*x as usize]);
                let v = if *k == 1 { *sum } else { sum / f64::from(*k) };
                line.clear();
                line.push_str(f.name);
                line.push('{');
                line.push_str(b);
                if !b.is_empty() && !x.is_empty() {
                    line.push(',');
                }
                line.push_str(x);
                line.push_str("} ");
                push_value(&mut line, v);
                line.push('\n');
                o.write_all(line.as_bytes())?;
                n += 1;
            }
        }
        if flavor == Flavor::OpenMetrics {
            o.write_all(b"# EOF\n")?;
        }
        Ok(n)
    }
}

fn state_index(s: CellState) -> usize {
    match s {
        CellState::Done => 0,
        CellState::Failed => 1,
        CellState::Pending => 2,
    }
}

/// Which text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// OpenMetrics 1.0 (`# UNIT`, `# EOF`).
    OpenMetrics,
    /// Prometheus text format 0.0.4 (what a Pushgateway accepts).
    Prometheus,
}

/// The exposition of the given runs' measurements, bounded
/// ([`Series::Bounded`]).
pub fn exposition(runs: &[RunData], flavor: Flavor) -> (String, usize) {
    exposition_with(runs, flavor, Series::Bounded)
}

/// The exposition of the given runs' measurements with the given series.
pub fn exposition_with(runs: &[RunData], flavor: Flavor, series: Series) -> (String, usize) {
    let mut e = Exposer::new(series);
    for data in runs {
        e.run(data);
    }
    e.text(flavor)
}

/// The exposition of runs `ids`, read from the store one cell at a time:
/// what is held is a few numbers per series (a mesh pair's labels once),
/// never the records.
pub fn exposition_of_store(
    store: &Store,
    ids: &[i64],
    flavor: Flavor,
    series: Series,
) -> Result<(String, usize), ReportError> {
    let mut e = Exposer::new(series);
    for id in ids {
        e.run_of_store(store, *id)?;
    }
    Ok(e.text(flavor))
}

/// [`exposition_of_store`] written to `out` as it is made (the text of a
/// mesh of a million pairs is gigabytes): the number of samples.
pub fn write_exposition_of_store(
    store: &Store,
    ids: &[i64],
    flavor: Flavor,
    series: Series,
    out: &mut dyn std::io::Write,
) -> Result<usize, ReportError> {
    let mut e = Exposer::new(series);
    for id in ids {
        e.run_of_store(store, *id)?;
    }
    e.write(flavor, out)
        .map_err(|x| ReportError::Io(format!("writing the exposition: {x}")))
}

/// The runs to export: `run` (which must exist), or every run.
pub fn export_runs(store: &Store, run: Option<i64>) -> Result<Vec<i64>, ReportError> {
    match run {
        Some(id) => Ok(vec![store.run(id)?.id]),
        None => Ok(store.runs()?.iter().map(|r| r.id).collect()),
    }
}

/// Read the runs to export (one, or all), whole.
pub fn load_runs(store: &Store, run: Option<i64>) -> Result<Vec<RunData>, ReportError> {
    match run {
        Some(id) => Ok(vec![load(store, Some(id))?]),
        None => store
            .runs()?
            .iter()
            .map(|r| load(store, Some(r.id)))
            .collect(),
    }
}

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("--push {url}: {msg}")]
    Url { url: String, msg: String },
    #[error("pushing to {url}: {msg}")]
    Http { url: String, msg: String },
    #[error("the Pushgateway at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
}

/// The grouping-key URL for a run: the given URL when it already names a
/// group (`…/metrics/job/…`), else `URL/metrics/job/fabperf/run/ID`.
pub fn push_url(base: &str, run: i64) -> Result<String, PushError> {
    let bad = |msg: &str| PushError::Url {
        url: base.to_string(),
        msg: msg.to_string(),
    };
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| {
            if base.starts_with("https://") {
                bad("https is not supported by this build; push over http (inside the cluster) or through a TLS-terminating proxy")
            } else {
                bad("expected an http:// URL, e.g. http://pushgateway:9091")
            }
        })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty()
        || host.contains('@')
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad(
            "expected http://HOST[:PORT][/path], without credentials or spaces",
        ));
    }
    if base
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(bad("the URL may not contain spaces, a query or a fragment"));
    }
    if rest.contains("/metrics/job/") {
        return Ok(base.to_string());
    }
    Ok(format!(
        "{}/metrics/job/fabperf/run/{run}",
        base.trim_end_matches('/')
    ))
}

/// PUT one run's metrics to a Pushgateway (replacing that run's group).
pub fn push(url: &str, body: &str, timeout: std::time::Duration) -> Result<(), PushError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .put(url)
        .header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        .send(body)
        .map_err(|e| PushError::Http {
            url: url.to_string(),
            msg: e.to_string(),
        })?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let text = resp
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Err(PushError::Status {
        url: url.to_string(),
        status,
        body: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: f64) -> String {
        let mut o = String::new();
        push_value(&mut o, v);
        o
    }

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(
            inner(&[("a", "x"), ("b", ""), ("c", "y")]),
            "a=\"x\",c=\"y\""
        );
        assert_eq!(value(9.5e9), "9500000000");
        // Repeats of one series are their mean, in first-seen order.
        let mut e = Exposer::new(Series::Bounded);
        let (a, b) = (e.labels.id("a=\"1\""), e.labels.id("b=\"2\""));
        e.push(BW, a, &[], 1.0);
        e.push(BW, b, &[("x", "y")], 5.0);
        e.push(BW, a, &[], 2.0);
        e.push(BW, a, &[], f64::NAN);
        let (t, n) = e.text(Flavor::Prometheus);
        assert_eq!(n, 2);
        assert!(
            t.ends_with("fabperf_bandwidth_bytes_per_second{a=\"1\"} 1.5\nfabperf_bandwidth_bytes_per_second{b=\"2\",x=\"y\"} 5\n"),
            "{t}"
        );
        assert_eq!(value(0.0000105), "0.0000105");
    }

    #[test]
    fn push_urls() {
        assert_eq!(
            push_url("http://pg:9091", 3).unwrap(),
            "http://pg:9091/metrics/job/fabperf/run/3"
        );
        assert_eq!(
            push_url("http://pg:9091/", 3).unwrap(),
            "http://pg:9091/metrics/job/fabperf/run/3"
        );
        assert_eq!(
            push_url("http://pg:9091/metrics/job/ci/cluster/a", 3).unwrap(),
            "http://pg:9091/metrics/job/ci/cluster/a"
        );
        for bad in [
            "https://pg:9091",
            "pg:9091",
            "http://",
            "http://user:pw@pg:9091",
            "http://pg:9091/x?y=1",
            "http://pg 9091",
        ] {
            assert!(push_url(bad, 1).is_err(), "{bad}");
        }
    }
}
