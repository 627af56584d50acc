//! Pass/fail gates over a report, for acceptance runs and CI pipelines.
//!
//! ```text
//! gate      = { selector } metric [ stat ] cmp rhs
//! selector  = ( "path" | "test" | "kind" | "op" | "size" | "node" | "direction" ) ":" value
//! metric    = "tcp-bw" | "udp-bw" | "rdma-bw" | "bw"             bandwidth rows, Gbit/s
//!           | "tcp-lat" | "udp-lat" | "rdma-lat" | "lat"          latency rows, µs
//!           | "udp-loss"                                         UDP rows, percent lost
//!           | "mesh" ( "outliers" | "suspect-nodes" | "suspect-rails" | "suspect-links" | "failed" )
//!           | "incast" ( "jain" | "min-share" | "bw" )
//!           | "bisection" "bw"
//!           | "failed-cells"
//! stat      = bandwidth: "mean" (default) | "min" | "max" | "ci-low"
//!             latency:   "p50" (default) | "p90" | "p99" | "p999" | "mean" | "min" | "max"
//! cmp       = ">=" | ">" | "<=" | "<" | "==" | "!="
//! rhs       = number [ unit ]                      90Gbps, 50us, 0.5%, 0
//!           | number "%" reference                  90% port_rate, 80% path:host
//!           | number "*" reference                  0.8 * path:host
//!           | reference                            port_rate, path:host
//! reference = "port_rate" | "path:" NAME
//! ```
//!
//! Mesh counts are of confirmed findings: suspects whose re-tests agreed,
//! nodes and links named on them or on failed cells (a node whose every
//! cell failed is a suspect node). Unconfirmed suspects are not counted; the
//! gate's notes say how many there are.
//!
//! Each gate is checked against every row (or mesh group, incast cell,
//! bisection) it selects; a gate that selects nothing fails, because an
//! acceptance check that measured nothing has not passed. `ci-low` on a
//! row with one repeat fails ("needs ≥ 2 repeats") instead of using the
//! mean; a `port_rate` threshold on a figure above its port rate fails
//! with that finding; `path:NAME` compares with the like row only.
//!
//! One file per stage: `lexer` (characters to tokens), `parser` (tokens
//! to a [`Gate`]; its error is a [`GateError`] with the column), `syntax`
//! (what a parsed gate is), `presets` (the shipped gate sets) and `eval`
//! (a gate checked against a report), whose figures come one file per
//! family: `rows` (bandwidth, latency, loss rows), `mesh`, `incast`,
//! `bisection`, `failed_cells`.

mod bisection;
mod error;
mod eval;
mod failed_cells;
mod incast;
mod lexer;
mod mesh;
mod parser;
mod presets;
mod rows;
mod syntax;

pub use error::GateError;
pub use eval::{evaluate, evaluate_all, GateOutcome, Violation};
pub use lexer::MAX_GATE_LEN;
pub use parser::parse;
pub use presets::{preset, Preset, PRESETS};
pub use syntax::{Cmp, Gate, Metric, Reference, Rhs, Selectors, Stat};
