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

/// An `mtu` kind that says what a hostile or broken agent would: an
/// interface with escape sequences, an absurd overhead and underlay, and
/// it acknowledges probes up to `ack_up_to` bytes but never sends a
/// datagram back. It records the duration the client asked for.
struct Scripted {
    ack_up_to: usize,
    asked: std::sync::Arc<std::sync::Mutex<Option<f64>>>,
}

impl fabperf_proto::TestKind for Scripted {
    fn name(&self) -> &'static str {
        fabperf_mtu::MTU_KIND
    }

    fn serve(
        &self,
        ctx: &mut fabperf_proto::ServeCtx<'_>,
        params: serde_json::Value,
    ) -> Result<(), fabperf_proto::ServeError> {
        use fabperf_mtu::agent::AcceptInfo;
        use fabperf_mtu::path::{Interface, Overhead, Underlay};
        use fabperf_mtu::wire::{self, Datagram};
        let p: fabperf_mtu::agent::MtuParams = fabperf_proto::decode_params("mtu", params)?;
        *self.asked.lock().unwrap() = Some(p.duration_s);
        // As the real kind: the agent's UDP door gives the port up meanwhile.
        let (sock, _door) = ctx.data.udp_socket(ctx.local()).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let session = 77;
        ctx.ctl.send(&fabperf_proto::Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                session,
                port: ctx.local().port(),
                interface: Some(Interface {
                    name: "eth0".into(),
                    mtu: 9000,
                    kind: "vxlan".into(),
                    overhead: Some(Overhead {
                        bytes: u32::MAX,
                        parts: "\x1b]0;owned\x07\nforged line \u{202e}".into(),
                    }),
                    underlay: Some(Underlay {
                        name: "\x1b[2Jbad".into(),
                        mtu: 1500,
                    }),
                }),
            })
            .unwrap(),
        })?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let up_to = self.ack_up_to;
        let t = std::thread::spawn(move || {
            let mut buf = vec![0u8; 70000];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                if let Some(Datagram::Probe { seq, len, .. }) = wire::parse(&buf[..n]) {
                    if len <= up_to {
                        let _ = sock.send_to(
                            &wire::short(wire::ACK, session, seq, len as u32, None),
                            from,
                        );
                    }
                }
            }
        });
        let r: Result<serde_json::Value, _> = ctx.ctl.recv_test("done");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = t.join();
        r.map(|_| ()).map_err(Into::into)
    }
}

fn scripted(ack_up_to: usize) -> (AgentHandle, std::sync::Arc<std::sync::Mutex<Option<f64>>>) {
    let asked = std::sync::Arc::new(std::sync::Mutex::new(None));
    let a = Agent::bind(AgentConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        token: None,
        insecure: false,
        limits: Limits {
            io_timeout: Duration::from_secs(10),
            ..Limits::default()
        },
        kinds: vec![Box::new(Scripted {
            ack_up_to,
            asked: asked.clone(),
        })],
        quiet: true,
        identity: None,
    })
    .unwrap()
    .spawn();
    (a, asked)
}

#[test]
fn only_the_reverse_failing_blames_the_reverse_and_keeps_the_forward_result() {
    let (a, _) = scripted(usize::MAX);
    let opts = Options {
        icmp: false,
        attempts: 1,
        probe_timeout: Some(Duration::from_millis(100)),
        ..Options::default()
    };
    let rep = discover("hostile", a.addr(), &cfg(), &opts).expect("the forward direction measured");
    assert!(rep.forward.is_some(), "{rep:?}");
    assert!(rep.reverse.is_none(), "{rep:?}");
    let why = rep.skipped.join(" | ");
    assert!(
        why.contains("reverse (UDP from the agent)") && why.contains("on the way back"),
        "{why}"
    );
    assert!(
        !why.contains("lets TCP through but not UDP to port"),
        "{why}"
    );
    // The hostile interface: its absurd overhead and bad underlay dropped,
    // nothing it said reaches the terminal raw.
    let ai = rep
        .agent_interface
        .as_ref()
        .expect("name and MTU are plausible");
    assert!(ai.overhead.is_none(), "{ai:?}");
    assert!(ai.underlay.is_none(), "{ai:?}");
    let text = rep.text();
    assert!(!text.contains("4294967295"), "{text}");
    assert!(
        !text.contains('\x1b') && !text.contains('\u{202e}'),
        "{text:?}"
    );
}

#[test]
fn the_probing_ends_within_the_duration_it_was_given() {
    // Probes above 1000 bytes are lost: a search with long waits would run
    // for tens of seconds.
    let (a, asked) = scripted(1000);
    let opts = Options {
        icmp: false,
        attempts: 3,
        probe_timeout: Some(Duration::from_millis(400)),
        duration: Some(Duration::from_secs(2)),
        ..Options::default()
    };
    let t0 = std::time::Instant::now();
    let e = discover("slow", a.addr(), &cfg(), &opts).unwrap_err();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(e.to_string().contains("duration of 2 s"), "{e}");
    assert_eq!(*asked.lock().unwrap(), Some(2.0), "the agent's test length");
}

#[test]
fn hostile_interface_text_is_escaped_when_printed() {
    use fabperf_mtu::path::{Interface, Overhead};
    let mut rep = fabperf_mtu::PathReport {
        target: "x\x1b[31m".into(),
        addr: "127.0.0.1:5301".parse().unwrap(),
        local: None,
        interface: Some(Interface {
            name: "eth\n0".into(),
            mtu: 1500,
            kind: "vxlan".into(),
            overhead: Some(Overhead {
                bytes: 50,
                parts: "a\x07\u{202e}".into(),
            }),
            underlay: None,
        }),
        agent_interface: None,
        forward: None,
        reverse: None,
        icmp: None,
        skipped: vec!["ICMP\x1b[2J".into()],
        mismatches: vec![],
    };
    rep.judge();
    let t = rep.text();
    assert!(
        !t.contains('\x1b') && !t.contains('\x07') && !t.contains('\u{202e}'),
        "{t:?}"
    );
    assert!(t.contains("eth\\n0"), "{t}");
}
