//! Every `unsafe` block of fabperf-rdma lives in this module; the rest of
//! the crate uses the safe API below. Each block says why it is sound.
//!
//! What needs `unsafe`: registering memory the NIC reads and writes behind
//! the compiler's back (`ibv_reg_mr`), handing buffer addresses to work
//! requests (`setup_sge`), reading bytes the peer's RDMA writes change
//! (volatile loads), and two plain C calls (`ibv_wc_status_str`,
//! `getrlimit`).

use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    LocalBufferHandle, PostSendGuard, RecvWorkRequestHandle, SetScatterGatherEntry,
};
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
    remote_write: bool,
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
            remote_write: false,
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
                self.remote_write = access.contains(AccessFlags::RemoteWrite);
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

    /// A shared view of bytes no peer can write (inline sends copy from it).
    ///
    /// Panics when the buffer was registered with remote write access: the
    /// peer's NIC could change such memory while the slice is alive.
    pub fn local_bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(
            !self.remote_write,
            "local_bytes on a remotely writable buffer"
        );
        self.check(off, len);
        // SAFETY: in bounds (checked); the buffer is not remotely writable,
        // so only this process changes it, and every local write goes
        // through `&mut self` methods, which cannot run while this shared
        // borrow is alive. The NIC only reads it (sends, RDMA reads).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
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

/// Point a send-side work request at `len` bytes of `buf` from `off`.
pub fn send_sge<G: PostSendGuard>(h: LocalBufferHandle<'_, G>, buf: &RegBuf, off: usize, len: u32) {
    buf.check(off, len as usize);
    // SAFETY: the range is inside the registered buffer (checked) and the
    // buffer outlives the work request: its owner destroys the QPs first.
    unsafe { h.setup_sge(buf.lkey(), buf.addr() + off as u64, len) }
}

/// Point a receive work request at `len` bytes of `buf` from `off`.
pub fn recv_sge(h: RecvWorkRequestHandle<'_, '_>, buf: &RegBuf, off: usize, len: u32) {
    buf.check(off, len as usize);
    // SAFETY: as in `send_sge`.
    unsafe { h.setup_sge(buf.lkey(), buf.addr() + off as u64, len) }
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

/// The soft RLIMIT_MEMLOCK in bytes, `None` when unlimited or unknown.
pub fn memlock_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if rc != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(rl.rlim_cur)
    }
}

/// Lower (or raise, with privilege) this process's RLIMIT_MEMLOCK.
pub fn set_memlock_limit(bytes: u64) -> std::io::Result<()> {
    let rl = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_zeroed_page_aligned_and_bounded() {
        let mut b = RegBuf::new(10).unwrap();
        assert_eq!(b.len(), PAGE);
        assert_eq!(b.addr() % PAGE as u64, 0);
        assert_eq!(b.load(9), 0);
        b.store(9, 7);
        assert_eq!(b.load(9), 7);
        b.fill_range(0, 4, 3);
        assert_eq!(b.local_bytes(0, 5), &[3, 3, 3, 3, 0]);
        b.fill(1);
        assert_eq!(b.load(PAGE - 1), 1);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_is_refused() {
        let b = RegBuf::new(PAGE).unwrap();
        let _ = b.local_bytes(PAGE - 1, 2);
    }

    #[test]
    fn status_text_never_empty() {
        // With libibverbs present this is its text; without, a number.
        let s = wc_status_str(12);
        assert!(!s.is_empty());
    }
}
