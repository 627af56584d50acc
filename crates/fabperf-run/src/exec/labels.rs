//! One-line texts for the log: a cell's description and its result.

use fabperf_store::{CellSpec, Measurement, Role};

/// A one-line description of a cell.
pub fn cell_label(c: &CellSpec) -> String {
    let dims = fabperf_results::dims::label(&c.dims, fabperf_results::dims::SizeIn::Short);
    let who = match c.pattern.as_str() {
        "incast" => format!(
            "incast {} senders -> {}",
            c.flows.len(),
            c.flows.first().map(|f| f.1.as_str()).unwrap_or("?")
        ),
        "bisection" => format!("bisection {} flows", c.flows.len()),
        _ => c
            .flows
            .first()
            .map(|(a, b)| format!("{a} -> {b}"))
            .unwrap_or_default(),
    };
    let retest = if c.pattern == "retest" {
        " (re-test)"
    } else {
        ""
    };
    format!(
        "{} {} {who}{}{}{retest} #{}",
        c.kind,
        c.path,
        if dims.is_empty() { "" } else { " " },
        dims,
        c.repeat + 1
    )
}

/// The one-line result of a cell for the log.
pub(super) fn headline(ms: &[Measurement]) -> String {
    // Path MTU: one record per method.
    let mtus: Vec<String> = ms
        .iter()
        .filter(|m| m.record.test == "mtu")
        .filter_map(|m| Some(format!("{} {}", m.record.op.as_deref()?, m.record.mtu?)))
        .collect();
    if !mtus.is_empty() {
        return format!("MTU {}", mtus.join(", "));
    }
    // Concurrent flows: one aggregate per direction, all of them.
    let stand = fabperf_store::figure::standing(ms);
    if stand.len() > 1 && stand.iter().all(|m| m.role == Role::Aggregate) {
        let aggs: Vec<String> = stand
            .iter()
            .filter_map(|m| {
                let bw = m.record.bw_gbps?;
                Some(match &m.record.direction {
                    Some(d) => format!("{d} {bw:.2} Gbit/s"),
                    None => format!("{bw:.2} Gbit/s"),
                })
            })
            .collect();
        if aggs.len() > 1 {
            return aggs.join(", ");
        }
    }
    let main = stand.first();
    match main {
        Some(m) => {
            let r = &m.record;
            match (&r.lat_us, r.bw_gbps) {
                (Some(l), _) => format!("p50 {:.2} us, p99 {:.2} us", l.p50, l.p99),
                (None, Some(b)) => format!("{b:.2} Gbit/s"),
                _ => "no figure".into(),
            }
        }
        None => "no records".into(),
    }
}
