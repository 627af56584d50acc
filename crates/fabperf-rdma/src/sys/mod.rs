//! Every `unsafe` block of fabperf-rdma lives in this module and its child `cuda` (the CUDA
//! driver API, loaded at run time); the rest of the crate uses the safe API below. Each block
//! says why it is sound. The module is private to the crate, and its API is sound on its own:
//! a work-request chain can only be posted together with a borrow of the
//! very buffer it was prepared for, so the buffer is alive for the call
//! (an inline send copies from it then; a buffer in GPU memory is never sent inline, as the CPU
//! cannot read it), and a buffer is deregistered
//! before its memory is freed (or leaked when deregistration fails), so
//! the NIC never reaches freed memory through it.
//!
//! What needs `unsafe`: registering and deregistering memory the NIC reads
//! and writes behind the compiler's back (`ibv_reg_mr`, `ibv_reg_dmabuf_mr` for GPU memory
//! exported as a dma-buf, `ibv_dereg_mr`),
//! handing buffer addresses to work requests (`SendChain`, `RecvChain`:
//! prebuilt `ibv_post_send`/`ibv_post_recv` chains), reading bytes the
//! peer's RDMA writes change (volatile loads), reading a QP's address
//! vector back (`ibv_query_qp`), the CUDA driver (`cuda`) and plain C calls
//! (`ibv_wc_status_str`, `sched_*`).
//!
//! `ibv_reg_dmabuf_mr` comes from `rdma-mummy-sys` (the raw binding under `sideway`, which
//! loads libibverbs at run time and answers EOPNOTSUPP when the loaded libibverbs lacks the
//! symbol, i.e. rdma-core before 34); sideway 0.4.3 wraps it too
//! (`ProtectionDomain::reg_dmabuf_mr`), but its memory region ignores a failed deregistration,
//! so fabperf registers and deregisters itself as it does for host memory.

pub(crate) mod cuda;

use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Page size used to align registered buffers.
pub const PAGE: usize = 4096;

/// Source of buffer identities (see `RegBuf::id`).
static NEXT_BUF_ID: AtomicU64 = AtomicU64::new(1);

/// A registered memory region: the raw `ibv_mr` and the protection domain
/// it belongs to (kept alive until the region is deregistered).
struct Mr {
    mr: NonNull<rdma_mummy_sys::ibv_mr>,
    _pd: Arc<ProtectionDomain>,
}

/// Where a buffer's bytes live.
enum Backing {
    /// Host memory from the global allocator: `ptr` points to `layout.size()` bytes.
    Host { ptr: NonNull<u8>, layout: Layout },
    /// GPU memory (`cuMemAlloc`); `None` once leaked or freed.
    Device(Option<cuda::DeviceMem>),
}

/// How GPU memory is registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceReg {
    /// Exported as a dma-buf and registered with `ibv_reg_dmabuf_mr`.
    DmaBuf,
    /// `ibv_reg_mr` on the device pointer, which the nvidia_peermem module resolves.
    Peermem,
}

/// A zeroed, page-aligned buffer (host memory, or GPU memory) registered as one memory region.
///
/// Invariants: the backing memory (`len()` bytes at `addr()`) is owned by this value alone;
/// the memory region (when registered) covers exactly that range. The memory is freed only once
/// no region covers it: `ibv_dereg_mr`'s result is checked, and when it
/// fails the memory is leaked (`leaked`) instead of being freed under a
/// NIC that may still write it. Work requests name a buffer by its `id`,
/// which no other buffer ever has. GPU memory is never read or written by the CPU through a
/// pointer: fills and single bytes go through the CUDA driver, and it is never sent inline.
pub(crate) struct RegBuf {
    backing: Backing,
    len: usize,
    addr: u64,
    mr: Option<Mr>,
    id: u64,
    leaked: bool,
    /// GPU memory may take receives: the provider places received bytes by DMA only (see
    /// `receives_bypass_cpu`).
    device_receives: bool,
    /// The dma-buf the region was registered from (kept open while it is registered).
    _dmabuf: Option<std::os::fd::OwnedFd>,
}

// SAFETY: RegBuf owns its allocation exclusively (like a Box<[u8]>), and
// the ibv_mr handle is only used by the owner (libibverbs objects may be
// used from any thread). Moving it to another thread moves that ownership.
unsafe impl Send for RegBuf {}

