//! A small results store with every part a report reads: pairs on three
//! paths (host, overlay, rdma) with three repeats, latency with stored
//! histograms and without, UDP with loss, a 4-node mesh with one slow
//! node, an incast and a bisection split one way, a bidir incast (one
//! repeat done, one failed for overlap) and a bidir bisection (one cut
//! done, one failed), a failed cell, inventories and a doctor finding.
//! Built through fabperf-store's API; the cells of concurrent flows from
//! the records the engines return, through the runner's own
//! `cell_measurements` (as `fabperf run` stores them: per flow its forward
//! and reverse record, one aggregate per direction over the common
//! interval, or the cell's failure). The histograms (a record key newer
//! writers fill) and the times are set with SQL so the output is the same
//! on every build.

#![allow(dead_code)]

use fabperf_results::{Interval, Progress, Record, Transport};
use fabperf_run::drive::DriveResult;
use fabperf_store::{Attempt, CellSpec, Measurement, NewRun, Role, Store};
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::path::Path;

pub const PLAN: &str = r#"name = "fixture"
description = "host vs overlay vs rdma on two nodes, a 4-node mesh, an incast and a bisection"
baseline = "host"
"#;

pub fn record(kind: &str, size: u64, extra: Value) -> Record {
    let transport = if kind.starts_with("rdma") {
        Transport::Rdma
    } else if kind.starts_with("udp") {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    let mut v = serde_json::to_value(Record::new(kind, transport, size, 1)).unwrap();
    v["duration_s"] = json!(3.0);
    v["started_at"] = json!("2026-01-02T03:04:05Z");
    v["fabperf_version"] = json!("0.0.0-fixture");
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            o.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).unwrap()
}

pub fn bw(kind: &str, size: u64, gbps: f64, cpu: Option<(f64, f64)>) -> Record {
    let mut e = json!({
        "bw_gbps": gbps,
        "bytes": (gbps * 1e9 / 8.0 * 3.0) as u64,
        "direction": "forward",
    });
    if let Some((l, r)) = cpu {
        e["cpu_local_pct"] = json!(l);
        e["cpu_remote_pct"] = json!(r);
    }
    if kind == "rdma-bw" {
        e["op"] = json!("write");
    }
    record(kind, size, e)
}

pub fn lat(kind: &str, size: u64, p50: f64, p99: f64, op: Option<&str>) -> Record {
    let mut e = json!({
        "lat_us": {"min": p50 * 0.9, "p50": p50, "p90": p50 * 1.1, "p99": p99, "p999": p99 * 1.5,
                   "p9999": p99 * 2.0, "max": p99 * 3.0, "mean": p50 * 1.05, "stdev": 0.5,
                   "kind": "half_rtt", "samples": 1010},
        "op": "ping-pong",
    });
    if let Some(op) = op {
        e["op"] = json!(op);
    }
    record(kind, size, e)
}

/// The fixture's time: 2026-01-02T03:04:06Z in Unix seconds.
pub const T0: f64 = 1_767_323_046.0;

/// One direction of a flow as the engines record it: `gbps` steadily over
/// `secs` from `start` (Unix time, the receiving end's clock), with its
/// progress counts every 50 ms; the sender started 0.5 s before (warm-up).
pub fn flow_record(kind: &str, size: u64, dir: &str, gbps: f64, start: f64, secs: f64) -> Record {
    let rate = gbps * 1.25e8;
    let tick = 0.05;
    let n = (secs / tick).round() as usize;
    let total = (rate * secs).round() as u64;
    let mut r = record(kind, size, json!({ "direction": dir }));
    if kind == "rdma-bw" {
        r.op = Some("write".into());
    }
    r.set_throughput(total, secs, None);
    r.interval = Some(Interval {
        start_s: start,
        end_s: start + secs,
        sent_from_s: Some(start - 0.5),
        progress: Some(Progress {
            t0_s: start,
            tick_s: tick,
            bytes: (1..n)
                .map(|k| (rate * tick * k as f64).round() as u64)
                .collect(),
            last_s: start + secs,
            last_bytes: total,
        }),
    });
    r
}

