//! Human tables: the generic summary, perftest's bandwidth and latency
//! columns, the CPU table and the per-record detail lines.

use crate::{Record, Transport};
use fabperf_units::{format_size, Multiplier, SizeStyle};
use std::fmt::Write as _;

/// A plain text table with right-aligned numeric columns.
#[derive(Debug, Default, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Render with two spaces between columns; the first column is
    /// left-aligned, the rest right-aligned.
    pub fn render(&self) -> String {
        let ncol = self
            .rows
            .iter()
            .map(|r| r.len())
            .chain(std::iter::once(self.header.len()))
            .max()
            .unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.header).chain(self.rows.iter()) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                if i == 0 {
                    line.push_str(&format!("{c:<w$}"));
                } else {
                    line.push_str(&format!("{c:>w$}"));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// The generic summary table used for mixed results (suite, socket tests).
    pub fn summary(records: &[Record]) -> Table {
        let mut t = Table::new([
            "test",
            "dir/op",
            "size",
            "streams",
            "secs",
            "Gbit/s",
            "Mmsg/s",
            "lat p50 us",
            "lat p99 us",
            "lat",
            "cpu loc%",
            "cpu rem%",
            "retr",
            "loss%",
            "%port",
        ]);
        for r in records {
            let name = match r.stream {
                Some(s) => format!("  [{s}]"),
                None => r.test.clone(),
            };
            let dirop =
                r.op.clone()
                    .or_else(|| r.direction.clone())
                    .unwrap_or_else(|| "-".into());
            let f2 = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
            let f3 = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
            let f0 = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into());
            t.row([
                name,
                dirop,
                format_size(r.size, SizeStyle::Short, Multiplier::M),
                r.streams.to_string(),
                format!("{:.2}", r.duration_s),
                f2(r.bw_gbps),
                f3(r.msg_rate_mpps),
                f2(r.lat_us.as_ref().map(|l| l.p50)),
                f2(r.lat_us.as_ref().map(|l| l.p99)),
                r.lat_us
                    .as_ref()
                    .map(|l| l.kind.label().to_string())
                    .unwrap_or_else(|| "-".into()),
                f0(r.cpu_local_pct),
                f0(r.cpu_remote_pct),
                r.retransmits
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| "-".into()),
                f3(r.udp.as_ref().and_then(|u| u.loss_pct)),
                f0(r.bw_pct_of_port),
            ]);
        }
        t
    }

    /// perftest's bandwidth table: `#bytes #iterations BW peak BW average MsgRate`.
    /// Bandwidth in Gb/sec, or MiB/sec when `mib` is true. The peak is
    /// perftest's (iteration mode); "-" where there is none (duration mode,
    /// as perftest, and bidirectional totals). With bidirectional records a
    /// last column says which direction a row is.
    pub fn perftest_bw(records: &[Record], mib: bool) -> Table {
        let unit = if mib { "MiB/sec" } else { "Gb/sec" };
        let bidir = records
            .iter()
            .any(|r| r.direction.as_deref() == Some("bidir"));
        let mut hdr = vec![
            "#bytes".to_string(),
            "#iterations".to_string(),
            format!("BW peak[{unit}]"),
            format!("BW average[{unit}]"),
            "MsgRate[Mpps]".to_string(),
        ];
        let port = records.iter().any(|r| r.bw_pct_of_port.is_some());
        if port {
            hdr.push("%port".to_string());
        }
        if bidir {
            hdr.push("direction".to_string());
        }
        let mut t = Table::new(hdr);
        let conv = |g: Option<f64>| {
            g.map(|g| {
                if mib {
                    format!("{:.2}", g * 1e9 / 8.0 / 1048576.0)
                } else {
                    format!("{g:.2}")
                }
            })
            .unwrap_or_else(|| "-".into())
        };
        for r in records.iter().filter(|r| r.transport == Transport::Rdma) {
            let mut row = vec![
                r.size.to_string(),
                r.iterations
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                conv(r.bw_peak_gbps),
                conv(r.bw_gbps),
                r.msg_rate_mpps
                    .map(|m| format!("{m:.6}"))
                    .unwrap_or_else(|| "-".into()),
            ];
            if port {
                row.push(
                    r.bw_pct_of_port
                        .map(|p| format!("{p:.0}"))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            if bidir {
                row.push(r.direction.clone().unwrap_or_default());
            }
            t.row(row);
        }
        t
    }

    /// perftest's latency table: `#bytes #iterations t_min t_max t_typical
    /// t_avg t_stdev 99% 99.9%`, plus fabperf's 99.99 %.
    pub fn perftest_lat(records: &[Record]) -> Table {
        let mut t = Table::new([
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]",
            "99.99% percentile[usec]",
        ]);
        for r in records {
            if let Some(l) = &r.lat_us {
                t.row([
                    r.size.to_string(),
                    r.iterations
                        .map(|i| i.to_string())
                        .unwrap_or_else(|| l.samples.to_string()),
                    format!("{:.2}", l.min),
                    format!("{:.2}", l.max),
                    format!("{:.2}", l.p50),
                    format!("{:.2}", l.mean),
                    format!("{:.2}", l.stdev),
                    format!("{:.2}", l.p99),
                    format!("{:.2}", l.p999),
                    format!("{:.2}", l.p9999),
                ]);
            }
        }
        t
    }

    /// CPU per size: the test threads' own figures (`CPU local/remote`, %
    /// of one core) and, when known, the hosts' user/system/softirq time
    /// over the same interval (% of one CPU, summed over the host's CPUs).
    pub fn cpu(records: &[Record]) -> Table {
        let any_host = records
            .iter()
            .any(|r| r.host_cpu_local.is_some() || r.host_cpu_remote.is_some());
        let mut hdr = vec!["#bytes", "CPU local[%]", "CPU remote[%]"];
        if any_host {
            hdr.extend([
                "host local[%] usr/sys/softirq",
                "host remote[%] usr/sys/softirq",
            ]);
        }
        let mut t = Table::new(hdr);
        let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
        let h = |v: &Option<crate::HostCpu>| {
            v.map(|h| {
                format!(
                    "{:.1}/{:.1}/{:.1} of {} CPUs",
                    h.user_pct, h.system_pct, h.softirq_pct, h.cpus
                )
            })
            .unwrap_or_else(|| "-".into())
        };
        // One row per size: the total (a bidirectional test's direction
        // records carry no CPU of their own).
        let bidir_sizes: Vec<u64> = records
            .iter()
            .filter(|r| r.direction.as_deref() == Some("bidir"))
            .map(|r| r.size)
            .collect();
        for r in records.iter().filter(|r| {
            r.stream.is_none()
                && (r.direction.as_deref() == Some("bidir") || !bidir_sizes.contains(&r.size))
        }) {
            let mut row = vec![r.size.to_string(), f(r.cpu_local_pct), f(r.cpu_remote_pct)];
            if any_host {
                row.push(h(&r.host_cpu_local));
                row.push(h(&r.host_cpu_remote));
            }
            t.row(row);
        }
        t
    }
}