/// Why `ibv_reg_mr` failed.
#[derive(Debug)]
pub(crate) struct RegError {
    pub bytes: usize,
    pub source: std::io::Error,
}

impl RegBuf {
    /// Allocate `len` zeroed bytes of host memory (rounded up to whole pages, at least one).
    pub fn new(len: usize) -> Result<RegBuf, String> {
        let size = len.max(1).div_ceil(PAGE) * PAGE;
        let layout = Layout::from_size_align(size, PAGE)
            .map_err(|e| format!("buffer of {size} bytes: {e}"))?;
        // SAFETY: `layout` has a non-zero size (at least one page).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| format!("out of memory allocating a {size}-byte buffer"))?;
        Ok(RegBuf {
            addr: ptr.as_ptr() as u64,
            backing: Backing::Host { ptr, layout },
            len: size,
            mr: None,
            id: NEXT_BUF_ID.fetch_add(1, Ordering::Relaxed),
            leaked: false,
            device_receives: false,
            _dmabuf: None,
        })
    }

    /// Allocate `len` zeroed bytes of memory on `gpu` (rounded up to 64 KiB).
    pub fn new_device(gpu: &Arc<cuda::Gpu>, len: usize) -> Result<RegBuf, String> {
        let mem = gpu.alloc(len)?;
        Ok(RegBuf {
            addr: mem.addr(),
            len: mem.len(),
            backing: Backing::Device(Some(mem)),
            mr: None,
            id: NEXT_BUF_ID.fetch_add(1, Ordering::Relaxed),
            leaked: false,
            device_receives: false,
            _dmabuf: None,
        })
    }

    /// True for host memory (the CPU can read it; page placement applies).
    pub fn is_host(&self) -> bool {
        matches!(self.backing, Backing::Host { .. })
    }

    fn keep_mr(
        &mut self,
        mr: *mut rdma_mummy_sys::ibv_mr,
        pd: &Arc<ProtectionDomain>,
    ) -> Result<(), RegError> {
        match NonNull::new(mr) {
            Some(mr) => {
                self.mr = Some(Mr {
                    mr,
                    _pd: Arc::clone(pd),
                });
                Ok(())
            }
            None => Err(RegError {
                bytes: self.len(),
                source: std::io::Error::last_os_error(),
            }),
        }
    }

