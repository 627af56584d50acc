//! Building a report: one pass over the run's cells feeds the rows, the
//! incast and bisection entries and the mesh matrices; then the order of
//! the rows, the baseline differences and the verdicts.

use super::accumulate::Acc;
use super::baseline::{delta, dim_baseline};
use super::dims::dim_is;
use super::multi::add_multi;
use super::report::{Delta, FailedCell, Family, Report, Row, RunMeta};
use super::rows::{row_of, GroupKey};
use super::single::add_single;
use super::verdicts::verdicts;
use crate::data::{load_head, ReportError, RunData, Sample};
use crate::flows;
use fabperf_results::dims::text as dim_str;
use fabperf_run::summary;
use fabperf_store::{CellRow, CellState, Store};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Options of a report.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub run: Option<i64>,
    /// Overrides the plan's baseline path.
    pub baseline: Option<String>,
    /// Compare a row with the closest baseline row even when it differs in
    /// rate, streams, op or MTU, and say how (`--compare-unlike`). Without
    /// it such a row has no difference, and a note says why.
    pub unlike: bool,
}

/// Build the report of a run.
pub fn build(store: &Store, opts: &Options) -> Result<Report, ReportError> {
    let mut data = load_head(store, opts.run)?;
    // The mesh matrices are read in the same pass as the tables.
    let mut meshes: Vec<summary::MeshFeed> = summary::mesh_tests(store, data.run.id)?
        .iter()
        .map(|t| summary::MeshFeed::new(t))
        .collect();
    let (mut report, seen) = assemble(store, &mut data, &mut meshes, opts)?;
    // The mesh matrices, with the plan's rule per test.
    for feed in meshes {
        let test = feed.test().to_string();
        let rule = data
            .mesh_rules
            .get(&test)
            .map(|r| summary::Rule::new(r.kind, r.bw_fraction, r.lat_factor))
            .unwrap_or_default();
        match feed.finish(store, data.run.id, &rule) {
            Ok(a) => report.meshes.push(a),
            // A store that fails while the suspects' re-test templates are
            // read costs the matrix, not the whole report.
            Err(e) => report
                .notes
                .push(format!("mesh test {test}: no matrix: {e}")),
        }
    }
    report.verdicts = verdicts(&report, &data, &seen);
    Ok(report)
}

/// What the verdicts need of the cells besides the rows: the nodes their
/// flows name, and the cells of concurrent flows that finished.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) nodes: BTreeSet<String>,
    pub(super) done_multi: HashSet<String>,
}

