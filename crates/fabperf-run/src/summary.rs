//! The mesh summary: the N×N matrix of a mesh test (data from the row's
//! node to the column's), the suspect pairs by ClusterKit's rule (bandwidth
//! below a fraction of the best pair, latency above a multiple of the
//! lowest), their re-tests, and whom to blame.
//!
//! Only the current plan's cells count ([`Store::plan_cells`]); cells of
//! earlier versions of the plan are counted as stale and left out.
//!
//! A suspect is in one of three states: *confirmed* (re-tests ran and every
//! one of them failed the rule too), *cleared* (a re-test met the rule: the
//! first figure was noise) or *unconfirmed* (no re-test produced a figure:
//! they failed, were not run, or the rule was changed after the run). Blame
//! — SUSPECT NODE, SUSPECT LINK — is confirmed only on confirmed suspects
//! and failed cells; what unconfirmed suspects would blame is shown as such.

use fabperf_store::{CellSpec, CellState, Measurement, Role, Store, StoreError, RETEST};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

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

/// Where a suspect stands after its re-tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuspectState {
    /// No re-test produced a figure (re-tests failed, were not run, or the
    /// rule changed after the run): neither confirmed nor cleared.
    Unconfirmed,
    /// Re-tests ran and every one failed the rule as well.
    Confirmed,
    /// A re-test met the rule: the mesh figure was noise.
    Cleared,
}

impl SuspectState {
    pub fn word(self) -> &'static str {
        match self {
            SuspectState::Unconfirmed => "unconfirmed",
            SuspectState::Confirmed => "confirmed",
            SuspectState::Cleared => "cleared",
        }
    }
}

/// A suspect pair: data from `src` to `dst` failed the rule in the mesh.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    pub src: String,
    pub dst: String,
    /// Mean over the mesh's repeats.
    pub value: f64,
    /// The figure of each re-test that produced one, in round order.
    pub retests: Vec<f64>,
    /// Why each re-test without a figure failed (`fabperf run
    /// --retry-failed` runs them again).
    pub retests_failed: Vec<String>,
    pub state: SuspectState,
    /// `state == Confirmed`.
    pub confirmed: bool,
}

/// What is wrong with a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeFault {
    /// Every cell with it failed.
    Dead,
    /// Every pair with it fails the rule (both directions, when measured).
    All,
    /// Every pair it sends in fails the rule; its receives pass.
    Sends,
    /// Every pair it receives in fails the rule; its sends pass.
    Receives,
}

/// A node named as the likely cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeFinding {
    pub node: String,
    pub fault: NodeFault,
    /// On failed cells and confirmed suspects only; `false`: some of the
    /// pairs behind it are unconfirmed suspects.
    pub confirmed: bool,
    /// Why, in words ("all of its 3 cells failed: …").
    pub text: String,
}

/// The pair the rule's reference comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reference {
    pub src: String,
    pub dst: String,
    /// Its figure.
    pub measured: f64,
    /// The port rate the reference was capped at, when the best pair
    /// measured above it.
    pub capped_at: Option<f64>,
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
    /// Mean figure per measured (src, dst): data from src to dst.
    pub values: BTreeMap<String, BTreeMap<String, f64>>,
    /// Repeats behind each figure.
    pub repeats: usize,
    /// The reference the rule applies to: the best pair's figure (max
    /// bandwidth, min latency), capped at the port rate.
    pub best: Option<f64>,
    /// Which pair set the reference.
    pub reference: Option<Reference>,
    /// The highest real port rate the group's records name (virtual links
    /// and `tc` caps are not port rates), Gbit/s.
    pub port_rate_gbps: Option<f64>,
    /// Pairs that measured above that port rate: (src, dst, Gbit/s).
    pub above_port: Vec<(String, String, f64)>,
    /// The threshold a pair is judged against.
    pub threshold: Option<f64>,
    pub suspects: Vec<Suspect>,
    /// Pairs without a figure in any repeat: (src, dst, error).
    pub failed: Vec<(String, String, String)>,
    /// Nodes named, confirmed or not.
    pub node_findings: Vec<NodeFinding>,
    /// Nodes named on failed cells and confirmed suspects.
    pub bad_nodes: Vec<String>,
    /// Links (a < b) with a confirmed suspect not explained by a named node.
    pub bad_links: Vec<(String, String)>,
    /// Links (a < b) with an unconfirmed suspect not explained by a named
    /// node nor among `bad_links`.
    pub unconfirmed_links: Vec<(String, String)>,
    #[serde(skip)]
    templates: BTreeMap<(String, String), CellSpec>,
}

impl MeshGroup {
    /// The mesh cell that measured data from `src` to `dst`, to derive
    /// re-test cells from.
    pub fn cell_template(&self, src: &str, dst: &str) -> Option<&CellSpec> {
        self.templates.get(&(src.to_string(), dst.to_string()))
    }

