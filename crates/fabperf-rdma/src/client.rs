//! Client side of `rdma-bw` / `rdma-lat`.

use crate::cm::CmLink;
use crate::engine::{bw_side, lat_initiator, recv_step, with_peer, LatPlan, Plan};
use crate::error::RdmaError;
use crate::msg::{AcceptInfo, EndpointInfo, Report, Request, SideStats, Step};
use crate::prio::Pollers;
use crate::select::path_mtu;
use crate::verbs::{open_device, Device, Endpoint, EpConfig, Op};
use crate::{slot_for, BwParams, LatParams};
use fabperf_proto::{connect_test, ClientConfig, Control, ErrorCode, Msg, ProtoError};
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

fn start(
    addr: SocketAddr,
    cfg: &ClientConfig,
    test: &str,
    params: serde_json::Value,
    ep: &mut Endpoint,
    forced_mtu: Option<u32>,
    rdma_cm: bool,
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
    if let Some(n) = &dev.note {
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
            for (who, w) in [
                ("this end", &mine.warning),
                ("the agent", &acc.poll_warning),
            ] {
                if let Some(w) = w {
                    r.warnings.push(format!("{who}: {w}"));
                }
            }
        }
    }
}

/// Run `rdma-bw` against the agent at `addr`: one record per size, plus
/// per-QP records when more than one QP runs.
pub fn run_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &BwParams,
) -> Result<Vec<Record>, RdmaError> {
    p.validate().map_err(RdmaError::BadRequest)?;
    on_measuring_thread(|| bw_client(addr, cfg, p))
}

fn bw_client(addr: SocketAddr, cfg: &ClientConfig, p: &BwParams) -> Result<Vec<Record>, RdmaError> {
    let dev = client_device(p.device.as_deref(), p.ib_port, p.gid_index, addr)?;
    let pollers = Pollers::resolve(p.poll_priority, dev.software);
    let recv = p.op == Op::Send && p.bidir;
    let rx_depth = if recv { p.tx_depth.max(512) } else { 0 };
    let mut ep = Endpoint::new(
        dev,
        EpConfig {
            qps: p.qps,
            slot: slot_for(p.max_size()),
            tx_depth: p.tx_depth,
            rx_depth,
            inline: p.inline,
        },
    )?;
    let params = serde_json::to_value(p).map_err(|e| RdmaError::Setup(e.to_string()))?;
    let (mut ctl, acc, _cm) = start(addr, cfg, "rdma-bw", params, &mut ep, p.mtu, p.rdma_cm)?;
    if recv {
        for q in 0..ep.nqps() {
            ep.post_recvs(q, rx_depth).map_err(|e| fail(&mut ctl, e))?;
        }
    }
    let mut out = Vec::new();
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
        )
        .map_err(|e| fail(&mut ctl, e))?;
        out.extend(recs);
    }
    finish(&mut ctl, cfg.timeout);
    mark_pollers(&mut out, &pollers, &acc);
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
) -> Result<Vec<Record>, RdmaError> {
    ctl.send_test(&Step::Go { size })?;
    expect_step(ctl, timeout, "the agent's go-ahead", "go_ack")?;
    let plan = Plan {
        op: p.op,
        size: size as u32,
        iters: if p.duration.is_some() {
            None
        } else {
            Some(p.iterations)
        },
        warmup: Duration::from_secs_f64(p.warmup_secs()),
        duration: p.duration.map(Duration::from_secs_f64),
        tx_depth: p.tx_depth,
        cq_mod: p.effective_cq_mod(size),
        inline: p.inline > 0 && size <= ep.max_inline as u64 && p.op != Op::Read,
    };
    let outcome = with_peer(ctl, timeout, idle, |beat| {
        bw_side(ep, Some(plan), recv, rx_depth, beat, timeout)
    })?;
    let report = match expect_step(ctl, timeout, "the agent's report", "report")? {
        Step::Report(r) => r,
        _ => unreachable!("expect_step checked the kind"),
    };
    report.check_plausible(size).map_err(|e| {
        RdmaError::Proto(fabperf_proto::ProtoError::BadJson(format!(
            "the agent's report: {e}"
        )))
    })?;
    let mine = outcome.stats.unwrap_or_default();
    Ok(bw_records(
        ep,
        acc,
        p,
        size,
        &mine,
        &report,
        outcome.cpu_pct,
    ))
}

