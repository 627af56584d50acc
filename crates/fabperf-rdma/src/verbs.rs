//! Safe layer over sideway: device discovery, and an `Endpoint` (PD, CQ,
//! RC queue pairs, registered buffers) with the few operations the tests
//! need. Crate-private: the public API is `run_bw`/`run_lat` and the agent
//! kinds.
//!
//! Teardown never takes the process down: sideway asserts that
//! `ibv_destroy_qp`/`ibv_destroy_cq` succeed, which panics in a destructor
//! (and aborts when that happens during unwinding). `Endpoint::close`
//! destroys the queue pairs and the CQ one by one inside `catch_unwind` and
//! reports failures as text; while the thread is already unwinding it
//! leaks them instead. Buffers are deregistered with the result checked
//! (see `sys::RegBuf`).

use crate::error::{register_error, wc_hint, RdmaError, RdmaUnavailable};
use crate::gpu::{GpuReg, MemPlan};
use crate::msg::{EndpointInfo, QpInfo};
use crate::select::{
    mtu_bytes, pick_gid, pick_port, Addressing, DevSnap, GidEntry, GidKind, LinkLayer, PortSnap,
};
use crate::sys::{self, DeviceReg, RegBuf};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::device::{Device as DeviceInfo_, DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, QueuePair, QueuePairAttribute, QueuePairState,
};
use sideway::ibverbs::AccessFlags;
use std::net::IpAddr;
use std::sync::Arc;

/// RDMA operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Write,
    Read,
    Send,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
        }
    }
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Op, String> {
        match s {
            "write" => Ok(Op::Write),
            "read" => Ok(Op::Read),
            "send" => Ok(Op::Send),
            _ => Err(format!(
                "unknown RDMA operation '{s}': use write, read or send"
            )),
        }
    }
}

fn port_state_name(v: u32) -> &'static str {
    match v {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

fn gid_kind(t: GidType) -> GidKind {
    match t {
        GidType::InfiniBand => GidKind::Ib,
        GidType::RoceV1 => GidKind::RoceV1,
        GidType::RoceV2 => GidKind::RoceV2,
    }
}

/// The valid GID entries of one port (tables may be sparse).
fn gid_table(
    ctx: &DeviceContext,
    port: u8,
    len: i32,
    all: &Option<Vec<GidEntry>>,
) -> Vec<GidEntry> {
    if let Some(all) = all {
        return all.clone();
    }
    let mut out = Vec::new();
    for i in 0..len.max(0) as u32 {
        if let Ok(e) = ctx.query_gid_ex(port, i) {
            let g = e.gid();
            if !g.is_zero() {
                out.push(GidEntry {
                    index: i,
                    gid: g.into(),
                    kind: gid_kind(e.gid_type()),
                });
            }
        }
    }
    out
}

/// An opened device with the chosen port and addressing.
pub(crate) struct Device {
    pub ctx: Arc<DeviceContext>,
    pub name: String,
    pub port: PortSnap,
    pub addressing: Addressing,
    /// min(max_qp_rd_atom, max_qp_init_rd_atom, 16).
    pub max_rd_atomic: u8,
    /// The device's largest queue (work requests) and CQ (entries).
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    /// What the user should know about the choice: why this port among
    /// several, and devices that could not be opened (and were skipped).
    pub notes: Vec<String>,
    /// A software device (rxe, siw): the kernel does its protocol work.
    pub software: bool,
}

/// One opened device: its snapshot, context and limits.
struct Opened {
    snap: DevSnap,
    ctx: Arc<DeviceContext>,
    max_rd_atomic: u8,
    max_qp_wr: u32,
    max_cqe: u32,
}

/// Open one device and read its ports and GID tables.
fn open_one(dev: &DeviceInfo_<'_>) -> Result<Opened, String> {
    let name = dev.name();
    let ctx = dev.open().map_err(|e| format!("opening {name}: {e}"))?;
    let attr = ctx
        .query_device()
        .map_err(|e| format!("querying {name}: {e}"))?;
    let rd = attr
        .attr
        .orig_attr
        .max_qp_rd_atom
        .min(attr.attr.orig_attr.max_qp_init_rd_atom)
        .clamp(1, 16) as u8;
    let max_qp_wr = attr.attr.orig_attr.max_qp_wr.max(0) as u32;
    let max_cqe = attr.attr.orig_attr.max_cqe.max(0) as u32;
    // The whole table at once when the library supports it.
    let table: Option<Vec<(u32, GidEntry)>> = ctx.query_gid_table().ok().map(|t| {
        t.iter()
            .filter(|e| !e.gid().is_zero())
            .map(|e| {
                (
                    e.port_num(),
                    GidEntry {
                        index: e.gid_index(),
                        gid: e.gid().into(),
                        kind: gid_kind(e.gid_type()),
                    },
                )
            })
            .collect()
    });
    let mut ports = Vec::new();
    for p in 1..=attr.phys_port_cnt() {
        let pa = ctx
            .query_port(p)
            .map_err(|e| format!("querying {name} port {p}: {e}"))?;
        let raw = &pa.attr;
        let state = raw.state;
        let link_layer = if raw.link_layer == rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        };
        let for_port = table.as_ref().map(|t| {
            t.iter()
                .filter(|(pn, _)| *pn == p as u32)
                .map(|(_, g)| g.clone())
                .collect::<Vec<_>>()
        });
        ports.push(PortSnap {
            port: p,
            active: state == 4,
            state: port_state_name(state).to_string(),
            link_layer,
            active_mtu: mtu_bytes(raw.active_mtu),
            lid: raw.lid,
            gids: gid_table(&ctx, p, raw.gid_tbl_len, &for_port),
        });
    }
    Ok(Opened {
        snap: DevSnap { name, ports },
        ctx,
        max_rd_atomic: rd,
        max_qp_wr,
        max_cqe,
    })
}

