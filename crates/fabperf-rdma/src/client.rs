//! Client side of `rdma-bw` / `rdma-lat`.

use crate::cm::CmLink;
use crate::engine::{bw_side, lat_initiator, recv_step, with_peer, LatPlan, Plan};
use crate::error::RdmaError;
use crate::msg::{AcceptInfo, EndpointInfo, Report, Request, SideStats, Step};
use crate::prio::Pollers;
use crate::select::path_mtu;
use crate::verbs::{open_device, Device, Endpoint, EpConfig, Op};
use crate::{slot_for, BwParams, LatParams};
use fabperf_proto::cpu::HostReport;
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{connect_test, ClientConfig, Control, ErrorCode, Msg, ProtoError, Start};
use fabperf_results::{GpuMemory, HostCpu, Side, Warning};
use fabperf_results::{Record, Transport};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

/// The local address the kernel would use to reach `addr` (no packet is
/// sent), so the NIC/GID on the tested path can be preferred.
pub(crate) fn local_ip_towards(addr: SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(addr).ok()?;
    Some(s.local_addr().ok()?.ip())
}

fn fail(ctl: &mut Control, e: RdmaError) -> RdmaError {
    if !matches!(e, RdmaError::Proto(ref p) if p.is_connection_lost()) {
        ctl.send_error(ErrorCode::TestFailed, &format!("client: {e}"));
    }
    e
}

fn expect_step(ctl: &mut Control, t: Duration, what: &str, want: &str) -> Result<Step, RdmaError> {
    let s = recv_step(ctl, t, what)?;
    let ok = matches!(
        (&s, want),
        (Step::GoAck, "go_ack") | (Step::Report(_), "report")
    );
    if ok {
        Ok(s)
    } else {
        Err(RdmaError::Proto(ProtoError::Unexpected {
            expected: want.into(),
            got: format!("{s:?}"),
        }))
    }
}

#[allow(clippy::too_many_arguments)]
fn start(
    addr: SocketAddr,
    cfg: &ClientConfig,
    test: &str,
    params: serde_json::Value,
    ep: &mut Endpoint,
    forced_mtu: Option<u32>,
    rdma_cm: bool,
    agent_gpu: bool,
) -> Result<(Control, AcceptInfo, Option<CmLink>), RdmaError> {
    let req = serde_json::to_value(Request {
        params,
        client: ep.info(),
    })
    .map_err(|e| RdmaError::Setup(e.to_string()))?;
    let (mut ctl, info) = connect_test(addr, cfg, test, req)?;
    let acc: AcceptInfo = match serde_json::from_value(info) {
        Ok(a) => a,
        Err(e) => {
            let e = RdmaError::Proto(ProtoError::BadJson(format!("agent's RDMA setup: {e}")));
            return Err(fail(&mut ctl, e));
        }
    };
    if agent_gpu && acc.agent.mem.is_none() {
        let e = RdmaError::Connect(format!(
            "the agent at {addr} put its buffers in host memory although GPU memory was asked \
             for: it is a fabperf without GPU memory support; upgrade it, or test host memory on \
             its end with --remote-mem host"
        ));
        return Err(fail(&mut ctl, e));
    }
    // Both ends compute the same path MTU; trust but check.
    match path_mtu(ep.dev.port.active_mtu, acc.agent.active_mtu, forced_mtu) {
        Ok(m) if m == acc.path_mtu => {}
        Ok(m) => {
            let e = RdmaError::Connect(format!(
                "path MTU disagreement: this end computed {m}, the agent {}",
                acc.path_mtu
            ));
            return Err(fail(&mut ctl, e));
        }
        Err(e) => return Err(fail(&mut ctl, RdmaError::BadRequest(e))),
    }
    if rdma_cm {
        let timeout = ctl.io_timeout();
        return match crate::cm::connect_all(ep, addr, &acc.agent, acc.path_mtu, timeout) {
            Ok(link) => Ok((ctl, acc, Some(link))),
            Err(e) => Err(fail(&mut ctl, e)),
        };
    }
    if let Err(e) = ep.connect(&acc.agent, acc.path_mtu) {
        return Err(fail(&mut ctl, e));
    }
    Ok((ctl, acc, None))
}