/// Lines under a socket test's table: every latency distribution and every
/// UDP account in full (absent figures as "-").
pub fn details(records: &[Record]) -> String {
    let mut o = String::new();
    let f2 = |v: Option<f64>| {
        v.map(|x| format!("{x:.2} us"))
            .unwrap_or_else(|| "-".into())
    };
    for r in records {
        if let Some(l) = &r.lat_us {
            let _ = writeln!(
                o,
                "{} {} latency (us, {} samples): min {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  p99.99 {:.2}  max {:.2}  mean {:.2}  stdev {:.2}",
                r.test,
                l.kind.label(),
                l.samples,
                l.min,
                l.p50,
                l.p90,
                l.p99,
                l.p999,
                l.p9999,
                l.max,
                l.mean,
                l.stdev
            );
        }
        if let Some(u) = &r.udp {
            let pct = u
                .loss_pct
                .map(|p| format!("{p:.3}%"))
                .unwrap_or_else(|| "-".into());
            let mut line = format!(
                "{} {} datagrams: sent {}  received {}  lost {} ({pct})  duplicates {}",
                r.test,
                r.direction.as_deref().or(r.op.as_deref()).unwrap_or(""),
                u.sent,
                u.received,
                u.lost,
                u.duplicates,
            );
            if r.test == "udp-lat" {
                let _ = write!(
                    line,
                    "  late {}  ipdv {}",
                    u.late.unwrap_or(0),
                    f2(u.ipdv_us)
                );
            } else {
                let _ = write!(
                    line,
                    "  reordered {}  stale {}  jitter {}",
                    u.reordered
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| "-".into()),
                    u.stale.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                    f2(u.jitter_us)
                );
            }
            o.push_str(&line);
            o.push('\n');
        }
    }
    o
}

