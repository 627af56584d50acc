//! 256 agents behind one DNS name (what a headless Service returns): the
//! answer (about 4 KiB) does not fit the 512 bytes of a DNS answer over UDP
//! without EDNS, so the server sets TC and the resolver must ask again over
//! TCP. The runner's discovery resolves names with the system resolver
//! (getaddrinfo); this test runs it against a DNS server that answers over
//! UDP only what fits, in a network and mount namespace of its own (the
//! test binary run again under `unshare`, /etc/resolv.conf bind-mounted to
//! point at that server), and checks every address arrives and the answer
//! came over TCP. Needs root (namespaces, port 53); as another user the
//! test says so and checks nothing.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const CHILD_ENV: &str = "FABPERF_DNS_MANY_CHILD";
const NAME: &str = "agents.fabperf.test";
const AGENTS: usize = 256;
const PORT: u16 = 7473;

static UDP_TRUNCATED: AtomicUsize = AtomicUsize::new(0);
static TCP_ANSWERS: AtomicUsize = AtomicUsize::new(0);

/// Agent `i`'s address: 10.250.0.1 ... 10.250.1.0 (no route here, so
/// discovery finds every agent unreachable at once).
fn addr(i: usize) -> Ipv4Addr {
    let n = i + 1;
    Ipv4Addr::new(10, 250, (n / 256) as u8, (n % 256) as u8)
}

/// The answer to one query: every agent's A record for NAME, nothing
/// for its other types, NXDOMAIN for other names. With `udp`, an answer
/// longer than 512 bytes is cut to its question with TC set (RFC 1035
/// 4.2.1), as a server answers a query without EDNS.
fn answer(q: &[u8], udp: bool) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    // The question: labels, then type and class.
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let l = *q.get(i)? as usize;
        i += 1;
        if l == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + l)?).to_ascii_lowercase());
        i += l;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let question = &q[12..i + 4];
    let ours = labels.join(".") == NAME;
    let records: Vec<Ipv4Addr> = if ours && qtype == 1 {
        (0..AGENTS).map(addr).collect()
    } else {
        Vec::new()
    };
    let rd = u16::from_be_bytes([q[2], q[3]]) & 0x0100;
    let rcode = if ours { 0 } else { 3 };
    let mut out = Vec::new();
    out.extend_from_slice(&q[0..2]);
    out.extend_from_slice(&(0x8400 | rd | rcode).to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    for a in &records {
        // Name: a pointer to the question's; A, IN, TTL 5, 4 bytes.
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]);
        out.extend_from_slice(&a.octets());
    }
    if udp && out.len() > 512 {
        UDP_TRUNCATED.fetch_add(1, Ordering::SeqCst);
        out.truncate(12 + question.len());
        out[2] |= 0x02; // TC
        out[6] = 0;
        out[7] = 0;
    } else if !udp && !records.is_empty() {
        TCP_ANSWERS.fetch_add(1, Ordering::SeqCst);
    }
    Some(out)
}

fn serve_dns() {
    let udp = UdpSocket::bind("127.0.0.1:53").expect("binding 127.0.0.1:53/udp");
    let tcp = TcpListener::bind("127.0.0.1:53").expect("binding 127.0.0.1:53/tcp");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            if let Some(a) = answer(&buf[..n], true) {
                let _ = udp.send_to(&a, from);
            }
        }
    });
    std::thread::spawn(move || {
        for c in tcp.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                // Length-prefixed messages until the resolver closes.
                loop {
                    let mut len = [0u8; 2];
                    if c.read_exact(&mut len).is_err() {
                        return;
                    }
                    let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                    if c.read_exact(&mut q).is_err() {
                        return;
                    }
                    let Some(a) = answer(&q, false) else { return };
                    let mut msg = (a.len() as u16).to_be_bytes().to_vec();
                    msg.extend_from_slice(&a);
                    if c.write_all(&msg).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

/// The namespaced process: started by the test below; not a test of its own.
#[test]
#[ignore = "run by two_hundred_fifty_six_agents_behind_one_name in its own namespaces"]
fn resolve_in_namespace() {
    assert!(std::env::var(CHILD_ENV).is_ok(), "run by the DNS test");
    serve_dns();
    let plan = fabperf_run::plan::parse(
        &format!(
            "name = \"dns\"\ntimeout = \"1s\"\n[[agents]]\ndns = \"{NAME}\"\nport = {PORT}\n\
             [[tests]]\nkind = \"tcp-lat\"\npattern = \"mesh\"\n"
        ),
        "p.toml",
        std::path::Path::new("/"),
    )
    .unwrap();
    let cfg = fabperf_proto::ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_secs(1),
    };
    let mut warnings = Vec::new();
    let roster = fabperf_run::exec::discover(&plan, &cfg, &mut |w| warnings.push(w)).unwrap();
    let mut got: Vec<_> = roster.all().map(|a| a.addr).collect();
    got.sort();
    got.dedup();
    let want: Vec<_> = (0..AGENTS)
        .map(|i| std::net::SocketAddr::from((addr(i), PORT)))
        .collect();
    assert_eq!(got, want, "warnings: {warnings:?}");
    // Every agent is unreachable here (no route), and said so.
    assert_eq!(warnings.len(), AGENTS, "{warnings:?}");
    let (udp, tcp) = (
        UDP_TRUNCATED.load(Ordering::SeqCst),
        TCP_ANSWERS.load(Ordering::SeqCst),
    );
    assert!(
        udp >= 1 && tcp >= 1,
        "{udp} truncated UDP answers, {tcp} TCP answers"
    );
    println!("{AGENTS} agents resolved: {udp} truncated answer(s) over UDP, {tcp} over TCP");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .map(|u| u == "0")
        })
        .unwrap_or(false)
}

#[test]
fn two_hundred_fifty_six_agents_behind_one_name() {
    if !is_root() {
        eprintln!("skipped: needs root (a network and mount namespace, port 53)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 127.0.0.1\n").unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--net", "--", "sh", "-ec"])
        .arg(
            "ip link set lo up; mount --bind \"$1\" /etc/resolv.conf; \
             mount --bind \"$2\" /etc/hosts; \
             exec \"$3\" --exact resolve_in_namespace --ignored --nocapture",
        )
        .args([
            "sh".as_ref(),
            resolv.as_os_str(),
            hosts.as_os_str(),
            exe.as_os_str(),
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("running unshare (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("256 agents resolved"), "{text}");
    println!("{}", text.lines().find(|l| l.contains("resolved")).unwrap());
}