/// What a driving agent returns for one flow: a record per direction
/// (direction, Gbit/s, start of its measured interval), each over `secs`;
/// with both directions also their `bidir` total, as the engines give it
/// (the runner does not store it for a flow of a multi-flow cell).
pub fn drive_result(kind: &str, size: u64, dirs: &[(&str, f64, f64)], secs: f64) -> DriveResult {
    let mut records: Vec<Record> = dirs
        .iter()
        .map(|(d, g, start)| flow_record(kind, size, d, *g, *start, secs))
        .collect();
    if dirs.len() == 2 {
        let mut t = record(kind, size, json!({ "direction": "bidir" }));
        t.set_throughput(records.iter().map(|r| r.bytes).sum(), secs, None);
        records.insert(0, t);
    }
    DriveResult {
        records,
        test_s: secs + 0.5,
    }
}

impl B {
    /// A cell of concurrent flows as `fabperf run` stores it: `flows[i]` is
    /// what flow i's driving agent returned; the runner's
    /// `cell_measurements` gives the records (done) or the reason (failed).
    #[allow(clippy::too_many_arguments)]
    pub fn concurrent(
        &mut self,
        id: &str,
        test: &str,
        kind: &str,
        path: &str,
        pattern: &str,
        flows: &[(&str, &str)],
        dims: Value,
        repeat: u32,
        results: Vec<DriveResult>,
    ) -> Result<(), String> {
        let spec = self.cell(id, test, kind, path, pattern, flows, dims, repeat);
        let results: Vec<(usize, DriveResult)> = results.into_iter().enumerate().collect();
        match fabperf_run::exec::cell_measurements(&spec, &results) {
            Ok(ms) => {
                self.done(&spec, ms);
                Ok(())
            }
            Err(e) => {
                self.store
                    .finish_cell_failed(
                        self.run,
                        &spec.cell_id,
                        &Attempt {
                            attempts: 3,
                            started_at: "2026-01-02T03:04:05Z".into(),
                            ended_at: "2026-01-02T03:04:09Z".into(),
                            wall_s: 4.0,
                        },
                        &e,
                    )
                    .unwrap();
                Err(e)
            }
        }
    }
}

/// A histogram of `n` samples at `fast_ns` and `tail` samples at `slow_ns`.
pub fn hist_b64(fast_ns: u64, n: u64, slow_ns: u64, tail: u64) -> String {
    use base64::Engine;
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    h.record_n(fast_ns, n).unwrap();
    h.record_n(slow_ns, tail).unwrap();
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(&h, &mut buf).unwrap();
    base64::engine::general_purpose::STANDARD.encode(buf)
}

pub struct B {
    store: Store,
    run: i64,
    seq: i64,
    /// (cell id, histogram) to attach after the cells are stored.
    hists: Vec<(String, String)>,
}

impl B {
    #[allow(clippy::too_many_arguments)]
    pub fn cell(
        &mut self,
        id: &str,
        test: &str,
        kind: &str,
        path: &str,
        pattern: &str,
        flows: &[(&str, &str)],
        dims: Value,
        repeat: u32,
    ) -> CellSpec {
        self.seq += 1;
        let spec = CellSpec {
            cell_id: id.to_string(),
            seq: self.seq,
            batch: self.seq,
            test: test.into(),
            kind: kind.into(),
            path: path.into(),
            pattern: pattern.into(),
            flows: flows
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            params: json!({}),
            dims,
            repeat,
        };
        self.store
            .add_cells(self.run, std::slice::from_ref(&spec))
            .unwrap();
        spec
    }