/// One end's placement in a line: link, port rate, NUMA node, CPUs, buffers.
fn placement_line(side: &str, p: &crate::Placement) -> String {
    let mut parts = Vec::new();
    let link = match (&p.interface, &p.rdma_port) {
        (Some(i), Some(r)) => format!("{r} ({i})"),
        (None, Some(r)) => r.clone(),
        (Some(i), None) => i.clone(),
        (None, None) => "link unknown".into(),
    };
    parts.push(link);
    match (p.port_rate_gbps, &p.port_rate_source) {
        (Some(g), Some(src)) => parts.push(format!("{g} Gbit/s ({src})")),
        (Some(g), None) => parts.push(format!("{g} Gbit/s")),
        (None, _) if p.virtual_link => {
            parts.push("virtual link (its speed is a label, not a limit: no port rate)".into())
        }
        (None, _) => parts.push("port rate unknown".into()),
    }
    if let Some(n) = p.numa_node {
        parts.push(format!("NIC on NUMA node {n}"));
    }
    match &p.cpu_list {
        Some(l) => parts.push(format!("CPUs {l} ({})", p.cpu)),
        None => parts.push(format!("CPUs not pinned ({})", p.cpu)),
    }
    if let Some(b) = p.buffer_numa_node {
        parts.push(format!("buffers on node {b}"));
    }
    format!("{side}: {}", parts.join(", "))
}

