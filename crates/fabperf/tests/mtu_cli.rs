//! `fabperf mtu` and `fabperf doctor --mtu-results` through the real binary:
//! a loopback path against a `fabperf server` process, the JSON report fed to
//! doctor, and hostile results files refused as bad input.

use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

/// A port number free for both TCP and UDP on 127.0.0.1.
fn free_port() -> u16 {
    loop {
        let t = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = t.local_addr().unwrap().port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server(port: u16) -> Server {
    let child = Command::new(BIN)
        .args(["server", "--bind", "127.0.0.1", "--quiet", "--port"])
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting fabperf server");
    let s = Server(child);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "the agent did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

#[test]
fn loopback_report_and_doctor() {
    let port = free_port();
    let _s = server(port);
    let out = Command::new(BIN)
        .args(["mtu", "127.0.0.1", "--no-icmp", "--json", "-p"])
        .arg(port.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "fabperf.mtu/1");
    let p = &v["paths"][0];
    let lo = p["interface"]["mtu"]
        .as_u64()
        .expect("loopback interface named");
    let bound = lo.min(65535);
    assert_eq!(p["forward"]["mtu"].as_u64(), Some(bound), "{p}");
    assert_eq!(p["reverse"]["mtu"].as_u64(), Some(bound), "{p}");
    assert!(p.get("mismatches").is_none(), "{p}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mtu.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let d = Command::new(BIN)
        .args(["doctor", "--json", "--mtu-results"])
        .arg(&file)
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&d.stdout).expect("doctor's JSON");
    let ids: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str())
        .collect();
    assert!(!ids.contains(&"mtu-mismatch"), "{ids:?}");
    // The same report with the interface claimed at 9000 above a 1500 path.
    let mut m = v.clone();
    m["hostname"] = "elsewhere".into();
    m["paths"][0]["interface"]["mtu"] = 9000.into();
    m["paths"][0]["forward"]["mtu"] = 1500.into();
    m["paths"][0]["forward"]["limited_by"] = "path".into();
    std::fs::write(&file, serde_json::to_vec(&m).unwrap()).unwrap();
    let d = Command::new(BIN)
        .args(["doctor", "--json", "--mtu-results"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(d.status.code(), Some(1));
    let r: Value = serde_json::from_slice(&d.stdout).expect("doctor's JSON");
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "mtu-mismatch")
        .expect("an mtu-mismatch finding");
    assert_eq!(f["severity"], "error");
    assert!(f["evidence"].to_string().contains("1500 bytes"), "{f}");
}

#[test]
fn hostile_results_files_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in [
        ("empty", &b""[..]),
        ("garbage", &b"\x00\xff{{{"[..]),
        (
            "other-schema",
            &br#"{"schema":"fabperf.doctor/1","hostname":"x","paths":[]}"#[..],
        ),
        (
            "wrong-types",
            &br#"{"schema":"fabperf.mtu/1","hostname":7,"paths":{}}"#[..],
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        let d = Command::new(BIN)
            .args(["doctor", "--mtu-results"])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(d.status.code(), Some(2), "{name}: {d:?}");
    }
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b' '; (4 << 20) + 10]).unwrap();
    let d = Command::new(BIN)
        .args(["doctor", "--mtu-results"])
        .arg(&big)
        .output()
        .unwrap();
    assert_eq!(d.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&d.stderr).contains("larger than"));
}

#[test]
fn usage_errors() {
    for args in [
        &["mtu"][..],
        &["mtu", "127.0.0.1", "--icmp-only", "--no-icmp"],
        &["mtu", "127.0.0.1", "--attempts", "0"],
        &["mtu", "127.0.0.1", "--probe-timeout-ms", "0"],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { geteuid() == 0 }
}

extern "C" {
    fn geteuid() -> u32;
}

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// `fabperf mtu HOST --icmp-only --json` inside `ns`: the path's report.
fn mtu_in(ns: &str, host: &str) -> Value {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            BIN,
            "mtu",
            host,
            "--icmp-only",
            "--json",
        ])
        .args(["--attempts", "1", "--probe-timeout-ms", "20"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    v["paths"][0].clone()
}

/// In a namespace of its own: the route to 10.213.0.0/24 leaves through
/// ve0 with a source address held by lo (the interface is the route's
/// output device, not the one holding the source), and a VXLAN device over
/// an IPv6 underlay costs 70 bytes a packet (14 + 40 + 8 + 8), not 50.
#[test]
fn the_route_names_the_interface_and_an_ipv6_underlay_costs_70_bytes() {
    if !root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let ns = Netns(format!("fpmtu{}", std::process::id()));
    sh(&format!(
        "ip netns add {n} && ip -n {n} link set lo up && \
         ip -n {n} addr add 10.211.0.1/32 dev lo && \
         ip -n {n} link add ve0 type veth peer name ve1 && \
         ip -n {n} addr add 10.212.0.1/24 dev ve0 && \
         ip -n {n} addr add 2001:db8:212::1/64 dev ve0 nodad && \
         ip -n {n} link set ve0 up && ip -n {n} link set ve1 up && \
         ip -n {n} route add 10.213.0.0/24 dev ve0 src 10.211.0.1 && \
         ip -n {n} link add vx6 type vxlan id 42 local 2001:db8:212::1 remote 2001:db8:212::2 dstport 4789 dev ve0 && \
         ip -n {n} addr add 10.214.0.1/24 dev vx6 && ip -n {n} link set vx6 up",
        n = ns.0
    ));
    let p = mtu_in(&ns.0, "10.213.0.5");
    assert_eq!(p["local"], "10.211.0.1", "{p}");
    assert_eq!(p["interface"]["name"], "ve0", "{p}");
    let p = mtu_in(&ns.0, "10.214.0.5");
    assert_eq!(p["interface"]["kind"], "vxlan", "{p}");
    assert_eq!(p["interface"]["overhead"]["bytes"], 70, "{p}");
    assert!(
        p["interface"]["overhead"]["parts"]
            .as_str()
            .unwrap()
            .contains("IPv6 40"),
        "{p}"
    );
}
