//! In-process agents on loopback addresses for the runner's tests.

#![allow(dead_code)]

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{Limits, TestKind};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `n` agents on 127.0.0.1..=n, one port number for all (as on real nodes).
pub struct Agents {
    pub handles: Vec<AgentHandle>,
    pub port: u16,
    /// The agents' tuning state, one directory each (they may change
    /// nothing: loopback agents share the host's namespace, and with one
    /// state directory its lock would let only one of them tune).
    pub state: tempfile::TempDir,
}

fn kinds(token: Option<Vec<u8>>, state: &Path) -> Vec<Box<dyn TestKind>> {
    let mut k = fabperf_sock::kinds();
    k.push(Box::new(fabperf_run::DriveKind::new(
        token,
        Duration::from_secs(5),
    )));
    k.push(Box::new(fabperf_tune::TuneKind {
        tuner: std::sync::Arc::new(fabperf_tune::Tuner::new(
            state.to_path_buf(),
            fabperf_tune::Allow::default(),
        )),
        log: std::sync::Arc::new(|_: &str| {}),
    }));
    k
}

pub fn start(n: usize, token: Option<&[u8]>) -> Agents {
    start_with_group(n, token, None)
}

/// As [`start`], every agent admitting at most `group` tests of one group.
pub fn start_with_group(n: usize, token: Option<&[u8]>, group: Option<u32>) -> Agents {
    'retry: for _ in 0..20 {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let mut handles = Vec::new();
        let state = tempfile::tempdir().unwrap();
        for i in 1..=n {
            let bind: SocketAddr = format!("127.0.0.{i}:{port}").parse().unwrap();
            let mut agent = match Agent::bind(AgentConfig {
                bind,
                token: token.map(<[u8]>::to_vec),
                insecure: false,
                limits: Limits {
                    io_timeout: Duration::from_secs(5),
                    ..Limits::default()
                },
                kinds: kinds(
                    token.map(<[u8]>::to_vec),
                    &state.path().join(format!("n{i}")),
                ),
                quiet: true,
                identity: Some(fabperf_proto::AgentIdentity {
                    addr: None,
                    node: format!("n{i}"),
                    path: "host".into(),
                    inventory: None,
                }),
            }) {
                Ok(a) => a,
                Err(_) => continue 'retry,
            };
            if let Some(g) = group {
                agent.limit_group(g).unwrap();
            }
            handles.push(agent.spawn());
        }
        return Agents {
            handles,
            port,
            state,
        };
    }
    panic!("no free port for the test agents");
}

/// (Re)start agent `i` (node n`i` on 127.0.0.`i`) on `port`, e.g. after
/// shutting its handle down.
pub fn start_one(agents: &Agents, i: usize) -> AgentHandle {
    let bind: SocketAddr = format!("127.0.0.{i}:{}", agents.port).parse().unwrap();
    Agent::bind(AgentConfig {
        bind,
        token: None,
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(5),
            ..Limits::default()
        },
        kinds: kinds(None, &agents.state.path().join(format!("n{i}"))),
        quiet: true,
        identity: Some(fabperf_proto::AgentIdentity {
            addr: None,
            node: format!("n{i}"),
            path: "host".into(),
            inventory: None,
        }),
    })
    .unwrap()
    .spawn()
}

/// A plan with `n` static agents named n1.. on 127.0.0.1.. and the given
/// tests (TOML text).
pub fn plan(dir: &Path, name: &str, port: u16, n: usize, tests: &str) -> PathBuf {
    let mut t =
        format!("name = \"{name}\"\ntimeout = \"5s\"\nretries = 1\nretry_delay = \"200ms\"\n");
    for i in 1..=n {
        t.push_str(&format!(
            "[[agents]]\nname = \"n{i}\"\naddr = \"127.0.0.{i}:{port}\"\n"
        ));
    }
    t.push_str(tests);
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, t).unwrap();
    p
}

pub fn opts(plan: &Path, db: &Path) -> fabperf_run::RunOptions {
    fabperf_run::RunOptions {
        plan: plan.to_path_buf(),
        db: db.to_path_buf(),
        retry_failed: false,
        new_run: false,
        run_id: None,
        dry_run: false,
        progress: fabperf_run::exec::ProgressMode::Quiet,
        token: None,
        lease_wait: std::time::Duration::ZERO,
    }
}
