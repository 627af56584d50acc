//! The RDMA device tests: real verbs on the device named by
//! `FABPERF_RDMA_DEVICE`, against an in-process fabperf agent on
//! `FABPERF_RDMA_PEER_DEVICE` (two rxe "nodes"; else the same device).
//! `#[ignore]`d, so `cargo test` on a host without RDMA reports them as
//! ignored; `sim/softroce.sh` runs them in the soft-RoCE guest with
//! `--include-ignored`, where every one must run. Inside the crate, so they
//! reach the internals too (endpoints, raw posts, the sched policy helpers).
//!
//! - `measurements`: what the tests measure and record, op by op, in every mode.
//! - `failures`: bad requests, dying or frozen peers, and errors named in words.
//!
//! Assertions are about correctness (counts, kinds, error texts, every
//! record self-consistent, the agent surviving), never about speed.

mod failures;
mod measurements;

use crate::{kinds, AgentRdmaOpts, BwParams, LatParams, Op};
use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{ClientConfig, Limits, TestKind};
use fabperf_results::{CounterDelta, CounterSource, Record};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

/// One test at a time: they share the device and the guest's two vCPUs.
static SERIAL: Mutex<()> = Mutex::new(());

/// The RDMA device to test on. These tests are `#[ignore]`d: whoever runs
/// them (`--ignored`) says there is a device, so a missing one fails.
fn device() -> String {
    match std::env::var("FABPERF_RDMA_DEVICE") {
        Ok(d) if !d.is_empty() => d,
        _ => panic!(
            "FABPERF_RDMA_DEVICE is not set. These tests need an RDMA device: run them in the \
             soft-RoCE guest (sim/softroce.sh), or on an RDMA host with \
             FABPERF_RDMA_DEVICE=<device> cargo test -p fabperf-rdma -- --ignored"
        ),
    }
}

fn peer_device(dev: &str) -> String {
    std::env::var("FABPERF_RDMA_PEER_DEVICE")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| dev.to_string())
}

/// The client's and the in-process agent's timeout. Generous: in the
/// soft-RoCE guest under TCG on a loaded host (load 14 on 2 cores), setting
/// an endpoint up has taken more than 5 s ("timed out after 5.0 s waiting
/// for the agent's answer to start"); these tests check correctness, never
/// speed. The tests of a dead or frozen peer wait this long once per op.
const TIMEOUT: Duration = Duration::from_secs(15);

fn limits() -> Limits {
    Limits {
        io_timeout: TIMEOUT,
        ..Limits::default()
    }
}

fn agent_with(kinds: Vec<Box<dyn TestKind>>, limits: Limits) -> AgentHandle {
    Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits,
        kinds,
        quiet: true,
        identity: None,
    })
    .expect("agent binds")
    .spawn()
}

fn agent(dev: &str, limits: Limits) -> AgentHandle {
    agent_with(
        kinds(AgentRdmaOpts {
            device: Some(peer_device(dev)),
            ..Default::default()
        }),
        limits,
    )
}

fn cfg() -> ClientConfig {
    ClientConfig {
        token: None,
        timeout: TIMEOUT,
        group: None,
    }
}

fn bw(dev: &str, op: Op) -> BwParams {
    BwParams {
        op,
        device: Some(dev.to_string()),
        iterations: 200,
        ..Default::default()
    }
}

fn lat(dev: &str, op: Op) -> LatParams {
    LatParams {
        op,
        device: Some(dev.to_string()),
        iterations: 200,
        ..Default::default()
    }
}

/// Every record obeys the record rules (`Record::check`).
fn consistent(recs: &[Record]) {
    for r in recs {
        let bad = r.check();
        assert!(bad.is_empty(), "{bad:?} in {r:?}");
    }
}

/// Sum of the `rdma_port` counter `name` over an end's groups.
fn port_delta(groups: &[CounterDelta], name: &str) -> u64 {
    groups
        .iter()
        .filter(|g| g.source == CounterSource::RdmaPort)
        .filter_map(|g| g.deltas.get(name))
        .sum()
}

/// The record explains itself: both ends' placement on their RDMA port, and
/// the IB port counters that moved over the measured interval (the client
/// sent packets, the agent received them; an agent that cannot read its
/// port's counters must say so).
fn explained(r: &Record, dev: &str) {
    let pl = r.placement_local.as_ref().expect("the client's placement");
    let port = pl.rdma_port.as_deref().unwrap_or_default();
    assert!(port.starts_with(&format!("{dev} port ")), "{pl:?}");
    let pr = r.placement_remote.as_ref().expect("the agent's placement");
    assert!(pr.rdma_port.is_some(), "{pr:?}");
    assert_eq!(pl.cpu, "auto");
    let c = r.counters.as_ref().expect("the record carries counters");
    assert!(
        port_delta(&c.local, "port_xmit_packets") > 0,
        "client sent nothing by its counters: {c:?}"
    );
    assert!(
        port_delta(&c.remote, "port_rcv_packets") > 0 || !c.remote_missing.is_empty(),
        "agent received nothing by its counters: {c:?}"
    );
}

/// The agent serving in the peer node (`FABPERF_AGENT`, host:port): the
/// connection manager resolves real addresses, so `--rdma-cm` needs an agent
/// on the peer's RDMA address, not the in-process agent on loopback.
fn peer_agent() -> SocketAddr {
    match std::env::var("FABPERF_AGENT")
        .ok()
        .and_then(|a| a.parse::<SocketAddr>().ok())
    {
        Some(a) => a,
        None => panic!(
            "FABPERF_AGENT (host:port of a fabperf agent on the peer's RDMA address) is not set; \
             the soft-RoCE guest sets it"
        ),
    }
}
