//! The rules a report's figures follow, each on a store made for it:
//! instances are not repeats, baselines are like with like, "within noise"
//! is Welch's t-test, a virtual link's speed is a label, ci-low needs two
//! repeats, http-load and mtu rows have tables, and the OpenMetrics export
//! is in bytes, says the latency kind and is bounded.

mod common;

use common::{agent, bw, lat, record, B};
use fabperf_report::analysis::{Family, Level, Row};
use fabperf_report::openmetrics::{self, Flavor, Series};
use fabperf_report::{build, gate, html, text, Options, Report};
use fabperf_store::{Measurement, Role, Store};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const PLAN: &str = "name = \"custom\"\nbaseline = \"host\"\n";

fn store(
    agents: &[fabperf_store::AgentRow],
    fill: impl FnOnce(&mut B),
) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("s.db");
    let mut b = common::open(&db, PLAN, agents);
    fill(&mut b);
    b.finish(&db);
    (d, db)
}

fn report(db: &Path, opts: &Options) -> Report {
    build(&Store::open_read_only(db).unwrap(), opts).unwrap()
}

fn close(a: f64, b: f64, eps: f64) -> bool {
    (a - b).abs() <= eps
}

fn find<'a>(r: &'a Report, test: &str, path: &str) -> &'a Row {
    r.rows
        .iter()
        .find(|x| x.test == test && x.path == path)
        .unwrap_or_else(|| panic!("no row {test} on {path}"))
}

#[allow(clippy::too_many_arguments)]
fn gbps_cell(
    b: &mut B,
    id: &str,
    test: &str,
    path: &str,
    dims: Value,
    rep: u32,
    pair: (&str, &str),
    g: f64,
) {
    b.pair(
        id,
        test,
        "tcp-bw",
        path,
        dims,
        rep,
        pair,
        bw("tcp-bw", 65536, g, None),
    );
}

/// Concurrent flows with an aggregate, as `fabperf run` stores them (the
/// runner's own `cell_measurements`): each flow `agg / n` forward over the
/// same 3 s.
fn multi(
    b: &mut B,
    id: &str,
    test: &str,
    pattern: &str,
    flows: &[(&str, &str)],
    rep: u32,
    agg: f64,
) {
    let results = flows
        .iter()
        .map(|_| {
            common::drive_result(
                "tcp-bw",
                131072,
                &[("forward", agg / flows.len() as f64, common::T0)],
                3.0,
            )
        })
        .collect();
    b.concurrent(
        id,
        test,
        "tcp-bw",
        "host",
        pattern,
        flows,
        json!({}),
        rep,
        results,
    )
    .unwrap();
}

fn hosts(names: &[&str], path: &str) -> Vec<fabperf_store::AgentRow> {
    names
        .iter()
        .map(|n| agent(n, path, Some(100.0), 9000))
        .collect()
}