/// End the test and wait until the agent has closed the connection: it
/// releases its one-test-at-a-time slot before closing, so a command run
/// right after this one is not refused as "agent busy".
fn finish(ctl: &mut Control, timeout: Duration) {
    let _ = ctl.send_test(&Step::Finish);
    let _ = ctl.send(&Msg::Bye);
    let t = std::time::Instant::now();
    while t.elapsed() < timeout {
        match ctl.recv_within(timeout, "the agent closing the connection") {
            Ok(_) => continue,
            Err(_) => break,
        }
    }
}

fn base_record(test: &str, size: u64, streams: u32, ep: &Endpoint, agent: &EndpointInfo) -> Record {
    let mut r = Record::new(test, Transport::Rdma, size, streams);
    let local = ep.info();
    // What the device reports the QP uses (the settings asked for when it
    // cannot say); the traffic class only travels in a GRH (RoCE).
    let (sl, tclass) = ep.qp_av(0).unwrap_or((ep.sl, ep.tclass));
    r.sl = Some(sl);
    r.tclass = local.use_grh.then_some(tclass);
    for (what, asked, got) in [
        ("service level", ep.sl, Some(sl)),
        ("traffic class", ep.tclass, r.tclass),
    ] {
        if let Some(got) = got.filter(|&g| g != asked) {
            r.warn(Warning::PathSettingDiffers {
                what: what.into(),
                asked,
                got,
            });
        }
    }
    r.device = Some(local.device.clone());
    r.ib_port = Some(local.ib_port);
    r.link_layer = Some(local.link_layer.as_str().to_string());
    if local.use_grh {
        r.gid_index = local.gid_index;
        r.gid_type = local.gid_type.map(|k| k.as_str().to_string());
    }
    r.mtu = Some(ep.path_mtu);
    r.local = Some(local.describe());
    r.remote = Some(agent.describe());
    r
}

/// Open the client's device (preferring the one that reaches `addr`) and say
/// which was picked when the choice was not obvious.
fn client_device(
    device: Option<&str>,
    ib_port: Option<u8>,
    gid_index: Option<u32>,
    addr: SocketAddr,
) -> Result<Device, RdmaError> {
    let dev = open_device(device, ib_port, gid_index, local_ip_towards(addr), None)?;
    for n in &dev.notes {
        eprintln!("fabperf: {n}");
    }
    Ok(dev)
}

