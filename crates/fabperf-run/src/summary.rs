//! The mesh summary: the N×N matrix of a mesh test, the suspect pairs by
//! ClusterKit's rule (bandwidth below a fraction of the best pair, latency
//! above a multiple of the lowest), their re-tests, and whom to blame.

use fabperf_store::{CellSpec, CellState, Role, Store, StoreError};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Figures per group (path, dims), then per directed pair.
type ByGroup<T> = BTreeMap<(String, String), BTreeMap<(String, String), Vec<T>>>;

/// ClusterKit's defaults.
pub const DEFAULT_BW_FRACTION: f64 = 0.93;
pub const DEFAULT_LAT_FACTOR: f64 = 2.1;

/// What a mesh group is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Gbit/s, higher is better.
    BandwidthGbps,
    /// Median latency in µs, lower is better.
    LatencyP50Us,
}

impl Metric {
    pub fn unit(self) -> &'static str {
        match self {
            Metric::BandwidthGbps => "Gbit/s",
            Metric::LatencyP50Us => "us (p50)",
        }
    }
}

/// A suspect pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    pub src: String,
    pub dst: String,
    /// Mean over the mesh's repeats.
    pub value: f64,
    /// Each re-test's figure, in order.
    pub retests: Vec<f64>,
    /// Failed the rule in the mesh and in every re-test so far.
    pub confirmed: bool,
}

/// One test × path × sweep point of a mesh.
#[derive(Debug, Clone, Serialize)]
pub struct MeshGroup {
    pub test: String,
    pub kind: String,
    pub path: String,
    pub dims: Value,
    pub metric: Metric,
    pub nodes: Vec<String>,
    /// Mean figure per measured (src, dst).
    pub values: BTreeMap<String, BTreeMap<String, f64>>,
    /// Repeats behind each figure.
    pub repeats: usize,
    /// Best pair (max bandwidth, min latency).
    pub best: Option<f64>,
    /// The threshold a pair is judged against.
    pub threshold: Option<f64>,
    pub suspects: Vec<Suspect>,
    /// Pairs without a figure: (src, dst, error).
    pub failed: Vec<(String, String, String)>,
    /// Nodes all of whose links are confirmed suspects.
    pub bad_nodes: Vec<String>,
    /// Confirmed suspect links not explained by a bad node.
    pub bad_links: Vec<(String, String)>,
    #[serde(skip)]
    templates: BTreeMap<(String, String), CellSpec>,
}

impl MeshGroup {
    /// The mesh cell measuring (src, dst), to derive re-test cells from.
    pub fn cell_template(&self, src: &str, dst: &str) -> Option<&CellSpec> {
        self.templates.get(&(src.to_string(), dst.to_string()))
    }
}

/// Every mesh group of one test.
#[derive(Debug, Clone, Serialize)]
pub struct MeshAnalysis {
    pub run_id: i64,
    pub test: String,
    pub bw_fraction: f64,
    pub lat_factor: f64,
    pub groups: Vec<MeshGroup>,
}

fn figure(metric: Metric, r: &fabperf_results::Record) -> Option<f64> {
    match metric {
        Metric::BandwidthGbps => r.bw_gbps,
        Metric::LatencyP50Us => r.lat_us.as_ref().map(|l| l.p50),
    }
    .filter(|v| v.is_finite())
}

fn passes(metric: Metric, v: f64, threshold: f64) -> bool {
    match metric {
        Metric::BandwidthGbps => v >= threshold,
        Metric::LatencyP50Us => v <= threshold,
    }
}