#[test]
fn instances_are_not_pooled_as_repeats() {
    let (_d, db) = store(&hosts(&["n1", "n2", "n3"], "host"), |b| {
        // Three mesh pairs, three tight repeats each, far apart from each other.
        for (pair, base) in [
            (("n1", "n2"), 9.0),
            (("n1", "n3"), 5.0),
            (("n2", "n3"), 7.0),
        ] {
            for rep in 0..3u32 {
                let spec = b.cell(
                    &format!("mesh-{}{}-r{rep}", pair.0, pair.1),
                    "mesh-bw",
                    "tcp-bw",
                    "host",
                    "mesh",
                    &[pair],
                    json!({}),
                    rep,
                );
                b.done(
                    &spec,
                    vec![Measurement {
                        role: Role::Total,
                        src: Some(pair.0.into()),
                        dst: Some(pair.1.into()),
                        record: bw("tcp-bw", 131072, base + rep as f64 * 0.1, None),
                    }],
                );
            }
        }
        // An incast into each of two receivers.
        for rep in 0..2u32 {
            let x = rep as f64 * 0.2;
            multi(
                b,
                &format!("ic-n1-r{rep}"),
                "incast",
                "incast",
                &[("n2", "n1"), ("n3", "n1")],
                rep,
                8.0 + x,
            );
            multi(
                b,
                &format!("ic-n2-r{rep}"),
                "incast",
                "incast",
                &[("n1", "n2"), ("n3", "n2")],
                rep,
                4.0 + x,
            );
        }
        // Two bisection cuts: the slow one is the bisection bandwidth.
        for rep in 0..2u32 {
            let x = rep as f64 * 0.2;
            multi(
                b,
                &format!("cut-a-r{rep}"),
                "bisection",
                "bisection",
                &[("n1", "n2"), ("n2", "n3")],
                rep,
                9.0 + x,
            );
            multi(
                b,
                &format!("cut-b-r{rep}"),
                "bisection",
                "bisection",
                &[("n1", "n3"), ("n3", "n2")],
                rep,
                15.0 + x,
            );
        }
    });
    let r = report(&db, &Options::default());
    // The mesh: its pairs side by side, no interval across them.
    let m = find(&r, "mesh-bw", "host");
    assert!(
        m.stats.is_none(),
        "a mesh's pairs are not repeats: {:?}",
        m.stats
    );
    let sp = m.spread.as_ref().expect("a spread over the pairs");
    assert_eq!((sp.of, sp.count, sp.headline), ("pairs", 3, "median"));
    assert!(
        close(sp.min, 5.1, 1e-9) && close(sp.median, 7.1, 1e-9) && close(sp.max, 9.1, 1e-9),
        "{sp:?}"
    );
    assert_eq!(sp.worst, "n1 -> n3");
    assert!(close(m.mean().unwrap(), 7.1, 1e-9));
    assert_eq!(m.instances.len(), 3);
    for i in &m.instances {
        let st = i.stats.as_ref().unwrap();
        assert_eq!(st.n, 3, "{i:?}");
        assert!(
            st.ci95.unwrap() < 0.3,
            "the interval is over one pair's repeats: {i:?}"
        );
    }
    assert!(
        !m.warnings.iter().any(|w| w.contains("noisy")),
        "{:?}",
        m.warnings
    );
    assert_eq!(m.repeats_label(), "3");
    // The mesh gates: min is the worst pair, ci-low the lowest pair's bound.
    let run = |g: &str| gate::evaluate(&gate::parse(g).unwrap(), &r, None);
    let o = run("test:mesh-bw tcp-bw min >= 6Gbps");
    assert_eq!(o.violations[0].measured, "5.10 Gbit/s", "{o:?}");
    assert!(run("test:mesh-bw tcp-bw ci-low >= 4.5Gbps").passed());
    // Incast: one row per receiver, each over its own repeats.
    let ic: Vec<&Row> = r.rows.iter().filter(|x| x.pattern == "incast").collect();
    assert_eq!(
        ic.len(),
        2,
        "{:?}",
        ic.iter().map(|x| &x.scope).collect::<Vec<_>>()
    );
    let into1 = ic.iter().find(|x| x.scope == "incast into n1").unwrap();
    assert_eq!(into1.stats.as_ref().unwrap().n, 2);
    assert!(close(into1.mean().unwrap(), 8.1, 1e-9));
    let into2 = ic.iter().find(|x| x.scope == "incast into n2").unwrap();
    assert!(close(into2.mean().unwrap(), 4.1, 1e-9));
    // Bisection: the minimum over the cuts, its interval over that cut's repeats.
    let bi = find(&r, "bisection", "host");
    assert_eq!(bi.scope, "bisection, min of 2 cuts");
    assert!(
        close(bi.mean().unwrap(), 9.1, 1e-9),
        "not the mean over cuts: {:?}",
        bi.mean()
    );
    let st = bi.stats.as_ref().unwrap();
    assert_eq!(st.n, 2);
    // t(0.975, 1) · sd / √2 = 12.7062 · 0.14142 / 1.41421 = 1.2706.
    assert!(close(st.ci95.unwrap(), 1.2706, 1e-3), "{st:?}");
    let sp = bi.spread.as_ref().unwrap();
    assert_eq!((sp.of, sp.count, sp.headline), ("cuts", 2, "min"));
    assert!(close(sp.max, 15.1, 1e-9));
    assert!(!run("bisection bw >= 10Gbps").passed());
    assert!(run("bisection bw >= 9Gbps").passed());
    // The bisection table numbers the cuts.
    let cuts: Vec<usize> = r.bisections.iter().map(|b| b.cut).collect();
    assert_eq!(cuts, vec![1, 2, 1, 2]);
    let t = text::render(&r, false);
    assert!(t.contains("bisection, min of 2 cuts"), "{t}");
    assert!(
        t.contains("3 pairs, 3 repeat(s) each: worst 5.10 (n1 -> n3)"),
        "{t}"
    );
}

