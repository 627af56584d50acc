//! Reports over the fixture store: figures against hand-computed values,
//! golden outputs, gates.

mod common;

use fabperf_report::analysis::{Family, LatSource, Level};
use fabperf_report::gate;
use fabperf_report::openmetrics::Flavor;
use fabperf_report::text;
use fabperf_report::{build, Options, Report};
use fabperf_store::Store;
use std::path::{Path, PathBuf};

fn fixture() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("fixture.db");
    common::build(&db);
    (d, db)
}

fn report(db: &Path, opts: &Options) -> Report {
    let s = Store::open_read_only(db).unwrap();
    build(&s, opts).unwrap()
}

fn close(a: f64, b: f64, eps: f64) -> bool {
    (a - b).abs() <= eps
}

fn row<'a>(r: &'a Report, test: &str, path: &str, size: u64) -> &'a fabperf_report::analysis::Row {
    r.rows
        .iter()
        .find(|x| x.test == test && x.path == path && x.size == Some(size))
        .unwrap_or_else(|| panic!("no row {test} {path} {size}"))
}

#[test]
fn figures_match_hand_computed_values() {
    let (_d, db) = fixture();
    let r = report(&db, &Options::default());
    assert_eq!(r.baseline.as_deref(), Some("host"));
    assert_eq!(r.baseline_from, Some("plan"));
    // host 128K: 9.0, 9.5, 10.0 → mean 9.5, sd 0.5, CI 4.3027*0.5/sqrt(3).
    let h = row(&r, "bw", "host", 131072);
    let s = h.stats.as_ref().unwrap();
    assert!(close(s.mean, 9.5, 1e-9));
    assert!(close(s.stdev.unwrap(), 0.5, 1e-9));
    assert!(close(s.ci95.unwrap(), 1.24208, 1e-4), "{s:?}");
    assert!(h.base.is_none());
    assert!(close(h.pct_port.unwrap(), 95.0, 1e-9));
    // CPU per Gbit/s: client (40+v)/v averaged: (49/9 + 49.5/9.5 + 50/10)/3.
    let want = (49.0 / 9.0 + 49.5 / 9.5 + 50.0 / 10.0) / 3.0;
    let cpu = h.cpu.as_ref().unwrap();
    assert!(close(cpu.client.unwrap(), want, 1e-9));
    assert_eq!(cpu.source, "threads");
    // overlay 128K: mean 5.6 → −3.9 Gbit/s, −41.05 %; the intervals do not
    // overlap (5.6 ± 0.248 vs 9.5 ± 1.242).
    let o = row(&r, "bw", "overlay", 131072);
    let d = o.base.as_ref().unwrap();
    assert_eq!(d.path, "host");
    assert!(close(d.d_gbps.unwrap(), -3.9, 1e-9));
    assert!(close(d.d_pct.unwrap(), -3.9 / 9.5 * 100.0, 1e-9));
    assert_eq!(d.within_noise, Some(false));
    // RDMA next to TCP: compared with host tcp-bw at the same size.
    let rd = row(&r, "rdma-bw", "rdma", 131072);
    assert_eq!(rd.family, Family::Bandwidth);
    assert_eq!(rd.base.as_ref().unwrap().kind, "tcp-bw");
    assert!(close(rd.pct_port.unwrap(), 94.0, 1e-9));
    // Latency from merged histograms: p50 is the fast mode, p99 the tail.
    let lh = row(&r, "lat", "host", 64);
    let l = lh.lat.as_ref().unwrap();
    assert!(
        matches!(
            l.source,
            LatSource::Histograms {
                repeats: 3,
                samples: 3060
            }
        ),
        "{:?}",
        l.source
    );
    assert!(close(l.p50.unwrap(), 10.1, 0.02), "{l:?}");
    assert!(close(l.p99.unwrap(), 50.0, 0.05), "{l:?}");
    let lo = row(&r, "lat", "overlay", 64);
    let d = lo.base.as_ref().unwrap();
    assert!(close(d.d_p50_us.unwrap(), 10.0, 0.05), "{d:?}");
    assert!(close(d.d_p99_us.unwrap(), 50.0, 0.2), "{d:?}");
    assert!(!lo.lat.as_ref().unwrap().curve.is_empty());
    // Latency without histograms: the stored percentiles, said so.
    let rl = row(&r, "rdma-lat", "rdma", 64);
    let l = rl.lat.as_ref().unwrap();
    assert_eq!(l.source, LatSource::StoredPercentiles);
    assert!(close(l.p50.unwrap(), 1.9, 1e-9));
    assert!(close(l.p99.unwrap(), 3.8, 1e-9));
    assert!(rl
        .warnings
        .iter()
        .any(|w| w.contains("no latency histogram")));
    // UDP: one repeat each (too few, said so), loss +2 pp.
    let u = row(&r, "udp", "overlay", 1400);
    assert!(close(
        u.base.as_ref().unwrap().d_loss_pp.unwrap(),
        2.0,
        1e-9
    ));
    assert!(u.warnings.iter().any(|w| w.contains("1 repeat")));
    // Incast: 3, 3, 1 → shares 3/7, 3/7, 1/7; Jain 49 / (3 * 19).
    let ic = &r.incasts[0].leg;
    assert_eq!(r.incasts[0].receiver, "n1");
    assert!(close(ic.jain.unwrap(), 49.0 / 57.0, 1e-9));
    assert!(close(ic.flows[2].share, 1.0 / 7.0, 1e-9));
    assert!(close(ic.pct_port.unwrap(), 70.0, 1e-6));
    // Bisection: 17 of 20 Gbit/s of port rates.
    let bi = &r.bisections[0].leg;
    assert!(close(bi.port_rate_gbps.unwrap(), 20.0, 1e-12));
    assert!(close(bi.pct_port.unwrap(), 85.0, 1e-6));
    // Mesh: n3 is named.
    assert_eq!(r.meshes.len(), 1);
    assert_eq!(r.meshes[0].groups[0].bad_nodes, vec!["n3".to_string()]);
    // Verdicts in words.
    let v = |s: &str| r.verdicts.iter().find(|v| v.subject == s).unwrap();
    let ov = v("overlay");
    assert_eq!(ov.level, Level::Bad);
    assert!(ov.text.contains("−41 % vs host at 128 KiB"), "{}", ov.text);
    assert!(
        ov.text
            .contains("see doctor finding node-ip-slow-link on n1"),
        "{}",
        ov.text
    );
    assert!(
        v("n3").text.contains("suspect node in mesh mesh-bw"),
        "{}",
        v("n3").text
    );
    assert_eq!(v("n3").level, Level::Bad);
    assert!(v("n4").text.contains("MTU 1500"), "{}", v("n4").text);
    assert!(
        v("n4").text.contains("got 14 % of the bandwidth into n1"),
        "{}",
        v("n4").text
    );
    assert!(v("n1").text.contains("node-ip-slow-link"));
    // The failed overlay cell, and the bidir incast repeat and bisection
    // cut whose flows did not run together.
    let failed: Vec<&str> = r.failed.iter().map(|f| f.cell.as_str()).collect();
    assert_eq!(
        failed,
        ["bw-overlay-n3n4", "incast-bidir-n1-r1", "bisect-bidir-1"],
        "{:?}",
        r.failed
    );
}

