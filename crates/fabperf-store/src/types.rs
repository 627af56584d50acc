//! The data the store keeps and hands out: runs, agents, cells and their
//! states, measurements (as decoded, as stored, as read over a whole run),
//! findings, and what syncing a plan's cells reports.

use fabperf_results::Record;
use serde::{Deserialize, Serialize};

/// The state of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellState {
    Pending,
    Done,
    Failed,
}

impl CellState {
    pub fn as_str(self) -> &'static str {
        match self {
            CellState::Pending => "pending",
            CellState::Done => "done",
            CellState::Failed => "failed",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<CellState> {
        match s {
            "pending" => Some(CellState::Pending),
            "done" => Some(CellState::Done),
            "failed" => Some(CellState::Failed),
            _ => None,
        }
    }
}

/// What a measurement row is within its cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The result of a single-flow cell (a pair).
    Total,
    /// One stream or QP of a multi-stream result.
    Stream,
    /// One sender→receiver flow of a cell with concurrent flows (incast,
    /// bisection).
    Flow,
    /// The sum over a cell's concurrent flows.
    Aggregate,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Total => "total",
            Role::Stream => "stream",
            Role::Flow => "flow",
            Role::Aggregate => "aggregate",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<Role> {
        match s {
            "total" => Some(Role::Total),
            "stream" => Some(Role::Stream),
            "flow" => Some(Role::Flow),
            "aggregate" => Some(Role::Aggregate),
            _ => None,
        }
    }
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInfo {
    pub id: i64,
    pub plan_name: String,
    pub plan_hash: String,
    pub plan_file: Option<String>,
    pub plan_text: String,
    pub started_at: String,
    pub updated_at: String,
    /// Set when every cell was done or failed at the end of an execution.
    pub ended_at: Option<String>,
    pub fabperf_version: String,
}

/// A run to create.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub plan_name: &'a str,
    pub plan_hash: &'a str,
    pub plan_file: Option<&'a str>,
    pub plan_text: &'a str,
}

/// An agent seen by a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRow {
    /// The plan's name for it (the node name).
    pub name: String,
    pub path: String,
    pub addr: String,
    /// What the agent said about itself (node, path label, inventory).
    pub hello: serde_json::Value,
    pub seen_at: String,
}

/// One cell of a run's cross product, as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSpec {
    /// Stable id: a hash of the plan's identity and the cell's parameters.
    pub cell_id: String,
    /// Position in the plan's deterministic order.
    pub seq: i64,
    /// Cells sharing a batch number run at the same time (a mesh round).
    pub batch: i64,
    /// The plan's name for the test.
    pub test: String,
    /// The test kind (`tcp-bw`, `rdma-lat`, ...).
    pub kind: String,
    /// The path label the agents serve (`host`, `overlay`, ...).
    pub path: String,
    /// `pairs`, `mesh`, `incast`, `bisection`, or `retest`.
    pub pattern: String,
    /// The concurrent flows: (sender agent, receiver agent) names.
    pub flows: Vec<(String, String)>,
    /// The engine parameters sent to the agents.
    pub params: serde_json::Value,
    /// The sweep point (size, streams, op, ...) for reports.
    pub dims: serde_json::Value,
    pub repeat: u32,
}

/// The pattern of the cells the runner adds to re-test a mesh's suspects.
pub const RETEST: &str = "retest";

/// A run's cells, split by its current plan ([`Store::plan_cells`](crate::Store::plan_cells)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanCells {
    /// The current plan's cells and their re-tests, in plan order.
    pub current: Vec<CellRow>,
    /// Cells of earlier versions of the plan: kept, counted nowhere.
    pub stale: Vec<CellRow>,
}

impl PlanCells {
    /// The ids of the current plan's cells.
    pub fn current_ids(&self) -> std::collections::HashSet<&str> {
        self.current
            .iter()
            .map(|c| c.spec.cell_id.as_str())
            .collect()
    }
}

/// A cell with its state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellRow {
    #[serde(flatten)]
    pub spec: CellSpec,
    pub state: CellState,
    pub error: Option<String>,
    pub attempts: u32,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// Wall time of the last attempt, from the first request to the results.
    pub wall_s: Option<f64>,
}

/// One record of a finished cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub record: Record,
}

/// One measurement as stored, the record left as JSON (or read as `R` by
/// [`Store::each_plan_cell_measured`](crate::Store::each_plan_cell_measured)).
#[derive(Debug, Clone, PartialEq)]
pub struct RawMeasurement<R = serde_json::Value> {
    pub cell_id: String,
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    /// The record as stored. The store keeps a histogram once, in its
    /// column: a record stored by this version has no `lat_hist` key (one
    /// from an older store may still have it); read `lat_hist` below.
    pub record: R,
    /// The record's JSON text as stored, which `record` was read from.
    pub json: String,
    /// The `lat_hist` column (the record's histogram, when it carried one).
    pub lat_hist: Option<String>,
}

/// One stored measurement for readers that go over a whole run
/// ([`Store::each_measurement`](crate::Store::each_measurement)): the main
/// figures as their columns hold them (written from the record), the record
/// as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMeasurement {
    pub cell_id: String,
    pub role: Role,
    pub src: Option<String>,
    pub dst: Option<String>,
    /// The record's `direction`.
    pub direction: Option<String>,
    /// The record's `bw_gbps`.
    pub bw_gbps: Option<f64>,
    /// The record's `lat_us.p50`.
    pub lat_p50_us: Option<f64>,
    /// The record's JSON text as stored: since the histogram is kept in its
    /// column, a record stored by this version has no `lat_hist` key (one
    /// from an older store may still have it).
    pub record: String,
}

/// How the cells of a plan met the cells already stored for its run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Cells of the plan already done in the store (kept, not rerun).
    pub done: usize,
    /// Cells of the plan that failed before (rerun with --retry-failed).
    pub failed: usize,
    /// Cells of the plan still to run (new or never finished).
    pub pending: usize,
    /// Cells in the store that the plan no longer has (kept, not rerun).
    pub not_in_plan: usize,
}

/// Timing of one attempt at a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub attempts: u32,
    pub started_at: String,
    pub ended_at: String,
    pub wall_s: f64,
}

/// A finding attached to a run (a doctor finding of an agent's node, the
/// suspects of a mesh re-test, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: String,
    pub subject: String,
    pub body: serde_json::Value,
    pub at: String,
}
