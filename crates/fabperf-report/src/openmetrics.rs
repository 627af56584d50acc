//! Every stored measurement as OpenMetrics gauges (the text format that
//! Prometheus scrapes), labelled so dashboards can slice by test, size,
//! path and node pair, and a small Pushgateway client.
//!
//! Families (base units, as OpenMetrics asks: bytes and seconds):
//!
//! | family | unit | what |
//! |---|---|---|
//! | `fabperf_bandwidth_bytes_per_second` | bytes/s | payload bandwidth of a measurement |
//! | `fabperf_latency_seconds{stat=…, latency_kind=half_rtt\|rtt}` | seconds | min, p50, p90, p99, p999, max, mean |
//! | `fabperf_cpu_ratio{end=client\|agent, source=threads\|host}` | ratio | CPU time over wall time (1 = one CPU busy) |
//! | `fabperf_tcp_retransmits` | — | retransmitted segments during the measured interval |
//! | `fabperf_udp_loss_ratio` | ratio | datagrams lost / sent |
//! | `fabperf_duration_seconds` | seconds | the measured interval |
//! | `fabperf_flows_overlap_ratio` | ratio | concurrent flows, per direction: the common interval over the longest flow's |
//! | `fabperf_flows_start_skew_seconds` | seconds | concurrent flows, per direction: latest minus earliest sender start |
//! | `fabperf_flows_jain_index` | — | concurrent flows, per direction: Jain's index over the direction's flows |
//! | `fabperf_http_requests_per_second` | — | http-load: successful requests per second |
//! | `fabperf_http_failed_requests{error=…}` | — | http-load: failed requests in the interval, by kind |
//! | `fabperf_path_mtu_bytes` | bytes | mtu: the largest packet that crossed, per method (`op`) |
//! | `fabperf_port_rate_bytes_per_second` | bytes/s | a real port rate from an agent's inventory (none for virtual links) |
//! | `fabperf_run_cells{state=…}` | — | cells of a run by state |
//!
//! Cardinality is bounded by default: a series is a measurement's place in
//! the plan (test, sweep point, path, pattern, nodes, the cut of a
//! bisection), its value the mean over the repeats; per-stream records are
//! left out. A cell of concurrent flows (incast, bisection) is exported per
//! direction: its flows' `forward` and `reverse` records (never a flow's
//! `bidir` total as well) and each direction's aggregate, only when that
//! aggregate is usable (over a common interval of at least 90 % overlap),
//! with its overlap, start skew and Jain's index under the aggregate's
//! labels. [`Series::PerMeasurement`] adds `repeat`, `cell` and `stream`
//! (one series per stored record, as unbounded as the store).

use crate::data::{load, ReportError, RunData};
use crate::flows::{self, Leg};
use fabperf_store::{CellState, Store};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Which series an exposition has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Series {
    /// One series per measurement place, the mean over its repeats (no
    /// per-measurement label: bounded by the plan, not the store).
    #[default]
    Bounded,
    /// One series per stored record, with `repeat`, `cell` and `stream`.
    PerMeasurement,
}

/// Label names a measurement's series may carry, in order (`repeat`, `cell`
/// and `stream` only with [`Series::PerMeasurement`]).
pub const LABELS: [&str; 19] = [
    "run",
    "plan",
    "test",
    "kind",
    "op",
    "size",
    "streams",
    "direction",
    "mtu",
    "rate",
    "path",
    "pattern",
    "role",
    "src_node",
    "dst_node",
    "cut",
    "repeat",
    "cell",
    "stream",
];

/// The labels only [`Series::PerMeasurement`] has.
const PER_MEASUREMENT: [&str; 3] = ["repeat", "cell", "stream"];

