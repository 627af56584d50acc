//! Flat CSV: one row per record, nested objects flattened into columns.

use crate::{CounterDelta, HostCpu, LatencyKind, LatencySummary, Placement, Record, UdpStats};
use std::io::{self, Write};

/// Flat CSV column names, in order. Nested objects (`lat_us`, `udp`,
/// `host_cpu_*`, `placement_*`) become `lat_us_p50`, `udp_lost`,
/// `host_cpu_local_softirq_pct`, `placement_local_cpu_list`, ...; each end's
/// counter deltas are one column of compact JSON (`counters_local`: the
/// record's `counters.local` list), since their keys differ from host to host.
pub fn csv_header() -> Vec<&'static str> {
    vec![
        "schema",
        "test",
        "transport",
        "op",
        "direction",
        "stream",
        "size",
        "streams",
        "duration_s",
        "bytes",
        "iterations",
        "bw_gbps",
        "bw_peak_gbps",
        "msg_rate_mpps",
        "lat_kind",
        "lat_samples",
        "lat_us_min",
        "lat_us_p50",
        "lat_us_p90",
        "lat_us_p99",
        "lat_us_p999",
        "lat_us_p9999",
        "lat_us_max",
        "lat_us_mean",
        "lat_us_stdev",
        "lat_hist",
        "cpu_local_pct",
        "cpu_remote_pct",
        "host_cpu_local_user_pct",
        "host_cpu_local_system_pct",
        "host_cpu_local_irq_pct",
        "host_cpu_local_softirq_pct",
        "host_cpu_local_cpus",
        "host_cpu_remote_user_pct",
        "host_cpu_remote_system_pct",
        "host_cpu_remote_irq_pct",
        "host_cpu_remote_softirq_pct",
        "host_cpu_remote_cpus",
        "retransmits",
        "udp_sent",
        "udp_received",
        "udp_lost",
        "udp_duplicates",
        "udp_loss_pct",
        "udp_reordered",
        "udp_stale",
        "udp_jitter_us",
        "udp_late",
        "udp_ipdv_us",
        "requests_per_s",
        "errors_connect",
        "errors_write",
        "errors_read",
        "errors_timeout",
        "errors_status",
        "errors_parse",
        "send_lag_us_p50",
        "send_lag_us_p99",
        "send_lag_us_max",
        "send_lag_samples",
        "local",
        "remote",
        "device",
        "ib_port",
        "gid_index",
        "gid_type",
        "link_layer",
        "mtu",
        "sl",
        "tclass",
        "poll_priority_local",
        "poll_priority_remote",
        "port_rate_gbps",
        "bw_pct_of_port",
        "placement_local_cpu",
        "placement_local_cpu_list",
        "placement_local_numa_node",
        "placement_local_buffer_numa_node",
        "placement_local_interface",
        "placement_local_rdma_port",
        "placement_local_port_rate_gbps",
        "placement_local_virtual_link",
        "placement_remote_cpu",
        "placement_remote_cpu_list",
        "placement_remote_numa_node",
        "placement_remote_buffer_numa_node",
        "placement_remote_interface",
        "placement_remote_rdma_port",
        "placement_remote_port_rate_gbps",
        "placement_remote_virtual_link",
        "counters_local",
        "counters_remote",
        "finding_ids",
        "findings",
        "warning_ids",
        "warnings",
        "started_at",
        "fabperf_version",
    ]
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_default()
}

fn host(h: &Option<HostCpu>) -> [String; 5] {
    match h {
        Some(h) => [
            h.user_pct.to_string(),
            h.system_pct.to_string(),
            h.irq_pct.to_string(),
            h.softirq_pct.to_string(),
            h.cpus.to_string(),
        ],
        None => Default::default(),
    }
}

fn placement(p: &Option<Placement>) -> [String; 8] {
    match p {
        Some(p) => [
            p.cpu.clone(),
            opt(&p.cpu_list),
            opt(&p.numa_node),
            opt(&p.buffer_numa_node),
            opt(&p.interface),
            opt(&p.rdma_port),
            opt(&p.port_rate_gbps),
            p.virtual_link.to_string(),
        ],
        None => Default::default(),
    }
}

