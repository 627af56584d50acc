//! What an admitted flow of an incast costs its receiver: N tcp-bw senders
//! of one group set up against an agent in a separate process (this test
//! binary, run again as the agent), started at one instant, paced low so
//! the machine's CPU is not the limit. The agent's resident memory and
//! threads are read with every flow set up (admitted, waiting for the
//! start) and while they all run; the figures per flow are printed
//! (docs/run.md quotes them).
//!
//!   FABPERF_INCAST_FLOWS=511 cargo test -p fabperf-run --test incast_rss -- --nocapture

use fabperf_agent::{Agent, AgentConfig};
use fabperf_proto::{ClientConfig, Limits, Start};
use fabperf_sock::{prepare_tcp_bw, TcpBwParams};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FABPERF_INCAST_CHILD_PORT_FILE";

/// The agent process: started by the test below; not a test of its own.
#[test]
#[ignore = "the agent process of admitted_flows_cost_the_receiver (started by it)"]
fn agent_process() {
    let path = std::env::var(CHILD_ENV).expect("run by the incast test");
    let _ = fabperf_http::rlimit::raise_to_hard();
    let a = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(30),
            ..Limits::default()
        },
        kinds: fabperf_sock::kinds(),
        quiet: true,
        identity: None,
    })
    .unwrap();
    std::fs::write(&path, a.local_addr().port().to_string()).unwrap();
    a.run();
}

struct Child_ {
    child: Child,
    pid: u32,
}

impl Drop for Child_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

fn start_child(port_file: &std::path::Path) -> (Child_, SocketAddr) {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "agent_process", "--ignored", "--nocapture"])
        .env(CHILD_ENV, port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let c = Child_ {
        pid: child.id(),
        child,
    };
    let t0 = Instant::now();
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the agent did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (c, SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

#[test]
fn admitted_flows_cost_the_receiver() {
    let n: usize = std::env::var("FABPERF_INCAST_FLOWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let _ = fabperf_http::rlimit::ensure_nofile(4 * n as u64 + 256, "this test");
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = start_child(&dir.path().join("port"));
    let hello = fabperf_proto::query_agent(addr, &ClientConfig::default()).unwrap();
    let cap = hello.capacity.unwrap();
    assert!(
        cap.group_tests as usize >= n,
        "the agent admits {} tests of a group, fewer than {n}: {cap:?}",
        cap.group_tests
    );
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, threads0) = (status(child.pid, "VmRSS:"), status(child.pid, "Threads:"));
    let cfg = ClientConfig {
        group: Some("0123456789abcdef".into()),
        timeout: Duration::from_secs(20),
        token: None,
    };
    let p = TcpBwParams {
        duration_s: 1.0,
        omit_s: 0.2,
        // 2 Mbit/s each: the loopback carries them all on a 2-core machine.
        rate_bps: Some(2_000_000),
        ..Default::default()
    };
    // Every flow set up: admitted, connected, data connection open, ready.
    let t_setup = Instant::now();
    let mut prepared = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let got: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .map(|_| s.spawn(|| prepare_tcp_bw(addr, &cfg, &p)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            prepared.push(g.unwrap_or_else(|e| panic!("setting a flow up: {e}")));
        }
    }
    let setup_s = t_setup.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    let (rss1, threads1) = (status(child.pid, "VmRSS:"), status(child.pid, "Threads:"));
    // All start at one instant; the peak while they run.
    let start = Start::after(0.5, true);
    let (mut peak_rss, mut peak_threads) = (rss1, threads1);
    let records = std::thread::scope(|s| {
        let hs: Vec<_> = prepared
            .into_iter()
            .map(|f| s.spawn(move || f.run(start)))
            .collect();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            peak_rss = peak_rss.max(status(child.pid, "VmRSS:"));
            peak_threads = peak_threads.max(status(child.pid, "Threads:"));
            std::thread::sleep(Duration::from_millis(100));
        }
        hs.into_iter()
            .map(|h| h.join().unwrap().unwrap_or_else(|e| panic!("a flow: {e}")))
            .collect::<Vec<_>>()
    });
    let starts: Vec<f64> = records
        .iter()
        .map(|r| r[0].interval.as_ref().unwrap().sent_from_s.unwrap())
        .collect();
    let skew = starts.iter().cloned().fold(f64::MIN, f64::max)
        - starts.iter().cloned().fold(f64::MAX, f64::min);
    let per = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / n as f64;
    println!(
        "{n} admitted tcp-bw flows (1 stream, 128 KiB messages) into one agent: set up in \
         {setup_s:.2} s; agent resident memory {rss0} KiB idle, {rss1} KiB with every flow set \
         up ({:.1} KiB per flow), {peak_rss} KiB at the peak while they ran ({:.1} KiB per \
         flow); threads {threads0} idle, {threads1} set up ({:.2} per flow), {peak_threads} at \
         the peak ({:.2} per flow); senders started within {:.2} ms; load average {}",
        per(rss1, rss0),
        per(peak_rss, rss0),
        per(threads1, threads0),
        per(peak_threads, threads0),
        skew * 1e3,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // One connection thread per admitted flow; one more per stream while
    // it runs (and nothing that grows with the message size per flow).
    assert!(per(threads1, threads0) <= 1.1, "{threads1} threads set up");
    assert!(
        per(peak_threads, threads0) <= 2.1,
        "{peak_threads} threads at the peak"
    );
    assert!(per(peak_rss, rss0) < 512.0, "{peak_rss} KiB at the peak");
    assert!(records.iter().all(|r| r[0].bytes > 0));
}
