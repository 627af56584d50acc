//! Real verbs tests through the public API: an in-process fabperf agent and
//! the client on the RDMA device named by `FABPERF_RDMA_DEVICE` (the
//! soft-RoCE guest sets it; `sim/softroce.sh` runs these binaries there with
//! `--include-ignored`). The agent uses `FABPERF_RDMA_PEER_DEVICE` when set
//! (two rxe "nodes"), else the same device. Without a device, `cargo test`
//! reports them as ignored.
//!
//! Assertions are about correctness (counts, kinds, error texts, every
//! record self-consistent, the agent surviving), never about speed. Tests
//! that need the crate's internals are in `src/device_tests.rs`.

use fabperf_agent::{Agent, AgentConfig, AgentHandle};
use fabperf_proto::{ClientConfig, Limits, TestKind};
use fabperf_rdma::{kinds, run_bw, run_lat, AgentRdmaOpts, BwParams, LatParams, Op};
use fabperf_results::{CounterDelta, CounterSource, LatencyKind, Record};
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

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn bandwidth_write_read_send_over_sizes() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in [Op::Write, Op::Read, Op::Send] {
        let p = BwParams {
            sizes: vec![2, 4096, 65536],
            ..bw(&dev, op)
        };
        let recs = run_bw(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        consistent(&recs);
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
            explained(r, &dev);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn bandwidth_multi_qp_bidir_cq_mod_inline() {
    let dev = device();
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
        consistent(&recs);
        assert_eq!(recs.len(), 5, "total, two directions, one row per QP");
        let total = &recs[0];
        assert_eq!(total.stream, None);
        assert_eq!(total.streams, 2);
        assert_eq!(total.direction.as_deref(), Some("bidir"));
        // Both ends sent 300 per QP.
        assert_eq!(total.iterations, Some(2 * 2 * 300), "{total:?}");
        // No peak on the total: the two ends' peaks are not simultaneous.
        assert_eq!(total.bw_peak_gbps, None);
        let dirs: Vec<_> = recs[1..3]
            .iter()
            .map(|r| (r.direction.as_deref(), r.stream, r.iterations))
            .collect();
        assert_eq!(
            dirs,
            vec![
                (Some("forward"), None, Some(600)),
                (Some("reverse"), None, Some(600))
            ]
        );
        // Each direction has its own perftest peak.
        assert!(recs[1..3].iter().all(|r| r.bw_peak_gbps.is_some()));
        for (q, r) in recs[3..].iter().enumerate() {
            assert_eq!(r.stream, Some(q as u32));
            assert_eq!(r.iterations, Some(2 * 300));
            assert!(r.bw_gbps.unwrap() > 0.0);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn bandwidth_duration_mode_excludes_warmup() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let p = BwParams {
        duration: Some(0.5),
        warmup: Some(0.2),
        ..bw(&dev, Op::Write)
    };
    let t0 = std::time::Instant::now();
    let recs = run_bw(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let wall = t0.elapsed().as_secs_f64();
    // perftest computes no peak in duration mode; neither does fabperf.
    assert_eq!(r.bw_peak_gbps, None);
    assert!(r.bytes > 0 && r.bytes & 0xffff == 0, "{r:?}");
    assert_eq!(r.bytes, r.iterations.unwrap() * 65536, "{r:?}");
    // Other warnings (a slow clock on a loaded emulated guest) may be there.
    let whole_run = r.has_warning("window-too-few-completions");
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
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn latency_send_write_read() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in [Op::Send, Op::Write, Op::Read] {
        let p = LatParams {
            sizes: vec![2, 1024],
            ..lat(&dev, op)
        };
        let recs = run_lat(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        consistent(&recs);
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
            explained(r, &dev);
        }
    }
}

#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn latency_duration_mode_still_has_percentiles() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    let p = LatParams {
        duration: Some(0.5),
        warmup: Some(0.1),
        ..lat(&dev, Op::Write)
    };
    let recs = run_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    let r = &recs[0];
    let l = r.lat_us.as_ref().unwrap();
    assert!(l.samples > 0);
    assert!(l.p99 >= l.p50 && l.p9999 >= l.p999);
    assert_eq!(r.iterations, Some(l.samples));
}

/// Warm-up iterations run before the measured ones and are not counted;
/// the records say which service level and traffic class the QPs used
/// (read back from the device), and the host CPU of both ends.
#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn warmup_iterations_sl_tclass_and_host_cpu() {
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    for op in [Op::Write, Op::Send] {
        let p = BwParams {
            warmup_iterations: 150,
            cq_mod: Some(7),
            sizes: vec![4096],
            sl: 3,
            tclass: 106,
            ..bw(&dev, op)
        };
        let recs = run_bw(a.addr(), &cfg(), &p).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        consistent(&recs);
        let r = &recs[0];
        assert_eq!(r.iterations, Some(200), "warm-up not counted: {r:?}");
        assert_eq!(r.bytes, 200 * 4096);
        assert!(r.bw_peak_gbps.unwrap() >= r.bw_gbps.unwrap() * (1.0 - 1e-9));
        // The record holds what the device reports for the QP, and says so
        // when that is not what was asked (rxe keeps no service level:
        // RoCE carries none on the wire).
        let sl = r.sl.unwrap();
        assert!(sl == 3 || r.has_warning("path-setting-differs"), "{r:?}");
        if r.link_layer.as_deref() == Some("Ethernet") {
            assert_eq!(r.tclass, Some(106), "{r:?}");
        }
    }
    // Host CPU of both ends over a measured interval long enough for
    // /proc/stat's ticks; the passive end (reads come from its memory)
    // reports its host too.
    for op in [Op::Write, Op::Read] {
        let p = BwParams {
            duration: Some(0.6),
            warmup: Some(0.1),
            ..bw(&dev, op)
        };
        let recs = run_bw(a.addr(), &cfg(), &p).unwrap();
        consistent(&recs);
        let r = &recs[0];
        assert!(
            r.host_cpu_local.is_some() && r.host_cpu_remote.is_some(),
            "{op:?}: {r:?}"
        );
    }
    let p = LatParams {
        warmup_iterations: 50,
        tclass: 8,
        ..lat(&dev, Op::Send)
    };
    let recs = run_lat(a.addr(), &cfg(), &p).unwrap();
    consistent(&recs);
    assert_eq!(recs[0].lat_us.as_ref().unwrap().samples, 200);
    assert!(recs[0].lat_hist.is_some());
}

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
    let t = std::time::Instant::now();
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
fn rdma_cm_connects_every_op_and_several_qps() {
    let agent = peer_agent();
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for op in [Op::Write, Op::Read, Op::Send] {
        let p = BwParams {
            rdma_cm: true,
            sizes: vec![4096],
            ..bw(&dev, op)
        };
        let recs = run_bw(agent, &cfg(), &p).unwrap_or_else(|e| panic!("{op:?} via rdma_cm: {e}"));
        consistent(&recs);
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
    consistent(&recs);
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
    // A traffic class through rdma_cm: this end's own address vector.
    let p = BwParams {
        rdma_cm: true,
        tclass: 106,
        ..bw(&dev, Op::Write)
    };
    let recs = run_bw(agent, &cfg(), &p).expect("rdma_cm with --tclass");
    consistent(&recs);
    if recs[0].link_layer.as_deref() == Some("Ethernet") {
        assert_eq!(recs[0].tclass, Some(106), "{:?}", recs[0]);
    }
    // The agent keeps serving plain (out-of-band) connections afterwards.
    run_bw(agent, &cfg(), &bw(&dev, Op::Write)).expect("plain after rdma_cm");
}