/// Analyse the mesh cells of `test` in run `run_id`.
pub fn analyze(
    store: &Store,
    run_id: i64,
    test: &str,
    bw_fraction: f64,
    lat_factor: f64,
) -> Result<MeshAnalysis, StoreError> {
    let cells = store.cells(run_id)?;
    let ms = store.measurements(run_id, None)?;
    let mut by_cell: BTreeMap<&str, Vec<&fabperf_store::Measurement>> = BTreeMap::new();
    for (id, m) in &ms {
        if m.role == Role::Total {
            by_cell.entry(id.as_str()).or_default().push(m);
        }
    }
    // Group key: path + dims.
    let mut groups: BTreeMap<(String, String), MeshGroup> = BTreeMap::new();
    let mut orig: ByGroup<f64> = BTreeMap::new();
    let mut re: ByGroup<(u32, f64)> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.spec.test == test) {
        let s = &c.spec;
        if s.pattern != "mesh" && s.pattern != "retest" {
            continue;
        }
        let key = (s.path.clone(), s.dims.to_string());
        let metric = if s.kind.ends_with("-lat") {
            Metric::LatencyP50Us
        } else {
            Metric::BandwidthGbps
        };
        let g = groups.entry(key.clone()).or_insert_with(|| MeshGroup {
            test: s.test.clone(),
            kind: s.kind.clone(),
            path: s.path.clone(),
            dims: s.dims.clone(),
            metric,
            nodes: Vec::new(),
            values: BTreeMap::new(),
            repeats: 0,
            best: None,
            threshold: None,
            suspects: Vec::new(),
            failed: Vec::new(),
            bad_nodes: Vec::new(),
            bad_links: Vec::new(),
            templates: BTreeMap::new(),
        });
        let Some((src, dst)) = s.flows.first().cloned() else {
            continue;
        };
        for n in [&src, &dst] {
            if !g.nodes.contains(n) {
                g.nodes.push(n.clone());
            }
        }
        if s.pattern == "mesh" {
            g.templates
                .entry((src.clone(), dst.clone()))
                .or_insert_with(|| s.clone());
        }
        let fig = by_cell
            .get(s.cell_id.as_str())
            .and_then(|v| v.iter().find_map(|m| figure(metric, &m.record)));
        match (c.state, fig) {
            (CellState::Done, Some(v)) if s.pattern == "mesh" => orig
                .entry(key)
                .or_default()
                .entry((src, dst))
                .or_default()
                .push(v),
            (CellState::Done, Some(v)) => re
                .entry(key)
                .or_default()
                .entry((src, dst))
                .or_default()
                .push((s.repeat, v)),
            (CellState::Failed, _) if s.pattern == "mesh" => {
                g.failed
                    .push((src, dst, c.error.clone().unwrap_or_default()))
            }
            _ => {}
        }
    }
    for (key, g) in groups.iter_mut() {
        g.nodes.sort();
        let o = orig.remove(key).unwrap_or_default();
        let mut retests = re.remove(key).unwrap_or_default();
        g.repeats = o.values().map(Vec::len).max().unwrap_or(0);
        for ((a, b), v) in &o {
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            g.values
                .entry(a.clone())
                .or_default()
                .insert(b.clone(), mean);
        }
        // A pair failed in one repeat but measured in another is not "failed".
        g.failed
            .retain(|(a, b, _)| !o.contains_key(&(a.clone(), b.clone())));
        g.failed.sort();
        g.failed.dedup_by(|x, y| x.0 == y.0 && x.1 == y.1);
        let all: Vec<f64> = g
            .values
            .values()
            .flat_map(|m| m.values().copied())
            .collect();
        let best = match g.metric {
            Metric::BandwidthGbps => all
                .iter()
                .copied()
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v)))),
            Metric::LatencyP50Us => all
                .iter()
                .copied()
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v)))),
        };
        g.best = best;
        let Some(best) = best else { continue };
        let threshold = match g.metric {
            Metric::BandwidthGbps => best * bw_fraction,
            Metric::LatencyP50Us => best * lat_factor,
        };
        g.threshold = Some(threshold);
        for (a, row) in &g.values {
            for (b, &v) in row {
                if passes(g.metric, v, threshold) {
                    continue;
                }
                let mut rt = retests.remove(&(a.clone(), b.clone())).unwrap_or_default();
                rt.sort_by_key(|(round, _)| *round);
                let rt: Vec<f64> = rt.into_iter().map(|(_, v)| v).collect();
                let confirmed = rt.iter().all(|&x| !passes(g.metric, x, threshold));
                g.suspects.push(Suspect {
                    src: a.clone(),
                    dst: b.clone(),
                    value: v,
                    retests: rt,
                    confirmed,
                });
            }
        }
        // Blame: a node whose every link (≥ 2 of them) is a confirmed
        // suspect is named; other confirmed links are named as links.
        let link = |a: &str, b: &str| {
            if a < b {
                (a.to_string(), b.to_string())
            } else {
                (b.to_string(), a.to_string())
            }
        };
        let bad: BTreeSet<(String, String)> = g
            .suspects
            .iter()
            .filter(|s| s.confirmed)
            .map(|s| link(&s.src, &s.dst))
            .collect();
        let measured: BTreeSet<(String, String)> = g
            .values
            .iter()
            .flat_map(|(a, row)| row.keys().map(move |b| link(a, b)))
            .collect();
        for n in &g.nodes {
            let mine: Vec<&(String, String)> =
                measured.iter().filter(|(a, b)| a == n || b == n).collect();
            if mine.len() >= 2 && mine.iter().all(|l| bad.contains(*l)) {
                g.bad_nodes.push(n.clone());
            }
        }
        for (a, b) in &bad {
            if !g.bad_nodes.contains(a) && !g.bad_nodes.contains(b) {
                g.bad_links.push((a.clone(), b.clone()));
            }
        }
    }
    Ok(MeshAnalysis {
        run_id,
        test: test.to_string(),
        bw_fraction,
        lat_factor,
        groups: groups.into_values().collect(),
    })
}

