//! Concurrent flows — the senders of an incast, the flows of a bisection
//! cut — one direction at a time.
//!
//! `fabperf run` stores, for a cell with concurrent flows, each flow's
//! record per direction (`forward`: the flow's client sends; `reverse`: its
//! agent end sends back; a `bidir` flow is its two directions, never their
//! total as well) and **one aggregate per direction**, taken over the flows'
//! common interval and carrying `flows` (count, overlap, start skew). The
//! report judges each direction on its own: its aggregate against the link
//! that carries that direction one way, Jain's index over that direction's
//! flows only, each flow counted once. A direction without a usable
//! aggregate — its cell failed (the flows overlapped too little), or the
//! record is missing, has no figure, or has no common interval — is a
//! failure with its reason, never a figure.

use crate::data::Sample;
use crate::stats;
use fabperf_store::{CellRow, CellSpec, CellState, Role};
use serde::Serialize;
use serde_json::Value;

/// One flow's part of its direction's aggregate.
#[derive(Debug, Clone, Serialize)]
pub struct FlowShare {
    /// Where this direction's data left from and went to: for `forward`
    /// the flow's client and agent end, for `reverse` the other way round.
    pub src: String,
    pub dst: String,
    /// Gbit/s over the cell's common interval (from the flow's progress
    /// counts), or over the flow's own interval when it has none.
    pub gbps: f64,
    /// Fraction of the sum over this direction's flows.
    pub share: f64,
}

/// One direction of a cell with concurrent flows (or, for a failed cell,
/// the cell's planned direction with the reason).
#[derive(Debug, Clone, Serialize)]
pub struct Leg {
    /// `forward` or `reverse`; a failed cell's planned direction (`bidir`
    /// when it was to measure both).
    pub direction: String,
    /// The cell measured both directions at once (a `bidir` test): this is
    /// one of its two.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub of_bidir: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// This direction's flows, each once (none when the direction failed).
    pub flows: Vec<FlowShare>,
    /// Flows whose share is over their own interval (no progress counts).
    #[serde(skip_serializing_if = "is_zero")]
    pub own_interval_flows: usize,
    /// The stored aggregate over the common interval, Gbit/s.
    pub aggregate_gbps: Option<f64>,
    /// Jain's index over this direction's flows.
    pub jain: Option<f64>,
    /// The common interval in % of the longest flow's, and how far apart
    /// the senders started (from the aggregate's `flows`).
    pub overlap_pct: Option<f64>,
    pub start_skew_s: Option<f64>,
    /// Length of the common interval, seconds.
    pub common_s: Option<f64>,
    /// The one-way port rate that carries this direction: an incast's
    /// receiver port (or its peers' sum if smaller), a cut's flows' sum.
    pub port_rate_gbps: Option<f64>,
    pub pct_port: Option<f64>,
    /// The aggregate is above that port rate: a finding, not a share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_finding: Option<String>,
    /// Why this direction has no figure (no usable aggregate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// What else limits it (flows missing from the fairness figures).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// An incast whose data left the receiver (run `reverse`, or an RDMA
    /// read pulling from it; the plan check refuses both now, an older
    /// store may hold one): why it is an outcast.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcast: Option<String>,
    /// This direction's data went from the flows' agent ends to their
    /// clients (`reverse`, or an RDMA read): out of an incast's receiver.
    #[serde(skip)]
    pub to_clients: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Leg {
    fn empty(direction: &str, of_bidir: bool, size: Option<u64>) -> Leg {
        Leg {
            direction: direction.to_string(),
            of_bidir,
            size,
            flows: Vec::new(),
            own_interval_flows: 0,
            aggregate_gbps: None,
            jain: None,
            overlap_pct: None,
            start_skew_s: None,
            common_s: None,
            port_rate_gbps: None,
            pct_port: None,
            port_finding: None,
            failed: None,
            note: None,
            outcast: None,
            to_clients: false,
        }
    }

    /// Plain `forward` (no direction worth naming).
    pub fn is_plain(&self) -> bool {
        self.direction == "forward" && !self.of_bidir && self.outcast.is_none()
    }

    /// `forward`, `reverse`, `forward of bidir`, `reverse (outcast)`, ….
    pub fn direction_words(&self) -> String {
        let d = if self.of_bidir && self.direction != "bidir" {
            format!("{} of bidir", self.direction)
        } else {
            self.direction.clone()
        };
        if self.outcast.is_some() {
            format!("{d} (outcast)")
        } else {
            d
        }
    }

    /// The smallest share relative to the fair one (1 = equal shares).
    pub fn min_share(&self) -> Option<f64> {
        let k = self.flows.len() as f64;
        self.flows
            .iter()
            .map(|f| f.share * k)
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))))
    }
}

