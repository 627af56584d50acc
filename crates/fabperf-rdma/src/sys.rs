//! Every `unsafe` block of fabperf-rdma lives in this module; the rest of
//! the crate uses the safe API below. Each block says why it is sound.
//!
//! What needs `unsafe`: registering memory the NIC reads and writes behind
//! the compiler's back (`ibv_reg_mr`), handing buffer addresses to work
//! requests (`SendChain`, `RecvChain`: prebuilt `ibv_post_send`/`ibv_post_recv`
//! chains), reading bytes the peer's RDMA writes change
//! (volatile loads), and plain C calls (`ibv_wc_status_str`, scheduling).

use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

/// Page size used to align registered buffers.
pub const PAGE: usize = 4096;

/// A zeroed, page-aligned heap buffer registered as one memory region.
///
/// Invariants: `ptr` points to `layout.size()` bytes allocated with
/// `layout` and owned by this value alone; the memory region (when
/// registered) covers exactly that range and is deregistered before the
/// memory is freed (see `Drop`). Work requests that name this buffer must
/// be finished or flushed before it is dropped: the owner (`verbs::Endpoint`)
/// declares its queue pairs before its buffers, so Rust destroys the QPs
/// (which flushes every outstanding request) first.
pub struct RegBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    mr: Option<Arc<MemoryRegion>>,
}

// SAFETY: RegBuf owns its allocation exclusively (like a Box<[u8]>); the
// MemoryRegion it holds is Send + Sync in sideway. Moving it to another
// thread moves that ownership.
unsafe impl Send for RegBuf {}

/// Why `ibv_reg_mr` failed.
#[derive(Debug)]
pub struct RegError {
    pub bytes: usize,
    pub source: std::io::Error,
}

impl RegBuf {
    /// Allocate `len` zeroed bytes (rounded up to whole pages, at least one).
    pub fn new(len: usize) -> Result<RegBuf, String> {
        let size = len.max(1).div_ceil(PAGE) * PAGE;
        let layout = Layout::from_size_align(size, PAGE)
            .map_err(|e| format!("buffer of {size} bytes: {e}"))?;
        // SAFETY: `layout` has a non-zero size (at least one page).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| format!("out of memory allocating a {size}-byte buffer"))?;
        Ok(RegBuf {
            ptr,
            layout,
            mr: None,
        })
    }

    /// Register the whole buffer with `pd`.
    pub fn register(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        access: AccessFlags,
    ) -> Result<(), RegError> {
        // SAFETY: the pointer is valid for `self.len()` bytes for as long as
        // `self` lives, and `Drop` deregisters the region before freeing the
        // memory, so the NIC never accesses freed memory through this MR.
        let mr = unsafe { pd.reg_mr(self.ptr.as_ptr() as usize, self.len(), access) };
        match mr {
            Ok(mr) => {
                self.mr = Some(mr);
                Ok(())
            }
            Err(e) => {
                let source = match e.0 {
                    sideway::ibverbs::memory_region::RegisterMemoryRegionErrorKind::Ibverbs(io) => {
                        io
                    }
                    other => std::io::Error::other(other.to_string()),
                };
                Err(RegError {
                    bytes: self.len(),
                    source,
                })
            }
        }
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }

    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().map(|m| m.lkey()).unwrap_or(0)
    }

    pub fn rkey(&self) -> u32 {
        self.mr.as_ref().map(|m| m.rkey()).unwrap_or(0)
    }

    fn check(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len()),
            "buffer access {off}+{len} outside {} bytes",
            self.len()
        );
    }

    /// Set every byte to `v`.
    pub fn fill(&mut self, v: u8) {
        // SAFETY: writes exactly the allocation; `&mut self` excludes other
        // Rust borrows. Volatile-free bulk writes are fine: the caller only
        // refills when no work request targets the buffer.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), v, self.len()) }
    }

    /// Set bytes `off..off+len` to `v`.
    pub fn fill_range(&mut self, off: usize, len: usize, v: u8) {
        self.check(off, len);
        // SAFETY: in bounds (checked); `&mut self` excludes Rust borrows.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), v, len) }
    }

    /// Store one byte (volatile: the NIC may read it at any time).
    pub fn store(&mut self, off: usize, v: u8) {
        self.check(off, 1);
        // SAFETY: in bounds (checked); a single-byte volatile store cannot
        // tear and the NIC only reads this memory concurrently.
        unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(off), v) }
    }

    /// Load one byte the peer's RDMA write may change at any moment.
    #[inline]
    pub fn load(&self, off: usize) -> u8 {
        debug_assert!(off < self.len());
        let off = off.min(self.len() - 1);
        // SAFETY: in bounds (clamped); a volatile single-byte load is the
        // way to observe memory written by a device without the compiler
        // caching it, and a byte cannot tear.
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off)) }
    }
}

