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
//!
//! One file per rule: `rule` (the rule, its reference kind and the metric
//! a group is judged by), `analyze` (the run read cell by cell into each
//! pair's figures and failures), `records` (what a cell's records say:
//! its data directions, figures, port rate), `verdict` (the matrix and
//! each pair judged), `reference` (the pair the rule's reference comes
//! from, capped at the port rate), `confirm` (a suspect's re-tests:
//! confirmed, cleared or unconfirmed), `nodes` (the majority rule that
//! names a node), `rails` (a rail whose every node is named is named
//! instead), `links` (suspects no named node explains, within a group and
//! across the run's mesh groups: [`explain_across`]), `findings` (what
//! the summary finds, as `--json` writes it) and `text` (the text summary).

mod analyze;
mod confirm;
mod findings;
#[cfg(test)]
pub(crate) mod fixture;
mod links;
mod nodes;
mod rails;
mod records;
mod reference;
mod rule;
mod text;
mod verdict;

pub use analyze::{analyze, MeshFeed, Names};
pub use confirm::SuspectState;
pub use findings::{
    ExplainedLink, MeshAnalysis, MeshGroup, NodeFault, NodeFinding, RailFinding, Reference, Suspect,
};
pub use links::{explain_across, EXPLAIN_FACTOR};
pub use rails::{rail_end, RAIL_MIN_NODES};
pub use rule::{Metric, Rule, RuleKind, DEFAULT_BW_FRACTION, DEFAULT_LAT_FACTOR};
pub use text::{render, LIST_MAX, MATRIX_MAX_NODES};

use fabperf_store::{Store, StoreError};

/// Names of the mesh tests of a run's current plan, in plan order.
pub fn mesh_tests(store: &Store, run_id: i64) -> Result<Vec<String>, StoreError> {
    // From the cells' columns: a run of millions of cells is not decoded.
    store.plan_tests_with_pattern(run_id, "mesh")
}
