//! Agent side: the `rdma-bw` and `rdma-lat` test kinds.

use crate::client::{LAT_RX_DEPTH, LAT_TX_DEPTH};
use crate::cm::CmLink;
use crate::engine::{bw_side, lat_responder, passive_wait, recv_step, with_peer, Plan};
use crate::error::RdmaError;
use crate::msg::{AcceptInfo, Report, Request, Step};
use crate::prio::{PollPriority, Pollers};
use crate::select::path_mtu;
use crate::verbs::{open_device, Endpoint, EpConfig, Op};
use crate::{slot_for, BwParams, GpuReg, LatParams, MemSpec};
use fabperf_proto::cpu::{HostReport, ThreadCpu};
use fabperf_proto::explain::{CpuSpec, EndSetup, Pinned};
use fabperf_proto::{Control, Msg, ServeCtx, ServeError, Start, TestKind};
use fabperf_results::Side;
use std::time::{Duration, Instant};

/// The agent's own RDMA device choice (`fabperf server --rdma-*`).
#[derive(Debug, Clone, Default)]
pub struct AgentRdmaOpts {
    pub device: Option<String>,
    pub ib_port: Option<u8>,
    pub gid_index: Option<u32>,
}

/// The RDMA test kinds the agent serves: `rdma-bw` and `rdma-lat`.
pub fn kinds(opts: AgentRdmaOpts) -> Vec<Box<dyn TestKind>> {
    vec![
        Box::new(BwKind { opts: opts.clone() }),
        Box::new(LatKind { opts }),
    ]
}

struct BwKind {
    opts: AgentRdmaOpts,
}

struct LatKind {
    opts: AgentRdmaOpts,
}

fn parse<P: serde::de::DeserializeOwned>(
    params: serde_json::Value,
) -> Result<Request<P>, ServeError> {
    serde_json::from_value(params)
        .map_err(|e| ServeError::bad_request(format!("malformed RDMA request: {e}")))
}

/// What the agent's setup needs from either test's parameters.
trait LinkParams {
    /// `(forced path MTU, connect through rdma_cm, poll priority)`.
    fn link(&self) -> (Option<u32>, bool, PollPriority);
    /// `--cpu`.
    fn cpu(&self) -> &CpuSpec;
    /// Where the agent's buffers live, and how GPU memory is registered.
    fn memory(&self) -> (&MemSpec, GpuReg);
    /// The device and port the client asks the agent to use (`--remote-device`).
    fn agent_device(&self) -> (Option<&str>, Option<u8>);
}

impl LinkParams for BwParams {
    fn agent_device(&self) -> (Option<&str>, Option<u8>) {
        (self.remote_device.as_deref(), self.remote_ib_port)
    }
    fn link(&self) -> (Option<u32>, bool, PollPriority) {
        (self.mtu, self.rdma_cm, self.poll_priority)
    }
    fn cpu(&self) -> &CpuSpec {
        &self.cpu
    }
    fn memory(&self) -> (&MemSpec, GpuReg) {
        (self.agent_mem(), self.gpu_reg)
    }
}

impl LinkParams for LatParams {
    fn agent_device(&self) -> (Option<&str>, Option<u8>) {
        (self.remote_device.as_deref(), self.remote_ib_port)
    }
    fn link(&self) -> (Option<u32>, bool, PollPriority) {
        (self.mtu, self.rdma_cm, self.poll_priority)
    }
    fn cpu(&self) -> &CpuSpec {
        &self.cpu
    }
    fn memory(&self) -> (&MemSpec, GpuReg) {
        (self.agent_mem(), self.gpu_reg)
    }
}

/// The agent's end of one test: its setup, the NUMA node its buffers
/// landed on, and the pin guard of the connection thread (its affinity comes
/// back when the test ends).
struct Here {
    setup: EndSetup,
    buf_node: Option<u32>,
    pinned: Pinned,
}

impl Here {
    fn report(&self, r: HostReport) -> HostReport {
        let errs: Vec<String> = self.pinned.error.iter().cloned().collect();
        self.setup.complete(r, self.buf_node, &errs)
    }
}

