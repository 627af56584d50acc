//! `fabperf mtu` against an in-process agent on loopback: both directions
//! are measured up to the loopback interface's MTU (no path below it), and
//! a stranger's datagrams are not answered.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_mtu::{discover, MtuKind, Options};
use fabperf_proto::{ClientConfig, Limits};
use std::time::Duration;

fn agent() -> AgentHandle {
    Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(10),
            ..Limits::default()
        },
        kinds: vec![Box::new(MtuKind)],
        quiet: true,
        identity: None,
    })
    .unwrap()
    .spawn()
}

fn cfg() -> ClientConfig {
    ClientConfig {
        group: None,
        token: None,
        timeout: Duration::from_secs(10),
    }
}

#[test]
fn loopback_carries_its_interface_mtu_both_ways() {
    let a = agent();
    let opts = Options {
        icmp: false,
        probe_timeout: Some(Duration::from_millis(500)),
        ..Options::default()
    };
    let rep = discover("loopback", a.addr(), &cfg(), &opts).unwrap();
    let lo = rep
        .interface
        .as_ref()
        .expect("the loopback interface found");
    // The largest UDP datagram is the bound below lo's 65536.
    let bound = (lo.mtu as usize).min(65507 + 28) as u32;
    let f = rep.forward.as_ref().unwrap();
    assert_eq!(f.mtu, bound, "{rep:?}");
    assert_eq!(f.payload, bound - 28);
    assert_eq!(f.limited_by, "sending interface");
    let r = rep.reverse.as_ref().unwrap();
    assert_eq!(r.mtu, bound, "{rep:?}");
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert!(rep.text().contains("forward (UDP, DF)"));
}

#[test]
fn an_agent_that_is_not_there_is_an_error() {
    let a = agent();
    let addr = a.addr();
    drop(a);
    let opts = Options {
        icmp: false,
        ..Options::default()
    };
    assert!(discover("gone", addr, &cfg(), &opts).is_err());
}
