//! A test's `pattern` (pairs, mesh, incast, bisection) and the keys that
//! belong to one pattern each (`pairs`, `ordered`, `retest`,
//! `retest_sample`, `receivers`,
//! `splits`, `seed`).

use super::*;

/// The test's pattern, its name, and where it is given (the test's span
/// when `pattern` is left out).
pub(super) fn check_pattern<'t>(
    cx: &mut Diagnostics,
    t: &'t RawTest,
    kind: Kind,
    span: Range<usize>,
) -> (Pattern, &'t str, Range<usize>) {
    let pattern_name = t
        .pattern
        .as_ref()
        .map(|p| p.get_ref().as_str())
        .unwrap_or(if t.pairs.is_some() { "pairs" } else { "mesh" });
    let pspan = t.pattern.as_ref().map_or(span.clone(), |p| p.span());
    // The keys of one pattern each: where each is given (the test's span
    // when the key has none of its own), its name, its pattern.
    let given = [
        (t.pairs.as_ref().map(|p| Some(p.span())), "pairs", "pairs"),
        (t.ordered.map(|_| None), "ordered", "mesh"),
        (t.retest.as_ref().map(|p| Some(p.span())), "retest", "mesh"),
        (
            t.retest_sample.as_ref().map(|p| Some(p.span())),
            "retest_sample",
            "mesh",
        ),
        (
            t.receivers.as_ref().map(|p| Some(p.span())),
            "receivers",
            "incast",
        ),
        (
            t.splits.as_ref().map(|p| Some(p.span())),
            "splits",
            "bisection",
        ),
        (t.seed.as_ref().map(|p| Some(p.span())), "seed", "bisection"),
    ];
    for (at, key, pat) in given {
        if let Some(sp) = at.filter(|_| pattern_name != pat) {
            cx.at(
                sp.unwrap_or(span.clone()),
                format!("`{key}` applies to pattern \"{pat}\" only"),
            );
        }
    }
    let pattern = match pattern_name {
        "pairs" => {
            let mut pairs = Vec::new();
            match &t.pairs {
                None => cx.at(
                    pspan.clone(),
                    "pattern \"pairs\" needs `pairs = [[\"sender\", \"receiver\"], ...]`",
                ),
                Some(ps) => {
                    if ps.get_ref().is_empty() {
                        cx.at(ps.span(), "`pairs` is empty");
                    }
                    for p in ps.get_ref() {
                        let v = p.get_ref();
                        if v.len() != 2 {
                            cx.at(
                                p.span(),
                                format!(
                                    "a pair is [\"sender\", \"receiver\"], got {} names",
                                    v.len()
                                ),
                            );
                            continue;
                        }
                        if v[0].get_ref() == v[1].get_ref() {
                            cx.at(
                                p.span(),
                                format!(
                                    "pair [{:?}, {:?}] tests an agent against itself",
                                    v[0].get_ref(),
                                    v[1].get_ref()
                                ),
                            );
                            continue;
                        }
                        for n in v {
                            if !is_name(n.get_ref()) {
                                cx.at(
                                    n.span(),
                                    format!(
                                        "agent name {:?}: use letters, digits, '-', '_' and '.'",
                                        n.get_ref()
                                    ),
                                );
                            }
                        }
                        pairs.push((v[0].get_ref().clone(), v[1].get_ref().clone()));
                    }
                }
            }
            Pattern::Pairs(pairs)
        }
        "mesh" => {
            let retest = match &t.retest {
                None => 2,
                Some(r) => cx.int_in(r, "retest", 0, 10).map_or(0, |n| n as u32),
            };
            let retest_sample = match &t.retest_sample {
                None => DEFAULT_RETEST_SAMPLE,
                Some(r) => cx
                    .int_in(r, "retest_sample", 0, 1_000_000)
                    .map_or(0, |n| n as u32),
            };
            // Both directions by default (ClusterKit's bandwidth test is
            // bidirectional): a node with a transmit-only fault shows as
            // a node only when each pair is measured both ways. A sweep
            // of `bidir` cells measures both ways in each cell already.
            let bidir_only = t.directions.as_ref().is_some_and(|d| {
                !d.get_ref().is_empty() && d.get_ref().iter().all(|v| v.get_ref() == "bidir")
            }) || t.params.as_ref().is_some_and(|p| {
                let p = p.get_ref();
                p.get("direction").and_then(|v| v.as_str()) == Some("bidir")
                    || p.get("bidir").and_then(|v| v.as_bool()) == Some(true)
            });
            Pattern::Mesh {
                ordered: t.ordered.unwrap_or(!bidir_only),
                retest,
                retest_sample,
            }
        }
        "incast" => {
            if !kind.concurrent_ok() {
                cx.at(pspan.clone(), format!("pattern \"incast\" runs several senders into one agent at once: {} cannot (use tcp-bw or rdma-bw)", kind.name()));
            }
            let receivers = t.receivers.as_ref().map(|rs| {
                if rs.get_ref().is_empty() {
                    cx.at(rs.span(), "`receivers` is empty");
                }
                rs.get_ref()
                    .iter()
                    .map(|r| {
                        if !is_name(r.get_ref()) {
                            cx.at(
                                r.span(),
                                format!(
                                    "agent name {:?}: use letters, digits, '-', '_' and '.'",
                                    r.get_ref()
                                ),
                            );
                        }
                        r.get_ref().clone()
                    })
                    .collect()
            });
            Pattern::Incast { receivers }
        }
        "bisection" => {
            if !kind.concurrent_ok() {
                cx.at(pspan.clone(), format!("pattern \"bisection\" runs flows at once across the fabric: {} is not a bandwidth test that can (use tcp-bw or rdma-bw)", kind.name()));
            }
            let splits = match &t.splits {
                None => 3,
                Some(s) => cx.int_in(s, "splits", 1, 1000).map_or(1, |n| n as u32),
            };
            let seed = match &t.seed {
                None => 1,
                Some(s) if *s.get_ref() >= 0 => *s.get_ref() as u64,
                Some(s) => {
                    cx.at(s.span(), "seed must not be negative");
                    1
                }
            };
            Pattern::Bisection { splits, seed }
        }
        other => {
            cx.at(
                pspan.clone(),
                format!("unknown pattern {other:?}; one of: pairs, mesh, incast, bisection"),
            );
            Pattern::Mesh {
                ordered: false,
                retest: 0,
                retest_sample: 0,
            }
        }
    };
    (pattern, pattern_name, pspan)
}
