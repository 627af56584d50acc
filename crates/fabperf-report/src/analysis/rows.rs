//! Grouping of cells into rows and pattern instances, and a row from its
//! group: statistics, the range over instances, the share of the port,
//! the warnings in words.

use super::accumulate::{Acc, InstAcc};
use super::baseline::dim_baseline;
use super::dims::{dim_is, rate_label, variant_label};
use super::format::fmt_num;
use super::latency::lat_figures;
use super::ports::{above_port, flows_port, port_finding_text, PortOf};
use super::report::{
    Concurrency, CpuPerGbps, Family, HttpFigures, Instance, LatSource, MtuFigures, Row, Spread,
};
use crate::data::RunData;
use crate::stats::{self, Stats};
use fabperf_store::CellRow;
use serde_json::Value;
use std::collections::BTreeMap;

/// Test order, dims, path, pattern instance key, its words, method (mtu).
pub(super) type GroupKey = (usize, String, String, String, String, String);

/// How a pattern's cells are told apart: (row key, row words, instance).
/// Pairs and incast receivers are rows of their own; a mesh's pairs and a
/// bisection's cuts are instances of one row.
pub(super) fn instance_of(s: &fabperf_store::CellSpec) -> (String, String, String) {
    let pair = |(a, b): &(String, String)| format!("{a} -> {b}");
    match s.pattern.as_str() {
        "pairs" => match s.flows.first() {
            Some((a, b)) => (
                format!("pair:{a}>{b}"),
                format!("{a} -> {b}"),
                format!("{a} -> {b}"),
            ),
            None => ("pair:".into(), "pair".into(), String::new()),
        },
        "mesh" => (
            "mesh".into(),
            "mesh".into(),
            s.flows.first().map(pair).unwrap_or_default(),
        ),
        "incast" => {
            let r = s.flows.first().map(|f| f.1.clone()).unwrap_or_default();
            (format!("incast:{r}"), format!("incast into {r}"), r)
        }
        "bisection" => {
            let mut f: Vec<String> = s.flows.iter().map(|(a, b)| format!("{a}→{b}")).collect();
            f.sort();
            ("bisection".into(), "bisection".into(), f.join(", "))
        }
        p => (p.to_string(), p.to_string(), String::new()),
    }
}

/// The instances of a row in run order, each with its repeats' statistics;
/// `port` gives the port rate a cell's flows are bounded by.
pub(super) fn instances(
    insts: Vec<InstAcc>,
    port: &dyn Fn(&PortOf) -> Option<f64>,
) -> Vec<Instance> {
    let mut with: Vec<InstAcc> = insts.into_iter().filter(|x| x.first.is_some()).collect();
    with.sort_by_key(|x| x.first);
    with.into_iter()
        .map(|x| {
            let p: Option<Vec<f64>> = x.ports.iter().map(port).collect();
            Instance {
                stats: Stats::of(&x.values),
                key: x.key,
                cells: x.cells,
                values: x.values,
                port_rate_gbps: p
                    .map(|p| p.iter().copied().fold(f64::INFINITY, f64::min))
                    .filter(|v| v.is_finite()),
            }
        })
        .collect()
}

/// The range over a row's instances; `None` for fewer than two with a
/// figure. `headline` is `min` for a bisection, else `median`.
pub(super) fn spread_of(
    insts: &[Instance],
    family: Family,
    of: &'static str,
    headline: &'static str,
) -> Option<Spread> {
    let with: Vec<(&Instance, f64)> = insts
        .iter()
        .filter_map(|i| Some((i, i.stats.as_ref()?.mean)))
        .collect();
    if with.len() < 2 {
        return None;
    }
    let means: Vec<f64> = with.iter().map(|w| w.1).collect();
    let lo = with.iter().min_by(|a, b| a.1.total_cmp(&b.1)).expect("two");
    let hi = with.iter().max_by(|a, b| a.1.total_cmp(&b.1)).expect("two");
    let (worst, best) = if family.higher_is_better() {
        (lo, hi)
    } else {
        (hi, lo)
    };
    let reps: Vec<usize> = with.iter().map(|w| w.0.values.len()).collect();
    Some(Spread {
        of,
        count: with.len(),
        min: lo.1,
        median: stats::median(&means),
        max: hi.1,
        worst: worst.0.key.clone(),
        best: best.0.key.clone(),
        headline,
        repeats_min: reps.iter().copied().min().unwrap_or(0),
        repeats_max: reps.iter().copied().max().unwrap_or(0),
    })
}

