//! A row as its cells are read: running means and what is kept per row
//! and per pattern instance, not the records.

use super::latency::StoredLat;
use super::ports::PortOf;
use super::report::FailedRepeat;
use crate::hist::Merged;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

/// A mean kept as it goes: the same sum in the same order as over a list
/// of the values (`Iterator::sum` starts at −0), so the figure is the same
/// bit for bit, without the list.
#[derive(Clone, Copy)]
pub(super) struct Mean {
    pub(super) sum: f64,
    pub(super) n: usize,
    /// Values pushed, present or not.
    pub(super) pushed: usize,
}

impl Default for Mean {
    fn default() -> Mean {
        Mean {
            sum: -0.0,
            n: 0,
            pushed: 0,
        }
    }
}

impl Mean {
    pub(super) fn push(&mut self, v: f64) {
        self.sum += v;
        self.n += 1;
        self.pushed += 1;
    }

    pub(super) fn push_opt(&mut self, v: Option<f64>) {
        match v {
            Some(v) => self.push(v),
            None => self.pushed += 1,
        }
    }

    /// The mean of the values present.
    pub(super) fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// The mean, absent when one value was.
    pub(super) fn mean_of_all(&self) -> Option<f64> {
        (self.n == self.pushed).then(|| self.mean()).flatten()
    }
}

/// One pattern instance of a row (a mesh pair, a bisection cut) as its
/// cells are read.
pub(super) struct InstAcc {
    pub(super) key: String,
    pub(super) cells: Vec<String>,
    pub(super) values: Vec<f64>,
    pub(super) ports: Vec<PortOf>,
    /// When its first cell came (instances are listed in that order).
    pub(super) first: Option<usize>,
}

#[derive(Default)]
pub(super) struct Acc {
    pub(super) cells: Vec<String>,
    /// The figure of each cell with one, in run order.
    pub(super) values: Vec<f64>,
    /// The instances, by key.
    pub(super) inst_at: FxHashMap<String, usize>,
    pub(super) insts: Vec<InstAcc>,
    /// Nodes by number, and the (sender, receiver) pairs measured.
    pub(super) node_ids: FxHashMap<String, u32>,
    pub(super) pairs: FxHashSet<(u32, u32)>,
    pub(super) size: Option<u64>,
    pub(super) streams: Option<u64>,
    pub(super) op: Option<String>,
    pub(super) direction: Option<String>,
    pub(super) mtu: Option<u64>,
    pub(super) cpu_client: Mean,
    pub(super) cpu_agent: Mean,
    pub(super) cpu_host: bool,
    pub(super) retrans: Mean,
    pub(super) loss: Mean,
    pub(super) hists: Merged,
    pub(super) hist_missing: usize,
    pub(super) stored: StoredLat,
    pub(super) lat_kind: Option<String>,
    pub(super) errors: BTreeMap<String, u64>,
    pub(super) errors_seen: bool,
    pub(super) ok_requests: Option<u64>,
    pub(super) mtu_payload: Option<u64>,
    pub(super) mtu_iface: Option<String>,
    pub(super) mtu_encap: Option<String>,
    /// Concurrent flows: one direction of bidir cells.
    pub(super) of_bidir: bool,
    /// Concurrent flows: per cell with a figure, the overlap (%) and the
    /// start skew (s).
    pub(super) overlaps: Vec<f64>,
    pub(super) skews: Vec<Option<f64>>,
    /// Repeats without a figure.
    pub(super) failed: Vec<FailedRepeat>,
    /// An incast whose data left the receiver: why.
    pub(super) outcast: Option<String>,
}

impl Acc {
    pub(super) fn inst(&mut self, key: &str) -> &mut InstAcc {
        let i = match self.inst_at.get(key) {
            Some(&i) => i,
            None => {
                self.inst_at.insert(key.to_string(), self.insts.len());
                self.insts.push(InstAcc {
                    key: key.to_string(),
                    cells: Vec::new(),
                    values: Vec::new(),
                    ports: Vec::new(),
                    first: None,
                });
                self.insts.len() - 1
            }
        };
        &mut self.insts[i]
    }

    /// A cell of instance `inst` counted in the row.
    pub(super) fn add_cell(&mut self, inst: &str, cell: &str) {
        self.cells.push(cell.to_string());
        let n = self.cells.len();
        let x = self.inst(inst);
        x.first.get_or_insert(n);
        if !x.cells.iter().any(|c| c == cell) {
            x.cells.push(cell.to_string());
        }
    }

    pub(super) fn add_value(&mut self, inst: &str, v: f64) {
        self.values.push(v);
        self.inst(inst).values.push(v);
    }

    pub(super) fn add_port(&mut self, inst: &str, p: PortOf) {
        let x = self.inst(inst);
        if !x.ports.contains(&p) {
            x.ports.push(p);
        }
    }

    /// [`add_port`](Self::add_port) of `PortOf::Flows(flows, bidir)`, the
    /// flows copied only when the instance does not have them yet (a mesh
    /// pair's repeats all have the same).
    pub(super) fn add_port_flows(&mut self, inst: &str, flows: &[(String, String)], bidir: bool) {
        let x = self.inst(inst);
        let known = x
            .ports
            .iter()
            .any(|p| matches!(p, PortOf::Flows(f, b) if f == flows && *b == bidir));
        if !known {
            x.ports.push(PortOf::Flows(flows.to_vec(), bidir));
        }
    }

    pub(super) fn add_flows(&mut self, flows: &[(String, String)]) {
        for (a, b) in flows {
            let mut id = |n: &String| match self.node_ids.get(n) {
                Some(&k) => k,
                None => {
                    let k = self.node_ids.len() as u32;
                    self.node_ids.insert(n.clone(), k);
                    k
                }
            };
            let p = (id(a), id(b));
            self.pairs.insert(p);
        }
    }
}
