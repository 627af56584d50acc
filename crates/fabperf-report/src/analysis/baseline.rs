//! The baseline: which row a row is compared with (a baseline path, or
//! a `KEY=VALUE` dimension) and the difference to it.

use super::dims::{dim_is, dims_without};
use super::report::{Delta, Family, Report, Row};
use crate::data::ReportError;
use crate::stats;
use fabperf_results::dims::text as dim_str;
use std::collections::BTreeSet;

/// A baseline given as `KEY=VALUE` (a plan dimension and one of its
/// values, e.g. `profile=algebra-1-default` or `policies=0`) rather than a
/// path: every row is compared with the row of the same test, path and
/// other dimensions at that value.
pub fn dim_baseline(b: &str) -> Option<(&str, &str)> {
    let (k, v) = b.split_once('=')?;
    (!k.is_empty() && !v.is_empty()).then_some((k.trim(), v.trim()))
}

impl Report {
    /// The row `row` is compared with under a `KEY=VALUE` baseline: the same
    /// test, path, pattern instance and other dimensions, with `key` at
    /// `val`.
    pub fn counterpart_dim(&self, row: &Row, key: &str, val: &str) -> Option<&Row> {
        let mine = dims_without(&row.dims, key);
        self.rows.iter().find(|b| {
            b.path == row.path
                && b.test == row.test
                && b.family == row.family
                && b.scope_key == row.scope_key
                && b.mean().is_some()
                && dim_is(&b.dims, key, val)
                && dims_without(&b.dims, key) == mine
        })
    }

    /// The row on `path` that `row` is compared with: like with like — the
    /// same family, environment, size, direction, pattern instance, streams,
    /// op, MTU and rate. The same test kind is taken when the path measured
    /// it; else another kind of the family (an `rdma-bw` row against the
    /// host's `tcp-bw`: the transport is what the comparison is about), the
    /// TCP one when there are several, and then the op is the kind's own.
    pub fn counterpart(&self, row: &Row, path: &str) -> Option<&Row> {
        self.matching(row, path, false).map(|(b, _)| b)
    }

    /// [`Report::counterpart`], or with `unlike` the closest row that
    /// differs in streams, op, MTU or rate, with the differences in words.
    pub fn matching(&self, row: &Row, path: &str, unlike: bool) -> Option<(&Row, Vec<String>)> {
        let dir = |r: &Row| r.direction.clone().unwrap_or_else(|| "forward".into());
        let cands: Vec<(usize, &Row)> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.path == path
                    && b.family == row.family
                    && b.variant == row.variant
                    && b.size == row.size
                    && dir(b) == dir(row)
                    && b.of_bidir == row.of_bidir
                    && b.scope_key == row.scope_key
                    && b.mean().is_some()
            })
            .collect();
        let same_kind = cands.iter().any(|(_, b)| b.kind == row.kind);
        let kind_ok = |b: &Row| {
            if same_kind {
                b.kind == row.kind
            } else {
                let others: BTreeSet<&str> = cands.iter().map(|(_, c)| c.kind.as_str()).collect();
                others.len() == 1 || b.kind.starts_with("tcp-")
            }
        };
        let diffs = |b: &Row| -> Vec<String> {
            let mut d = Vec::new();
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
            if b.streams != row.streams {
                let n = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
                d.push(format!("streams {} vs {}", n(row.streams), n(b.streams)));
            }
            if b.kind == row.kind && b.op != row.op {
                d.push(format!("op {} vs {}", show(&row.op), show(&b.op)));
            }
            if b.mtu != row.mtu {
                let n = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
                d.push(format!("MTU {} vs {}", n(row.mtu), n(b.mtu)));
            }
            if b.rate != row.rate {
                d.push(format!("rate {} vs {}", show(&row.rate), show(&b.rate)));
            }
            if b.kind != row.kind && !kind_ok(b) {
                d.push(format!("kind {} vs {}", row.kind, b.kind));
            }
            d
        };
        if let Some((_, b)) = cands
            .iter()
            .find(|(_, b)| kind_ok(b) && diffs(b).is_empty())
        {
            return Some((b, Vec::new()));
        }
        if !unlike {
            return None;
        }
        // The closest unlike row: fewest differences, the plan's first on ties.
        cands
            .iter()
            .map(|(i, b)| (diffs(b), *i, *b))
            .min_by_key(|(d, i, _)| (d.len(), *i))
            .map(|(d, _, b)| (b, d))
    }
}

