//! fabperf's results store: one SQLite file holding runs, their cells and
//! every measurement.
//!
//! - **runs**: one execution of a plan (resumable: the same run is continued
//!   until every cell is done), with the plan's text and hash, the fabperf
//!   version and the agents' hello (node, path, inventory).
//! - **cells**: one point of the plan's cross product (test × sweep point ×
//!   pattern instance × repeat), identified by a stable id; its state
//!   (`pending`, `done`, `failed`), last error and attempts.
//! - **measurements**: the records a finished cell produced, with the main
//!   figures as columns (for SQL), the whole record as JSON (lossless
//!   export) and the latency histogram when the record carries one.
//!
//! Durability: WAL journal with `synchronous=FULL`; each finished cell is one
//! transaction, so a runner killed at any instant (SIGKILL included) leaves
//! a consistent file that lacks at most the cell that was running. The schema
//! version lives in SQLite's `user_version`: older stores are migrated on
//! open, newer ones are refused with a message naming both versions.
//!
//! Where things live: the [`Store`] handle in `store.rs`, opening it in `open.rs`, what it hands
//! out in `types.rs` and `error.rs`; then one file per job: `runs`, `agents`, `cells` (writing),
//! `cell_readers`, `measurement_readers`, `insert` (the measurement INSERT), `findings`, `export`; `figure` is the rule for which of
//! a cell's records stand for it.

mod agents;
mod cell_readers;
mod cellids;
mod cells;
mod error;
mod export;
pub mod figure;
mod findings;
mod insert;
mod lease;
mod measurement_readers;
mod open;
mod runs;
mod schema;
mod store;
mod types;

pub use cellids::CellIds;
pub use error::StoreError;
pub use export::{export_csv, export_jsonl, ExportRow};
pub use lease::{Lease, LeaseHolder};
pub use schema::SCHEMA_VERSION;
pub use store::Store;
pub use types::{
    AgentRow, Attempt, CellRow, CellSpec, CellState, Finding, Measurement, NewRun, PlanCells,
    RawMeasurement, Role, RunInfo, StoredMeasurement, SyncReport, RETEST,
};
