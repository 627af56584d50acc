//! Real verbs tests: an in-process fabperf agent and the client on the
//! RDMA device named by `FABPERF_RDMA_DEVICE` (the soft-RoCE guest sets it;
//! `sim/softroce.sh` runs these binaries there). The agent uses
//! `FABPERF_RDMA_PEER_DEVICE` when set (two rxe "nodes"), else the same
//! device. Without `FABPERF_RDMA_DEVICE` every test prints why it skips.
//!
//! Assertions are about correctness (counts, kinds, error texts, the agent
//! surviving), never about speed.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{connect_test, ClientConfig, Limits, ServeCtx, ServeError, TestKind};
use fabperf_rdma::msg::{AcceptInfo, Request, Step};
use fabperf_rdma::select::path_mtu;
use fabperf_rdma::verbs::{open_device, Endpoint, EpConfig, Wc};
use fabperf_rdma::{kinds, run_bw, run_lat, AgentRdmaOpts, BwParams, LatParams, Op, RdmaError};
use fabperf_results::LatencyKind;
use std::net::SocketAddr;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// One test at a time: they share the device and the guest's two vCPUs.
static SERIAL: Mutex<()> = Mutex::new(());

fn device() -> Option<String> {
    match std::env::var("FABPERF_RDMA_DEVICE") {
        Ok(d) if !d.is_empty() => Some(d),
        _ => {
            eprintln!(
                "skipped: FABPERF_RDMA_DEVICE is not set. These tests need an RDMA device: run \
                 them in the soft-RoCE guest (sim/softroce.sh), or on an RDMA host with \
                 FABPERF_RDMA_DEVICE=<device> cargo test -p fabperf-rdma"
            );
            None
        }
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
        group: None,
        token: None,
        timeout: Duration::from_secs(5),
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
fn pollers_run_idle_on_software_devices_and_leave_the_caller_alone() {
    let is_software_device = |d: &str| {
        fabperf_detect::rdma_device_is_software(std::path::Path::new("/"), d) == Some(true)
    };
    use fabperf_rdma::sys::thread_sched_policy;
    use fabperf_rdma::PollPriority;
    let Some(dev) = device() else { return };
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
            recs[0].warnings.iter().all(|w| !w.contains("SCHED_IDLE")),
            "{:?}",
            recs[0].warnings
        );
    }
    // The client measures on a thread of its own: this one is untouched.
    assert_eq!(thread_sched_policy().unwrap(), before);
}