/// Run `f` on a thread of its own: the polling loops may move their thread
/// to SCHED_IDLE (see `prio`), and an unprivileged process cannot move it
/// back, so the caller's thread is never the one that measures.
fn on_measuring_thread<T: Send>(
    f: impl FnOnce() -> Result<T, RdmaError> + Send,
) -> Result<T, RdmaError> {
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("fabperf-rdma".into())
            .spawn_scoped(s, f)
            .map_err(|e| RdmaError::Setup(format!("cannot start the measuring thread: {e}")))?;
        h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Each end's polling priority in the records, and the reasons when SCHED_IDLE
/// was wanted and refused.
fn mark_pollers(records: &mut [Record], mine: &Pollers, acc: &AcceptInfo) {
    for r in records {
        r.poll_priority_local = Some(mine.label().to_string());
        r.poll_priority_remote = Some(crate::prio::label(acc.poll_idle).to_string());
        if r.stream.is_none() {
            for (side, w) in [
                (Side::Client, &mine.warning),
                (Side::Agent, &acc.poll_warning),
            ] {
                if let Some(w) = w {
                    r.warn(Warning::PollerPriorityRefused {
                        side,
                        text: w.clone(),
                    });
                }
            }
        }
    }
}

/// The NUMA node of the endpoint's buffers (host memory only: GPU memory has none).
pub(crate) fn host_buffer_node(ep: &Endpoint) -> Option<u32> {
    ep.src
        .is_host()
        .then(|| explain::page_node(ep.src.addr() as usize))
        .flatten()
}

/// Each end's GPU memory (which GPU, registration, relationship to the NIC) in the records'
/// placement; nothing for host memory.
fn mark_memory(records: &mut [Record], mine: Option<&GpuMemory>, theirs: Option<&GpuMemory>) {
    for r in records {
        for (p, g) in [
            (&mut r.placement_local, mine),
            (&mut r.placement_remote, theirs),
        ] {
            if let Some(g) = g {
                p.get_or_insert_with(Default::default).gpu = Some(Box::new(g.clone()));
            }
        }
    }
}

/// Tear the endpoint down now (not at the end of the scope) and put what
/// failed into every record: a leaked buffer or queue pair is worth
/// knowing about, but it does not make the figures wrong.
fn close(ep: &mut Endpoint, records: &mut [Record]) {
    for m in ep.close() {
        eprintln!("fabperf: {m}");
        let w = if m.contains("dereg") {
            Warning::BufferLeaked {
                side: Side::Client,
                text: m,
            }
        } else {
            Warning::TeardownFailed {
                side: Side::Client,
                text: m,
            }
        };
        for r in records.iter_mut() {
            r.warn(w.clone());
        }
    }
}

/// The CPU figures of both ends on a record, absent with a warning when
/// unknown.
fn set_cpu(
    r: &mut Record,
    local: Option<f64>,
    host_local: &Result<HostCpu, String>,
    report: &Report,
) {
    r.cpu_local_pct = local;
    r.cpu_remote_pct = report.cpu_pct;
    for (side, v) in [(Side::Client, local), (Side::Agent, report.cpu_pct)] {
        if v.is_none() {
            r.warn(Warning::CpuUnknown {
                side,
                why: "getrusage(RUSAGE_THREAD) failed".into(),
            });
        }
    }
    for (side, h) in [
        (Side::Client, host_local.clone()),
        (Side::Agent, report.host.result()),
    ] {
        let v = match h {
            Ok(h) => Some(h),
            Err(why) => {
                r.warn(Warning::HostCpuUnknown { side, why });
                None
            }
        };
        match side {
            Side::Client => r.host_cpu_local = v,
            Side::Agent => r.host_cpu_remote = v,
        }
    }
}

/// This end's setup for the test, with what it learned placing itself: the
/// NUMA node of its buffers and why pinning failed.
struct Here {
    setup: EndSetup,
    buf_node: Option<u32>,
    pin_errors: Vec<String>,
}

impl Here {
    /// This end's full report from a measuring loop's.
    fn report(&self, r: HostReport) -> HostReport {
        self.setup.complete(r, self.buf_node, &self.pin_errors)
    }
}

/// Set this end up on `dev` (`--cpu`) and pin the calling (measuring) thread
/// before the buffers are allocated, so they land on its NUMA node.
fn place(dev: &Device, cpu: &explain::CpuSpec) -> Result<(EndSetup, explain::Pinned), RdmaError> {
    let setup = EndSetup::for_rdma(Side::Client, &dev.name, u32::from(dev.port.port), cpu)
        .map_err(RdmaError::BadRequest)?;
    let pinned = setup.pin();
    Ok((setup, pinned))
}

/// Run `rdma-bw` against the agent at `addr`: one record per size, plus
/// per-QP records when more than one QP runs.
pub fn run_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &BwParams,
) -> Result<Vec<Record>, RdmaError> {
    p.validate().map_err(RdmaError::BadRequest)?;
    if p.mem.is_cuda() {
        crate::gpu::ensure_driver()?;
    }
    on_measuring_thread(|| bw_client(addr, cfg, p, &mut |r| r.map(|()| Some(Start::now()))))
}

/// A test's client set up to its start on its measuring thread, which
/// waits for the start (or for this being dropped: the test is called off
/// and the agent told so).
struct Armed {
    start: std::sync::mpsc::Sender<Start>,
    done: std::sync::mpsc::Receiver<Result<Vec<Record>, RdmaError>>,
}

