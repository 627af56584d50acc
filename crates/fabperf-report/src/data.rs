//! What a report reads from the store: one run's plan, cells, measurements
//! (as stored JSON, so records from newer writers are read too), agents
//! with their inventories, and findings.

use fabperf_store::{CellRow, CellState, RawMeasurement, Role, RunInfo, Store, StoreError};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Errors of `fabperf report`.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(String),
}

/// A latency summary as stored in a record (µs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LatView {
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub samples: Option<u64>,
    /// `half_rtt` or `rtt`.
    pub kind: Option<String>,
}

/// A host's CPU figures over a test's interval (percent of one CPU).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostCpuView {
    pub total_pct: f64,
    pub cpus: Option<u32>,
}

/// What an aggregate of concurrent flows says about them (`flows`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FlowsView {
    /// Flows in the aggregate (one direction's).
    pub count: Option<u64>,
    /// The common interval in percent of the longest flow's interval.
    pub overlap_pct: Option<f64>,
    /// Latest minus earliest sender start, seconds.
    pub start_skew_s: Option<f64>,
}

/// The figures of one stored record a report uses. Every key is optional:
/// a missing, mistyped, non-finite or negative value is simply absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RecView {
    pub test: String,
    pub transport: Option<String>,
    pub op: Option<String>,
    pub direction: Option<String>,
    pub stream: Option<u64>,
    pub size: Option<u64>,
    pub streams: Option<u64>,
    pub duration_s: Option<f64>,
    pub bw_gbps: Option<f64>,
    pub msg_rate_mpps: Option<f64>,
    pub lat: Option<LatView>,
    pub lat_hist: Option<String>,
    pub cpu_local_pct: Option<f64>,
    pub cpu_remote_pct: Option<f64>,
    pub host_cpu_local: Option<HostCpuView>,
    pub host_cpu_remote: Option<HostCpuView>,
    pub retransmits: Option<u64>,
    pub udp_sent: Option<u64>,
    pub udp_lost: Option<u64>,
    pub udp_loss_pct: Option<f64>,
    pub mtu: Option<u64>,
    /// http-load: successful requests per second.
    pub requests_per_s: Option<f64>,
    /// http-load: failed requests by kind (`connect`, `write`, `read`,
    /// `timeout`, `status`, `parse`).
    pub errors: Option<BTreeMap<String, u64>>,
    /// The record's placement says the client's (`local`) or the agent's
    /// (`remote`) end ran on a virtual link (veth, bridge, loopback, a
    /// software RDMA device on one): its nominal speed is a label.
    pub virtual_local: bool,
    pub virtual_remote: bool,
    /// The port rate each end's placement gives (on a virtual link only a
    /// `tc` cap, a real limit).
    pub port_local_gbps: Option<f64>,
    pub port_remote_gbps: Option<f64>,
    pub warnings: Vec<String>,
    pub started_at: Option<String>,
    /// The measured interval in absolute time, when it is a sound one
    /// (`Interval::check`): a flow's, or an aggregate's common interval.
    pub interval: Option<fabperf_results::Interval>,
    /// An aggregate of concurrent flows: their count, overlap, start skew.
    pub flows: Option<FlowsView>,
}

mod record;
pub use record::RecordRead;
use value_fields::{num, text, uint};

/// The keys of a record with structures of their own, read from the small
/// `Value` of just that key ([`record`] reads the others in place).
mod value_fields {
    use super::{FlowsView, HostCpuView};
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// A figure of a stored record: finite and not negative (no figure a
    /// record holds can be below zero: a negative one is not data).
    pub(super) fn num(v: &Value, k: &str) -> Option<f64> {
        v.get(k)?.as_f64().filter(|x| x.is_finite() && *x >= 0.0)
    }

    pub(super) fn uint(v: &Value, k: &str) -> Option<u64> {
        v.get(k)?.as_u64()
    }

    pub(super) fn text(v: &Value, k: &str) -> Option<String> {
        v.get(k)?.as_str().map(str::to_string)
    }