/// Open the devices a choice needs: only `device` when it is named (the
/// others are listed by name, never opened), else every device, where one
/// that cannot be opened is skipped with a note instead of failing the test.
fn open_devices(device: Option<&str>) -> Result<(Vec<Opened>, Vec<String>), RdmaUnavailable> {
    let list = DeviceList::new().map_err(|e| {
        let io = match e.0 {
            sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) => io,
            other => std::io::Error::other(other.to_string()),
        };
        crate::error::device_list_error(io.raw_os_error(), &io.to_string())
    })?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    if names.is_empty() {
        return Err(RdmaUnavailable::NoDevice);
    }
    if let Some(want) = device {
        let Some(dev) = list.iter().find(|d| d.name() == want) else {
            return Err(RdmaUnavailable::DeviceNotFound {
                name: want.to_string(),
                available: names,
            });
        };
        let one = open_one(&dev).map_err(|e| RdmaUnavailable::Other(format!("RDMA device {e}")))?;
        return Ok((vec![one], Vec::new()));
    }
    let mut opened = Vec::new();
    let mut skipped = Vec::new();
    for dev in list.iter() {
        match open_one(&dev) {
            Ok(o) => opened.push(o),
            Err(e) => skipped.push(e),
        }
    }
    if opened.is_empty() {
        return Err(RdmaUnavailable::Other(format!(
            "no RDMA device could be opened: {}",
            skipped.join("; ")
        )));
    }
    let notes = skipped
        .into_iter()
        .map(|e| {
            format!(
                "skipped an RDMA device that cannot be used ({e}); --device picks one explicitly"
            )
        })
        .collect();
    Ok((opened, notes))
}

/// Open the device and port to use, and pick the GID.
pub(crate) fn open_device(
    device: Option<&str>,
    ib_port: Option<u8>,
    gid_index: Option<u32>,
    prefer_ip: Option<IpAddr>,
    peer_kind: Option<GidKind>,
) -> Result<Device, RdmaUnavailable> {
    let (mut all, mut notes) = open_devices(device)?;
    let snaps: Vec<DevSnap> = all.iter().map(|o| o.snap.clone()).collect();
    let choice = pick_port(&snaps, device, ib_port, prefer_ip)?;
    let o = all.swap_remove(choice.dev);
    let port = o.snap.ports[choice.port].clone();
    let addressing = pick_gid(&o.snap.name, &port, gid_index, prefer_ip, peer_kind)?;
    let software = fabperf_detect::rdma_device_is_software(std::path::Path::new("/"), &o.snap.name)
        .unwrap_or(false);
    notes.extend(choice.note);
    Ok(Device {
        ctx: o.ctx,
        name: o.snap.name,
        port,
        addressing,
        max_rd_atomic: o.max_rd_atomic,
        max_qp_wr: o.max_qp_wr,
        max_cqe: o.max_cqe,
        notes,
        software,
    })
}

/// The P_Key at index 0 of a port, as sysfs shows it (e.g. `0xffff`).
pub(crate) fn pkey0(sysfs: &std::path::Path, dev: &str, port: u8) -> Option<String> {
    let p = sysfs
        .join("class/infiniband")
        .join(dev)
        .join(format!("ports/{port}/pkeys/0"));
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Sizes and path settings of an endpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EpConfig {
    pub qps: u32,
    /// Bytes per QP slot (largest message).
    pub slot: usize,
    pub tx_depth: u32,
    /// Receive queue depth (0: no sends expected).
    pub rx_depth: u32,
    /// Requested inline size.
    pub inline: u32,
    /// Service level of the address vector.
    pub sl: u8,
    /// GRH traffic class (RoCE: DSCP << 2 | ECN).
    pub tclass: u8,
}

/// wr_id layout: bit 63 receive flag, bits 32..63 QP index, low 32 bits
/// the request's number on its QP (1, 2, ...; modulo 2^32). A signaled
/// completion for request k completes every request up to k, so the count
/// it stands for is k minus the last completed number, and a completion
/// delivered twice (or for a request never posted) is recognised at once.
pub(crate) const RECV_FLAG: u64 = 1 << 63;

pub(crate) fn wr_id(qp: usize, seq: u32) -> u64 {
    ((qp as u64) << 32) | seq as u64
}

pub(crate) fn wr_qp(id: u64) -> usize {
    ((id & !RECV_FLAG) >> 32) as usize
}

pub(crate) fn wr_seq(id: u64) -> u32 {
    id as u32
}

/// Whether request number `k` of a run is signaled: every `cq_mod`-th, and
/// the run's `last` one.
#[inline]
pub(crate) fn signaled(k: u64, cq_mod: u64, last: Option<u64>) -> bool {
    k.is_multiple_of(cq_mod) || Some(k) == last
}

/// One work completion, copied out of the CQ.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub vendor_err: u32,
}