/// A passive side (the peer's writes land in, or its reads come from,
/// this memory): wait for the peer without spinning, and report the
/// thread's CPU and, above all, the host's (on a software device the
/// protocol work is kernel time no thread is charged with).
fn passive_report(ctl: &mut Control, timeout: Duration, here: &Here) -> Result<Report, RdmaError> {
    let host = here.setup.meter();
    let t = Instant::now();
    let cpu = ThreadCpu::start();
    passive_wait(ctl, timeout)?;
    let wall = t.elapsed().as_secs_f64();
    let cpu_pct = cpu
        .used_secs()
        .and_then(|c| (wall > 0.0).then(|| c / wall * 100.0));
    Ok(Report {
        cpu_pct,
        host: here.report(host.finish_report()),
        sent: None,
    })
}

/// Tear the endpoint down at the end of a test and log what failed (the
/// agent keeps serving either way).
fn close(mut ep: Endpoint) {
    for m in ep.close() {
        eprintln!("fabperf agent: {m}");
    }
}

/// The device, port and GID index the agent opens: the ones the request names
/// (`--remote-device`: a runner picks each rail's device), else the agent's own
/// (`fabperf server --rdma-*`). The agent's GID index belongs to its own device and is
/// not carried over to another.
fn agent_choice<'a>(
    opts: &'a AgentRdmaOpts,
    asked: (Option<&'a str>, Option<u8>),
) -> (Option<&'a str>, Option<u8>, Option<u32>) {
    match asked {
        (Some(d), port) if opts.device.as_deref() != Some(d) => (Some(d), port, None),
        (Some(d), port) => (Some(d), port.or(opts.ib_port), opts.gid_index),
        (None, Some(port)) => (opts.device.as_deref(), Some(port), None),
        (None, None) => (opts.device.as_deref(), opts.ib_port, opts.gid_index),
    }
}

/// Open the device, pin this thread (`--cpu`), build and connect the
/// endpoint, send `Accept`. Also returns whether this side's polling loops
/// run at SCHED_IDLE, and this end of the test.
fn setup<P: LinkParams>(
    ctx: &mut ServeCtx<'_>,
    opts: &AgentRdmaOpts,
    req: &Request<P>,
    cfg: EpConfig,
) -> Result<(Endpoint, Option<CmLink>, bool, Here), RdmaError> {
    let (forced_mtu, rdma_cm, poll) = req.params.link();
    let bytes = 2 * cfg.slot as u64 * cfg.qps as u64;
    ctx.limits.check_memory(bytes, "the RDMA buffers")?;
    let (device, ib_port, gid_index) = agent_choice(opts, req.params.agent_device());
    let dev = open_device(
        device,
        ib_port,
        gid_index,
        Some(ctx.local().ip()),
        req.client.gid_type,
    )?;
    for n in &dev.notes {
        eprintln!("fabperf agent: {n}");
    }
    let mtu = path_mtu(dev.port.active_mtu, req.client.active_mtu, forced_mtu)
        .map_err(RdmaError::BadRequest)?;
    let pollers = Pollers::resolve(poll, dev.software);
    if let Some(w) = &pollers.warning {
        eprintln!("fabperf agent: {w}");
    }
    let end = EndSetup::for_rdma(
        Side::Agent,
        &dev.name,
        u32::from(dev.port.port),
        req.params.cpu(),
    )
    .map_err(RdmaError::BadRequest)?;
    let (mem_spec, gpu_reg) = req.params.memory();
    let mem = crate::gpu::prepare(mem_spec, gpu_reg, &dev.name)?;
    // Pinned before the buffers are allocated, so they land on its node.
    let pinned = end.pin();
    let mut ep = Endpoint::with_memory(dev, cfg, &mem)?;
    if let Some(g) = &ep.mem {
        eprintln!(
            "fabperf agent: buffers in GPU memory: {} ({})",
            g.describe(),
            g.name.as_deref().unwrap_or("GPU")
        );
    }
    let here = Here {
        setup: end,
        buf_node: crate::client::host_buffer_node(&ep),
        pinned,
    };
    let listening = if rdma_cm {
        Some(crate::cm::listen(ctx.local())?)
    } else {
        ep.connect(&req.client, mtu)?;
        None
    };
    let info = serde_json::to_value(AcceptInfo {
        agent: ep.info(),
        path_mtu: mtu,
        poll_idle: pollers.idle,
        poll_warning: pollers.warning,
    })
    .map_err(|e| RdmaError::Setup(e.to_string()))?;
    ctx.ctl.send(&Msg::Accept { info })?;
    let link = match listening {
        Some((ch, listener)) => Some(crate::cm::accept_all(
            &mut ep,
            ch,
            listener,
            &req.client,
            mtu,
            ctx.limits.io_timeout,
        )?),
        None => None,
    };
    Ok((ep, link, pollers.idle, here))
}