/// Run `client` on a measuring thread of its own up to its start: its
/// set-up's outcome comes back here (a failure with its own class), then
/// the thread waits for [`Armed::run`].
fn arm<F>(client: F) -> Result<Armed, RdmaError>
where
    F: FnOnce(&mut ReadyFn<'_>) -> Result<Vec<Record>, RdmaError> + Send + 'static,
{
    use std::sync::mpsc;
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), RdmaError>>();
    let (start_tx, start_rx) = mpsc::channel::<Start>();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("fabperf-rdma".into())
        .spawn(move || {
            // The set-up's outcome goes to `arm`'s caller (a failure with
            // its own class); then the start is awaited (none: called off).
            let mut wait = |r: Result<(), RdmaError>| -> Result<Option<Start>, RdmaError> {
                let ok = r.is_ok();
                let _ = ready_tx.send(r);
                Ok(if ok { start_rx.recv().ok() } else { None })
            };
            let r = client(&mut wait);
            let _ = done_tx.send(r);
        })
        .map_err(|e| RdmaError::Setup(format!("cannot start the measuring thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(Armed {
            start: start_tx,
            done: done_rx,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(RdmaError::Setup(
            "the measuring thread ended during set-up".into(),
        )),
    }
}

impl Armed {
    fn run(self, start: Start) -> Result<Vec<Record>, RdmaError> {
        self.start
            .send(start)
            .map_err(|_| RdmaError::Setup("the measuring thread ended before the start".into()))?;
        self.done
            .recv()
            .unwrap_or_else(|_| Err(RdmaError::Setup("the measuring thread ended".into())))
    }
}

/// An `rdma-bw` test set up to its start — device open, buffers
/// registered, queue pairs connected, receives posted — on its measuring
/// thread, which waits for [`BwPrepared::run`]. Dropped without a run, the
/// test is called off: the agent is told so and the endpoint torn down.
pub struct BwPrepared(Armed);

/// Set an `rdma-bw` test up against the agent at `addr`, up to the start of
/// its first size (the later sizes follow at once).
pub fn prepare_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &BwParams,
) -> Result<BwPrepared, RdmaError> {
    p.validate().map_err(RdmaError::BadRequest)?;
    if p.mem.is_cuda() {
        crate::gpu::ensure_driver()?;
    }
    let (cfg, p) = (cfg.clone(), p.clone());
    arm(move |ready| bw_client(addr, &cfg, &p, ready)).map(BwPrepared)
}

impl BwPrepared {
    /// Start at `start` (the agent's sending side too, with `--bidir`),
    /// measure every size, and build the records.
    pub fn run(self, start: Start) -> Result<Vec<Record>, RdmaError> {
        self.0.run(start)
    }
}

/// What the set-up's outcome is handed to: it returns the start (None:
/// called off), or the set-up's error back.
type ReadyFn<'a> = dyn FnMut(Result<(), RdmaError>) -> Result<Option<Start>, RdmaError> + 'a;

/// The client: set up, hand the outcome to `ready`, run from its start.
fn bw_client(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &BwParams,
    ready: &mut ReadyFn<'_>,
) -> Result<Vec<Record>, RdmaError> {
    let setup = bw_setup(addr, cfg, p);
    let (mut t, r) = match setup {
        Ok(t) => (Some(t), Ok(())),
        Err(e) => (None, Err(e)),
    };
    match (ready(r)?, t.take()) {
        (Some(start), Some(t)) => bw_sizes(t, cfg, p, start),
        (None, Some(mut t)) => {
            finish(&mut t.ctl, cfg.timeout);
            Ok(Vec::new())
        }
        (_, None) => Ok(Vec::new()),
    }
}

/// A client set up to its start.
struct BwSetup {
    ep: Endpoint,
    ctl: Control,
    acc: AcceptInfo,
    here: Here,
    pollers: Pollers,
    recv: bool,
    rx_depth: u32,
    _cm: Option<CmLink>,
}

fn bw_setup(addr: SocketAddr, cfg: &ClientConfig, p: &BwParams) -> Result<BwSetup, RdmaError> {
    let dev = client_device(p.device.as_deref(), p.ib_port, p.gid_index, addr)?;
    let pollers = Pollers::resolve(p.poll_priority, dev.software);
    let recv = p.op == Op::Send && p.bidir;
    let rx_depth = if recv { p.tx_depth.max(512) } else { 0 };
    let mem = crate::gpu::prepare(&p.mem, p.gpu_reg, &dev.name)?;
    let (setup, pinned) = place(&dev, &p.cpu)?;
    let mut ep = Endpoint::with_memory(
        dev,
        EpConfig {
            qps: p.qps,
            slot: slot_for(p.max_size()),
            tx_depth: p.tx_depth,
            rx_depth,
            inline: p.inline,
            sl: p.sl,
            tclass: p.tclass,
        },
        &mem,
    )?;
    let here = Here {
        setup,
        buf_node: host_buffer_node(&ep),
        pin_errors: pinned.error.iter().cloned().collect(),
    };
    let params = serde_json::to_value(p).map_err(|e| RdmaError::Setup(e.to_string()))?;
    let (mut ctl, acc, cm) = start(
        addr,
        cfg,
        "rdma-bw",
        params,
        &mut ep,
        p.mtu,
        p.rdma_cm,
        p.agent_mem().is_cuda(),
    )?;
    if recv {
        for q in 0..ep.nqps() {
            ep.post_recvs(q, rx_depth).map_err(|e| fail(&mut ctl, e))?;
        }
    }
    Ok(BwSetup {
        ep,
        ctl,
        acc,
        here,
        pollers,
        recv,
        rx_depth,
        _cm: cm,
    })
}

/// Every size, the first from `start` (the later ones at once).
fn bw_sizes(
    t: BwSetup,
    cfg: &ClientConfig,
    p: &BwParams,
    start: Start,
) -> Result<Vec<Record>, RdmaError> {
    let BwSetup {
        mut ep,
        mut ctl,
        acc,
        here,
        pollers,
        recv,
        rx_depth,
        _cm,
    } = t;
    let mut out = Vec::new();
    let mut start = Some(start);
    for &size in &p.sizes {
        let recs = bw_one(
            &mut ctl,
            &mut ep,
            &acc,
            p,
            size,
            recv,
            rx_depth,
            cfg.timeout,
            pollers.idle,
            &here,
            start.take(),
        )
        .map_err(|e| fail(&mut ctl, e))?;
        out.extend(recs);
    }
    finish(&mut ctl, cfg.timeout);
    mark_pollers(&mut out, &pollers, &acc);
    mark_memory(&mut out, ep.mem.as_ref(), acc.agent.mem.as_ref());
    close(&mut ep, &mut out);
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn bw_one(
    ctl: &mut Control,
    ep: &mut Endpoint,
    acc: &AcceptInfo,
    p: &BwParams,
    size: u64,
    recv: bool,
    rx_depth: u32,
    timeout: Duration,
    idle: bool,
    here: &Here,
    start: Option<Start>,
) -> Result<Vec<Record>, RdmaError> {
    // A start of its own (the common start of concurrent flows, or now):
    // the delay goes to the agent, whose sending side waits for it too.
    let delay = start
        .map(|s| fabperf_proto::start::check_delay(s.delay_s()))
        .transpose()
        .map_err(RdmaError::BadRequest)?;
    ctl.send_test(&Step::Go {
        size,
        start_in_s: delay,
        progress: start.is_some_and(|s| s.progress),
    })?;
    expect_step(ctl, timeout, "the agent's go-ahead", "go_ack")?;
    let plan = Plan {
        op: p.op,
        size: size as u32,
        iters: if p.duration.is_some() {
            None
        } else {
            Some(p.iterations)
        },
        warmup_iters: p.warmup_iterations,
        warmup: Duration::from_secs_f64(p.warmup_secs()),
        duration: p.duration.map(Duration::from_secs_f64),
        tx_depth: p.tx_depth,
        cq_mod: p.effective_cq_mod(size),
        inline: p.inline > 0 && size <= ep.max_inline as u64 && p.op != Op::Read,
        progress: start.is_some_and(|s| s.progress),
        start_at: start.map(|s| s.at),
    };
    let outcome = with_peer(ctl, timeout, idle, |beat| {
        bw_side(
            ep,
            Some(plan),
            recv,
            rx_depth,
            beat,
            timeout,
            Some(&here.setup),
        )
    })?;
    let report = match expect_step(ctl, timeout, "the agent's report", "report")? {
        Step::Report(r) => *r,
        _ => unreachable!("expect_step checked the kind"),
    };
    report.check_plausible(size).map_err(|e| {
        RdmaError::Proto(fabperf_proto::ProtoError::BadJson(format!(
            "the agent's report: {e}"
        )))
    })?;
    let mine = outcome.stats.unwrap_or_default();
    let my_report = here.report(outcome.host);
    let mut recs = bw_records(
        ep,
        acc,
        p,
        size,
        &mine,
        &report,
        outcome.cpu_pct,
        &my_report.result(),
    );
    explain::apply(
        &mut recs,
        &my_report,
        &report.host,
        &explain::TestKindInfo {
            full_rate_bandwidth: true,
            one: "one queue pair".into(),
            more_streams_hint: "more queue pairs (--qps 4) and larger messages (--size 1M or 8M) show what the port carries".into(),
        },
    );
    Ok(recs)
}

/// The records of one size. One direction: the client's figures. `--bidir`:
/// a `bidir` total (both directions' bytes over the longer of the two
/// intervals, no peak: the two ends' peaks are not simultaneous) and one
/// record per direction. With more than one QP, a record per QP too. Every
/// record is self-consistent (`Record::check`).
#[allow(clippy::too_many_arguments)]
fn bw_records(
    ep: &Endpoint,
    acc: &AcceptInfo,
    p: &BwParams,
    size: u64,
    mine: &SideStats,
    report: &Report,
    cpu_local: Option<f64>,
    host_local: &Result<HostCpu, String>,
) -> Vec<Record> {
    // Data moves client -> agent for write and send, agent -> client for read.
    let (my_dir, their_dir) = if p.op == Op::Read {
        ("reverse", "forward")
    } else {
        ("forward", "reverse")
    };
    let theirs = report.sent.as_ref().filter(|_| p.bidir);
    let base = |direction: &str| {
        let mut r = base_record("rdma-bw", size, p.qps, ep, &acc.agent);
        r.op = Some(p.op.as_str().to_string());
        r.direction = Some(direction.to_string());
        r
    };
    let no_interval = |r: &mut Record| {
        if r.bw_gbps.is_none() {
            r.warn(Warning::NoInterval {
                what: "no request completed inside the measured interval".into(),
            });
        }
    };
    let side = |direction: &str, st: &SideStats| {
        let mut r = base(direction);
        r.set_throughput(st.bytes, st.secs, Some(st.msgs));
        r.bw_peak_gbps = st.peak_gbps.filter(|_| r.bw_gbps.is_some());
        r.add_notes(&st.notes);
        no_interval(&mut r);
        r.interval = st.interval.clone();
        r
    };
    let mut out = Vec::new();
    let mut total = match theirs {
        None => side(my_dir, mine),
        Some(t) => {
            let mut r = base("bidir");
            r.set_throughput(
                mine.bytes + t.bytes,
                mine.secs.max(t.secs),
                Some(mine.msgs + t.msgs),
            );
            r.add_notes(mine.notes.iter().chain(&t.notes));
            no_interval(&mut r);
            // Both directions' interval (each on its own record with its
            // progress).
            r.interval = mine
                .interval
                .as_ref()
                .zip(t.interval.as_ref())
                .map(|(a, b)| fabperf_results::Interval {
                    start_s: a.start_s.min(b.start_s),
                    end_s: a.end_s.max(b.end_s),
                    sent_from_s: a.sent_from_s.zip(b.sent_from_s).map(|(x, y)| x.min(y)),
                    progress: None,
                });
            r
        }
    };
    set_cpu(&mut total, cpu_local, host_local, report);
    if let Some(text) = fabperf_proto::clock::slow_clock_warning() {
        total.warn(Warning::SlowClock { text });
    }
    if mine.msgs < 100 {
        total.warn(Warning::FewSamples {
            count: mine.msgs,
            what: "messages were measured".into(),
            hint: "use more --iterations or --duration for a stable figure".into(),
        });
    }
    out.push(total);
    if let Some(t) = theirs {
        out.push(side(my_dir, mine));
        out.push(side(their_dir, t));
    }
    if p.qps > 1 {
        for (q, &m) in mine.per_qp_msgs.iter().enumerate() {
            let (tm, secs) = match theirs {
                Some(t) => (
                    t.per_qp_msgs.get(q).copied().unwrap_or(0),
                    mine.secs.max(t.secs),
                ),
                None => (0, mine.secs),
            };
            let mut r = base(if theirs.is_some() { "bidir" } else { my_dir });
            r.stream = Some(q as u32);
            r.set_throughput((m + tm) * size, secs, Some(m + tm));
            no_interval(&mut r);
            out.push(r);
        }
    }
    out
}

/// Run `rdma-lat` against the agent at `addr`: one record per size.
pub fn run_lat(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &LatParams,
) -> Result<Vec<Record>, RdmaError> {
    p.validate().map_err(RdmaError::BadRequest)?;
    if p.mem.is_cuda() {
        crate::gpu::ensure_driver()?;
    }
    on_measuring_thread(|| lat_client(addr, cfg, p, &mut |r| r.map(|()| Some(Start::now()))))
}

/// An `rdma-lat` test set up to its start — device open, buffers
/// registered, the queue pair connected, receives posted — on its
/// measuring thread, which waits for [`LatPrepared::run`]. Dropped without
/// a run, the test is called off: the agent is told so and the endpoint
/// torn down.
pub struct LatPrepared(Armed);

/// Set an `rdma-lat` test up against the agent at `addr`, up to the first
/// ping of its first size (the later sizes follow at once).
pub fn prepare_lat(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &LatParams,
) -> Result<LatPrepared, RdmaError> {
    p.validate().map_err(RdmaError::BadRequest)?;
    if p.mem.is_cuda() {
        crate::gpu::ensure_driver()?;
    }
    let (cfg, p) = (cfg.clone(), p.clone());
    arm(move |ready| lat_client(addr, &cfg, &p, ready)).map(LatPrepared)
}

impl LatPrepared {
    /// Send the first ping at `start`, measure every size, and build the
    /// records.
    pub fn run(self, start: Start) -> Result<Vec<Record>, RdmaError> {
        self.0.run(start)
    }
}

/// The client: set up, hand the outcome to `ready`, run from its start.
fn lat_client(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &LatParams,
    ready: &mut ReadyFn<'_>,
) -> Result<Vec<Record>, RdmaError> {
    let setup = lat_setup(addr, cfg, p);
    let (mut t, r) = match setup {
        Ok(t) => (Some(t), Ok(())),
        Err(e) => (None, Err(e)),
    };
    match (ready(r)?, t.take()) {
        (Some(start), Some(t)) => lat_sizes(t, cfg, p, start),
        (None, Some(mut t)) => {
            finish(&mut t.ctl, cfg.timeout);
            Ok(Vec::new())
        }
        (_, None) => Ok(Vec::new()),
    }
}

/// A latency client set up to its start.
struct LatSetup {
    ep: Endpoint,
    ctl: Control,
    acc: AcceptInfo,
    here: Here,
    pollers: Pollers,
    _cm: Option<CmLink>,
}

fn lat_setup(addr: SocketAddr, cfg: &ClientConfig, p: &LatParams) -> Result<LatSetup, RdmaError> {
    let dev = client_device(p.device.as_deref(), p.ib_port, p.gid_index, addr)?;
    let pollers = Pollers::resolve(p.poll_priority, dev.software);
    let rx_depth = if p.op == Op::Send { LAT_RX_DEPTH } else { 0 };
    let inline = p.inline_for(&p.mem);
    let mem = crate::gpu::prepare(&p.mem, p.gpu_reg, &dev.name)?;
    let (setup, pinned) = place(&dev, &p.cpu)?;
    let mut ep = Endpoint::with_memory(
        dev,
        EpConfig {
            qps: 1,
            slot: slot_for(p.max_size()),
            tx_depth: LAT_TX_DEPTH,
            rx_depth,
            inline,
            sl: p.sl,
            tclass: p.tclass,
        },
        &mem,
    )?;
    let here = Here {
        setup,
        buf_node: host_buffer_node(&ep),
        pin_errors: pinned.error.iter().cloned().collect(),
    };
    let params = serde_json::to_value(p).map_err(|e| RdmaError::Setup(e.to_string()))?;
    let (mut ctl, acc, cm) = start(
        addr,
        cfg,
        "rdma-lat",
        params,
        &mut ep,
        p.mtu,
        p.rdma_cm,
        p.agent_mem().is_cuda(),
    )?;
    if rx_depth > 0 {
        ep.post_recvs(0, rx_depth).map_err(|e| fail(&mut ctl, e))?;
    }
    Ok(LatSetup {
        ep,
        ctl,
        acc,
        here,
        pollers,
        _cm: cm,
    })
}

/// Every size, the first from `start` (the later ones at once).
fn lat_sizes(
    t: LatSetup,
    cfg: &ClientConfig,
    p: &LatParams,
    start: Start,
) -> Result<Vec<Record>, RdmaError> {
    let LatSetup {
        mut ep,
        mut ctl,
        acc,
        here,
        pollers,
        _cm,
    } = t;
    let mut out = Vec::new();
    let mut start = Some(start);
    for &size in &p.sizes {
        let r = lat_one(
            &mut ctl,
            &mut ep,
            &acc,
            p,
            size,
            cfg.timeout,
            pollers.idle,
            &here,
            start.take(),
        )
        .map_err(|e| fail(&mut ctl, e))?;
        out.push(r);
    }
    finish(&mut ctl, cfg.timeout);
    mark_pollers(&mut out, &pollers, &acc);
    mark_memory(&mut out, ep.mem.as_ref(), acc.agent.mem.as_ref());
    close(&mut ep, &mut out);
    Ok(out)
}

pub(crate) const LAT_TX_DEPTH: u32 = 64;
pub(crate) const LAT_RX_DEPTH: u32 = 64;

#[allow(clippy::too_many_arguments)]
fn lat_one(
    ctl: &mut Control,
    ep: &mut Endpoint,
    acc: &AcceptInfo,
    p: &LatParams,
    size: u64,
    timeout: Duration,
    idle: bool,
    here: &Here,
    start: Option<Start>,
) -> Result<Record, RdmaError> {
    ep.dst
        .fill_range(0, size as usize, 0)
        .map_err(RdmaError::Setup)?;
    // A start of its own (the common start of concurrent tests, or now):
    // the delay goes to the agent, which re-arms its clock for it. Its
    // responder answers from its go-ahead on, so the first ping waits for
    // nothing there; a latency test records no progress over time.
    let delay = start
        .map(|s| fabperf_proto::start::check_delay(s.delay_s()))
        .transpose()
        .map_err(RdmaError::BadRequest)?;
    ctl.send_test(&Step::Go {
        size,
        start_in_s: delay,
        progress: false,
    })?;
    expect_step(ctl, timeout, "the agent's go-ahead", "go_ack")?;
    let plan = LatPlan {
        op: p.op,
        size: size as u32,
        iters: if p.duration.is_some() {
            None
        } else {
            Some(p.iterations)
        },
        warmup_iters: p.warmup_iterations,
        warmup: Duration::from_secs_f64(p.warmup_secs()),
        duration: p.duration.map(Duration::from_secs_f64),
        inline: p.op != Op::Read && size <= ep.max_inline as u64 && ep.max_inline > 0,
        tx_depth: LAT_TX_DEPTH,
        start_at: start.map(|s| s.at),
    };
    let o = with_peer(ctl, timeout, idle, |beat| {
        lat_initiator(ep, plan, beat, timeout, Some(&here.setup))
    })?;
    let report = match expect_step(ctl, timeout, "the agent's report", "report")? {
        Step::Report(r) => *r,
        _ => unreachable!("expect_step checked the kind"),
    };
    report.check_plausible(size).map_err(|e| {
        RdmaError::Proto(fabperf_proto::ProtoError::BadJson(format!(
            "the agent's report: {e}"
        )))
    })?;
    let mut r = base_record("rdma-lat", size, 1, ep, &acc.agent);
    r.op = Some(p.op.as_str().to_string());
    let samples = o.hist.len();
    r.iterations = Some(samples);
    r.duration_s = if o.secs.is_finite() {
        o.secs.max(0.0)
    } else {
        0.0
    };
    r.bytes = samples * size * if p.op == Op::Read { 1 } else { 2 };
    r.set_latency(&o.hist);
    r.interval = Some(o.interval);
    let my_report = here.report(o.host);
    set_cpu(&mut r, o.cpu_pct, &my_report.result(), &report);
    if let Some(text) = fabperf_proto::clock::slow_clock_warning() {
        r.warn(Warning::SlowClock { text });
    }
    if samples < 100 {
        r.warn(Warning::FewSamples {
            count: samples,
            what: "samples".into(),
            hint: "percentiles above p99 need many more (--iterations or --duration)".into(),
        });
    }
    let mut recs = [r];
    explain::apply(
        &mut recs,
        &my_report,
        &report.host,
        &explain::TestKindInfo::default(),
    );
    let [r] = recs;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ip_for_loopback() {
        let a: SocketAddr = "127.0.0.1:5301".parse().unwrap();
        assert_eq!(local_ip_towards(a), Some("127.0.0.1".parse().unwrap()));
    }
}