#[test]
fn baseline_override_and_errors() {
    let (_d, db) = fixture();
    let r = report(
        &db,
        &Options {
            baseline: Some("overlay".into()),
            ..Default::default()
        },
    );
    assert_eq!(r.baseline_from, Some("--baseline"));
    let h = row(&r, "bw", "host", 131072);
    assert!(close(h.base.as_ref().unwrap().d_gbps.unwrap(), 3.9, 1e-9));
    let s = Store::open_read_only(&db).unwrap();
    let e = build(
        &s,
        &Options {
            baseline: Some("nope".into()),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("paths measured: host, overlay, rdma"), "{e}");
    let e = build(
        &s,
        &Options {
            run: Some(99),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no run 99"), "{e}");
}

fn golden(name: &str, got: &str) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("FABPERF_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&p).unwrap_or_else(|_| {
        panic!(
            "{} missing; FABPERF_UPDATE_GOLDEN=1 cargo test -p fabperf-report writes it",
            p.display()
        )
    });
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{name} differs from the golden file at line {}:\n  want: {:?}\n  got:  {:?}\n(FABPERF_UPDATE_GOLDEN=1 rewrites it after a deliberate change)",
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

#[test]
fn golden_outputs() {
    let (_d, db) = fixture();
    let mut r = report(&db, &Options::default());
    let gates: Vec<(gate::Gate, Option<String>)> = [
        "tcp-bw >= 90% port_rate",
        "path:overlay tcp-bw >= 0.8 * path:host",
        "tcp-lat p99 <= 60us",
        "mesh outliers == 0",
    ]
    .iter()
    .map(|g| (gate::parse(g).unwrap(), None))
    .collect();
    r.gates = gate::evaluate_all(&gates, &r);
    golden("fixture.txt", &text::render(&r, false));
    golden("fixture.md", &text::render(&r, true));
    golden("fixture.csv", &text::csv(&r).unwrap());
    golden(
        "fixture.json",
        &(serde_json::to_string_pretty(&r).unwrap() + "\n"),
    );
    let s = Store::open_read_only(&db).unwrap();
    let runs = fabperf_report::openmetrics::load_runs(&s, None).unwrap();
    let (om, n) = fabperf_report::openmetrics::exposition(&runs, Flavor::OpenMetrics);
    assert!(n > 100, "{n} samples");
    golden("fixture.om", &om);
    // Read one cell at a time (as `fabperf export` does), the same text.
    let ids = fabperf_report::openmetrics::export_runs(&s, None).unwrap();
    let (streamed, n3) = fabperf_report::openmetrics::exposition_of_store(
        &s,
        &ids,
        Flavor::OpenMetrics,
        fabperf_report::openmetrics::Series::Bounded,
    )
    .unwrap();
    assert_eq!((streamed.as_str(), n3), (om.as_str(), n));
    let (prom, n2) = fabperf_report::openmetrics::exposition(&runs, Flavor::Prometheus);
    assert_eq!(n, n2);
    assert!(!prom.contains("# EOF") && !prom.contains("# UNIT"));
}

#[test]
fn gates_pass_and_fail_with_the_cells_named() {
    let (_d, db) = fixture();
    let r = report(&db, &Options::default());
    let run = |g: &str| gate::evaluate(&gate::parse(g).unwrap(), &r, None);
    // Host reaches 60–95 % of its 10 Gbit/s port: 128K passes 0.5, 16K not 0.9.
    assert!(run("test:bw path:host tcp-bw >= 50% port_rate").passed());
    let o = run("test:bw path:host tcp-bw >= 90% port_rate");
    assert_eq!(o.checked, 2);
    assert_eq!(o.violations.len(), 1);
    let v = &o.violations[0];
    assert!(v.subject.contains("size 16K on path host"), "{v:?}");
    assert_eq!(v.measured, "6.20 Gbit/s");
    assert!(
        v.required
            .contains(">= 9.00 Gbit/s (90 % of the 10.0 Gbit/s port)"),
        "{v:?}"
    );
    assert_eq!(
        v.cells,
        vec!["bw-host-16384-r0", "bw-host-16384-r1", "bw-host-16384-r2"]
    );
    // A mesh row pools its pairs: the mean passes 50 %, the worst pair not.
    assert!(run("test:mesh-bw tcp-bw >= 50% port_rate").passed());
    let o = run("test:mesh-bw tcp-bw min >= 50% port_rate");
    assert_eq!(o.violations[0].measured, "1.00 Gbit/s");
    // Incast and bisection aggregates are not pair rows.
    assert_eq!(run("path:host tcp-bw >= 1Gbps").checked, 3);
    // Relative to another path.
    let o = run("path:overlay tcp-bw >= 0.8 * path:host");
    assert_eq!(o.violations.len(), 2, "{o:?}");
    assert!(run("path:overlay tcp-bw >= 0.5 * path:host").passed());
    assert!(run("path:overlay tcp-bw min >= 55% path:host").passed());
    // Latency percentiles, with units.
    assert!(run("path:host tcp-lat p99 <= 60us").passed());
    assert!(!run("tcp-lat p99 <= 0.06ms").passed());
    assert!(run("rdma-lat mean <= 2.5us").passed());
    // Mesh, incast, bisection, failures.
    let o = run("mesh outliers == 0");
    assert_eq!(o.violations.len(), 1);
    assert!(o.violations[0].measured.contains("n1->n3 1.00"), "{o:?}");
    assert!(!run("mesh suspect-nodes == 0").passed());
    assert!(run("node:n1 mesh suspect-nodes == 0").passed());
    assert!(run("direction:forward incast jain >= 0.85").passed());
    // What n1 sends back in its bidir incast is less fair (0.823).
    assert!(!run("incast jain >= 0.85").passed());
    assert!(!run("incast min-share >= 0.5").passed());
    assert!(run("test:bisection bisection bw >= 80% port_rate").passed());
    assert!(!run("test:bisection bisection bw >= 90% port_rate").passed());
    // The bidir bisection carries 7 and 8 of its cut's 20 Gbit/s one way.
    let o = run("test:bisection-bidir bisection bw >= 30% port_rate");
    assert!(o.passed() && o.checked == 2, "{o:?}");
    assert!(!run("bisection bw >= 80% port_rate").passed());
    assert!(!run("failed-cells == 0").passed());
    assert!(run("path:rdma failed-cells == 0").passed());
    // The bidir incast repeat and bisection cut whose flows did not run
    // together.
    assert!(run("path:host failed-cells == 2").passed());
    // A gate that selects nothing fails.
    let o = run("size:1M tcp-bw >= 1Gbps");
    assert_eq!(o.checked, 0);
    assert!(!o.passed());
    assert!(!run("path:nowhere udp-bw >= 1Gbps").passed());
    // The ConnectX preset: bandwidth (94 % of 25) and write latency pass;
    // read and send measured nothing: not applicable.
    let p = gate::preset("connectx-acceptance").unwrap();
    let gs: Vec<(gate::Gate, Option<String>)> = p
        .gates
        .iter()
        .map(|g| (gate::parse(g).unwrap(), Some(p.name.to_string())))
        .collect();
    let out = gate::evaluate_all(&gs, &r);
    assert!(out.iter().all(|o| o.passed()), "{out:?}");
    assert_eq!(out.iter().filter(|o| o.not_applicable).count(), 2);
}

#[test]
fn html_has_the_charts_and_escapes_the_store() {
    let (_d, db) = fixture();
    let r = report(&db, &Options::default());
    let h = fabperf_report::html::render(&r);
    for id in ["bandwidth", "udp", "latency-1", "mesh-1"] {
        assert!(h.contains(&format!("data-chart=\"{id}\"")), "no chart {id}");
    }
    // Four paths' bars in the bandwidth chart, the baseline outlined.
    assert!(h.contains(r#"class="baseline""#));
    assert!(h.contains("Content-Security-Policy"));
    assert!(!h.contains("<script"));
    assert!(!h.contains("http://") || !h.contains("src=\"http"));
    // Hostile text in the store (a path label, an error, a finding) stays text.
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE cells SET path = '<script>alert(1)</script>' WHERE path = 'overlay'",
        [],
    )
    .unwrap();
    c.execute(
        "UPDATE cells SET error = '</pre><img src=x onerror=alert(2)>' WHERE state = 'failed'",
        [],
    )
    .unwrap();
    c.execute(
        "UPDATE findings SET body = json_set(body, '$.summary', '\"><svg onload=alert(3)>')",
        [],
    )
    .unwrap();
    drop(c);
    let r = report(&db, &Options::default());
    let h = fabperf_report::html::render(&r);
    assert!(!h.contains("<script>alert"), "unescaped path label");
    assert!(!h.contains("<img src=x"), "unescaped error");
    assert!(!h.contains("<svg onload"), "unescaped finding");
    assert!(h.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn bad_records_and_histograms_in_the_store() {
    let (_d, db) = fixture();
    let c = rusqlite::Connection::open(&db).unwrap();
    // A histogram that is not one, a record that is not an object, a
    // record whose figures have the wrong types.
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.lat_hist', 'not base64!'), lat_hist = NULL WHERE cell_id = 'lat-host-64-r1'",
        [],
    )
    .unwrap();
    c.execute(
        "UPDATE measurements SET record = '[]' WHERE cell_id = 'bw-host-16384-r2'",
        [],
    )
    .unwrap();
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.bw_gbps', 'fast', '$.size', -1) WHERE cell_id = 'bw-host-16384-r1'",
        [],
    )
    .unwrap();
    drop(c);
    let r = report(&db, &Options::default());
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("lat-host-64-r1") && n.contains("not base64")),
        "{:?}",
        r.notes
    );
    // The row falls back to stored percentiles for all its repeats, and says so.
    let l = row(&r, "lat", "host", 64).lat.as_ref().unwrap();
    assert_eq!(l.source, LatSource::StoredPercentiles);
    // Only the one good repeat of host 16K is left.
    let h = row(&r, "bw", "host", 16384);
    assert_eq!(h.values, vec![6.0]);
    // The mesh summary reads its own cells (their figures from the store's
    // columns), and a record the typed readers cannot decode is skipped and
    // counted by the store: the mesh keeps its matrix.
    assert_eq!(r.meshes.len(), 1, "{:?}", r.notes);
    assert!(
        !r.notes.iter().any(|n| n.contains("no matrix")),
        "{:?}",
        r.notes
    );
    // Not JSON at all: skipped and counted, with the cell named; the
    // report is still built.
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE measurements SET record = '{oops' WHERE cell_id = 'udp-host'",
        [],
    )
    .unwrap();
    drop(c);
    let s = Store::open_read_only(&db).unwrap();
    build(&s, &Options::default()).unwrap();
    let skipped = s.skipped();
    assert!(
        skipped.iter().any(|k| k.contains("udp-host")),
        "{skipped:?}"
    );
    // The record with the wrong types (bw-host-16384-r1) is no mesh cell's:
    // the mesh summary reads its own test's cells only and does not decode
    // it; the report leaves it out of its row (the one good repeat above).
}

