//! Contract between `fabperf detect --json` and its readers: the real output of the binary,
//! for every fixture node and for this machine, loads in `fabperf k8s`'s reader and in
//! `doctor --inventory`'s, and loses no field on the way.

use fabperf_detect::Inventory;
use fabperf_k8s::detect::DetectReport;
use std::path::{Path, PathBuf};
use std::process::Command;

fn detect_json(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fabperf"))
        .arg("detect")
        .arg("--json")
        .args(args)
        .output()
        .expect("run fabperf detect");
    assert!(
        out.status.success(),
        "fabperf detect {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn check(json: &str, origin: &str) {
    let k8s = DetectReport::parse(json, origin).unwrap_or_else(|e| panic!("{e:#}"));
    let inv = Inventory::from_json_str(json, origin).unwrap();
    assert_eq!(k8s.0, inv, "{origin}");
    // Nothing the binary printed is dropped by the shared model: re-serialized, every key of
    // the output is still there with the same value.
    let printed: serde_json::Value = serde_json::from_str(json).unwrap();
    let again: serde_json::Value = serde_json::from_str(&inv.to_json_pretty()).unwrap();
    assert_eq!(printed, again, "{origin}");
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fabperf-detect/tests/fixtures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .collect();
    v.sort();
    v
}

#[test]
fn fixture_detect_output_parses_in_k8s() {
    let all = fixtures();
    assert!(all.len() >= 5);
    for p in all {
        let json = detect_json(&["--root", p.to_str().unwrap()]);
        check(&json, &p.display().to_string());
    }
}

#[test]
fn live_detect_output_parses_in_k8s() {
    let json = detect_json(&[]);
    check(&json, "this machine");
    let r = DetectReport::parse(&json, "this machine").unwrap();
    assert!(!r.hostname.is_empty());
    assert!(
        r.netdev("lo").is_some(),
        "loopback missing from the live inventory"
    );
}
