//! What the tests measure and record: bandwidth and latency for every op,
//! size, QP count and mode (iterations, duration, warm-up), the path
//! settings read back from the device, the pollers' scheduling, and
//! connections through rdma_cm.

use super::*;
use crate::{run_bw, run_lat};
use fabperf_results::LatencyKind;

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
            // When it measured (concurrent tests, such as the rails of a
            // run, are compared on it): after the first ping, in order.
            let i = r.interval.as_ref().expect("the measured interval");
            assert!(
                i.sent_from_s.is_some_and(|s| s <= i.start_s) && i.start_s <= i.end_s,
                "{i:?}"
            );
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

/// A prepared test (`prepare_bw`, `prepare_lat`: device, buffers and queue
/// pairs set up before the start, as the runner's concurrent flows and
/// rails are) sends its first request or ping at the start it is given,
/// not when it was prepared, and measures as a test run at once does.
#[test]
#[ignore = "needs an RDMA device (run in the soft-RoCE guest)"]
fn prepared_tests_start_at_the_given_instant() {
    use fabperf_proto::Start;
    use fabperf_results::WallClock;
    let dev = device();
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let a = agent(&dev, limits());
    // The first request or ping at the start (not before; late by at most
    // a loaded guest's wake-up).
    let on_time = |what: &str, recs: &[Record], want: f64| {
        consistent(recs);
        let i = recs[0].interval.as_ref().expect("the measured interval");
        let sent = i.sent_from_s.expect("when the first request went out");
        assert!(
            sent >= want - 0.002,
            "{what}: started {:.3} s early",
            want - sent
        );
        assert!(
            sent < want + 1.0,
            "{what}: started {:.3} s late",
            sent - want
        );
        assert!(sent <= i.start_s && i.start_s <= i.end_s, "{what}: {i:?}");
    };
    for op in [Op::Send, Op::Write, Op::Read] {
        let prepared = crate::prepare_lat(a.addr(), &cfg(), &lat(&dev, op))
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
        // Set up and waiting: the start is the caller's to give.
        std::thread::sleep(Duration::from_millis(300));
        let start = Start::after(0.5, true);
        let want = WallClock::now().unix(start.at);
        let recs = prepared
            .run(start)
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].lat_us.as_ref().unwrap().samples, 200, "{op:?}");
        on_time(&format!("rdma-lat {op:?}"), &recs, want);
    }
    let prepared = crate::prepare_bw(a.addr(), &cfg(), &bw(&dev, Op::Write)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Start::after(0.5, true);
    let want = WallClock::now().unix(start.at);
    let recs = prepared.run(start).unwrap();
    assert!(recs[0].bw_gbps.is_some_and(|g| g > 0.0), "{:?}", recs[0]);
    on_time("rdma-bw write", &recs, want);
}