/// One end's counter deltas as compact JSON (empty when the record has none).
fn counters(r: &Record, pick: fn(&crate::Counters) -> &Vec<CounterDelta>) -> String {
    r.counters
        .as_ref()
        .map(|c| serde_json::to_string(pick(c)).unwrap_or_default())
        .unwrap_or_default()
}

fn csv_row(r: &Record) -> Vec<String> {
    let lat = r.lat_us.as_ref();
    let udp = r.udp.as_ref();
    let l = |f: fn(&LatencySummary) -> f64| lat.map(|s| f(s).to_string()).unwrap_or_default();
    let u = |f: fn(&UdpStats) -> String| udp.map(f).unwrap_or_default();
    let e = |f: fn(&crate::RequestErrors) -> u64| {
        r.errors
            .as_ref()
            .map(|x| f(x).to_string())
            .unwrap_or_default()
    };
    let g = |f: fn(&crate::SendLag) -> String| r.send_lag_us.as_ref().map(f).unwrap_or_default();
    let mut row = vec![
        r.schema.to_string(),
        r.test.clone(),
        r.transport.as_str().to_string(),
        opt(&r.op),
        opt(&r.direction),
        opt(&r.stream),
        r.size.to_string(),
        r.streams.to_string(),
        r.duration_s.to_string(),
        r.bytes.to_string(),
        opt(&r.iterations),
        opt(&r.bw_gbps),
        opt(&r.bw_peak_gbps),
        opt(&r.msg_rate_mpps),
        lat.map(|s| match s.kind {
            LatencyKind::HalfRtt => "half_rtt".to_string(),
            LatencyKind::Rtt => "rtt".to_string(),
        })
        .unwrap_or_default(),
        lat.map(|s| s.samples.to_string()).unwrap_or_default(),
        l(|s| s.min),
        l(|s| s.p50),
        l(|s| s.p90),
        l(|s| s.p99),
        l(|s| s.p999),
        l(|s| s.p9999),
        l(|s| s.max),
        l(|s| s.mean),
        l(|s| s.stdev),
        opt(&r.lat_hist),
        opt(&r.cpu_local_pct),
        opt(&r.cpu_remote_pct),
    ];
    row.extend(host(&r.host_cpu_local));
    row.extend(host(&r.host_cpu_remote));
    row.extend([
        opt(&r.retransmits),
        u(|s| s.sent.to_string()),
        u(|s| s.received.to_string()),
        u(|s| s.lost.to_string()),
        u(|s| s.duplicates.to_string()),
        u(|s| opt(&s.loss_pct)),
        u(|s| opt(&s.reordered)),
        u(|s| opt(&s.stale)),
        u(|s| opt(&s.jitter_us)),
        u(|s| opt(&s.late)),
        u(|s| opt(&s.ipdv_us)),
        opt(&r.requests_per_s),
        e(|s| s.connect),
        e(|s| s.write),
        e(|s| s.read),
        e(|s| s.timeout),
        e(|s| s.status),
        e(|s| s.parse),
        g(|s| s.p50.to_string()),
        g(|s| s.p99.to_string()),
        g(|s| s.max.to_string()),
        g(|s| s.samples.to_string()),
        opt(&r.local),
        opt(&r.remote),
        opt(&r.device),
        opt(&r.ib_port),
        opt(&r.gid_index),
        opt(&r.gid_type),
        opt(&r.link_layer),
        opt(&r.mtu),
        opt(&r.sl),
        opt(&r.tclass),
        opt(&r.poll_priority_local),
        opt(&r.poll_priority_remote),
        opt(&r.port_rate_gbps),
        opt(&r.bw_pct_of_port),
    ]);
    row.extend(placement(&r.placement_local));
    row.extend(placement(&r.placement_remote));
    row.extend([
        counters(r, |c| &c.local),
        counters(r, |c| &c.remote),
        r.findings
            .iter()
            .map(|f| f.id.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        r.findings
            .iter()
            .map(|f| format!("{}: {}", f.subject, f.summary))
            .collect::<Vec<_>>()
            .join("; "),
        r.warnings
            .iter()
            .map(|n| n.id.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        r.warnings
            .iter()
            .map(|n| n.message.as_str())
            .collect::<Vec<_>>()
            .join("; "),
        r.started_at.clone(),
        r.fabperf_version.clone(),
    ]);
    row
}

/// Write records as CSV with [`csv_header`] columns. `with_header` is false
/// when appending to an existing file. Every cell goes through
/// [`crate::escape::csv_field`].
pub fn write_csv<W: Write>(w: W, records: &[Record], with_header: bool) -> io::Result<()> {
    let mut wr = ::csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(w);
    let map = |e: ::csv::Error| io::Error::other(e.to_string());
    if with_header {
        wr.write_record(csv_header()).map_err(map)?;
    }
    for r in records {
        // Text from peers and stores: escaped, formulas neutralised.
        wr.write_record(
            csv_row(r)
                .iter()
                .map(|f| crate::escape::csv_field(f).into_owned()),
        )
        .map_err(map)?;
    }
    wr.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::tests::sample;

    #[test]
    fn header_and_flat_columns() {
        let mut buf = Vec::new();
        write_csv(&mut buf, &sample(), true).unwrap();
        let s = String::from_utf8(buf).unwrap();
        let mut rd = ::csv::Reader::from_reader(s.as_bytes());
        let hdr = rd.headers().unwrap().clone();
        assert_eq!(hdr.len(), csv_header().len());
        let rows: Vec<_> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 2);
        for row in &rows {
            assert_eq!(row.len(), hdr.len());
        }
        let col = |name: &str| hdr.iter().position(|h| h == name).unwrap();
        let v: f64 = rows[0][col("lat_us_p50")].parse().unwrap();
        assert!((v - 15.0).abs() < 0.02, "{v}");
        assert!(rows[0][col("lat_hist")].starts_with("HISTF"));
        // Not applicable -> empty cell, not 0.
        assert_eq!(&rows[0][col("retransmits")], "");
        assert_eq!(&rows[1][col("retransmits")], "3");
        assert_eq!(&rows[1][col("warning_ids")], "short-interval");
        assert!(rows[1][col("warnings")].contains("0.100 s"));
        assert_eq!(&rows[1][col("host_cpu_local_softirq_pct")], "7.5");
        assert_eq!(&rows[0][col("host_cpu_local_softirq_pct")], "");
        assert_eq!(&rows[0][col("counters_local")], "");
        assert_eq!(&rows[0][col("placement_local_cpu")], "");
    }

    #[test]
    fn counters_placement_and_findings_columns() {
        let mut r = sample().remove(1);
        r.placement_local = Some(Placement {
            cpu: "auto".into(),
            cpu_list: Some("0-3".into()),
            numa_node: Some(1),
            port_rate_gbps: Some(100.0),
            ..Default::default()
        });
        r.set_port_rate();
        r.counters = Some(crate::Counters {
            local: vec![CounterDelta {
                source: crate::CounterSource::Snmp,
                subject: "host".into(),
                path: "/proc/net/snmp".into(),
                deltas: [("Tcp.RetransSegs".to_string(), 3)].into_iter().collect(),
                units: Default::default(),
                reset: vec![],
            }],
            ..Default::default()
        });
        r.findings.push(crate::Finding {
            id: "udp-rcvbuf-overflow".into(),
            severity: crate::Severity::Warning,
            subject: "agent host".into(),
            summary: "the receive buffer overflowed".into(),
            detail: String::new(),
            evidence: vec![],
            cost_gbps: None,
            fix: vec![],
        });
        let mut buf = Vec::new();
        write_csv(&mut buf, &[r], true).unwrap();
        let s = String::from_utf8(buf).unwrap();
        let mut rd = ::csv::Reader::from_reader(s.as_bytes());
        let hdr = rd.headers().unwrap().clone();
        let row = rd.records().next().unwrap().unwrap();
        let col = |name: &str| &row[hdr.iter().position(|h| h == name).unwrap()];
        assert_eq!(col("placement_local_cpu_list"), "0-3");
        assert_eq!(col("placement_local_numa_node"), "1");
        assert_eq!(col("port_rate_gbps"), "100");
        assert_eq!(col("bw_pct_of_port"), "8");
        assert_eq!(col("placement_remote_cpu"), "");
        let local: Vec<CounterDelta> = serde_json::from_str(col("counters_local")).unwrap();
        assert_eq!(local[0].deltas["Tcp.RetransSegs"], 3);
        assert_eq!(col("counters_remote"), "[]");
        assert_eq!(col("finding_ids"), "udp-rcvbuf-overflow");
        assert!(col("findings").contains("agent host: the receive buffer"));
    }
}
