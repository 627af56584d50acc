//! The aggregate of concurrent flows counts only their common interval.
//!
//! Two flows share a link of L bytes/s. A starts 0.5 s before B and B ends
//! 0.5 s after A: each runs alone at L for half a second and at L/2 while
//! both run. Over the common interval the link carried exactly L; the sum
//! of the flows' bytes over the longest interval (or of their mean rates)
//! says 1.05 L — more than the link can carry.

use fabperf_results::{Interval, Progress, Record, Transport};
use fabperf_run::drive::DriveResult;
use fabperf_run::exec::cell_measurements;
use fabperf_store::{CellSpec, Role};
use serde_json::json;

const L: f64 = 1.25e8; // 1 Gbit/s in bytes per second

/// A flow measured over [a, b], receiving at `rate(t)` bytes/s, with
/// progress counts every 50 ms.
fn flow(a: f64, b: f64, rate: impl Fn(f64) -> f64) -> DriveResult {
    let tick = 0.05;
    let mut cum = 0.0;
    let mut bytes = Vec::new();
    let mut t = a;
    while t + tick <= b + 1e-9 {
        cum += rate(t + tick / 2.0) * tick;
        bytes.push(cum.round() as u64);
        t += tick;
    }
    let total = *bytes.last().unwrap();
    bytes.pop();
    let mut r = Record::new("tcp-bw", Transport::Tcp, 131072, 1);
    r.direction = Some("forward".into());
    r.set_throughput(total, b - a, None);
    r.interval = Some(Interval {
        start_s: a,
        end_s: b,
        sent_from_s: Some(a - 0.1),
        progress: Some(Progress {
            t0_s: a,
            tick_s: tick,
            bytes,
            last_s: b,
            last_bytes: total,
        }),
    });
    DriveResult {
        records: vec![r],
        test_s: b - a,
    }
}

fn cell() -> CellSpec {
    CellSpec {
        cell_id: "c".into(),
        seq: 0,
        batch: 0,
        test: "in".into(),
        kind: "tcp-bw".into(),
        path: "p".into(),
        pattern: "incast".into(),
        flows: vec![("a".into(), "r".into()), ("b".into(), "r".into())],
        params: json!({}),
        dims: json!({}),
        repeat: 0,
    }
}

#[test]
fn a_flow_that_ran_alone_for_a_while_does_not_inflate_the_aggregate() {
    let both = |t: f64| (100.5..110.0).contains(&t);
    let a = flow(100.0, 110.0, |t| if both(t) { L / 2.0 } else { L });
    let b = flow(100.5, 110.5, |t| if both(t) { L / 2.0 } else { L });
    let sum_bytes = a.records[0].bytes + b.records[0].bytes;
    let naive = sum_bytes as f64 / 10.0;
    assert!(naive > 1.04 * L, "the old figure overstates: {naive}");
    let ms = cell_measurements(&cell(), &[(0, a), (1, b)]).unwrap();
    let agg = ms.iter().find(|m| m.role == Role::Aggregate).unwrap();
    assert!(agg.record.check().is_empty(), "{:?}", agg.record.check());
    let rate = agg.record.bytes as f64 / agg.record.duration_s;
    assert!(
        (rate - L).abs() < 0.002 * L,
        "the aggregate is {:.4} L, the link carried L",
        rate / L
    );
    assert!((agg.record.duration_s - 9.5).abs() < 1e-6);
    let f = agg.record.flows.as_ref().unwrap();
    assert_eq!(f.count, 2);
    assert!((f.overlap_pct - 95.0).abs() < 1e-6, "{f:?}");
    assert!((f.start_skew_s.unwrap() - 0.5).abs() < 1e-9);
}

#[test]
fn flows_that_overlap_less_than_90_percent_fail_the_cell() {
    let a = flow(100.0, 110.0, |_| L / 2.0);
    let b = flow(102.0, 112.0, |_| L / 2.0);
    let e = cell_measurements(&cell(), &[(0, a), (1, b)]).unwrap_err();
    assert!(
        e.contains("overlap for 80 %") && e.contains("did not run together"),
        "{e}"
    );
}

#[test]
fn a_flow_without_an_interval_fails_the_cell() {
    let a = flow(100.0, 110.0, |_| L / 2.0);
    let mut b = flow(100.0, 110.0, |_| L / 2.0);
    b.records[0].interval = None;
    let e = cell_measurements(&cell(), &[(0, a), (1, b)]).unwrap_err();
    assert!(e.contains("measured no interval"), "{e}");
    // Nor does a flow missing from the results count as none.
    let a = flow(100.0, 110.0, |_| L / 2.0);
    let e = cell_measurements(&cell(), &[(0, a)]).unwrap_err();
    assert!(e.contains("1 of the cell's 2 flows"), "{e}");
}

/// What a hostile driving agent can put in a record (JSON carries no NaN,
/// but any finite number): the cell fails with a reason or gives a
/// consistent aggregate, never a panic.
#[test]
fn hostile_intervals_give_an_error_or_a_sound_aggregate() {
    let extremes = [0.0, -1.0, 1e-300, 1e9, 1.7e9, 1e308, -1e308, f64::MAX];
    let mut n = 0;
    for &a in &extremes {
        for &b in &extremes {
            for &tick in &[0.0, -0.05, 1e-300, 0.05, 1e308] {
                let good = flow(100.0, 110.0, |_| L / 2.0);
                let mut bad = flow(100.0, 110.0, |_| L / 2.0);
                let i = bad.records[0].interval.as_mut().unwrap();
                i.start_s = a;
                i.end_s = b;
                let p = i.progress.as_mut().unwrap();
                p.tick_s = tick;
                p.t0_s = a;
                p.last_s = b;
                p.bytes.reverse();
                match cell_measurements(&cell(), &[(0, good), (1, bad)]) {
                    Ok(ms) => {
                        for m in ms.iter().filter(|m| m.role == Role::Aggregate) {
                            assert!(m.record.check().is_empty(), "{:?}", m.record.check());
                        }
                    }
                    Err(e) => assert!(!e.is_empty()),
                }
                n += 1;
            }
        }
    }
    assert_eq!(n, 8 * 8 * 5);
    // Counts that go down fail the flow's interval check.
    let good = flow(100.0, 110.0, |_| L / 2.0);
    let mut bad = flow(100.0, 110.0, |_| L / 2.0);
    bad.records[0]
        .interval
        .as_mut()
        .unwrap()
        .progress
        .as_mut()
        .unwrap()
        .bytes
        .reverse();
    let e = cell_measurements(&cell(), &[(0, good), (1, bad)]).unwrap_err();
    assert!(e.contains("measured no interval"), "{e}");
}