#[test]
fn bandwidth_write_read_send_over_sizes() {
    let Some(dev) = device() else { return };
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in [Op::Write, Op::Read, Op::Send] {
        let p = BwParams {
            sizes: vec![2, 4096, 65536],
            ..bw(&dev, op)
        };
        let recs = run_bw(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(recs.len(), 3, "{op:?}");
        for (r, size) in recs.iter().zip([2u64, 4096, 65536]) {
            assert_eq!(r.size, size);
            assert_eq!(r.test, "rdma-bw");
            assert_eq!(r.op.as_deref(), Some(op.as_str()));
            assert_eq!(r.iterations, Some(200));
            assert_eq!(r.bytes, 200 * size);
            let bw = r.bw_gbps.unwrap();
            assert!(bw > 0.0, "{r:?}");
            assert!(r.bw_peak_gbps.unwrap() >= bw * 0.999, "{r:?}");
            assert!(r.msg_rate_mpps.unwrap() > 0.0);
            assert_eq!(r.device.as_deref(), Some(dev.as_str()));
            assert!(r.mtu.is_some() && r.link_layer.is_some() && r.ib_port.is_some());
            if r.link_layer.as_deref() == Some("Ethernet") {
                assert_eq!(r.gid_type.as_deref(), Some("RoCE v2"), "{r:?}");
                assert!(r.gid_index.is_some());
            }
            assert!(r.cpu_local_pct.is_some() && r.cpu_remote_pct.is_some());
        }
    }
}

#[test]
fn bandwidth_multi_qp_bidir_cq_mod_inline() {
    let Some(dev) = device() else { return };
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in [Op::Send, Op::Write] {
        let p = BwParams {
            qps: 2,
            bidir: true,
            cq_mod: Some(10),
            tx_depth: 32,
            inline: 64,
            sizes: vec![64],
            iterations: 300,
            ..bw(&dev, op)
        };
        let recs = run_bw(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(recs.len(), 3, "total + one row per QP");
        let total = &recs[0];
        assert_eq!(total.stream, None);
        assert_eq!(total.streams, 2);
        assert_eq!(total.direction.as_deref(), Some("bidir"));
        // Both ends sent 300 per QP.
        assert_eq!(total.iterations, Some(2 * 2 * 300), "{total:?}");
        for (q, r) in recs[1..].iter().enumerate() {
            assert_eq!(r.stream, Some(q as u32));
            assert_eq!(r.iterations, Some(2 * 300));
            assert!(r.bw_gbps.unwrap() > 0.0);
        }
    }
}

#[test]
fn bandwidth_duration_mode_excludes_warmup() {
    let Some(dev) = device() else { return };
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let p = BwParams {
        duration: Some(0.5),
        warmup: Some(0.2),
        ..bw(&dev, Op::Write)
    };
    let t0 = std::time::Instant::now();
    let r = &run_bw(a.addr(), &cfg(), &p).unwrap()[0];
    let wall = t0.elapsed().as_secs_f64();
    assert!(r.bytes > 0 && r.bytes & 0xffff == 0, "{r:?}");
    assert_eq!(r.bytes, r.iterations.unwrap() * 65536, "{r:?}");
    // Other warnings (a slow clock on a loaded emulated guest) may be there.
    let whole_run = r.warnings.iter().any(|w| w.contains("whole run"));
    if !whole_run {
        // Between the first and last completion inside the measured window,
        // which opens only after the 0.2 s warm-up: whatever the machine's
        // speed, it is shorter than the whole run less the warm-up.
        assert!(
            r.duration_s > 0.0 && r.duration_s <= wall - 0.2,
            "{r:?} wall {wall}"
        );
    } else {
        // Too few completions in the window: the whole run, said so.
        assert!(r.duration_s >= 0.5, "{r:?}");
    }
}

#[test]
fn latency_send_write_read() {
    let Some(dev) = device() else { return };
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in [Op::Send, Op::Write, Op::Read] {
        let p = LatParams {
            sizes: vec![2, 1024],
            ..lat(&dev, op)
        };
        let recs = run_lat(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(recs.len(), 2);
        for r in &recs {
            let l = r.lat_us.as_ref().expect("latency summary");
            assert_eq!(l.samples, 200, "{op:?}");
            let want = if op == Op::Read {
                LatencyKind::Rtt
            } else {
                LatencyKind::HalfRtt
            };
            assert_eq!(l.kind, want);
            assert!(
                l.min > 0.0 && l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.max,
                "{l:?}"
            );
            assert!(l.stdev >= 0.0);
        }
    }
}

#[test]
fn latency_duration_mode_still_has_percentiles() {
    let Some(dev) = device() else { return };
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let p = LatParams {
        duration: Some(0.5),
        warmup: Some(0.1),
        ..lat(&dev, Op::Write)
    };
    let r = &run_lat(a.addr(), &cfg(), &p).unwrap()[0];
    let l = r.lat_us.as_ref().unwrap();
    assert!(l.samples > 0);
    assert!(l.p99 >= l.p50 && l.p9999 >= l.p999);
    assert_eq!(r.iterations, Some(l.samples));
}

#[test]
fn bad_requests_are_explained() {
    let Some(dev) = device() else { return };
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let e = run_bw(
        a.addr(),
        &cfg(),
        &BwParams {
            device: Some("nosuchdev9".into()),
            ..bw(&dev, Op::Write)
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("nosuchdev9") && e.contains(&dev), "{e}");
    let e = run_bw(
        a.addr(),
        &cfg(),
        &BwParams {
            gid_index: Some(99),
            ..bw(&dev, Op::Write)
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("GID index 99") && e.contains("valid entries"),
        "{e}"
    );
    let e = run_lat(
        a.addr(),
        &cfg(),
        &LatParams {
            mtu: Some(4096),
            ..lat(&dev, Op::Send)
        },
    );
    // Allowed only when both ports run MTU 4096.
    if let Err(e) = e {
        assert!(e.to_string().contains("exceeds the active MTU"), "{e}");
    }
    // The agent's limits.
    let small = agent(
        &dev,
        Limits {
            max_streams: 2,
            max_memory: 1 << 20,
            ..limits()
        },
    );
    let e = run_bw(
        small.addr(),
        &cfg(),
        &BwParams {
            qps: 4,
            ..bw(&dev, Op::Write)
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("limit"), "{e}");
    let e = run_bw(
        small.addr(),
        &cfg(),
        &BwParams {
            sizes: vec![8 << 20],
            ..bw(&dev, Op::Write)
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--max-memory"), "{e}");
    // An agent told to use a GID index that does not exist says so.
    let bad = agent_with(
        kinds(AgentRdmaOpts {
            device: Some(peer_device(&dev)),
            gid_index: Some(99),
            ..Default::default()
        }),
        limits(),
    );
    let e = run_lat(bad.addr(), &cfg(), &lat(&dev, Op::Send))
        .unwrap_err()
        .to_string();
    assert!(e.contains("GID index 99"), "{e}");
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
    ctl.send_test(&Step::Go { size }).unwrap();
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
fn client_that_dies_mid_test_does_not_hang_the_agent() {
    let Some(dev) = device() else { return };
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
fn agent_that_freezes_mid_test_gives_an_error_not_a_hang() {
    let Some(dev) = device() else { return };
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
fn remote_access_error_is_named_in_words() {
    let Some(dev) = device() else { return };
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

/// Child half of `memlock_limit_is_explained`: runs without CAP_IPC_LOCK
/// (dropped by the parent through setpriv) under a 64 KiB memlock limit.
#[test]
fn memlock_child() {
    if std::env::var_os("FABPERF_MEMLOCK_CHILD").is_none() {
        return; // only meaningful when started by memlock_limit_is_explained
    }
    let Some(dev) = device() else { return };
    fabperf_rdma::sys::set_memlock_limit(65536).unwrap();
    let d = open_device(Some(&dev), None, None, None, None).unwrap();
    let e = match Endpoint::new(
        d,
        EpConfig {
            qps: 1,
            slot: 1 << 20,
            tx_depth: 8,
            rx_depth: 0,
            inline: 0,
        },
    ) {
        Ok(_) => {
            panic!("registering 1 MiB under a 64 KiB memlock limit without CAP_IPC_LOCK succeeded")
        }
        Err(e) => e,
    };
    let m = e.to_string();
    assert!(matches!(e, RdmaError::Register(_)), "{m}");
    for want in [
        "RLIMIT_MEMLOCK",
        "65536 bytes",
        "1048576 bytes",
        "ulimit -l",
        "IPC_LOCK",
    ] {
        assert!(m.contains(want), "missing {want}: {m}");
    }
}

#[test]
fn memlock_limit_is_explained() {
    let Some(_dev) = device() else { return };
    if !fabperf_rdma::sys::is_root() {
        eprintln!("skipped: needs root to drop CAP_IPC_LOCK with setpriv");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = match std::process::Command::new("setpriv")
        .args(["--bounding-set=-ipc_lock", "--"])
        .arg(&exe)
        .args([
            "--exact",
            "memlock_child",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("FABPERF_MEMLOCK_CHILD", "1")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipped: setpriv (util-linux) not available: {e}");
            return;
        }
    };
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
fn peer_agent() -> Option<SocketAddr> {
    device()?;
    match std::env::var("FABPERF_AGENT")
        .ok()
        .and_then(|a| a.parse::<SocketAddr>().ok())
    {
        Some(a) => Some(a),
        None => {
            eprintln!(
                "skipped: FABPERF_AGENT (host:port of a fabperf agent on the peer's RDMA \
                 address) is not set; the soft-RoCE guest sets it"
            );
            None
        }
    }
}

#[test]
fn rdma_cm_connects_every_op_and_several_qps() {
    let Some(agent) = peer_agent() else { return };
    let dev = device().unwrap();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for op in [Op::Write, Op::Read, Op::Send] {
        let p = BwParams {
            rdma_cm: true,
            sizes: vec![4096],
            ..bw(&dev, op)
        };
        let recs = run_bw(agent, &cfg(), &p).unwrap_or_else(|e| panic!("{op:?} via rdma_cm: {e}"));
        assert_eq!(recs[0].bytes, 200 * 4096, "{op:?}");
        assert!(recs[0].bw_gbps.unwrap() > 0.0);
    }
    let p = BwParams {
        rdma_cm: true,
        qps: 3,
        bidir: true,
        ..bw(&dev, Op::Send)
    };
    let recs = run_bw(agent, &cfg(), &p).expect("3 QPs bidir via rdma_cm");
    let per_qp = recs.iter().filter(|r| r.stream.is_some()).count();
    assert_eq!(per_qp, 3, "{recs:?}");
    for op in [Op::Send, Op::Write, Op::Read] {
        let l = LatParams {
            rdma_cm: true,
            ..lat(&dev, op)
        };
        let r =
            run_lat(agent, &cfg(), &l).unwrap_or_else(|e| panic!("{op:?} lat via rdma_cm: {e}"));
        assert_eq!(r[0].lat_us.as_ref().unwrap().samples, 200, "{op:?}");
    }
    // The agent keeps serving plain (out-of-band) connections afterwards.
    run_bw(agent, &cfg(), &bw(&dev, Op::Write)).expect("plain after rdma_cm");
}

#[test]
fn rdma_cm_to_a_port_nobody_listens_on_fails_fast_with_the_reason() {
    let Some(agent) = peer_agent() else { return };
    let dev = device().unwrap();
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
        },
    )
    .expect("endpoint");
    let info = ep.info();
    let nobody = SocketAddr::new(agent.ip(), agent.port().wrapping_add(97));
    let t = Instant::now();
    let e =
        match fabperf_rdma::cm::connect_all(&mut ep, nobody, &info, 1024, Duration::from_secs(5)) {
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