fn dims_label(dims: &Value) -> String {
    dims.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string())
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The human-readable summary of one test.
pub fn render(a: &MeshAnalysis) -> String {
    // Names and errors come from a store (and agents): escaped, one line each.
    let e = fabperf_results::escape::terminal;
    let mut o = String::new();
    for g in &a.groups {
        let dims = e(&dims_label(&g.dims));
        let _ = writeln!(
            o,
            "{} ({}) on path {}{}{}: {}, mean of {} repeat{}",
            e(&g.test),
            e(&g.kind),
            e(&g.path),
            if dims.is_empty() { "" } else { ", " },
            dims,
            g.metric.unit(),
            g.repeats,
            if g.repeats == 1 { "" } else { "s" }
        );
        let shown: BTreeMap<&str, String> = g.nodes.iter().map(|n| (n.as_str(), e(n))).collect();
        let w = shown
            .values()
            .map(|n| n.chars().count())
            .max()
            .unwrap_or(4)
            .max(8);
        let _ = write!(o, "  {:>w$}", "from \\ to");
        for n in &g.nodes {
            let _ = write!(o, " {:>w$}", shown[n.as_str()]);
        }
        o.push('\n');
        let suspect: BTreeSet<(&str, &str)> = g
            .suspects
            .iter()
            .filter(|s| s.confirmed)
            .map(|s| (s.src.as_str(), s.dst.as_str()))
            .collect();
        let cleared: BTreeSet<(&str, &str)> = g
            .suspects
            .iter()
            .filter(|s| !s.confirmed)
            .map(|s| (s.src.as_str(), s.dst.as_str()))
            .collect();
        let failed: BTreeSet<(&str, &str)> = g
            .failed
            .iter()
            .map(|(a, b, _)| (a.as_str(), b.as_str()))
            .collect();
        for a in &g.nodes {
            let _ = write!(o, "  {:>w$}", shown[a.as_str()]);
            for b in &g.nodes {
                let cell = if a == b {
                    "-".to_string()
                } else if let Some(v) = g.values.get(a).and_then(|r| r.get(b)) {
                    let mark = if suspect.contains(&(a.as_str(), b.as_str())) {
                        "!"
                    } else if cleared.contains(&(a.as_str(), b.as_str())) {
                        "~"
                    } else {
                        ""
                    };
                    format!("{v:.2}{mark}")
                } else if failed.contains(&(a.as_str(), b.as_str())) {
                    "FAIL".into()
                } else {
                    ".".into()
                };
                let _ = write!(o, " {cell:>w$}");
            }
            o.push('\n');
        }
        let rule = match (g.metric, g.best, g.threshold) {
            (Metric::BandwidthGbps, Some(b), Some(t)) => format!(
                "bandwidth below {:.0}% of the best pair ({b:.2} Gbit/s), i.e. < {t:.2}",
                a.bw_fraction * 100.0
            ),
            (Metric::LatencyP50Us, Some(b), Some(t)) => format!(
                "latency above {}x the lowest pair ({b:.2} us), i.e. > {t:.2}",
                a.lat_factor
            ),
            _ => "no figures".into(),
        };
        let _ = writeln!(o, "  rule: {rule}; ! suspect (confirmed by every re-test), ~ cleared by a re-test, . not measured in this direction");
        if g.suspects.is_empty() && g.failed.is_empty() {
            let _ = writeln!(o, "  no suspect links");
        }
        for n in &g.bad_nodes {
            let vals: Vec<f64> = g
                .suspects
                .iter()
                .filter(|s| s.confirmed && (&s.src == n || &s.dst == n))
                .map(|s| s.value)
                .collect();
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let _ = writeln!(o, "  SUSPECT NODE {}: all of its {} measured links fail the rule ({lo:.2}-{hi:.2} {}); check this node's NIC, cable, switch port and PCIe slot (`fabperf doctor` on it)", e(n), vals.len(), g.metric.unit());
        }
        for (x, y) in &g.bad_links {
            let s: Vec<&Suspect> = g
                .suspects
                .iter()
                .filter(|s| {
                    s.confirmed && ((s.src == *x && s.dst == *y) || (s.src == *y && s.dst == *x))
                })
                .collect();
            let detail: Vec<String> = s
                .iter()
                .map(|s| {
                    format!(
                        "{} -> {} {:.2}{}",
                        e(&s.src),
                        e(&s.dst),
                        s.value,
                        if s.retests.is_empty() {
                            String::new()
                        } else {
                            format!(
                                " (re-tests {})",
                                s.retests
                                    .iter()
                                    .map(|v| format!("{v:.2}"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        }
                    )
                })
                .collect();
            let _ = writeln!(
                o,
                "  SUSPECT LINK {} - {}: {}",
                e(x),
                e(y),
                detail.join("; ")
            );
        }
        for s in g.suspects.iter().filter(|s| !s.confirmed) {
            let _ = writeln!(
                o,
                "  cleared {} -> {}: {:.2} in the mesh, re-tests {} (noise)",
                e(&s.src),
                e(&s.dst),
                s.value,
                s.retests
                    .iter()
                    .map(|v| format!("{v:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for (x, y, err) in &g.failed {
            let _ = writeln!(o, "  FAILED {} -> {}: {}", e(x), e(y), e(err));
        }
        o.push('\n');
    }
    o
}

/// Names of the mesh tests in a run, in plan order.
pub fn mesh_tests(store: &Store, run_id: i64) -> Result<Vec<String>, StoreError> {
    let mut out: Vec<String> = Vec::new();
    for c in store.cells(run_id)? {
        if c.spec.pattern == "mesh" && !out.contains(&c.spec.test) {
            out.push(c.spec.test);
        }
    }
    Ok(out)
}
