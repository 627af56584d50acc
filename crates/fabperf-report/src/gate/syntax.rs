//! What a parsed gate is: its selectors, metric, statistic, comparison
//! and right-hand side (`--json` writes them as they are).

use crate::units::Dim;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Cmp {
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

impl Cmp {
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Cmp::Ge => a >= b,
            Cmp::Gt => a > b,
            Cmp::Le => a <= b,
            Cmp::Lt => a < b,
            Cmp::Eq => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
            Cmp::Ne => (a - b).abs() > 1e-9 * b.abs().max(1.0),
        }
    }
    pub fn sym(self) -> &'static str {
        match self {
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
            Cmp::Le => "<=",
            Cmp::Lt => "<",
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
        }
    }
}

/// What a gate selects rows by.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Selectors {
    pub path: Option<String>,
    pub test: Option<String>,
    pub kind: Option<String>,
    pub op: Option<String>,
    pub size: Option<u64>,
    pub node: Option<String>,
    pub direction: Option<String>,
}

/// What a gate measures.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Bandwidth rows of a kind (`None`: any bandwidth kind).
    Bw(Option<String>),
    Lat(Option<String>),
    UdpLoss,
    MeshOutliers,
    MeshSuspectNodes,
    /// Rails named instead of their nodes (a leaf failing on every node).
    MeshSuspectRails,
    MeshSuspectLinks,
    MeshFailed,
    IncastJain,
    IncastMinShare,
    IncastBw,
    BisectionBw,
    FailedCells,
}

impl Metric {
    pub(super) fn dim(&self) -> Dim {
        match self {
            Metric::Bw(_) | Metric::IncastBw | Metric::BisectionBw => Dim::Bandwidth,
            Metric::Lat(_) => Dim::Latency,
            Metric::UdpLoss => Dim::Percent,
            _ => Dim::Plain,
        }
    }
    pub(super) fn unit(&self) -> &'static str {
        match self.dim() {
            Dim::Bandwidth => " Gbit/s",
            Dim::Latency => " µs",
            Dim::Percent => " %",
            _ => "",
        }
    }
    pub(super) fn takes_port_rate(&self) -> bool {
        matches!(self, Metric::Bw(_) | Metric::IncastBw | Metric::BisectionBw)
    }
    pub(super) fn takes_path(&self) -> bool {
        matches!(self, Metric::Bw(_) | Metric::Lat(_) | Metric::UdpLoss)
    }
}

/// Which figure of a row a gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    Mean,
    Min,
    Max,
    CiLow,
    P50,
    P90,
    P99,
    P999,
}

impl Stat {
    pub(super) fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::Min => "min",
            Stat::Max => "max",
            Stat::CiLow => "ci-low",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::P999 => "p999",
        }
    }
}

/// What the threshold is relative to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reference {
    PortRate,
    Path(String),
}

/// The right-hand side.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rhs {
    /// In the metric's base unit (Gbit/s, µs, percent, count).
    Value(f64),
    /// `factor × reference`.
    Relative(f64, Reference),
}

/// A parsed gate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    pub text: String,
    pub selectors: Selectors,
    pub metric: Metric,
    pub stat: Option<Stat>,
    pub cmp: Cmp,
    pub rhs: Rhs,
}
