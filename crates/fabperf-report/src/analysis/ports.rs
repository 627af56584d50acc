//! Port rates: what a flow, a cell or a direction is bounded by, and the
//! finding when a figure is above it.

use super::format::fmt_num;
use crate::data::RunData;
use crate::flows::Leg;
use fabperf_store::CellRow;

/// What bounds an instance's figure: a port rate known when its cell was
/// read (concurrent flows, read last), or the flows of a cell whose ports
/// are looked up once every record has said which links are virtual.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum PortOf {
    Known(Option<f64>),
    /// The flows' ends as the row's node numbers, and whether the cell
    /// was `bidir`.
    Flows(Box<[(u32, u32)]>, bool),
}

/// Port rate of a flow: the slower end's.
pub(super) fn flow_port(data: &RunData, path: &str, src: &str, dst: &str) -> Option<f64> {
    let a = data.agent(path, src)?.inventory.port_rate_gbps?;
    let b = data.agent(path, dst)?.inventory.port_rate_gbps?;
    Some(a.min(b))
}

/// The port rate a cell's main figure is bounded by.
pub(super) fn cell_port(data: &RunData, cell: &CellRow, direction: Option<&str>) -> Option<f64> {
    let s = &cell.spec;
    let ports: Option<Vec<f64>> = s
        .flows
        .iter()
        .map(|(a, b)| flow_port(data, &s.path, a, b))
        .collect();
    let ports = ports?;
    let one_way = match s.pattern.as_str() {
        "incast" => {
            let recv = data
                .agent(&s.path, &s.flows.first()?.1)?
                .inventory
                .port_rate_gbps?;
            let senders: Option<Vec<f64>> = s
                .flows
                .iter()
                .map(|(a, _)| data.agent(&s.path, a)?.inventory.port_rate_gbps)
                .collect();
            recv.min(senders?.iter().sum())
        }
        "bisection" => ports.iter().sum(),
        _ => ports.iter().copied().fold(f64::INFINITY, f64::min),
    };
    if !one_way.is_finite() {
        return None;
    }
    Some(if direction == Some("bidir") {
        2.0 * one_way
    } else {
        one_way
    })
}

/// The port rate the flows of a pair or mesh cell are bounded by (the
/// slowest flow's; twice that for `bidir`), as [`cell_port`] gives it.
pub(super) fn flows_port<'a>(
    data: &RunData,
    path: &str,
    flows: impl IntoIterator<Item = (&'a str, &'a str)>,
    bidir: bool,
) -> Option<f64> {
    let ports: Option<Vec<f64>> = flows
        .into_iter()
        .map(|(a, b)| flow_port(data, path, a, b))
        .collect();
    let one_way = ports?.iter().copied().fold(f64::INFINITY, f64::min);
    if !one_way.is_finite() {
        return None;
    }
    Some(if bidir { 2.0 * one_way } else { one_way })
}

/// Is `v` above the real port rate `p` (beyond rounding)?
pub(super) fn above_port(v: f64, p: f64) -> bool {
    p > 0.0 && v > p * (1.0 + 1e-9)
}

/// The finding for a figure above the port rate, in words.
pub fn port_finding_text(v: f64, p: f64) -> String {
    format!(
        "{} Gbit/s measured is above the {} Gbit/s port rate: the rate is wrong (a virtual link's \
         label, a cap not seen) or the traffic was counted twice; no share of the port is given",
        fmt_num(v),
        fmt_num(p)
    )
}

/// The one-way port rate of a direction, its share or the finding that it
/// is above it.
pub(super) fn set_port(l: &mut Leg, port: Option<f64>) {
    l.port_rate_gbps = port;
    if let (Some(a), Some(p)) = (l.aggregate_gbps, port.filter(|p| *p > 0.0)) {
        if above_port(a, p) {
            l.port_finding = Some(port_finding_text(a, p));
        } else {
            l.pct_port = Some(a / p * 100.0);
        }
    }
}