    pub fn done(&mut self, spec: &CellSpec, ms: Vec<Measurement>) {
        let at = Attempt {
            attempts: 1,
            started_at: "2026-01-02T03:04:05Z".into(),
            ended_at: "2026-01-02T03:04:09Z".into(),
            wall_s: 4.0,
        };
        self.store
            .finish_cell_done(self.run, &spec.cell_id, &at, &ms)
            .unwrap();
    }

    #[allow(clippy::too_many_arguments)]
    pub fn pair(
        &mut self,
        id: &str,
        test: &str,
        kind: &str,
        path: &str,
        dims: Value,
        repeat: u32,
        (a, b): (&str, &str),
        rec: Record,
    ) {
        let spec = self.cell(id, test, kind, path, "pairs", &[(a, b)], dims, repeat);
        self.done(
            &spec,
            vec![Measurement {
                role: Role::Total,
                src: Some(a.into()),
                dst: Some(b.into()),
                record: rec,
            }],
        );
    }
}

pub fn agent(name: &str, path: &str, port: Option<f64>, mtu: u64) -> fabperf_store::AgentRow {
    let mut inv = json!({"iface": "eth1", "mtu": mtu, "numa_node": 0});
    if let Some(p) = port {
        inv["port_rate_gbps"] = json!(p);
    }
    fabperf_store::AgentRow {
        name: name.into(),
        path: path.into(),
        addr: format!("198.18.1.{}:5301", &name[1..]),
        hello: json!({"fabperf_version": "0.0.0-fixture", "auth_required": true, "tests": ["drive"],
                      "agent": {"node": name, "path": path, "inventory": inv}}),
        seen_at: "2026-01-02T03:04:00Z".into(),
    }
}