    /// Suspects neither confirmed nor cleared.
    pub fn unconfirmed(&self) -> impl Iterator<Item = &Suspect> {
        self.suspects
            .iter()
            .filter(|s| s.state == SuspectState::Unconfirmed)
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
    /// Stored cells of this test that are not part of the run's current
    /// plan (it was edited since they ran): not counted.
    pub stale_cells: Vec<String>,
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

fn metric_of(kind: &str) -> Metric {
    if kind.ends_with("-lat") {
        Metric::LatencyP50Us
    } else {
        Metric::BandwidthGbps
    }
}

/// The directions a cell's data moves in, as (from, to) node names: the
/// driving agent `a` runs the client against `b`; `reverse` and RDMA `read`
/// move data from `b` to `a`, `bidir` both ways. Latency is one pair.
fn planned_pairs(s: &CellSpec) -> Vec<(String, String)> {
    let Some((a, b)) = s.flows.first().cloned() else {
        return Vec::new();
    };
    if metric_of(&s.kind) == Metric::LatencyP50Us {
        return vec![(a, b)];
    }
    let dir = s
        .params
        .get("direction")
        .or_else(|| s.dims.get("direction"))
        .and_then(Value::as_str)
        .unwrap_or("forward");
    let bidir = dir == "bidir" || s.params.get("bidir").and_then(Value::as_bool) == Some(true);
    let read = s.params.get("op").and_then(Value::as_str) == Some("read");
    if bidir {
        vec![(a.clone(), b.clone()), (b, a)]
    } else if (dir == "reverse") != read {
        vec![(b, a)]
    } else {
        vec![(a, b)]
    }
}

/// The figures a finished cell measured, per data direction. A record's
/// `direction` says where its data went (`forward`: from the client `a`;
/// `reverse`: to it — RDMA `read` records are `reverse`); a `bidir` total
/// sums both and is left out when the directions have records of their own.
fn measured_pairs(
    s: &CellSpec,
    ms: &[&Measurement],
    metric: Metric,
) -> Vec<((String, String), f64)> {
    let Some((a, b)) = s.flows.first().cloned() else {
        return Vec::new();
    };
    let totals: Vec<&fabperf_results::Record> = ms
        .iter()
        .filter(|m| m.role == Role::Total)
        .map(|m| &m.record)
        .collect();
    let directed = totals
        .iter()
        .any(|r| matches!(r.direction.as_deref(), Some("forward" | "reverse")));
    let mut out: Vec<((String, String), f64)> = Vec::new();
    for r in totals {
        let pair = match r.direction.as_deref() {
            Some("reverse") => (b.clone(), a.clone()),
            Some("bidir") if directed => continue,
            _ => (a.clone(), b.clone()),
        };
        if out.iter().any(|(p, _)| *p == pair) {
            continue;
        }
        if let Some(v) = figure(metric, r) {
            out.push((pair, v));
        }
    }
    out
}

/// Why a finished cell gave no figure: its records' warnings, if any.
fn no_figure_reason(ms: &[&Measurement]) -> String {
    let why: Vec<String> = ms
        .iter()
        .filter(|m| m.role == Role::Total)
        .flat_map(|m| m.record.warnings.iter().map(|w| w.message.clone()))
        .take(2)
        .collect();
    if why.is_empty() {
        "the cell finished without a figure".into()
    } else {
        format!("the cell finished without a figure ({})", why.join("; "))
    }
}

/// The real port rates of a record's two ends: an RDMA port's rate or a
/// physical netdev's speed; a virtual link's speed is a label and a `tc`
/// cap is a shaping, not the port.
fn real_port_rates(r: &fabperf_results::Record) -> impl Iterator<Item = f64> + '_ {
    [&r.placement_local, &r.placement_remote]
        .into_iter()
        .flatten()
        .filter(|p| !p.virtual_link && p.port_rate_source.as_deref() != Some("tc cap"))
        .filter_map(|p| p.port_rate_gbps)
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// Per group (path, dims): per data pair, the figures or the failures.
#[derive(Default)]
struct Raw {
    mesh: BTreeMap<(String, String), Vec<f64>>,
    mesh_failed: BTreeMap<(String, String), String>,
    retest: BTreeMap<(String, String), Vec<(u32, f64)>>,
    retest_failed: BTreeMap<(String, String), Vec<String>>,
    ports: Vec<f64>,
}

/// The end of a rail cell's flow as the summary names it: the node and
/// its rail.
pub fn rail_end(node: &str, rail: u32) -> String {
    format!("{node}/rail{rail}")
}

/// A rail cell as the summary sees it: its flow between the two nodes'
/// rails ([`rail_end`]), its dimensions without the rails (one group for
/// all rails). `None` for a cell without rails.
fn on_rails(s: &CellSpec) -> Option<CellSpec> {
    let (from, to) = crate::rails::cell_rails(s)?;
    let mut c = s.clone();
    c.flows = c
        .flows
        .iter()
        .map(|(a, b)| (rail_end(a, from), rail_end(b, to)))
        .collect();
    if let Some(o) = c.dims.as_object_mut() {
        o.remove("rail");
        o.remove("rail_to");
    }
    Some(c)
}

/// Analyse the mesh cells of `test` in run `run_id`.
pub fn analyze(
    store: &Store,
    run_id: i64,
    test: &str,
    bw_fraction: f64,
    lat_factor: f64,
) -> Result<MeshAnalysis, StoreError> {
    let cells = store.plan_cells(run_id)?;
    let current = cells.current_ids();
    let ms = store.measurements(run_id, None)?;
    let mut by_cell: BTreeMap<&str, Vec<&Measurement>> = BTreeMap::new();
    for (id, m) in &ms {
        if current.contains(id.as_str()) {
            by_cell.entry(id.as_str()).or_default().push(m);
        }
    }
    let stale_cells: Vec<String> = cells
        .stale
        .iter()
        .filter(|c| c.spec.test == test && (c.spec.pattern == "mesh" || c.spec.pattern == RETEST))
        .map(|c| c.spec.cell_id.clone())
        .collect();
    let mut groups: BTreeMap<(String, String), MeshGroup> = BTreeMap::new();
    let mut raws: BTreeMap<(String, String), Raw> = BTreeMap::new();
    for c in cells.current.iter().filter(|c| c.spec.test == test) {
        let orig = &c.spec;
        let retest = orig.pattern == RETEST;
        if orig.pattern != "mesh" && !retest {
            continue;
        }
        // A rail cell's ends are the nodes' rails: all rails of a sweep
        // point are one group, so a slow rail stands out against the others
        // and is named (`n2/rail1`).
        let on_rails = on_rails(orig);
        let s = on_rails.as_ref().unwrap_or(orig);
        let key = (s.path.clone(), s.dims.to_string());
        let metric = metric_of(&s.kind);
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
            reference: None,
            port_rate_gbps: None,
            above_port: Vec::new(),
            threshold: None,
            suspects: Vec::new(),
            failed: Vec::new(),
            node_findings: Vec::new(),
            bad_nodes: Vec::new(),
            bad_links: Vec::new(),
            unconfirmed_links: Vec::new(),
            templates: BTreeMap::new(),
        });
        let raw = raws.entry(key).or_default();
        let Some((a, b)) = s.flows.first() else {
            continue;
        };
        for n in [a, b] {
            if !g.nodes.contains(n) {
                g.nodes.push(n.clone());
            }
        }
        let planned = planned_pairs(s);
        if !retest {
            for p in &planned {
                g.templates.entry(p.clone()).or_insert_with(|| orig.clone());
            }
        }
        let mine = by_cell.get(s.cell_id.as_str()).cloned().unwrap_or_default();
        match c.state {
            CellState::Pending => {}
            CellState::Done | CellState::Failed => {
                let got = if c.state == CellState::Done {
                    measured_pairs(s, &mine, metric)
                } else {
                    Vec::new()
                };
                for (p, v) in &got {
                    if retest {
                        raw.retest
                            .entry(p.clone())
                            .or_default()
                            .push((s.repeat, *v));
                    } else {
                        raw.mesh.entry(p.clone()).or_default().push(*v);
                    }
                }
                if metric == Metric::BandwidthGbps {
                    for m in &mine {
                        raw.ports.extend(real_port_rates(&m.record));
                    }
                }
                // A planned direction without a figure is a failure, also
                // when the cell itself finished.
                let why = match c.state {
                    CellState::Failed => c.error.clone().unwrap_or_else(|| "failed".into()),
                    _ => no_figure_reason(&mine),
                };
                for p in planned.iter().filter(|p| !got.iter().any(|(q, _)| q == *p)) {
                    if retest {
                        raw.retest_failed
                            .entry(p.clone())
                            .or_default()
                            .push(why.clone());
                    } else {
                        raw.mesh_failed
                            .entry(p.clone())
                            .or_insert_with(|| why.clone());
                    }
                }
            }
        }
    }
    for (key, g) in groups.iter_mut() {
        let raw = raws.remove(key).unwrap_or_default();
        judge(g, raw, bw_fraction, lat_factor);
    }
    Ok(MeshAnalysis {
        run_id,
        test: test.to_string(),
        bw_fraction,
        lat_factor,
        groups: groups.into_values().collect(),
        stale_cells,
    })
}