#[test]
fn a_plan_dimension_as_the_baseline() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("dims.db");
    common::build_dims(&db);
    let s = Store::open_read_only(&db).unwrap();
    let r = build(
        &s,
        &Options {
            baseline: Some("policies=0".into()),
            ..Default::default()
        },
    )
    .unwrap();
    // Each profile's 200-rule rows against the same profile at 0 rules.
    for (profile, want_base) in [("level-1", 10.05), ("level-2", 11.05)] {
        let label = format!("profile {profile} 200 rules");
        let lat = r
            .rows
            .iter()
            .find(|x| x.test == "lat" && x.variant.as_deref() == Some(label.as_str()))
            .unwrap_or_else(|| panic!("no row {label}"));
        let base = lat.base.as_ref().expect("compared with 0 rules");
        assert_eq!(base.path, "policies=0");
        assert!(close(base.base_mean, want_base, 1e-9), "{base:?}");
        assert!(close(base.d_p50_us.unwrap(), 3.0, 1e-6), "{base:?}");
        let bw = r
            .rows
            .iter()
            .find(|x| x.test == "bw" && x.variant.as_deref() == Some(label.as_str()))
            .unwrap();
        assert!(close(bw.base.as_ref().unwrap().d_gbps.unwrap(), -1.0, 1e-9));
        let zero = format!("profile {profile} 0 rules");
        let z = r
            .rows
            .iter()
            .find(|x| x.test == "lat" && x.variant.as_deref() == Some(zero.as_str()))
            .unwrap();
        assert!(z.base.is_none(), "the baseline rows have no difference");
    }
    // The text names the variant in the sweep column and the baseline.
    let t = text::render(&r, false);
    assert!(t.contains("profile level-2 200 rules"), "{t}");
    assert!(t.contains("policies=0"), "{t}");

    // Profiles against each other at the same rule count.
    let r = build(
        &s,
        &Options {
            baseline: Some("profile=level-1".into()),
            ..Default::default()
        },
    )
    .unwrap();
    let l2 = r
        .rows
        .iter()
        .find(|x| x.test == "lat" && x.variant.as_deref() == Some("profile level-2 200 rules"))
        .unwrap();
    assert!(close(
        l2.base.as_ref().unwrap().d_p50_us.unwrap(),
        1.0,
        1e-6
    ));

    // A value or a dimension that was not measured is refused with the ones that were.
    for (b, want) in [
        ("profile=nope", "values measured: level-1, level-2"),
        ("colour=red", "no such dimension"),
    ] {
        let e = build(
            &s,
            &Options {
                baseline: Some(b.into()),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(want), "{b}: {e}");
    }
}

