//! The endpoint: PD, CQ, RC queue pairs and two registered buffers, with
//! the few operations the tests need (connect, post, poll, close), the
//! work-request numbering, and the errors of QP creation and connection.

use super::device::{pkey0, Device};
use super::memory::{host_buffers, register_gpu};
use super::Op;
use crate::error::{wc_hint, RdmaError};
use crate::gpu::MemPlan;
use crate::msg::{EndpointInfo, QpInfo};
use crate::sys::{self, DeviceReg, RegBuf};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, QueuePair, QueuePairAttribute, QueuePairState,
};
use sideway::ibverbs::AccessFlags;
use std::sync::Arc;

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
    use crate::select::{GidKind, LinkLayer};

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