/// One row from its group's cells.
pub(super) fn row_of(
    data: &RunData,
    cell: &CellRow,
    scope_key: String,
    first: String,
    mut acc: Acc,
) -> Row {
    let s = &cell.spec;
    let family = Family::of_kind(&s.kind).expect("grouped by known kinds");
    let values: Vec<f64> = std::mem::take(&mut acc.values);
    let nodes = std::mem::take(&mut acc.nodes);
    let port_of = |p: &PortOf| match p {
        PortOf::Known(p) => *p,
        PortOf::Flows(flows, bidir) => flows_port(
            data,
            &s.path,
            flows.iter().map(|&(a, b)| (nodes.name(a), nodes.name(b))),
            *bidir,
        ),
    };
    acc.inst_at = Default::default();
    let insts = instances(std::mem::take(&mut acc.insts), &port_of);
    let multi = insts.len() > 1;
    let unit = family.unit();
    let mut warnings: Vec<String> = Vec::new();
    let (stats, spread, headline_port) = if !multi {
        let st = Stats::of(&values);
        if let Some(st) = &st {
            warnings.extend(stats::warnings(&values, st).iter().map(|w| w.text(unit)));
        }
        let port = insts.first().and_then(|i| i.port_rate_gbps);
        (st, None, port)
    } else if s.pattern == "bisection" {
        // The bisection bandwidth is the slowest cut's.
        let sp = spread_of(&insts, family, "cuts", "min");
        let slow = sp
            .as_ref()
            .and_then(|sp| insts.iter().find(|i| i.key == sp.worst));
        if let (Some(sp), Some(i)) = (&sp, slow) {
            warnings.push(format!(
                "bisection bandwidth: the slowest of {} cuts ({}); cuts range {}–{} {unit} (median {}); \
                 the interval is over that cut's repeats",
                sp.count,
                sp.worst,
                fmt_num(sp.min),
                fmt_num(sp.max),
                fmt_num(sp.median)
            ));
            if let Some(st) = &i.stats {
                warnings.extend(stats::warnings(&i.values, st).iter().map(|w| w.text(unit)));
            }
        }
        // Fewer than two cuts with a figure: the one that has one.
        let slow = slow.or_else(|| insts.iter().find(|i| i.stats.is_some()));
        let st = slow.and_then(|i| i.stats.clone());
        let port = slow.and_then(|i| i.port_rate_gbps);
        (st, sp, port)
    } else {
        let sp = spread_of(&insts, family, "pairs", "median");
        if let Some(sp) = &sp {
            warnings.push(format!(
                "{} pairs, {} repeat(s) each: worst {} ({}), median {}, best {} ({}) {unit}; \
                 the figure is the median pair and there is no interval across pairs (they are \
                 different links, not repeats); the matrix below has each pair",
                sp.count,
                if sp.repeats_min == sp.repeats_max {
                    sp.repeats_min.to_string()
                } else {
                    format!("{}-{}", sp.repeats_min, sp.repeats_max)
                },
                fmt_num(if family.higher_is_better() {
                    sp.min
                } else {
                    sp.max
                }),
                sp.worst,
                fmt_num(sp.median),
                fmt_num(if family.higher_is_better() {
                    sp.max
                } else {
                    sp.min
                }),
                sp.best
            ));
        }
        let ports: Option<Vec<f64>> = insts.iter().map(|i| i.port_rate_gbps).collect();
        let port = ports
            .map(|p| p.iter().copied().fold(f64::INFINITY, f64::min))
            .filter(|x| x.is_finite());
        // Fewer than two pairs with a figure: the one that has one.
        let st = if sp.is_none() {
            insts.iter().find_map(|i| i.stats.clone())
        } else {
            None
        };
        (st, sp, port)
    };
    let scope = match s.pattern.as_str() {
        "pairs" | "incast" => first,
        "mesh" => format!("mesh, {} pairs", acc.pairs.len()),
        "bisection" => match insts.len() {
            0 => "bisection, no cut measured".into(),
            1 => "bisection, 1 cut".into(),
            k => format!("bisection, min of {k} cuts"),
        },
        p => p.to_string(),
    };
    // Repeats without a figure are named, never averaged; a bisection cut
    // without any leaves the minimum over the cuts that were measured.
    let dir = acc.direction.clone().unwrap_or_else(|| "forward".into());
    let mut unmeasured: Vec<&str> = Vec::new();
    for f in &acc.failed {
        let measured = insts
            .iter()
            .any(|i| i.key == f.instance && !i.values.is_empty());
        if s.pattern == "bisection" && !measured {
            if unmeasured.contains(&f.instance.as_str()) {
                continue;
            }
            unmeasured.push(&f.instance);
            let n = acc
                .failed
                .iter()
                .filter(|g| g.instance == f.instance)
                .count();
            warnings.push(format!(
                "cut {} has no {dir} figure ({n} cell{}, first: {}): the bisection bandwidth is \
                 the slowest of the cuts measured, and a cut not measured may be slower",
                f.instance,
                if n == 1 { "" } else { "s" },
                f.reason
            ));
        } else {
            warnings.push(format!(
                "repeat {} ({}{}) has no {dir} figure and is not averaged: {}",
                f.repeat + 1,
                f.cell,
                if s.pattern == "bisection" {
                    format!(", cut {}", f.instance)
                } else {
                    String::new()
                },
                f.reason
            ));
        }
    }
    let concurrency = (!acc.overlaps.is_empty()).then(|| {
        let skews: Option<Vec<f64>> = acc.skews.iter().copied().collect();
        let lo = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Concurrency {
            cells: acc.overlaps.len(),
            overlap_pct_min: lo(&acc.overlaps),
            overlap_pct_max: hi(&acc.overlaps),
            start_skew_s_min: skews.as_deref().map(lo),
            start_skew_s_max: skews.as_deref().map(hi),
        }
    });
    if let Some(c) = &concurrency {
        warnings.push(c.words());
    }
    if let Some(o) = &acc.outcast {
        warnings.push(format!(
            "outcast: {o}; its figure is what left the receiver"
        ));
    }
    let figure = match (&stats, &spread) {
        (Some(st), _) => Some(st.mean),
        (None, Some(sp)) => Some(sp.median),
        _ => None,
    };
    let bw_family = matches!(family, Family::Bandwidth | Family::Udp);
    let port = if bw_family { headline_port } else { None };
    let mut port_finding = None;
    let pct_port = match (figure, port) {
        (Some(v), Some(p)) if bw_family && p > 0.0 => {
            // The best instance must fit too: a mesh pair above the port
            // is as wrong as a pair row.
            let top = spread.as_ref().map_or(v, |sp| sp.max.max(v));
            if above_port(top, p) {
                port_finding = Some(port_finding_text(top, p));
                None
            } else {
                Some(v / p * 100.0)
            }
        }
        _ => None,
    };
    if let Some(f) = &port_finding {
        warnings.push(f.clone());
    }
    let cpu = (acc.cpu_client.pushed > 0).then(|| CpuPerGbps {
        client: acc.cpu_client.mean_of_all(),
        agent: acc.cpu_agent.mean_of_all(),
        source: if acc.cpu_host { "host" } else { "threads" },
    });
    let cpu = cpu.filter(|c| c.client.is_some() || c.agent.is_some());
    let lat = matches!(family, Family::Latency | Family::Http).then(|| lat_figures(&acc));
    if let Some(l) = &lat {
        if l.source == LatSource::StoredPercentiles && acc.stored.count > 0 {
            warnings.push(
                "no latency histogram stored: p50/p99 are the mean of the repeats' own percentiles, not percentiles over every sample".into(),
            );
        }
    }
    let http = (family == Family::Http).then(|| {
        let total: u64 = acc.errors.values().fold(0u64, |a, v| a.saturating_add(*v));
        HttpFigures {
            errors: acc.errors.clone(),
            errors_total: total,
            ok: acc.ok_requests,
            error_pct: acc
                .ok_requests
                .filter(|ok| ok.saturating_add(total) > 0 && acc.errors_seen)
                .map(|ok| total as f64 * 100.0 / (ok as f64 + total as f64)),
        }
    });
    let mtu_path = (family == Family::Mtu && !values.is_empty()).then(|| MtuFigures {
        method: acc.op.clone().unwrap_or_default(),
        mtu_min: values.iter().copied().fold(f64::INFINITY, f64::min) as u64,
        mtu_max: values.iter().copied().fold(0.0, f64::max) as u64,
        payload: acc.mtu_payload,
        interface: acc.mtu_iface.clone(),
        encapsulation: acc.mtu_encap.clone(),
    });
    Row {
        family,
        test: s.test.clone(),
        kind: s.kind.clone(),
        path: s.path.clone(),
        pattern: s.pattern.clone(),
        scope,
        scope_key: if family == Family::Mtu {
            format!("{scope_key}|{}", acc.op.clone().unwrap_or_default())
        } else {
            scope_key
        },
        dims: s.dims.clone(),
        size: if family == Family::Mtu {
            None
        } else {
            acc.size
        },
        streams: acc.streams,
        op: acc.op.clone(),
        direction: acc.direction.clone(),
        of_bidir: acc.of_bidir,
        mtu: acc.mtu,
        rate: rate_label(&s.dims),
        variant: variant_label(&s.dims),
        nodes: {
            let mut n: Vec<String> = nodes.all().to_vec();
            n.sort();
            n
        },
        cells: std::mem::take(&mut acc.cells),
        values,
        stats,
        warnings,
        port_rate_gbps: port,
        pct_port,
        cpu,
        retransmits: acc.retrans.mean(),
        loss_pct: acc.loss.mean(),
        lat,
        instances: if multi { insts } else { Vec::new() },
        spread,
        port_finding,
        http,
        mtu_path,
        concurrency,
        unmeasured: unmeasured.iter().map(|u| u.to_string()).collect(),
        failed: acc.failed.clone(),
        base: None,
    }
}

/// The order of the rows: by family and test (in the plan's order), then
/// within a test sizes ascending, then the other dims, paths in the order
/// first seen, baseline first.
pub(super) fn sort_rows(
    rows: &mut [Row],
    test_rank: &BTreeMap<String, usize>,
    baseline: Option<&str>,
    paths_seen: &[String],
) {
    let by_dim = baseline.and_then(dim_baseline);
    let path_rank = |p: &str| {
        if Some(p) == baseline {
            0
        } else {
            1 + paths_seen.iter().position(|x| x == p).unwrap_or(0)
        }
    };
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
}