/// Serve sizes until the client's `Finish`. A size with a start delay
/// re-arms the agent's clock (`arm`: the delay) so the wait for the common
/// start of concurrent flows is not counted against the test.
fn size_loop(
    ctl: &mut Control,
    timeout: Duration,
    arm: impl Fn(f64) -> Result<(), ServeError>,
    mut one: impl FnMut(&mut Control, u64, Start) -> Result<Report, RdmaError>,
) -> Result<(), RdmaError> {
    loop {
        match recv_step(ctl, timeout, "the client's next step")? {
            Step::Go {
                size,
                start_in_s,
                progress,
            } => {
                let delay_s = fabperf_proto::start::check_delay(start_in_s.unwrap_or(0.0))
                    .map_err(RdmaError::BadRequest)?;
                if start_in_s.is_some() {
                    arm(delay_s)?;
                }
                let report = one(ctl, size, Start::after(delay_s, progress))?;
                ctl.send_test(&Step::Report(Box::new(report)))?;
            }
            Step::Finish => return Ok(()),
            other => {
                return Err(RdmaError::Proto(fabperf_proto::ProtoError::Unexpected {
                    expected: "go or finish".into(),
                    got: format!("{other:?}"),
                }))
            }
        }
    }
}

/// Re-arms the agent's clock for a test of `length` seconds (duration
/// mode) starting after a delay.
fn arm_after<'a>(
    ctx: &ServeCtx<'a>,
    length: Option<f64>,
) -> impl Fn(f64) -> Result<(), ServeError> + 'a {
    let clock = ctx.clock;
    let limits = ctx.limits;
    move |delay| {
        if let Some(l) = length {
            limits.check_duration(delay + l)?;
            clock.arm(Duration::try_from_secs_f64(delay + l).unwrap_or(limits.max_duration));
        }
        Ok(())
    }
}

fn check_size(size: u64, slot: usize) -> Result<(), RdmaError> {
    if size == 0 || size > slot as u64 {
        return Err(RdmaError::BadRequest(format!(
            "size {size} outside the announced sizes (largest {slot})"
        )));
    }
    Ok(())
}

impl TestKind for BwKind {
    fn name(&self) -> &'static str {
        "rdma-bw"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let req: Request<BwParams> = parse(params)?;
        let p = &req.params;
        p.validate().map_err(ServeError::bad_request)?;
        ctx.limits.check_streams(p.qps)?;
        if let Some(d) = p.duration {
            // Every size runs for the warm-up plus the duration; the agent
            // ends the whole test by its own clock after that (plus grace).
            ctx.limit_duration(p.sizes.len() as f64 * (d + p.warmup_secs()))?;
        }
        if req.client.qps.len() != p.qps as usize {
            return Err(ServeError::bad_request(
                "client QP list does not match --qps",
            ));
        }
        let recv = p.op == Op::Send;
        let rx_depth = if recv { p.tx_depth.max(512) } else { 0 };
        let slot = slot_for(p.max_size());
        let cfg = EpConfig {
            qps: p.qps,
            slot,
            tx_depth: p.tx_depth,
            rx_depth,
            inline: p.inline,
            sl: p.sl,
            tclass: p.tclass,
        };
        let timeout = ctx.limits.io_timeout;
        let (mut ep, _cm, idle, here) =
            setup(ctx, &self.opts, &req, cfg).map_err(|e| e.to_serve())?;
        if recv {
            for q in 0..ep.nqps() {
                ep.post_recvs(q, rx_depth).map_err(|e| e.to_serve())?;
            }
        }
        let arm = arm_after(
            ctx,
            p.duration
                .map(|d| p.sizes.len() as f64 * (d + p.warmup_secs())),
        );
        let r = size_loop(ctx.ctl, timeout, arm, |ctl, size, start| {
            check_size(size, slot)?;
            ctl.send_test(&Step::GoAck)?;
            if !recv && !p.bidir {
                // Writes land in (or reads come from) our memory: no CPU needed.
                return passive_report(ctl, timeout, &here);
            }
            // This side sends too: from the common start.
            let plan = p.bidir.then(|| Plan {
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
                progress: start.progress,
                start_at: Some(start.at),
            });
            let o = with_peer(ctl, timeout, idle, |beat| {
                bw_side(
                    &mut ep,
                    plan,
                    recv,
                    rx_depth,
                    beat,
                    timeout,
                    Some(&here.setup),
                )
            })?;
            Ok(Report {
                cpu_pct: o.cpu_pct,
                host: here.report(o.host),
                sent: o.stats,
            })
        });
        close(ep);
        r.map_err(|e| e.to_serve())
    }
}

