//! The rules every record obeys ([`Record::check`]).

use crate::{LatencyHistogram, Record, SCHEMA_VERSION};

/// Relative tolerance for recomputed floating-point figures.
const REL: f64 = 1e-9;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= REL * a.abs().max(b.abs()).max(1e-12)
}

fn finite_nonneg(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// Equal counts and kind, and figures equal up to float rounding (the
/// mean and stdev are sums recomputed in another order after decoding).
fn same_summary(a: &crate::LatencySummary, b: &crate::LatencySummary) -> bool {
    let fa = [
        a.min, a.p50, a.p90, a.p99, a.p999, a.p9999, a.max, a.mean, a.stdev,
    ];
    let fb = [
        b.min, b.p50, b.p90, b.p99, b.p999, b.p9999, b.max, b.mean, b.stdev,
    ];
    a.kind == b.kind
        && a.samples == b.samples
        && fa
            .iter()
            .zip(fb)
            .all(|(x, y)| close(*x, y) || (x - y).abs() < 1e-9)
}

pub(crate) fn check(r: &Record) -> Vec<String> {
    let mut bad = Vec::new();
    let mut fail = |m: String| bad.push(m);
    if r.schema != SCHEMA_VERSION {
        fail(format!("schema {} is not {SCHEMA_VERSION}", r.schema));
    }
    if !finite_nonneg(r.duration_s) {
        fail(format!(
            "duration_s {} is not a non-negative number",
            r.duration_s
        ));
    }
    if r.streams == 0 {
        fail("streams is 0".into());
    }
    if let Some(s) = r.stream {
        if s >= r.streams {
            fail(format!("stream {s} is not below streams {}", r.streams));
        }
    }
    // Rates are the counts over the interval, and exist only with one.
    match r.bw_gbps {
        Some(bw) => {
            if r.duration_s <= 0.0 {
                fail(format!("bw_gbps {bw} without a measured interval"));
            } else {
                let want = r.bytes as f64 * 8.0 / r.duration_s / 1e9;
                if !close(bw, want) {
                    fail(format!(
                        "bw_gbps {bw} != bytes {} * 8 / duration_s {} / 1e9 = {want}",
                        r.bytes, r.duration_s
                    ));
                }
            }
        }
        None if r.test.ends_with("-bw") && !r.has_warning("no-interval") => {
            fail("a bandwidth record without bw_gbps must carry the no-interval warning".into())
        }
        None => {}
    }
    if let Some(m) = r.msg_rate_mpps {
        match r.iterations {
            Some(n) if r.duration_s > 0.0 => {
                let want = n as f64 / r.duration_s / 1e6;
                if !close(m, want) {
                    fail(format!(
                        "msg_rate_mpps {m} != iterations {n} / duration_s {} / 1e6 = {want}",
                        r.duration_s
                    ));
                }
            }
            _ => fail(format!(
                "msg_rate_mpps {m} without iterations and a measured interval"
            )),
        }
    }
    if let Some(p) = r.bw_peak_gbps {
        match r.bw_gbps {
            // perftest's peak includes the whole run's span, so it is never
            // below the average over that span.
            Some(bw) if p >= bw * (1.0 - 1e-6) && p.is_finite() => {}
            Some(bw) => fail(format!("bw_peak_gbps {p} is below bw_gbps {bw}")),
            None => fail(format!("bw_peak_gbps {p} without bw_gbps")),
        }
        if r.direction.as_deref() == Some("bidir") {
            fail(
                "a bidirectional total has no peak (the two ends' peaks are not simultaneous)"
                    .into(),
            );
        }
    }
    for (k, v) in [
        ("cpu_local_pct", r.cpu_local_pct),
        ("cpu_remote_pct", r.cpu_remote_pct),
    ] {
        if let Some(v) = v {
            if !finite_nonneg(v) {
                fail(format!("{k} {v} is not a non-negative number"));
            }
        }
    }
    for (k, h) in [
        ("host_cpu_local", &r.host_cpu_local),
        ("host_cpu_remote", &r.host_cpu_remote),
    ] {
        if let Some(h) = h {
            let parts = [h.user_pct, h.system_pct, h.irq_pct, h.softirq_pct];
            if h.cpus == 0 || !parts.iter().all(|v| finite_nonneg(*v)) {
                fail(format!(
                    "{k} {h:?} is not a set of non-negative figures over >= 1 CPU"
                ));
            }
        }
    }
    if let Some(l) = &r.lat_us {
        let order = [l.min, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max];
        if l.samples == 0 {
            fail("lat_us with 0 samples".into());
        }
        if !order.windows(2).all(|w| w[0] <= w[1]) || !finite_nonneg(l.min) {
            fail(format!("lat_us percentiles out of order: {order:?}"));
        }
        if !(l.mean >= l.min && l.mean <= l.max && finite_nonneg(l.stdev)) {
            fail(format!(
                "lat_us mean {} / stdev {} impossible",
                l.mean, l.stdev
            ));
        }
        if let Some(n) = r.iterations {
            if n != l.samples {
                fail(format!("iterations {n} != lat_us.samples {}", l.samples));
            }
        }
        if let Some(s) = &r.lat_hist {
            match LatencyHistogram::from_base64(s, l.kind) {
                Ok(h) if h.summary().as_ref().is_some_and(|d| same_summary(d, l)) => {}
                Ok(h) => fail(format!(
                    "lat_hist does not give lat_us: {:?} vs {l:?}",
                    h.summary()
                )),
                Err(e) => fail(format!("lat_hist: {e}")),
            }
        }
    } else if r.lat_hist.is_some() {
        fail("lat_hist without lat_us".into());
    }
    if let Some(g) = &r.send_lag_us {
        let order = [g.p50, g.p90, g.p99, g.max];
        let sane = g.samples > 0
            && order.windows(2).all(|w| w[0] <= w[1])
            && finite_nonneg(g.p50)
            && g.mean.is_finite()
            && g.mean >= 0.0
            && g.mean <= g.max;
        if !sane {
            fail(format!(
                "send_lag_us {g:?}: no samples, or figures out of order"
            ));
        }
        if let Some(n) = r.iterations {
            if g.samples > n {
                fail(format!(
                    "send_lag_us.samples {} > iterations {n}",
                    g.samples
                ));
            }
        }
    }
    if let Some(u) = &r.udp {
        if u.received <= u.sent && u.lost != u.sent - u.received {
            fail(format!(
                "udp.lost {} != sent {} - received {}",
                u.lost, u.sent, u.received
            ));
        }
        if u.received > u.sent && u.lost != 0 {
            fail(format!("udp.lost {} with more received than sent", u.lost));
        }
        match (u.loss_pct, u.sent) {
            (None, 0) => {}
            (Some(p), s) if s > 0 && close(p, u.lost as f64 * 100.0 / s as f64) => {}
            (p, s) => fail(format!(
                "udp.loss_pct {p:?} for lost {} of sent {s}",
                u.lost
            )),
        }
        for (k, v) in [("jitter_us", u.jitter_us), ("ipdv_us", u.ipdv_us)] {
            if let Some(v) = v {
                if !finite_nonneg(v) {
                    fail(format!("udp.{k} {v} is not a non-negative number"));
                }
            }
        }
    }
    if let Some(i) = &r.interval {
        for m in i.check() {
            fail(m);
        }
    }
    if let Some(f) = &r.flows {
        if !(f.overlap_pct.is_finite() && (0.0..=100.0 + 1e-9).contains(&f.overlap_pct)) {
            fail(format!(
                "flows.overlap_pct {} is not a percentage",
                f.overlap_pct
            ));
        }
        if f.start_skew_s.is_some_and(|s| !finite_nonneg(s)) {
            fail(format!(
                "flows.start_skew_s {:?} is not a non-negative number",
                f.start_skew_s
            ));
        }
        if f.count == 0 {
            fail("flows.count is 0".into());
        }
    }
    check_port_rate(r, &mut fail);
    bad
}

/// `port_rate_gbps` is the smaller of the ends' rates, and `bw_pct_of_port` is `bw_gbps` in
/// percent of it.
fn check_port_rate(r: &Record, fail: &mut impl FnMut(String)) {
    let ends: Vec<f64> = [&r.placement_local, &r.placement_remote]
        .into_iter()
        .flatten()
        .filter_map(|p| p.port_rate_gbps)
        .collect();
    for e in &ends {
        if !(e.is_finite() && *e > 0.0) {
            fail(format!(
                "a placement's port_rate_gbps {e} is not a positive number"
            ));
        }
    }
    if let Some(p) = r.port_rate_gbps {
        if !(p.is_finite() && p > 0.0) {
            fail(format!("port_rate_gbps {p} is not a positive number"));
        }
        if let Some(min) = ends.iter().copied().reduce(f64::min) {
            if !close(p, min) {
                fail(format!(
                    "port_rate_gbps {p} is not the smaller of the ends' rates ({min})"
                ));
            }
        }
    } else if !ends.is_empty() {
        fail("port_rate_gbps absent while an end reports a port rate".into());
    }
    match (r.bw_pct_of_port, r.bw_gbps, r.port_rate_gbps) {
        (Some(pct), Some(bw), Some(port)) => {
            let want = bw / port * 100.0;
            if !close(pct, want) {
                fail(format!(
                    "bw_pct_of_port {pct} != bw_gbps {bw} / port_rate_gbps {port} * 100 = {want}"
                ));
            }
            if r.direction.as_deref() == Some("bidir") {
                fail("a bidirectional total has no bw_pct_of_port (it adds two directions)".into());
            }
        }
        (Some(pct), _, _) => fail(format!(
            "bw_pct_of_port {pct} without bw_gbps and port_rate_gbps"
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    fn bw() -> Record {
        let mut r = Record::new("rdma-bw", Transport::Rdma, 65536, 1);
        r.set_throughput(65536 * 1000, 0.5, Some(1000));
        r.bw_peak_gbps = Some(r.bw_gbps.unwrap() * 1.1);
        r
    }

    #[test]
    fn a_consistent_record_passes() {
        assert_eq!(bw().check(), Vec::<String>::new());
        let mut l = Record::new("rdma-lat", Transport::Rdma, 2, 1);
        let mut h = LatencyHistogram::new(LatencyKind::HalfRtt);
        for ns in [10_000, 12_000, 50_000] {
            h.record_rtt_ns(ns);
        }
        l.set_latency(&h);
        l.iterations = Some(3);
        assert_eq!(l.check(), Vec::<String>::new());
    }

    #[test]
    fn each_broken_rule_is_named() {
        let has = |r: &Record, what: &str| {
            let c = r.check();
            assert!(c.iter().any(|m| m.contains(what)), "{what}: {c:?}");
        };
        let mut r = bw();
        r.bytes *= 2;
        has(&r, "bw_gbps");
        let mut r = bw();
        r.bw_gbps = None;
        r.bw_peak_gbps = None;
        r.msg_rate_mpps = None;
        has(&r, "no-interval");
        r.warn(Warning::NoInterval { what: "x".into() });
        assert!(r.check().is_empty(), "{:?}", r.check());
        let mut r = bw();
        r.iterations = Some(7);
        has(&r, "msg_rate_mpps");
        let mut r = bw();
        r.bw_peak_gbps = Some(0.1);
        has(&r, "below");
        let mut r = bw();
        r.direction = Some("bidir".into());
        has(&r, "bidirectional");
        let mut r = bw();
        r.cpu_local_pct = Some(f64::NAN);
        has(&r, "cpu_local_pct");
        let mut r = bw();
        r.stream = Some(1);
        has(&r, "stream 1");
        let mut r = bw();
        r.host_cpu_remote = Some(HostCpu::default());
        has(&r, "host_cpu_remote");
        let mut r = Record::new("udp-bw", Transport::Udp, 1472, 1);
        r.set_throughput(1472 * 9, 1.0, Some(9));
        r.udp = Some(UdpStats {
            sent: 10,
            received: 9,
            lost: 2,
            loss_pct: Some(20.0),
            ..Default::default()
        });
        has(&r, "udp.lost");
        r.udp = Some(UdpStats {
            sent: 0,
            received: 0,
            lost: 0,
            loss_pct: Some(0.0),
            ..Default::default()
        });
        has(&r, "loss_pct");
        let mut l = Record::new("tcp-lat", Transport::Tcp, 64, 1);
        let mut h = LatencyHistogram::new(LatencyKind::Rtt);
        h.record_rtt_ns(1000);
        l.set_latency(&h);
        l.iterations = Some(2);
        has(&l, "iterations 2");
        l.iterations = Some(1);
        let mut other = LatencyHistogram::new(LatencyKind::Rtt);
        other.record_rtt_ns(9000);
        l.lat_hist = Some(other.to_base64());
        has(&l, "lat_hist does not give lat_us");
        l.lat_hist = Some("garbage".into());
        has(&l, "lat_hist");
        // http-load's send lag: ordered, and over at most the counted requests.
        let mut r = Record::new("http-load", Transport::Tcp, 1024, 10);
        r.iterations = Some(2);
        let mut g = LatencyHistogram::new(LatencyKind::Rtt);
        g.record_rtt_ns(1_000_000);
        g.record_rtt_ns(2_000_000);
        r.send_lag_us = crate::SendLag::from_hist(&g);
        assert_eq!(r.check(), Vec::<String>::new());
        r.iterations = Some(1);
        has(&r, "send_lag_us.samples 2 > iterations 1");
        r.iterations = Some(2);
        if let Some(x) = r.send_lag_us.as_mut() {
            x.p50 = x.max + 1.0;
        }
        has(&r, "send_lag_us");
    }

    #[test]
    fn port_rate_rules() {
        let has = |r: &Record, what: &str| {
            let c = r.check();
            assert!(c.iter().any(|m| m.contains(what)), "{what}: {c:?}");
        };
        let mut r = bw();
        r.placement_local = Some(Placement {
            cpu: "auto".into(),
            port_rate_gbps: Some(100.0),
            ..Default::default()
        });
        r.placement_remote = Some(Placement {
            cpu: "auto".into(),
            port_rate_gbps: Some(25.0),
            ..Default::default()
        });
        r.set_port_rate();
        assert_eq!(r.port_rate_gbps, Some(25.0));
        assert!(r.check().is_empty(), "{:?}", r.check());
        let mut x = r.clone();
        x.port_rate_gbps = Some(100.0);
        has(&x, "smaller of the ends");
        let mut x = r.clone();
        x.port_rate_gbps = None;
        has(&x, "absent while");
        let mut x = r.clone();
        x.bw_pct_of_port = Some(99.0);
        has(&x, "bw_pct_of_port");
        let mut x = r.clone();
        x.bw_gbps = None;
        x.msg_rate_mpps = None;
        x.bw_peak_gbps = None;
        x.warn(Warning::NoInterval { what: "x".into() });
        has(&x, "without bw_gbps");
        let mut x = r.clone();
        x.placement_remote.as_mut().unwrap().port_rate_gbps = Some(f64::NAN);
        has(&x, "not a positive number");
        // A bidirectional total keeps the port rate but no percentage.
        let mut x = r.clone();
        x.bw_peak_gbps = None;
        x.direction = Some("bidir".into());
        x.set_port_rate();
        assert!(x.port_rate_gbps.is_some() && x.bw_pct_of_port.is_none());
        assert!(x.check().is_empty(), "{:?}", x.check());
        x.bw_pct_of_port = r.bw_pct_of_port;
        has(&x, "bidirectional total has no bw_pct_of_port");
    }
}