/// PD, one CQ, RC QPs and two buffers (source: local only + remote read;
/// destination: remote write). Teardown order (see `close`): QPs (which
/// flushes every work request), then the CQ, then the buffers' regions,
/// then the PD and the device.
pub(crate) struct Endpoint {
    qps: Vec<GenericQueuePair>,
    /// Per QP: prebuilt send and receive requests (no allocation per post).
    chains: Vec<sys::SendChain>,
    rchains: Vec<sys::RecvChain>,
    /// `None` once closed.
    cq: Option<GenericCompletionQueue>,
    wcs: sys::WcArray,
    pub src: RegBuf,
    pub dst: RegBuf,
    _pd: Arc<ProtectionDomain>,
    pub dev: Device,
    pub slot: usize,
    pub psns: Vec<u32>,
    /// Inline size the QPs accept.
    pub max_inline: u32,
    /// Filled by `connect`.
    pub remote: Option<EndpointInfo>,
    pub path_mtu: u32,
    pub tx_depth: u32,
    pub sl: u8,
    pub tclass: u8,
    /// The buffers' GPU and registration when they are in GPU memory.
    pub mem: Option<fabperf_results::GpuMemory>,
    closed: bool,
}

/// Most requests one `ibv_post_send`/`ibv_post_recv` call carries.
const CHAIN: u32 = 64;

/// The QP attribute value for a path MTU in bytes.
fn mtu_attr(path_mtu: u32) -> Result<Mtu, RdmaError> {
    crate::select::mtu_enum(path_mtu)
        .map(Mtu::from)
        .ok_or_else(|| RdmaError::BadRequest(format!("bad path MTU {path_mtu}")))
}

fn psn_seed(i: usize) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ (std::process::id() << 8) ^ ((i as u32) * 0x9e37)) & 0xff_ffff
}

/// Access of the source buffer (local writes, peers' RDMA reads) and of the destination
/// buffer (peers' RDMA writes too).
fn src_access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteRead
}

fn dst_access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// Two registered host buffers of `len` bytes, the source filled.
fn host_buffers(pd: &Arc<ProtectionDomain>, len: usize) -> Result<(RegBuf, RegBuf), RdmaError> {
    let mut src = RegBuf::new(len).map_err(RdmaError::Setup)?;
    let mut dst = RegBuf::new(len).map_err(RdmaError::Setup)?;
    src.fill(0x5a).map_err(RdmaError::Setup)?;
    let memlock = sys::memlock_limit();
    src.register(pd, src_access()).map_err(|e| {
        RdmaError::Register(register_error(
            e.bytes,
            "source buffer",
            &e.source,
            memlock,
            0,
        ))
    })?;
    dst.register(pd, dst_access()).map_err(|e| {
        RdmaError::Register(register_error(
            e.bytes,
            "destination buffer",
            &e.source,
            memlock,
            src.len(),
        ))
    })?;
    Ok((src, dst))
}

/// Why one way of registering GPU memory failed, in words.
fn gpu_reg_error(how: DeviceReg, dev: &str, e: &sys::RegError) -> String {
    let errno = e.source.raw_os_error();
    match how {
        DeviceReg::DmaBuf if errno == Some(libc::EOPNOTSUPP) => format!(
            "ibv_reg_dmabuf_mr on {dev}: {}: the loaded libibverbs has no ibv_reg_dmabuf_mr \
             (rdma-core 34 or later has it) or {dev}'s provider cannot import dma-bufs (mlx5 \
             can; rxe cannot)",
            e.source
        ),
        DeviceReg::DmaBuf => format!(
            "registering {} bytes of GPU memory as a dma-buf on {dev}: {}",
            e.bytes, e.source
        ),
        DeviceReg::Peermem => format!(
            "ibv_reg_mr of {} bytes of GPU memory on {dev}: {}: without the nvidia_peermem \
             module the RDMA core cannot resolve a GPU address (`modprobe nvidia_peermem`; \
             /sys/module/nvidia_peermem is {})",
            e.bytes,
            e.source,
            if crate::gpu::peermem_loaded() {
                "present"
            } else {
                "absent"
            }
        ),
    }
}

/// Register both GPU buffers one way; on failure neither stays registered (or the one that
/// cannot be deregistered is leaked, never freed).
fn register_gpu_as(
    src: &mut RegBuf,
    dst: &mut RegBuf,
    pd: &Arc<ProtectionDomain>,
    how: DeviceReg,
    dev: &str,
) -> Result<(), String> {
    src.register_device(pd, src_access(), how, dev)
        .map_err(|e| gpu_reg_error(how, dev, &e))?;
    if let Err(e) = dst.register_device(pd, dst_access(), how, dev) {
        let msg = gpu_reg_error(how, dev, &e);
        return Err(match src.deregister() {
            Ok(()) => msg,
            Err(d) => format!("{msg}; {d}"),
        });
    }
    Ok(())
}