#[test]
fn baseline_rows_are_like_with_like() {
    let mut agents = hosts(&["n1", "n2"], "host");
    agents.extend(hosts(&["n1", "n2"], "pod"));
    let (_d, db) = store(&agents, |b| {
        let p = ("n1", "n2");
        for rep in 0..2u32 {
            let x = rep as f64 * 0.1;
            // UDP at 10G on the host, at 1G on the pod network.
            for (path, rate, g) in [("host", "10G", 9.0), ("pod", "1G", 0.9)] {
                b.pair(
                    &format!("udp-{path}-r{rep}"),
                    "udp",
                    "udp-bw",
                    path,
                    json!({"size": 1400, "rate": rate}),
                    rep,
                    p,
                    bw("udp-bw", 1400, g + x, None),
                );
            }
            // Four streams on the host, one on the pod network.
            for (path, streams) in [("host", 4), ("pod", 1)] {
                gbps_cell(
                    b,
                    &format!("st-{path}-r{rep}"),
                    "streams",
                    path,
                    json!({"size": 32768, "streams": streams}),
                    rep,
                    p,
                    5.0 + x,
                );
            }
            // rdma-lat write on the host, read on the pod network.
            for (path, op) in [("host", "write"), ("pod", "read")] {
                b.pair(
                    &format!("rl-{path}-r{rep}"),
                    "rl",
                    "rdma-lat",
                    path,
                    json!({"size": 64, "op": op}),
                    rep,
                    p,
                    lat("rdma-lat", 64, 2.0 + x, 4.0, Some(op)),
                );
            }
            // Like with like.
            for path in ["host", "pod"] {
                gbps_cell(
                    b,
                    &format!("like-{path}-r{rep}"),
                    "like",
                    path,
                    json!({"size": 65536}),
                    rep,
                    p,
                    8.0 + x,
                );
            }
        }
    });
    let r = report(&db, &Options::default());
    for test in ["udp", "streams", "rl"] {
        let row = find(&r, test, "pod");
        assert!(
            row.base.is_none(),
            "{test}: compared with an unlike row: {:?}",
            row.base
        );
        assert!(
            row.warnings
                .iter()
                .any(|w| w.contains("no like row on host")),
            "{test}: {:?}",
            row.warnings
        );
    }
    assert!(find(&r, "udp", "pod")
        .warnings
        .iter()
        .any(|w| w.contains("rate 1G vs 10G")));
    assert!(find(&r, "streams", "pod")
        .warnings
        .iter()
        .any(|w| w.contains("streams 1 vs 4")));
    assert!(find(&r, "rl", "pod")
        .warnings
        .iter()
        .any(|w| w.contains("op read vs write")));
    assert!(find(&r, "like", "pod").base.is_some());
    // Gates compare only like rows too.
    let o = gate::evaluate(
        &gate::parse("path:pod test:udp udp-bw >= 0.5 * path:host").unwrap(),
        &r,
        None,
    );
    assert!(
        !o.passed()
            && o.violations[0]
                .required
                .contains("nothing like it on path host"),
        "{o:?}"
    );
    // Asked for: the unlike difference, marked, never judged.
    let r = report(
        &db,
        &Options {
            unlike: true,
            ..Default::default()
        },
    );
    let d = find(&r, "udp", "pod")
        .base
        .as_ref()
        .expect("an unlike comparison");
    assert_eq!(d.unlike, vec!["rate 1G vs 10G".to_string()]);
    assert_eq!(d.within_noise, None);
    let t = text::render(&r, false);
    assert!(t.contains("≠"), "{t}");
    assert!(
        t.contains("compared with an unlike row on host (rate 1G vs 10G; --compare-unlike)"),
        "{t}"
    );
    let v = r.verdicts.iter().find(|v| v.subject == "pod").unwrap();
    assert!(
        !v.text.contains("udp-bw"),
        "an unlike difference is not judged: {}",
        v.text
    );
}