impl Drop for RegBuf {
    fn drop(&mut self) {
        let can_free = match self.mr.take() {
            // Deregister first: after this the NIC can no longer touch the memory.
            Some(mr) => Arc::try_unwrap(mr).map(drop).is_ok(),
            None => true,
        };
        if can_free {
            // SAFETY: `ptr` was allocated with `layout` in `new` and is freed
            // exactly once, here, after the memory region is gone.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
        }
        // Otherwise someone still holds the MR (never happens: the Arc is
        // private); leaking is the sound choice.
    }
}

/// What a prepared send chain does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainOp {
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

/// Send work requests for one QP (see `Chain`). `prepare` is the only way
/// to set addresses, and it bounds-checks them against a registered `RegBuf`.
pub struct SendChain {
    chain: Chain<rdma_mummy_sys::ibv_send_wr>,
    prepared: Option<(ChainOp, u64, u32, bool)>,
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
        let inline = inline && !matches!(op, ChainOp::Read(..));
        let key = (op, buf.addr() + off as u64, len, inline);
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
    /// gives request i's wr_id and whether it is signaled.
    #[inline]
    pub fn post(
        &mut self,
        qp: &mut sideway::ibverbs::queue_pair::GenericQueuePair,
        n: usize,
        mut id: impl FnMut(usize) -> (u64, bool),
    ) -> Result<(), i32> {
        use sideway::ibverbs::queue_pair::QueuePair;
        let Some((_, _, _, inline)) = self.prepared else {
            return Err(libc::EINVAL);
        };
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
            // every sge points inside a registered buffer (checked in
            // `prepare`) that outlives the request (its owner destroys the
            // QPs first). The provider reads the requests during the call
            // and keeps no pointer to them afterwards.
            unsafe { rdma_mummy_sys::ibv_post_send(qp.qp().as_ptr(), head, &mut bad) }
        })
    }
}

/// Receive requests for one QP (see `Chain`).
pub struct RecvChain {
    chain: Chain<rdma_mummy_sys::ibv_recv_wr>,
    prepared: Option<(u64, u32, u64)>,
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
        let key = (buf.addr() + off as u64, len, wr_id);
        if self.prepared == Some(key) {
            return;
        }
        self.chain.point(buf, off, len);
        for w in self.chain.wrs.iter_mut() {
            w.wr_id = wr_id;
        }
        self.prepared = Some(key);
    }

    /// Post receives `0..n` (n ≤ capacity) on `qp` in one call.
    #[inline]
    pub fn post(
        &mut self,
        qp: &mut sideway::ibverbs::queue_pair::GenericQueuePair,
        n: usize,
    ) -> Result<(), i32> {
        use sideway::ibverbs::queue_pair::QueuePair;
        if self.prepared.is_none() {
            return Err(libc::EINVAL);
        }
        self.chain.post_cut(n, |head| {
            let mut bad: *mut rdma_mummy_sys::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: as in `SendChain::post`; the receive buffer is
            // registered with local write access and outlives the request.
            unsafe { rdma_mummy_sys::ibv_post_recv(qp.qp().as_ptr(), head, &mut bad) }
        })
    }
}

/// Up to this many completions per `ibv_poll_cq`.
pub const POLL_BATCH: usize = 32;

/// A reusable array for `ibv_poll_cq` (sideway's poller allocates one per
/// call; the latency loops poll millions of times).
pub struct WcArray(Box<[rdma_mummy_sys::ibv_wc; POLL_BATCH]>);

impl Default for WcArray {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain old data (integers and a union of
        // integers); all-zero bytes are a valid value.
        WcArray(Box::new(unsafe { std::mem::zeroed() }))
    }
}

/// Poll `cq` once into `arr`; pushes (wr_id, status, vendor_err) to `out`.
pub fn poll_cq(
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

/// SCHED_IDLE: run only when no normal task wants this CPU.
pub const SCHED_IDLE: SchedPolicy = SchedPolicy {
    policy: libc::SCHED_IDLE,
    priority: 0,
};

/// The soft RLIMIT_MEMLOCK in bytes (`None` when unlimited), and setting it: fabperf-detect's
/// memlock module is the one place that reads and writes the limit.
pub use fabperf_detect::memlock::{set_limit as set_memlock_limit, soft_limit as memlock_limit};

/// True when running as root (effective uid 0).
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
        b.fill_range(0, 4, 3);
        assert_eq!(
            (0..5).map(|i| b.load(i)).collect::<Vec<_>>(),
            [3, 3, 3, 3, 0]
        );
        b.fill(1);
        assert_eq!(b.load(PAGE - 1), 1);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_is_refused() {
        let mut b = RegBuf::new(PAGE).unwrap();
        b.fill_range(PAGE - 1, 2, 0);
    }

    #[test]
    fn chains_are_linked_and_prepared_in_bounds() {
        let buf = RegBuf::new(2 * PAGE).unwrap();
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
        assert_eq!(c.prepared.map(|p| p.3), Some(false));
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