/// Build the fixture store at `db`; returns the run id.
pub fn build(db: &Path) -> i64 {
    let mut store = Store::open(db).unwrap();
    let run = store
        .create_run(&NewRun {
            plan_name: "fixture",
            plan_hash: "f1x",
            plan_file: Some("fixture.toml"),
            plan_text: PLAN,
        })
        .unwrap()
        .id;
    let mut agents = Vec::new();
    for n in ["n1", "n2", "n3", "n4"] {
        // n4's fabric interface has a smaller MTU than its peers'.
        agents.push(agent(
            n,
            "host",
            Some(10.0),
            if n == "n4" { 1500 } else { 9000 },
        ));
        agents.push(agent(n, "overlay", Some(10.0), 8950));
    }
    agents.push(agent("n1", "rdma", Some(25.0), 4096));
    agents.push(agent("n2", "rdma", Some(25.0), 4096));
    store.put_agents(run, &agents).unwrap();
    let mut b = B {
        store,
        run,
        seq: 0,
        hists: Vec::new(),
    };
    let p = ("n1", "n2");
    // Bandwidth: host is the baseline; overlay is ~41 % slower at 128K.
    let table: [(&str, &str, u64, [f64; 3]); 5] = [
        ("tcp-bw", "host", 16384, [6.0, 6.2, 6.4]),
        ("tcp-bw", "overlay", 16384, [4.0, 4.1, 4.2]),
        ("tcp-bw", "host", 131072, [9.0, 9.5, 10.0]),
        ("tcp-bw", "overlay", 131072, [5.5, 5.6, 5.7]),
        ("rdma-bw", "rdma", 131072, [23.0, 23.5, 24.0]),
    ];
    for (kind, path, size, vals) in table {
        for (rep, v) in vals.iter().enumerate() {
            let test = if kind == "rdma-bw" { "rdma-bw" } else { "bw" };
            let dims = if kind == "rdma-bw" {
                json!({"size": size, "op": "write"})
            } else {
                json!({"size": size})
            };
            let cpu = (kind == "tcp-bw").then_some((40.0 + *v, 30.0 + *v));
            b.pair(
                &format!("{test}-{path}-{size}-r{rep}"),
                test,
                kind,
                path,
                dims,
                rep as u32,
                p,
                bw(kind, size, *v, cpu),
            );
        }
    }
    // Latency with histograms: host 10 µs with a 50 µs tail, overlay 20
    // with a 100 µs tail (values in ns, half round trips).
    for (path, fast, slow) in [("host", 10_000, 50_000), ("overlay", 20_000, 100_000)] {
        for rep in 0..3u32 {
            let id = format!("lat-{path}-64-r{rep}");
            let jitter = rep as u64 * 100;
            b.pair(
                &id,
                "lat",
                "tcp-lat",
                path,
                json!({"size": 64}),
                rep,
                p,
                lat(
                    "tcp-lat",
                    64,
                    (fast + jitter) as f64 / 1000.0,
                    slow as f64 / 1000.0,
                    None,
                ),
            );
            b.hists.push((id, hist_b64(fast + jitter, 1000, slow, 20)));
        }
    }
    // RDMA latency without histograms (an older writer): stored percentiles.
    for (rep, p50) in [1.8, 1.9, 2.0].iter().enumerate() {
        b.pair(
            &format!("rdma-lat-r{rep}"),
            "rdma-lat",
            "rdma-lat",
            "rdma",
            json!({"size": 64, "op": "write"}),
            rep as u32,
            p,
            lat("rdma-lat", 64, *p50, p50 * 2.0, Some("write")),
        );
    }
    // UDP at 500 Mbit/s, one repeat each: the overlay loses 2 %.
    for (path, g, loss) in [("host", 0.5, 0.0), ("overlay", 0.45, 2.0)] {
        let mut r = bw("udp-bw", 1400, g, None);
        let mut v = serde_json::to_value(&r).unwrap();
        v["udp"] = json!({"sent": 100000, "received": 100000 - (loss * 1000.0) as u64,
                          "lost": (loss * 1000.0) as u64, "reordered": 0, "duplicates": 0,
                          "loss_pct": loss, "jitter_us": 3.0});
        r = serde_json::from_value(v).unwrap();
        b.pair(
            &format!("udp-{path}"),
            "udp",
            "udp-bw",
            path,
            json!({"size": 1400, "rate": "500M"}),
            0,
            p,
            r,
        );
    }
    // HTTP load, 8 connections, two repeats: the overlay serves fewer
    // requests, slower, and some time out or fail with a status.
    for (path, rates, lat_ns, errs) in [
        ("host", [5000.0, 5200.0], 800_000u64, (0u64, 0u64)),
        ("overlay", [3000.0, 3100.0], 1_500_000u64, (3, 2)),
    ] {
        for (rep, rps) in rates.iter().enumerate() {
            let id = format!("http-{path}-r{rep}");
            let mut e = json!({
                "requests_per_s": rps,
                "iterations": (rps * 3.0) as u64,
                "bw_gbps": rps * 1024.0 * 8.0 / 1e9,
                "bytes": (rps * 3.0 * 1024.0) as u64,
                "op": "GET",
                "direction": "reverse",
                "lat_us": {"min": 500.0, "p50": lat_ns as f64 / 1000.0, "p90": lat_ns as f64 / 1000.0,
                           "p99": lat_ns as f64 / 500.0, "p999": lat_ns as f64 / 500.0,
                           "p9999": lat_ns as f64 / 500.0, "max": lat_ns as f64 / 500.0,
                           "mean": lat_ns as f64 / 1000.0, "stdev": 10.0, "kind": "rtt", "samples": 1020},
                "errors": {"connect": 0, "write": 0, "read": 0, "timeout": errs.0, "status": errs.1, "parse": 0},
            });
            if rep == 1 {
                e["cpu_local_pct"] = json!(50.0);
            }
            let mut r = record("http-load", 1024, e);
            r.streams = 8;
            b.pair(
                &id,
                "http",
                "http-load",
                path,
                json!({"size": 1024, "connections": 8}),
                rep as u32,
                p,
                r,
            );
            b.hists.push((id, hist_b64(lat_ns, 1000, lat_ns * 2, 20)));
        }
    }
    // Path MTU per method: jumbo frames on the host, VXLAN's 50 bytes off
    // them on the overlay.
    for (path, mtu, iface) in [
        ("host", 9000u32, "interface eth1 (MTU 9000, ethernet)".to_string()),
        (
            "overlay",
            8950,
            "interface vxlan.calico (MTU 8950, vxlan), 50 bytes of encapsulation (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8)".to_string(),
        ),
    ] {
        let spec = b.cell(
            &format!("mtu-{path}"),
            "mtu",
            "mtu",
            path,
            "pairs",
            &[p],
            json!({}),
            0,
        );
        let ms = ["forward", "reverse"]
            .iter()
            .map(|op| {
                let r = record(
                    "mtu",
                    u64::from(mtu - 28),
                    json!({"op": op, "direction": op, "mtu": mtu, "iterations": 14,
                           "warnings": [{"id": "mtu-path", "message": "limited by the sending interface"},
                                        {"id": "mtu-path", "message": iface}]}),
                );
                Measurement {
                    role: Role::Total,
                    src: Some(p.0.into()),
                    dst: Some(p.1.into()),
                    record: r,
                }
            })
            .collect();
        b.done(&spec, ms);
    }
    // A failed cell.
    let f = b.cell(
        "bw-overlay-n3n4",
        "bw",
        "tcp-bw",
        "overlay",
        "pairs",
        &[("n3", "n4")],
        json!({"size": 131072}),
        0,
    );
    b.store
        .finish_cell_failed(
            run,
            &f.cell_id,
            &Attempt {
                attempts: 3,
                started_at: "2026-01-02T03:04:05Z".into(),
                ended_at: "2026-01-02T03:04:09Z".into(),
                wall_s: 4.0,
            },
            "agent busy: agent is running tcp-bw for 198.18.1.9:4000",
        )
        .unwrap();
    // A 4-node mesh on the host path: n3's links are slow.
    let nodes = ["n1", "n2", "n3", "n4"];
    for i in 0..4 {
        for j in (i + 1)..4 {
            let (a, c) = (nodes[i], nodes[j]);
            let g = if a == "n3" || c == "n3" { 1.0 } else { 9.4 };
            let spec = b.cell(
                &format!("mesh-{a}{c}"),
                "mesh-bw",
                "tcp-bw",
                "host",
                "mesh",
                &[(a, c)],
                json!({}),
                0,
            );
            b.done(
                &spec,
                vec![Measurement {
                    role: Role::Total,
                    src: Some(a.into()),
                    dst: Some(c.into()),
                    record: bw("tcp-bw", 131072, g, None),
                }],
            );
        }
    }
    // Its re-tests confirm n3's pairs.
    for (a, c) in [("n1", "n3"), ("n2", "n3"), ("n3", "n4")] {
        let spec = b.cell(
            &format!("mesh-{a}{c}-retest0"),
            "mesh-bw",
            "tcp-bw",
            "host",
            "retest",
            &[(a, c)],
            json!({}),
            0,
        );
        b.done(
            &spec,
            vec![Measurement {
                role: Role::Total,
                src: Some(a.into()),
                dst: Some(c.into()),
                record: bw("tcp-bw", 131072, 1.1, None),
            }],
        );
    }
    // An incast into n1: n4 gets a third of the others' share; the three
    // flows measured over the same 3 s.
    let secs = 3.0;
    let one_way =
        |g: f64, start: f64| drive_result("tcp-bw", 131072, &[("forward", g, start)], secs);
    b.concurrent(
        "incast-n1",
        "incast",
        "tcp-bw",
        "host",
        "incast",
        &[("n2", "n1"), ("n3", "n1"), ("n4", "n1")],
        json!({}),
        0,
        vec![one_way(3.0, T0), one_way(3.0, T0), one_way(1.0, T0)],
    )
    .unwrap();
    // A bisection split.
    b.concurrent(
        "bisect-0",
        "bisection",
        "tcp-bw",
        "host",
        "bisection",
        &[("n1", "n3"), ("n2", "n4")],
        json!({}),
        0,
        vec![one_way(9.0, T0 + 10.0), one_way(8.0, T0 + 10.0)],
    )
    .unwrap();
    // A bidir incast into n1: into it 3 + 3 + 2 Gbit/s (the senders started
    // 0-4 ms apart), back out of it 4 + 3.5 + 1 (0-6 ms): n4 gets an eighth
    // of what n1 sends. Its second repeat: the senders started up to 1 s
    // apart, so the flows overlap for 2/3 of the longest interval and the
    // runner fails the cell.
    let bidir = |f: f64, r: f64, sf: f64, sr: f64| {
        drive_result(
            "tcp-bw",
            131072,
            &[("forward", f, sf), ("reverse", r, sr)],
            secs,
        )
    };
    let t = T0 + 20.0;
    let into_n1 = [("n2", "n1"), ("n3", "n1"), ("n4", "n1")];
    b.concurrent(
        "incast-bidir-n1-r0",
        "incast-bidir",
        "tcp-bw",
        "host",
        "incast",
        &into_n1,
        json!({"direction": "bidir"}),
        0,
        vec![
            bidir(3.0, 4.0, t, t + 0.001),
            bidir(3.0, 3.5, t + 0.002, t + 0.006),
            bidir(2.0, 1.0, t + 0.004, t),
        ],
    )
    .unwrap();
    let t = T0 + 30.0;
    b.concurrent(
        "incast-bidir-n1-r1",
        "incast-bidir",
        "tcp-bw",
        "host",
        "incast",
        &into_n1,
        json!({"direction": "bidir"}),
        1,
        vec![
            bidir(3.0, 4.0, t, t),
            bidir(3.0, 3.5, t + 0.5, t + 0.5),
            bidir(2.0, 1.0, t + 1.0, t + 1.0),
        ],
    )
    .unwrap_err();
    // A bidir bisection: cut n1->n3, n2->n4 carries 4 + 3 one way and
    // 4.5 + 3.5 back; the other cut's flows did not run together.
    let t = T0 + 40.0;
    b.concurrent(
        "bisect-bidir-0",
        "bisection-bidir",
        "tcp-bw",
        "host",
        "bisection",
        &[("n1", "n3"), ("n2", "n4")],
        json!({"direction": "bidir"}),
        0,
        vec![bidir(4.0, 4.5, t, t + 0.003), bidir(3.0, 3.5, t + 0.002, t)],
    )
    .unwrap();
    let t = T0 + 50.0;
    b.concurrent(
        "bisect-bidir-1",
        "bisection-bidir",
        "tcp-bw",
        "host",
        "bisection",
        &[("n1", "n4"), ("n2", "n3")],
        json!({"direction": "bidir"}),
        0,
        vec![bidir(4.0, 4.0, t, t), bidir(4.0, 4.0, t + 0.6, t + 0.6)],
    )
    .unwrap_err();
    b.store
        .set_findings(
            run,
            "doctor",
            &[(
                "n1".to_string(),
                json!({"id": "node-ip-slow-link", "severity": "warning", "subject": "node",
                       "summary": "the node IP is on a 1 Gbit/s link; a CNI overlay following it is capped there",
                       "fix": ["kubelet --node-ip=198.18.1.1"]}),
            )],
        )
        .unwrap();
    b.store.end_run(run).unwrap();
    let hists = std::mem::take(&mut b.hists);
    drop(b);
    // What newer writers store: the histogram in the record and its column;
    // fixed times and version so the output never changes.
    let c = rusqlite::Connection::open(db).unwrap();
    for (cell, h) in hists {
        c.execute(
            "UPDATE measurements SET record = json_set(record, '$.lat_hist', ?2), lat_hist = ?2 WHERE cell_id = ?1",
            rusqlite::params![cell, h],
        )
        .unwrap();
    }
    c.execute(
        "UPDATE runs SET started_at = '2026-01-02T03:00:00Z', updated_at = '2026-01-02T04:00:00Z',
                         ended_at = '2026-01-02T04:00:00Z', fabperf_version = '0.0.0-fixture'",
        [],
    )
    .unwrap();
    c.execute("UPDATE findings SET at = '2026-01-02T04:00:00Z'", [])
        .unwrap();
    run
}

