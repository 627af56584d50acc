//! `mesh-summary` across a run's mesh tests: a node the latency mesh names
//! explains the bandwidth links it slows (within a factor of its own median
//! pair), also when `--test` shows the bandwidth test alone; a link far
//! slower than the node's other pairs stays a suspect link.

use fabperf_results::{LatencyHistogram, LatencyKind, Record, Transport};
use fabperf_store::{Attempt, CellSpec, Measurement, NewRun, Role, Store, RETEST};
use serde_json::{json, Value};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");
const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];

fn cell(test: &str, kind: &str, pattern: &str, a: &str, b: &str, repeat: u32) -> CellSpec {
    CellSpec {
        cell_id: format!("{test}-{pattern}{repeat}-{a}-{b}"),
        seq: 0,
        batch: 0,
        test: test.into(),
        kind: kind.into(),
        path: "fabric".into(),
        pattern: pattern.into(),
        flows: vec![(a.into(), b.into())],
        params: json!({}),
        dims: json!({"size": 65536}),
        repeat,
    }
}

fn record(kind: &str, v: f64) -> Record {
    let mut r = Record::new(kind, Transport::Tcp, 65536, 1);
    if kind == "tcp-lat" {
        let mut h = LatencyHistogram::new(LatencyKind::Rtt);
        for _ in 0..8 {
            h.record_rtt_ns((v * 1000.0) as u64);
        }
        r.set_latency(&h);
    } else {
        r.set_throughput((v * 1e9 / 8.0) as u64, 1.0, None);
        r.direction = Some("forward".into());
    }
    r
}

fn is(a: &str, b: &str, x: &str, y: &str) -> bool {
    (a == x && b == y) || (a == y && b == x)
}

/// Gbit/s: n3's pairs slightly slow (its delay), n1 - n3 slower (the delay,
/// unevenly), n3 - n5 at a sixth (a link fault beside the delayed node),
/// n2 - n4 slow (a link fault).
fn bw(a: &str, b: &str) -> f64 {
    if is(a, b, "n1", "n3") {
        6.0
    } else if is(a, b, "n3", "n5") {
        1.5
    } else if is(a, b, "n2", "n4") {
        4.0
    } else if a == "n3" || b == "n3" {
        9.5
    } else {
        10.0
    }
}

/// µs: n3 has a millisecond more.
fn lat(a: &str, b: &str) -> f64 {
    if a == "n3" || b == "n3" {
        1020.0
    } else {
        20.0
    }
}

/// A test's figure of a pair.
type Figure = fn(&str, &str) -> f64;

fn store(db: &std::path::Path) {
    let mut s = Store::open(db).unwrap();
    let run = s
        .create_run(&NewRun {
            plan_name: "p",
            plan_hash: "h",
            plan_file: None,
            plan_text: "",
        })
        .unwrap()
        .id;
    let tests: [(&str, &str, Figure); 2] = [("bw", "tcp-bw", bw), ("lat", "tcp-lat", lat)];
    let mut mesh = Vec::new();
    let mut retests = Vec::new();
    for (test, kind, fig) in tests {
        for a in NODES {
            for b in NODES.iter().copied().filter(|b| *b != a) {
                mesh.push((cell(test, kind, "mesh", a, b, 0), record(kind, fig(a, b))));
                // Every pair is re-tested twice at its mesh figure: the
                // suspects are confirmed, the rest not looked at.
                for round in 0..2 {
                    retests.push((
                        cell(test, kind, RETEST, a, b, round),
                        record(kind, fig(a, b)),
                    ));
                }
            }
        }
    }
    let specs: Vec<CellSpec> = mesh.iter().map(|(c, _)| c.clone()).collect();
    s.sync_cells(run, &specs, false).unwrap();
    let rt: Vec<CellSpec> = retests.iter().map(|(c, _)| c.clone()).collect();
    s.add_cells(run, &rt).unwrap();
    let attempt = Attempt {
        attempts: 1,
        started_at: String::new(),
        ended_at: String::new(),
        wall_s: 1.0,
    };
    for (c, r) in mesh.into_iter().chain(retests) {
        let (a, b) = c.flows[0].clone();
        let m = Measurement {
            role: Role::Total,
            src: Some(a),
            dst: Some(b),
            record: r,
        };
        s.finish_cell_done(run, &c.cell_id, &attempt, &[m]).unwrap();
    }
}

fn summary(db: &str, extra: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(["mesh-summary", "--db", db])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_latency_meshs_node_explains_the_bandwidth_links_it_slows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    store(&db);
    let db = db.to_str().unwrap();
    for extra in [&[][..], &["--test", "bw"][..]] {
        let text = summary(db, extra);
        assert!(
            text.contains("link n1 - n3 explained by node n3 (named by lat):"),
            "{extra:?}\n{text}"
        );
        assert!(!text.contains("SUSPECT LINK n1 - n3"), "{text}");
        assert!(text.contains("SUSPECT LINK n3 - n5"), "{text}");
        assert!(text.contains("SUSPECT LINK n2 - n4"), "{text}");
        assert_eq!(text.contains("SUSPECT NODE n3"), extra.is_empty(), "{text}");
    }
    let json: Value = serde_json::from_str(&summary(db, &["--json"])).unwrap();
    let bw = &json[0]["groups"][0];
    assert_eq!(json[0]["test"], "bw");
    assert_eq!(bw["bad_links"], json!([["n2", "n4"], ["n3", "n5"]]));
    assert_eq!(bw["explained_links"][0]["node"], "n3");
    assert_eq!(bw["explained_links"][0]["named_by"], json!(["lat"]));
    assert_eq!(json[1]["groups"][0]["bad_nodes"], json!(["n3"]));
}
