//! What goes wrong, and how it is told: bad requests and the agent's
//! limits, GPU memory without a GPU, a client that dies and an agent that
//! freezes mid-test, a prepared test called off or whose agent went away
//! before its start, a remote access error, the memlock limit, rdma_cm to
//! a port nobody listens on; and a clean teardown that reports nothing.

use super::*;
use crate::msg::{AcceptInfo, Request, Step};
use crate::select::path_mtu;
use crate::verbs::{open_device, Endpoint, EpConfig, Wc};
use crate::{run_bw, run_lat, RdmaError};
use fabperf_proto::{connect_test, ServeCtx, ServeError};
use std::sync::mpsc;
use std::time::Instant;

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn bad_requests_are_explained() {
    let dev = device();
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

/// GPU memory where there is no GPU (the soft-RoCE guest has no NVIDIA driver): the client
/// fails before connecting when its own end asks for it, the agent refuses with the same reason
/// when its end does, and keeps serving host-memory tests afterwards. (GPU memory itself is
/// tested on a GPU node by hw-tests/gpu.sh.)
#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn gpu_memory_without_a_gpu_is_explained() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if std::path::Path::new("/sys/module/nvidia").exists() {
        eprintln!("skipped: this host has the NVIDIA driver (hw-tests/gpu.sh covers GPU memory)");
        return;
    }
    let a = agent(&dev, limits());
    let e = run_bw(
        a.addr(),
        &cfg(),
        &BwParams {
            mem: "cuda".parse().unwrap(),
            ..bw(&dev, Op::Write)
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("CUDA driver library libcuda.so.1"), "{e}");
    let e = run_lat(
        a.addr(),
        &cfg(),
        &LatParams {
            remote_mem: Some("cuda:0".parse().unwrap()),
            ..lat(&dev, Op::Send)
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("agent") && e.contains("CUDA driver library libcuda.so.1"),
        "{e}"
    );
    // Host memory still works on both ends (once the agent has finished the refused test),
    // and says nothing about GPUs.
    let t = Instant::now();
    let recs = loop {
        match run_bw(a.addr(), &cfg(), &bw(&dev, Op::Write)) {
            Ok(r) => break r,
            Err(e) if e.to_string().contains("busy") && t.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("the agent did not keep serving after refusing GPU memory: {e}"),
        }
    };
    consistent(&recs);
    for r in &recs {
        for p in [&r.placement_local, &r.placement_remote]
            .into_iter()
            .flatten()
        {
            assert!(p.gpu.is_none(), "{p:?}");
        }
        assert!(!r.local.as_deref().unwrap_or("").contains("GPU"));
    }
}

/// An endpoint on `dev` with `qps` queue pairs of 64 KiB slots, for the
/// hand-driven clients and fake agents below.
fn small_endpoint(dev: &str, qps: u32) -> Endpoint {
    let d = open_device(Some(dev), None, None, None, None).unwrap();
    Endpoint::new(
        d,
        EpConfig {
            qps,
            slot: 65536,
            tx_depth: 64,
            rx_depth: 64,
            inline: 0,
            sl: 0,
            tclass: 0,
        },
    )
    .unwrap()
}

/// Set up a real endpoint against `addr` and stop after the go-ahead.
fn half_client(
    addr: SocketAddr,
    dev: &str,
    test: &str,
    params: serde_json::Value,
) -> (fabperf_proto::Control, Endpoint, AcceptInfo) {
    let mut ep = small_endpoint(dev, 1);
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

/// A fake agent's side of a set-up: an endpoint of `qps` QPs on `dev`
/// (`recvs` receives posted on QP 0 first), connected to the client's, and
/// the `Accept` sent; the endpoint is the caller's to keep or drop.
fn accept_connected(
    ctx: &mut ServeCtx<'_>,
    dev: &str,
    client: &crate::msg::EndpointInfo,
    qps: u32,
    recvs: u32,
) -> Result<Endpoint, ServeError> {
    let mut ep = small_endpoint(dev, qps);
    if recvs > 0 {
        ep.post_recvs(0, recvs).unwrap();
    }
    let mtu = path_mtu(ep.dev.port.active_mtu, client.active_mtu, None).unwrap();
    ep.connect(client, mtu).unwrap();
    let info = serde_json::to_value(AcceptInfo {
        agent: ep.info(),
        path_mtu: mtu,
        poll_idle: false,
        poll_warning: None,
    })
    .unwrap();
    ctx.ctl.send(&fabperf_proto::Msg::Accept { info })?;
    Ok(ep)
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
        let ep = accept_connected(ctx, &self.dev, &req.client, 1, 64)?;
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
            "device_tests::failures::memlock_limit_is_explained",
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

/// An agent kind that sets a test up (its QP connected) and then, before
/// the client's first step, goes away: it fails and closes the connection
/// (`freeze` false), or destroys its QP and stops answering with the
/// connection open, like a host that froze.
struct GoneAfterSetup {
    name: &'static str,
    dev: String,
    freeze: bool,
    release: Mutex<mpsc::Receiver<()>>,
}

impl TestKind for GoneAfterSetup {
    fn name(&self) -> &'static str {
        self.name
    }
    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let req: Request<serde_json::Value> = serde_json::from_value(params).unwrap();
        let ep = accept_connected(ctx, &self.dev, &req.client, req.client.qps.len() as u32, 0)?;
        drop(ep);
        if self.freeze {
            let _ = self
                .release
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(60));
        }
        Err(ServeError::failed("the agent went away after the set-up"))
    }
}

