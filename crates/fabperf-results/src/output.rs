//! Output formats: JSON Lines, flat CSV and human tables.

use crate::{Record, Transport};
use std::io::{self, Write};

/// Write records as JSON Lines: one object per line.
pub fn write_json_lines<W: Write>(mut w: W, records: &[Record]) -> io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut w, r)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Flat CSV column names, in order. Nested objects (`lat_us`, `udp`) become
/// `lat_us_p50`, `udp_lost`, ...
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
        "cpu_local_pct",
        "cpu_remote_pct",
        "retransmits",
        "udp_sent",
        "udp_received",
        "udp_lost",
        "udp_reordered",
        "udp_duplicates",
        "udp_loss_pct",
        "udp_jitter_us",
        "requests_per_s",
        "errors_connect",
        "errors_write",
        "errors_read",
        "errors_timeout",
        "errors_status",
        "errors_parse",
        "local",
        "remote",
        "device",
        "ib_port",
        "gid_index",
        "gid_type",
        "link_layer",
        "mtu",
        "poll_priority_local",
        "poll_priority_remote",
        "warnings",
        "started_at",
        "fabperf_version",
    ]
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_default()
}

fn csv_row(r: &Record) -> Vec<String> {
    let lat = r.lat_us.as_ref();
    let udp = r.udp.as_ref();
    let l =
        |f: fn(&crate::LatencySummary) -> f64| lat.map(|s| f(s).to_string()).unwrap_or_default();
    let u = |f: fn(&crate::UdpStats) -> String| udp.map(f).unwrap_or_default();
    let e = |f: fn(&crate::RequestErrors) -> u64| {
        r.errors
            .as_ref()
            .map(|x| f(x).to_string())
            .unwrap_or_default()
    };
    vec![
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
            crate::LatencyKind::HalfRtt => "half_rtt".to_string(),
            crate::LatencyKind::Rtt => "rtt".to_string(),
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
        opt(&r.cpu_local_pct),
        opt(&r.cpu_remote_pct),
        opt(&r.retransmits),
        u(|s| s.sent.to_string()),
        u(|s| s.received.to_string()),
        u(|s| s.lost.to_string()),
        u(|s| s.reordered.to_string()),
        u(|s| s.duplicates.to_string()),
        u(|s| s.loss_pct.to_string()),
        u(|s| s.jitter_us.to_string()),
        opt(&r.requests_per_s),
        e(|s| s.connect),
        e(|s| s.write),
        e(|s| s.read),
        e(|s| s.timeout),
        e(|s| s.status),
        e(|s| s.parse),
        opt(&r.local),
        opt(&r.remote),
        opt(&r.device),
        opt(&r.ib_port),
        opt(&r.gid_index),
        opt(&r.gid_type),
        opt(&r.link_layer),
        opt(&r.mtu),
        opt(&r.poll_priority_local),
        opt(&r.poll_priority_remote),
        r.warnings.join("; "),
        r.started_at.clone(),
        r.fabperf_version.clone(),
    ]
}

/// Write records as CSV with [`csv_header`] columns. `with_header` is false
/// when appending to an existing file.
pub fn write_csv<W: Write>(w: W, records: &[Record], with_header: bool) -> io::Result<()> {
    let mut wr = csv::WriterBuilder::new().has_headers(false).from_writer(w);
    let map = |e: csv::Error| io::Error::other(e.to_string());
    if with_header {
        wr.write_record(csv_header()).map_err(map)?;
    }
    for r in records {
        wr.write_record(csv_row(r)).map_err(map)?;
    }
    wr.flush()
}

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
                human_size(r.size),
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
                f3(r.udp.as_ref().map(|u| u.loss_pct)),
            ]);
        }
        t
    }

    /// perftest's bandwidth table: `#bytes #iterations BW peak BW average MsgRate`.
    /// Bandwidth in Gb/sec, or MiB/sec when `mib` is true.
    pub fn perftest_bw(records: &[Record], mib: bool) -> Table {
        let unit = if mib { "MiB/sec" } else { "Gb/sec" };
        let mut t = Table::new([
            "#bytes".to_string(),
            "#iterations".to_string(),
            format!("BW peak[{unit}]"),
            format!("BW average[{unit}]"),
            "MsgRate[Mpps]".to_string(),
        ]);
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
            t.row([
                r.size.to_string(),
                r.iterations
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                conv(r.bw_peak_gbps),
                conv(r.bw_gbps),
                r.msg_rate_mpps
                    .map(|m| format!("{m:.6}"))
                    .unwrap_or_else(|| "-".into()),
            ]);
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
}

/// 1024 -> "1K", 1048576 -> "1M", 1500 -> "1500".
pub fn human_size(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LatencyHistogram, LatencyKind, Record, Transport};

    fn sample() -> Vec<Record> {
        let mut a = Record::new("tcp-lat", Transport::Tcp, 64, 1);
        let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
        h.record_rtt_ns(30_000);
        a.lat_us = h.summary();
        let mut b = Record::new("tcp-bw", Transport::Tcp, 131072, 2);
        b.set_throughput(1_000_000_000, 1.0, Some(7629));
        b.retransmits = Some(3);
        vec![a, b]
    }

    #[test]
    fn json_lines_one_object_per_line() {
        let mut buf = Vec::new();
        write_json_lines(&mut buf, &sample()).unwrap();
        let s = String::from_utf8(buf).unwrap();
        let lines: Vec<_> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v.is_object());
        }
    }

    #[test]
    fn csv_has_header_and_flat_columns() {
        let mut buf = Vec::new();
        write_csv(&mut buf, &sample(), true).unwrap();
        let s = String::from_utf8(buf).unwrap();
        let mut rd = csv::Reader::from_reader(s.as_bytes());
        let hdr = rd.headers().unwrap().clone();
        assert_eq!(hdr.len(), csv_header().len());
        let rows: Vec<_> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 2);
        let p50 = hdr.iter().position(|h| h == "lat_us_p50").unwrap();
        let v: f64 = rows[0][p50].parse().unwrap();
        assert!((v - 15.0).abs() < 0.02, "{v}");
        // Not applicable -> empty cell, not 0.
        let retr = hdr.iter().position(|h| h == "retransmits").unwrap();
        assert_eq!(&rows[0][retr], "");
        assert_eq!(&rows[1][retr], "3");
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
    fn perftest_headings() {
        let mut r = Record::new("rdma-bw", Transport::Rdma, 65536, 1);
        r.set_throughput(8_000_000_000, 1.0, Some(122070));
        r.bw_peak_gbps = Some(70.0);
        let s = Table::perftest_bw(&[r.clone()], false).render();
        assert!(s.contains("BW peak[Gb/sec]") && s.contains("BW average[Gb/sec]"));
        assert!(s.contains("64.00"));
        let s = Table::perftest_bw(&[r], true).render();
        assert!(s.contains("MiB/sec") && s.contains("7629.39"), "{s}");
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(65536), "64K");
        assert_eq!(human_size(1472), "1472");
        assert_eq!(human_size(8 << 20), "8M");
    }
}
