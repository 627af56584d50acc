//! fabperf's reports, from the results store (`fabperf run`'s SQLite file):
//!
//! - [`analysis`]: one row per test × sweep point × path × pattern
//!   instance, with mean, stdev and the 95 % confidence interval over its
//!   repeats ([`stats`]), the difference to the baseline path (Gbit/s and
//!   %, µs added at p50 and p99 from merged histograms, loss change), the
//!   share of the port rate, CPU per Gbit/s; incast fairness, bisection
//!   bandwidth, the mesh matrices; verdicts in words per path and node;
//!   one file per concern under `analysis/` (`build` the one pass over the
//!   cells, `rows`, `accumulate`, `single`, `multi`, `latency`, `ports`,
//!   `dims`, `baseline`, `verdicts`, `format`; `report` the types);
//! - [`flows`]: concurrent flows (incast, bisection) one direction at a
//!   time: each direction's aggregate, shares and Jain's index, or why it
//!   has none;
//! - [`text`]: terminal table, Markdown, CSV, JSON; [`html`]: one
//!   self-contained HTML file with SVG charts;
//! - [`openmetrics`]: every measurement as OpenMetrics gauges, and a
//!   Pushgateway client;
//! - [`gate`]: pass/fail gates with a small grammar and presets, one file
//!   per stage under `gate/` (lexer, parser, syntax, presets, eval) and
//!   one per family of figures (rows, mesh, incast, bisection, failed cells).

pub mod analysis;
pub mod data;
pub mod flows;
pub mod gate;
pub mod hist;
pub mod html;
pub mod openmetrics;
mod png;
pub mod stats;
pub mod text;
pub mod units;

pub use analysis::{build, Options, Report};
pub use data::ReportError;