/// A tuning/policy run on one path: tcp-lat and tcp-bw under two profiles
/// and 0 or 200 policy rules, two repeats each. Rules add 3 µs to the
/// latency and take 1 Gbit/s; the second profile adds 1 µs.
pub fn build_dims(db: &Path) -> i64 {
    let mut store = Store::open(db).unwrap();
    let run = store
        .create_run(&NewRun {
            plan_name: "levels",
            plan_hash: "d1m",
            plan_file: Some("levels.toml"),
            plan_text: "name = \"levels\"\nbaseline = \"host\"\n",
        })
        .unwrap()
        .id;
    store
        .put_agents(
            run,
            &[
                agent("n1", "host", Some(10.0), 9000),
                agent("n2", "host", Some(10.0), 9000),
            ],
        )
        .unwrap();
    let mut b = B {
        store,
        run,
        seq: 0,
        hists: Vec::new(),
    };
    for (pi, profile) in ["level-1", "level-2"].iter().enumerate() {
        for rules in [0u64, 200] {
            for rep in 0..2u32 {
                let dims = json!({"size": 64, "profile": profile, "policies": rules});
                let p50 = 10.0 + pi as f64 + if rules > 0 { 3.0 } else { 0.0 } + rep as f64 * 0.1;
                b.pair(
                    &format!("lat-{profile}-{rules}-r{rep}"),
                    "lat",
                    "tcp-lat",
                    "host",
                    dims,
                    rep,
                    ("n1", "n2"),
                    lat("tcp-lat", 64, p50, p50 * 2.0, None),
                );
                let dims = json!({"size": 131072, "profile": profile, "policies": rules});
                let gbps = 9.0 - if rules > 0 { 1.0 } else { 0.0 } + rep as f64 * 0.1;
                b.pair(
                    &format!("bw-{profile}-{rules}-r{rep}"),
                    "bw",
                    "tcp-bw",
                    "host",
                    dims,
                    rep,
                    ("n1", "n2"),
                    bw("tcp-bw", 131072, gbps, None),
                );
            }
        }
    }
    b.store.end_run(run).unwrap();
    run
}