#[test]
fn within_noise_is_welchs_test_on_the_compared_figure() {
    let (_d, db) = store(
        &[
            agent("n1", "host", None, 9000),
            agent("n2", "host", None, 9000),
            agent("n1", "pod", None, 9000),
            agent("n2", "pod", None, 9000),
        ],
        |b| {
            let p = ("n1", "n2");
            // Overlapping 95 % intervals, yet a real difference (p = 0.017).
            for (rep, (h, o)) in [(10.0, 8.7), (10.5, 9.0), (11.0, 9.3)].iter().enumerate() {
                gbps_cell(
                    b,
                    &format!("bw-host-r{rep}"),
                    "bw",
                    "host",
                    json!({"size": 65536}),
                    rep as u32,
                    p,
                    *h,
                );
                gbps_cell(
                    b,
                    &format!("bw-pod-r{rep}"),
                    "bw",
                    "pod",
                    json!({"size": 65536}),
                    rep as u32,
                    p,
                    *o,
                );
            }
            // Latency: the pod's third repeat is slow; every sample of each
            // repeat sits at its p50.
            for (rep, (h, o)) in [(10_000u64, 10_000u64), (10_000, 10_000), (10_000, 30_000)]
                .iter()
                .enumerate()
            {
                for (path, ns) in [("host", *h), ("pod", *o)] {
                    let id = format!("lat-{path}-r{rep}");
                    b.pair(
                        &id,
                        "lat",
                        "tcp-lat",
                        path,
                        json!({"size": 64}),
                        rep as u32,
                        p,
                        lat("tcp-lat", 64, ns as f64 / 1000.0, ns as f64 / 1000.0, None),
                    );
                    b.hist(&id, common::hist_b64(ns, 1000, ns, 1));
                }
            }
        },
    );
    let r = report(&db, &Options::default());
    let pod = find(&r, "bw", "pod");
    let d = pod.base.as_ref().unwrap();
    let w = d.welch.expect("three repeats on each side");
    assert!(close(w.p, 0.01745, 2e-4), "{w:?}");
    assert_eq!(
        d.within_noise,
        Some(false),
        "a significant difference is not noise"
    );
    let v = r.verdicts.iter().find(|v| v.subject == "pod").unwrap();
    // Not softened: no "not significant" caveat on the bandwidth part.
    assert!(
        v.text
            .contains("−14 % vs host at 64 KiB (tcp-bw 9.00 vs 10.5 Gbit/s);"),
        "{}",
        v.text
    );
    assert_eq!(v.level, Level::Warn);
    // Latency: the difference is of the repeats' p50 mean, the figure the
    // test judges (the merged histogram's p50 is 10 µs on both paths).
    let l = find(&r, "lat", "pod");
    assert!(close(l.lat.as_ref().unwrap().p50.unwrap(), 10.0, 0.01));
    let d = l.base.as_ref().unwrap();
    let want = l.mean().unwrap() - find(&r, "lat", "host").mean().unwrap();
    assert!(close(want, 20.0 / 3.0, 0.01), "{want}");
    assert!(close(d.d_p50_us.unwrap(), want, 1e-9), "{d:?}");
    assert_eq!(d.within_noise, Some(true), "{d:?}");
    let t = text::render(&r, false);
    assert!(t.contains("Welch's two-sample t-test"), "{t}");
}