/// Register GPU buffers as `reg` asks: dma-buf, peermem, or dma-buf falling back to peermem
/// (`auto`, with the reason as a note).
fn register_gpu(
    src: &mut RegBuf,
    dst: &mut RegBuf,
    pd: &Arc<ProtectionDomain>,
    gpu: &sys::cuda::Gpu,
    reg: GpuReg,
    dev: &str,
) -> Result<(DeviceReg, Option<String>), RdmaError> {
    let err = |m: String| RdmaError::Register(m);
    match reg {
        GpuReg::Dmabuf => {
            if let Some(why) = gpu.dmabuf_missing() {
                return Err(err(format!("--gpu-reg dmabuf: {why}")));
            }
            register_gpu_as(src, dst, pd, DeviceReg::DmaBuf, dev).map_err(err)?;
            Ok((DeviceReg::DmaBuf, None))
        }
        GpuReg::Peermem => {
            register_gpu_as(src, dst, pd, DeviceReg::Peermem, dev).map_err(err)?;
            Ok((DeviceReg::Peermem, None))
        }
        GpuReg::Auto => {
            let why = match gpu.dmabuf_missing() {
                None => match register_gpu_as(src, dst, pd, DeviceReg::DmaBuf, dev) {
                    Ok(()) => return Ok((DeviceReg::DmaBuf, None)),
                    Err(e) => e,
                },
                Some(w) => w,
            };
            if !crate::gpu::peermem_loaded() {
                return Err(err(format!(
                    "no way to register GPU memory with {dev}: dma-buf: {why}; peermem: the \
                     nvidia_peermem module is not loaded (`modprobe nvidia_peermem`); \
                     `fabperf doctor` lists what GPUDirect RDMA needs"
                )));
            }
            register_gpu_as(src, dst, pd, DeviceReg::Peermem, dev)
                .map_err(|e| err(format!("dma-buf: {why}; peermem: {e}")))?;
            Ok((
                DeviceReg::Peermem,
                Some(format!(
                    "dma-buf unavailable ({why}); registered through nvidia_peermem"
                )),
            ))
        }
    }
}

impl Endpoint {
    /// An endpoint with its buffers in host memory.
    #[cfg(test)]
    pub fn new(dev: Device, cfg: EpConfig) -> Result<Endpoint, RdmaError> {
        Endpoint::with_memory(dev, cfg, &MemPlan::Host)
    }