/// Escape a label value: backslash, double quote and line feed.
pub fn escape_label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// A sample value: finite numbers only (the caller skips the others).
fn value(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

struct Family {
    name: &'static str,
    unit: Option<&'static str>,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

fn labels(pairs: &[(&str, String)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn dim(dims: &serde_json::Value, k: &str) -> String {
    match dims.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

fn family(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Family {
    Family {
        name,
        unit,
        help,
        samples: Vec::new(),
    }
}

/// The cut of a bisection cell: its flows, numbered per test, path and
/// sweep point in the order the run measured them.
fn cuts(data: &RunData) -> HashMap<String, usize> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut per: HashMap<String, usize> = HashMap::new();
    let mut out = HashMap::new();
    for c in data.cells.iter().filter(|c| c.spec.pattern == "bisection") {
        let s = &c.spec;
        let mut f: Vec<String> = s.flows.iter().map(|(a, b)| format!("{a}>{b}")).collect();
        f.sort();
        let group = format!("{}|{}|{}", s.test, s.path, s.dims);
        let key = format!("{group}|{}", f.join(","));
        let n = match seen.iter().find(|(k, _)| *k == key) {
            Some((_, n)) => *n,
            None => {
                let n = per.entry(group).or_default();
                *n += 1;
                seen.push((key, *n));
                *n
            }
        };
        out.insert(s.cell_id.clone(), n);
    }
    out
}

fn families(data: &RunData, series: Series) -> Vec<Family> {
    let mut bw = family(
        "fabperf_bandwidth_bytes_per_second",
        Some("bytes_per_second"),
        "Payload bandwidth of a fabperf measurement.",
    );
    let mut lat = family(
        "fabperf_latency_seconds",
        Some("seconds"),
        "Latency of a fabperf measurement by statistic; latency_kind says whether it is half a round trip (half_rtt) or a full one (rtt).",
    );
    let mut cpu = family(
        "fabperf_cpu_ratio",
        Some("ratio"),
        "CPU time over wall time during a measurement at one end (1 = one CPU fully busy).",
    );
    let mut retr = family(
        "fabperf_tcp_retransmits",
        None,
        "TCP segments the sender retransmitted during the measured interval.",
    );
    let mut loss = family(
        "fabperf_udp_loss_ratio",
        Some("ratio"),
        "UDP datagrams lost over datagrams sent.",
    );
    let mut dur = family(
        "fabperf_duration_seconds",
        Some("seconds"),
        "Measured interval of a fabperf measurement (warm-up excluded).",
    );
    let mut rps = family(
        "fabperf_http_requests_per_second",
        None,
        "http-load: successful requests (status below 400) completed per second.",
    );
    let mut http_err = family(
        "fabperf_http_failed_requests",
        None,
        "http-load: requests that failed during the measured interval, by the first thing that failed (connect, write, read, timeout, status, parse).",
    );
    let mut mtu = family(
        "fabperf_path_mtu_bytes",
        Some("bytes"),
        "Path MTU: the largest IP packet that crossed unfragmented, per method (op: forward, reverse, icmp).",
    );
    let mut port = family(
        "fabperf_port_rate_bytes_per_second",
        Some("bytes_per_second"),
        "Port rate of the link an agent serves on, from its inventory; none for a virtual link, whose speed is a label.",
    );
    let mut overlap = family(
        "fabperf_flows_overlap_ratio",
        Some("ratio"),
        "Concurrent flows (incast, bisection), per direction: the common interval, in which every flow measured, over the longest flow's measured interval.",
    );
    let mut skew = family(
        "fabperf_flows_start_skew_seconds",
        Some("seconds"),
        "Concurrent flows (incast, bisection), per direction: latest minus earliest start of the flows' senders.",
    );
    let mut jain = family(
        "fabperf_flows_jain_index",
        None,
        "Concurrent flows (incast, bisection), per direction: Jain's fairness index over the direction's flows (1 = equal shares, 1/n = one flow takes everything).",
    );
    let mut cells = family(
        "fabperf_run_cells",
        None,
        "Cells of a fabperf run by state.",
    );
    let run = data.run.id.to_string();
    let plan = data.run.plan_name.clone();
    let cut_of = cuts(data);
    let detail = series == Series::PerMeasurement;
    for c in &data.cells {
        let Some(samples) = data.samples.get(&c.spec.cell_id) else {
            continue;
        };
        let s = &c.spec;
        // Concurrent flows go by direction: an aggregate only when usable.
        let multi = flows::is_multi(&s.pattern);
        let legs: Vec<Leg> = if multi {
            flows::legs_of(c, samples)
        } else {
            Vec::new()
        };
        for m in samples {
            if !detail && m.role == fabperf_store::Role::Stream {
                continue;
            }
            // A record of concurrent flows by the direction it measured;
            // one that cannot be attributed (no direction in a bidir cell)
            // or a flow's bidir total is not exported.
            let dir = if multi && m.role != fabperf_store::Role::Stream {
                match flows::record_direction(s, m) {
                    Some(d) => d,
                    None => continue,
                }
            } else {
                m.rec.direction.clone().unwrap_or_else(|| "forward".into())
            };
            let dir = dir.as_str();
            if multi && m.role == fabperf_store::Role::Flow && dir == "bidir" {
                continue;
            }
            let leg = if multi && m.role == fabperf_store::Role::Aggregate {
                match legs
                    .iter()
                    .find(|l| l.direction == dir && (l.size.is_none() || l.size == m.rec.size))
                {
                    Some(l) if l.failed.is_none() => Some(l),
                    _ => continue,
                }
            } else {
                None
            };
            let r = &m.rec;
            let mut base: Vec<(&str, String)> = vec![
                ("run", run.clone()),
                ("plan", plan.clone()),
                ("test", s.test.clone()),
                ("kind", s.kind.clone()),
                ("op", r.op.clone().unwrap_or_else(|| dim(&s.dims, "op"))),
                (
                    "size",
                    r.size
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| dim(&s.dims, "size")),
                ),
                (
                    "streams",
                    r.streams.map(|x| x.to_string()).unwrap_or_default(),
                ),
                (
                    "direction",
                    r.direction
                        .clone()
                        .unwrap_or_else(|| dim(&s.dims, "direction")),
                ),
                ("mtu", dim(&s.dims, "mtu")),
                ("rate", dim(&s.dims, "rate")),
                ("path", s.path.clone()),
                ("pattern", s.pattern.clone()),
                ("role", m.role.as_str().to_string()),
                ("src_node", m.src.clone().unwrap_or_default()),
                ("dst_node", m.dst.clone().unwrap_or_default()),
                (
                    "cut",
                    cut_of
                        .get(&s.cell_id)
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                ),
                ("repeat", s.repeat.to_string()),
                ("cell", s.cell_id.clone()),
                (
                    "stream",
                    r.stream.map(|x| x.to_string()).unwrap_or_default(),
                ),
            ];
            if !detail {
                base.retain(|(k, _)| !PER_MEASUREMENT.contains(k));
            }
            let with = |extra: &[(&str, &str)]| {
                let mut v = base.clone();
                for (k, x) in extra {
                    v.push((k, x.to_string()));
                }
                labels(&v)
            };
            if let Some(b) = r.bw_gbps {
                bw.samples.push((with(&[]), b * 1e9 / 8.0));
            }
            if let Some(l) = &r.lat {
                let kind = l.kind.as_deref().unwrap_or("");
                for (stat, v) in [
                    ("min", l.min),
                    ("p50", l.p50),
                    ("p90", l.p90),
                    ("p99", l.p99),
                    ("p999", l.p999),
                    ("max", l.max),
                    ("mean", l.mean),
                ] {
                    if let Some(v) = v {
                        lat.samples
                            .push((with(&[("stat", stat), ("latency_kind", kind)]), v / 1e6));
                    }
                }
            }
            for (end, v) in [("client", r.cpu_local_pct), ("agent", r.cpu_remote_pct)] {
                if let Some(v) = v {
                    cpu.samples
                        .push((with(&[("end", end), ("source", "threads")]), v / 100.0));
                }
            }
            for (end, h) in [("client", r.host_cpu_local), ("agent", r.host_cpu_remote)] {
                if let Some(h) = h {
                    cpu.samples.push((
                        with(&[("end", end), ("source", "host")]),
                        h.total_pct / 100.0,
                    ));
                }
            }
            if let Some(x) = r.retransmits {
                retr.samples.push((with(&[]), x as f64));
            }
            if let Some(x) = r.udp_loss_pct {
                loss.samples.push((with(&[]), x / 100.0));
            }
            if let Some(x) = r.duration_s {
                dur.samples.push((with(&[]), x));
            }
            if let Some(x) = r.requests_per_s {
                rps.samples.push((with(&[]), x));
            }
            if let Some(e) = &r.errors {
                for (k, v) in e {
                    http_err.samples.push((with(&[("error", k)]), *v as f64));
                }
            }
            if s.kind == "mtu" {
                if let Some(x) = r.mtu {
                    mtu.samples.push((with(&[]), x as f64));
                }
            }
            if let Some(l) = leg {
                if let Some(o) = l.overlap_pct {
                    overlap.samples.push((with(&[]), o / 100.0));
                }
                if let Some(k) = l.start_skew_s {
                    skew.samples.push((with(&[]), k));
                }
                if let Some(j) = l.jain {
                    jain.samples.push((with(&[]), j));
                }
            }
        }
    }
    for a in &data.agents {
        if let Some(p) = a.inventory.port_rate_gbps {
            port.samples.push((
                labels(&[
                    ("run", run.clone()),
                    ("plan", plan.clone()),
                    ("node", a.name.clone()),
                    ("path", a.path.clone()),
                    ("iface", a.inventory.iface.clone().unwrap_or_default()),
                ]),
                p * 1e9 / 8.0,
            ));
        }
    }
    for st in [CellState::Done, CellState::Failed, CellState::Pending] {
        let k = data.cells.iter().filter(|c| c.state == st).count();
        cells.samples.push((
            labels(&[
                ("run", run.clone()),
                ("plan", plan.clone()),
                ("state", st.as_str().to_string()),
            ]),
            k as f64,
        ));
    }
    let mut out = vec![
        bw, lat, cpu, retr, loss, dur, overlap, skew, jain, rps, http_err, mtu, port, cells,
    ];
    if !detail {
        // Repeats of one place are one series: their mean.
        for f in &mut out {
            f.samples = mean_by_labels(std::mem::take(&mut f.samples));
        }
    }
    out
}

/// Samples with the same labels merged into their mean, in first-seen order.
fn mean_by_labels(samples: Vec<(String, f64)>) -> Vec<(String, f64)> {
    let mut idx: HashMap<String, usize> = HashMap::new();
    let mut acc: Vec<(String, f64, usize)> = Vec::new();
    for (l, v) in samples.into_iter().filter(|(_, v)| v.is_finite()) {
        match idx.get(&l) {
            Some(&i) => {
                acc[i].1 += v;
                acc[i].2 += 1;
            }
            None => {
                idx.insert(l.clone(), acc.len());
                acc.push((l, v, 1));
            }
        }
    }
    acc.into_iter()
        .map(|(l, sum, n)| (l, sum / n as f64))
        .collect()
}

/// Which text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// OpenMetrics 1.0 (`# UNIT`, `# EOF`).
    OpenMetrics,
    /// Prometheus text format 0.0.4 (what a Pushgateway accepts).
    Prometheus,
}

/// The exposition of the given runs' measurements, bounded
/// ([`Series::Bounded`]).
pub fn exposition(runs: &[RunData], flavor: Flavor) -> (String, usize) {
    exposition_with(runs, flavor, Series::Bounded)
}

/// The exposition of the given runs' measurements with the given series.
pub fn exposition_with(runs: &[RunData], flavor: Flavor, series: Series) -> (String, usize) {
    let mut merged: Vec<Family> = Vec::new();
    for data in runs {
        for f in families(data, series) {
            match merged.iter_mut().find(|m| m.name == f.name) {
                Some(m) => m.samples.extend(f.samples),
                None => merged.push(f),
            }
        }
    }
    let mut o = String::new();
    let mut n = 0;
    for f in &merged {
        let samples: Vec<&(String, f64)> =
            f.samples.iter().filter(|(_, v)| v.is_finite()).collect();
        if samples.is_empty() {
            continue;
        }
        let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(o, "# TYPE {} gauge", f.name);
        if let (Some(u), Flavor::OpenMetrics) = (f.unit, flavor) {
            let _ = writeln!(o, "# UNIT {} {u}", f.name);
        }
        for (l, v) in samples {
            let _ = writeln!(o, "{}{l} {}", f.name, value(*v));
            n += 1;
        }
    }
    if flavor == Flavor::OpenMetrics {
        o.push_str("# EOF\n");
    }
    (o, n)
}

/// Read the runs to export (one, or all).
pub fn load_runs(store: &Store, run: Option<i64>) -> Result<Vec<RunData>, ReportError> {
    match run {
        Some(id) => Ok(vec![load(store, Some(id))?]),
        None => store
            .runs()?
            .iter()
            .map(|r| load(store, Some(r.id)))
            .collect(),
    }
}

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("--push {url}: {msg}")]
    Url { url: String, msg: String },
    #[error("pushing to {url}: {msg}")]
    Http { url: String, msg: String },
    #[error("the Pushgateway at {url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
}

/// The grouping-key URL for a run: the given URL when it already names a
/// group (`…/metrics/job/…`), else `URL/metrics/job/fabperf/run/ID`.
pub fn push_url(base: &str, run: i64) -> Result<String, PushError> {
    let bad = |msg: &str| PushError::Url {
        url: base.to_string(),
        msg: msg.to_string(),
    };
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| {
            if base.starts_with("https://") {
                bad("https is not supported by this build; push over http (inside the cluster) or through a TLS-terminating proxy")
            } else {
                bad("expected an http:// URL, e.g. http://pushgateway:9091")
            }
        })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty()
        || host.contains('@')
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad(
            "expected http://HOST[:PORT][/path], without credentials or spaces",
        ));
    }
    if base
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(bad("the URL may not contain spaces, a query or a fragment"));
    }
    if rest.contains("/metrics/job/") {
        return Ok(base.to_string());
    }
    Ok(format!(
        "{}/metrics/job/fabperf/run/{run}",
        base.trim_end_matches('/')
    ))
}

