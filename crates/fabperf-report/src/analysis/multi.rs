//! Cells of concurrent flows (incast, bisection): one entry and one row
//! group per direction, and the numbering of bisection cuts.

use super::accumulate::Acc;
use super::dims::dim_u64;
use super::ports::{cell_port, set_port, PortOf};
use super::report::{Bisection, FailedRepeat, Family, Incast};
use super::rows::{instance_of, GroupKey};
use crate::data::{RunData, Sample};
use crate::flows::{self, Leg};
use fabperf_results::dims::text as dim_str;
use fabperf_store::{CellRow, CellState, Role};
use std::collections::BTreeMap;

/// A cell of concurrent flows (incast, bisection): one row group and one
/// table entry per direction, the figure that direction's aggregate; a
/// direction (or a failed cell) without a usable aggregate is a repeat
/// without a figure, with its reason.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_multi(
    data: &RunData,
    cell: &CellRow,
    samples: &[Sample],
    family: Family,
    idx: usize,
    groups: &mut BTreeMap<GroupKey, (CellRow, Acc)>,
    incasts: &mut Vec<Incast>,
    bisections: &mut Vec<Bisection>,
) {
    let s = &cell.spec;
    let (scope_key, first, inst) = instance_of(s);
    // One way: each direction is carried by the link one way.
    let port = cell_port(data, cell, None);
    let legs: Vec<Leg> = flows::legs_of(cell, samples)
        .into_iter()
        .map(|mut l| {
            set_port(&mut l, port);
            l
        })
        .collect();
    // The flows' own test settings (an aggregate's `streams` counts flows).
    let flow_rec = samples
        .iter()
        .find(|m| m.role == Role::Flow)
        .map(|m| &m.rec);
    for l in &legs {
        match s.pattern.as_str() {
            "incast" => incasts.push(Incast {
                test: s.test.clone(),
                path: s.path.clone(),
                receiver: s.flows.first().map(|f| f.1.clone()).unwrap_or_default(),
                repeat: s.repeat,
                cell: s.cell_id.clone(),
                dims: s.dims.clone(),
                cell_flows: s.flows.clone(),
                leg: l.clone(),
            }),
            _ => bisections.push(Bisection {
                test: s.test.clone(),
                path: s.path.clone(),
                cut: 0,
                repeat: s.repeat,
                cell: s.cell_id.clone(),
                dims: s.dims.clone(),
                cell_flows: s.flows.clone(),
                leg: l.clone(),
            }),
        }
        // A message size splits a direction's rows only when the cell
        // measured several (a failed cell, which has none, joins the row of
        // the one size its direction has).
        let split_size = l.size.filter(|_| {
            legs.iter()
                .any(|o| o.direction == l.direction && o.size != l.size)
        });
        // A failed cell stands for each direction it was to measure.
        let dirs = if cell.state == CellState::Failed {
            flows::directions_of(&l.direction)
        } else {
            vec![l.direction.clone()]
        };
        for d in dirs {
            let key = (
                idx,
                s.dims.to_string(),
                s.path.clone(),
                format!("{scope_key}|{d}"),
                first.clone(),
                format!(
                    "{d}|{}",
                    split_size.map(|z| z.to_string()).unwrap_or_default()
                ),
            );
            let (_, acc) = groups
                .entry(key)
                .or_insert_with(|| (cell.clone(), Acc::default()));
            acc.add_flows(&s.flows);
            acc.size = acc
                .size
                .or(dim_u64(&s.dims, "size"))
                .or(l.size)
                .or(flow_rec.and_then(|r| r.size));
            acc.streams = acc
                .streams
                .or(dim_u64(&s.dims, "streams"))
                .or(flow_rec.and_then(|r| r.streams));
            acc.op = acc
                .op
                .clone()
                .or(dim_str(&s.dims, "op"))
                .or(flow_rec.and_then(|r| r.op.clone()));
            acc.direction = Some(d.clone());
            acc.of_bidir = l.of_bidir;
            if acc.outcast.is_none() {
                acc.outcast = l.outcast.clone();
            }
            acc.mtu = acc.mtu.or(dim_u64(&s.dims, "mtu"));
            acc.add_port(&inst, PortOf::Known(port));
            match (l.aggregate_gbps, &l.failed) {
                (Some(g), None) if family != Family::Mtu => {
                    acc.add_cell(&inst, &s.cell_id);
                    acc.add_value(&inst, g);
                    if let Some(o) = l.overlap_pct {
                        acc.overlaps.push(o);
                        acc.skews.push(l.start_skew_s);
                    }
                }
                _ => acc.failed.push(FailedRepeat {
                    cell: s.cell_id.clone(),
                    repeat: s.repeat,
                    instance: inst.clone(),
                    reason: l.failed.clone().unwrap_or_else(|| "no figure".to_string()),
                }),
            }
        }
    }
}

/// Number the cuts of each bisection test: the same flows are one cut.
pub(super) fn number_cuts(bisections: &mut [Bisection]) {
    let mut cuts: Vec<(String, String, String, String)> = Vec::new();
    for b in bisections {
        let mut f: Vec<String> = b
            .cell_flows
            .iter()
            .map(|(a, c)| format!("{a}→{c}"))
            .collect();
        f.sort();
        let key = (
            b.test.clone(),
            b.path.clone(),
            b.dims.to_string(),
            f.join(", "),
        );
        let same =
            |k: &(String, String, String, String)| k.0 == key.0 && k.1 == key.1 && k.2 == key.2;
        b.cut = match cuts.iter().position(|k| *k == key) {
            Some(_) => {
                cuts.iter()
                    .filter(|k| same(k))
                    .position(|k| *k == key)
                    .unwrap_or(0)
                    + 1
            }
            None => {
                let n = cuts.iter().filter(|k| same(k)).count() + 1;
                cuts.push(key);
                n
            }
        };
    }
}
