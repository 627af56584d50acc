//! Cells of one flow (a pair, a mesh pair): their records into their row.

use super::accumulate::Acc;
use super::dims::dim_u64;
use super::latency::add_latency;
use super::report::Family;
use super::rows::{instance_of, GroupKey};
use crate::data::{RecView, Sample};
use fabperf_results::dims::text as dim_str;
use fabperf_store::CellRow;
use std::collections::BTreeMap;

/// The record that stands for a single-flow cell: its first total, by the
/// store's rule ([`fabperf_store::figure`]; cells of concurrent flows go by
/// direction, [`flows::legs_of`]).
pub(super) fn main_sample(samples: &[Sample]) -> Option<&Sample> {
    fabperf_store::figure::main_record(samples)
}

pub(super) fn cpu_per_gbps(rec: &RecView, host: bool) -> (Option<f64>, Option<f64>) {
    let bw = match rec.bw_gbps {
        Some(b) if b > 0.0 => b,
        _ => return (None, None),
    };
    if host {
        (
            rec.host_cpu_local.map(|h| h.total_pct / bw),
            rec.host_cpu_remote.map(|h| h.total_pct / bw),
        )
    } else {
        (
            rec.cpu_local_pct.map(|c| c / bw),
            rec.cpu_remote_pct.map(|c| c / bw),
        )
    }
}

/// An mtu record's interface and encapsulation, from the notes fabperf mtu
/// writes (`interface vxlan0 (MTU 1450, vxlan), 50 bytes of encapsulation
/// (outer Ethernet 14 + ...)`).
pub(super) fn mtu_interface(rec: &RecView) -> (Option<String>, Option<String>) {
    for w in &rec.warnings {
        let Some(rest) = w.strip_prefix("interface ") else {
            continue;
        };
        let (iface, encap) = match rest.split_once("), ") {
            Some((a, b)) => (&rest[..a.len() + 1], Some(b)),
            None => (rest, None),
        };
        let encap = encap.and_then(|e| {
            let (bytes, parts) = e.split_once(" bytes of encapsulation")?;
            let parts = parts.trim().trim_start_matches('(').trim_end_matches(')');
            let kind = iface
                .rsplit_once(", ")
                .map(|(_, k)| k.trim_end_matches(')'))
                .unwrap_or("encapsulation");
            Some(format!("{kind} {} B ({parts})", bytes.trim()))
        });
        return (Some(iface.to_string()), encap);
    }
    (None, None)
}

