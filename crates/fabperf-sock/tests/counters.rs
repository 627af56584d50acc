//! Counter deltas and findings for real: a udp-bw whose receiver has a tiny socket buffer
//! overflows it, and the record must carry the host's `Udp.RcvbufErrors` delta and the
//! `udp-rcvbuf-overflow` finding; a paced run with a large buffer must carry neither. Every
//! record of both ends also carries its placement (loopback: a virtual link, no port rate).
//!
//! `/proc/net/snmp` counts for a whole network namespace, and other programs on this host
//! send UDP too, so the test runs in a network namespace of its own: the test binary runs
//! itself again under `ip netns exec` (which also mounts that namespace's /sys). Needs root
//! and `ip` (iproute2); skipped with the reason printed otherwise.

use fabperf_agent::{Agent, AgentConfig};
use fabperf_proto::{ClientConfig, ErrorCode, Limits, ProtoError};
use fabperf_results::{CounterSource, Record};
use fabperf_sock::{kinds, run_udp_bw, SockError, UdpBwParams};
use std::process::Command;
use std::time::Duration;

const CHILD_ENV: &str = "FABPERF_COUNTERS_CHILD";
const DONE: &str = "=====FABPERF-COUNTERS-CHILD-DONE=====";

fn snmp_delta(r: &Record, side_remote: bool, key: &str) -> u64 {
    let c = r.counters.as_ref().expect("the record carries counters");
    let list = if side_remote { &c.remote } else { &c.local };
    list.iter()
        .filter(|g| g.source == CounterSource::Snmp)
        .find_map(|g| g.deltas.get(key).copied())
        .unwrap_or(0)
}

/// Child side: inside the namespace.
fn child_main() {
    let agent = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(10),
            ..Limits::default()
        },
        kinds: kinds(),
        quiet: true,
        identity: None,
    })
    .unwrap()
    .spawn();
    let cfg = ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_secs(10),
    };

    // Full rate into a receive buffer of 4 KiB (the kernel doubles it: a handful of
    // datagrams): the receiving socket overflows.
    let tiny = UdpBwParams {
        duration_s: 1.0,
        omit_s: 0.2,
        window: Some(4096),
        ..UdpBwParams::default()
    };
    let recs = run_udp_bw(agent.addr(), &cfg, &tiny).expect("udp-bw with a tiny buffer");
    let r = &recs[0];
    assert!(r.check().is_empty(), "{:?}", r.check());
    let u = r.udp.as_ref().unwrap();
    assert!(
        u.lost > 0,
        "nothing lost into a 4 KiB buffer at full rate: {u:?}"
    );
    // Both ends are this namespace: the agent (the receiver) and the client read the same
    // host counters. The overflow counted there is at least half of what was lost (a
    // datagram can also be lost before the socket: none are on loopback, but bands are
    // generous) and never more than what was sent in the whole run (warm-up included).
    let errs = snmp_delta(r, true, "Udp.RcvbufErrors");
    assert!(
        errs >= u.lost / 2,
        "Udp.RcvbufErrors +{errs} for {} lost datagrams",
        u.lost
    );
    assert!(errs <= u.sent * 2 + 1000, "+{errs} for {} sent", u.sent);
    assert!(snmp_delta(r, false, "Udp.RcvbufErrors") > 0);
    let f: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "udp-rcvbuf-overflow")
        .collect();
    assert_eq!(f.len(), 2, "one per end: {:?}", r.findings);
    assert!(f.iter().any(|f| f.subject == "agent host"));
    assert!(f[0].fix.iter().any(|x| x.contains("net.core.rmem_max")));
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.path == "/proc/net/snmp Udp.RcvbufErrors"));

    // Paced far below what the receiver drains, with the default 8 MiB buffer: no overflow,
    // no finding.
    let clean = UdpBwParams {
        duration_s: 1.0,
        omit_s: 0.2,
        rate_bps: Some(10_000_000),
        ..UdpBwParams::default()
    };
    // The agent may still be closing the previous test: it answers `busy` until then.
    let mut tries = 0;
    let recs = loop {
        match run_udp_bw(agent.addr(), &cfg, &clean) {
            Err(SockError::Proto(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            })) if tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            r => break r.expect("paced udp-bw"),
        }
    };
    let r = &recs[0];
    assert!(r.check().is_empty(), "{:?}", r.check());
    assert_eq!(r.udp.as_ref().unwrap().lost, 0, "{:?}", r.udp);
    assert_eq!(snmp_delta(r, true, "Udp.RcvbufErrors"), 0);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // The datagrams themselves are counted: InDatagrams grew by about what arrived (the
    // meter starts at the agent's warm-up boundary, a little off the sender's).
    let got = r.udp.as_ref().unwrap().received;
    let counted = snmp_delta(r, true, "Udp.InDatagrams");
    assert!(
        counted >= got * 8 / 10,
        "Udp.InDatagrams +{counted}, received {got}"
    );
    for p in [&r.placement_local, &r.placement_remote] {
        let p = p.as_ref().expect("each end reports its placement");
        assert_eq!(p.interface.as_deref(), Some("lo"));
        assert!(p.virtual_link && p.port_rate_gbps.is_none());
        assert_eq!(p.cpu, "auto");
        assert!(p.cpu_list.is_some());
    }
    assert!(r.port_rate_gbps.is_none() && r.bw_pct_of_port.is_none());
    drop(agent);
    println!("{DONE}");
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

#[test]
fn udp_buffer_overflow_shows_in_counters_and_findings() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child_main();
        return;
    }
    // SAFETY (test): geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: needs root for a network namespace of its own");
        return;
    }
    let ns = Netns(format!("fpc-cnt{}", std::process::id()));
    if let Err(e) = sh(&["ip", "netns", "add", &ns.0]) {
        eprintln!("skipping: cannot create a network namespace ({e})");
        return;
    }
    sh(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(&exe)
        .args([
            "--exact",
            "udp_buffer_overflow_shows_in_counters_and_findings",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(DONE),
        "child in {} failed:\n{stdout}\n{stderr}",
        ns.0
    );
}
