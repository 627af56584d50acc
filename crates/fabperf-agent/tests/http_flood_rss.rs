//! Thousands of unauthenticated HTTP and silent connections against an
//! agent with --http in a separate process (this test binary, run again as
//! the agent): its resident memory and thread count stay bounded, and a
//! real HTTP client and a real fabperf test get through. The figures are
//! printed (docs/security.md quotes them).

mod common;

use common::{ChildAgent, Echo};
use fabperf_agent::{Agent, AgentConfig, HttpConfig};
use fabperf_proto::Limits;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FABPERF_HTTP_FLOOD_CHILD_PORT_FILE";

/// The agent process, started by the test below; not a test of its own.
#[test]
#[ignore = "the agent process of http_connections_cost_the_agent_bounded_memory (started by it)"]
fn http_agent_process() {
    let path = std::env::var(CHILD_ENV).expect("run by the flood test");
    let _ = fabperf_http::rlimit::raise_to_hard();
    let mut a = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: Some(b"tok".to_vec()),
        insecure: false,
        // Long enough that nothing is closed by the clock during the test.
        limits: Limits {
            io_timeout: Duration::from_secs(60),
            ..Limits::default()
        },
        kinds: vec![Box::new(Echo)],
        quiet: true,
        identity: None,
    })
    .unwrap();
    a.enable_http(HttpConfig {
        timeout: Duration::from_secs(60),
        ..HttpConfig::default()
    })
    .unwrap();
    std::fs::write(&path, a.local_addr().port().to_string()).unwrap();
    a.run();
}

fn get(addr: SocketAddr) -> std::io::Result<Duration> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /bytes/100 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    if !out.starts_with(b"HTTP/1.1 200 ") || out.len() < 100 {
        return Err(std::io::Error::other(format!(
            "bad answer {:?}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        )));
    }
    Ok(t.elapsed())
}

#[test]
fn http_connections_cost_the_agent_bounded_memory() {
    const EACH: usize = 1000;
    if let Err(e) = fabperf_http::rlimit::ensure_nofile(4 * EACH as u64 + 256, "this test") {
        eprintln!("skipped: {e}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("fabperf-http-flood-{}", std::process::id()));
    let agent = ChildAgent::start("http_agent_process", CHILD_ENV, &dir);
    let addr = agent.addr;
    let echo = || agent.echo();
    echo().unwrap();
    get(addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let rss0 = agent.status("VmRSS:");
    let threads0 = agent.status("Threads:");

    // From one address (as a load generator would): EACH silent
    // connections, EACH idle keep-alive connections after one request,
    // and EACH holding a request head 1 KiB short of the 8 KiB limit.
    let pad = format!(
        "GET /bytes/1 HTTP/1.1\r\nHost: x\r\nX-Pad: {}",
        "a".repeat(fabperf_http::server::MAX_REQUEST_HEAD - 1024)
    );
    let mut conns = Vec::new();
    let mut peak_rss = rss0;
    let mut peak_threads = threads0;
    for i in 0..3 * EACH {
        let mut s = TcpStream::connect(addr).unwrap();
        match i % 3 {
            0 => {}
            1 => {
                s.write_all(b"GET /bytes/1 HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
            }
            _ => s.write_all(pad.as_bytes()).unwrap(),
        }
        conns.push(s);
        if i % 300 == 0 {
            peak_rss = peak_rss.max(agent.status("VmRSS:"));
            peak_threads = peak_threads.max(agent.status("Threads:"));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        peak_rss = peak_rss.max(agent.status("VmRSS:"));
        peak_threads = peak_threads.max(agent.status("Threads:"));
        worst = worst.max(get(addr).expect("a real HTTP client gets through"));
        worst = worst.max(echo().expect("a real fabperf client gets through"));
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(conns);
    println!(
        "HTTP flood: agent RSS {rss0} KiB before, peak {peak_rss} KiB with {} silent, {} idle \
         keep-alive and {} half-sent 7 KiB heads from one address (+{} KiB, {:.1} KiB per \
         connection); threads {threads0} before, peak {peak_threads}; slowest real request or \
         test {worst:?}",
        EACH,
        EACH,
        EACH,
        peak_rss - rss0,
        (peak_rss - rss0) as f64 / (3 * EACH) as f64
    );
    assert!(worst < Duration::from_secs(5));
    // Connections are not threads.
    assert!(peak_threads <= threads0 + 4, "{peak_threads} threads");
    assert!(
        peak_rss - rss0 < 128 * 1024,
        "RSS grew by {} KiB",
        peak_rss - rss0
    );
    drop(agent);
}
