//! Pending cells batch by batch: each batch's policy step, environment,
//! flows and restore, the commit of every cell, the retries with their
//! back-off, the ETA and where the time went.

use super::aggregate::measurements_of;
use super::errors::RunError;
use super::flows::CellResult;
use super::labels::{cell_label, headline};
use super::signals::interrupted;
use super::Exec;
use crate::plan::Kind;
use fabperf_store::{Attempt, CellSpec};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Where one batch's time went (seconds).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BatchTiming {
    /// Policy command, tuning, sessions opened and flows set up, to the
    /// first `go`.
    pub(super) setup_s: f64,
    /// The first `go` to the common start instant.
    pub(super) start_s: f64,
    /// The start instant to the last result.
    pub(super) tests_s: f64,
    /// Restoring the cells' environments.
    pub(super) restore_s: f64,
}

/// The most concurrent flows of one batch, and the most tune sessions
/// of one batch (one per agent of each cell with an environment).
pub(super) fn largest_batch(cells: &[CellSpec]) -> (usize, usize) {
    let mut per: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for c in cells {
        let e = per.entry(c.batch).or_default();
        e.0 += c.flows.len();
        if c.dims.get("profile").is_some() || c.dims.get("policies").is_some() {
            let agents: BTreeSet<&String> = c.flows.iter().flat_map(|(s, d)| [s, d]).collect();
            e.1 += agents.len();
        }
    }
    per.values()
        .fold((0, 0), |(f, t), &(bf, bt)| (f.max(bf), t.max(bt)))
}