    pub(super) fn host_cpu(h: &Value) -> Option<HostCpuView> {
        if !h.is_object() {
            return None;
        }
        let parts = ["user_pct", "system_pct", "irq_pct", "softirq_pct"];
        let vals: Vec<f64> = parts.iter().filter_map(|p| num(h, p)).collect();
        if vals.is_empty() {
            return None;
        }
        Some(HostCpuView {
            total_pct: vals.iter().sum(),
            cpus: uint(h, "cpus").and_then(|c| u32::try_from(c).ok()),
        })
    }

    pub(super) fn errors(v: &Value) -> Option<BTreeMap<String, u64>> {
        v.as_object().map(|o| {
            o.iter()
                .filter_map(|(k, x)| Some((k.clone(), x.as_u64()?)))
                .collect()
        })
    }

    pub(super) fn warnings(v: &Value) -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|w| match w {
                        Value::String(s) => Some(s.clone()),
                        Value::Object(o) => {
                            o.get("message").and_then(Value::as_str).map(str::to_string)
                        }
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn interval(v: Value) -> Option<fabperf_results::Interval> {
        if !v.is_object() {
            return None;
        }
        serde_json::from_value::<fabperf_results::Interval>(v)
            .ok()
            .filter(|i| i.check().is_empty())
    }

    pub(super) fn flows(f: &Value) -> Option<FlowsView> {
        f.is_object().then(|| FlowsView {
            count: uint(f, "count"),
            overlap_pct: num(f, "overlap_pct").filter(|p| *p <= 100.0),
            start_skew_s: num(f, "start_skew_s"),
        })
    }
}

/// One stored measurement.
#[derive(Debug, Clone)]
pub struct Sample {
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub rec: RecView,
}

impl Sample {
    /// A stored measurement read.
    /// A stored measurement read; `lat_hist` falls back to the store's
    /// column (taken, not copied: a histogram is most of a latency record).
    pub fn of(m: RawMeasurement<RecordRead>) -> Sample {
        let mut rec = m.record.view;
        if rec.lat_hist.is_none() {
            rec.lat_hist = m.lat_hist;
        }
        Sample {
            role: m.role,
            rec,
            src: m.src,
            dst: m.dst,
        }
    }
}

impl fabperf_store::figure::CellRecord for Sample {
    fn role(&self) -> Role {
        self.role
    }
    fn direction(&self) -> Option<&str> {
        self.rec.direction.as_deref()
    }
}

/// What an agent said about its node's link (from its hello's
/// `agent.inventory`; every key optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inventory {
    pub iface: Option<String>,
    /// The rate the link can carry, Gbit/s; `None` on a virtual link
    /// (unless a `tc` cap sets a real one) and when unknown.
    pub port_rate_gbps: Option<f64>,
    /// The link is virtual (veth, bridge, loopback, a software RDMA device
    /// on one): said by the inventory or by the run's records.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub virtual_link: bool,
    /// The speed a virtual link states: a label, never used as a rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_rate_gbps: Option<f64>,
    pub mtu: Option<u64>,
    pub numa_node: Option<i64>,
}

/// Drivers of software links whose stated speed is a label (`veth` says
/// 10000 Mb/s whatever it carries).
const VIRTUAL_DRIVERS: [&str; 12] = [
    "veth",
    "bridge",
    "vxlan",
    "geneve",
    "dummy",
    "tun",
    "openvswitch",
    "macvlan",
    "ipvlan",
    "wireguard",
    "ifb",
    "vrf",
];

/// Does an agent's inventory describe a virtual link? Its own
/// `virtual_link`/`virtual_device` flag, a loopback kind or a software
/// driver.
fn inventory_is_virtual(i: &Value) -> bool {
    let flag = |k: &str| i.get(k).and_then(Value::as_bool) == Some(true);
    flag("virtual_link")
        || flag("virtual_device")
        || text(i, "kind").is_some_and(|k| k == "loopback")
        || text(i, "driver").is_some_and(|d| VIRTUAL_DRIVERS.contains(&d.as_str()))
}