fn bw_records(
    ep: &Endpoint,
    acc: &AcceptInfo,
    p: &BwParams,
    size: u64,
    mine: &SideStats,
    report: &Report,
    cpu_local: f64,
) -> Vec<Record> {
    let mut r = base_record("rdma-bw", size, p.qps, ep, &acc.agent);
    r.op = Some(p.op.as_str().to_string());
    r.direction = Some(
        if p.bidir {
            "bidir"
        } else if p.op == Op::Read {
            "reverse"
        } else {
            "forward"
        }
        .to_string(),
    );
    let theirs = report.sent.clone().filter(|_| p.bidir);
    let rate = |s: &SideStats| {
        if s.secs > 0.0 {
            s.msgs as f64 / s.secs / 1e6
        } else {
            0.0
        }
    };
    r.bytes = mine.bytes + theirs.as_ref().map(|t| t.bytes).unwrap_or(0);
    r.duration_s = mine.secs;
    r.iterations = Some(mine.msgs + theirs.as_ref().map(|t| t.msgs).unwrap_or(0));
    r.bw_gbps = Some(mine.gbps() + theirs.as_ref().map(|t| t.gbps()).unwrap_or(0.0));
    r.msg_rate_mpps = Some(rate(mine) + theirs.as_ref().map(rate).unwrap_or(0.0));
    r.bw_peak_gbps = Some(
        mine.peak_gbps.unwrap_or(mine.gbps())
            + theirs
                .as_ref()
                .map(|t| t.peak_gbps.unwrap_or(t.gbps()))
                .unwrap_or(0.0),
    );
    r.cpu_local_pct = Some(cpu_local);
    r.cpu_remote_pct = Some(report.cpu_pct);
    for n in [&mine.note, &theirs.as_ref().and_then(|t| t.note.clone())]
        .into_iter()
        .flatten()
    {
        r.warnings.push(n.clone());
    }
    r.warnings
        .extend(fabperf_proto::clock::slow_clock_warning());
    if mine.msgs < 100 {
        r.warnings.push(format!(
            "only {} messages were measured; use more --iterations or --duration for a stable figure",
            mine.msgs
        ));
    }
    let mut out = vec![r.clone()];
    if p.qps > 1 {
        for (q, &m) in mine.per_qp_msgs.iter().enumerate() {
            let mut s = r.clone();
            s.stream = Some(q as u32);
            s.warnings.clear();
            s.bw_peak_gbps = None;
            s.cpu_local_pct = None;
            s.cpu_remote_pct = None;
            s.set_throughput(m * size, mine.secs, Some(m));
            if let Some(t) = &theirs {
                let tm = t.per_qp_msgs.get(q).copied().unwrap_or(0);
                s.bytes += tm * size;
                s.iterations = Some(m + tm);
                if t.secs > 0.0 {
                    s.bw_gbps =
                        Some(s.bw_gbps.unwrap_or(0.0) + (tm * size) as f64 * 8.0 / t.secs / 1e9);
                    s.msg_rate_mpps =
                        Some(s.msg_rate_mpps.unwrap_or(0.0) + tm as f64 / t.secs / 1e6);
                }
            }
            out.push(s);
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
    on_measuring_thread(|| lat_client(addr, cfg, p))
}

fn lat_client(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &LatParams,
) -> Result<Vec<Record>, RdmaError> {
    let dev = client_device(p.device.as_deref(), p.ib_port, p.gid_index, addr)?;
    let pollers = Pollers::resolve(p.poll_priority, dev.software);
    let rx_depth = if p.op == Op::Send { LAT_RX_DEPTH } else { 0 };
    let inline = if p.op == Op::Read {
        0
    } else {
        p.inline.unwrap_or(236)
    };
    let mut ep = Endpoint::new(
        dev,
        EpConfig {
            qps: 1,
            slot: slot_for(p.max_size()),
            tx_depth: LAT_TX_DEPTH,
            rx_depth,
            inline,
        },
    )?;
    let params = serde_json::to_value(p).map_err(|e| RdmaError::Setup(e.to_string()))?;
    let (mut ctl, acc, _cm) = start(addr, cfg, "rdma-lat", params, &mut ep, p.mtu, p.rdma_cm)?;
    if rx_depth > 0 {
        ep.post_recvs(0, rx_depth).map_err(|e| fail(&mut ctl, e))?;
    }
    let mut out = Vec::new();
    for &size in &p.sizes {
        let r = lat_one(&mut ctl, &mut ep, &acc, p, size, cfg.timeout, pollers.idle)
            .map_err(|e| fail(&mut ctl, e))?;
        out.push(r);
    }
    finish(&mut ctl, cfg.timeout);
    mark_pollers(&mut out, &pollers, &acc);
    Ok(out)
}

pub(crate) const LAT_TX_DEPTH: u32 = 64;
pub(crate) const LAT_RX_DEPTH: u32 = 64;

fn lat_one(
    ctl: &mut Control,
    ep: &mut Endpoint,
    acc: &AcceptInfo,
    p: &LatParams,
    size: u64,
    timeout: Duration,
    idle: bool,
) -> Result<Record, RdmaError> {
    ep.dst.fill_range(0, size as usize, 0);
    ctl.send_test(&Step::Go { size })?;
    expect_step(ctl, timeout, "the agent's go-ahead", "go_ack")?;
    let plan = LatPlan {
        op: p.op,
        size: size as u32,
        iters: if p.duration.is_some() {
            None
        } else {
            Some(p.iterations)
        },
        warmup: Duration::from_secs_f64(p.warmup_secs()),
        duration: p.duration.map(Duration::from_secs_f64),
        inline: p.op != Op::Read && size <= ep.max_inline as u64 && ep.max_inline > 0,
        tx_depth: LAT_TX_DEPTH,
    };
    let o = with_peer(ctl, timeout, idle, |beat| {
        lat_initiator(ep, plan, beat, timeout)
    })?;
    let report = match expect_step(ctl, timeout, "the agent's report", "report")? {
        Step::Report(r) => r,
        _ => unreachable!("expect_step checked the kind"),
    };
    report.check_plausible(size).map_err(|e| {
        RdmaError::Proto(fabperf_proto::ProtoError::BadJson(format!(
            "the agent's report: {e}"
        )))
    })?;
    let mut r = base_record("rdma-lat", size, 1, ep, &acc.agent);
    r.op = Some(p.op.as_str().to_string());
    let summary = o.hist.summary();
    let samples = summary.as_ref().map(|s| s.samples).unwrap_or(0);
    r.iterations = Some(samples);
    r.duration_s = o.secs;
    r.bytes = samples * size * if p.op == Op::Read { 1 } else { 2 };
    r.lat_us = summary;
    r.cpu_local_pct = Some(o.cpu_pct);
    r.cpu_remote_pct = Some(report.cpu_pct);
    r.warnings
        .extend(fabperf_proto::clock::slow_clock_warning());
    if samples < 100 {
        r.warnings.push(format!(
            "only {samples} samples; percentiles above p99 need many more (--iterations or --duration)"
        ));
    }
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