/// Apply the rule to a group's figures, re-tests and failures, and blame.
fn judge(g: &mut MeshGroup, mut raw: Raw, bw_fraction: f64, lat_factor: f64) {
    g.nodes.sort();
    g.repeats = raw.mesh.values().map(Vec::len).max().unwrap_or(0);
    for ((a, b), v) in &raw.mesh {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        g.values
            .entry(a.clone())
            .or_default()
            .insert(b.clone(), mean);
    }
    // A pair that failed in one repeat but was measured in another is not
    // "failed".
    g.failed = raw
        .mesh_failed
        .iter()
        .filter(|(p, _)| !raw.mesh.contains_key(*p))
        .map(|((a, b), e)| (a.clone(), b.clone(), e.clone()))
        .collect();
    if g.metric == Metric::BandwidthGbps {
        g.port_rate_gbps = raw.ports.iter().copied().reduce(f64::max);
    }
    let pairs: Vec<(&String, &String, f64)> = g
        .values
        .iter()
        .flat_map(|(a, row)| row.iter().map(move |(b, v)| (a, b, *v)))
        .collect();
    let best = pairs.iter().copied().reduce(|x, y| {
        let better = match g.metric {
            Metric::BandwidthGbps => y.2 > x.2,
            Metric::LatencyP50Us => y.2 < x.2,
        };
        if better {
            y
        } else {
            x
        }
    });
    if let Some(port) = g.port_rate_gbps {
        g.above_port = pairs
            .iter()
            .filter(|(_, _, v)| *v > port)
            .map(|(a, b, v)| ((*a).clone(), (*b).clone(), *v))
            .collect();
    }
    if let Some((a, b, v)) = best {
        let capped_at = g
            .port_rate_gbps
            .filter(|p| g.metric == Metric::BandwidthGbps && v > *p);
        g.reference = Some(Reference {
            src: a.clone(),
            dst: b.clone(),
            measured: v,
            capped_at,
        });
        g.best = Some(capped_at.unwrap_or(v));
    }
    let Some(best) = g.best else {
        blame(g);
        return;
    };
    let threshold = match g.metric {
        Metric::BandwidthGbps => best * bw_fraction,
        Metric::LatencyP50Us => best * lat_factor,
    };
    g.threshold = Some(threshold);
    for (a, b, v) in pairs {
        if passes(g.metric, v, threshold) {
            continue;
        }
        let key = (a.clone(), b.clone());
        let mut rt = raw.retest.remove(&key).unwrap_or_default();
        rt.sort_by_key(|(round, _)| *round);
        let retests: Vec<f64> = rt.into_iter().map(|(_, v)| v).collect();
        let retests_failed = raw.retest_failed.remove(&key).unwrap_or_default();
        let state = if retests.iter().any(|&x| passes(g.metric, x, threshold)) {
            SuspectState::Cleared
        } else if retests.is_empty() {
            SuspectState::Unconfirmed
        } else {
            SuspectState::Confirmed
        };
        g.suspects.push(Suspect {
            src: a.clone(),
            dst: b.clone(),
            value: v,
            retests,
            retests_failed,
            state,
            confirmed: state == SuspectState::Confirmed,
        });
    }
    blame(g);
}

/// How one directed pair stands, for blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PairIs {
    Good,
    Failed,
    Confirmed,
    Unconfirmed,
}