/// Everything but the mesh analyses (which need the store) and verdicts,
/// read one cell at a time: what is kept is per row (a mesh's row keeps a
/// figure per cell and the statistics per pair, not the records), so a
/// mesh of a thousand nodes fits in memory.
pub(super) fn assemble(
    store: &Store,
    data: &mut RunData,
    meshes: &mut [summary::MeshFeed],
    opts: &Options,
) -> Result<(Report, Seen), ReportError> {
    let mut notes = Vec::new();
    let mut groups: BTreeMap<GroupKey, (CellRow, Acc)> = BTreeMap::new();
    let mut order: BTreeMap<String, usize> = BTreeMap::new();
    let mut incasts = Vec::new();
    let mut bisections = Vec::new();
    let mut unknown_kinds = BTreeSet::new();
    let mut seen = Seen::default();
    let mut failed: Vec<FailedCell> = Vec::new();
    let (mut done, mut failed_n, mut pending) = (0usize, 0usize, 0usize);
    // Cells of concurrent flows are few: they are taken last, once every
    // record has said which links are virtual (their port rates then hold).
    let mut multis: Vec<(usize, CellRow, Vec<Sample>, Family)> = Vec::new();
    crate::data::each_cell_feeding(store, data, meshes, &mut |_, cell, samples| {
        let s = &cell.spec;
        for (a, b) in &s.flows {
            for n in [a, b] {
                if !seen.nodes.contains(n) {
                    seen.nodes.insert(n.clone());
                }
            }
        }
        match cell.state {
            CellState::Done => done += 1,
            CellState::Failed => {
                failed_n += 1;
                failed.push(FailedCell {
                    cell: s.cell_id.clone(),
                    test: s.test.clone(),
                    path: s.path.clone(),
                    pattern: s.pattern.clone(),
                    flows: s.flows.clone(),
                    // On one line (a stored reason may carry line breaks and
                    // runs of spaces).
                    error: flows::one_line(cell.error.as_deref().unwrap_or_default()),
                });
            }
            CellState::Pending => {
                pending += 1;
                return Ok(());
            }
        }
        if !matches!(
            s.pattern.as_str(),
            "pairs" | "mesh" | "incast" | "bisection"
        ) {
            return Ok(());
        }
        // A failed cell of concurrent flows is a repeat of its rows without
        // a figure; other failed cells are listed on their own.
        let multi = flows::is_multi(&s.pattern);
        if cell.state == CellState::Failed && !multi {
            return Ok(());
        }
        let Some(family) = Family::of_kind(&s.kind) else {
            if cell.state == CellState::Done {
                unknown_kinds.insert(s.kind.clone());
            }
            return Ok(());
        };
        if multi {
            if cell.state == CellState::Done {
                seen.done_multi.insert(s.cell_id.clone());
            }
            let n = order.len();
            let idx = *order.entry(s.test.clone()).or_insert(n);
            multis.push((idx, cell, samples, family));
            return Ok(());
        }
        add_single(&cell, &samples, family, &mut order, &mut groups, &mut notes);
        Ok(())
    })?;
    for (idx, cell, samples, family) in &multis {
        add_multi(
            data,
            cell,
            samples,
            *family,
            *idx,
            &mut groups,
            &mut incasts,
            &mut bisections,
        );
    }
    drop(multis);
    // Number the cuts of each bisection test: the same flows are one cut.
    let mut cuts: Vec<(String, String, String, String)> = Vec::new();
    for b in &mut bisections {
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
    if !unknown_kinds.is_empty() {
        notes.push(format!(
            "cells of test kinds this report does not know are left out: {}",
            unknown_kinds.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let mut rows = Vec::new();
    for ((_, _, _, scope_key, first, _), (cell, acc)) in groups {
        rows.push(row_of(data, &cell, scope_key, first, acc));
    }
    // Within a test: sizes ascending, then the other dims, paths in the
    // order first seen, baseline first.
    let baseline_from = if opts.baseline.is_some() {
        Some("--baseline")
    } else if data.plan_baseline.is_some() {
        Some("plan")
    } else {
        None
    };
    let baseline = opts.baseline.clone().or(data.plan_baseline.clone());
    let paths_seen: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for r in &rows {
            if !v.contains(&r.path) {
                v.push(r.path.clone());
            }
        }
        v
    };
    let by_dim = baseline.as_deref().and_then(dim_baseline);
    if let Some((key, val)) = by_dim {
        if !rows.iter().any(|r| dim_is(&r.dims, key, val)) {
            let mut seen: Vec<String> = rows.iter().filter_map(|r| dim_str(&r.dims, key)).collect();
            seen.sort();
            seen.dedup();
            let msg = format!(
                "no cell of run {} has {key} = {val}; values measured: {}",
                data.run.id,
                if seen.is_empty() {
                    "none (no such dimension in this run)".to_string()
                } else {
                    seen.join(", ")
                }
            );
            if opts.baseline.is_some() {
                return Err(ReportError::Usage(format!(
                    "{msg}; give --baseline a path or KEY=VALUE of a measured dimension"
                )));
            }
            notes.push(format!("{msg}; no differences are computed"));
        }
    } else if let Some(b) = &baseline {
        if !paths_seen.contains(b) {
            let msg = format!(
                "the baseline path {b:?} has no measurement in run {}; paths measured: {}",
                data.run.id,
                if paths_seen.is_empty() {
                    "none".to_string()
                } else {
                    paths_seen.join(", ")
                }
            );
            if opts.baseline.is_some() {
                return Err(ReportError::Usage(format!(
                    "{msg}; give one of them to --baseline"
                )));
            }
            notes.push(format!("{msg}; no differences are computed"));
        }
    }
    let path_rank = |p: &str| {
        if Some(p) == baseline.as_deref() {
            0
        } else {
            1 + paths_seen.iter().position(|x| x == p).unwrap_or(0)
        }
    };
    let test_rank: BTreeMap<String, usize> = order;
    // Under a KEY=VALUE baseline its rows come first, then the others in
    // the order of their dimension's values (numerically where they are
    // numbers: 0, 50, 100, 200 rules).
    let variant_rank = |r: &Row| {
        let first = by_dim.is_some_and(|(k, v)| dim_is(&r.dims, k, v));
        let key = by_dim.map(|(k, _)| k);
        let num = key
            .and_then(|k| r.dims.get(k))
            .and_then(Value::as_f64)
            .map(|x| (x * 1000.0) as i64);
        (!first, num, r.variant.clone())
    };
    rows.sort_by(|a, b| {
        (
            a.family,
            test_rank.get(&a.test),
            a.size,
            a.op.clone(),
            a.streams,
            a.direction.clone(),
            a.rate.clone(),
            a.mtu,
            a.scope_key.clone(),
            path_rank(&a.path),
            variant_rank(a),
        )
            .cmp(&(
                b.family,
                test_rank.get(&b.test),
                b.size,
                b.op.clone(),
                b.streams,
                b.direction.clone(),
                b.rate.clone(),
                b.mtu,
                b.scope_key.clone(),
                path_rank(&b.path),
                variant_rank(b),
            ))
    });
    let description = toml::from_str::<toml::Value>(&data.run.plan_text)
        .ok()
        .and_then(|v| v.get("description")?.as_str().map(str::to_string));
    notes.append(&mut data.notes);
    let mut report = Report {
        run: RunMeta {
            id: data.run.id,
            plan: data.run.plan_name.clone(),
            description,
            started_at: data.run.started_at.clone(),
            ended_at: data.run.ended_at.clone(),
            fabperf_version: data.run.fabperf_version.clone(),
            cells_done: done,
            cells_failed: failed_n,
            cells_pending: pending,
        },
        baseline: baseline.clone(),
        baseline_from,
        rows,
        meshes: Vec::new(),
        incasts,
        bisections,
        agents: data.agents.clone(),
        findings: data.findings.clone(),
        verdicts: Vec::new(),
        failed,
        notes,
        gates: Vec::new(),
    };
    if let Some(b) = &baseline {
        let deltas: Vec<(Option<Delta>, Option<String>)> = report
            .rows
            .iter()
            .map(|r| match by_dim {
                Some((key, val)) => {
                    if dim_is(&r.dims, key, val) {
                        return (None, None);
                    }
                    let Some(base) = report.counterpart_dim(r, key, val) else {
                        return (None, None);
                    };
                    let mut d = delta(r, base);
                    d.path = b.clone();
                    (Some(d), None)
                }
                None => {
                    if &r.path == b {
                        return (None, None);
                    }
                    match report.matching(r, b, true) {
                        Some((base, unlike)) if unlike.is_empty() => (Some(delta(r, base)), None),
                        Some((base, unlike)) if opts.unlike => {
                            let why = format!(
                                "compared with an unlike row on {b} ({}; --compare-unlike): the \
                                 difference mixes the path with that",
                                unlike.join(", ")
                            );
                            let mut d = delta(r, base);
                            d.unlike = unlike;
                            // An unlike difference is shown, never judged.
                            d.within_noise = None;
                            d.welch = None;
                            (Some(d), Some(why))
                        }
                        Some((_, unlike)) => (
                            None,
                            Some(format!(
                                "no like row on {b} to compare with (the closest differs: {}); \
                                 --compare-unlike shows that difference, marked",
                                unlike.join(", ")
                            )),
                        ),
                        None => (None, None),
                    }
                }
            })
            .collect();
        for (r, (d, why)) in report.rows.iter_mut().zip(deltas) {
            r.base = d;
            r.warnings.extend(why);
        }
    }
    Ok((report, seen))
}