/// A record whose both ends ran on a virtual link (veth): its speed is a label.
fn on_veth(g: f64, cap: Option<f64>) -> fabperf_results::Record {
    let mut p = json!({"cpu": "none", "interface": "veth0", "virtual_link": true});
    if let Some(c) = cap {
        p["port_rate_gbps"] = json!(c);
        p["port_rate_source"] = json!("tc cap");
    }
    record(
        "tcp-bw",
        65536,
        json!({"bw_gbps": g, "bytes": (g * 1e9 / 8.0 * 3.0) as u64, "direction": "forward",
               "placement_local": p.clone(), "placement_remote": p}),
    )
}

#[test]
fn a_virtual_links_speed_is_no_port_rate() {
    let mut agents = Vec::new();
    for n in ["n1", "n2"] {
        // The testbed's fabric: a veth says 10000 Mb/s; only the records know.
        agents.push(agent(n, "fabric", Some(10.0), 1500));
        agents.push(agent(n, "capped", Some(10.0), 1500));
        // An inventory that names its driver.
        let mut a = agent(n, "bridge", Some(10.0), 1500);
        a.hello["agent"]["inventory"]["driver"] = json!("veth");
        agents.push(a);
        // A real 10G port that measured three times its rate.
        agents.push(agent(n, "real", Some(10.0), 1500));
    }
    let (_d, db) = store(&agents, |b| {
        let p = ("n1", "n2");
        for rep in 0..2u32 {
            let x = rep as f64 * 0.2;
            b.pair(
                &format!("f-r{rep}"),
                "bw",
                "tcp-bw",
                "fabric",
                json!({"size": 65536}),
                rep,
                p,
                on_veth(30.9 + x, None),
            );
            b.pair(
                &format!("c-r{rep}"),
                "bw",
                "tcp-bw",
                "capped",
                json!({"size": 65536}),
                rep,
                p,
                on_veth(0.9 + x, Some(1.0)),
            );
            gbps_cell(
                b,
                &format!("b-r{rep}"),
                "bw",
                "bridge",
                json!({"size": 65536}),
                rep,
                p,
                30.0 + x,
            );
            gbps_cell(
                b,
                &format!("r-r{rep}"),
                "bw",
                "real",
                json!({"size": 65536}),
                rep,
                p,
                30.9 + x,
            );
        }
    });
    let r = report(
        &db,
        &Options {
            baseline: Some("real".into()),
            ..Default::default()
        },
    );
    for path in ["fabric", "bridge"] {
        let row = find(&r, "bw", path);
        assert_eq!((row.port_rate_gbps, row.pct_port), (None, None), "{path}");
        assert!(row.port_finding.is_none(), "{path}");
        let v = r.verdicts.iter().find(|v| v.subject == path).unwrap();
        assert!(!v.text.contains("port"), "{path}: {}", v.text);
        let o = gate::evaluate(
            &gate::parse(&format!("path:{path} tcp-bw >= 90% port_rate")).unwrap(),
            &r,
            None,
        );
        assert!(
            !o.passed() && o.violations[0].required.contains("port rate is unknown"),
            "{o:?}"
        );
    }
    assert!(r
        .agents
        .iter()
        .filter(|a| a.path == "fabric")
        .all(|a| a.inventory.virtual_link && a.inventory.label_rate_gbps == Some(10.0)));
    // A tc cap on a virtual link is a real limit.
    let c = find(&r, "bw", "capped");
    assert_eq!(c.port_rate_gbps, Some(1.0));
    assert!(close(c.pct_port.unwrap(), 100.0, 1e-9));
    // Above a real port rate: a finding, never a percentage.
    let real = find(&r, "bw", "real");
    assert_eq!(real.pct_port, None);
    let f = real.port_finding.as_deref().expect("a finding");
    assert!(
        f.contains("31.0 Gbit/s measured is above the 10.0 Gbit/s port rate"),
        "{f}"
    );
    let v = r.verdicts.iter().find(|v| v.subject == "real").unwrap();
    assert!(
        v.text.contains("above the 10.0 Gbit/s port rate") && !v.text.contains("310 %"),
        "{}",
        v.text
    );
    assert!(v.level >= Level::Warn);
    let o = gate::evaluate(
        &gate::parse("path:real tcp-bw >= 90% port_rate").unwrap(),
        &r,
        None,
    );
    assert!(
        !o.passed(),
        "a figure above the port rate does not pass a port-rate gate"
    );
    assert!(o.violations[0].required.contains("counted twice"), "{o:?}");
    let t = text::render(&r, false);
    assert!(
        t.contains(">port") && !t.contains(" 310 ") && !t.contains(" 309 "),
        "{t}"
    );
    // The export has no port rate for a virtual link.
    let runs = openmetrics::load_runs(&Store::open_read_only(&db).unwrap(), None).unwrap();
    let (om, _) = openmetrics::exposition(&runs, Flavor::OpenMetrics);
    let ports: Vec<&str> = om
        .lines()
        .filter(|l| l.starts_with("fabperf_port_rate_bytes_per_second{"))
        .collect();
    assert!(
        ports
            .iter()
            .all(|l| l.contains("path=\"real\"") || l.contains("path=\"capped\"")),
        "{ports:?}"
    );
    assert_eq!(ports.len(), 4, "{ports:?}");
}