/// A store with one run of `plan` and `agents`, for a test to fill.
pub fn open(db: &Path, plan: &str, agents: &[fabperf_store::AgentRow]) -> B {
    let mut store = Store::open(db).unwrap();
    let run = store
        .create_run(&NewRun {
            plan_name: "custom",
            plan_hash: "c0",
            plan_file: Some("custom.toml"),
            plan_text: plan,
        })
        .unwrap()
        .id;
    store.put_agents(run, agents).unwrap();
    B {
        store,
        run,
        seq: 0,
        hists: Vec::new(),
    }
}

impl B {
    /// Attach a histogram to a cell's records once the run is finished.
    pub fn hist(&mut self, cell: &str, h: String) {
        self.hists.push((cell.to_string(), h));
    }

    /// End the run and write the histograms.
    pub fn finish(mut self, db: &Path) {
        self.store.end_run(self.run).unwrap();
        let hists = std::mem::take(&mut self.hists);
        drop(self);
        let c = rusqlite::Connection::open(db).unwrap();
        for (cell, h) in hists {
            c.execute(
                "UPDATE measurements SET record = json_set(record, '$.lat_hist', ?2), lat_hist = ?2 WHERE cell_id = ?1",
                rusqlite::params![cell, h],
            )
            .unwrap();
        }
    }
}
