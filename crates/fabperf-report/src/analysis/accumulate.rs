//! A row as its cells are read: running means and what is kept per row
//! and per pattern instance, not the records.

use super::latency::StoredLat;
use super::ports::PortOf;
use super::report::FailedRepeat;
use crate::hist::Merged;
use fabperf_run::summary::Names;
use fabperf_store::CellIds;
use rustc_hash::{FxBuildHasher, FxHashSet};
use std::collections::BTreeMap;
use std::hash::BuildHasher;

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
    pub(super) cells: CellIds,
    pub(super) values: Vec<f64>,
    pub(super) ports: Vec<PortOf>,
    /// When its first cell came (instances are listed in that order).
    pub(super) first: Option<usize>,
}

impl InstAcc {
    /// Most instances have one port bound: room for one, not the four a
    /// vector starts with (a million instances in a mesh row).
    fn push_port(&mut self, p: PortOf) {
        if self.ports.is_empty() {
            self.ports.reserve_exact(1);
        }
        self.ports.push(p);
    }
}

#[derive(Default)]
pub(super) struct Acc {
    pub(super) cells: CellIds,
    /// The figure of each cell with one, in run order.
    pub(super) values: Vec<f64>,
    /// The instances (indices into `insts`) by the hash of their key: a
    /// mesh row has a million, whose keys are not kept twice.
    pub(super) inst_at: hashbrown::HashTable<u32>,
    pub(super) insts: Vec<InstAcc>,
    /// Nodes by number, and the (sender, receiver) pairs measured.
    pub(super) nodes: Names,
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
        let hash = FxBuildHasher.hash_one(key);
        let insts = &mut self.insts;
        let i = match self.inst_at.find(hash, |&i| insts[i as usize].key == key) {
            Some(&i) => i as usize,
            None => {
                let i = insts.len();
                insts.push(InstAcc {
                    key: key.to_string(),
                    cells: CellIds::new(),
                    values: Vec::new(),
                    ports: Vec::new(),
                    first: None,
                });
                let n = u32::try_from(i).expect("fewer than 2^32 instances in a row");
                self.inst_at.insert_unique(hash, n, |&j| {
                    FxBuildHasher.hash_one(insts[j as usize].key.as_str())
                });
                i
            }
        };
        &mut insts[i]
    }

    /// A cell of instance `inst` counted in the row.
    pub(super) fn add_cell(&mut self, inst: &str, cell: &str) {
        self.cells.push(cell);
        let n = self.cells.len();
        let x = self.inst(inst);
        x.first.get_or_insert(n);
        if !x.cells.contains(cell) {
            x.cells.push(cell);
        }
    }

    pub(super) fn add_value(&mut self, inst: &str, v: f64) {
        self.values.push(v);
        self.inst(inst).values.push(v);
    }

    pub(super) fn add_port(&mut self, inst: &str, p: PortOf) {
        let x = self.inst(inst);
        if !x.ports.contains(&p) {
            x.push_port(p);
        }
    }

    /// [`add_port`](Self::add_port) of a cell's flows, kept as node
    /// numbers (a mesh pair's repeats all have the same: kept once).
    pub(super) fn add_port_flows(&mut self, inst: &str, flows: &[(String, String)], bidir: bool) {
        let ids: Vec<(u32, u32)> = flows
            .iter()
            .map(|(a, b)| (self.nodes.id(a), self.nodes.id(b)))
            .collect();
        let x = self.inst(inst);
        let known = x
            .ports
            .iter()
            .any(|p| matches!(p, PortOf::Flows(f, b) if **f == *ids && *b == bidir));
        if !known {
            x.push_port(PortOf::Flows(ids.into_boxed_slice(), bidir));
        }
    }

    pub(super) fn add_flows(&mut self, flows: &[(String, String)]) {
        for (a, b) in flows {
            let p = (self.nodes.id(a), self.nodes.id(b));
            self.pairs.insert(p);
        }
    }
}
