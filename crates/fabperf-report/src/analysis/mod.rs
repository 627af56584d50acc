//! From a run's cells to the report: one row per test × sweep point × path
//! × pattern instance with statistics over its repeats, the difference to
//! the baseline path, the share of the port rate, CPU per Gbit/s, merged
//! latency percentiles; incast fairness, bisection bandwidth, the mesh
//! matrices; verdicts in words per path and per node.
//!
//! One concern per file: `report` the types a report holds; `build`
//! the one pass over the run's cells; `rows` the grouping of cells into
//! rows, a row's figures and the order of the rows; `accumulate` what is
//! kept per row while the cells are read; `single` and `multi` cells of
//! one flow and of concurrent flows (incast, bisection cuts); `latency`
//! merged histograms; `ports` port rates; `dims` plan dimensions;
//! `baseline` the row a row is compared with and the difference;
//! `verdicts` the verdicts in words; `format` numbers in words.

mod accumulate;
mod baseline;
mod build;
mod dims;
mod format;
mod latency;
mod multi;
mod ports;
mod report;
mod rows;
mod single;
mod verdicts;

pub use baseline::dim_baseline;
pub use build::{build, Options};
pub use format::{fmt_num, signed};
pub use ports::port_finding_text;
pub use report::{
    Bisection, CellIds, Concurrency, CpuPerGbps, Delta, FailedCell, FailedRepeat, Family,
    HttpFigures, Incast, Instance, LatFigures, LatSource, Level, MtuFigures, Report, Row, RunMeta,
    Spread, Verdict,
};
