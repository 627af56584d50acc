//! Findings: something wrong with a node or a fabric, with the evidence and the fix.
//!
//! One struct for `fabperf doctor` (read from a node's inventory) and for the records (read
//! from the counters that moved during a measurement), so both speak the same vocabulary: a
//! stable `id`, a severity, what it is about, the values that show it and the exact knobs that
//! fix it. `fabperf_detect::doctor` re-exports these types.

use serde::{Deserialize, Serialize};

/// How bad a finding is. `error` makes `fabperf doctor` exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// A value read, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// File path as read (snapshot paths include the snapshot directory), or the input name.
    pub path: String,
    pub value: String,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier (`node-ip-slow-link`, `pcie-ceiling`, `roce-packet-loss`, ...).
    pub id: String,
    pub severity: Severity,
    /// What it is about: an interface, `mlx5_0 port 1`, a PCI address, `node` (in a record:
    /// prefixed with the end, `client mlx5_0 port 1`).
    pub subject: String,
    /// One line.
    pub summary: String,
    /// Why it matters.
    pub detail: String,
    pub evidence: Vec<Evidence>,
    /// Throughput lost, Gbit/s, when computable.
    pub cost_gbps: Option<f64>,
    /// Exact knobs that fix it.
    pub fix: Vec<String>,
}

impl Finding {
    /// Apply `f` to every text field (e.g. to escape what a peer sent).
    pub fn map_text(&mut self, f: &impl Fn(&str) -> String) {
        for s in [
            &mut self.id,
            &mut self.subject,
            &mut self.summary,
            &mut self.detail,
        ] {
            *s = f(s);
        }
        for e in &mut self.evidence {
            e.path = f(&e.path);
            e.value = f(&e.value);
        }
        for x in &mut self.fix {
            *x = f(x);
        }
    }
}