/// A cell of one flow (a pair, a mesh pair): its record(s) into its row.
pub(super) fn add_single(
    cell: &CellRow,
    samples: &[Sample],
    family: Family,
    order: &mut BTreeMap<String, usize>,
    groups: &mut BTreeMap<GroupKey, (CellRow, Acc)>,
    notes: &mut Vec<String>,
) {
    let s = &cell.spec;
    // An mtu cell stores one record per method that measured, each of
    // which stands for it; every other cell is one record.
    let recs: Vec<&Sample> = if family == Family::Mtu {
        fabperf_store::figure::standing(samples)
    } else {
        main_sample(samples).into_iter().collect()
    };
    if recs.is_empty() {
        notes.push(format!(
            "cell {} ({} on {}) is done but has no total record; left out",
            s.cell_id, s.test, s.path,
        ));
        return;
    }
    let (scope_key, first, inst) = instance_of(s);
    let n = order.len();
    let idx = *order.entry(s.test.clone()).or_insert(n);
    for main in recs {
        let rec = &main.rec;
        let method = if family == Family::Mtu {
            rec.op.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let key = (
            idx,
            s.dims.to_string(),
            s.path.clone(),
            scope_key.clone(),
            first.clone(),
            method.clone(),
        );
        let (_, acc) = groups
            .entry(key)
            .or_insert_with(|| (cell.clone(), Acc::default()));
        acc.add_cell(&inst, &s.cell_id);
        acc.add_flows(&s.flows);
        acc.size = acc.size.or(dim_u64(&s.dims, "size")).or(rec.size);
        acc.streams = acc.streams.or(dim_u64(&s.dims, "streams")).or(rec.streams);
        acc.op = acc.op.clone().or(dim_str(&s.dims, "op")).or(rec.op.clone());
        acc.direction = acc
            .direction
            .clone()
            .or(dim_str(&s.dims, "direction"))
            .or(rec.direction.clone());
        acc.mtu = acc.mtu.or(dim_u64(&s.dims, "mtu"));
        // Looked up at the end, once every record has said which links
        // are virtual.
        let bidir = acc.direction.as_deref() == Some("bidir");
        acc.add_port_flows(&inst, &s.flows, bidir);
        if let Some(r) = rec.retransmits {
            acc.retrans.push(r as f64);
        }
        if let Some(l) = rec.udp_loss_pct {
            acc.loss.push(l);
        }
        let push = |acc: &mut Acc, v: Option<f64>| {
            if let Some(v) = v {
                acc.add_value(&inst, v);
            }
        };
        match family {
            Family::Bandwidth | Family::Udp => {
                push(acc, rec.bw_gbps);
                if s.flows.len() == 1 {
                    let host = rec.host_cpu_local.is_some() && rec.host_cpu_remote.is_some();
                    if acc.cells.len() == 1 {
                        acc.cpu_host = host;
                    }
                    let (c, a) = cpu_per_gbps(rec, acc.cpu_host && host);
                    acc.cpu_client.push_opt(c);
                    acc.cpu_agent.push_opt(a);
                }
            }
            Family::Latency | Family::Http => {
                let p50 = add_latency(acc, rec, &s.cell_id, notes);
                if family == Family::Latency {
                    push(acc, p50);
                } else {
                    push(acc, rec.requests_per_s);
                    if let Some(e) = &rec.errors {
                        acc.errors_seen = true;
                        for (k, v) in e {
                            let c = acc.errors.entry(k.clone()).or_default();
                            *c = c.saturating_add(*v);
                        }
                    }
                    // The record counts successful requests as iterations
                    // (requests/s × the measured interval).
                    if let (Some(r), Some(d)) = (rec.requests_per_s, rec.duration_s) {
                        let ok = (r * d).round() as u64;
                        acc.ok_requests = Some(acc.ok_requests.unwrap_or(0).saturating_add(ok));
                    }
                }
            }
            Family::Mtu => {
                acc.op = Some(method.clone());
                push(acc, rec.mtu.map(|m| m as f64));
                acc.mtu_payload = acc.mtu_payload.or(rec.size);
                let (iface, encap) = mtu_interface(rec);
                acc.mtu_iface = acc.mtu_iface.take().or(iface);
                acc.mtu_encap = acc.mtu_encap.take().or(encap);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_notes_name_the_interface_and_encapsulation() {
        let rec = |w: &[&str]| RecView {
            warnings: w.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let (i, e) = mtu_interface(&rec(&[
            "limited by the path",
            "interface vxlan0 (MTU 1450, vxlan), 50 bytes of encapsulation (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8)",
        ]));
        assert_eq!(i.as_deref(), Some("vxlan0 (MTU 1450, vxlan)"));
        assert_eq!(
            e.as_deref(),
            Some("vxlan 50 B (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8)")
        );
        let (i, e) = mtu_interface(&rec(&["interface eth0 (MTU 9000, ethernet)"]));
        assert_eq!((i.as_deref(), e), (Some("eth0 (MTU 9000, ethernet)"), None));
        // Odd notes never panic.
        for w in [
            "interface ",
            "interface ), ",
            "interface (), x bytes of encapsulation",
            "interface é), ü",
        ] {
            let _ = mtu_interface(&rec(&[w]));
        }
        assert_eq!(mtu_interface(&rec(&[])), (None, None));
    }
}