/// Is this pattern one of concurrent flows with aggregates?
pub fn is_multi(pattern: &str) -> bool {
    matches!(pattern, "incast" | "bisection")
}

/// The direction a cell was planned with (`forward` when it names none).
pub fn planned_direction(s: &CellSpec) -> String {
    [&s.dims, &s.params]
        .iter()
        .find_map(|v| v.get("direction").and_then(Value::as_str))
        .unwrap_or("forward")
        .to_string()
}

/// The directions a planned direction measures, in order.
pub fn directions_of(planned: &str) -> Vec<String> {
    match planned {
        "bidir" => vec!["forward".into(), "reverse".into()],
        d => vec![d.to_string()],
    }
}

/// A stored failure reason on one line (runs of spaces and line breaks
/// folded).
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The direction a record of a cell with concurrent flows measured: the
/// one it names; one that names none, the cell's planned direction (older
/// writers named none for a one-way test), or `None` in a `bidir` cell,
/// where it could be either.
pub fn record_direction(s: &CellSpec, m: &Sample) -> Option<String> {
    match &m.rec.direction {
        Some(d) => Some(d.clone()),
        None => match planned_direction(s) {
            p if p == "bidir" => None,
            p => Some(p),
        },
    }
}

/// The directions of a cell with concurrent flows, each with its
/// aggregate, its flows' shares and Jain's index, or why it has none. A
/// failed cell gives one leg with its error. Ports are left to the caller
/// (they need the agents' inventories).
pub fn legs_of(cell: &CellRow, samples: &[Sample]) -> Vec<Leg> {
    let mut legs = legs(cell, samples);
    if let Some(why) = outcast(cell, samples) {
        for l in &mut legs {
            l.outcast = Some(why.clone());
        }
    }
    legs
}

/// Is the data of an RDMA read: it flows from the agent end to the client.
fn is_read(s: &CellSpec, samples: &[Sample]) -> bool {
    [&s.dims, &s.params]
        .iter()
        .any(|v| v.get("op").and_then(Value::as_str) == Some("read"))
        || samples
            .iter()
            .any(|m| m.role == Role::Flow && m.rec.op.as_deref() == Some("read"))
}

/// Why an incast cell is an outcast (its data left the receiver).
fn outcast(cell: &CellRow, samples: &[Sample]) -> Option<String> {
    let s = &cell.spec;
    if s.pattern != "incast" {
        return None;
    }
    if planned_direction(s) == "reverse" {
        return Some(
            "its direction is reverse: the receiver sent to the senders, so this is an \
             outcast, not an incast"
                .into(),
        );
    }
    is_read(s, samples).then(|| {
        "an RDMA read: the senders pulled from the receiver, so this is an outcast, not an \
         incast"
            .into()
    })
}