/// The plan was edited after the run: the cells it no longer has are not
/// counted — not as repeats, not in the mesh, not as failures — and are
/// listed as not part of it.
#[test]
fn cells_no_longer_in_the_plan_are_left_out_and_listed() {
    let (_d, db) = fixture();
    {
        let mut s = Store::open(&db).unwrap();
        let run = s.latest_run().unwrap().unwrap().id;
        // The edited plan lacks the third host repeat at 128K, the failed
        // overlay cell and n3 -> n4 of the mesh (its re-test goes with it).
        let gone = ["bw-host-131072-r2", "bw-overlay-n3n4", "mesh-n3n4"];
        let keep: Vec<fabperf_store::CellSpec> = s
            .cells(run)
            .unwrap()
            .into_iter()
            .filter(|c| c.spec.pattern != "retest" && !gone.contains(&c.spec.cell_id.as_str()))
            .map(|c| c.spec)
            .collect();
        assert_eq!(s.sync_cells(run, &keep, false).unwrap().not_in_plan, 3);
    }
    let r = report(&db, &Options::default());
    let h = row(&r, "bw", "host", 131072);
    let st = h.stats.as_ref().unwrap();
    assert_eq!(st.n, 2, "the stale repeat is not a repeat");
    assert!(close(st.mean, 9.25, 1e-9), "{st:?}");
    // Only the cells of concurrent flows whose flows did not run together
    // are still failed.
    assert!(
        r.failed.iter().all(|f| f.cell.contains("bidir")),
        "{:?}",
        r.failed
    );
    assert_eq!((r.run.cells_done, r.run.cells_failed), (42, 2));
    let g = &r.meshes[0].groups[0];
    assert!(g.values.get("n3").and_then(|x| x.get("n4")).is_none());
    assert_eq!(g.suspects.len(), 2);
    let note = r
        .notes
        .iter()
        .find(|n| n.contains("not part of its current plan"))
        .unwrap_or_else(|| panic!("{:?}", r.notes));
    for id in [
        "bw-host-131072-r2",
        "bw-overlay-n3n4",
        "mesh-n3n4",
        "mesh-n3n4-retest0",
    ] {
        assert!(note.contains(id), "{id}: {note}");
    }
    assert!(
        note.starts_with("4 stored cells of run 1 are not part"),
        "{note}"
    );
    assert!(text::render(&r, false).contains("not part of its current plan"));
}

