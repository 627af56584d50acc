//! A cell's flow results as stored measurements: each flow's records, and
//! for concurrent flows one aggregate per direction over their common
//! interval.

use super::errors::CellError;
use crate::drive::DriveResult;
use fabperf_store::{CellSpec, Measurement, Role};

/// A cell whose flows' measured intervals overlap for less than this
/// share of the longest one has no common interval to aggregate over.
pub const MIN_OVERLAP_PCT: f64 = 90.0;

/// Turn a cell's flow results into measurements, and for concurrent flows
/// one aggregate per direction over the flows' common interval.
///
/// Each flow counts once per direction: a bidirectional flow gives its
/// forward and its reverse record (its `bidir` total, their sum, is not
/// stored for a multi-flow cell). The aggregate of a direction is the bytes
/// every flow received inside the common interval — from the latest start
/// to the earliest end of the flows' measured intervals, cut with each
/// flow's progress counts — over that interval. A cell whose flows overlap
/// for less than [`MIN_OVERLAP_PCT`] of the longest interval, or a flow that
/// measured no interval, fails: its flows did not run together.
pub(super) fn measurements_of(
    cell: &CellSpec,
    flows: &[(usize, DriveResult)],
) -> Result<Vec<Measurement>, CellError> {
    let multi = cell.flows.len() > 1;
    let mut out = Vec::new();
    for (fi, res) in flows {
        let (src, dst) = &cell.flows[*fi];
        for r in &res.records {
            let role = if r.stream.is_some() {
                Role::Stream
            } else if multi {
                if r.direction.as_deref() == Some("bidir") {
                    continue;
                }
                Role::Flow
            } else {
                Role::Total
            };
            out.push(Measurement {
                role,
                src: Some(src.clone()),
                dst: Some(dst.clone()),
                record: r.clone(),
            });
        }
    }
    if !multi {
        return Ok(out);
    }
    // One aggregate per direction (and message size, for an engine that
    // ran several).
    let mut keys: Vec<(Option<String>, u64)> = Vec::new();
    for m in out.iter().filter(|m| m.role == Role::Flow) {
        let k = (m.record.direction.clone(), m.record.size);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut aggs = Vec::new();
    for (d, size) in keys {
        let of_dir: Vec<&Measurement> = out
            .iter()
            .filter(|m| m.role == Role::Flow && m.record.direction == d && m.record.size == size)
            .collect();
        aggs.push(aggregate(cell, &of_dir, d.as_deref())?);
    }
    out.extend(aggs);
    Ok(out)
}

/// What the runner stores for a cell whose flows returned `flows` (flow
/// index, the driving agent's result), or why the cell fails. The records
/// come from driving agents: hostile values give an error, never a panic
/// (fuzzed: `fuzz/fuzz_targets/flow_intervals.rs`).
pub fn cell_measurements(
    cell: &CellSpec,
    flows: &[(usize, DriveResult)],
) -> Result<Vec<Measurement>, String> {
    if flows.iter().any(|(fi, _)| *fi >= cell.flows.len()) {
        return Err("a result for a flow the cell does not have".into());
    }
    measurements_of(cell, flows).map_err(|e| e.msg)
}

/// The aggregate of one direction's flows over their common interval.
fn aggregate(
    cell: &CellSpec,
    flows: &[&Measurement],
    direction: Option<&str>,
) -> Result<Measurement, CellError> {
    let fail = |msg: String| CellError {
        msg,
        transient: true,
    };
    let dir = direction.unwrap_or("-");
    let who = |m: &Measurement| {
        format!(
            "{} -> {}",
            m.src.as_deref().unwrap_or("?"),
            m.dst.as_deref().unwrap_or("?")
        )
    };
    if flows.len() != cell.flows.len() {
        return Err(fail(format!(
            "{} of the cell's {} flows reported a {dir} figure",
            flows.len(),
            cell.flows.len()
        )));
    }
    let mut intervals = Vec::new();
    for m in flows {
        match (&m.record.interval, m.record.bw_gbps) {
            (Some(i), Some(_)) if i.check().is_empty() && i.len_s() > 0.0 => intervals.push(i),
            _ => {
                return Err(fail(format!(
                    "flow {} ({dir}) measured no interval, so the cell's flows have no common one",
                    who(m)
                )))
            }
        }
    }
    let (cs, ce, overlap) = fabperf_results::interval::common_interval(&intervals)
        .expect("a multi-flow cell has flows");
    let starts: Option<Vec<f64>> = intervals.iter().map(|i| i.sent_from_s).collect();
    let skew = starts.as_ref().map(|v| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        hi - lo
    });
    let skew_text = skew.map_or(String::new(), |s| {
        format!("; their senders started {:.1} ms apart", s * 1e3)
    });
    if overlap < MIN_OVERLAP_PCT {
        return Err(fail(format!(
            "the {} flows' measured intervals ({dir}) overlap for {overlap:.0} % of the longest, below {MIN_OVERLAP_PCT:.0} %{skew_text}: they did not run together, so no aggregate is given",
            flows.len()
        )));
    }
    // Each flow's bytes inside the common interval: from its progress
    // counts, or (a flow without them) its mean rate over the interval.
    let len = ce - cs;
    let mut bytes = 0f64;
    let mut estimated = 0;
    for (m, i) in flows.iter().zip(&intervals) {
        bytes += match &i.progress {
            Some(p) => p.bytes_between(cs, ce),
            None => {
                estimated += 1;
                m.record.bytes as f64 * len / i.len_s()
            }
        };
    }
    let first = &flows[0].record;
    let mut agg =
        fabperf_results::Record::new(&first.test, first.transport, first.size, flows.len() as u32);
    agg.op = first.op.clone();
    agg.direction = first.direction.clone();
    agg.set_throughput(bytes.round() as u64, len, None);
    agg.started_at = first.started_at.clone();
    agg.interval = Some(fabperf_results::Interval {
        start_s: cs,
        end_s: ce,
        sent_from_s: starts
            .as_ref()
            .map(|v| v.iter().copied().fold(f64::INFINITY, f64::min)),
        progress: None,
    });
    agg.flows = Some(fabperf_results::FlowSet {
        count: flows.len() as u32,
        overlap_pct: overlap.min(100.0),
        start_skew_s: skew,
    });
    agg.warn(fabperf_results::Warning::Aggregate {
        flows: flows.len() as u32,
        secs: len,
    });
    if estimated > 0 {
        agg.warn(fabperf_results::Warning::AggregateEstimated { flows: estimated });
    }
    let (src, dst) = match cell.pattern.as_str() {
        "incast" => (None, cell.flows.first().map(|f| f.1.clone())),
        _ => (None, None),
    };
    Ok(Measurement {
        role: Role::Aggregate,
        src,
        dst,
        record: agg,
    })
}