/// Name the nodes (and links) behind the failures and suspects.
fn blame(g: &mut MeshGroup) {
    let mut status: BTreeMap<(String, String), PairIs> = BTreeMap::new();
    for (a, row) in &g.values {
        for b in row.keys() {
            status.insert((a.clone(), b.clone()), PairIs::Good);
        }
    }
    for (a, b, _) in &g.failed {
        status.insert((a.clone(), b.clone()), PairIs::Failed);
    }
    for s in &g.suspects {
        let st = match s.state {
            SuspectState::Confirmed => PairIs::Confirmed,
            SuspectState::Unconfirmed => PairIs::Unconfirmed,
            SuspectState::Cleared => PairIs::Good,
        };
        status.insert((s.src.clone(), s.dst.clone()), st);
    }
    let fmt = |v: f64| format!("{v:.2}");
    let range = |vals: &[f64]| -> String {
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if vals.is_empty() {
            String::new()
        } else if fmt(lo) == fmt(hi) {
            format!("{} {}", fmt(lo), g.metric.unit())
        } else {
            format!("{}-{} {}", fmt(lo), fmt(hi), g.metric.unit())
        }
    };
    let value = |a: &str, b: &str| g.values.get(a).and_then(|r| r.get(b)).copied();
    // Dead nodes first: every cell with them failed.
    let mut dead: BTreeSet<String> = BTreeSet::new();
    for n in &g.nodes {
        let mine: Vec<(&(String, String), &PairIs)> = status
            .iter()
            .filter(|((a, b), _)| a == n || b == n)
            .collect();
        if !mine.is_empty() && mine.iter().all(|(_, s)| **s == PairIs::Failed) {
            dead.insert(n.clone());
            let first = g
                .failed
                .iter()
                .find(|(a, b, _)| a == n || b == n)
                .map(|(_, _, e)| e.as_str())
                .unwrap_or("");
            g.node_findings.push(NodeFinding {
                node: n.clone(),
                fault: NodeFault::Dead,
                confirmed: true,
                text: format!(
                    "all of its {} cell{} failed: {first}",
                    mine.len(),
                    if mine.len() == 1 { "" } else { "s" }
                ),
            });
        }
    }
    // Then the living: pairs with a dead peer say nothing about them.
    for n in &g.nodes {
        if dead.contains(n) {
            continue;
        }
        let side = |sends: bool| -> Vec<(String, String, PairIs)> {
            status
                .iter()
                .filter(|((a, b), _)| {
                    let (me, peer) = if sends { (a, b) } else { (b, a) };
                    me == n && !dead.contains(peer)
                })
                .map(|((a, b), s)| (a.clone(), b.clone(), *s))
                .collect()
        };
        let (outs, ins) = (side(true), side(false));
        let peers = |v: &[(String, String, PairIs)]| -> usize {
            v.iter()
                .map(|(a, b, _)| if a == n { b } else { a })
                .collect::<BTreeSet<_>>()
                .len()
        };
        let suspect = |v: &[(String, String, PairIs)]| v.iter().all(|(_, _, s)| *s != PairIs::Good);
        let confirmed = |v: &[(String, String, PairIs)]| {
            v.iter()
                .all(|(_, _, s)| matches!(s, PairIs::Failed | PairIs::Confirmed))
        };
        let figures = |v: &[(String, String, PairIs)]| -> (Vec<f64>, usize) {
            let vals: Vec<f64> = v.iter().filter_map(|(a, b, _)| value(a, b)).collect();
            let failed = v.iter().filter(|(_, _, s)| *s == PairIs::Failed).count();
            (vals, failed)
        };
        let failed_note = |k: usize| {
            if k == 0 {
                String::new()
            } else {
                format!(", {k} failed")
            }
        };
        let all: Vec<(String, String, PairIs)> = outs.iter().chain(&ins).cloned().collect();
        let both_ways = !outs.is_empty() && !ins.is_empty();
        let finding = if peers(&all) >= 2 && suspect(&all) {
            let (vals, k) = figures(&all);
            Some((
                NodeFault::All,
                confirmed(&all),
                format!(
                    "all of its {} measured pairs{} fail the rule ({}{})",
                    all.len(),
                    if both_ways {
                        ", sending and receiving,"
                    } else {
                        ""
                    },
                    range(&vals),
                    failed_note(k)
                ),
            ))
        } else if peers(&outs) >= 2 && suspect(&outs) {
            let (vals, k) = figures(&outs);
            Some((
                NodeFault::Sends,
                confirmed(&outs),
                format!(
                    "its sends fail: all {} pairs it sends in fail the rule ({}{}){}",
                    outs.len(),
                    range(&vals),
                    failed_note(k),
                    if ins.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", while {} of its {} receives pass",
                            ins.iter().filter(|x| x.2 == PairIs::Good).count(),
                            ins.len()
                        )
                    }
                ),
            ))
        } else if peers(&ins) >= 2 && suspect(&ins) {
            let (vals, k) = figures(&ins);
            Some((
                NodeFault::Receives,
                confirmed(&ins),
                format!(
                    "its receives fail: all {} pairs it receives in fail the rule ({}{}){}",
                    ins.len(),
                    range(&vals),
                    failed_note(k),
                    if outs.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", while {} of its {} sends pass",
                            outs.iter().filter(|x| x.2 == PairIs::Good).count(),
                            outs.len()
                        )
                    }
                ),
            ))
        } else {
            None
        };
        if let Some((fault, confirmed, text)) = finding {
            g.node_findings.push(NodeFinding {
                node: n.clone(),
                fault,
                confirmed,
                text,
            });
        }
    }
    g.bad_nodes = g
        .node_findings
        .iter()
        .filter(|f| f.confirmed)
        .map(|f| f.node.clone())
        .collect();
    // Links: suspects no named node explains.
    let explains = |f: &NodeFinding, a: &str, b: &str| match f.fault {
        NodeFault::Dead | NodeFault::All => f.node == a || f.node == b,
        NodeFault::Sends => f.node == a,
        NodeFault::Receives => f.node == b,
    };
    let link = |a: &str, b: &str| {
        if a < b {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        }
    };
    let mut bad: BTreeSet<(String, String)> = BTreeSet::new();
    let mut maybe: BTreeSet<(String, String)> = BTreeSet::new();
    for s in &g.suspects {
        if s.state == SuspectState::Cleared
            || g.node_findings.iter().any(|f| explains(f, &s.src, &s.dst))
        {
            continue;
        }
        match s.state {
            SuspectState::Confirmed => bad.insert(link(&s.src, &s.dst)),
            _ => maybe.insert(link(&s.src, &s.dst)),
        };
    }
    g.unconfirmed_links = maybe.difference(&bad).cloned().collect();
    g.bad_links = bad.into_iter().collect();
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

fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human-readable summary of one test.
pub fn render(a: &MeshAnalysis) -> String {
    // Names and errors come from a store (and agents): escaped, one line each.
    let e = fabperf_results::escape::terminal;
    let mut o = String::new();
    for g in &a.groups {
        render_group(&mut o, a, g);
    }
    if !a.stale_cells.is_empty() {
        let n = a.stale_cells.len();
        let shown: Vec<&str> = a.stale_cells.iter().take(8).map(String::as_str).collect();
        let _ = writeln!(
            o,
            "{}: {n} stored cell{} not part of the run's current plan (the plan was edited since they ran), not counted: {}{}\n",
            e(&a.test),
            if n == 1 { " is" } else { "s are" },
            e(&shown.join(", ")),
            if n > shown.len() {
                format!(" and {} more", n - shown.len())
            } else {
                String::new()
            }
        );
    }
    o
}