#[test]
fn ci_low_needs_two_repeats() {
    let (_d, db) = store(&hosts(&["n1", "n2"], "host"), |b| {
        gbps_cell(
            b,
            "one",
            "one",
            "host",
            json!({"size": 65536}),
            0,
            ("n1", "n2"),
            9.0,
        );
        for rep in 0..3u32 {
            gbps_cell(
                b,
                &format!("three-r{rep}"),
                "three",
                "host",
                json!({"size": 1024}),
                rep,
                ("n1", "n2"),
                9.0 + rep as f64 * 0.1,
            );
        }
    });
    let r = report(&db, &Options::default());
    let run = |g: &str| gate::evaluate(&gate::parse(g).unwrap(), &r, None);
    let o = run("test:one tcp-bw ci-low >= 1Gbps");
    assert!(!o.passed(), "a lower bound from one repeat cannot pass");
    assert!(
        o.violations[0].measured.contains("needs ≥ 2 repeats"),
        "{o:?}"
    );
    assert!(run("test:one tcp-bw >= 1Gbps").passed());
    assert!(run("test:three tcp-bw ci-low >= 8.5Gbps").passed());
    assert!(!run("test:three tcp-bw ci-low >= 9.05Gbps").passed());
}

#[test]
fn http_load_and_mtu_rows_have_tables_in_every_format() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("fixture.db");
    common::build(&db);
    let r = report(&db, &Options::default());
    assert!(
        !r.notes.iter().any(|n| n.contains("left out")),
        "{:?}",
        r.notes
    );
    let h = r
        .rows
        .iter()
        .find(|x| x.family == Family::Http && x.path == "overlay")
        .unwrap();
    assert!(close(h.mean().unwrap(), 3050.0, 1e-9));
    let hf = h.http.as_ref().unwrap();
    assert_eq!(
        (hf.errors["timeout"], hf.errors["status"], hf.errors_total),
        (6, 4, 10)
    );
    let d = h.base.as_ref().unwrap();
    assert!(close(
        d.d_pct.unwrap(),
        (3050.0 - 5100.0) / 5100.0 * 100.0,
        1e-9
    ));
    assert!(
        d.d_p50_us.unwrap() > 600.0 && d.d_error_pp.unwrap() > 0.0,
        "{d:?}"
    );
    let m = r
        .rows
        .iter()
        .find(|x| {
            x.family == Family::Mtu && x.path == "overlay" && x.op.as_deref() == Some("forward")
        })
        .unwrap();
    assert_eq!(m.mean(), Some(8950.0));
    assert_eq!(m.base.as_ref().unwrap().d_bytes, Some(50));
    assert!(m
        .mtu_path
        .as_ref()
        .unwrap()
        .encapsulation
        .as_deref()
        .unwrap()
        .starts_with("vxlan 50 B (outer Ethernet 14"));
    let t = text::render(&r, false);
    for want in [
        "== HTTP load",
        "status 4, timeout 6",
        "== Path MTU",
        "50 B less than host",
    ] {
        assert!(t.contains(want), "table: no {want:?}");
    }
    let md = text::render(&r, true);
    assert!(
        md.contains("## HTTP load") && md.contains("## Path MTU") && md.contains("| http |"),
        "{md}"
    );
    let csv = text::csv(&r).unwrap();
    assert!(
        csv.lines().any(|l| l.contains(",http,http-load,overlay,")),
        "{csv}"
    );
    assert!(
        csv.lines().any(|l| l.contains(",mtu,mtu,overlay,")),
        "{csv}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["family"] == "http" && x["http"]["errors_total"] == 10));
    let page = html::render(&r);
    assert!(
        page.contains("HTTP load (requests/s")
            && page.contains("Path MTU")
            && page.contains("status 4, timeout 6")
    );
}