/// Lines under any test's table that explain its figures: where each end ran (link, port
/// rate, NUMA node, CPUs), the counters that matter (errors, retransmits, pauses, discards;
/// `--json`/CSV carry every counter that moved) and the findings with their fixes. Nothing
/// for records without them.
pub fn explain(records: &[Record]) -> String {
    let mut o = String::new();
    if let Some(r) = records
        .iter()
        .find(|r| r.placement_local.is_some() || r.placement_remote.is_some())
    {
        for (side, p) in [
            ("client", &r.placement_local),
            ("agent", &r.placement_remote),
        ] {
            if let Some(p) = p {
                let _ = writeln!(o, "{}", placement_line(side, p));
            }
        }
    }
    // Counters: once per measurement (the per-stream rows share their total's).
    let mut seen: Vec<&crate::Counters> = Vec::new();
    for r in records.iter().filter(|r| r.stream.is_none()) {
        let Some(c) = &r.counters else { continue };
        if seen.contains(&c) {
            continue;
        }
        seen.push(c);
        for (side, list, missing) in [
            ("client", &c.local, &c.local_missing),
            ("agent", &c.remote, &c.remote_missing),
        ] {
            for d in list {
                let items: Vec<String> = d
                    .deltas
                    .iter()
                    .filter(|(k, _)| crate::counters::matters(k))
                    .map(|(k, v)| format!("{k} +{v}"))
                    .chain(d.reset.iter().map(|k| format!("{k} reset")))
                    .collect();
                if !items.is_empty() {
                    let _ = writeln!(
                        o,
                        "counters {} ({}): {side} {} [{}]: {}",
                        r.test,
                        r.size,
                        d.subject,
                        d.source.as_str(),
                        items.join("  ")
                    );
                }
            }
            for m in missing {
                let _ = writeln!(
                    o,
                    "counters {} ({}): {side} could not read {m}",
                    r.test, r.size
                );
            }
        }
    }
    let mut shown: Vec<&crate::Finding> = Vec::new();
    for f in records.iter().flat_map(|r| r.findings.iter()) {
        if shown.contains(&f) {
            continue;
        }
        shown.push(f);
        let _ = writeln!(
            o,
            "{:<7} {}  [{}]\n        {}",
            f.severity.as_str().to_uppercase(),
            f.id,
            f.subject,
            f.summary
        );
        for e in &f.evidence {
            let _ = writeln!(o, "        evidence: {} = {}", e.path, e.value);
        }
        for x in &f.fix {
            let _ = writeln!(o, "        fix: {x}");
        }
    }
    o
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{HostCpu, LatencyHistogram, LatencyKind, Record, Transport, UdpStats, Warning};

    pub(crate) fn sample() -> Vec<Record> {
        let mut a = Record::new("tcp-lat", Transport::Tcp, 64, 1);
        let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
        h.record_rtt_ns(30_000);
        a.set_latency(&h);
        let mut b = Record::new("tcp-bw", Transport::Tcp, 131072, 2);
        b.set_throughput(1_000_000_000, 1.0, Some(7629));
        b.retransmits = Some(3);
        b.warn(Warning::ShortInterval { secs: 0.1 });
        b.host_cpu_local = Some(HostCpu {
            user_pct: 1.0,
            system_pct: 20.0,
            irq_pct: 0.0,
            softirq_pct: 7.5,
            cpus: 2,
        });
        vec![a, b]
    }

    #[test]
    fn table_renders_aligned() {
        let t = Table::summary(&sample());
        let s = t.render();
        assert!(s.lines().count() == 3, "{s}");
        assert!(s.contains("tcp-bw"));
        assert!(s.contains("half-RTT"));
    }

    #[test]
    fn perftest_headings_and_absent_peak() {
        let mut r = Record::new("rdma-bw", Transport::Rdma, 65536, 1);
        r.set_throughput(8_000_000_000, 1.0, Some(122070));
        r.bw_peak_gbps = Some(70.0);
        let s = Table::perftest_bw(&[r.clone()], false).render();
        assert!(s.contains("BW peak[Gb/sec]") && s.contains("BW average[Gb/sec]"));
        assert!(s.contains("64.00") && s.contains("70.00"));
        let s = Table::perftest_bw(&[r.clone()], true).render();
        assert!(s.contains("MiB/sec") && s.contains("7629.39"), "{s}");
        // Duration mode: no peak, shown as "-" (perftest prints 0.00).
        r.bw_peak_gbps = None;
        let s = Table::perftest_bw(std::slice::from_ref(&r), false).render();
        let row = s.lines().nth(1).unwrap();
        assert!(row.split_whitespace().nth(2) == Some("-"), "{s}");
        assert!(!s.contains("direction"), "{s}");
        // Bidirectional: a direction column; the CPU table keeps the total.
        let mut total = r.clone();
        total.direction = Some("bidir".into());
        total.cpu_local_pct = Some(12.0);
        let mut fwd = r.clone();
        fwd.direction = Some("forward".into());
        let recs = [total, fwd];
        let s = Table::perftest_bw(&recs, false).render();
        assert!(s.lines().next().unwrap().ends_with("direction"), "{s}");
        assert!(s.lines().nth(2).unwrap().ends_with("forward"), "{s}");
        let c = Table::cpu(&recs).render();
        assert_eq!(c.lines().count(), 2, "{c}");
        assert!(c.contains("12.0"), "{c}");
    }

    #[test]
    fn cpu_table_shows_host_figures_when_present() {
        let s = Table::cpu(&sample()).render();
        assert!(s.contains("host local[%] usr/sys/softirq"), "{s}");
        assert!(s.contains("1.0/20.0/7.5 of 2 CPUs"), "{s}");
    }

    #[test]
    fn detail_lines_say_what_is_absent() {
        let mut r = Record::new("udp-bw", Transport::Udp, 1472, 1);
        r.direction = Some("forward".into());
        r.udp = Some(UdpStats {
            sent: 10,
            received: 9,
            lost: 1,
            loss_pct: Some(10.0),
            reordered: Some(0),
            stale: Some(0),
            ..Default::default()
        });
        let s = details(&[r]);
        assert!(
            s.contains("lost 1 (10.000%)") && s.contains("jitter -"),
            "{s}"
        );
        let mut l = Record::new("udp-lat", Transport::Udp, 64, 1);
        l.op = Some("ping-pong".into());
        l.udp = Some(UdpStats {
            sent: 0,
            late: Some(2),
            ipdv_us: Some(1.5),
            ..Default::default()
        });
        let s = details(&[l]);
        assert!(s.contains("late 2") && s.contains("ipdv 1.50 us"), "{s}");
        assert!(s.contains("lost 0 (-)"), "{s}");
        let s = details(&sample());
        assert!(
            s.contains("tcp-lat half-RTT latency (us, 1 samples)"),
            "{s}"
        );
    }

    #[test]
    fn explain_lines_show_placement_counters_and_findings() {
        use crate::{CounterDelta, CounterSource, Counters, Finding, Placement, Severity};
        assert_eq!(explain(&sample()), "");
        let mut r = Record::new("rdma-bw", Transport::Rdma, 65536, 1);
        r.set_throughput(8_000_000_000, 1.0, Some(122070));
        r.placement_local = Some(Placement {
            cpu: "auto".into(),
            cpu_list: Some("2-15".into()),
            numa_node: Some(0),
            buffer_numa_node: Some(0),
            interface: Some("eth2".into()),
            rdma_port: Some("mlx5_0 port 1".into()),
            port_rate_gbps: Some(100.0),
            port_rate_source: Some("rdma port rate".into()),
            virtual_link: false,
            gpu: None,
        });
        r.placement_remote = Some(Placement {
            cpu: "none".into(),
            interface: Some("veth1".into()),
            rdma_port: Some("rxe1 port 1".into()),
            virtual_link: true,
            ..Default::default()
        });
        r.set_port_rate();
        let d = |s: CounterSource, subject: &str, kv: &[(&str, u64)]| CounterDelta {
            source: s,
            subject: subject.into(),
            path: "p".into(),
            deltas: kv.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            units: Default::default(),
            reset: vec![],
        };
        r.counters = Some(Counters {
            local: vec![d(
                CounterSource::RdmaHw,
                "mlx5_0 port 1",
                &[("out_of_sequence", 12), ("rx_write_requests", 99)],
            )],
            remote: vec![d(CounterSource::Netdev, "veth1", &[("rx_bytes", 5)])],
            remote_missing: vec!["SIOCETHTOOL veth1: permission denied".into()],
            ..Default::default()
        });
        let f = Finding {
            id: "roce-packet-loss".into(),
            severity: Severity::Error,
            subject: "client mlx5_0 port 1".into(),
            summary: "packets were lost".into(),
            detail: "why".into(),
            evidence: vec![crate::Evidence {
                path: "/sys/x".into(),
                value: "+12".into(),
            }],
            cost_gbps: None,
            fix: vec!["configure PFC".into()],
        };
        r.findings.push(f.clone());
        let mut per_qp = r.clone();
        per_qp.stream = Some(0);
        per_qp.streams = 2;
        let s = explain(&[r.clone(), per_qp]);
        assert!(
            s.contains("client: mlx5_0 port 1 (eth2), 100 Gbit/s (rdma port rate), NIC on NUMA node 0, CPUs 2-15 (auto), buffers on node 0"),
            "{s}"
        );
        assert!(
            s.contains("agent: rxe1 port 1 (veth1), virtual link"),
            "{s}"
        );
        assert!(s.contains("CPUs not pinned (none)"), "{s}");
        assert!(
            s.contains(
                "counters rdma-bw (65536): client mlx5_0 port 1 [rdma_hw]: out_of_sequence +12"
            ),
            "{s}"
        );
        assert!(
            !s.contains("rx_write_requests") && !s.contains("rx_bytes"),
            "{s}"
        );
        assert!(s.contains("agent could not read SIOCETHTOOL veth1"), "{s}");
        assert_eq!(s.matches("ERROR   roce-packet-loss").count(), 1, "{s}");
        assert!(s.contains("fix: configure PFC") && s.contains("evidence: /sys/x = +12"));
        assert_eq!(s.matches("counters rdma-bw").count(), 2, "{s}");
        let t = Table::summary(std::slice::from_ref(&r)).render();
        assert!(t.lines().next().unwrap().ends_with("%port"), "{t}");
        assert!(t.lines().nth(1).unwrap().ends_with(" 64"), "{t}");
        let t = Table::perftest_bw(&[r], false).render();
        assert!(t.lines().next().unwrap().ends_with("%port"), "{t}");
    }
}
