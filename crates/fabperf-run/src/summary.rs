//! The mesh summary: the N×N matrix of a mesh test (data from the row's
//! node to the column's), the suspect pairs (bandwidth below a fraction of
//! a reference pair, latency above a multiple of it), their re-tests, and
//! whom to blame.
//!
//! The reference is the median pair by default ([`RuleKind::Median`]):
//! under noise — many flows sharing the CPUs, a pair that happened to run
//! alone — one lucky pair sets ClusterKit's reference (the best pair) so
//! high, or its latency so low, that healthy pairs fail it; the median
//! stays put while fewer than half of the pairs are faulty. ClusterKit's
//! rule ([`RuleKind::Clusterkit`]) stays available.
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

use fabperf_store::{CellSpec, CellState, Role, Store, StoreError, StoredMeasurement, RETEST};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// ClusterKit's defaults (for either reference).
pub const DEFAULT_BW_FRACTION: f64 = 0.93;
pub const DEFAULT_LAT_FACTOR: f64 = 2.1;

/// Which pair a mesh's figures are judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// The median pair (of an even count, the better of the two middle
    /// ones): robust to lucky pairs and to faults on fewer than half of
    /// the pairs.
    #[default]
    Median,
    /// ClusterKit's: the best pair (highest bandwidth, lowest latency).
    Clusterkit,
}

impl RuleKind {
    pub const NAMES: &'static str = "median, clusterkit";

    pub fn parse(s: &str) -> Option<RuleKind> {
        match s {
            "median" => Some(RuleKind::Median),
            "clusterkit" => Some(RuleKind::Clusterkit),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuleKind::Median => "median",
            RuleKind::Clusterkit => "clusterkit",
        }
    }
}

/// How a mesh's pairs are judged: bandwidth below `bw_fraction` of the
/// reference pair's, latency above `lat_factor` times its.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    pub kind: RuleKind,
    pub bw_fraction: f64,
    pub lat_factor: f64,
}

impl Rule {
    pub fn new(kind: RuleKind, bw_fraction: f64, lat_factor: f64) -> Rule {
        Rule {
            kind,
            bw_fraction,
            lat_factor,
        }
    }
}

impl Default for Rule {
    fn default() -> Rule {
        Rule::new(RuleKind::Median, DEFAULT_BW_FRACTION, DEFAULT_LAT_FACTOR)
    }
}

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

/// A rail named as the likely cause: every node's end on it is named, so
/// what they share — the rail's leaf switch, its uplinks — is likelier than
/// as many faulty nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RailFinding {
    pub rail: u32,
    /// `rail<I>`, as the summary lists it.
    pub name: String,
    /// The nodes on the rail (all of them named).
    pub nodes: usize,
    /// Every end's finding was confirmed.
    pub confirmed: bool,
    /// Why, in words.
    pub text: String,
}

/// The pair the rule's reference comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reference {
    pub src: String,
    pub dst: String,
    /// Its figure.
    pub measured: f64,
    /// The port rate the reference was capped at, when the pair measured
    /// above it.
    pub capped_at: Option<f64>,
    /// The median pair or the best one.
    pub rule: RuleKind,
    /// Among how many measured pairs, of how many nodes.
    pub pairs: usize,
    pub nodes: usize,
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
    /// The reference the rule applies to: the median (or, by ClusterKit's
    /// rule, the best) pair's figure, capped at the port rate.
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
    /// Rails named in place of their nodes (a rail mesh whose every node
    /// fails on one rail), confirmed or not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rail_findings: Vec<RailFinding>,
    /// Rails named on failed cells and confirmed suspects (`rail<I>`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bad_rails: Vec<String>,
    /// Links (a < b) with a confirmed suspect not explained by a named node.
    pub bad_links: Vec<(String, String)>,
    /// Links (a < b) with an unconfirmed suspect not explained by a named
    /// node nor among `bad_links`.
    pub unconfirmed_links: Vec<(String, String)>,
    #[serde(skip)]
    templates: BTreeMap<(String, String), CellSpec>,
    /// While judging: the mesh cell of each pair, by node id.
    #[serde(skip)]
    template_ids: HashMap<(u32, u32), u32>,
}

impl MeshGroup {
    fn empty(s: &CellSpec, metric: Metric) -> MeshGroup {
        MeshGroup {
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
            rail_findings: Vec::new(),
            bad_rails: Vec::new(),
            bad_links: Vec::new(),
            unconfirmed_links: Vec::new(),
            templates: BTreeMap::new(),
            template_ids: HashMap::new(),
        }
    }

    /// The mesh cell that measured data from `src` to `dst`, to derive
    /// re-test cells from (kept for the suspect pairs only).
    pub fn cell_template(&self, src: &str, dst: &str) -> Option<&CellSpec> {
        self.templates.get(&(src.to_string(), dst.to_string()))
    }

    /// The `k` worst pairs (lowest bandwidth, highest latency), worst first.
    pub fn worst_pairs(&self, k: usize) -> Vec<(String, String, f64)> {
        let mut v: Vec<(&String, &String, f64)> = self
            .values
            .iter()
            .flat_map(|(a, row)| row.iter().map(move |(b, v)| (a, b, *v)))
            .collect();
        v.sort_by(|x, y| match self.metric {
            Metric::BandwidthGbps => x.2.total_cmp(&y.2),
            Metric::LatencyP50Us => y.2.total_cmp(&x.2),
        });
        v.into_iter()
            .take(k)
            .map(|(a, b, v)| (a.clone(), b.clone(), v))
            .collect()
    }