impl TestKind for LatKind {
    fn name(&self) -> &'static str {
        "rdma-lat"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let req: Request<LatParams> = parse(params)?;
        let p = &req.params;
        p.validate().map_err(ServeError::bad_request)?;
        if let Some(d) = p.duration {
            ctx.limit_duration(p.sizes.len() as f64 * (d + p.warmup_secs()))?;
        }
        if req.client.qps.len() != 1 {
            return Err(ServeError::bad_request("latency tests use exactly one QP"));
        }
        let rx_depth = if p.op == Op::Send { LAT_RX_DEPTH } else { 0 };
        let slot = slot_for(p.max_size());
        let inline = p.inline_for(p.agent_mem());
        let cfg = EpConfig {
            qps: 1,
            slot,
            tx_depth: LAT_TX_DEPTH,
            rx_depth,
            inline,
            sl: p.sl,
            tclass: p.tclass,
        };
        let timeout = ctx.limits.io_timeout;
        let (mut ep, _cm, idle, here) =
            setup(ctx, &self.opts, &req, cfg).map_err(|e| e.to_serve())?;
        if rx_depth > 0 {
            ep.post_recvs(0, rx_depth).map_err(|e| e.to_serve())?;
        }
        let op = p.op;
        let arm = arm_after(
            ctx,
            p.duration
                .map(|d| p.sizes.len() as f64 * (d + p.warmup_secs())),
        );
        let r = size_loop(ctx.ctl, timeout, arm, |ctl, size, _start| {
            check_size(size, slot)?;
            ep.dst
                .fill_range(0, size as usize, 0)
                .map_err(RdmaError::Setup)?;
            ctl.send_test(&Step::GoAck)?;
            if op == Op::Read {
                return passive_report(ctl, timeout, &here);
            }
            let inline = size <= ep.max_inline as u64 && ep.max_inline > 0;
            let (cpu_pct, host) = with_peer(ctl, timeout, idle, |beat| {
                lat_responder(&mut ep, op, size as u32, inline, beat, Some(&here.setup))
            })?;
            Ok(Report {
                cpu_pct,
                host: here.report(host),
                sent: None,
            })
        });
        close(ep);
        r.map_err(|e| e.to_serve())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requested_device_wins_without_the_agents_gid_index() {
        let own = AgentRdmaOpts {
            device: Some("mlx5_0".into()),
            ib_port: Some(1),
            gid_index: Some(3),
        };
        // Nothing asked: the agent's own choice.
        assert_eq!(
            agent_choice(&own, (None, None)),
            (Some("mlx5_0"), Some(1), Some(3))
        );
        // Another device (a rail): its port as asked, the GID by rule.
        assert_eq!(
            agent_choice(&own, (Some("mlx5_3"), None)),
            (Some("mlx5_3"), None, None)
        );
        assert_eq!(
            agent_choice(&own, (Some("mlx5_3"), Some(2))),
            (Some("mlx5_3"), Some(2), None)
        );
        // Its own device named: its settings stay.
        assert_eq!(
            agent_choice(&own, (Some("mlx5_0"), None)),
            (Some("mlx5_0"), Some(1), Some(3))
        );
        // An agent without a device of its own.
        let free = AgentRdmaOpts::default();
        assert_eq!(
            agent_choice(&free, (Some("rxe1"), None)),
            (Some("rxe1"), None, None)
        );
        assert_eq!(agent_choice(&free, (None, None)), (None, None, None));
    }
}