    /// Register the whole buffer with `pd` (once). Host memory only; GPU memory goes through
    /// `register_device`.
    pub fn register(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        access: AccessFlags,
    ) -> Result<(), RegError> {
        assert!(self.mr.is_none(), "buffer registered twice");
        let Backing::Host { ptr, .. } = &self.backing else {
            return Err(RegError {
                bytes: self.len(),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        let bits: i32 = access.into();
        // SAFETY: the PD handle is valid while `pd` lives (the Arc is kept
        // in `Mr` until deregistration); the pointer is valid for
        // `self.len()` bytes for as long as `self` lives, and the memory is
        // freed only after a successful `ibv_dereg_mr` (see `deregister`).
        let mr = unsafe {
            rdma_mummy_sys::ibv_reg_mr(pd.pd().as_ptr(), ptr.as_ptr().cast(), self.len(), bits)
        };
        self.keep_mr(mr, pd)
    }

    /// Register a GPU-memory buffer with `pd` (once), as a dma-buf or through peermem; `device`
    /// is the RDMA device of `pd` (it decides whether receives may land in GPU memory).
    pub fn register_device(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        access: AccessFlags,
        how: DeviceReg,
        device: &str,
    ) -> Result<(), RegError> {
        assert!(self.mr.is_none(), "buffer registered twice");
        let bits: i32 = access.into();
        let Backing::Device(Some(mem)) = &self.backing else {
            return Err(RegError {
                bytes: self.len(),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        let mr = match how {
            DeviceReg::DmaBuf => {
                let (fd, offset) = mem.export_dmabuf().map_err(|e| RegError {
                    bytes: self.len,
                    source: std::io::Error::other(e),
                })?;
                use std::os::fd::AsRawFd;
                // SAFETY: the PD handle is valid while `pd` lives; `fd` is a dma-buf exporting
                // this allocation's pages, `offset` the allocation's place in it, and the
                // allocation outlives the region (freed only after a successful
                // `ibv_dereg_mr`); iova = the device address, so work requests name bytes by
                // their device addresses. The kernel takes its own reference on the dma-buf.
                let mr = unsafe {
                    rdma_mummy_sys::ibv_reg_dmabuf_mr(
                        pd.pd().as_ptr(),
                        offset,
                        self.len,
                        self.addr,
                        fd.as_raw_fd(),
                        bits,
                    )
                };
                if mr.is_null() {
                    // errno before the descriptor's close can change it.
                    let source = std::io::Error::last_os_error();
                    drop(fd);
                    return Err(RegError {
                        bytes: self.len,
                        source,
                    });
                }
                self._dmabuf = Some(fd);
                mr
            }
            // SAFETY: as for host memory: the address range is this live allocation; the
            // kernel resolves device addresses through nvidia_peermem (or refuses with an
            // error), and the CPU never touches the range through the region.
            DeviceReg::Peermem => unsafe {
                rdma_mummy_sys::ibv_reg_mr(
                    pd.pd().as_ptr(),
                    self.addr as *mut std::ffi::c_void,
                    self.len,
                    bits,
                )
            },
        };
        self.keep_mr(mr, pd)?;
        self.device_receives = receives_bypass_cpu(device);
        Ok(())
    }

    /// Deregister the memory region (no-op when not registered). On
    /// failure the NIC may still reach the memory, so it will never be
    /// freed; the error says so.
    pub fn deregister(&mut self) -> Result<(), String> {
        let Some(mr) = self.mr.take() else {
            return Ok(());
        };
        // SAFETY: `mr` came from ibv_reg_mr and is deregistered exactly
        // once (it was just taken out of `self`).
        let rc = unsafe { rdma_mummy_sys::ibv_dereg_mr(mr.mr.as_ptr()) };
        if rc == 0 {
            return Ok(());
        }
        self.leaked = true;
        // Keep the PD referenced too: the region still lives in it.
        std::mem::forget(mr);
        Err(format!(
            "ibv_dereg_mr of a {}-byte buffer failed: {}; the buffer is leaked rather than freed \
             while the device may still write it",
            self.len(),
            std::io::Error::from_raw_os_error(rc.abs())
        ))
    }

    /// The identity work-request chains check (never reused).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn is_registered(&self) -> bool {
        self.mr.is_some()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a registered region's ibv_mr stays valid until deregistered.
        self.mr
            .as_ref()
            .map(|m| unsafe { m.mr.as_ref() }.lkey)
            .unwrap_or(0)
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        self.mr
            .as_ref()
            .map(|m| unsafe { m.mr.as_ref() }.rkey)
            .unwrap_or(0)
    }

    fn check(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len()),
            "buffer access {off}+{len} outside {} bytes",
            self.len()
        );
    }

    /// Set every byte to `v`.
    pub fn fill(&mut self, v: u8) -> Result<(), String> {
        let n = self.len();
        self.fill_range(0, n, v)
    }

    /// Set bytes `off..off+len` to `v`.
    pub fn fill_range(&mut self, off: usize, len: usize, v: u8) -> Result<(), String> {
        self.check(off, len);
        match &self.backing {
            // SAFETY: in bounds (checked); `&mut self` excludes Rust borrows, and the caller
            // only refills when no work request targets the range.
            Backing::Host { ptr, .. } => {
                unsafe { std::ptr::write_bytes(ptr.as_ptr().add(off), v, len) };
                Ok(())
            }
            Backing::Device(Some(m)) => m.fill(off, len, v),
            Backing::Device(None) => Err("GPU buffer already released".into()),
        }
    }

    /// Store one byte (volatile: the NIC may read it at any time).
    pub fn store(&mut self, off: usize, v: u8) {
        self.check(off, 1);
        match &self.backing {
            // SAFETY: in bounds (checked); a single-byte volatile store cannot
            // tear and the NIC only reads this memory concurrently.
            Backing::Host { ptr, .. } => unsafe {
                std::ptr::write_volatile(ptr.as_ptr().add(off), v)
            },
            Backing::Device(m) => {
                if let Err(e) = m
                    .as_ref()
                    .ok_or("released".to_string())
                    .and_then(|m| m.store(off, v))
                {
                    panic!("storing into GPU memory: {e}");
                }
            }
        }
    }

    /// Load one byte the peer's RDMA write may change at any moment.
    #[inline]
    pub fn load(&self, off: usize) -> u8 {
        debug_assert!(off < self.len());
        let off = off.min(self.len() - 1);
        match &self.backing {
            // SAFETY: in bounds (clamped); a volatile single-byte load is the
            // way to observe memory written by a device without the compiler
            // caching it, and a byte cannot tear.
            Backing::Host { ptr, .. } => unsafe { std::ptr::read_volatile(ptr.as_ptr().add(off)) },
            Backing::Device(m) => match m
                .as_ref()
                .ok_or("released".to_string())
                .and_then(|m| m.load(off))
            {
                Ok(v) => v,
                Err(e) => panic!("loading from GPU memory: {e}"),
            },
        }
    }
}

/// Whether a provider places received bytes only by DMA, so that receives may land in GPU
/// memory: mlx5 writes received messages of up to 64 bytes into the completion entry and copies
/// them to the buffer with the CPU ("scatter to CQE") unless `MLX5_SCATTER_TO_CQE=0` is set in
/// the environment when the queue pairs are created (what perftest does for device memory).
pub(crate) fn receives_bypass_cpu(device: &str) -> bool {
    let driver = std::fs::read_link(format!("/sys/class/infiniband/{device}/device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if driver.as_deref() != Some("mlx5_core") {
        return true;
    }
    std::env::var("MLX5_SCATTER_TO_CQE").as_deref() == Ok("0")
}

impl Drop for RegBuf {
    fn drop(&mut self) {
        // Normally `Endpoint::close` deregistered already and reported
        // failures; this is the fallback (e.g. an early error return).
        if let Err(e) = self.deregister() {
            eprintln!("fabperf: {e}");
        }
        match &mut self.backing {
            Backing::Host { ptr, layout } => {
                if !self.leaked {
                    // SAFETY: `ptr` was allocated with `layout` in `new` and is freed
                    // exactly once, here, after the memory region is gone.
                    unsafe { std::alloc::dealloc(ptr.as_ptr(), *layout) }
                }
            }
            Backing::Device(m) => {
                if let Some(m) = m.take() {
                    if self.leaked {
                        m.leak();
                    } else if let Err(e) = m.free() {
                        eprintln!("fabperf: freeing a GPU buffer: {e}");
                    }
                }
            }
        }
    }
}

/// What a prepared send chain does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChainOp {
    /// Two-sided send from the local buffer.
    Send,
    /// RDMA write from the local buffer to `(rkey, remote address)`.
    Write(u32, u64),
    /// RDMA read from `(rkey, remote address)` into the local buffer.
    Read(u32, u64),
}

/// Work-request types a `Chain` can hold.
///
/// # Safety
/// Implementors must be plain C structs for which all-zero bytes are a
/// valid value (integers, raw pointers, unions of those).
unsafe trait ChainWr {
    fn link(&mut self, sge: *mut rdma_mummy_sys::ibv_sge, next: *mut Self);
    fn next_mut(&mut self) -> &mut *mut Self;
}

// SAFETY: ibv_send_wr is a C struct of integers, raw pointers and unions
// of those.
unsafe impl ChainWr for rdma_mummy_sys::ibv_send_wr {
    fn link(&mut self, sge: *mut rdma_mummy_sys::ibv_sge, next: *mut Self) {
        self.sg_list = sge;
        self.num_sge = 1;
        self.next = next;
    }
    fn next_mut(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

// SAFETY: as above.
unsafe impl ChainWr for rdma_mummy_sys::ibv_recv_wr {
    fn link(&mut self, sge: *mut rdma_mummy_sys::ibv_sge, next: *mut Self) {
        self.sg_list = sge;
        self.num_sge = 1;
        self.next = next;
    }
    fn next_mut(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

/// Work requests built once and posted many times with one
/// `ibv_post_send`/`ibv_post_recv` each (what perftest does with its
/// `ctx->wr`), so the measuring loops allocate nothing per post. sideway's
/// post guard builds fresh vectors (and copies inline data into a fresh
/// `Vec`) on every call.
///
/// Invariants: `wrs[i]` has one sge, `sges[i]`, and `wrs[i].next` points
/// to `wrs[i + 1]` (null for the last); both live in boxed slices that are
/// never reallocated, so the pointers stay valid when the value moves.
struct Chain<W: ChainWr> {
    wrs: Box<[W]>,
    sges: Box<[rdma_mummy_sys::ibv_sge]>,
}

// SAFETY: the raw pointers inside point only into this value's own boxed
// slices (moved along with it) and, once prepared, at registered buffer
// memory that the NIC may access from any thread; nothing is thread-bound.
unsafe impl<W: ChainWr> Send for Chain<W> {}

impl<W: ChainWr> Chain<W> {
    fn new(cap: usize) -> Chain<W> {
        let cap = cap.max(1);
        // SAFETY: ChainWr types and ibv_sge are valid when all-zero (null
        // pointers, zero integers).
        let mut wrs: Box<[W]> = (0..cap).map(|_| unsafe { std::mem::zeroed() }).collect();
        // SAFETY: as above.
        let mut sges: Box<[rdma_mummy_sys::ibv_sge]> =
            (0..cap).map(|_| unsafe { std::mem::zeroed() }).collect();
        let wp = wrs.as_mut_ptr();
        let sp = sges.as_mut_ptr();
        for (i, w) in wrs.iter_mut().enumerate() {
            // Pointer arithmetic only (no dereference): i and i + 1 are
            // within (or one past) the slices.
            let next = if i + 1 < cap {
                wp.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
            w.link(sp.wrapping_add(i), next);
        }
        Chain { wrs, sges }
    }

    /// Point every sge at `len` bytes of `buf` from `off`.
    fn point(&mut self, buf: &RegBuf, off: usize, len: u32) {
        buf.check(off, len as usize);
        for s in self.sges.iter_mut() {
            s.addr = buf.addr() + off as u64;
            s.length = len;
            s.lkey = buf.lkey();
        }
    }

    /// Call `post` with the head of requests `0..n` (n ≤ capacity), the
    /// chain cut after request n - 1 for the call.
    fn post_cut(&mut self, n: usize, post: impl FnOnce(*mut W) -> i32) -> Result<(), i32> {
        if n == 0 {
            return Ok(());
        }
        assert!(
            n <= self.wrs.len(),
            "posting {n} of a {}-request chain",
            self.wrs.len()
        );
        let saved = *self.wrs[n - 1].next_mut();
        *self.wrs[n - 1].next_mut() = std::ptr::null_mut();
        let rc = post(self.wrs.as_mut_ptr());
        *self.wrs[n - 1].next_mut() = saved;
        if rc == 0 {
            Ok(())
        } else {
            Err(rc)
        }
    }
}

/// What a chain was prepared with: the buffer's identity, then the
/// operation, address, length and inline flag.
type SendKey = (u64, ChainOp, u64, u32, bool);

/// Send work requests for one QP (see `Chain`). `prepare` is the only way
/// to set addresses, and it bounds-checks them against a registered
/// `RegBuf`; `post` takes that same buffer again (checked by identity), so
/// the buffer is borrowed, hence alive, while the provider reads it.
pub(crate) struct SendChain {
    chain: Chain<rdma_mummy_sys::ibv_send_wr>,
    prepared: Option<SendKey>,
}

impl SendChain {
    /// A chain of `cap` (at least 1) requests, not yet prepared.
    pub fn new(cap: usize) -> SendChain {
        SendChain {
            chain: Chain::new(cap),
            prepared: None,
        }
    }

    /// Most requests one `post` takes.
    pub fn capacity(&self) -> usize {
        self.chain.wrs.len()
    }

    /// Point every request at `len` bytes of `buf` from `off` (the source
    /// of a send/write, the destination of a read) and set the operation.
    /// Inline requests (send/write only) let the provider copy the bytes at
    /// post time. Cheap when nothing changed since the last call.
    pub fn prepare(&mut self, op: ChainOp, buf: &RegBuf, off: usize, len: u32, inline: bool) {
        buf.check(off, len as usize);
        // The provider copies inline data with the CPU: never from GPU memory.
        let inline = inline && !matches!(op, ChainOp::Read(..)) && buf.is_host();
        let key = (buf.id(), op, buf.addr() + off as u64, len, inline);
        if self.prepared == Some(key) {
            return;
        }
        use rdma_mummy_sys::ibv_wr_opcode as opc;
        let (opcode, remote) = match op {
            ChainOp::Send => (opc::IBV_WR_SEND, None),
            ChainOp::Write(rkey, raddr) => (opc::IBV_WR_RDMA_WRITE, Some((rkey, raddr))),
            ChainOp::Read(rkey, raddr) => (opc::IBV_WR_RDMA_READ, Some((rkey, raddr))),
        };
        self.chain.point(buf, off, len);
        for w in self.chain.wrs.iter_mut() {
            w.opcode = opcode;
            if let Some((rkey, raddr)) = remote {
                w.wr.rdma = rdma_mummy_sys::rdma_t {
                    remote_addr: raddr,
                    rkey,
                };
            }
        }
        self.prepared = Some(key);
    }

    /// Post requests `0..n` (n ≤ capacity) on `qp` in one call; `id(i)`
    /// gives request i's wr_id and whether it is signaled. `buf` must be
    /// the registered buffer the chain was prepared with (EINVAL if not).
    #[inline]
    pub fn post(
        &mut self,
        qp: &mut sideway::ibverbs::queue_pair::GenericQueuePair,
        buf: &RegBuf,
        n: usize,
        mut id: impl FnMut(usize) -> (u64, bool),
    ) -> Result<(), i32> {
        use sideway::ibverbs::queue_pair::QueuePair;
        let Some((buf_id, _, _, _, inline)) = self.prepared else {
            return Err(libc::EINVAL);
        };
        if buf_id != buf.id() || !buf.is_registered() {
            return Err(libc::EINVAL);
        }
        let base = if inline {
            rdma_mummy_sys::ibv_send_flags::IBV_SEND_INLINE.0
        } else {
            0
        };
        for (i, w) in self.chain.wrs.iter_mut().take(n).enumerate() {
            let (wr_id, signaled) = id(i);
            w.wr_id = wr_id;
            w.send_flags = if signaled {
                base | rdma_mummy_sys::ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                base
            };
        }
        self.chain.post_cut(n, |head| {
            let mut bad: *mut rdma_mummy_sys::ibv_send_wr = std::ptr::null_mut();
            // SAFETY: the QP handle is valid while `qp` is borrowed; the
            // chain is well formed (Chain invariants, cut at n - 1) and
            // every sge points inside `buf` (bounds checked in `prepare`,
            // identity checked above), which is registered and borrowed for
            // the call, so an inline copy reads live memory. After the call
            // the device reaches the memory only through the region, which
            // is deregistered before the memory is freed. The provider reads
            // the requests during the call and keeps no pointer to them.
            unsafe { rdma_mummy_sys::ibv_post_send(qp.qp().as_ptr(), head, &mut bad) }
        })
    }
}

/// Receive requests for one QP (see `Chain`).
pub(crate) struct RecvChain {
    chain: Chain<rdma_mummy_sys::ibv_recv_wr>,
    /// Buffer identity, address, length, wr_id.
    prepared: Option<(u64, u64, u32, u64)>,
}

impl RecvChain {
    /// A chain of `cap` (at least 1) receives, not yet prepared.
    pub fn new(cap: usize) -> RecvChain {
        RecvChain {
            chain: Chain::new(cap),
            prepared: None,
        }
    }

    pub fn capacity(&self) -> usize {
        self.chain.wrs.len()
    }

    /// Every receive lands in `len` bytes of `buf` from `off` and carries `wr_id`.
    pub fn prepare(&mut self, buf: &RegBuf, off: usize, len: u32, wr_id: u64) {
        buf.check(off, len as usize);
        let key = (buf.id(), buf.addr() + off as u64, len, wr_id);
        if self.prepared == Some(key) {
            return;
        }
        self.chain.point(buf, off, len);
        for w in self.chain.wrs.iter_mut() {
            w.wr_id = wr_id;
        }
        self.prepared = Some(key);
    }

    /// Post receives `0..n` (n ≤ capacity) on `qp` in one call; `buf` must
    /// be the registered buffer the chain was prepared with.
    #[inline]
    pub fn post(
        &mut self,
        qp: &mut sideway::ibverbs::queue_pair::GenericQueuePair,
        buf: &RegBuf,
        n: usize,
    ) -> Result<(), i32> {
        use sideway::ibverbs::queue_pair::QueuePair;
        match self.prepared {
            Some((id, ..)) if id == buf.id() && buf.is_registered() => {}
            _ => return Err(libc::EINVAL),
        }
        // A provider that may copy received bytes with the CPU never gets GPU memory.
        if !buf.is_host() && !buf.device_receives {
            return Err(libc::EINVAL);
        }
        self.chain.post_cut(n, |head| {
            let mut bad: *mut rdma_mummy_sys::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: as in `SendChain::post`; the receive buffer is
            // registered with local write access, and the device reaches it
            // later only through that region.
            unsafe { rdma_mummy_sys::ibv_post_recv(qp.qp().as_ptr(), head, &mut bad) }
        })
    }
}

/// Up to this many completions per `ibv_poll_cq`.
pub const POLL_BATCH: usize = 32;

/// A reusable array for `ibv_poll_cq` (sideway's poller allocates one per
/// call; the latency loops poll millions of times).
pub(crate) struct WcArray(Box<[rdma_mummy_sys::ibv_wc; POLL_BATCH]>);

impl Default for WcArray {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain old data (integers and a union of
        // integers); all-zero bytes are a valid value.
        WcArray(Box::new(unsafe { std::mem::zeroed() }))
    }
}

/// Poll `cq` once into `arr`; pushes (wr_id, status, vendor_err) to `out`.
pub(crate) fn poll_cq(
    cq: &sideway::ibverbs::completion::GenericCompletionQueue,
    arr: &mut WcArray,
    out: &mut Vec<crate::verbs::Wc>,
) -> Result<usize, i32> {
    use sideway::ibverbs::completion::CompletionQueue;
    // SAFETY: the CQ handle is valid while `cq` is alive (borrowed here);
    // `arr` is a writable array of POLL_BATCH entries and ibv_poll_cq
    // writes at most that many.
    let n = unsafe {
        rdma_mummy_sys::ibv_poll_cq(cq.cq().as_ptr(), POLL_BATCH as i32, arr.0.as_mut_ptr())
    };
    if n < 0 {
        return Err(-n);
    }
    for wc in &arr.0[..n as usize] {
        out.push(crate::verbs::Wc {
            wr_id: wc.wr_id,
            status: wc.status,
            vendor_err: wc.vendor_err,
        });
    }
    Ok(n as usize)
}

/// Wait up to `timeout` until `fd` is readable; returns whether it is.
pub fn wait_readable(
    fd: &impl std::os::fd::AsRawFd,
    timeout: std::time::Duration,
) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec, no signal mask;
    // ppoll only writes `revents`.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(n > 0)
}

/// The service level and GRH traffic class a connected QP uses, read back
/// from the device (`ibv_query_qp`, IBV_QP_AV).
pub(crate) fn query_qp_av(
    qp: &sideway::ibverbs::queue_pair::GenericQueuePair,
) -> std::io::Result<(u8, u8)> {
    use sideway::ibverbs::queue_pair::QueuePair;
    // SAFETY: both structs are plain old data; all-zero bytes are valid.
    let mut attr: rdma_mummy_sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut init: rdma_mummy_sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    let mask = rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_AV.0 as i32;
    // SAFETY: the QP handle is valid while `qp` is borrowed; the call only
    // writes the two structs we pass.
    let rc = unsafe { rdma_mummy_sys::ibv_query_qp(qp.qp().as_ptr(), &mut attr, mask, &mut init) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc.abs()));
    }
    Ok((attr.ah_attr.sl, attr.ah_attr.grh.traffic_class))
}

/// libibverbs' text for a work completion status (`ibv_wc_status_str`).
pub fn wc_status_str(status: u32) -> String {
    // SAFETY: ibv_wc_status_str takes any value and returns a pointer to a
    // static string (or NULL from sideway's loader when libibverbs is absent).
    let p = unsafe { rdma_mummy_sys::ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("work completion status {status}");
    }
    // SAFETY: non-null pointers from ibv_wc_status_str are static
    // NUL-terminated strings.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// Online CPUs of the machine (not this process's affinity: the kernel's
/// share of a software device's work, rxe's work queue and softirqs, runs
/// on any of them); `None` when unknown.
pub fn online_cpus() -> Option<usize> {
    // SAFETY: sysconf takes any name and only returns a value (-1 on error).
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (n > 0).then_some(n as usize)
}

/// The calling thread's scheduling policy and its static priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedPolicy {
    pub policy: i32,
    pub priority: i32,
}

impl SchedPolicy {
    pub fn is_idle(&self) -> bool {
        self.policy == libc::SCHED_IDLE
    }
}

/// The calling thread's policy (`sched_getscheduler(0)` names the thread,
/// not the process, on Linux).
pub fn thread_sched_policy() -> std::io::Result<SchedPolicy> {
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: both calls only read the calling thread's attributes; the
    // second writes the one struct we pass.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::sched_getparam(0, &mut param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(SchedPolicy {
        policy,
        priority: param.sched_priority,
    })
}

/// Set the calling thread's policy. Any thread may move itself to
/// SCHED_IDLE; moving back needs CAP_SYS_NICE or a permissive RLIMIT_NICE.
pub fn set_thread_sched_policy(p: SchedPolicy) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: p.priority,
    };
    // SAFETY: sched_setscheduler reads the struct we pass and changes only
    // the calling thread (pid 0).
    if unsafe { libc::sched_setscheduler(0, p.policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// SCHED_OTHER: the normal time-sharing policy.
pub const SCHED_OTHER: SchedPolicy = SchedPolicy {
    policy: libc::SCHED_OTHER,
    priority: 0,
};

/// SCHED_IDLE: run only when no normal task wants this CPU.
pub const SCHED_IDLE: SchedPolicy = SchedPolicy {
    policy: libc::SCHED_IDLE,
    priority: 0,
};

#[cfg(test)]
pub use fabperf_detect::memlock::set_limit as set_memlock_limit;
/// The soft RLIMIT_MEMLOCK in bytes (`None` when unlimited), and setting it: fabperf-detect's
/// memlock module is the one place that reads and writes the limit.
pub use fabperf_detect::memlock::soft_limit as memlock_limit;

/// True when running as root (effective uid 0).
#[cfg(test)]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn online_cpus_counts_this_machine() {
        let n = online_cpus().expect("sysconf(_SC_NPROCESSORS_ONLN)");
        let listed = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .expect("/sys/devices/system/cpu/online");
        // "0-1,4,6-7": count the CPUs in each range.
        let from_sysfs: usize = listed
            .trim()
            .split(',')
            .map(|r| match r.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum();
        assert_eq!(n, from_sysfs, "sysfs lists {listed:?}");
    }

    #[test]
    fn buffer_is_zeroed_page_aligned_and_bounded() {
        let mut b = RegBuf::new(10).unwrap();
        assert_eq!(b.len(), PAGE);
        assert_eq!(b.addr() % PAGE as u64, 0);
        assert_eq!(b.load(9), 0);
        b.store(9, 7);
        assert_eq!(b.load(9), 7);
        b.fill_range(0, 4, 3).unwrap();
        assert_eq!(
            (0..5).map(|i| b.load(i)).collect::<Vec<_>>(),
            [3, 3, 3, 3, 0]
        );
        b.fill(1).unwrap();
        assert_eq!(b.load(PAGE - 1), 1);
        assert!(b.is_host());
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_is_refused() {
        let mut b = RegBuf::new(PAGE).unwrap();
        let _ = b.fill_range(PAGE - 1, 2, 0);
    }

    #[test]
    fn chains_are_linked_and_prepared_in_bounds() {
        let buf = RegBuf::new(2 * PAGE).unwrap();
        let other = RegBuf::new(2 * PAGE).unwrap();
        assert_ne!(buf.id(), other.id(), "identities are unique");
        let mut c = SendChain::new(4);
        assert_eq!(c.capacity(), 4);
        for i in 0..4 {
            assert_eq!(c.chain.wrs[i].sg_list, &mut c.chain.sges[i] as *mut _);
            let next = if i < 3 {
                &mut c.chain.wrs[i + 1] as *mut _
            } else {
                std::ptr::null_mut()
            };
            assert_eq!(c.chain.wrs[i].next, next);
        }
        c.prepare(ChainOp::Write(7, 0x1000), &buf, PAGE, 64, true);
        assert_eq!(c.chain.sges[3].addr, buf.addr() + PAGE as u64);
        assert_eq!(c.chain.sges[3].length, 64);
        assert_eq!(
            c.chain.wrs[2].opcode,
            rdma_mummy_sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE
        );
        // SAFETY (test): reading the union member prepare just wrote.
        let rkey = unsafe { c.chain.wrs[1].wr.rdma.rkey };
        assert_eq!(rkey, 7);
        // Reads are never inline.
        c.prepare(ChainOp::Read(7, 0x1000), &buf, 0, 64, true);
        assert_eq!(c.prepared.map(|p| p.4), Some(false));
        assert_eq!(c.prepared.map(|p| p.0), Some(buf.id()));
        let mut r = RecvChain::new(0);
        assert_eq!(r.capacity(), 1);
        r.prepare(&buf, 0, PAGE as u32, 42);
        assert_eq!(r.chain.wrs[0].wr_id, 42);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn chain_outside_the_buffer_is_refused() {
        let buf = RegBuf::new(PAGE).unwrap();
        SendChain::new(2).prepare(ChainOp::Send, &buf, PAGE - 8, 64, false);
    }

    #[test]
    fn status_text_never_empty() {
        // With libibverbs present this is its text; without, a number.
        let s = wc_status_str(12);
        assert!(!s.is_empty());
    }
}
