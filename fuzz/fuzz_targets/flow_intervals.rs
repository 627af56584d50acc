//! Concurrent flows' results as driving agents return them (records with
//! measured intervals and progress counts), through the runner's
//! per-direction aggregate over their common interval, and the interval
//! arithmetic on its own: hostile values give an error, never a panic or a
//! hang, and an aggregate the runner stores is a consistent record.
#![no_main]

use fabperf_run::drive::DriveResult;
use fabperf_store::CellSpec;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(results) = serde_json::from_slice::<Vec<DriveResult>>(data) else {
        if let Ok(p) = serde_json::from_slice::<Vec<fabperf_results::Progress>>(data) {
            let refs: Vec<&fabperf_results::Progress> = p.iter().collect();
            let _ = fabperf_results::Progress::sum(&refs);
            for x in &p {
                let ok = x.check().is_empty();
                let b = x.bytes_between(x.t0_s, x.last_s);
                if ok {
                    assert!(b.is_finite() && b >= 0.0, "{b}");
                }
            }
        }
        return;
    };
    if results.is_empty() || results.len() > 64 {
        return;
    }
    let cell = CellSpec {
        cell_id: "c".into(),
        seq: 0,
        batch: 0,
        test: "t".into(),
        kind: "tcp-bw".into(),
        path: "p".into(),
        pattern: "incast".into(),
        flows: (0..results.len().max(2))
            .map(|i| (format!("s{i}"), "r".to_string()))
            .collect(),
        params: json!({}),
        dims: json!({}),
        repeat: 0,
    };
    let flows: Vec<(usize, DriveResult)> = results.into_iter().enumerate().collect();
    if let Ok(ms) = fabperf_run::exec::cell_measurements(&cell, &flows) {
        for m in ms.iter().filter(|m| m.role == fabperf_store::Role::Aggregate) {
            let bad = m.record.check();
            assert!(bad.is_empty(), "{bad:?}");
        }
    }
});
