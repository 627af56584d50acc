//! Egress shaping for real: a network namespace with a management veth shaped with `tc` and an
//! unshaped fabric veth, as the multi-node testbed builds each node. Detect must read the cap
//! through rtnetlink (a veth always says speed 10000), and doctor's `node-ip-slow-link` must
//! fire while the node address is on the shaped link, and not once it moves to the fabric.
//!
//! Needs root, `ip` and `tc` (iproute2); skipped with the reason printed otherwise.

use serde_json::Value;
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "FABPERF_NETNS_CHILD";
const MARK: &str = "=====FABPERF-CHILD-JSON=====";

/// Child side: runs inside `ip netns exec`, which also mounts the namespace's own /sys.
fn child_main() {
    let opts = fabperf_detect::DetectOptions::default();
    let inv = fabperf_detect::detect_live(&opts).expect("live detect");
    let rep = fabperf_detect::doctor::diagnose(&inv);
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("capture");
    fabperf_detect::capture::capture(&cap, &opts).expect("capture");
    let back = fabperf_detect::detect_root(&cap, &opts).expect("read the capture back");
    let back_rep = fabperf_detect::doctor::diagnose(&back);
    println!(
        "{MARK}\n{{\"live\": {}, \"doctor\": {}, \"snapshot\": {}, \"snapshot_doctor\": {}}}\n{MARK}",
        inv.to_json_pretty(),
        rep.to_json_pretty(),
        back.to_json_pretty(),
        back_rep.to_json_pretty()
    );
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn in_ns(ns: &str, args: &[&str]) -> Result<(), String> {
    let mut v = vec!["ip", "netns", "exec", ns];
    v.extend_from_slice(args);
    sh(&v)
}

/// A node: `mgmt0` 192.0.2.10/24 (default route), `fab0` 198.51.100.10/24, both veths up.
fn build(ns: &str) -> Result<(), String> {
    sh(&["ip", "netns", "add", ns])?;
    for (a, b) in [("mgmt0", "mgmt0p"), ("fab0", "fab0p")] {
        sh(&[
            "ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b,
        ])?;
        sh(&["ip", "-n", ns, "link", "set", a, "up"])?;
        sh(&["ip", "-n", ns, "link", "set", b, "up"])?;
    }
    sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
    sh(&["ip", "-n", ns, "link", "set", "fab0", "mtu", "9000"])?;
    sh(&[
        "ip",
        "-n",
        ns,
        "addr",
        "add",
        "192.0.2.10/24",
        "dev",
        "mgmt0",
    ])?;
    sh(&[
        "ip",
        "-n",
        ns,
        "addr",
        "add",
        "198.51.100.10/24",
        "dev",
        "fab0",
    ])?;
    sh(&[
        "ip",
        "-n",
        ns,
        "route",
        "add",
        "default",
        "via",
        "192.0.2.1",
        "dev",
        "mgmt0",
    ])?;
    Ok(())
}

fn detect_in(ns: &str) -> Value {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(["shaped_management_link", "--exact", "--nocapture"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.split(MARK).nth(1).unwrap_or_else(|| {
        panic!(
            "child failed ({}): {}\n{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    serde_json::from_str(json).unwrap()
}

fn netdev<'a>(inv: &'a Value, name: &str) -> &'a Value {
    inv["netdevs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

fn findings<'a>(rep: &'a Value, id: &str) -> Vec<&'a Value> {
    rep["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

#[test]
fn shaped_management_link() {
    if std::env::var(CHILD_ENV).is_ok() {
        return child_main();
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: needs root (network namespaces, veth, tc)");
        return;
    }
    let ns = format!("fpdet-tc-{}", std::process::id());
    let guard = Netns(ns.clone());
    if let Err(e) = build(&ns) {
        eprintln!("SKIPPED: cannot build the test namespace: {e}");
        return;
    }

    // 1. tbf on the management link, node address on it.
    in_ns(
        &ns,
        &[
            "tc", "qdisc", "add", "dev", "mgmt0", "root", "tbf", "rate", "1gbit", "burst", "128kb",
            "latency", "10ms",
        ],
    )
    .unwrap();
    let v = detect_in(&ns);
    let m = netdev(&v["live"], "mgmt0");
    assert_eq!(m["speed_mbps"], 10000, "a veth reports 10000");
    assert_eq!(m["tc_rate_bps"], 1_000_000_000u64);
    assert!(m["tc_shaping"].as_str().unwrap().starts_with("tbf "), "{m}");
    assert!(netdev(&v["live"], "fab0")["tc_rate_bps"].is_null());
    assert_eq!(v["live"]["node_ip"]["interface"], "mgmt0");
    let f = findings(&v["doctor"], "node-ip-slow-link");
    assert_eq!(f.len(), 1, "{:#}", v["doctor"]);
    let f = f[0];
    assert_eq!(f["severity"], "error");
    assert_eq!(f["subject"], "mgmt0");
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains("1 Gbit/s") && summary.contains("tbf") && summary.contains("fab0"),
        "{summary}"
    );
    assert!(
        f["evidence"].as_array().unwrap().iter().any(|e| e["value"]
            .as_str()
            .unwrap()
            .contains("rate 1 Gbit/s")
            && e["path"].as_str().unwrap().contains("RTM_GETQDISC")),
        "{f:#}"
    );
    assert!(f["fix"][0]
        .as_str()
        .unwrap()
        .contains("--node-ip=198.51.100.10"));
    // The capture carries the shaping: read back, the same finding.
    let s = netdev(&v["snapshot"], "mgmt0");
    assert_eq!(s["tc_rate_bps"], 1_000_000_000u64);
    assert_eq!(
        findings(&v["snapshot_doctor"], "node-ip-slow-link").len(),
        1
    );

    // 2. htb with a default class capped at 500 Mbit/s.
    in_ns(&ns, &["tc", "qdisc", "del", "dev", "mgmt0", "root"]).unwrap();
    in_ns(
        &ns,
        &[
            "tc", "qdisc", "add", "dev", "mgmt0", "root", "handle", "1:", "htb", "default", "10",
        ],
    )
    .unwrap();
    in_ns(
        &ns,
        &[
            "tc", "class", "add", "dev", "mgmt0", "parent", "1:", "classid", "1:1", "htb", "rate",
            "500mbit",
        ],
    )
    .unwrap();
    in_ns(
        &ns,
        &[
            "tc", "class", "add", "dev", "mgmt0", "parent", "1:1", "classid", "1:10", "htb",
            "rate", "100mbit", "ceil", "800mbit",
        ],
    )
    .unwrap();
    let v = detect_in(&ns);
    let m = netdev(&v["live"], "mgmt0");
    assert_eq!(m["tc_rate_bps"], 500_000_000u64, "{m}");
    assert!(m["tc_shaping"].as_str().unwrap().contains("htb 1:"), "{m}");
    assert_eq!(findings(&v["doctor"], "node-ip-slow-link").len(), 1);

    // 3. The node address moves to the fabric link: no finding.
    in_ns(&ns, &["ip", "route", "del", "default"]).unwrap();
    in_ns(
        &ns,
        &[
            "ip",
            "route",
            "add",
            "default",
            "via",
            "198.51.100.1",
            "dev",
            "fab0",
        ],
    )
    .unwrap();
    let v = detect_in(&ns);
    assert_eq!(v["live"]["node_ip"]["interface"], "fab0");
    assert!(
        findings(&v["doctor"], "node-ip-slow-link").is_empty(),
        "{:#}",
        v["doctor"]
    );
    drop(guard);
}