pub(super) fn delta(r: &Row, b: &Row) -> Delta {
    let (ra, rb) = (r.mean(), b.mean());
    let base_mean = rb.unwrap_or(f64::NAN);
    // The test judges the figure the difference is taken of: the repeats
    // of the row's (headline) instance on both sides; a mesh of several
    // pairs has no repeats to test (`stats` is `None`).
    let welch = match (&r.stats, &b.stats) {
        (Some(x), Some(y)) => stats::welch(x, y),
        _ => None,
    };
    let mut d = Delta {
        path: b.path.clone(),
        kind: b.kind.clone(),
        test: b.test.clone(),
        base_mean,
        d_gbps: None,
        d_pct: None,
        d_p50_us: None,
        d_p99_us: None,
        d_loss_pp: None,
        d_error_pp: None,
        d_bytes: None,
        within_noise: welch.map(|w| !w.significant()),
        welch,
        unlike: Vec::new(),
    };
    let pct = |a: f64, c: f64| (c > 0.0).then(|| (a - c) / c * 100.0);
    match r.family {
        Family::Bandwidth | Family::Udp => {
            if let (Some(a), Some(c)) = (ra, rb) {
                d.d_gbps = Some(a - c);
                d.d_pct = pct(a, c);
            }
            if let (Some(a), Some(c)) = (r.loss_pct, b.loss_pct) {
                d.d_loss_pp = Some(a - c);
            }
        }
        Family::Latency | Family::Http => {
            let (la, lb) = (r.lat.as_ref(), b.lat.as_ref());
            if r.family == Family::Latency {
                d.d_p50_us = ra.zip(rb).map(|(a, c)| a - c);
            } else {
                // Requests/s is the figure; latency at p50 over every request.
                if let (Some(a), Some(c)) = (ra, rb) {
                    d.d_pct = pct(a, c);
                }
                d.d_p50_us = la
                    .and_then(|l| l.p50)
                    .zip(lb.and_then(|l| l.p50))
                    .map(|(a, c)| a - c);
                d.d_error_pp = r
                    .http
                    .as_ref()
                    .and_then(|h| h.error_pct)
                    .zip(b.http.as_ref().and_then(|h| h.error_pct))
                    .map(|(a, c)| a - c);
            }
            d.d_p99_us = la
                .and_then(|l| l.p99)
                .zip(lb.and_then(|l| l.p99))
                .map(|(a, c)| a - c);
        }
        Family::Mtu => {
            d.d_bytes = ra.zip(rb).map(|(a, c)| (c - a).round() as i64);
        }
    }
    d
}

/// A baseline that names nothing measured: an error when `--baseline`
/// gave it (`from_flag`), else a note (the plan's), and then no
/// differences are computed.
pub(super) fn check_measured(
    rows: &[Row],
    baseline: Option<&str>,
    paths_seen: &[String],
    run_id: i64,
    from_flag: bool,
    notes: &mut Vec<String>,
) -> Result<(), ReportError> {
    let by_dim = baseline.and_then(dim_baseline);
    if let Some((key, val)) = by_dim {
        if !rows.iter().any(|r| dim_is(&r.dims, key, val)) {
            let mut seen: Vec<String> = rows.iter().filter_map(|r| dim_str(&r.dims, key)).collect();
            seen.sort();
            seen.dedup();
            let msg = format!(
                "no cell of run {} has {key} = {val}; values measured: {}",
                run_id,
                if seen.is_empty() {
                    "none (no such dimension in this run)".to_string()
                } else {
                    seen.join(", ")
                }
            );
            if from_flag {
                return Err(ReportError::Usage(format!(
                    "{msg}; give --baseline a path or KEY=VALUE of a measured dimension"
                )));
            }
            notes.push(format!("{msg}; no differences are computed"));
        }
    } else if let Some(b) = baseline {
        if !paths_seen.iter().any(|p| p == b) {
            let msg = format!(
                "the baseline path {b:?} has no measurement in run {}; paths measured: {}",
                run_id,
                if paths_seen.is_empty() {
                    "none".to_string()
                } else {
                    paths_seen.join(", ")
                }
            );
            if from_flag {
                return Err(ReportError::Usage(format!(
                    "{msg}; give one of them to --baseline"
                )));
            }
            notes.push(format!("{msg}; no differences are computed"));
        }
    }
    Ok(())
}

/// Each row's difference to its counterpart under the baseline `b` (a
/// path, or `KEY=VALUE`), and in its warnings why it has none or is
/// compared with an unlike row (`unlike_ok`: `--compare-unlike`).
pub(super) fn set_differences(report: &mut Report, b: &str, unlike_ok: bool) {
    let by_dim = dim_baseline(b);
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
                d.path = b.to_string();
                (Some(d), None)
            }
            None => {
                if r.path == b {
                    return (None, None);
                }
                match report.matching(r, b, true) {
                    Some((base, unlike)) if unlike.is_empty() => (Some(delta(r, base)), None),
                    Some((base, unlike)) if unlike_ok => {
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