fn render_group(o: &mut String, a: &MeshAnalysis, g: &MeshGroup) {
    // Names and errors come from a store (and agents): escaped, one line each.
    let e = fabperf_results::escape::terminal;
    let dims = e(&dims_label(&g.dims));
    let _ = writeln!(
        o,
        "{} ({}) on path {}{}{}: {}, mean of {} repeat{}, from row to column",
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
    let state: BTreeMap<(&str, &str), SuspectState> = g
        .suspects
        .iter()
        .map(|s| ((s.src.as_str(), s.dst.as_str()), s.state))
        .collect();
    let failed: BTreeSet<(&str, &str)> = g
        .failed
        .iter()
        .map(|(a, b, _)| (a.as_str(), b.as_str()))
        .collect();
    let mut unmeasured = false;
    for x in &g.nodes {
        let _ = write!(o, "  {:>w$}", shown[x.as_str()]);
        for y in &g.nodes {
            let cell = if x == y {
                "-".to_string()
            } else if let Some(v) = g.values.get(x).and_then(|r| r.get(y)) {
                let mark = match state.get(&(x.as_str(), y.as_str())) {
                    Some(SuspectState::Confirmed) => "!",
                    Some(SuspectState::Unconfirmed) => "?",
                    Some(SuspectState::Cleared) => "~",
                    None => "",
                };
                format!("{v:.2}{mark}")
            } else if failed.contains(&(x.as_str(), y.as_str())) {
                "FAIL".into()
            } else {
                unmeasured = true;
                ".".into()
            };
            let _ = write!(o, " {cell:>w$}");
        }
        o.push('\n');
    }
    let who = |r: &Reference| format!("{} -> {}", e(&r.src), e(&r.dst));
    let rule = match (g.metric, &g.reference, g.threshold) {
        (Metric::BandwidthGbps, Some(r), Some(t)) => match r.capped_at {
            Some(p) => format!(
                "bandwidth below {:.0}% of the {p:.2} Gbit/s port rate, i.e. < {t:.2} (the best pair, {}, measured {:.2}, above the port rate)",
                a.bw_fraction * 100.0,
                who(r),
                r.measured
            ),
            None => format!(
                "bandwidth below {:.0}% of the best pair ({}, {:.2} Gbit/s), i.e. < {t:.2}",
                a.bw_fraction * 100.0,
                who(r),
                r.measured
            ),
        },
        (Metric::LatencyP50Us, Some(r), Some(t)) => format!(
            "latency above {}x the lowest pair ({}, {:.2} us), i.e. > {t:.2}",
            a.lat_factor,
            who(r),
            r.measured
        ),
        _ => "no figures".into(),
    };
    let _ = writeln!(
        o,
        "  rule: {rule}; ! suspect confirmed by its re-tests, ? suspect not confirmed (no re-test gave a figure), ~ cleared by a re-test{}{}",
        if failed.is_empty() { "" } else { ", FAIL no figure" },
        if unmeasured {
            ", . not measured (this mesh measures each pair one way)"
        } else {
            ""
        }
    );
    if g.suspects.is_empty() && g.failed.is_empty() {
        let _ = writeln!(o, "  no suspect pairs");
    }
    let living = g.nodes.len()
        - g.node_findings
            .iter()
            .filter(|f| f.fault == NodeFault::Dead)
            .count();
    if living == 0 && !g.nodes.is_empty() {
        let _ = writeln!(
            o,
            "  every cell of this mesh failed: a cause common to all (the runner, the token, the plan) is more likely than {} faulty nodes",
            g.nodes.len()
        );
    }
    for f in &g.node_findings {
        let hint = match f.fault {
            NodeFault::Dead => "check that its agent runs and is reachable (`fabperf runs --cells` has every error)",
            NodeFault::Sends => "check this node's transmit side: NIC, cable, switch port (`fabperf doctor` on it)",
            NodeFault::Receives => "check this node's receive side: NIC, cable, switch port (`fabperf doctor` on it)",
            NodeFault::All => "check this node's NIC, cable, switch port and PCIe slot (`fabperf doctor` on it)",
        };
        if f.confirmed {
            let _ = writeln!(o, "  SUSPECT NODE {}: {}; {hint}", e(&f.node), e(&f.text));
        } else {
            let _ = writeln!(
                o,
                "  unconfirmed SUSPECT NODE {}: {} — not confirmed: some of these pairs have no re-test figure",
                e(&f.node),
                e(&f.text)
            );
        }
    }
    let detail = |x: &str, y: &str| -> String {
        g.suspects
            .iter()
            .filter(|s| (s.src == x && s.dst == y) || (s.src == y && s.dst == x))
            .filter(|s| s.state != SuspectState::Cleared)
            .map(|s| {
                format!(
                    "{} -> {} {:.2}{} ({})",
                    e(&s.src),
                    e(&s.dst),
                    s.value,
                    if s.retests.is_empty() {
                        String::new()
                    } else {
                        format!(", re-tests {}", list(&s.retests))
                    },
                    s.state.word()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    for (x, y) in &g.bad_links {
        let _ = writeln!(o, "  SUSPECT LINK {} - {}: {}", e(x), e(y), detail(x, y));
    }
    for (x, y) in &g.unconfirmed_links {
        let _ = writeln!(
            o,
            "  unconfirmed SUSPECT LINK {} - {}: {}",
            e(x),
            e(y),
            detail(x, y)
        );
    }
    for s in &g.suspects {
        match s.state {
            SuspectState::Cleared => {
                let _ = writeln!(
                    o,
                    "  cleared {} -> {}: {:.2} in the mesh, re-tests {} (noise)",
                    e(&s.src),
                    e(&s.dst),
                    s.value,
                    list(&s.retests)
                );
            }
            SuspectState::Unconfirmed => {
                let why = match s.retests_failed.first() {
                    Some(err) => format!(
                        "{} re-test{} failed ({}); `fabperf run PLAN --retry-failed` runs {} again",
                        s.retests_failed.len(),
                        if s.retests_failed.len() == 1 { "" } else { "s" },
                        e(err),
                        if s.retests_failed.len() == 1 { "it" } else { "them" }
                    ),
                    None => "no re-test ran (the plan's `retest` is 0, the run stopped before its re-tests, or the rule was changed after the run)".into(),
                };
                let _ = writeln!(
                    o,
                    "  unconfirmed {} -> {}: {:.2} in the mesh; {why}",
                    e(&s.src),
                    e(&s.dst),
                    s.value
                );
            }
            SuspectState::Confirmed => {}
        }
    }
    for (x, y, err) in &g.failed {
        let _ = writeln!(o, "  FAILED {} -> {}: {}", e(x), e(y), e(err));
    }
    if let Some(p) = g.port_rate_gbps {
        for (x, y, v) in &g.above_port {
            let _ = writeln!(
                o,
                "  ABOVE THE PORT RATE {} -> {}: {v:.2} Gbit/s on {p:.2} Gbit/s ports: the agents share a host, or a rate or a count is wrong",
                e(x),
                e(y)
            );
        }
    }
    o.push('\n');
}

/// Names of the mesh tests of a run's current plan, in plan order.
pub fn mesh_tests(store: &Store, run_id: i64) -> Result<Vec<String>, StoreError> {
    let mut out: Vec<String> = Vec::new();
    for c in store.plan_cells(run_id)?.current {
        if c.spec.pattern == "mesh" && !out.contains(&c.spec.test) {
            out.push(c.spec.test);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabperf_results::{Placement, Record, Transport};
    use fabperf_store::{Attempt, NewRun};
    use serde_json::json;

    const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

    fn spec(id: &str, pattern: &str, a: &str, b: &str, params: Value, repeat: u32) -> CellSpec {
        let dims = match params.get("direction") {
            Some(d) => json!({"size": 65536, "direction": d}),
            None => json!({"size": 65536}),
        };
        CellSpec {
            cell_id: id.into(),
            seq: 0,
            batch: 0,
            test: "mesh".into(),
            kind: params
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("tcp-bw")
                .into(),
            path: "host".into(),
            pattern: pattern.into(),
            flows: vec![(a.into(), b.into())],
            params,
            dims,
            repeat,
        }
    }

    fn rec(gbps: f64, direction: &str) -> Record {
        let mut r = Record::new("tcp-bw", Transport::Tcp, 65536, 1);
        r.set_throughput((gbps * 1e9 / 8.0) as u64, 1.0, None);
        r.direction = Some(direction.into());
        r
    }

    fn attempt() -> Attempt {
        Attempt {
            attempts: 1,
            started_at: String::new(),
            ended_at: String::new(),
            wall_s: 1.0,
        }
    }

    /// A store holding one run of the given mesh cells (all in its plan),
    /// the given re-test cells, and each cell's outcome: `Ok(records)` or
    /// `Err(error)`.
    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        run: i64,
    }

    type Outcome = Result<Vec<Record>, &'static str>;

    fn fixture(mesh: Vec<(CellSpec, Outcome)>, retests: Vec<(CellSpec, Outcome)>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.db")).unwrap();
        let run = store
            .create_run(&NewRun {
                plan_name: "p",
                plan_hash: "h",
                plan_file: None,
                plan_text: "",
            })
            .unwrap()
            .id;
        let specs: Vec<CellSpec> = mesh.iter().map(|(c, _)| c.clone()).collect();
        store.sync_cells(run, &specs, false).unwrap();
        let rt: Vec<CellSpec> = retests.iter().map(|(c, _)| c.clone()).collect();
        store.add_cells(run, &rt).unwrap();
        for (c, out) in mesh.into_iter().chain(retests) {
            let (a, b) = c.flows[0].clone();
            match out {
                Ok(recs) => {
                    let ms: Vec<Measurement> = recs
                        .into_iter()
                        .map(|record| Measurement {
                            role: Role::Total,
                            src: Some(a.clone()),
                            dst: Some(b.clone()),
                            record,
                        })
                        .collect();
                    store
                        .finish_cell_done(run, &c.cell_id, &attempt(), &ms)
                        .unwrap()
                }
                Err(e) => store
                    .finish_cell_failed(run, &c.cell_id, &attempt(), e)
                    .unwrap(),
            }
        }
        Fixture {
            _dir: dir,
            store,
            run,
        }
    }

    /// Every ordered pair of NODES, forward, with `fig(a, b)` Gbit/s.
    fn mesh_cells(fig: impl Fn(&str, &str) -> Outcome) -> Vec<(CellSpec, Outcome)> {
        let mut v = Vec::new();
        for a in NODES {
            for b in NODES {
                if a != b {
                    v.push((
                        spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                        fig(a, b),
                    ));
                }
            }
        }
        v
    }

    fn retest(a: &str, b: &str, round: u32, out: Outcome) -> (CellSpec, Outcome) {
        (
            spec(
                &format!("rt{round}-{a}{b}"),
                RETEST,
                a,
                b,
                json!({"size": 65536}),
                round,
            ),
            out,
        )
    }

    fn analyze_one(f: &Fixture) -> (MeshAnalysis, MeshGroup, String) {
        let a = analyze(
            &f.store,
            f.run,
            "mesh",
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        )
        .unwrap();
        assert_eq!(a.groups.len(), 1, "{a:#?}");
        let g = a.groups[0].clone();
        let text = render(&a);
        eprintln!("{text}");
        (a, g, text)
    }

    fn state(g: &MeshGroup, a: &str, b: &str) -> Option<SuspectState> {
        g.suspects
            .iter()
            .find(|s| s.src == a && s.dst == b)
            .map(|s| s.state)
    }

    #[test]
    fn suspects_are_confirmed_cleared_or_unconfirmed() {
        let slow = [("n1", "n2"), ("n1", "n3"), ("n2", "n4"), ("n3", "n4")];
        let f = fixture(
            mesh_cells(|a, b| {
                Ok(vec![rec(
                    if slow.contains(&(a, b)) { 5.0 } else { 10.0 },
                    "forward",
                )])
            }),
            vec![
                // Confirmed: the re-test is slow too.
                retest("n1", "n2", 0, Ok(vec![rec(4.0, "forward")])),
                // Cleared: the re-test meets the rule.
                retest("n1", "n3", 0, Ok(vec![rec(9.9, "forward")])),
                // Unconfirmed: the re-test failed.
                retest("n2", "n4", 0, Err("connection refused")),
                // n3 -> n4: no re-test at all.
            ],
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(state(&g, "n1", "n2"), Some(SuspectState::Confirmed));
        assert_eq!(state(&g, "n1", "n3"), Some(SuspectState::Cleared));
        assert_eq!(state(&g, "n2", "n4"), Some(SuspectState::Unconfirmed));
        assert_eq!(state(&g, "n3", "n4"), Some(SuspectState::Unconfirmed));
        let failed = g
            .suspects
            .iter()
            .find(|s| s.src == "n2" && s.dst == "n4")
            .unwrap();
        assert_eq!(
            failed.retests_failed,
            vec!["connection refused".to_string()]
        );
        assert!(!failed.confirmed);
        assert_eq!(g.unconfirmed().count(), 2);
        // Only the confirmed suspect blames a link.
        assert_eq!(g.bad_links, vec![("n1".to_string(), "n2".to_string())]);
        assert_eq!(
            g.unconfirmed_links,
            vec![
                ("n2".to_string(), "n4".to_string()),
                ("n3".to_string(), "n4".to_string())
            ]
        );
        assert!(g.bad_nodes.is_empty());
        assert!(
            text.contains("SUSPECT LINK n1 - n2: n1 -> n2 5.00, re-tests 4.00 (confirmed)"),
            "{text}"
        );
        assert!(text.contains("unconfirmed SUSPECT LINK n2 - n4"), "{text}");
        assert!(
            text.contains("unconfirmed n2 -> n4: 5.00 in the mesh; 1 re-test failed (connection refused); `fabperf run PLAN --retry-failed` runs it again"),
            "{text}"
        );
        assert!(
            text.contains("unconfirmed n3 -> n4: 5.00 in the mesh; no re-test ran"),
            "{text}"
        );
        assert!(text.contains("cleared n1 -> n3"), "{text}");
        assert!(
            text.contains("5.00?") && text.contains("5.00!") && text.contains("5.00~"),
            "{text}"
        );
        // Nothing is "not measured": both directions were.
        assert!(!text.contains(" . not measured"), "{text}");
    }

    #[test]
    fn a_changed_rule_leaves_new_suspects_unconfirmed() {
        let f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n1" { 8.0 } else { 10.0 }, "forward")])),
            vec![],
        );
        // The plan's rule: nobody is a suspect at 0.7.
        let a = analyze(&f.store, f.run, "mesh", 0.7, DEFAULT_LAT_FACTOR).unwrap();
        assert!(a.groups[0].suspects.is_empty());
        // A stricter rule afterwards: n1's sends are suspects with no re-test.
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.unconfirmed().count(), 3);
        assert!(g.bad_nodes.is_empty(), "nothing is confirmed");
        let n1 = &g.node_findings[0];
        assert_eq!(
            (n1.node.as_str(), n1.fault, n1.confirmed),
            ("n1", NodeFault::Sends, false)
        );
        assert!(
            text.contains("unconfirmed SUSPECT NODE n1: its sends fail"),
            "{text}"
        );
        assert!(!text.contains("\n  SUSPECT NODE"), "{text}");
    }

    #[test]
    fn a_node_whose_sends_fail_is_named_as_such() {
        let f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n3" { 1.0 } else { 10.0 }, "forward")])),
            ["n1", "n2", "n4"]
                .iter()
                .map(|b| retest("n3", b, 0, Ok(vec![rec(1.1, "forward")])))
                .collect(),
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n3".to_string()]);
        assert_eq!(g.node_findings.len(), 1);
        assert_eq!(g.node_findings[0].fault, NodeFault::Sends);
        assert!(g.bad_links.is_empty(), "explained by n3: {:?}", g.bad_links);
        assert!(
            text.contains("SUSPECT NODE n3: its sends fail: all 3 pairs it sends in fail the rule (1.00 Gbit/s), while 3 of its 3 receives pass; check this node's transmit side"),
            "{text}"
        );
        // Both ways slow: the node, not a direction.
        let f = fixture(
            mesh_cells(|a, b| {
                Ok(vec![rec(
                    if a == "n3" || b == "n3" { 1.0 } else { 10.0 },
                    "forward",
                )])
            }),
            NODES
                .iter()
                .filter(|n| **n != "n3")
                .flat_map(|n| {
                    [
                        retest("n3", n, 0, Ok(vec![rec(1.0, "forward")])),
                        retest(n, "n3", 0, Ok(vec![rec(1.0, "forward")])),
                    ]
                })
                .collect(),
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.node_findings[0].fault, NodeFault::All);
        assert!(text.contains("SUSPECT NODE n3: all of its 6 measured pairs, sending and receiving, fail the rule"), "{text}");
    }

    #[test]
    fn a_dead_node_is_a_finding() {
        let f = fixture(
            mesh_cells(|a, b| {
                if a == "n4" || b == "n4" {
                    Err("asking 127.0.0.4:5301 to drive: connection refused")
                } else {
                    Ok(vec![rec(10.0, "forward")])
                }
            }),
            vec![],
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n4".to_string()]);
        assert_eq!(g.node_findings[0].fault, NodeFault::Dead);
        assert_eq!(g.failed.len(), 6);
        assert!(g.suspects.is_empty());
        assert!(
            text.contains("SUSPECT NODE n4: all of its 6 cells failed: asking 127.0.0.4:5301 to drive: connection refused"),
            "{text}"
        );
        // Everything dead: said to be common cause, every node named.
        let f = fixture(mesh_cells(|_, _| Err("authentication failed")), vec![]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes.len(), 4);
        assert!(text.contains("every cell of this mesh failed"), "{text}");
    }

    #[test]
    fn a_cell_without_a_figure_is_a_failure() {
        let f = fixture(
            mesh_cells(|a, b| {
                if (a, b) == ("n1", "n2") {
                    let mut r = rec(0.0, "forward");
                    r.set_throughput(0, 0.0, Some(0));
                    r.warn(fabperf_results::Warning::NoInterval {
                        what: "no request completed inside the measured interval".into(),
                    });
                    Ok(vec![r])
                } else {
                    Ok(vec![rec(10.0, "forward")])
                }
            }),
            vec![],
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.failed.len(), 1, "{:?}", g.failed);
        assert!(
            g.failed[0].2.contains("finished without a figure"),
            "{:?}",
            g.failed
        );
        assert!(
            g.failed[0].2.contains("no request completed"),
            "{:?}",
            g.failed
        );
        assert!(text.contains("FAIL"), "{text}");
        assert!(
            text.contains("FAILED n1 -> n2: the cell finished without a figure"),
            "{text}"
        );
    }

    #[test]
    fn reverse_read_and_bidir_keep_from_row_to_column() {
        let rd = |id: &str, a: &str, b: &str, params: Value, recs: Vec<Record>| {
            (spec(id, "mesh", a, b, params, 0), Ok(recs))
        };
        // tcp-bw reverse: n1 drives, data flows n2 -> n1.
        let f = fixture(
            vec![
                rd(
                    "r12",
                    "n1",
                    "n2",
                    json!({"direction": "reverse"}),
                    vec![rec(3.0, "reverse")],
                ),
                rd(
                    "r21",
                    "n2",
                    "n1",
                    json!({"direction": "reverse"}),
                    vec![rec(7.0, "reverse")],
                ),
            ],
            vec![],
        );
        let (_, g, _) = analyze_one(&f);
        assert_eq!(g.values["n2"]["n1"], 3.0);
        assert_eq!(g.values["n1"]["n2"], 7.0);
        assert_eq!(g.cell_template("n2", "n1").unwrap().cell_id, "r12");
        // rdma read: data from the target; its record says `reverse`; a
        // failed read cell is a failure of that direction.
        let f = fixture(
            vec![
                rd(
                    "x12",
                    "n1",
                    "n2",
                    json!({"kind": "rdma-bw", "op": "read"}),
                    vec![rec(3.0, "reverse")],
                ),
                (
                    spec(
                        "x21",
                        "mesh",
                        "n2",
                        "n1",
                        json!({"kind": "rdma-bw", "op": "read"}),
                        0,
                    ),
                    Err("boom"),
                ),
            ],
            vec![],
        );
        let (_, g, _) = analyze_one(&f);
        assert_eq!(g.values["n2"]["n1"], 3.0);
        assert_eq!(g.failed, vec![("n1".into(), "n2".into(), "boom".into())]);
        // bidir: one cell, both directions; the total is not a direction.
        let f = fixture(
            vec![rd(
                "b12",
                "n1",
                "n2",
                json!({"direction": "bidir"}),
                vec![rec(9.0, "bidir"), rec(5.0, "forward"), rec(4.0, "reverse")],
            )],
            vec![],
        );
        let (_, g, _) = analyze_one(&f);
        assert_eq!(g.values["n1"]["n2"], 5.0);
        assert_eq!(g.values["n2"]["n1"], 4.0);
    }

    #[test]
    fn the_reference_is_capped_at_a_real_port_rate() {
        let port = |r: &mut Record, rate: f64, source: &str, virt: bool| {
            let p = Placement {
                port_rate_gbps: Some(rate),
                port_rate_source: Some(source.into()),
                virtual_link: virt,
                ..Placement::default()
            };
            r.placement_local = Some(p.clone());
            r.placement_remote = Some(p);
        };
        // n1 -> n2 are co-located: 30 Gbit/s on 10 Gbit/s ports.
        let cells = |source: &'static str, virt: bool| {
            mesh_cells(move |a, b| {
                let mut r = rec(if (a, b) == ("n1", "n2") { 30.0 } else { 9.5 }, "forward");
                port(&mut r, 10.0, source, virt);
                Ok(vec![r])
            })
        };
        let f = fixture(cells("netdev speed", false), vec![]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.port_rate_gbps, Some(10.0));
        assert_eq!(g.best, Some(10.0));
        let r = g.reference.as_ref().unwrap();
        assert_eq!(
            (r.src.as_str(), r.dst.as_str(), r.measured, r.capped_at),
            ("n1", "n2", 30.0, Some(10.0))
        );
        assert!(
            g.suspects.is_empty(),
            "9.5 is 95 % of the port: {:?}",
            g.suspects
        );
        assert_eq!(g.above_port, vec![("n1".into(), "n2".into(), 30.0)]);
        assert!(text.contains("below 93% of the 10.00 Gbit/s port rate, i.e. < 9.30 (the best pair, n1 -> n2, measured 30.00"), "{text}");
        assert!(text.contains("ABOVE THE PORT RATE n1 -> n2"), "{text}");
        // A virtual link's speed and a tc cap are not port rates: ClusterKit's
        // rule as it is, and the summary names the pair that set it.
        for (src, virt) in [("netdev speed", true), ("tc cap", false)] {
            let f = fixture(cells(src, virt), vec![]);
            let (_, g, text) = analyze_one(&f);
            assert_eq!((g.port_rate_gbps, g.best), (None, Some(30.0)));
            assert_eq!(g.suspects.len(), 11);
            assert!(
                text.contains("below 93% of the best pair (n1 -> n2, 30.00 Gbit/s), i.e. < 27.90"),
                "{text}"
            );
        }
    }

    #[test]
    fn stale_cells_are_left_out_and_listed() {
        let mut f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n1" { 1.0 } else { 10.0 }, "forward")])),
            vec![retest("n1", "n2", 0, Ok(vec![rec(1.0, "forward")]))],
        );
        // The plan is edited (another duration: new ids) and re-run.
        let edited: Vec<(CellSpec, Outcome)> = mesh_cells(|_, _| Ok(vec![rec(10.0, "forward")]))
            .into_iter()
            .map(|(mut c, o)| {
                c.cell_id = format!("v2-{}", c.cell_id);
                c.params = json!({"size": 65536, "duration_s": 2.0});
                (c, o)
            })
            .collect();
        let specs: Vec<CellSpec> = edited.iter().map(|(c, _)| c.clone()).collect();
        f.store.sync_cells(f.run, &specs, false).unwrap();
        for (c, o) in edited {
            let ms: Vec<Measurement> = o
                .unwrap()
                .into_iter()
                .map(|record| Measurement {
                    role: Role::Total,
                    src: Some(c.flows[0].0.clone()),
                    dst: Some(c.flows[0].1.clone()),
                    record,
                })
                .collect();
            f.store
                .finish_cell_done(f.run, &c.cell_id, &attempt(), &ms)
                .unwrap();
        }
        let (a, g, text) = analyze_one(&f);
        assert_eq!(g.repeats, 1, "the old cells are not repeats");
        assert!(g.suspects.is_empty(), "{:?}", g.suspects);
        assert!(g
            .cell_template("n1", "n2")
            .unwrap()
            .cell_id
            .starts_with("v2-"));
        assert_eq!(a.stale_cells.len(), 13, "12 old cells and their re-test");
        assert!(
            text.contains("13 stored cells are not part of the run's current plan"),
            "{text}"
        );
    }
}