    /// The `k` nodes whose median pair (of those they send or receive in)
    /// is worst, worst first: (node, that median, its pairs).
    pub fn worst_nodes(&self, k: usize) -> Vec<(String, f64, usize)> {
        let mut per: BTreeMap<&String, Vec<f64>> = BTreeMap::new();
        for (a, row) in &self.values {
            for (b, v) in row {
                per.entry(a).or_default().push(*v);
                per.entry(b).or_default().push(*v);
            }
        }
        let bad_first = |x: &f64, y: &f64| match self.metric {
            Metric::BandwidthGbps => x.total_cmp(y),
            Metric::LatencyP50Us => y.total_cmp(x),
        };
        let mut v: Vec<(String, f64, usize)> = per
            .into_iter()
            .map(|(n, mut vals)| {
                vals.sort_by(bad_first);
                (n.clone(), vals[vals.len() / 2], vals.len())
            })
            .collect();
        v.sort_by(|x, y| bad_first(&x.1, &y.1));
        v.truncate(k);
        v
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
    /// The reference the pairs were judged against.
    pub rule: RuleKind,
    pub bw_fraction: f64,
    pub lat_factor: f64,
    pub groups: Vec<MeshGroup>,
    /// Stored cells of this test that are not part of the run's current
    /// plan (it was edited since they ran): not counted.
    pub stale_cells: Vec<String>,
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

/// A stored measurement's figure: its record's `bw_gbps` or `lat_us.p50`,
/// as the store's columns hold them.
fn figure(metric: Metric, m: &StoredMeasurement) -> Option<f64> {
    match metric {
        Metric::BandwidthGbps => m.bw_gbps,
        Metric::LatencyP50Us => m.lat_p50_us,
    }
    .filter(|v| v.is_finite())
}

/// The figures a finished cell measured, per data direction, as (from, to)
/// = (0, 1) for the driving agent `a` to `b` and (1, 0) back. A record's
/// `direction` says where its data went (`forward`: from the client `a`;
/// `reverse`: to it — RDMA `read` records are `reverse`); a `bidir` total
/// sums both and is left out when the directions have records of their own.
fn measured_pairs(ms: &[StoredMeasurement], metric: Metric) -> Vec<(bool, f64)> {
    let totals: Vec<&StoredMeasurement> = ms.iter().filter(|m| m.role == Role::Total).collect();
    let directed = totals
        .iter()
        .any(|m| matches!(m.direction.as_deref(), Some("forward" | "reverse")));
    // (reversed, figure)
    let mut out: Vec<(bool, f64)> = Vec::new();
    for m in totals {
        let reversed = match m.direction.as_deref() {
            Some("reverse") => true,
            Some("bidir") if directed => continue,
            _ => false,
        };
        if out.iter().any(|(r, _)| *r == reversed) {
            continue;
        }
        if let Some(v) = figure(metric, m) {
            out.push((reversed, v));
        }
    }
    out
}

/// The parts of a stored record the summary reads beyond the columns
/// (anything else in it is skipped unread).
#[derive(serde::Deserialize, Default)]
struct RecordExtras {
    #[serde(default)]
    warnings: Vec<fabperf_results::Note>,
    #[serde(default)]
    placement_local: Option<fabperf_results::Placement>,
    #[serde(default)]
    placement_remote: Option<fabperf_results::Placement>,
}

fn extras(m: &StoredMeasurement) -> RecordExtras {
    serde_json::from_str(&m.record).unwrap_or_default()
}

/// Why a finished cell gave no figure: its records' warnings, if any.
fn no_figure_reason(ms: &[StoredMeasurement]) -> String {
    let why: Vec<String> = ms
        .iter()
        .filter(|m| m.role == Role::Total)
        .flat_map(|m| extras(m).warnings.into_iter().map(|w| w.message))
        .take(2)
        .collect();
    if why.is_empty() {
        "the cell finished without a figure".into()
    } else {
        format!("the cell finished without a figure ({})", why.join("; "))
    }
}

/// The highest real port rate of a record's two ends: an RDMA port's rate
/// or a physical netdev's speed; a virtual link's speed is a label and a
/// `tc` cap is a shaping, not the port.
fn real_port_rate(m: &StoredMeasurement) -> Option<f64> {
    // Most records name no placement: skip the parse for them.
    if !m.record.contains("\"port_rate_gbps\"") {
        return None;
    }
    let x = extras(m);
    [x.placement_local, x.placement_remote]
        .into_iter()
        .flatten()
        .filter(|p| !p.virtual_link && p.port_rate_source.as_deref() != Some("tc cap"))
        .filter_map(|p| p.port_rate_gbps)
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(f64::max)
}

/// Node names as small numbers.
#[derive(Default)]
struct Names {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Names {
    fn id(&mut self, n: &str) -> u32 {
        if let Some(&i) = self.ids.get(n) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(n.to_string(), i);
        self.names.push(n.to_string());
        i
    }
}

type Pair = (u32, u32);

/// Per group (path, dims): per data pair, the figures or the failures.
#[derive(Default)]
struct Raw {
    nodes: BTreeSet<u32>,
    /// Sum and count of the mesh's figures per pair.
    mesh: HashMap<Pair, (f64, u32)>,
    mesh_failed: HashMap<Pair, String>,
    retest: HashMap<Pair, Vec<(u32, f64)>>,
    retest_failed: HashMap<Pair, Vec<String>>,
    port: Option<f64>,
    /// The mesh cell behind each pair (an index into the cell ids).
    templates: HashMap<Pair, u32>,
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

/// What the measurement pass needs of a finished cell.
struct CellInfo {
    group: usize,
    retest: bool,
    /// The driving agent and its peer.
    a: u32,
    b: u32,
    planned: Vec<Pair>,
    repeat: u32,
    seen: bool,
}

/// Analyse the mesh cells of `test` in run `run_id`. The run is read one
/// cell and one measurement at a time; what is kept is per pair (a mean,
/// failures, re-tests), so a mesh of a thousand nodes fits in memory.
pub fn analyze(
    store: &Store,
    run_id: i64,
    test: &str,
    rule: &Rule,
) -> Result<MeshAnalysis, StoreError> {
    let mut names = Names::default();
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut groups: Vec<(MeshGroup, Raw)> = Vec::new();
    let mut cell_ids: Vec<String> = Vec::new();
    let mut done: HashMap<String, CellInfo> = HashMap::new();
    let mut stale_cells: Vec<String> = Vec::new();
    store.each_plan_cell(run_id, Some(test), &mut |c, current| {
        // A rail cell's ends are the nodes' rails: all rails of a sweep
        // point are one group, so a slow rail stands out against the others
        // and is named (`n2/rail1`).
        let on_rails = on_rails(&c.spec);
        let s = on_rails.as_ref().unwrap_or(&c.spec);
        let retest = s.pattern == RETEST;
        if s.pattern != "mesh" && !retest {
            return Ok(());
        }
        if !current {
            stale_cells.push(s.cell_id.clone());
            return Ok(());
        }
        let key = (s.path.clone(), s.dims.to_string());
        let gi = match keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                groups.push((MeshGroup::empty(s, metric_of(&s.kind)), Raw::default()));
                groups.len() - 1
            }
        };
        let Some((a, b)) = s.flows.first() else {
            return Ok(());
        };
        let (a, b) = (names.id(a), names.id(b));
        let planned: Vec<Pair> = planned_pairs(s)
            .iter()
            .map(|(x, y)| (names.id(x), names.id(y)))
            .collect();
        let raw = &mut groups[gi].1;
        raw.nodes.extend([a, b]);
        if !retest {
            for p in &planned {
                if !raw.templates.contains_key(p) {
                    raw.templates.insert(*p, cell_ids.len() as u32);
                    cell_ids.push(s.cell_id.clone());
                }
            }
        }
        match c.state {
            CellState::Pending => {}
            CellState::Failed => {
                let why = c.error.clone().unwrap_or_else(|| "failed".into());
                for p in planned {
                    fail(raw, retest, p, &why);
                }
            }
            CellState::Done => {
                done.insert(
                    s.cell_id.clone(),
                    CellInfo {
                        group: gi,
                        retest,
                        a,
                        b,
                        planned,
                        repeat: s.repeat,
                        seen: false,
                    },
                );
            }
        }
        Ok(())
    })?;
    // The finished cells' measurements, one cell at a time.
    let mut cur: Vec<StoredMeasurement> = Vec::new();
    let mut finish = |ms: &mut Vec<StoredMeasurement>, groups: &mut Vec<(MeshGroup, Raw)>| {
        let Some(first) = ms.first() else {
            return;
        };
        if let Some(info) = done.get_mut(&first.cell_id) {
            info.seen = true;
            let (g, raw) = &mut groups[info.group];
            record_cell(info, g.metric, ms, raw);
        }
        ms.clear();
    };
    store.each_measurement(run_id, Some(test), &mut |m| {
        if cur.first().is_some_and(|c| c.cell_id != m.cell_id) {
            finish(&mut cur, &mut groups);
        }
        cur.push(m);
        Ok(())
    })?;
    finish(&mut cur, &mut groups);
    // Finished cells without a single record.
    for info in done.values().filter(|i| !i.seen) {
        let raw = &mut groups[info.group].1;
        for p in &info.planned {
            fail(raw, info.retest, *p, "the cell finished without a figure");
        }
    }
    let mut out = Vec::new();
    for (mut g, raw) in groups {
        judge(&mut g, raw, rule, &names);
        // Re-test templates only for the suspects (the runner derives
        // re-tests from them); every pair's would be a copy of the run.
        for s in &g.suspects {
            let (Some(&x), Some(&y)) = (names.ids.get(&s.src), names.ids.get(&s.dst)) else {
                continue;
            };
            let Some(&ci) = g.template_ids.get(&(x, y)) else {
                continue;
            };
            if let Some(c) = store.cell(run_id, &cell_ids[ci as usize])? {
                g.templates.insert((s.src.clone(), s.dst.clone()), c.spec);
            }
        }
        g.template_ids = HashMap::new();
        out.push(g);
    }
    // Groups in (path, dims) order.
    out.sort_by(|x, y| (&x.path, x.dims.to_string()).cmp(&(&y.path, y.dims.to_string())));
    Ok(MeshAnalysis {
        run_id,
        test: test.to_string(),
        rule: rule.kind,
        bw_fraction: rule.bw_fraction,
        lat_factor: rule.lat_factor,
        groups: out,
        stale_cells,
    })
}

fn fail(raw: &mut Raw, retest: bool, p: Pair, why: &str) {
    if retest {
        raw.retest_failed
            .entry(p)
            .or_default()
            .push(why.to_string());
    } else {
        raw.mesh_failed.entry(p).or_insert_with(|| why.to_string());
    }
}

/// A finished cell's records into its group's figures and failures.
fn record_cell(info: &CellInfo, metric: Metric, ms: &[StoredMeasurement], raw: &mut Raw) {
    let got: Vec<(Pair, f64)> = measured_pairs(ms, metric)
        .into_iter()
        .map(|(reversed, v)| {
            (
                if reversed {
                    (info.b, info.a)
                } else {
                    (info.a, info.b)
                },
                v,
            )
        })
        .collect();
    for (p, v) in &got {
        if info.retest {
            raw.retest.entry(*p).or_default().push((info.repeat, *v));
        } else {
            let e = raw.mesh.entry(*p).or_insert((0.0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }
    if metric == Metric::BandwidthGbps {
        for m in ms {
            if let Some(r) = real_port_rate(m) {
                raw.port = Some(raw.port.map_or(r, |p| p.max(r)));
            }
        }
    }
    // A planned direction without a figure is a failure, also when the
    // cell itself finished.
    let missing: Vec<Pair> = info
        .planned
        .iter()
        .filter(|p| !got.iter().any(|(q, _)| q == *p))
        .copied()
        .collect();
    if !missing.is_empty() {
        let why = no_figure_reason(ms);
        for p in missing {
            fail(raw, info.retest, p, &why);
        }
    }
}

/// Apply the rule to a group's figures, re-tests and failures, and blame.
fn judge(g: &mut MeshGroup, mut raw: Raw, rule: &Rule, names: &Names) {
    // Ranks: the group's nodes in name order, so that every list below is
    // in (src, dst) name order.
    let mut order: Vec<u32> = raw.nodes.iter().copied().collect();
    order.sort_by(|x, y| names.names[*x as usize].cmp(&names.names[*y as usize]));
    let mut rank: HashMap<u32, u32> = HashMap::with_capacity(order.len());
    for (r, id) in order.iter().enumerate() {
        rank.insert(*id, r as u32);
    }
    g.nodes = order
        .iter()
        .map(|&i| names.names[i as usize].clone())
        .collect();
    let name = |r: u32| g.nodes[r as usize].clone();
    let ranked = |p: &Pair| (rank[&p.0], rank[&p.1]);
    g.repeats = raw.mesh.values().map(|v| v.1 as usize).max().unwrap_or(0);
    // (src rank, dst rank, mean) in name order.
    let mut pairs: Vec<(u32, u32, f64)> = raw
        .mesh
        .iter()
        .map(|(p, (sum, n))| {
            let (x, y) = ranked(p);
            (x, y, sum / f64::from(*n))
        })
        .collect();
    pairs.sort_by_key(|p| (p.0, p.1));
    let mut row: Option<(u32, BTreeMap<String, f64>)> = None;
    for &(x, y, v) in &pairs {
        if row.as_ref().is_some_and(|(r, _)| *r != x) {
            let (r, m) = row.take().expect("checked");
            g.values.insert(name(r), m);
        }
        row.get_or_insert_with(|| (x, BTreeMap::new()))
            .1
            .insert(name(y), v);
    }
    if let Some((r, m)) = row {
        g.values.insert(name(r), m);
    }
    // A pair that failed in one repeat but was measured in another is not
    // "failed".
    let mut failed: Vec<(u32, u32, String)> = raw
        .mesh_failed
        .iter()
        .filter(|(p, _)| !raw.mesh.contains_key(*p))
        .map(|(p, e)| {
            let (x, y) = ranked(p);
            (x, y, e.clone())
        })
        .collect();
    failed.sort_by_key(|f| (f.0, f.1));
    g.failed = failed
        .iter()
        .map(|(x, y, e)| (name(*x), name(*y), e.clone()))
        .collect();
    if g.metric == Metric::BandwidthGbps {
        g.port_rate_gbps = raw.port;
    }
    if let Some(port) = g.port_rate_gbps {
        g.above_port = pairs
            .iter()
            .filter(|(_, _, v)| *v > port)
            .map(|(a, b, v)| (name(*a), name(*b), *v))
            .collect();
    }
    if let Some((a, b, v)) = reference_pair(g.metric, rule.kind, &pairs) {
        let capped_at = g
            .port_rate_gbps
            .filter(|p| g.metric == Metric::BandwidthGbps && v > *p);
        g.reference = Some(Reference {
            src: name(a),
            dst: name(b),
            measured: v,
            capped_at,
            rule: rule.kind,
            pairs: pairs.len(),
            nodes: pairs
                .iter()
                .flat_map(|(a, b, _)| [*a, *b])
                .collect::<BTreeSet<_>>()
                .len(),
        });
        g.best = Some(capped_at.unwrap_or(v));
    }
    let mut states: HashMap<(u32, u32), SuspectState> = HashMap::new();
    if let Some(best) = g.best {
        let threshold = match g.metric {
            Metric::BandwidthGbps => best * rule.bw_fraction,
            Metric::LatencyP50Us => best * rule.lat_factor,
        };
        g.threshold = Some(threshold);
        for &(a, b, v) in &pairs {
            if passes(g.metric, v, threshold) {
                continue;
            }
            let key = (order[a as usize], order[b as usize]);
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
            states.insert((a, b), state);
            g.suspects.push(Suspect {
                src: name(a),
                dst: name(b),
                value: v,
                retests,
                retests_failed,
                state,
                confirmed: state == SuspectState::Confirmed,
            });
        }
    }
    g.template_ids = std::mem::take(&mut raw.templates);
    blame(g, &pairs, &failed, &states);
}

/// The pair the reference comes from. ClusterKit's: the best (highest
/// bandwidth, lowest latency). The median: each node's median pair (the
/// pairs it sends or receives in), then the median of those over the
/// nodes — of an even count the better of the two middle ones at both
/// steps. A faulty node moves only its own median and one pair of each
/// other node's, so the reference stays on the healthy side while fewer
/// than half of the nodes are faulty and no healthy node has more than half
/// of its pairs with faulty peers (one bad node of three still works); a
/// lucky pair moves two nodes' medians by one place at most. Ties go to
/// the first pair in (src, dst) order.
fn reference_pair(
    metric: Metric,
    kind: RuleKind,
    pairs: &[(u32, u32, f64)],
) -> Option<(u32, u32, f64)> {
    type P = (u32, u32, f64);
    // From worst to best; ties: the later (src, dst) first, so that the
    // best of equal pairs is the first in (src, dst) order.
    let sort = |v: &mut Vec<P>| {
        v.sort_by(|x, y| {
            let by_value = match metric {
                Metric::BandwidthGbps => x.2.total_cmp(&y.2),
                Metric::LatencyP50Us => y.2.total_cmp(&x.2),
            };
            by_value.then_with(|| (y.0, y.1).cmp(&(x.0, x.1)))
        })
    };
    let better_middle = |mut v: Vec<P>| -> Option<P> {
        sort(&mut v);
        v.get(v.len() / 2).copied()
    };
    match kind {
        RuleKind::Clusterkit => {
            let mut v = pairs.to_vec();
            sort(&mut v);
            v.last().copied()
        }
        RuleKind::Median => {
            let mut by_node: BTreeMap<u32, Vec<P>> = BTreeMap::new();
            for p in pairs {
                by_node.entry(p.0).or_default().push(*p);
                by_node.entry(p.1).or_default().push(*p);
            }
            let medians: Vec<P> = by_node.into_values().filter_map(better_middle).collect();
            better_middle(medians)
        }
    }
}

/// How one directed pair stands, for blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PairIs {
    Good,
    Failed,
    Confirmed,
    Unconfirmed,
}

/// Name the nodes (and links) behind the failures and suspects. Pairs are
/// by node rank (an index into `g.nodes`); each node's pairs are found
/// through its own lists, so the work grows with the pairs, not with the
/// nodes times the pairs.
fn blame(
    g: &mut MeshGroup,
    pairs: &[(u32, u32, f64)],
    failed: &[(u32, u32, String)],
    states: &HashMap<(u32, u32), SuspectState>,
) {
    let n = g.nodes.len();
    let threshold = g.threshold;
    let mut status: BTreeMap<(u32, u32), PairIs> = BTreeMap::new();
    let mut value: HashMap<(u32, u32), f64> = HashMap::with_capacity(pairs.len());
    for &(a, b, v) in pairs {
        status.insert((a, b), PairIs::Good);
        value.insert((a, b), v);
    }
    for (a, b, _) in failed {
        status.insert((*a, *b), PairIs::Failed);
    }
    for (p, st) in states {
        let st = match st {
            SuspectState::Confirmed => PairIs::Confirmed,
            SuspectState::Unconfirmed => PairIs::Unconfirmed,
            SuspectState::Cleared => PairIs::Good,
        };
        status.insert(*p, st);
    }
    // Each node's pairs: (src, dst, state), sending and receiving.
    let mut outs: Vec<Vec<(u32, u32, PairIs)>> = vec![Vec::new(); n];
    let mut ins: Vec<Vec<(u32, u32, PairIs)>> = vec![Vec::new(); n];
    for (&(a, b), &s) in &status {
        outs[a as usize].push((a, b, s));
        ins[b as usize].push((a, b, s));
    }
    let fmt = |v: f64| format!("{v:.2}");
    let unit = g.metric.unit();
    let range = |vals: &[f64]| -> String {
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if vals.is_empty() {
            String::new()
        } else if fmt(lo) == fmt(hi) {
            format!("{} {unit}", fmt(lo))
        } else {
            format!("{}-{} {unit}", fmt(lo), fmt(hi))
        }
    };
    // Dead nodes first: every cell with them failed.
    let mut dead = vec![false; n];
    for i in 0..n {
        let mine = outs[i].len() + ins[i].len();
        let all_failed = outs[i]
            .iter()
            .chain(&ins[i])
            .all(|(_, _, s)| *s == PairIs::Failed);
        if mine > 0 && all_failed {
            dead[i] = true;
            let first = failed
                .iter()
                .find(|(a, b, _)| *a as usize == i || *b as usize == i)
                .map(|(_, _, e)| e.as_str())
                .unwrap_or("");
            g.node_findings.push(NodeFinding {
                node: g.nodes[i].clone(),
                fault: NodeFault::Dead,
                confirmed: true,
                text: format!(
                    "all of its {} cell{} failed: {first}",
                    mine,
                    if mine == 1 { "" } else { "s" }
                ),
            });
        }
    }
    // Then the living: pairs with a dead peer say nothing about them.
    for i in 0..n {
        if dead[i] {
            continue;
        }
        let me = i as u32;
        let outs: Vec<(u32, u32, PairIs)> = outs[i]
            .iter()
            .filter(|(_, b, _)| !dead[*b as usize])
            .copied()
            .collect();
        let ins: Vec<(u32, u32, PairIs)> = ins[i]
            .iter()
            .filter(|(a, _, _)| !dead[*a as usize])
            .copied()
            .collect();
        let peers = |v: &[(u32, u32, PairIs)]| -> usize {
            v.iter()
                .map(|(a, b, _)| if *a == me { *b } else { *a })
                .collect::<BTreeSet<_>>()
                .len()
        };
        // A node is named when all of its pairs (in a direction) fail, with
        // at least two peers; or, with at least three failing peers, when
        // more than half of them do: under noise one pair of a faulty node
        // may pass, or be cleared by its re-test, and "every pair" would
        // then name its failing pairs as links one by one. A faulty link
        // (one peer) or a few faulty peers (one pair of each healthy node)
        // do not make a healthy node's majority.
        let bad = |v: &[(u32, u32, PairIs)]| -> Vec<(u32, u32, PairIs)> {
            v.iter()
                .filter(|(_, _, s)| *s != PairIs::Good)
                .copied()
                .collect()
        };
        let named = |v: &[(u32, u32, PairIs)], b: &[(u32, u32, PairIs)]| {
            let p = peers(b);
            (p >= 2 && b.len() == v.len()) || (p >= 3 && 2 * b.len() > v.len())
        };
        // Confirmed when the failed cells and confirmed suspects alone make
        // the majority.
        let confirmed = |v: &[(u32, u32, PairIs)]| {
            let c: Vec<(u32, u32, PairIs)> = v
                .iter()
                .filter(|(_, _, s)| matches!(s, PairIs::Failed | PairIs::Confirmed))
                .copied()
                .collect();
            named(v, &c)
        };
        let figures = |v: &[(u32, u32, PairIs)]| -> (Vec<f64>, usize) {
            let vals: Vec<f64> = v
                .iter()
                .filter_map(|(a, b, _)| value.get(&(*a, *b)).copied())
                .collect();
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
        // "all 5 pairs" or "4 of its 5 pairs ... (the other passes: …)".
        let how_many =
            |b: &[(u32, u32, PairIs)], v: &[(u32, u32, PairIs)], all: &str, some: &str| {
                if b.len() == v.len() {
                    all.replace('#', &v.len().to_string())
                } else {
                    some.replace('#', &format!("{} of its {}", b.len(), v.len()))
                }
            };
        // The passing pairs' figures; a suspect cleared by its re-test
        // passes on that re-test.
        let passing = |b: &[(u32, u32, PairIs)], v: &[(u32, u32, PairIs)]| -> String {
            let mut good = Vec::new();
            let mut cleared = 0;
            for (x, y, _) in v.iter().filter(|p| p.2 == PairIs::Good) {
                match value.get(&(*x, *y)) {
                    Some(f) if threshold.is_none_or(|t| passes(g.metric, *f, t)) => good.push(*f),
                    _ => cleared += 1,
                }
            }
            let mut why = Vec::new();
            if !good.is_empty() {
                why.push(range(&good));
            }
            if cleared > 0 {
                why.push(format!("{cleared} cleared by a re-test"));
            }
            match v.len() - b.len() {
                0 => String::new(),
                1 => format!("; the other one passes ({})", why.join(", ")),
                k => format!("; the other {k} pass ({})", why.join(", ")),
            }
        };
        let all: Vec<(u32, u32, PairIs)> = outs.iter().chain(&ins).copied().collect();
        let both_ways = !outs.is_empty() && !ins.is_empty();
        let (bad_all, bad_outs, bad_ins) = (bad(&all), bad(&outs), bad(&ins));
        // One direction named while most of the other passes: that
        // direction (a transmit- or receive-side fault); otherwise the node
        // as a whole.
        let (n_outs, n_ins) = (named(&outs, &bad_outs), named(&ins, &bad_ins));
        let mostly_good = |v: &[(u32, u32, PairIs)], b: &[(u32, u32, PairIs)]| {
            !v.is_empty() && 2 * (v.len() - b.len()) > v.len()
        };
        let one_way =
            (n_outs && mostly_good(&ins, &bad_ins)) || (n_ins && mostly_good(&outs, &bad_outs));
        // A one-direction finding: its pairs `mine` (the failing ones
        // `bad`), and how the other direction's fare.
        let one_direction = |fault: NodeFault,
                             mine: &[(u32, u32, PairIs)],
                             bad: &[(u32, u32, PairIs)],
                             other: &[(u32, u32, PairIs)]| {
            let (dir, verb, other_dir) = match fault {
                NodeFault::Sends => ("sends", "sends in", "receives"),
                _ => ("receives", "receives in", "sends"),
            };
            let (vals, k) = figures(bad);
            (
                fault,
                confirmed(mine),
                format!(
                    "its {dir} fail: {} fail the rule ({}{}){}{}",
                    how_many(
                        bad,
                        mine,
                        &format!("all # pairs it {verb}"),
                        &format!("# pairs it {verb}")
                    ),
                    range(&vals),
                    failed_note(k),
                    passing(bad, mine),
                    if other.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", while {} of its {} {other_dir} pass",
                            other.iter().filter(|x| x.2 == PairIs::Good).count(),
                            other.len()
                        )
                    }
                ),
            )
        };
        let finding = if !one_way && (named(&all, &bad_all) || (n_outs && n_ins)) {
            let (vals, k) = figures(&bad_all);
            Some((
                NodeFault::All,
                confirmed(&all),
                format!(
                    "{}{} fail the rule ({}{}){}",
                    how_many(
                        &bad_all,
                        &all,
                        "all of its # measured pairs",
                        "# measured pairs"
                    ),
                    if both_ways {
                        ", sending and receiving,"
                    } else {
                        ""
                    },
                    range(&vals),
                    failed_note(k),
                    passing(&bad_all, &all)
                ),
            ))
        } else if n_outs {
            Some(one_direction(NodeFault::Sends, &outs, &bad_outs, &ins))
        } else if n_ins {
            Some(one_direction(NodeFault::Receives, &ins, &bad_ins, &outs))
        } else {
            None
        };
        if let Some((fault, confirmed, text)) = finding {
            g.node_findings.push(NodeFinding {
                node: g.nodes[i].clone(),
                fault,
                confirmed,
                text,
            });
        }
    }
    fold_rails(g);
    g.bad_nodes = g
        .node_findings
        .iter()
        .filter(|f| f.confirmed)
        .map(|f| f.node.clone())
        .collect();
    g.bad_rails = g
        .rail_findings
        .iter()
        .filter(|f| f.confirmed)
        .map(|f| f.name.clone())
        .collect();
    // Links: suspects no named node explains. A named node explains every
    // suspect pair it is in, also in its other direction (a node that
    // drops its transmits also slows its receives, whose acknowledgements
    // it sends): one faulty node is likelier than several faulty links.
    let rails: Vec<u32> = g.rail_findings.iter().map(|f| f.rail).collect();
    let explains = |f: &NodeFinding, a: &str, b: &str| f.node == a || f.node == b;
    let on_named_rail = |a: &str, b: &str| {
        [a, b]
            .iter()
            .any(|e| rail_of(e).is_some_and(|(_, r)| rails.contains(&r)))
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
            || on_named_rail(&s.src, &s.dst)
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

/// The node and rail of a rail end ([`rail_end`]).
fn rail_of(end: &str) -> Option<(&str, u32)> {
    let (node, rail) = end.rsplit_once("/rail")?;
    Some((node, rail.parse().ok()?))
}

/// The least nodes on a rail for its ends' findings to name the rail: with
/// two, one bad cable fails both ends' every pair just as a bad leaf does.
pub const RAIL_MIN_NODES: usize = 3;

/// A rail whose every end (node) is named — at least [`RAIL_MIN_NODES`] of
/// them — is named instead of its nodes: one leaf switch (or what every
/// node shares on that rail) is likelier than every node failing on the
/// same rail at once.
fn fold_rails(g: &mut MeshGroup) {
    let mut ends: BTreeMap<u32, usize> = BTreeMap::new();
    for n in &g.nodes {
        if let Some((_, r)) = rail_of(n) {
            *ends.entry(r).or_default() += 1;
        }
    }
    for (rail, count) in ends {
        if count < RAIL_MIN_NODES {
            continue;
        }
        let on_rail = |f: &NodeFinding| rail_of(&f.node).is_some_and(|(_, r)| r == rail);
        let named: Vec<&NodeFinding> = g.node_findings.iter().filter(|f| on_rail(f)).collect();
        if named.len() < count {
            continue;
        }
        let confirmed = named.iter().all(|f| f.confirmed);
        let count_of = |k: NodeFault| named.iter().filter(|f| f.fault == k).count();
        let how: Vec<String> = [
            (NodeFault::Dead, "every cell failed"),
            (NodeFault::All, "its pairs fail"),
            (NodeFault::Sends, "its sends fail"),
            (NodeFault::Receives, "its receives fail"),
        ]
        .iter()
        .filter(|(k, _)| count_of(*k) > 0)
        .map(|(k, w)| format!("{}: {w}", count_of(*k)))
        .collect();
        let text = format!(
            "every one of its {count} nodes fails on it ({}): its leaf switch, or what every node shares on rail {rail}, rather than {count} faulty nodes",
            how.join("; ")
        );
        g.node_findings.retain(|f| !on_rail(f));
        g.rail_findings.push(RailFinding {
            rail,
            name: format!("rail{rail}"),
            nodes: count,
            confirmed,
            text,
        });
    }
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

/// Above this many nodes the text summary lists the worst pairs and nodes
/// instead of printing the matrix.
pub const MATRIX_MAX_NODES: usize = 64;
/// Lines per list (suspect links, cleared and unconfirmed suspects, failed
/// pairs) in the text summary; `--json` has every one.
pub const LIST_MAX: usize = 20;

/// After an unconfirmed node's or rail's finding.
const UNCONFIRMED_NOTE: &str = " — not confirmed: some of these pairs have no re-test figure";

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
    let big = g.nodes.len() > MATRIX_MAX_NODES;
    if big {
        let measured: usize = g.values.values().map(BTreeMap::len).sum();
        let n = g.nodes.len();
        unmeasured = measured + g.failed.len() < n * (n - 1);
        let _ = writeln!(
            o,
            "  {n} nodes, {measured} pairs measured: the matrix is not printed above {MATRIX_MAX_NODES} nodes (`fabperf mesh-summary --json` has every pair; `fabperf report --format html` draws it as a heat map)"
        );
        let worst: Vec<String> = g
            .worst_pairs(LIST_MAX)
            .iter()
            .map(|(x, y, v)| format!("{} -> {} {v:.2}", e(x), e(y)))
            .collect();
        if !worst.is_empty() {
            let _ = writeln!(o, "  worst pairs: {}", worst.join(", "));
        }
        let nodes: Vec<String> = g
            .worst_nodes(LIST_MAX)
            .iter()
            .map(|(x, v, _)| format!("{} {v:.2}", e(x)))
            .collect();
        if !nodes.is_empty() {
            let _ = writeln!(
                o,
                "  worst nodes (the median of the pairs each sends or receives in): {}",
                nodes.join(", ")
            );
        }
    } else {
        let _ = write!(o, "  {:>w$}", "from \\ to");
        for n in &g.nodes {
            let _ = write!(o, " {:>w$}", shown[n.as_str()]);
        }
        o.push('\n');
    }
    for x in g.nodes.iter().filter(|_| !big) {
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
    // "the best pair" / "the median pair", and "of N pairs" for the median.
    let which = |r: &Reference, best: &str| match r.rule {
        RuleKind::Clusterkit => (format!("the {best} pair"), String::new()),
        RuleKind::Median => (
            "the median pair".to_string(),
            format!("; the median of {} nodes' median pairs", r.nodes),
        ),
    };
    let rule = match (g.metric, &g.reference, g.threshold) {
        (Metric::BandwidthGbps, Some(r), Some(t)) => {
            let (name, of) = which(r, "best");
            match r.capped_at {
                Some(p) => format!(
                    "bandwidth below {:.0}% of the {p:.2} Gbit/s port rate, i.e. < {t:.2} ({name}{of}, {}, measured {:.2}, above the port rate)",
                    a.bw_fraction * 100.0,
                    who(r),
                    r.measured
                ),
                None => format!(
                    "bandwidth below {:.0}% of {name} ({}, {:.2} Gbit/s{of}), i.e. < {t:.2}",
                    a.bw_fraction * 100.0,
                    who(r),
                    r.measured
                ),
            }
        }
        (Metric::LatencyP50Us, Some(r), Some(t)) => {
            let (name, of) = which(r, "lowest");
            format!(
                "latency above {}x {name} ({}, {:.2} us{of}), i.e. > {t:.2}",
                a.lat_factor,
                who(r),
                r.measured
            )
        }
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
                "  unconfirmed SUSPECT NODE {}: {}{UNCONFIRMED_NOTE}",
                e(&f.node),
                e(&f.text)
            );
        }
    }
    for f in &g.rail_findings {
        if f.confirmed {
            let _ = writeln!(
                o,
                "  SUSPECT RAIL {}: {}; check that rail's leaf switch, its ports and uplinks",
                e(&f.name),
                e(&f.text)
            );
        } else {
            let _ = writeln!(
                o,
                "  unconfirmed SUSPECT RAIL {}: {}{UNCONFIRMED_NOTE}",
                e(&f.name),
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
    // Long lists (a large or a noisy mesh) end after LIST_MAX lines.
    let more = |o: &mut String, n: usize, what: &str| {
        if n > LIST_MAX {
            let _ = writeln!(
                o,
                "  ... and {} more {what} (`fabperf mesh-summary --json` lists them all)",
                n - LIST_MAX
            );
        }
    };
    for (x, y) in g.bad_links.iter().take(LIST_MAX) {
        let _ = writeln!(o, "  SUSPECT LINK {} - {}: {}", e(x), e(y), detail(x, y));
    }
    more(o, g.bad_links.len(), "suspect links");
    for (x, y) in g.unconfirmed_links.iter().take(LIST_MAX) {
        let _ = writeln!(
            o,
            "  unconfirmed SUSPECT LINK {} - {}: {}",
            e(x),
            e(y),
            detail(x, y)
        );
    }
    more(o, g.unconfirmed_links.len(), "unconfirmed suspect links");
    let (mut cleared, mut open) = (0usize, 0usize);
    for s in &g.suspects {
        match s.state {
            SuspectState::Cleared if cleared >= LIST_MAX => cleared += 1,
            SuspectState::Unconfirmed if open >= LIST_MAX => open += 1,
            SuspectState::Cleared => {
                cleared += 1;
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
                open += 1;
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
    more(o, cleared, "cleared suspects");
    more(o, open, "unconfirmed suspects");
    for (x, y, err) in g.failed.iter().take(LIST_MAX) {
        let _ = writeln!(o, "  FAILED {} -> {}: {}", e(x), e(y), e(err));
    }
    more(o, g.failed.len(), "failed pairs");
    if let Some(p) = g.port_rate_gbps {
        for (x, y, v) in g.above_port.iter().take(LIST_MAX) {
            let _ = writeln!(
                o,
                "  ABOVE THE PORT RATE {} -> {}: {v:.2} Gbit/s on {p:.2} Gbit/s ports: the agents share a host, or a rate or a count is wrong",
                e(x),
                e(y)
            );
        }
        more(o, g.above_port.len(), "pairs above the port rate");
    }
    o.push('\n');
}

/// Names of the mesh tests of a run's current plan, in plan order.
pub fn mesh_tests(store: &Store, run_id: i64) -> Result<Vec<String>, StoreError> {
    // From the cells' columns: a run of millions of cells is not decoded.
    store.plan_tests_with_pattern(run_id, "mesh")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabperf_results::{Placement, Record, Transport};
    use fabperf_store::{Attempt, Measurement, NewRun};
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
        analyze_by(f, Rule::default())
    }

    fn analyze_by(f: &Fixture, rule: Rule) -> (MeshAnalysis, MeshGroup, String) {
        let a = analyze(&f.store, f.run, "mesh", &rule).unwrap();
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
        let a = analyze(
            &f.store,
            f.run,
            "mesh",
            &Rule::new(RuleKind::Median, 0.7, DEFAULT_LAT_FACTOR),
        )
        .unwrap();
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
        let clusterkit = Rule::new(
            RuleKind::Clusterkit,
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        );
        let f = fixture(cells("netdev speed", false), vec![]);
        let (_, g, text) = analyze_by(&f, clusterkit);
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
            let (_, g, text) = analyze_by(&f, clusterkit);
            assert_eq!((g.port_rate_gbps, g.best), (None, Some(30.0)));
            assert_eq!(g.suspects.len(), 11);
            assert!(
                text.contains("below 93% of the best pair (n1 -> n2, 30.00 Gbit/s), i.e. < 27.90"),
                "{text}"
            );
        }
    }

    /// Latency under CPU noise: one pair ran while the others waited for a
    /// core. ClusterKit's reference is that lucky pair, and every healthy
    /// pair above 2.1 times it is a suspect; the median pair is not moved
    /// by it, and only the node with a real delay is named.
    #[test]
    fn a_lucky_pair_sets_clusterkits_reference_but_not_the_median() {
        let lat = |us: f64| {
            let mut r = Record::new("tcp-lat", Transport::Tcp, 64, 1);
            let mut h = fabperf_results::LatencyHistogram::new(fabperf_results::LatencyKind::Rtt);
            for _ in 0..8 {
                h.record_rtt_ns((us * 1000.0) as u64);
            }
            r.set_latency(&h);
            r
        };
        let lat_cells = |fig: &dyn Fn(&str, &str) -> f64| -> Vec<(CellSpec, Outcome)> {
            mesh_cells(|_, _| Ok(vec![]))
                .into_iter()
                .map(|(mut c, _)| {
                    c.kind = "tcp-lat".into();
                    let (a, b) = c.flows[0].clone();
                    let v = fig(&a, &b);
                    (c, Ok(vec![lat(v)]))
                })
                .collect()
        };
        // Healthy pairs 40-90 us, one lucky 12 us; n4 has 1 ms more each way.
        let fig = |a: &str, b: &str| -> f64 {
            let base = match (a, b) {
                ("n1", "n2") => 12.0,
                ("n1", _) | (_, "n1") => 40.0,
                ("n2", _) | (_, "n2") => 60.0,
                _ => 90.0,
            };
            if a == "n4" || b == "n4" {
                base + 1000.0
            } else {
                base
            }
        };
        // The re-tests measure the same again.
        let retests: Vec<(CellSpec, Outcome)> = lat_cells(&fig)
            .into_iter()
            .map(|(mut c, o)| {
                c.cell_id = format!("rt0-{}", c.cell_id);
                c.pattern = RETEST.into();
                (c, o)
            })
            .collect();
        let f = fixture(lat_cells(&fig), retests);
        let ck = Rule::new(
            RuleKind::Clusterkit,
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        );
        let (_, g, text) = analyze_by(&f, ck);
        assert!((g.best.unwrap() - 12.0).abs() < 0.1, "{text}");
        assert!(
            g.bad_nodes.len() > 1,
            "ClusterKit blames healthy nodes too: {:?}\n{text}",
            g.bad_nodes
        );
        let (a, g, text) = analyze_one(&f);
        assert_eq!(a.rule, RuleKind::Median);
        assert_eq!(g.bad_nodes, vec!["n4".to_string()], "{text}");
        assert!(g.bad_links.is_empty(), "{:?}", g.bad_links);
        let r = g.reference.as_ref().unwrap();
        assert_eq!((r.rule, r.pairs, r.nodes), (RuleKind::Median, 12, 4));
        assert!(
            text.contains("latency above 2.1x the median pair (")
                && text.contains(" us; the median of 4 nodes' median pairs), i.e. > "),
            "{text}"
        );
    }

    /// Bandwidth: one pair above the others (it ran alone) is ClusterKit's
    /// reference; the median is the better of the two middle pairs, so a
    /// node whose every pair is slow — half of a 4-node one-way mesh — still
    /// leaves the reference on the healthy side.
    #[test]
    fn the_median_is_the_better_middle_pair() {
        // One way: n1 -> n2, n1 -> n3, ... (6 pairs), n3 slow in all 3 of its.
        let mut cells = Vec::new();
        for (a, b) in [
            ("n1", "n2"),
            ("n1", "n3"),
            ("n1", "n4"),
            ("n2", "n3"),
            ("n2", "n4"),
            ("n3", "n4"),
        ] {
            let v = match (a, b) {
                _ if a == "n3" || b == "n3" => 1.0,
                ("n1", "n2") => 19.0,
                _ => 9.0,
            };
            cells.push((
                spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                Ok(vec![rec(v, "forward")]),
            ));
        }
        let f = fixture(cells, vec![]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.best, Some(9.0), "{text}");
        let named: Vec<&str> = g.node_findings.iter().map(|f| f.node.as_str()).collect();
        assert_eq!(named, vec!["n3"], "{text}");
        assert_eq!(g.suspects.len(), 3, "{:?}", g.suspects);
        let ck = Rule::new(
            RuleKind::Clusterkit,
            DEFAULT_BW_FRACTION,
            DEFAULT_LAT_FACTOR,
        );
        let (_, g, _) = analyze_by(&f, ck);
        assert_eq!(g.best, Some(19.0));
        assert_eq!(g.suspects.len(), 5, "every pair below the lucky one");
    }

    #[test]
    fn stale_cells_are_left_out_and_listed() {
        let mut f = fixture(
            mesh_cells(|a, _| Ok(vec![rec(if a == "n1" { 1.0 } else { 10.0 }, "forward")])),
            vec![retest("n1", "n2", 0, Ok(vec![rec(1.0, "forward")]))],
        );
        // The plan is edited (another duration: new ids) and re-run: now
        // only n1 -> n2 is slow.
        let edited: Vec<(CellSpec, Outcome)> = mesh_cells(|a, b| {
            Ok(vec![rec(
                if (a, b) == ("n1", "n2") { 1.0 } else { 10.0 },
                "forward",
            )])
        })
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
        let suspects: Vec<(&str, &str)> = g
            .suspects
            .iter()
            .map(|s| (s.src.as_str(), s.dst.as_str()))
            .collect();
        assert_eq!(
            suspects,
            vec![("n1", "n2")],
            "the old slow cells do not count"
        );
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

    /// A mesh of `nodes` (each pair both ways) and its re-tests: `slow`
    /// pairs measure 2 Gbit/s (their re-tests 2.5), the rest 10; `cleared`
    /// slow pairs re-test at 9.9.
    fn slow_mesh(nodes: &[&str], slow: &[(&str, &str)], cleared: &[(&str, &str)]) -> Fixture {
        let mut mesh = Vec::new();
        let mut rts = Vec::new();
        for a in nodes {
            for b in nodes {
                if a == b {
                    continue;
                }
                let bad = slow.contains(&(*a, *b));
                mesh.push((
                    spec(&format!("{a}{b}"), "mesh", a, b, json!({"size": 65536}), 0),
                    Ok(vec![rec(if bad { 2.0 } else { 10.0 }, "forward")]),
                ));
                if bad {
                    let again = if cleared.contains(&(*a, *b)) {
                        9.9
                    } else {
                        2.5
                    };
                    rts.push(retest(a, b, 0, Ok(vec![rec(again, "forward")])));
                }
            }
        }
        fixture(mesh, rts)
    }

    #[test]
    fn a_node_whose_sends_mostly_fail_is_named_once_not_as_links() {
        // n5 drops half of what it transmits: 4 of its 5 sends are slow
        // (the fifth was cleared by its re-test), and two of its receives
        // suffer from its lost acknowledgements.
        let nodes = ["n1", "n2", "n3", "n4", "n5", "n6"];
        let slow = [
            ("n5", "n1"),
            ("n5", "n2"),
            ("n5", "n3"),
            ("n5", "n4"),
            ("n5", "n6"),
            ("n2", "n5"),
            ("n4", "n5"),
        ];
        let f = slow_mesh(&nodes, &slow, &[("n5", "n6")]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n5".to_string()], "{text}");
        assert_eq!(g.node_findings[0].fault, NodeFault::Sends, "{text}");
        assert!(
            g.bad_links.is_empty() && g.unconfirmed_links.is_empty(),
            "{text}"
        );
        assert!(
            text.contains("SUSPECT NODE n5: its sends fail: 4 of its 5 pairs it sends in fail the rule (2.00 Gbit/s); the other one passes (1 cleared by a re-test)"),
            "{text}"
        );
        // Two slow sends of one node (a link each) name no node: too few.
        let f = slow_mesh(&nodes, &[("n5", "n1"), ("n5", "n2")], &[]);
        let (_, g, text) = analyze_one(&f);
        assert!(g.node_findings.is_empty(), "{text}");
        assert_eq!(g.bad_links.len(), 2, "{text}");
        // A healthy node whose peers include two faulty senders is not
        // named: two of its five receives is no majority.
        let slow: Vec<(&str, &str)> = nodes
            .iter()
            .filter(|n| **n != "n1")
            .map(|n| ("n1", *n))
            .chain(nodes.iter().filter(|n| **n != "n2").map(|n| ("n2", *n)))
            .collect();
        let f = slow_mesh(&nodes, &slow, &[]);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(
            g.bad_nodes,
            vec!["n1".to_string(), "n2".to_string()],
            "{text}"
        );
        assert!(g.bad_links.is_empty(), "{text}");
    }

    /// A rail mesh: every pair of `nodes` both ways on each of `rails`;
    /// `slow(node, rail)` makes every pair of that end 2 Gbit/s.
    fn rail_mesh(nodes: &[&str], rails: u32, slow: impl Fn(&str, u32) -> bool) -> Fixture {
        let mut mesh = Vec::new();
        let mut rts = Vec::new();
        let cell = |id: String, pattern: &str, a: &str, b: &str, r: u32| {
            let mut c = spec(&id, pattern, a, b, json!({}), 0);
            c.dims = json!({"size": 65536, "rail": r});
            c
        };
        for r in 0..rails {
            for a in nodes {
                for b in nodes {
                    if a == b {
                        continue;
                    }
                    let bad = slow(a, r) || slow(b, r);
                    let v = if bad { 2.0 } else { 10.0 };
                    mesh.push((
                        cell(format!("{a}{b}r{r}"), "mesh", a, b, r),
                        Ok(vec![rec(v, "forward")]),
                    ));
                    if bad {
                        rts.push((
                            cell(format!("rt-{a}{b}r{r}"), RETEST, a, b, r),
                            Ok(vec![rec(2.5, "forward")]),
                        ));
                    }
                }
            }
        }
        fixture(mesh, rts)
    }

    #[test]
    fn a_rail_failing_on_every_node_is_named_not_its_nodes() {
        let nodes = ["n1", "n2", "n3", "n4"];
        // One node's rail 1 (a cable): that end is named.
        let f = rail_mesh(&nodes, 4, |n, r| n == "n3" && r == 1);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_nodes, vec!["n3/rail1".to_string()], "{text}");
        assert!(
            g.rail_findings.is_empty() && g.bad_links.is_empty(),
            "{text}"
        );
        // Rail 2 on every node (its leaf): the rail, no node, no link.
        let f = rail_mesh(&nodes, 4, |_, r| r == 2);
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.bad_rails, vec!["rail2".to_string()], "{text}");
        assert!(g.node_findings.is_empty(), "{text}");
        assert!(
            g.bad_links.is_empty() && g.unconfirmed_links.is_empty(),
            "{text}"
        );
        assert!(
            text.contains(
                "SUSPECT RAIL rail2: every one of its 4 nodes fails on it (4: its pairs fail)"
            ),
            "{text}"
        );
        assert!(!text.contains("SUSPECT NODE"), "{text}");
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["bad_rails"], json!(["rail2"]));
        // Two nodes: a bad cable and a bad leaf look alike; the ends are
        // named.
        let f = rail_mesh(&nodes[..2], 2, |_, r| r == 1);
        let (_, g, text) = analyze_one(&f);
        assert!(g.rail_findings.is_empty(), "{text}");
    }
}
