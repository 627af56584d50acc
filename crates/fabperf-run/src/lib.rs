//! `fabperf run`: plans, resumable test matrices, all-pairs / incast /
//! bisection patterns, and the mesh summary.
//!
//! The runner drives agents: for a flow from agent A to agent B it asks A
//! (test kind [`drive::DRIVE`]) to run the client side of the test against
//! B, so every flow runs between the nodes under test, wherever the runner
//! sits. Cells are committed to the store one transaction each; a run
//! killed at any instant resumes where it stopped.

pub mod cells;
pub mod ctlplane;
pub mod drive;
/// Executing a plan, one file per concern under `exec/`: discovery, resume
/// (store, lease, run), batches, policy, tuning, flows, set-up watch,
/// aggregate, retest, labels, progress, signals; `run()` in `exec/mod.rs`.
pub mod exec;
/// The run plan, one file per rule under `plan/` (schema, check, agents,
/// test, pattern, sweep, env, rails, values) on the shared `fabperf_planfile` layer.
pub mod plan;
pub mod rails;
pub mod schedule;
/// The mesh summary, one file per rule under `summary/`: rule, analyze,
/// records, verdict, reference, confirm (re-tests), nodes (majority),
/// rails, links, findings (the JSON), text.
pub mod summary;

pub use cells::{expand, Roster, RosterAgent};
pub use drive::{DriveKind, DRIVE};
pub use exec::{run, RunOptions, RunOutcome};
pub use plan::{load, parse, Kind, Pattern, Plan, PlanError, PlanErrors};

/// Lower-case hex of bytes.
pub(crate) fn hex(b: &[u8]) -> String {
    hex::encode(b)
}