impl Inventory {
    /// Mark the link virtual (a record said so): its speed becomes a label
    /// and only `cap` (a tc cap the record gave) is a rate.
    fn mark_virtual(&mut self, cap: Option<f64>) {
        if !self.virtual_link {
            self.virtual_link = true;
            self.label_rate_gbps = self.port_rate_gbps;
            self.port_rate_gbps = None;
        }
        if cap.is_some() {
            self.port_rate_gbps = cap;
        }
    }
}

/// An agent of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agent {
    pub name: String,
    pub path: String,
    pub addr: String,
    /// The node name the agent gave, when it gave one.
    pub node: Option<String>,
    pub inventory: Inventory,
    /// The agent could not be reached when the run discovered it.
    pub unreachable: Option<String>,
}

impl Agent {
    fn from_row(a: &fabperf_store::AgentRow) -> Agent {
        let ident = a.hello.get("agent");
        let inv = ident.and_then(|i| i.get("inventory"));
        let port = inv.and_then(|i| {
            num(i, "port_rate_gbps")
                .or_else(|| num(i, "speed_mbps").map(|m| m / 1000.0))
                .filter(|r| *r > 0.0)
        });
        let virtual_link = inv.is_some_and(inventory_is_virtual);
        // On a virtual link only a tc cap is a real limit.
        let tc_cap = inv
            .and_then(|i| num(i, "tc_rate_bps"))
            .filter(|r| *r > 0.0)
            .map(|r| r / 1e9);
        Agent {
            name: a.name.clone(),
            path: a.path.clone(),
            addr: a.addr.clone(),
            node: ident.and_then(|i| text(i, "node")),
            inventory: Inventory {
                iface: inv.and_then(|i| text(i, "iface")),
                port_rate_gbps: if virtual_link { tc_cap } else { port },
                virtual_link,
                label_rate_gbps: if virtual_link { port } else { None },
                mtu: inv.and_then(|i| uint(i, "mtu")),
                numa_node: inv.and_then(|i| i.get("numa_node")?.as_i64()),
            },
            unreachable: text(&a.hello, "unreachable"),
        }
    }
}

/// A stored finding, with the keys a doctor finding has when present.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingView {
    pub kind: String,
    pub subject: String,
    /// Stable id (`node-ip-slow-link`, ...).
    pub id: Option<String>,
    /// `error`, `warning`, `info`.
    pub severity: Option<String>,
    pub summary: Option<String>,
    /// The node it is about (the body's `node`/`hostname`, else the subject).
    pub node: String,
    pub fix: Vec<String>,
}

impl FindingView {
    fn from(f: &fabperf_store::Finding) -> FindingView {
        let b = &f.body;
        // A finding may be stored whole or wrapped ({"node": .., "finding": {..}}).
        let inner = b.get("finding").filter(|x| x.is_object()).unwrap_or(b);
        let node = text(b, "node")
            .or_else(|| text(b, "hostname"))
            .unwrap_or_else(|| f.subject.clone());
        FindingView {
            kind: f.kind.clone(),
            subject: f.subject.clone(),
            id: text(inner, "id"),
            severity: text(inner, "severity").map(|s| s.to_ascii_lowercase()),
            summary: text(inner, "summary").or_else(|| text(inner, "message")),
            node,
            fix: inner
                .get("fix")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// "node-ip-slow-link on fp-node1" or the subject.
    pub fn label(&self) -> String {
        match &self.id {
            Some(id) => format!("{id} on {}", self.node),
            None => format!("{} {}", self.kind, self.subject),
        }
    }
}

/// Per-test settings from the stored plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeshRule {
    pub kind: fabperf_run::summary::RuleKind,
    pub bw_fraction: f64,
    pub lat_factor: f64,
}

/// One run, read whole.
#[derive(Debug, Clone)]
pub struct RunData {
    pub run: RunInfo,
    /// The plan's `baseline`, when it names one.
    pub plan_baseline: Option<String>,
    pub mesh_rules: BTreeMap<String, MeshRule>,
    pub cells: Vec<CellRow>,
    pub samples: HashMap<String, Vec<Sample>>,
    pub agents: Vec<Agent>,
    pub findings: Vec<FindingView>,
    /// Histograms that could not be used, with the cell.
    pub notes: Vec<String>,
    /// `agents` by (path, name): a run of a thousand nodes looks its agents
    /// up per cell.
    agent_at: HashMap<(String, String), usize>,
}

impl RunData {
    pub fn agent(&self, path: &str, name: &str) -> Option<&Agent> {
        // The first agent of that path and name, as a search would find it.
        self.agent_at
            .get(&(path.to_string(), name.to_string()))
            .map(|&i| &self.agents[i])
    }

