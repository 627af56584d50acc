//! Finding the plan's agents (static addresses, DNS names resolving to
//! many) and asking each for its hello, on a bounded pool of threads.

use crate::cells::{Roster, RosterAgent};
use crate::drive::DRIVE;
use crate::plan::{self, Plan};
use fabperf_proto::ClientConfig;
use serde_json::{json, Value};
use std::net::{SocketAddr, ToSocketAddrs};

/// What an agent's hello says, as JSON for the store.
fn probe(addr: SocketAddr, cfg: &ClientConfig) -> Result<Value, String> {
    let h = fabperf_proto::query_agent(addr, cfg).map_err(|e| e.to_string())?;
    Ok(json!({
        "fabperf_version": h.fabperf_version,
        "auth_required": h.auth_required,
        "tests": h.tests,
        "agent": h.agent,
        "capacity": h.capacity,
    }))
}

fn resolve_all(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let mut v: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving {host}: {}", plan::os_text(&e)))?
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

fn resolve_one(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {}", plan::os_text(&e)))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

/// The node name an agent gives in its hello, when it is a safe name.
pub(super) fn hello_node(hello: &Value) -> Option<String> {
    let n = hello.get("agent")?.get("node")?.as_str()?;
    plan::is_name(n).then(|| n.to_string())
}

/// Most agents asked for their hello at once during discovery.
pub const MAX_PROBE_THREADS: usize = 32;

/// Find every agent of the plan and ask each for its hello.
pub fn discover(
    plan: &Plan,
    client: &ClientConfig,
    warn: &mut dyn FnMut(String),
) -> Result<Roster, String> {
    struct Want {
        name: Option<String>,
        path: String,
        addr: Result<SocketAddr, String>,
        label: String,
    }
    let mut wants = Vec::new();
    for a in &plan.agents {
        match &a.source {
            plan::AgentSource::Static { name, addr } => wants.push(Want {
                name: Some(name.clone()),
                path: a.path.clone(),
                addr: resolve_one(addr),
                label: addr.clone(),
            }),
            plan::AgentSource::Dns { name, port } => match resolve_all(name, *port) {
                Ok(addrs) if addrs.is_empty() => {
                    warn(format!("{name} (path {}) resolves to no address", a.path))
                }
                Ok(addrs) => {
                    for addr in addrs {
                        wants.push(Want {
                            name: None,
                            path: a.path.clone(),
                            addr: Ok(addr),
                            label: name.clone(),
                        })
                    }
                }
                Err(e) => warn(format!("{e} (path {}); its agents are left out", a.path)),
            },
        }
    }
    // Probe concurrently, at most MAX_PROBE_THREADS at once (a name may
    // resolve to hundreds of addresses): dead agents cost one timeout per
    // MAX_PROBE_THREADS of them, not one each.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<Value, String>>>> =
        wants.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..wants.len().min(MAX_PROBE_THREADS) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(w) = wants.get(i) else { break };
                let r = w.addr.clone().and_then(|a| probe(a, client));
                *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    let hellos: Vec<Result<Value, String>> = slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| Err("probe thread panicked".into()))
        })
        .collect();
    let mut roster = Roster::default();
    for (w, hello) in wants.into_iter().zip(hellos) {
        let (hello, reachable) = match hello {
            Ok(h) => (h, true),
            Err(e) => {
                warn(format!(
                    "agent {} ({}, path {}) is unreachable: {e}; its cells will fail",
                    w.name.as_deref().unwrap_or(&w.label),
                    w.addr
                        .as_ref()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|e| e.clone()),
                    w.path
                ));
                (json!({"unreachable": e}), false)
            }
        };
        if reachable
            && hello
                .get("tests")
                .and_then(Value::as_array)
                .is_some_and(|t| !t.iter().any(|x| x == DRIVE))
        {
            warn(format!(
                "agent at {} does not serve `{DRIVE}` (an older fabperf?); its cells will fail",
                w.label
            ));
        }
        let Ok(addr) = w.addr else {
            // A static agent whose name does not resolve: keep it so its
            // cells are planned (and fail), with an unspecified address.
            let name = w.name.expect("only static agents resolve one name");
            roster.insert(RosterAgent {
                name,
                path: w.path,
                addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                test_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                hello,
                reachable: false,
            })?;
            continue;
        };
        let name = w
            .name
            .or_else(|| hello_node(&hello))
            .unwrap_or_else(|| addr.ip().to_string());
        // An agent may advertise another address for tests (its IPoIB or
        // RoCE address behind a Service on the primary network).
        let test_addr = hello
            .get("agent")
            .and_then(|a| a.get("addr"))
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<std::net::IpAddr>().ok())
            .map_or(addr, |ip| SocketAddr::new(ip, addr.port()));
        roster.insert(RosterAgent {
            name,
            path: w.path,
            addr,
            test_addr,
            hello,
            reachable,
        })?;
    }
    Ok(roster)
}
