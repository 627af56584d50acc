//! What the summary finds, per test and per group (test × path × sweep
//! point): the matrix, the reference, the suspects, the nodes, rails and
//! links named. `--json` writes these types as they are.

use super::confirm::SuspectState;
use super::rule::{Metric, RuleKind};
use fabperf_store::CellSpec;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

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

impl Suspect {
    /// Held against the pair: confirmed by its re-tests, or not re-tested
    /// and with a node the re-tests of a sample of its pairs confirmed.
    pub fn held(&self) -> bool {
        matches!(self.state, SuspectState::Confirmed | SuspectState::WithNode)
    }

    /// No re-test ran for it: neither a figure nor a failure.
    pub fn untested(&self) -> bool {
        self.retests.is_empty() && self.retests_failed.is_empty()
    }
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

/// A confirmed suspect link that a node named by another mesh group of the
/// run (another test, or another sweep point, on the same path) explains:
/// the link's figure is within [`EXPLAIN_FACTOR`](super::EXPLAIN_FACTOR) of
/// that node's median pair in this group. A node with added latency slows
/// the TCP flows it is in, some more than others; the latency mesh names the
/// node, and its slowest bandwidth pairs are the same fault, not links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainedLink {
    /// The link (a < b).
    pub a: String,
    pub b: String,
    /// The end that explains it.
    pub node: String,
    /// The tests of the groups that name the node.
    pub named_by: Vec<String>,
    /// The link's worst confirmed figure here (the metric's unit).
    pub value: f64,
    /// The node's median pair here, the link's own pairs left out.
    pub node_median: f64,
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
    /// Confirmed suspect links a node named by another group explains
    /// (left out of `bad_links`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explained_links: Vec<ExplainedLink>,
    #[serde(skip)]
    pub(super) templates: BTreeMap<(String, String), CellSpec>,
    /// While judging: the mesh cell of each pair, by node id.
    #[serde(skip)]
    pub(super) template_ids: HashMap<(u32, u32), u32>,
}

impl MeshGroup {
    pub(super) fn empty(s: &CellSpec, metric: Metric) -> MeshGroup {
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
            explained_links: Vec::new(),
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