    /// An endpoint with its buffers where `mem` says (host or GPU memory).
    pub fn with_memory(
        dev: Device,
        mut cfg: EpConfig,
        mem: &MemPlan,
    ) -> Result<Endpoint, RdmaError> {
        if let MemPlan::Cuda { .. } = mem {
            // The CPU cannot read GPU memory: nothing is sent inline from it.
            cfg.inline = 0;
            if cfg.rx_depth > 0 && !sys::receives_bypass_cpu(&dev.name) {
                return Err(RdmaError::Setup(format!(
                    "receiving sends into GPU memory on {}: the mlx5 provider writes received \
                     messages of up to 64 bytes into the completion entry and copies them to the \
                     buffer with the CPU, which cannot write GPU memory; start this fabperf \
                     (client, or `fabperf server` for the agent's end) with \
                     MLX5_SCATTER_TO_CQE=0 in its environment (perftest sets the same variable \
                     for its device-memory send tests)",
                    dev.name
                )));
            }
        }
        let setup = |what: &str, e: &dyn std::fmt::Display| {
            RdmaError::Setup(format!("{what} on {}: {e}", dev.name))
        };
        let pd = dev.ctx.alloc_pd().map_err(|e| setup("ibv_alloc_pd", &e))?;
        let cqe = cfg.qps * (cfg.tx_depth + cfg.rx_depth) + 16;
        // ibv_poll_cq (like perftest): the extended-CQ polling of some
        // providers (rdma-core 44's rxe) can hand out a completion twice.
        let mut b = dev.ctx.create_cq_builder();
        b.setup_cqe(cqe);
        let cq: GenericCompletionQueue = b
            .build()
            .map_err(|e| {
                let why = if dev.max_cqe > 0 && cqe > dev.max_cqe {
                    format!(
                        "; {cqe} entries (QPs x (send + receive depth) + 16) exceed the device's \
                         max_cqe {}: use fewer --qps or a smaller --tx-depth",
                        dev.max_cqe
                    )
                } else {
                    String::new()
                };
                setup(
                    &format!("ibv_create_cq ({cqe} entries)"),
                    &format!("{e}{why}"),
                )
            })?
            .into();
        let len = cfg.slot * cfg.qps as usize;
        let (src, dst, gpu_info) = match mem {
            MemPlan::Host => {
                let (src, dst) = host_buffers(&pd, len)?;
                (src, dst, None)
            }
            MemPlan::Cuda { gpu, reg, info } => {
                let mut src = RegBuf::new_device(gpu, len).map_err(RdmaError::Setup)?;
                let mut dst = RegBuf::new_device(gpu, len).map_err(RdmaError::Setup)?;
                src.fill(0x5a).map_err(RdmaError::Setup)?;
                let (how, note) = register_gpu(&mut src, &mut dst, &pd, gpu, *reg, &dev.name)?;
                let info = fabperf_results::GpuMemory {
                    registration: match how {
                        DeviceReg::DmaBuf => "dma-buf",
                        DeviceReg::Peermem => "peermem",
                    }
                    .into(),
                    note,
                    ..info.clone()
                };
                (src, dst, Some(info))
            }
        };
        debug_assert!(src.is_registered() && dst.is_registered());
        let mut qps = Vec::new();
        let mut max_inline = cfg.inline;
        for i in 0..cfg.qps {
            let qp = loop {
                let mut qb = pd.create_qp_builder();
                qb.setup_max_send_wr(cfg.tx_depth)
                    .setup_max_recv_wr(cfg.rx_depth.max(1))
                    .setup_max_send_sge(1)
                    .setup_max_recv_sge(1)
                    .setup_max_inline_data(max_inline)
                    .setup_send_cq(cq.clone())
                    .setup_recv_cq(cq.clone());
                // ibv_post_send (like perftest): the ibv_wr_* path of some
                // providers (rdma-core 44's rxe) reports a full send queue
                // that is not full.
                let built: Result<GenericQueuePair, String> =
                    qb.build().map(Into::into).map_err(|e| e.to_string());
                match built {
                    Ok(q) => break q,
                    // The device may not take that much inline data: halve.
                    Err(_) if max_inline > 0 => max_inline /= 2,
                    Err(e) => {
                        return Err(RdmaError::Setup(qp_create_error(
                            &dev.name,
                            dev.max_qp_wr,
                            &cfg,
                            i,
                            &e,
                        )))
                    }
                }
            };
            qps.push(qp);
        }
        let chains = (0..qps.len())
            .map(|_| sys::SendChain::new(cfg.tx_depth.min(CHAIN) as usize))
            .collect();
        let rchains = (0..qps.len())
            .map(|_| sys::RecvChain::new(cfg.rx_depth.clamp(1, CHAIN) as usize))
            .collect();
        let mut ep = Endpoint {
            qps,
            chains,
            rchains,
            cq: Some(cq),
            wcs: sys::WcArray::default(),
            src,
            dst,
            _pd: pd,
            slot: cfg.slot,
            psns: (0..cfg.qps as usize).map(psn_seed).collect(),
            max_inline,
            remote: None,
            path_mtu: dev.port.active_mtu,
            tx_depth: cfg.tx_depth,
            sl: cfg.sl,
            tclass: cfg.tclass,
            mem: gpu_info,
            closed: false,
            dev,
        };
        let port = ep.dev.port.port;
        for (i, q) in ep.qps.iter_mut().enumerate() {
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::Init)
                .setup_pkey_index(0)
                .setup_port(port)
                .setup_access_flags(
                    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
                );
            if let Err(e) = q.modify(&a) {
                let pkey = pkey0(std::path::Path::new("/sys"), &ep.dev.name, port)
                    .map(|k| format!("P_Key {k}"))
                    .unwrap_or_else(|| "P_Key unreadable".into());
                return Err(RdmaError::Setup(format!(
                    "moving QP {i} on {} port {port} to INIT (P_Key index 0: {pkey}): {e}; the \
                     port's P_Key table must hold a valid key at index 0 (on InfiniBand the \
                     subnet manager's partition setup; `cat /sys/class/infiniband/{}/ports/{port}/pkeys/0`)",
                    ep.dev.name, ep.dev.name
                )));
            }
        }
        Ok(ep)
    }

    /// Destroy the QPs and the CQ and deregister the buffers, in that
    /// order; returns what failed (empty when all went well). Never panics
    /// and never aborts: sideway's destructors assert, so each runs inside
    /// `catch_unwind`, and while the thread is already unwinding (where a
    /// second panic aborts) the QPs and CQ are leaked instead.
    pub fn close(&mut self) -> Vec<String> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        let mut failed = Vec::new();
        let dev = self.dev.name.clone();
        let unwinding = std::thread::panicking();
        let mut leaked_qp = false;
        for (i, qp) in self.qps.drain(..).enumerate() {
            if unwinding {
                std::mem::forget(qp);
                leaked_qp = true;
                continue;
            }
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(qp))).is_err() {
                leaked_qp = true;
                failed.push(format!(
                    "ibv_destroy_qp failed for QP {i} on {dev}; the queue pair stays until the process ends"
                ));
            }
        }
        if let Some(cq) = self.cq.take() {
            if unwinding || leaked_qp {
                // A live QP still uses it; destroying it would fail.
                std::mem::forget(cq);
            } else if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(cq)))
                .is_err()
            {
                failed.push(format!(
                    "ibv_destroy_cq failed on {dev}; the completion queue stays until the process ends"
                ));
            }
        }
        for b in [&mut self.src, &mut self.dst] {
            if let Err(e) = b.deregister() {
                failed.push(e);
            }
        }
        failed
    }

    /// The service level and traffic class QP `q` uses, as the device
    /// reports them.
    pub fn qp_av(&self, q: usize) -> std::io::Result<(u8, u8)> {
        sys::query_qp_av(&self.qps[q])
    }

    pub fn nqps(&self) -> usize {
        self.qps.len()
    }

    /// What the peer needs.
    pub fn info(&self) -> EndpointInfo {
        let d = &self.dev;
        let g = d.addressing.gid.as_ref();
        EndpointInfo {
            device: d.name.clone(),
            ib_port: d.port.port,
            link_layer: d.port.link_layer,
            lid: d.port.lid,
            gid: g.map(|g| g.gid),
            gid_index: g.map(|g| g.index),
            gid_type: g.map(|g| g.kind),
            use_grh: d.addressing.use_grh,
            active_mtu: d.port.active_mtu,
            max_rd_atomic: d.max_rd_atomic,
            slot: self.slot as u64,
            src_addr: self.src.addr(),
            src_rkey: self.src.rkey(),
            dst_addr: self.dst.addr(),
            dst_rkey: self.dst.rkey(),
            qps: self
                .qps
                .iter()
                .zip(&self.psns)
                .map(|(q, &psn)| QpInfo {
                    qpn: q.qp_number(),
                    psn,
                })
                .collect(),
            mem: self.mem.clone(),
        }
    }

    /// Move every QP to RTR and RTS against `remote`.
    pub fn connect(&mut self, remote: &EndpointInfo, path_mtu: u32) -> Result<(), RdmaError> {
        if remote.qps.len() != self.qps.len() {
            return Err(RdmaError::BadRequest(format!(
                "peer has {} QPs, this end {}",
                remote.qps.len(),
                self.qps.len()
            )));
        }
        if remote.link_layer != self.dev.port.link_layer {
            return Err(RdmaError::Connect(format!(
                "link layers differ: this end {} is {}, the peer {} is {}; both ends must be RoCE or both InfiniBand",
                self.dev.name,
                self.dev.port.link_layer.as_str(),
                remote.device,
                remote.link_layer.as_str()
            )));
        }
        let mtu = mtu_attr(path_mtu)?;
        let local = self.info();
        let rd = self.read_depth(remote);
        let av = self.address_vector(&local, remote)?;
        let max_rd = self.dev.max_rd_atomic;
        for (i, q) in self.qps.iter_mut().enumerate() {
            let r = remote.qps[i];
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::ReadyToReceive)
                .setup_path_mtu(mtu)
                .setup_dest_qp_num(r.qpn)
                .setup_rq_psn(r.psn)
                .setup_max_dest_read_atomic(max_rd)
                .setup_min_rnr_timer(12)
                .setup_address_vector(&av);
            q.modify(&a)
                .map_err(|e| RdmaError::Connect(connect_error("RTR", &e, &local, remote)))?;
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::ReadyToSend)
                .setup_sq_psn(self.psns[i])
                .setup_timeout(14)
                .setup_retry_cnt(7)
                .setup_rnr_retry(7)
                .setup_max_read_atomic(rd);
            q.modify(&a)
                .map_err(|e| RdmaError::Connect(connect_error("RTS", &e, &local, remote)))?;
        }
        self.set_connected(remote, path_mtu);
        Ok(())
    }

    /// The address vector towards `remote`: its GID in a GRH (RoCE, with
    /// this end's traffic class) or its LID (InfiniBand), and the service
    /// level.
    fn address_vector(
        &self,
        local: &EndpointInfo,
        remote: &EndpointInfo,
    ) -> Result<AddressHandleAttribute, RdmaError> {
        let mut av = AddressHandleAttribute::new();
        av.setup_port(self.dev.port.port)
            .setup_service_level(self.sl);
        if self.dev.addressing.use_grh {
            let (Some(rg), Some(li)) = (remote.gid, local.gid_index) else {
                return Err(RdmaError::Connect(format!(
                    "RoCE needs a GID on both ends: this end {}, peer {}",
                    local.describe(),
                    remote.describe()
                )));
            };
            av.setup_grh(&Gid::from(rg), 0, li as u8, 64, self.tclass);
        } else {
            av.setup_dest_lid(remote.lid);
        }
        Ok(av)
    }

    /// QP `q`'s number.
    pub fn qp_num(&self, q: usize) -> u32 {
        self.qps[q].qp_number()
    }

    /// Outstanding reads this end may issue: the smaller of both devices'
    /// limits (the peer must have the responder resources for them).
    fn read_depth(&self, remote: &EndpointInfo) -> u8 {
        self.dev.max_rd_atomic.min(remote.max_rd_atomic).max(1)
    }

    /// `--rdma-cm`: move QP `q` to RTR and RTS with the attributes the
    /// connection manager derived for `id` (destination QP, PSNs, path,
    /// GID), keeping fabperf's path MTU and read depth.
    pub fn connect_qp_cm(
        &mut self,
        q: usize,
        id: &sideway::rdmacm::communication_manager::Identifier,
        remote: &EndpointInfo,
        path_mtu: u32,
    ) -> Result<(), RdmaError> {
        let mtu = mtu_attr(path_mtu)?;
        let fail = |stage: &str, e: &dyn std::fmt::Display| {
            RdmaError::Connect(format!(
                "rdma_cm: moving QP {q} on {} to {stage}: {e} (with --rdma-cm the device is the \
                 one the route to the peer leads to; --device must name that device)",
                self.dev.name
            ))
        };
        let mut a = id
            .get_qp_attr(QueuePairState::ReadyToReceive)
            .map_err(|e| fail("RTR (rdma_init_qp_attr)", &e))?;
        a.setup_path_mtu(mtu)
            .setup_max_dest_read_atomic(self.dev.max_rd_atomic);
        if self.sl != 0 || self.tclass != 0 {
            // The CM's path carries service level and traffic class 0
            // (fabperf cannot set the CM id's TOS through sideway): use
            // this end's own address vector, built from the same GIDs.
            let local = self.info();
            a.setup_address_vector(&self.address_vector(&local, remote)?);
        }
        self.qps[q].modify(&a).map_err(|e| fail("RTR", &e))?;
        let mut a = id
            .get_qp_attr(QueuePairState::ReadyToSend)
            .map_err(|e| fail("RTS (rdma_init_qp_attr)", &e))?;
        a.setup_max_read_atomic(self.read_depth(remote));
        self.qps[q].modify(&a).map_err(|e| fail("RTS", &e))?;
        Ok(())
    }

    /// Record the peer once every QP is connected.
    pub fn set_connected(&mut self, remote: &EndpointInfo, path_mtu: u32) {
        self.remote = Some(remote.clone());
        self.path_mtu = path_mtu;
    }

    /// Point later requests at other buffers (addresses and keys) of the
    /// connected peer; the QP connection is unchanged.
    #[cfg(test)]
    pub fn set_remote_buffers(&mut self, remote: &EndpointInfo) {
        if let Some(r) = self.remote.as_mut() {
            r.src_addr = remote.src_addr;
            r.src_rkey = remote.src_rkey;
            r.dst_addr = remote.dst_addr;
            r.dst_rkey = remote.dst_rkey;
        }
    }

    /// Post `n` operations of `size` bytes on QP `qp` (a run of its own:
    /// numbered 1..=n, only the last signaled).
    pub fn post(
        &mut self,
        qp: usize,
        op: Op,
        n: u32,
        size: u32,
        inline: bool,
    ) -> Result<(), RdmaError> {
        self.post_run(qp, op, size, inline, 0, n, n, Some(n as u64))
    }

    /// Post `n` operations on QP `qp` that are requests number
    /// `done + 1 ..= done + n` of this QP; request k is signaled as
    /// [`signaled`] says and carries k in its wr_id.
    #[allow(clippy::too_many_arguments)]
    pub fn post_run(
        &mut self,
        qp: usize,
        op: Op,
        size: u32,
        inline: bool,
        done: u64,
        n: u32,
        cq_mod: u32,
        last: Option<u64>,
    ) -> Result<(), RdmaError> {
        let remote = self
            .remote
            .as_ref()
            .ok_or_else(|| RdmaError::Setup("posting before connect".into()))?;
        let off = qp * self.slot;
        let rslot = qp as u64 * remote.slot;
        let (chain_op, buf) = match op {
            Op::Write => (
                sys::ChainOp::Write(remote.dst_rkey, remote.dst_addr + rslot),
                &self.src,
            ),
            Op::Send => (sys::ChainOp::Send, &self.src),
            Op::Read => (
                sys::ChainOp::Read(remote.src_rkey, remote.src_addr + rslot),
                &self.dst,
            ),
        };
        let chain = &mut self.chains[qp];
        chain.prepare(chain_op, buf, off, size, inline);
        let cq_mod = cq_mod.max(1) as u64;
        let mut first = done;
        let end = done + n as u64;
        while first < end {
            let m = (end - first).min(chain.capacity() as u64) as usize;
            let base = first;
            chain
                .post(&mut self.qps[qp], buf, m, |i| {
                    let k = base + i as u64 + 1;
                    (wr_id(qp, k as u32), signaled(k, cq_mod, last))
                })
                .map_err(|rc| {
                    RdmaError::Setup(format!(
                        "posting {m} {} request(s) on QP {qp} of {}: {} (send queue depth {})",
                        op.as_str(),
                        self.dev.name,
                        std::io::Error::from_raw_os_error(rc),
                        self.tx_depth
                    ))
                })?;
            first += m as u64;
        }
        Ok(())
    }

    /// Post `n` receives of a whole slot on QP `qp`.
    pub fn post_recvs(&mut self, qp: usize, n: u32) -> Result<(), RdmaError> {
        let off = qp * self.slot;
        let chain = &mut self.rchains[qp];
        chain.prepare(&self.dst, off, self.slot as u32, RECV_FLAG | wr_id(qp, 1));
        let mut left = n as usize;
        while left > 0 {
            let m = left.min(chain.capacity());
            chain.post(&mut self.qps[qp], &self.dst, m).map_err(|rc| {
                RdmaError::Setup(format!(
                    "posting {m} receive(s) on QP {qp}: {}",
                    std::io::Error::from_raw_os_error(rc)
                ))
            })?;
            left -= m;
        }
        Ok(())
    }

    /// Poll the CQ until it is empty (or a few batches); completions are
    /// copied to `out`. Returns how many.
    #[inline]
    pub fn poll(&mut self, out: &mut Vec<Wc>) -> Result<usize, RdmaError> {
        out.clear();
        let Some(cq) = &self.cq else {
            return Err(RdmaError::Setup("polling a closed endpoint".into()));
        };
        for _ in 0..8 {
            let n = sys::poll_cq(cq, &mut self.wcs, out).map_err(|e| {
                RdmaError::Setup(format!(
                    "polling the completion queue: {}",
                    std::io::Error::from_raw_os_error(e)
                ))
            })?;
            if n < sys::POLL_BATCH {
                break;
            }
        }
        Ok(out.len())
    }

    /// The error for a failed completion.
    pub fn completion_error(&self, wc: &Wc, what: &str) -> RdmaError {
        let text = sys::wc_status_str(wc.status);
        let hint = wc_hint(wc.status);
        let qp = wr_qp(wc.wr_id);
        let local = self.info();
        let pair = match &self.remote {
            Some(r) => format!(" This end: {}; peer: {}.", local.describe(), r.describe()),
            None => String::new(),
        };
        RdmaError::Completion(format!(
            "{what} on QP {qp} completed with error: {text} (status {}, vendor error 0x{:x}){}{}{pair}",
            wc.status,
            wc.vendor_err,
            if hint.is_empty() { "" } else { ": " },
            hint
        ))
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for m in self.close() {
            eprintln!("fabperf: {m}");
        }
    }
}

