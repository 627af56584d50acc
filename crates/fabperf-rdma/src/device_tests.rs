//! Real verbs tests that need the crate's internals (endpoints, raw posts,
//! the sched policy helpers): `#[ignore]`d, run by `sim/softroce.sh` in the
//! soft-RoCE guest with `--include-ignored` (see `tests/softroce.rs` for the
//! public-API ones and the environment they read).

use crate::msg::{AcceptInfo, Request, Step};
use crate::select::path_mtu;
use crate::verbs::{open_device, Endpoint, EpConfig, Wc};
use crate::{kinds, run_bw, run_lat, AgentRdmaOpts, BwParams, LatParams, Op, RdmaError};
use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{connect_test, ClientConfig, Limits, ServeCtx, ServeError, TestKind};
use std::net::SocketAddr;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

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

fn limits() -> Limits {
    Limits {
        io_timeout: Duration::from_secs(5),
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
        timeout: Duration::from_secs(5),
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

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn pollers_run_idle_on_software_devices_and_leave_the_caller_alone() {
    use crate::sys::thread_sched_policy;
    use crate::PollPriority;
    let is_software_device = |d: &str| {
        fabperf_detect::rdma_device_is_software(std::path::Path::new("/"), d) == Some(true)
    };
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (mine, theirs) = (
        is_software_device(&dev),
        is_software_device(&peer_device(&dev)),
    );
    if dev.starts_with("rxe") || dev.starts_with("siw") {
        assert!(
            mine,
            "{dev} is a software device: no `device` link in /sys/class/infiniband/{dev}"
        );
    }
    let label = |idle: bool| Some(if idle { "idle" } else { "normal" });
    let a = agent(&dev, limits());
    let before = thread_sched_policy().unwrap();
    let auto = run_lat(a.addr(), &cfg(), &lat(&dev, Op::Send)).expect("send latency, auto");
    assert_eq!(auto[0].poll_priority_local.as_deref(), label(mine));
    assert_eq!(auto[0].poll_priority_remote.as_deref(), label(theirs));
    for (prio, idle) in [(PollPriority::Normal, false), (PollPriority::Idle, true)] {
        let p = BwParams {
            poll_priority: prio,
            bidir: true,
            ..bw(&dev, Op::Send)
        };
        let recs = run_bw(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{prio:?}: {e}"));
        assert_eq!(
            recs[0].poll_priority_local.as_deref(),
            label(idle),
            "{prio:?}"
        );
        assert_eq!(
            recs[0].poll_priority_remote.as_deref(),
            label(idle),
            "{prio:?}"
        );
        assert!(
            !recs[0].has_warning("poller-priority-refused"),
            "{:?}",
            recs[0].warnings
        );
    }
    // The client measures on a thread of its own: this one is untouched.
    assert_eq!(thread_sched_policy().unwrap(), before);
}

/// Set up a real endpoint against `addr` and stop after the go-ahead.
fn half_client(
    addr: SocketAddr,
    dev: &str,
    test: &str,
    params: serde_json::Value,
) -> (fabperf_proto::Control, Endpoint, AcceptInfo) {
    let d = open_device(Some(dev), None, None, None, None).unwrap();
    let mut ep = Endpoint::new(
        d,
        EpConfig {
            qps: 1,
            slot: 65536,
            tx_depth: 64,
            rx_depth: 64,
            inline: 0,
            sl: 0,
            tclass: 0,
        },
    )
    .unwrap();
    let req = serde_json::to_value(Request {
        params,
        client: ep.info(),
    })
    .unwrap();
    let (ctl, info) = connect_test(addr, &cfg(), test, req).unwrap();
    let acc: AcceptInfo = serde_json::from_value(info).unwrap();
    ep.connect(&acc.agent, acc.path_mtu).unwrap();
    (ctl, ep, acc)
}

fn go(ctl: &mut fabperf_proto::Control, size: u64) {
    ctl.send_test(&Step::Go {
        size,
        start_in_s: None,
        progress: false,
    })
    .unwrap();
    loop {
        match ctl.recv_test::<Step>("go ack").unwrap() {
            Step::GoAck => return,
            Step::Progress | Step::SideDone => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Retry while the agent still finishes the previous (failed) test.
fn eventually_serves(addr: SocketAddr, dev: &str) {
    let t = Instant::now();
    loop {
        match run_lat(addr, &cfg(), &lat(dev, Op::Send)) {
            Ok(r) => {
                assert_eq!(r[0].lat_us.as_ref().unwrap().samples, 200);
                return;
            }
            Err(e) if e.to_string().contains("busy") && t.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("the agent did not keep serving: {e}"),
        }
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn client_that_dies_mid_test_does_not_hang_the_agent() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in ["write", "send"] {
        let params = serde_json::json!({"op": op, "sizes": [64]});
        let (mut ctl, ep, _) = half_client(a.addr(), &dev, "rdma-lat", params);
        go(&mut ctl, 64);
        // Vanish: QPs destroyed, control connection closed, no goodbye.
        drop(ep);
        drop(ctl);
        eventually_serves(a.addr(), &dev);
    }
}

/// An agent kind that sets up correctly, says go, then stops answering
/// (its QPs are destroyed) while keeping the control connection open, like
/// a host that froze.
struct FrozenAgent {
    dev: String,
    release: Mutex<mpsc::Receiver<()>>,
}

impl TestKind for FrozenAgent {
    fn name(&self) -> &'static str {
        "rdma-lat"
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let req: Request<LatParams> = serde_json::from_value(params).unwrap();
        let d = open_device(Some(&self.dev), None, None, None, None).unwrap();
        let mut ep = Endpoint::new(
            d,
            EpConfig {
                qps: 1,
                slot: 65536,
                tx_depth: 64,
                rx_depth: 64,
                inline: 0,
                sl: 0,
                tclass: 0,
            },
        )
        .unwrap();
        ep.post_recvs(0, 64).unwrap();
        let mtu = path_mtu(ep.dev.port.active_mtu, req.client.active_mtu, None).unwrap();
        ep.connect(&req.client, mtu).unwrap();
        let info = serde_json::to_value(AcceptInfo {
            agent: ep.info(),
            path_mtu: mtu,
            poll_idle: false,
            poll_warning: None,
        })
        .unwrap();
        ctx.ctl.send(&fabperf_proto::Msg::Accept { info })?;
        let _ = ctx.ctl.recv_test::<Step>("go")?;
        ctx.ctl.send_test(&Step::GoAck)?;
        drop(ep);
        let _ = self
            .release
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(60));
        Err(ServeError::failed("frozen agent released"))
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn agent_that_freezes_mid_test_gives_an_error_not_a_hang() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for op in [Op::Write, Op::Send] {
        let (tx, rx) = mpsc::channel();
        let a = agent_with(
            vec![Box::new(FrozenAgent {
                dev: peer_device(&dev),
                release: Mutex::new(rx),
            })],
            limits(),
        );
        let e = run_lat(a.addr(), &cfg(), &lat(&dev, op)).unwrap_err();
        let m = e.to_string();
        assert!(
            matches!(e, RdmaError::Stalled(_) | RdmaError::Completion(_)),
            "{op:?}: {m}"
        );
        assert!(
            m.contains("died")
                || m.contains("stalled")
                || m.contains("Retry")
                || m.contains("retry"),
            "{op:?}: {m}"
        );
        let _ = tx.send(());
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn remote_access_error_is_named_in_words() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let params = serde_json::json!({"op": "write", "sizes": [64], "iterations": 1});
    let (mut ctl, mut ep, acc) = half_client(a.addr(), &dev, "rdma-bw", params);
    // Aim the write at the agent's QP with a wrong memory key.
    let mut wrong = acc.agent.clone();
    wrong.dst_rkey ^= 0x00ff_ff00;
    go(&mut ctl, 64);
    ep.set_remote_buffers(&wrong);
    ep.post(0, Op::Write, 1, 64, false).unwrap();
    let t = Instant::now();
    let mut wcs: Vec<Wc> = Vec::new();
    let wc = loop {
        if ep.poll(&mut wcs).unwrap() > 0 {
            break wcs[0];
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no completion");
    };
    assert_ne!(wc.status, 0, "a write with a wrong rkey must fail");
    let m = ep.completion_error(&wc, "write").to_string();
    assert!(m.to_lowercase().contains("remote access"), "{m}");
    drop(ep);
    drop(ctl);
    eventually_serves(a.addr(), &dev);
}

/// Teardown reports nothing when all goes well, and twice is harmless.
#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn endpoint_teardown_reports_no_failure() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let params = serde_json::json!({"op": "write", "sizes": [64], "iterations": 1});
    let (ctl, mut ep, _) = half_client(a.addr(), &dev, "rdma-bw", params);
    assert_eq!(
        ep.qp_av(0).unwrap(),
        (0, 0),
        "sl and traffic class asked for"
    );
    assert_eq!(ep.close(), Vec::<String>::new());
    assert_eq!(ep.close(), Vec::<String>::new());
    drop(ep);
    drop(ctl);
    eventually_serves(a.addr(), &dev);
}

/// The memlock message, from a child process of this test binary that runs
/// without CAP_IPC_LOCK (dropped through setpriv) under a 64 KiB limit.
#[test]
#[ignore = "needs an RDMA device and root (run in the soft-RoCE guest)"]
fn memlock_limit_is_explained() {
    let dev = device();
    if std::env::var_os("FABPERF_MEMLOCK_CHILD").is_some() {
        crate::sys::set_memlock_limit(65536).unwrap();
        let d = open_device(Some(&dev), None, None, None, None).unwrap();
        let e = match Endpoint::new(
            d,
            EpConfig {
                qps: 1,
                slot: 1 << 20,
                tx_depth: 8,
                rx_depth: 0,
                inline: 0,
                sl: 0,
                tclass: 0,
            },
        ) {
            Ok(_) => panic!(
                "registering 1 MiB under a 64 KiB memlock limit without CAP_IPC_LOCK succeeded"
            ),
            Err(e) => e,
        };
        let m = e.to_string();
        assert!(matches!(e, RdmaError::Register(_)), "{m}");
        for want in [
            "RLIMIT_MEMLOCK",
            "65536 bytes",
            "source buffer (1048576 bytes)",
            "ulimit -l",
            "IPC_LOCK",
        ] {
            assert!(m.contains(want), "missing {want}: {m}");
        }
        return;
    }
    assert!(
        crate::sys::is_root(),
        "needs root to drop CAP_IPC_LOCK with setpriv"
    );
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set=-ipc_lock", "--"])
        .arg(&exe)
        .args([
            "--exact",
            "device_tests::memlock_limit_is_explained",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("FABPERF_MEMLOCK_CHILD", "1")
        .output()
        .expect("setpriv (util-linux) runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "child did not run:\n{text}");
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

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn rdma_cm_to_a_port_nobody_listens_on_fails_fast_with_the_reason() {
    let agent = peer_agent();
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let d = open_device(Some(&dev), None, None, None, None).expect("device");
    let mut ep = Endpoint::new(
        d,
        EpConfig {
            qps: 1,
            slot: 4096,
            tx_depth: 16,
            rx_depth: 0,
            inline: 0,
            sl: 0,
            tclass: 0,
        },
    )
    .expect("endpoint");
    let info = ep.info();
    let nobody = SocketAddr::new(agent.ip(), agent.port().wrapping_add(97));
    let t = Instant::now();
    let e = match crate::cm::connect_all(&mut ep, nobody, &info, 1024, Duration::from_secs(5)) {
        Ok(_) => panic!("connected to {nobody} where nothing listens"),
        Err(e) => e.to_string(),
    };
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        e.contains("rdma_cm")
            && (e.contains("Rejected") || e.contains("did not answer") || e.contains("no ")),
        "{e}"
    );
}