    pub fn done(&self) -> impl Iterator<Item = &CellRow> {
        self.cells.iter().filter(|c| c.state == CellState::Done)
    }

    pub fn samples_of(&self, cell_id: &str) -> &[Sample] {
        self.samples.get(cell_id).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// The plan's `baseline` and mesh thresholds from its stored text.
fn plan_settings(text: &str) -> (Option<String>, BTreeMap<String, MeshRule>) {
    let mut rules = BTreeMap::new();
    if let Ok(p) = fabperf_run::parse(text, "stored plan", std::path::Path::new(".")) {
        for t in &p.tests {
            rules.insert(
                t.name.clone(),
                MeshRule {
                    kind: t.suspect_rule,
                    bw_fraction: t.suspect_bw,
                    lat_factor: t.suspect_lat,
                },
            );
        }
        return (p.baseline, rules);
    }
    // A plan this version cannot validate (written by a newer one): take
    // what the report needs from the TOML alone.
    let base = toml::from_str::<toml::Value>(text)
        .ok()
        .and_then(|v| v.get("baseline")?.as_str().map(str::to_string));
    (base, rules)
}

/// Read run `run` (default: the newest) from the store, whole: every
/// current cell and its measurements in memory. [`load_head`] and
/// [`each_cell`] read a run one cell at a time.
pub fn load(store: &Store, run: Option<i64>) -> Result<RunData, ReportError> {
    let mut data = load_head(store, run)?;
    let (mut cells, mut samples) = (Vec::new(), HashMap::new());
    each_cell(store, &mut data, &mut |_, c, ms| {
        if !ms.is_empty() {
            samples.insert(c.spec.cell_id.clone(), ms.to_vec());
        }
        cells.push(c.clone());
        Ok(())
    })?;
    data.cells = cells;
    data.samples = samples;
    Ok(data)
}

/// Read run `run` (default: the newest) but its cells: the run, the plan's
/// settings, the agents and the findings (`cells` and `samples` empty).
pub fn load_head(store: &Store, run: Option<i64>) -> Result<RunData, ReportError> {
    let run = match run {
        Some(id) => store.run(id)?,
        None => store.latest_run()?.ok_or_else(|| {
            ReportError::Usage(format!(
                "{} holds no run yet; `fabperf run PLAN --db {}` makes one",
                store.path().display(),
                store.path().display()
            ))
        })?,
    };
    let (plan_baseline, mesh_rules) = plan_settings(&run.plan_text);
    let agents: Vec<Agent> = store.agents(run.id)?.iter().map(Agent::from_row).collect();
    let mut agent_at = HashMap::new();
    for (i, a) in agents.iter().enumerate() {
        agent_at
            .entry((a.path.clone(), a.name.clone()))
            .or_insert(i);
    }
    let findings = store
        .findings(run.id, None)?
        .iter()
        .map(FindingView::from)
        .collect();
    Ok(RunData {
        run,
        plan_baseline,
        mesh_rules,
        cells: Vec::new(),
        samples: HashMap::new(),
        agents,
        findings,
        notes: Vec::new(),
        agent_at,
    })
}

/// A measurement as the mesh analysis reads it, its figures from the
/// record (the columns it would read are written from the record).
fn stored(m: &mut RawMeasurement<RecordRead>) -> fabperf_store::StoredMeasurement {
    let r = &m.record;
    fabperf_store::StoredMeasurement {
        cell_id: m.cell_id.clone(),
        role: m.role,
        src: m.src.clone(),
        dst: m.dst.clone(),
        direction: r.view.direction.clone(),
        bw_gbps: r.mesh_bw_gbps,
        lat_p50_us: r.mesh_lat_p50_us,
        record: std::mem::take(&mut m.json),
    }
}

/// What [`each_cell`] calls with each cell.
pub type CellVisitor<'a> =
    dyn FnMut(&RunData, &CellRow, &[Sample]) -> Result<(), ReportError> + Send + 'a;

/// The current plan's cells of `data`'s run (from [`load_head`]), each with
/// its measurements, one at a time in plan order, keeping none: `f` gets
/// `data` (its agents marked virtual as the records so far say: a virtual
/// end's speed is a label), the cell and its samples. The cells of earlier
/// versions of the plan are counted in `data.notes` at the end.
pub fn each_cell(
    store: &Store,
    data: &mut RunData,
    f: &mut CellVisitor<'_>,
) -> Result<(), ReportError> {
    each_cell_feeding(store, data, &mut [], f)
}

/// A cell as the reading thread hands it over: the cell, whether it is
/// part of the current plan, and when it is, its measurements as the mesh
/// analysis reads them (only for a mesh test's cells) and its samples.
type Read = (
    CellRow,
    bool,
    Option<Vec<fabperf_store::StoredMeasurement>>,
    Vec<Sample>,
);

/// Cells handed over at a time, and batches in flight: what is read ahead
/// of the analysis stays a few thousand cells, whatever the run's size.
const BATCH: usize = 256;
const IN_FLIGHT: usize = 8;

/// [`each_cell`], also feeding every cell (current or not) and its
/// measurements to the mesh analyses in `meshes`, so that the report reads
/// a run once for its tables and its matrices.
///
/// Reading and analysing a run take two threads: this one reads the store
/// and parses each record; a second one feeds the mesh analyses and calls
/// `f` (which decodes and merges histograms: that keeps the two about even
/// on a latency mesh), in the order read. Each batch goes back to this
/// thread to be freed: the allocator (glibc's) frees memory of another
/// thread's arena under that arena's lock, which cost more than the second
/// core saved.
pub fn each_cell_feeding(
    store: &Store,
    data: &mut RunData,
    meshes: &mut [fabperf_run::summary::MeshFeed],
    f: &mut CellVisitor<'_>,
) -> Result<(), ReportError> {
    let run_id = data.run.id;
    let mesh_tests: Vec<String> = meshes.iter().map(|m| m.test().to_string()).collect();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Read>>(IN_FLIGHT);
    // Batches analysed, back to be freed where they were made.
    let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<Read>>();
    std::thread::scope(|scope| {
        let analysis = scope.spawn(move || analyse(rx, back_tx, data, meshes, f));
        let mut batch: Vec<Read> = Vec::with_capacity(BATCH);
        let read = store.each_plan_cell_measured(run_id, &mut |c, current, mut ms| {
            let stored_ms = (current && mesh_tests.contains(&c.spec.test))
                .then(|| ms.iter_mut().map(stored).collect());
            let samples: Vec<Sample> = if current {
                ms.into_iter().map(Sample::of).collect()
            } else {
                Vec::new()
            };
            batch.push((c, current, stored_ms, samples));
            if batch.len() == BATCH {
                while let Ok(done) = back_rx.try_recv() {
                    drop(done);
                }
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if tx.send(full).is_err() {
                    // The analysis stopped (its error is returned below).
                    return Err(StoreError::Invalid {
                        path: store.path().to_path_buf(),
                        msg: "report stopped".into(),
                    });
                }
            }
            Ok(())
        });
        // After a failed send the batch is a new, empty one.
        if !batch.is_empty() {
            let _ = tx.send(batch);
        }
        drop(tx);
        let analysed = analysis
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        drop(back_rx);
        // The analysis's own error first: it is why the reading stopped.
        analysed?;
        read.map_err(ReportError::from)
    })
}

/// The analysing side of [`each_cell_feeding`].
fn analyse(
    rx: std::sync::mpsc::Receiver<Vec<Read>>,
    back: std::sync::mpsc::Sender<Vec<Read>>,
    data: &mut RunData,
    meshes: &mut [fabperf_run::summary::MeshFeed],
    f: &mut CellVisitor<'_>,
) -> Result<(), ReportError> {
    let run_id = data.run.id;
    let mut stale: Vec<String> = Vec::new();
    let mut stale_n = 0usize;
    for batch in rx {
        for (c, current, stored_ms, samples) in &batch {
            let current = *current;
            if let Some(feed) = meshes.iter_mut().find(|m| m.test() == c.spec.test) {
                feed.cell_measured(c, current, stored_ms.as_deref().unwrap_or_default());
            }
            if !current {
                // Only the current plan's cells count; the others are listed.
                if stale.len() < 10 {
                    stale.push(format!(
                        "{} ({})",
                        fabperf_run::exec::printable(&c.spec.cell_id),
                        fabperf_run::exec::printable(&fabperf_run::exec::cell_label(&c.spec))
                    ));
                }
                stale_n += 1;
                continue;
            }
            // What the records say about the links: a virtual end's speed is a label.
            for m in samples {
                for (node, virt, cap) in [
                    (&m.src, m.rec.virtual_local, m.rec.port_local_gbps),
                    (&m.dst, m.rec.virtual_remote, m.rec.port_remote_gbps),
                ] {
                    let Some(node) = node.as_deref().filter(|_| virt) else {
                        continue;
                    };
                    if let Some(&i) = data.agent_at.get(&(c.spec.path.clone(), node.to_string())) {
                        data.agents[i].inventory.mark_virtual(cap);
                    }
                }
            }
            f(data, c, samples)?;
        }
        // The reading side stopped only after an error of its own.
        let _ = back.send(batch);
    }
    if stale_n > 0 {
        data.notes.push(format!(
            "{} stored cell{} of run {} {} not part of its current plan (the plan was edited since they ran) and {} not counted: {}{}",
            stale_n,
            if stale_n == 1 { "" } else { "s" },
            run_id,
            if stale_n == 1 { "is" } else { "are" },
            if stale_n == 1 { "is" } else { "are" },
            stale.join(", "),
            if stale_n > stale.len() {
                format!(" and {} more (`fabperf runs --db FILE --cells` lists them)", stale_n - stale.len())
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A record read as the report reads it, `lat_hist` falling back to
    /// the store's column.
    fn view(v: &Value, column: Option<String>) -> RecView {
        Sample::of(RawMeasurement {
            cell_id: "c".into(),
            role: Role::Total,
            src: None,
            dst: None,
            record: serde_json::from_str(&v.to_string()).unwrap(),
            json: v.to_string(),
            lat_hist: column,
        })
        .rec
    }

    #[test]
    fn records_are_read_tolerantly() {
        let v = json!({
            "test": "tcp-lat", "size": 64, "bw_gbps": "fast", "duration_s": 2.0,
            "lat_us": {"p50": 7.5, "p99": 20.0, "mean": null, "kind": "half_rtt", "samples": 10},
            "host_cpu_local": {"user_pct": 10.0, "system_pct": 5.5, "irq_pct": 0.5, "softirq_pct": 4.0, "cpus": 8},
            "udp": {"sent": 100, "lost": 3, "loss_pct": 3.0},
            "warnings": ["old style", {"id": "x", "message": "new style"}, 7],
            "lat_hist": "HISTfromrecord"
        });
        let r = view(&v, Some("column".into()));
        assert_eq!(r.test, "tcp-lat");
        assert_eq!(r.bw_gbps, None);
        assert_eq!(r.size, Some(64));
        let l = r.lat.unwrap();
        assert_eq!((l.p50, l.p99, l.mean), (Some(7.5), Some(20.0), None));
        assert_eq!(r.host_cpu_local.unwrap().total_pct, 20.0);
        assert_eq!(r.host_cpu_local.unwrap().cpus, Some(8));
        assert_eq!(r.host_cpu_remote, None);
        assert_eq!(r.udp_loss_pct, Some(3.0));
        assert_eq!(r.warnings, vec!["old style", "new style"]);
        assert_eq!(r.lat_hist.as_deref(), Some("HISTfromrecord"));
        // http-load errors and placements: hostile values are left out.
        let r = view(
            &json!({"errors": {"timeout": 3, "status": "many", "read": -1, "parse": u64::MAX},
                    "requests_per_s": "fast",
                    "placement_local": {"virtual_link": "yes", "port_rate_gbps": -1},
                    "placement_remote": {"virtual_link": true, "port_rate_gbps": 2.5}}),
            None,
        );
        let e = r.errors.unwrap();
        assert_eq!(
            (e.get("timeout"), e.get("parse")),
            (Some(&3), Some(&u64::MAX))
        );
        assert!(!e.contains_key("status") && !e.contains_key("read"));
        assert_eq!(r.requests_per_s, None);
        assert!(!r.virtual_local && r.port_local_gbps.is_none());
        assert!(r.virtual_remote && r.port_remote_gbps == Some(2.5));
        let r = view(&json!({"errors": [1], "placement_local": 7}), None);
        assert!(r.errors.is_none() && !r.virtual_local);
        let r = view(&json!({"test": 5}), Some("column".into()));
        assert_eq!(r.test, "");
        assert_eq!(r.lat_hist.as_deref(), Some("column"));
        assert_eq!(view(&json!([]), None), RecView::default());
    }

    #[test]
    fn inventories_and_findings() {
        let row = fabperf_store::AgentRow {
            name: "n1".into(),
            path: "host".into(),
            addr: "10.0.0.1:5301".into(),
            hello: json!({"agent": {"node": "n1", "path": "host",
                "inventory": {"iface": "eth0", "port_rate_gbps": 100, "mtu": 9000, "numa_node": 1}}}),
            seen_at: String::new(),
        };
        let a = Agent::from_row(&row);
        assert_eq!(a.inventory.port_rate_gbps, Some(100.0));
        assert_eq!(a.inventory.mtu, Some(9000));
        assert_eq!(a.inventory.numa_node, Some(1));
        assert_eq!(a.node.as_deref(), Some("n1"));
        // Older agents: no identity; hostile values are ignored.
        let mut row2 = row.clone();
        row2.hello = json!({"agent": {"inventory": {"port_rate_gbps": -5, "mtu": "big"}}});
        let a = Agent::from_row(&row2);
        assert_eq!(a.inventory, Inventory::default());
        // A virtual link: its speed is a label; a tc cap is a rate.
        row2.hello = json!({"agent": {"inventory": {"driver": "veth", "speed_mbps": 10000}}});
        let a = Agent::from_row(&row2);
        assert!(a.inventory.virtual_link);
        assert_eq!(
            (a.inventory.port_rate_gbps, a.inventory.label_rate_gbps),
            (None, Some(10.0))
        );
        row2.hello = json!({"agent": {"inventory": {"kind": "loopback", "port_rate_gbps": 10,
                                                    "tc_rate_bps": 1e9}}});
        assert_eq!(Agent::from_row(&row2).inventory.port_rate_gbps, Some(1.0));
        row2.hello = json!({"agent": {"inventory": {"virtual_link": true, "port_rate_gbps": 10}}});
        assert!(Agent::from_row(&row2).inventory.port_rate_gbps.is_none());
        row2.hello =
            json!({"agent": {"inventory": {"driver": "mlx5_core", "port_rate_gbps": 100}}});
        assert!(!Agent::from_row(&row2).inventory.virtual_link);
        row2.hello = json!({"unreachable": "connection refused"});
        assert_eq!(
            Agent::from_row(&row2).unreachable.as_deref(),
            Some("connection refused")
        );
        let f = fabperf_store::Finding {
            kind: "doctor".into(),
            subject: "fp-node1".into(),
            body: json!({"id": "node-ip-slow-link", "severity": "Warning",
                "summary": "node IP on a 1 GbE link", "fix": ["--node-ip"]}),
            at: String::new(),
        };
        let v = FindingView::from(&f);
        assert_eq!(v.label(), "node-ip-slow-link on fp-node1");
        assert_eq!(v.severity.as_deref(), Some("warning"));
        assert_eq!(v.fix, vec!["--node-ip"]);
    }

    #[test]
    fn plan_baseline_from_text() {
        let (b, _) = plan_settings("name = \"x\"\nbaseline = \"host\"\nfuture_key = 1\n");
        assert_eq!(b.as_deref(), Some("host"));
        let (b, _) = plan_settings("not toml [");
        assert_eq!(b, None);
    }
}
