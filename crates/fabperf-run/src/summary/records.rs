//! What a mesh cell's stored records say: the directions its data moves
//! in, the figure of each direction, the port rate of its ends, and why a
//! finished cell gave no figure.

use super::rule::{metric_of, Metric};
use fabperf_store::{CellSpec, StoredMeasurement};
use serde_json::Value;

/// The directions a cell's data moves in: (`a` to `b`, `b` to `a`) for
/// the driving agent `a`, which runs the client against `b`; `reverse` and
/// RDMA `read` move data from `b` to `a`, `bidir` both ways. Latency is one
/// pair, `a` to `b`. A cell without flows has none.
pub(super) fn planned_dirs(s: &CellSpec) -> (bool, bool) {
    if s.flows.is_empty() {
        return (false, false);
    }
    if metric_of(&s.kind) == Metric::LatencyP50Us {
        return (true, false);
    }
    let dir = s
        .params
        .get("direction")
        .or_else(|| s.dims.get("direction"))
        .and_then(Value::as_str)
        .unwrap_or("forward");
    let bidir = dir == "bidir" || s.params.get("bidir").and_then(Value::as_bool) == Some(true);
    let read = s.params.get("op").and_then(Value::as_str) == Some("read");
    if bidir {
        (true, true)
    } else if (dir == "reverse") != read {
        (false, true)
    } else {
        (true, false)
    }
}

/// A stored measurement's figure: its record's `bw_gbps` or `lat_us.p50`,
/// as the store's columns hold them.
fn figure(metric: Metric, m: &StoredMeasurement) -> Option<f64> {
    match metric {
        Metric::BandwidthGbps => m.bw_gbps,
        Metric::LatencyP50Us => m.lat_p50_us,
    }
    .filter(|v| v.is_finite())
}

/// The figures a finished cell measured, per data direction, as (from, to)
/// = (0, 1) for the driving agent `a` to `b` and (1, 0) back. A record's
/// `direction` says where its data went (`forward`: from the client `a`;
/// `reverse`: to it — RDMA `read` records are `reverse`); a `bidir` total
/// sums both and is left out when the directions have records of their own
/// (the store's one rule for a cell's figure, [`fabperf_store::figure`]).
pub(super) fn measured_pairs(ms: &[StoredMeasurement], metric: Metric) -> Vec<(bool, f64)> {
    fabperf_store::figure::per_direction(ms, |m| figure(metric, m))
}

/// The parts of a stored record the summary reads beyond the columns
/// (anything else in it is skipped unread).
#[derive(serde::Deserialize, Default)]
struct RecordExtras {
    #[serde(default)]
    warnings: Vec<fabperf_results::Note>,
    #[serde(default)]
    placement_local: Option<fabperf_results::Placement>,
    #[serde(default)]
    placement_remote: Option<fabperf_results::Placement>,
}

fn extras(m: &StoredMeasurement) -> RecordExtras {
    serde_json::from_str(&m.record).unwrap_or_default()
}

/// Why a finished cell gave no figure: its records' warnings, if any.
pub(super) fn no_figure_reason(ms: &[StoredMeasurement]) -> String {
    let why: Vec<String> = fabperf_store::figure::standing(ms)
        .into_iter()
        .flat_map(|m| extras(m).warnings.into_iter().map(|w| w.message))
        .take(2)
        .collect();
    if why.is_empty() {
        "the cell finished without a figure".into()
    } else {
        format!("the cell finished without a figure ({})", why.join("; "))
    }
}

/// The highest real port rate of a record's two ends: an RDMA port's rate
/// or a physical netdev's speed; a virtual link's speed is a label and a
/// `tc` cap is a shaping, not the port.
pub(super) fn real_port_rate(m: &StoredMeasurement) -> Option<f64> {
    // Most records name no placement: skip the parse for them.
    if !m.record.contains("\"port_rate_gbps\"") {
        return None;
    }
    let x = extras(m);
    [x.placement_local, x.placement_remote]
        .into_iter()
        .flatten()
        .filter(|p| !p.virtual_link && p.port_rate_source.as_deref() != Some("tc cap"))
        .filter_map(|p| p.port_rate_gbps)
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;

    #[test]
    fn a_cell_without_a_figure_is_a_failure() {
        let f = fixture(
            mesh_cells(|a, b| {
                if (a, b) == ("n1", "n2") {
                    let mut r = rec(0.0, "forward");
                    r.set_throughput(0, 0.0, Some(0));
                    r.warn(fabperf_results::Warning::NoInterval {
                        what: "no request completed inside the measured interval".into(),
                    });
                    Ok(vec![r])
                } else {
                    Ok(vec![rec(10.0, "forward")])
                }
            }),
            vec![],
        );
        let (_, g, text) = analyze_one(&f);
        assert_eq!(g.failed.len(), 1, "{:?}", g.failed);
        assert!(
            g.failed[0].2.contains("finished without a figure"),
            "{:?}",
            g.failed
        );
        assert!(
            g.failed[0].2.contains("no request completed"),
            "{:?}",
            g.failed
        );
        assert!(text.contains("FAIL"), "{text}");
        assert!(
            text.contains("FAILED n1 -> n2: the cell finished without a figure"),
            "{text}"
        );
    }

    #[test]
    fn reverse_read_and_bidir_keep_from_row_to_column() {
        let rd = |id: &str, a: &str, b: &str, params: Value, recs: Vec<Record>| {
            (spec(id, "mesh", a, b, params, 0), Ok(recs))
        };
        // tcp-bw reverse: n1 drives, data flows n2 -> n1.
        let f = fixture(
            vec![
                rd(
                    "r12",
                    "n1",
                    "n2",
                    json!({"direction": "reverse"}),
                    vec![rec(3.0, "reverse")],
                ),
                rd(
                    "r21",
                    "n2",
                    "n1",
                    json!({"direction": "reverse"}),
                    vec![rec(7.0, "reverse")],
                ),
            ],
            vec![],
        );
        let (_, g, _) = analyze_one(&f);
        assert_eq!(g.values["n2"]["n1"], 3.0);
        assert_eq!(g.values["n1"]["n2"], 7.0);
        assert_eq!(g.cell_template("n2", "n1").unwrap().cell_id, "r12");
        // rdma read: data from the target; its record says `reverse`; a
        // failed read cell is a failure of that direction.
        let f = fixture(
            vec![
                rd(
                    "x12",
                    "n1",
                    "n2",
                    json!({"kind": "rdma-bw", "op": "read"}),
                    vec![rec(3.0, "reverse")],
                ),
                (
                    spec(
                        "x21",
                        "mesh",
                        "n2",
                        "n1",
                        json!({"kind": "rdma-bw", "op": "read"}),
                        0,
                    ),
                    Err("boom"),
                ),
            ],
            vec![],
        );
        let (_, g, _) = analyze_one(&f);
        assert_eq!(g.values["n2"]["n1"], 3.0);
        assert_eq!(g.failed, vec![("n1".into(), "n2".into(), "boom".into())]);
        // bidir: one cell, both directions; the total is not a direction.
        let f = fixture(
            vec![rd(
                "b12",
                "n1",
                "n2",
                json!({"direction": "bidir"}),
                vec![rec(9.0, "bidir"), rec(5.0, "forward"), rec(4.0, "reverse")],
            )],
            vec![],
        );
        let (_, g, _) = analyze_one(&f);
        assert_eq!(g.values["n1"]["n2"], 5.0);
        assert_eq!(g.values["n2"]["n1"], 4.0);
    }
}