/// Between a prepared test's set-up and its start: called off (dropped),
/// the agent is told and serves the next test; an agent that went away
/// meanwhile (failed, or frozen with the connection open) makes the run
/// fail with the reason, within the timeout, never hang.
#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn prepared_test_called_off_or_whose_agent_went_away() {
    use crate::{prepare_bw, prepare_lat};
    use fabperf_proto::Start;
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    drop(prepare_lat(a.addr(), &cfg(), &lat(&dev, Op::Send)).unwrap());
    eventually_serves(a.addr(), &dev);
    drop(prepare_bw(a.addr(), &cfg(), &bw(&dev, Op::Write)).unwrap());
    eventually_serves(a.addr(), &dev);
    for (name, freeze) in [
        ("rdma-lat", false),
        ("rdma-lat", true),
        ("rdma-bw", false),
        ("rdma-bw", true),
    ] {
        let (tx, rx) = mpsc::channel();
        let gone = agent_with(
            vec![Box::new(GoneAfterSetup {
                name,
                dev: peer_device(&dev),
                freeze,
                release: Mutex::new(rx),
            })],
            limits(),
        );
        let t = Instant::now();
        let r = if name == "rdma-lat" {
            prepare_lat(gone.addr(), &cfg(), &lat(&dev, Op::Send))
                .and_then(|p| p.run(Start::after(0.2, true)))
        } else {
            prepare_bw(gone.addr(), &cfg(), &bw(&dev, Op::Write))
                .and_then(|p| p.run(Start::after(0.2, true)))
        };
        let e = match r {
            Ok(recs) => panic!("{name} (freeze {freeze}): records from a gone agent: {recs:?}"),
            Err(e) => e,
        };
        let m = e.to_string();
        assert!(
            t.elapsed() < TIMEOUT * 2 + Duration::from_secs(10),
            "{name} (freeze {freeze}): {m} after {:?}",
            t.elapsed()
        );
        if freeze {
            assert!(
                matches!(
                    e,
                    RdmaError::Proto(fabperf_proto::ProtoError::Timeout { .. })
                ),
                "{name} (freeze): {m}"
            );
        } else {
            // The agent's reason, or (its frame not read) the closed connection.
            let lost = matches!(e, RdmaError::Proto(ref p) if p.is_connection_lost());
            assert!(
                m.contains("went away after the set-up") || lost,
                "{name}: {m}"
            );
        }
        let _ = tx.send(());
    }
}