impl Exec<'_> {
    pub(super) fn expected(&self, c: &CellSpec) -> f64 {
        Kind::parse(&c.kind)
            .map(|k| crate::drive::inner_secs(k, &c.params))
            .unwrap_or(0.0)
    }

    fn eta(&self, remaining_batches: &[f64]) -> Option<f64> {
        let ratio = if self.seen_expected > 0.0 {
            self.seen_wall / self.seen_expected
        } else {
            1.1
        };
        Some(remaining_batches.iter().sum::<f64>() * ratio)
    }

    /// Run pending cells batch by batch with retries. Returns false when
    /// interrupted.
    pub(super) fn run_cells(&mut self, pending: Vec<CellSpec>) -> Result<bool, RunError> {
        // Group by batch, keeping order.
        let mut batches: Vec<Vec<CellSpec>> = Vec::new();
        for c in pending {
            match batches.last_mut() {
                Some(b) if b[0].batch == c.batch => b.push(c),
                _ => batches.push(vec![c]),
            }
        }
        let expected: Vec<f64> = batches
            .iter()
            .map(|b| b.iter().map(|c| self.expected(c)).fold(0.0, f64::max) + 0.2)
            .collect();
        let mut attempts: BTreeMap<String, u32> = BTreeMap::new();
        let mut queue: std::collections::VecDeque<(Vec<CellSpec>, f64)> =
            batches.into_iter().zip(expected.iter().copied()).collect();
        while let Some((batch, exp)) = queue.pop_front() {
            if interrupted() {
                return Ok(false);
            }
            let remaining: Vec<f64> = std::iter::once(exp)
                .chain(queue.iter().map(|(_, e)| *e))
                .collect();
            let what = if batch.len() == 1 {
                cell_label(&batch[0])
            } else {
                format!("{} (+{} at once)", cell_label(&batch[0]), batch.len() - 1)
            };
            self.progress.running(&what, self.eta(&remaining));
            let started_at = fabperf_results::now_rfc3339();
            let t0 = Instant::now();
            let (results, test_s, timing) = self.run_batch(&batch);
            if interrupted() {
                return Ok(false);
            }
            let wall = t0.elapsed().as_secs_f64();
            let t_commit = Instant::now();
            self.phases.setup_s += timing.setup_s;
            self.phases.start_s += timing.start_s;
            self.phases.tests_s += timing.tests_s;
            self.phases.commit_s += timing.restore_s;
            self.test_s += test_s;
            self.measured_s += batch
                .iter()
                .zip(&results)
                .filter_map(|(c, r)| {
                    let flows = r.as_ref().ok()?;
                    // Warm-up seconds: omit_s (socket bandwidth tests), warmup
                    // (RDMA; the latency tests' warmup is a count).
                    let rdma = Kind::parse(&c.kind).is_some_and(Kind::is_rdma);
                    let warm = c
                        .params
                        .get(if rdma { "warmup" } else { "omit_s" })
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0);
                    flows
                        .iter()
                        .flat_map(|(_, d)| d.records.iter())
                        .filter(|r| r.stream.is_none())
                        .map(|r| r.duration_s + warm)
                        .reduce(f64::max)
                })
                .fold(0.0, f64::max)
                // The durations are what agents reported: a batch's
                // measured time cannot exceed its own wall time.
                .clamp(0.0, wall);
            self.seen_wall += wall;
            self.seen_expected += exp;
            let ended_at = fabperf_results::now_rfc3339();
            let mut retry = Vec::new();
            for (cell, res) in batch.into_iter().zip(results) {
                let n = attempts.entry(cell.cell_id.clone()).or_insert(0);
                *n += 1;
                let attempt = Attempt {
                    attempts: *n,
                    started_at: started_at.clone(),
                    ended_at: ended_at.clone(),
                    wall_s: wall,
                };
                let res = res.and_then(|flows| measurements_of(&cell, &flows));
                match res {
                    Ok(ms) => {
                        self.store
                            .finish_cell_done(self.run_id, &cell.cell_id, &attempt, &ms)?;
                        self.progress.finished(1);
                        self.progress.line(&format!(
                            "fabperf run: [{}/{}] {}: {} ({wall:.1} s)",
                            self.progress.done,
                            self.progress.total,
                            cell_label(&cell),
                            headline(&ms)
                        ));
                        self.ran += 1;
                    }
                    Err(e) if e.transient && *n <= self.plan.retries => {
                        self.progress.warn(&format!(
                            "{}: {} — attempt {} of {}, retrying",
                            cell_label(&cell),
                            e.msg,
                            n,
                            self.plan.retries + 1
                        ));
                        retry.push(cell);
                    }
                    Err(e) => {
                        self.store.finish_cell_failed(
                            self.run_id,
                            &cell.cell_id,
                            &attempt,
                            &e.msg,
                        )?;
                        self.progress.finished(1);
                        self.progress
                            .warn(&format!("{} failed: {}", cell_label(&cell), e.msg));
                        self.ran += 1;
                    }
                }
            }
            self.phases.commit_s += t_commit.elapsed().as_secs_f64();
            if !retry.is_empty() {
                // Back off, then retry the failed cells (a round's cells
                // stay together so nodes still take one test at a time).
                let t_backoff = Instant::now();
                let n = retry
                    .iter()
                    .map(|c| attempts[&c.cell_id])
                    .max()
                    .unwrap_or(1);
                let delay = self.plan.retry_delay.mul_f64(n as f64);
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    if interrupted() {
                        return Ok(false);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                self.phases.backoff_s += t_backoff.elapsed().as_secs_f64();
                queue.push_front((retry, exp));
            }
        }
        Ok(true)
    }

    fn run_batch(&mut self, cells: &[CellSpec]) -> (Vec<CellResult>, f64, BatchTiming) {
        let t_setup = Instant::now();
        if let Err(e) = self.policy_step(cells) {
            let timing = BatchTiming {
                setup_s: t_setup.elapsed().as_secs_f64(),
                ..BatchTiming::default()
            };
            return (
                (0..cells.len()).map(|_| Err(e.clone())).collect(),
                0.0,
                timing,
            );
        }
        // Cells with an environment: their agents apply it first, and hold
        // it (one test group per cell) until the flows are done.
        let (tunes, tune_failed, mut env_warnings) = self.tune_batch(cells);
        let tuned: BTreeSet<usize> = cells
            .iter()
            .enumerate()
            .filter(|(_, c)| c.dims.get("profile").is_some() || c.dims.get("policies").is_some())
            .map(|(i, _)| i)
            .collect();
        let (mut per_cell, test_s, mut timing) =
            self.run_flows(cells, &tuned, tune_failed, t_setup);
        let t_restore = Instant::now();
        for (ci, ws) in self.untune(tunes) {
            env_warnings.entry(ci).or_default().extend(ws);
        }
        timing.restore_s = t_restore.elapsed().as_secs_f64();
        for (ci, ws) in env_warnings {
            if let Some(Ok(flows)) = per_cell.get_mut(ci) {
                for (_, d) in flows.iter_mut() {
                    for r in d.records.iter_mut() {
                        r.warnings.extend(
                            ws.iter().map(|t| {
                                fabperf_results::Warning::Tuning { text: t.clone() }.note()
                            }),
                        );
                    }
                }
            }
        }
        (per_cell, test_s, timing)
    }
}
