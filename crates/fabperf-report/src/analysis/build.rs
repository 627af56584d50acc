//! Building a report: one pass over the run's cells feeds the rows, the
//! incast and bisection entries and the mesh matrices; then the order of
//! the rows, the baseline differences and the verdicts.

use super::accumulate::Acc;
use super::baseline::{check_measured, set_differences};
use super::multi::{add_multi, number_cuts};
use super::report::{FailedCell, Family, Report, RunMeta};
use super::rows::{row_of, sort_rows, GroupKey};
use super::single::add_single;
use super::verdicts::verdicts;
use crate::data::{load_head, ReportError, RunData, Sample};
use crate::flows;
use fabperf_run::summary;
use fabperf_store::{CellRow, CellState, Store};
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
    summary::explain_across(&mut report.meshes);
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
            multis.push((idx, cell.clone(), samples.to_vec(), family));
            return Ok(());
        }
        add_single(cell, samples, family, &mut order, &mut groups, &mut notes);
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
    number_cuts(&mut bisections);
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
    check_measured(
        &rows,
        baseline.as_deref(),
        &paths_seen,
        data.run.id,
        opts.baseline.is_some(),
        &mut notes,
    )?;
    sort_rows(&mut rows, &order, baseline.as_deref(), &paths_seen);
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
        set_differences(&mut report, b, opts.unlike);
    }
    Ok((report, seen))
}