#[test]
fn openmetrics_bytes_latency_kind_bounded_http_and_mtu() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("fixture.db");
    common::build(&db);
    let runs = openmetrics::load_runs(&Store::open_read_only(&db).unwrap(), None).unwrap();
    let (om, n) = openmetrics::exposition(&runs, Flavor::OpenMetrics);
    assert!(!om.contains("bits_per_second"), "bytes are the base unit");
    // host 16K: 6.0, 6.2, 6.4 Gbit/s → one series, the mean, in bytes/s.
    assert!(om.contains(r#"fabperf_bandwidth_bytes_per_second{run="1",plan="fixture",test="bw",kind="tcp-bw",size="16384",streams="1",direction="forward",path="host",pattern="pairs",role="total",src_node="n1",dst_node="n2"} 775000000"#), "{om}");
    for l in om
        .lines()
        .filter(|l| l.starts_with("fabperf_latency_seconds{"))
    {
        assert!(
            l.contains("latency_kind=\"half_rtt\"") || l.contains("latency_kind=\"rtt\""),
            "{l}"
        );
    }
    assert!(om.contains("test=\"http\",kind=\"http-load\"") && om.contains("latency_kind=\"rtt\""));
    for label in ["cell=", "repeat=", "stream="] {
        assert!(
            !om.contains(label),
            "per-measurement label {label} in the default export"
        );
    }
    assert!(
        om.lines()
            .any(|l| l.starts_with("fabperf_http_requests_per_second{")
                && l.contains("path=\"overlay\"")
                && l.ends_with(" 3050")),
        "{om}"
    );
    assert!(
        om.lines()
            .any(|l| l.starts_with("fabperf_http_failed_requests{")
                && l.contains("path=\"overlay\"")
                && l.contains("error=\"timeout\"")
                && l.ends_with(" 3")),
        "{om}"
    );
    assert!(
        om.lines().any(|l| l.starts_with("fabperf_path_mtu_bytes{")
            && l.contains("op=\"forward\"")
            && l.contains("path=\"overlay\"")
            && l.ends_with(" 8950")),
        "{om}"
    );
    assert!(om.contains("# UNIT fabperf_path_mtu_bytes bytes"));
    // A bisection's flows keep their cut.
    assert!(
        om.contains(
            "pattern=\"bisection\",role=\"flow\",src_node=\"n1\",dst_node=\"n3\",cut=\"1\""
        ),
        "{om}"
    );
    // Asked for: one series per record, with the per-measurement labels.
    let (full, n2) =
        openmetrics::exposition_with(&runs, Flavor::OpenMetrics, Series::PerMeasurement);
    assert!(n2 > n, "{n2} <= {n}");
    assert!(full.contains("cell=\"bw-host-16384-r0\"") && full.contains("repeat=\"2\""));
}