/// Mesh gates count confirmed findings and say how many are unconfirmed; a
/// node whose every cell failed is a suspect node.
#[test]
fn mesh_gates_count_confirmed_and_name_the_unconfirmed() {
    let (_d, db) = fixture();
    let at = fabperf_store::Attempt {
        attempts: 1,
        started_at: String::new(),
        ended_at: String::new(),
        wall_s: 1.0,
    };
    {
        let mut s = Store::open(&db).unwrap();
        let run = s.latest_run().unwrap().unwrap().id;
        // n3 -> n4's re-test failed: that suspect is unconfirmed.
        s.finish_cell_failed(run, "mesh-n3n4-retest0", &at, "connection refused")
            .unwrap();
    }
    let r = report(&db, &Options::default());
    let run = |g: &str| gate::evaluate(&gate::parse(g).unwrap(), &r, None);
    let o = run("mesh outliers == 2");
    assert!(o.passed(), "{o:?}");
    assert_eq!(o.notes.len(), 1, "{o:?}");
    assert!(
        o.notes[0]
            .contains("1 more not counted, unconfirmed (no re-test gave a figure): n3->n4 1.00"),
        "{o:?}"
    );
    // n3 is no longer a confirmed suspect node, and the gate says so.
    let o = run("mesh suspect-nodes == 0");
    assert!(o.passed(), "{o:?}");
    assert!(
        o.notes[0].contains("unconfirmed (no re-test gave a figure): n3"),
        "{o:?}"
    );
    let mut r2 = r.clone();
    r2.gates = vec![o];
    assert!(text::gates_text(&r2, false)
        .contains("  note: mesh mesh-bw (tcp-bw) on path host: 1 more not counted"));

    // n4 dead: every mesh cell with it failed. Then it is a suspect node.
    {
        let mut s = Store::open(&db).unwrap();
        let run = s.latest_run().unwrap().unwrap().id;
        for id in ["mesh-n1n4", "mesh-n2n4", "mesh-n3n4"] {
            s.finish_cell_failed(run, id, &at, "agent 127.0.0.4:5301: connection refused")
                .unwrap();
        }
    }
    let r = report(&db, &Options::default());
    let o = gate::evaluate(&gate::parse("mesh suspect-nodes == 0").unwrap(), &r, None);
    assert!(!o.passed(), "{o:?}");
    assert!(o.violations[0].measured.contains("n4"), "{o:?}");
    let v = r.verdicts.iter().find(|v| v.subject == "n4").unwrap();
    assert!(
        v.text.contains(
            "suspect node in mesh mesh-bw on host: all of its 3 cells failed: agent 127.0.0.4:5301"
        ),
        "{}",
        v.text
    );
}