/// The message for a failed `ibv_create_qp`: it names the limit that was
/// exceeded when one was, and blames nothing it cannot tell.
fn qp_create_error(dev: &str, max_qp_wr: u32, cfg: &EpConfig, i: u32, e: &str) -> String {
    let what = format!(
        "ibv_create_qp for QP {i} on {dev} (send depth {}, receive depth {}): {e}",
        cfg.tx_depth, cfg.rx_depth
    );
    let max = max_qp_wr;
    if max > 0 && cfg.tx_depth > max {
        format!(
            "{what}; --tx-depth {} exceeds the device's max_qp_wr {max}: lower --tx-depth",
            cfg.tx_depth
        )
    } else if max > 0 && cfg.rx_depth > max {
        format!(
            "{what}; the receive depth {} (max(--tx-depth, 512) for send) exceeds the device's \
             max_qp_wr {max}: lower --tx-depth",
            cfg.rx_depth
        )
    } else if e.contains("Cannot allocate memory") || e.contains("os error 12") {
        format!(
            "{what}; the device or the locked-memory limit ran out of room for the queues: use \
             fewer --qps or a smaller --tx-depth, or raise `ulimit -l`"
        )
    } else {
        what
    }
}

/// The message for a QP that cannot reach RTR/RTS.
pub(crate) fn connect_error(
    stage: &str,
    err: &dyn std::fmt::Display,
    local: &EndpointInfo,
    remote: &EndpointInfo,
) -> String {
    let mut m = format!(
        "failed to modify QP to {stage}: {err}. This end: {}; peer: {}.",
        local.describe(),
        remote.describe()
    );
    if local.use_grh || remote.use_grh {
        m.push_str(
            " Both ends must use the same GID type with reachable addresses: use the RoCE v2 GID \
             that carries the IPv4 address of the tested interface (client --gid-index, agent \
             --rdma-gid-index; `show_gids` or /sys/class/infiniband/DEV/ports/1/gids lists them)",
        );
        if local.gid_type != remote.gid_type {
            m.push_str(&format!(
                "; here the GID types differ ({} vs {})",
                local.gid_type.map(|k| k.as_str()).unwrap_or("?"),
                remote.gid_type.map(|k| k.as_str()).unwrap_or("?")
            ));
        }
    } else {
        m.push_str(" On InfiniBand check that both ports are ACTIVE with a LID assigned by the subnet manager.");
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::LinkLayer;

    #[test]
    fn wr_id_encoding() {
        let id = wr_id(5, 100);
        assert_eq!(wr_qp(id), 5);
        assert_eq!(wr_seq(id), 100);
        assert!(signaled(200, 100, None) && !signaled(150, 100, None));
        assert!(signaled(150, 100, Some(150)));
        let r = RECV_FLAG | wr_id(3, 1);
        assert_eq!(wr_qp(r), 3);
        assert!(r & RECV_FLAG != 0);
    }

    #[test]
    fn qp_create_failure_blames_only_what_it_can_tell() {
        let cfg = EpConfig {
            qps: 1,
            slot: 4096,
            tx_depth: 128,
            rx_depth: 512,
            inline: 0,
            sl: 0,
            tclass: 0,
        };
        let e = "Invalid argument (os error 22)";
        let m = qp_create_error("mlx5_0", 64, &cfg, 0, e);
        assert!(
            m.contains("--tx-depth 128 exceeds the device's max_qp_wr 64"),
            "{m}"
        );
        let m = qp_create_error("mlx5_0", 256, &cfg, 0, e);
        assert!(
            m.contains("receive depth 512") && m.contains("max_qp_wr 256"),
            "{m}"
        );
        let m = qp_create_error(
            "mlx5_0",
            32768,
            &cfg,
            3,
            "Cannot allocate memory (os error 12)",
        );
        assert!(
            m.contains("QP 3 on mlx5_0") && m.contains("ulimit -l"),
            "{m}"
        );
        // Nothing known to blame: no advice that could mislead.
        let m = qp_create_error("mlx5_0", 32768, &cfg, 0, e);
        assert!(!m.contains("--tx-depth") && m.ends_with(e), "{m}");
    }

    #[test]
    fn pkey_is_read_from_sysfs() {
        let root = std::env::temp_dir().join(format!("fabperf-pkey-{}", std::process::id()));
        let d = root.join("class/infiniband/mlx5_0/ports/1/pkeys");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("0"), "0xffff\n").unwrap();
        assert_eq!(pkey0(&root, "mlx5_0", 1).as_deref(), Some("0xffff"));
        assert_eq!(pkey0(&root, "mlx5_0", 2), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn op_parsing() {
        assert_eq!("read".parse::<Op>().unwrap(), Op::Read);
        assert!("atomic"
            .parse::<Op>()
            .unwrap_err()
            .contains("write, read or send"));
    }

    #[test]
    fn rtr_failure_names_both_ends_and_suggests_roce_v2() {
        let mk = |dev: &str, idx: u32, kind: GidKind, gid: &str| EndpointInfo {
            device: dev.into(),
            ib_port: 1,
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            gid: Some(gid.parse().unwrap()),
            gid_index: Some(idx),
            gid_type: Some(kind),
            use_grh: true,
            active_mtu: 1024,
            max_rd_atomic: 16,
            slot: 4096,
            src_addr: 0,
            src_rkey: 0,
            dst_addr: 0,
            dst_rkey: 0,
            qps: vec![],
            mem: None,
        };
        let a = mk("mlx5_0", 0, GidKind::RoceV1, "fe80::1");
        let b = mk("mlx5_1", 3, GidKind::RoceV2, "::ffff:10.0.0.2");
        let m = connect_error("RTR", &"Connection timed out", &a, &b);
        assert!(m.contains("GID index 0 (RoCE v1) fe80::1"), "{m}");
        assert!(m.contains("GID index 3 (RoCE v2) ::ffff:10.0.0.2"), "{m}");
        assert!(m.contains("RoCE v2 GID"), "{m}");
        assert!(m.contains("differ"), "{m}");
        assert!(m.contains("Connection timed out"));
    }
}