fn legs(cell: &CellRow, samples: &[Sample]) -> Vec<Leg> {
    let s = &cell.spec;
    let planned = planned_direction(s);
    let bidir = planned == "bidir";
    match cell.state {
        CellState::Done => {}
        CellState::Failed => {
            let mut l = Leg::empty(&planned, bidir, None);
            l.failed = Some(one_line(
                cell.error
                    .as_deref()
                    .unwrap_or("the cell failed (no reason stored)"),
            ));
            return vec![l];
        }
        _ => return Vec::new(),
    }
    // A flow's `bidir` total (stored by older writers next to its two
    // directions) would count the flow twice: never used. In a cell that
    // measured both directions a record that names none could be either:
    // it is not attributed, and each direction says so.
    let undirected = |m: &&Sample| record_direction(s, m).is_none();
    let dir_of = |m: &Sample| record_direction(s, m).unwrap_or_default();
    let flows: Vec<&Sample> = samples
        .iter()
        .filter(|m| m.role == Role::Flow && dir_of(m) != "bidir")
        .filter(|m| !undirected(m))
        .collect();
    let aggs: Vec<&Sample> = samples
        .iter()
        .filter(|m| m.role == Role::Aggregate)
        .filter(|m| !undirected(m))
        .collect();
    let unnamed = Unnamed {
        flows: samples
            .iter()
            .filter(|m| m.role == Role::Flow && undirected(m))
            .count(),
        aggregates: samples
            .iter()
            .filter(|m| m.role == Role::Aggregate && undirected(m))
            .count(),
        old_total: false,
        read: is_read(s, samples),
    };
    // One leg per direction and message size: the planned directions
    // first, then any other a record names.
    let mut keys: Vec<(String, Option<u64>)> = Vec::new();
    let mut dirs = directions_of(&planned);
    for m in aggs.iter().chain(&flows) {
        let d = dir_of(m);
        if d != "bidir" && !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    for d in &dirs {
        let mut sizes: Vec<Option<u64>> = Vec::new();
        for m in aggs.iter().chain(&flows).filter(|m| dir_of(m) == *d) {
            if !sizes.contains(&m.rec.size) {
                sizes.push(m.rec.size);
            }
        }
        if sizes.len() <= 1 {
            keys.push((d.clone(), sizes.first().copied().flatten()));
        } else {
            keys.extend(sizes.into_iter().map(|z| (d.clone(), z)));
        }
    }
    let unnamed = Unnamed {
        old_total: aggs.iter().any(|a| dir_of(a) == "bidir"),
        ..unnamed
    };
    keys.into_iter()
        .map(|(d, size)| {
            let same = |m: &&&Sample| dir_of(m) == d && (size.is_none() || m.rec.size == size);
            let fl: Vec<&Sample> = flows.iter().filter(same).copied().collect();
            let ag: Vec<&Sample> = aggs.iter().filter(same).copied().collect();
            leg(s, &d, bidir, size, &fl, &ag, unnamed)
        })
        .collect()
}

/// What holds for a cell's records as a whole: records of a bidir cell
/// that name no direction, an older writer's total of both directions,
/// RDMA read.
#[derive(Clone, Copy)]
struct Unnamed {
    flows: usize,
    aggregates: usize,
    old_total: bool,
    /// RDMA read: each direction's data went from the agent end to the
    /// client.
    read: bool,
}

fn leg(
    s: &CellSpec,
    d: &str,
    bidir: bool,
    size: Option<u64>,
    flows: &[&Sample],
    aggs: &[&Sample],
    unnamed: Unnamed,
) -> Leg {
    let mut l = Leg::empty(d, bidir, size);
    l.to_clients = (d == "reverse") != unnamed.read;
    let n = s.flows.len();
    let a = match aggs {
        [] => {
            l.failed = Some(if unnamed.aggregates > 0 {
                format!(
                    "no {d} aggregate: {} aggregate(s) of this bidir cell name no direction, \
                     so which one measured {d} is unknown",
                    unnamed.aggregates
                )
            } else if unnamed.old_total {
                format!(
                    "no {d} aggregate: the cell's one aggregate is of both directions at once \
                     (an older fabperf summed every flow record), so no direction has a figure; \
                     run the cell again"
                )
            } else {
                format!("no {d} aggregate stored")
            });
            return l;
        }
        [a] => a,
        _ => {
            l.failed = Some(format!(
                "{} {d} aggregates stored for one direction: which one holds is unknown",
                aggs.len()
            ));
            return l;
        }
    };
    if let Some(f) = &a.rec.flows {
        l.overlap_pct = f.overlap_pct;
        l.start_skew_s = f.start_skew_s;
    }
    l.common_s = a.rec.interval.as_ref().map(|i| i.len_s());
    let min = fabperf_run::exec::MIN_OVERLAP_PCT;
    let why = match (&a.rec.flows, a.rec.bw_gbps) {
        (_, None) => Some(format!("the {d} aggregate has no bandwidth figure")),
        (None, _) => Some(format!(
            "the {d} aggregate carries no common interval (`flows`): an older fabperf summed \
             the flows over the longest one, which overstates it when they did not run \
             together; run the cell again"
        )),
        (Some(f), _) => match (f.overlap_pct, f.count) {
            (None, _) => Some(format!(
                "the {d} aggregate does not say how its flows overlapped"
            )),
            (Some(p), _) if p < min => Some(format!(
                "the {d} flows overlap for {p:.0} % of the longest interval, below {min:.0} %{}: \
                 they did not run together",
                f.start_skew_s
                    .map(|k| format!(" (their senders started {:.1} ms apart)", k * 1e3))
                    .unwrap_or_default()
            )),
            (_, Some(c)) if c as usize != n => Some(format!(
                "the {d} aggregate counts {c} flows; the cell has {n}"
            )),
            _ => None,
        },
    };
    if let Some(w) = why {
        l.failed = Some(w);
        return l;
    }
    l.aggregate_gbps = a.rec.bw_gbps;
    // Each flow once: a (client, agent) flow with two records of one
    // direction is not a share of anything.
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut once: Vec<&Sample> = Vec::new();
    let mut twice: Vec<String> = Vec::new();
    for f in flows {
        let k = (
            f.src.clone().unwrap_or_default(),
            f.dst.clone().unwrap_or_default(),
        );
        if seen.contains(&k) {
            let w = format!("{} -> {}", k.0, k.1);
            if !twice.contains(&w) {
                twice.push(w);
            }
        } else {
            seen.push(k);
            once.push(f);
        }
    }
    if !twice.is_empty() {
        l.note = Some(format!(
            "flow(s) {} have more than one {d} record: no shares and no fairness",
            twice.join(", ")
        ));
        return l;
    }
    let strangers: Vec<String> = seen
        .iter()
        .filter(|k| !s.flows.contains(k))
        .map(|(c, t)| format!("{c} -> {t}"))
        .collect();
    if !strangers.is_empty() {
        l.note = Some(format!(
            "{d} record(s) of flow(s) the cell does not have ({}): no shares and no fairness",
            strangers.join(", ")
        ));
        return l;
    }
    if unnamed.flows > 0 {
        l.note = Some(format!(
            "{} flow record(s) of this bidir cell name no direction: no shares and no fairness",
            unnamed.flows
        ));
        return l;
    }
    // Each flow's rate over the common interval, so that the shares add up
    // to the aggregate; a flow without progress counts: its own rate.
    let common = a
        .rec
        .interval
        .as_ref()
        .filter(|i| i.len_s() > 0.0)
        .map(|i| (i.start_s, i.end_s));
    let mut rates: Vec<(String, String, f64)> = Vec::new();
    let mut missing = 0;
    for f in &once {
        let over_common = common.zip(f.rec.interval.as_ref().and_then(|i| i.progress.as_ref()));
        let g = match over_common {
            Some(((cs, ce), p)) => Some(p.bytes_between(cs, ce) * 8.0 / (ce - cs) / 1e9),
            None => {
                l.own_interval_flows += 1;
                f.rec.bw_gbps
            }
        };
        let (c, t) = (
            f.src.clone().unwrap_or_default(),
            f.dst.clone().unwrap_or_default(),
        );
        match g.filter(|g| g.is_finite() && *g >= 0.0) {
            Some(g) if l.to_clients => rates.push((t, c, g)),
            Some(g) => rates.push((c, t, g)),
            None => missing += 1,
        }
    }
    if rates.len() != n || missing > 0 {
        l.note = Some(format!(
            "{} of the cell's {n} flows have a {d} figure: no fairness over the others",
            rates.len()
        ));
        return l;
    }
    let sum: f64 = rates.iter().map(|r| r.2).sum();
    l.jain = stats::jain(&rates.iter().map(|r| r.2).collect::<Vec<_>>());
    l.flows = rates
        .into_iter()
        .map(|(src, dst, gbps)| FlowShare {
            src,
            dst,
            gbps,
            share: if sum > 0.0 { gbps / sum } else { 0.0 },
        })
        .collect();
    l
}