/// PUT one run's metrics to a Pushgateway (replacing that run's group).
pub fn push(url: &str, body: &str, timeout: std::time::Duration) -> Result<(), PushError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .put(url)
        .header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        .send(body)
        .map_err(|e| PushError::Http {
            url: url.to_string(),
            msg: e.to_string(),
        })?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let text = resp
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Err(PushError::Status {
        url: url.to_string(),
        status,
        body: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(
            labels(&[("a", "x".into()), ("b", String::new()), ("c", "y".into())]),
            "{a=\"x\",c=\"y\"}"
        );
        assert_eq!(value(9.5e9), "9500000000");
        assert_eq!(
            mean_by_labels(vec![
                ("a".into(), 1.0),
                ("b".into(), 5.0),
                ("a".into(), 2.0)
            ]),
            vec![("a".to_string(), 1.5), ("b".to_string(), 5.0)]
        );
        assert_eq!(value(0.0000105), "0.0000105");
    }

    #[test]
    fn push_urls() {
        assert_eq!(
            push_url("http://pg:9091", 3).unwrap(),
            "http://pg:9091/metrics/job/fabperf/run/3"
        );
        assert_eq!(
            push_url("http://pg:9091/", 3).unwrap(),
            "http://pg:9091/metrics/job/fabperf/run/3"
        );
        assert_eq!(
            push_url("http://pg:9091/metrics/job/ci/cluster/a", 3).unwrap(),
            "http://pg:9091/metrics/job/ci/cluster/a"
        );
        for bad in [
            "https://pg:9091",
            "pg:9091",
            "http://",
            "http://user:pw@pg:9091",
            "http://pg:9091/x?y=1",
            "http://pg 9091",
        ] {
            assert!(push_url(bad, 1).is_err(), "{bad}");
        }
    }
}