/// Figures a tampered store can hold: bandwidths whose sum overflows (the
/// mean and interval are infinite) and a negative bandwidth. The negative
/// one is not data; nothing infinite reaches an SVG attribute.
#[test]
fn overflowing_and_negative_figures_from_a_store() {
    let (_d, db) = fixture();
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.bw_gbps', 1.7e308) WHERE cell_id LIKE 'bw-host-131072-r%'",
        [],
    )
    .unwrap();
    c.execute(
        "UPDATE measurements SET record = json_set(record, '$.bw_gbps', -5.0) WHERE cell_id = 'bw-overlay-16384-r0'",
        [],
    )
    .unwrap();
    drop(c);
    let r = report(&db, &Options::default());
    let o = row(&r, "bw", "overlay", 16384);
    assert!(
        o.values.iter().all(|v| *v >= 0.0),
        "a negative bandwidth taken as data: {:?}",
        o.values
    );
    assert_eq!(o.values.len(), 2, "{:?}", o.values);
    let html = fabperf_report::html::render(&r);
    // Every attribute value of every tag: no inf, no NaN.
    let mut rest = html.as_str();
    while let Some(i) = rest.find("=\"") {
        let after = &rest[i + 2..];
        let end = after.find('"').unwrap();
        let v = &after[..end];
        assert!(
            !v.contains("inf") && !v.contains("NaN"),
            "a non-finite number in an attribute: {v:?}"
        );
        rest = &after[end..];
    }
}
