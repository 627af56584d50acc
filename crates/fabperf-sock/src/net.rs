//! Socket helpers for the engines, allocation-free in the data path.
//!
//! System calls go through rustix (direct system calls on the sockets' own
//! descriptor types); the socket options rustix does not have
//! (`SO_TIMESTAMPNS`, `SO_BUSY_POLL`, `SO_MAX_PACING_RATE`, `SO_ZEROCOPY`)
//! through nix. Two calls that neither covers keep a small unsafe wrapper
//! each, with the reason at the wrapper: `TCP_INFO`
//! ([`tcp_total_retrans`]) and `recvmmsg(2)` with receive timestamps
//! ([`RecvBatch`]).

use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::{
    sendmmsg, sockopt, MMsgHdr, RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer, SendFlags,
};
use std::io::{self, IoSlice};
use std::mem::{offset_of, size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// The options nix has no type for, as nix's own option types: its
/// `sockopt_impl!` makes the safe setter, with the value's size as the
/// option length.
mod opt {
    use nix::{setsockopt_impl, sockopt_impl};

    sockopt_impl!(
        /// `SO_BUSY_POLL`: microseconds to busy-poll the device queue on a
        /// blocking receive.
        BusyPoll,
        SetOnly,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL,
        libc::c_int
    );
    sockopt_impl!(
        /// `SO_MAX_PACING_RATE` as a 32-bit value (every kernel with the option).
        MaxPacingRate32,
        SetOnly,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        u32
    );
    sockopt_impl!(
        /// `SO_MAX_PACING_RATE` as a 64-bit value (Linux 4.20+), for rates
        /// of 4 GB/s and more.
        MaxPacingRate64,
        SetOnly,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        u64
    );
    sockopt_impl!(
        /// `SO_RCVLOWAT`: bytes that must be queued before a blocking
        /// receive returns (and before the kernel wakes the reader).
        RcvLowat,
        SetOnly,
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        libc::c_int
    );
    /// `SO_ZEROCOPY` (asm-generic/socket.h; libc does not export it).
    const SO_ZEROCOPY: libc::c_int = 60;
    sockopt_impl!(
        /// `SO_ZEROCOPY`: allow `MSG_ZEROCOPY` sends.
        ZeroCopy,
        SetOnly,
        libc::SOL_SOCKET,
        SO_ZEROCOPY,
        libc::c_int
    );
}

/// Set the receive or send buffer to `bytes`, past net.core.{r,w}mem_max
/// when privileged (SO_*BUFFORCE), else as far as the sysctl allows.
/// Returns the size the kernel reports afterwards (it doubles the request
/// for bookkeeping; the figure is halved back).
pub fn set_buffer(fd: BorrowedFd<'_>, receive: bool, bytes: u64) -> io::Result<u64> {
    let v = bytes.min(i32::MAX as u64 / 2) as usize;
    let now = if receive {
        if sockopt::set_socket_recv_buffer_size_force(fd, v).is_err() {
            sockopt::set_socket_recv_buffer_size(fd, v)?;
        }
        sockopt::socket_recv_buffer_size(fd)?
    } else {
        if sockopt::set_socket_send_buffer_size_force(fd, v).is_err() {
            sockopt::set_socket_send_buffer_size(fd, v)?;
        }
        sockopt::socket_send_buffer_size(fd)?
    };
    Ok(now as u64 / 2)
}

/// Current receive buffer size (as usable bytes).
pub fn rcvbuf(fd: BorrowedFd<'_>) -> u64 {
    sockopt::socket_recv_buffer_size(fd)
        .map(|v| v as u64 / 2)
        .unwrap_or(0)
}

/// `tcpi_total_retrans` of a TCP socket.
///
/// A raw getsockopt(2): rustix has no TCP_INFO, nix has no TCP_INFO type,
/// and nix's generic struct getter asserts that the kernel filled the whole
/// struct, which kernels older than libc's `tcp_info` (it ends at
/// `tcpi_snd_wnd`, Linux 5.4) do not: it would panic on e.g. Linux 4.18.
/// Here the kernel fills a prefix of a byte buffer, and the field is read
/// only when the prefix covers it.
pub fn tcp_total_retrans(fd: BorrowedFd<'_>) -> Option<u64> {
    let mut b = [0u8; size_of::<libc::tcp_info>()];
    let mut len = b.len() as libc::socklen_t;
    // SAFETY: `b` is valid for writes of `len` bytes and `len` for a
    // socklen_t; the kernel writes at most `len` bytes and stores the
    // number written in `len`. `fd` is a live descriptor (borrowed).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            b.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let at = offset_of!(libc::tcp_info, tcpi_total_retrans);
    if rc != 0 || (len as usize) < at + 4 {
        return None;
    }
    let v = b.get(at..at + 4)?;
    Some(u32::from_ne_bytes(v.try_into().ok()?) as u64)
}

/// SO_BUSY_POLL in microseconds (raising it above net.core.busy_read needs
/// CAP_NET_ADMIN).
pub fn set_busy_poll(fd: BorrowedFd<'_>, usec: u32) -> io::Result<()> {
    Ok(setsockopt(&fd, opt::BusyPoll, &(usec as libc::c_int))?)
}

/// Cap the socket's pacing rate (bytes per second): the kernel's TCP
/// pacing (internal since Linux 4.13, or the fq qdisc) then spaces the
/// packets so the flow never exceeds it.
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, bytes_per_sec: u64) -> io::Result<()> {
    match u32::try_from(bytes_per_sec) {
        Ok(v) if v != u32::MAX => Ok(setsockopt(&fd, opt::MaxPacingRate32, &v)?),
        // Above 4 GB/s the kernel (4.20+) takes a 64-bit value.
        _ => Ok(setsockopt(&fd, opt::MaxPacingRate64, &bytes_per_sec)?),
    }
}

/// SO_RCVLOWAT: a blocking receive waits for `bytes` (or the receive
/// timeout, or the end of the stream), and the kernel wakes the reader only
/// once that much is queued. For TCP the kernel caps the value at half the
/// largest receive buffer and grows an autotuned buffer to hold it.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let v = bytes.clamp(1, i32::MAX as usize) as libc::c_int;
    Ok(setsockopt(&fd, opt::RcvLowat, &v)?)
}

pub fn enable_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(setsockopt(&fd, opt::ZeroCopy, &1)?)
}

pub fn set_nodelay(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(sockopt::set_tcp_nodelay(fd, true)?)
}

/// Consume MSG_ZEROCOPY completion notifications from the error queue
/// (non-blocking). Our send buffer's content never changes, so the ranges
/// themselves need no bookkeeping: the notifications only have to be read
/// so the socket's option memory does not fill up.
pub fn drain_errqueue(fd: BorrowedFd<'_>) -> usize {
    let mut n = 0;
    let mut space = [MaybeUninit::<u8>::uninit(); 128];
    loop {
        let mut ctrl = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            fd,
            &mut [],
            &mut ctrl,
            RecvFlags::ERRQUEUE | RecvFlags::DONTWAIT,
        );
        if r.is_err() {
            return n;
        }
        n += 1;
    }
}

/// Wait until `fd` is readable (or has an error / hang-up) for at most
/// `timeout`. Returns false on timeout.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut p = [PollFd::new(&fd, PollFlags::IN)];
    let t = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    loop {
        match rustix::event::poll(&mut p, Some(&t)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// One `send(2)` with MSG_NOSIGNAL (a dead peer gives EPIPE, never SIGPIPE).
#[inline]
pub fn send(fd: BorrowedFd<'_>, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
    let flags = SendFlags::from_bits_retain(flags as u32) | SendFlags::NOSIGNAL;
    Ok(rustix::net::send(fd, buf, flags)?)
}

/// One `sendfile(2)` of `len` bytes from `file` at `offset`.
#[inline]
pub fn sendfile(
    sock: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    offset: usize,
    len: usize,
) -> io::Result<usize> {
    let mut off = offset as u64;
    Ok(rustix::fs::sendfile(sock, file, Some(&mut off), len)?)
}

/// One `recv(2)`; returns what the kernel returns (with MSG_TRUNC on a
/// datagram socket, the datagram's full length).
#[inline]
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    let (_, n) = rustix::net::recv(fd, buf, RecvFlags::from_bits_retain(flags as u32))?;
    Ok(n)
}

pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A timeout error for a stalled peer.
pub fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "timed out")
}

/// Datagrams sent per sendmmsg(2) / received per recvmmsg(2).
pub const BATCH: usize = 32;

/// A fixed set of datagram buffers for sendmmsg(2), allocated once.
pub struct SendBatch {
    buf: Vec<u8>,
    size: usize,
    n: usize,
}

impl SendBatch {
    /// `n` datagrams of `size` bytes, at most [`BATCH`].
    pub fn new(n: usize, size: usize, fill: u8) -> SendBatch {
        let n = n.min(BATCH);
        SendBatch {
            buf: vec![fill; n * size],
            size,
            n,
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    /// All the datagram buffers.
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes of datagram `i`.
    #[inline]
    pub fn slot(&mut self, i: usize) -> &mut [u8] {
        &mut self.buf[i * self.size..(i + 1) * self.size]
    }

    /// Send the first `k` datagrams with one sendmmsg(2) on a connected
    /// socket; returns how many went out.
    #[inline]
    pub fn send(&mut self, fd: BorrowedFd<'_>, k: usize) -> io::Result<usize> {
        let k = k.min(self.n);
        // The message headers borrow the buffers, so they are made for the
        // call, on the stack (a few hundred bytes of stores per call of up
        // to 32 datagrams).
        let mut chunks = self.buf.chunks_exact(self.size.max(1));
        let iov: [[IoSlice<'_>; 1]; BATCH] =
            std::array::from_fn(|_| [IoSlice::new(chunks.next().unwrap_or_default())]);
        let mut ctrl: [SendAncillaryBuffer<'_, '_, '_>; BATCH] =
            std::array::from_fn(|_| SendAncillaryBuffer::default());
        let mut parts = iov.iter().zip(ctrl.iter_mut());
        let mut msgs: [MMsgHdr<'_>; BATCH] = std::array::from_fn(|_| {
            let (iov, ctrl) = parts.next().expect("BATCH of each");
            MMsgHdr::new(iov, ctrl)
        });
        Ok(sendmmsg(fd, &mut msgs[..k], SendFlags::NOSIGNAL)?)
    }
}

/// Control-message space per datagram: one SCM_TIMESTAMPNS (a 16-byte
/// header and a 16-byte timespec on 64-bit Linux) with room to spare.
const CTRL_LEN: usize = 64;

/// A fixed set of receive buffers for recvmmsg(2), with room for a kernel
/// receive timestamp (SO_TIMESTAMPNS) per datagram.
///
/// The one raw system call of the engines: rustix has no recvmmsg, and
/// nix's does not restore the headers' control-buffer lengths between
/// calls (the kernel shrinks them to what it wrote), so once a slot got a
/// datagram without a timestamp, it would never get one again (nix-rust/nix
/// pull request 2813, open). Here every call restores them; the headers
/// point into buffers owned by the batch and allocated once; the control
/// messages are read from those bytes by safe code ([`scm_timestampns`]).
pub struct RecvBatch {
    buf: Vec<u8>,
    stride: usize,
    // Pointed to by `msgs`, like `buf` and `ctrl`: allocated once, never
    // resized (a Vec's heap buffer stays put when the batch moves).
    _iov: Vec<libc::iovec>,
    ctrl: Vec<u8>,
    msgs: Vec<libc::mmsghdr>,
}

impl RecvBatch {
    /// All the receive buffers.
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// The same, writable (to place its pages before the first receive).
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    pub fn new(n: usize, stride: usize) -> RecvBatch {
        let mut buf = vec![0u8; n * stride];
        let mut ctrl = vec![0u8; n * CTRL_LEN];
        let mut iov: Vec<libc::iovec> = buf
            .chunks_exact_mut(stride.max(1))
            .take(n)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let msgs = iov
            .iter_mut()
            .zip(ctrl.chunks_exact_mut(CTRL_LEN))
            .map(|(iov, ctrl)| {
                // SAFETY: mmsghdr is plain old data (pointers, lengths,
                // flags); all-zero bytes are a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = ctrl.as_mut_ptr().cast();
                m
            })
            .collect();
        RecvBatch {
            buf,
            stride,
            _iov: iov,
            ctrl,
            msgs,
        }
    }

    /// Ask the kernel for receive timestamps (CLOCK_REALTIME) on `fd`.
    pub fn enable_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
        Ok(setsockopt(&fd, ReceiveTimestampns, &true)?)
    }

    /// Receive at least one datagram (waiting up to the socket's receive
    /// timeout) and whatever else is queued, up to the batch size.
    #[inline]
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        for m in self.msgs.iter_mut() {
            m.msg_hdr.msg_controllen = CTRL_LEN as _;
            m.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points at its own iovec (one, for its
        // `stride` bytes of `buf`) and its own CTRL_LEN bytes of `ctrl`,
        // all owned by `self` and alive across the call; no name buffer; a
        // null timeout means the socket's SO_RCVTIMEO applies. The kernel
        // writes only within those lengths. `fd` is a live descriptor.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }

    /// Datagram `i` of the last receive and its kernel receive time
    /// (CLOCK_REALTIME nanoseconds) when timestamps are on.
    #[inline]
    pub fn datagram(&self, i: usize) -> (&[u8], Option<u64>) {
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(self.stride);
        let data = &self.buf[i * self.stride..i * self.stride + len];
        // socklen_t on musl, size_t on glibc.
        #[allow(clippy::unnecessary_cast)]
        let clen = (m.msg_hdr.msg_controllen as usize).min(CTRL_LEN);
        let ctrl = &self.ctrl[i * CTRL_LEN..i * CTRL_LEN + clen];
        (data, scm_timestampns(ctrl))
    }
}

/// The SCM_TIMESTAMPNS time (nanoseconds) among the control messages the
/// kernel wrote, read from their bytes: each is a `struct cmsghdr`
/// (`size_t cmsg_len; int cmsg_level; int cmsg_type;`) and its data,
/// padded to a multiple of `long`; the data of this one is the old
/// `struct timespec` (two `long`s). Anything malformed gives `None`.
fn scm_timestampns(mut c: &[u8]) -> Option<u64> {
    const W: usize = size_of::<usize>();
    const L: usize = size_of::<libc::c_long>();
    const HDR: usize = (W + 8).next_multiple_of(L);
    // c_long is i32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let ne_long = |b: &[u8]| -> Option<i64> {
        Some(i64::from(libc::c_long::from_ne_bytes(
            b.get(..L)?.try_into().ok()?,
        )))
    };
    while c.len() >= HDR {
        let len = usize::from_ne_bytes(c[..W].try_into().ok()?);
        let level = i32::from_ne_bytes(c[W..W + 4].try_into().ok()?);
        let kind = i32::from_ne_bytes(c[W + 4..W + 8].try_into().ok()?);
        if len < HDR || len > c.len() {
            return None;
        }
        if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS {
            let data = &c[HDR..len];
            let sec = ne_long(data)?;
            let nsec = ne_long(data.get(L..)?)?;
            if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
                return None;
            }
            return (sec as u64)
                .checked_mul(1_000_000_000)?
                .checked_add(nsec as u64);
        }
        c = c.get(len.next_multiple_of(L)..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsFd;
    use std::time::{SystemTime, UNIX_EPOCH};

    const HDR: usize = 16;

    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(HDR + data.len()).to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        while v.len() % 8 != 0 {
            v.push(0);
        }
        v
    }

    fn ts(sec: i64, nsec: i64) -> Vec<u8> {
        [sec.to_ne_bytes(), nsec.to_ne_bytes()].concat()
    }

    #[test]
    fn control_messages_parse_and_refuse_garbage() {
        let stamp = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &ts(7, 5));
        assert_eq!(scm_timestampns(&stamp), Some(7_000_000_005));
        // After another message (with padding), and before one.
        let other = cmsg(libc::IPPROTO_IP, 8, &[1, 2, 3, 4, 5]);
        assert_eq!(
            scm_timestampns(&[other.clone(), stamp.clone()].concat()),
            Some(7_000_000_005)
        );
        assert_eq!(
            scm_timestampns(&[stamp.clone(), other.clone()].concat()),
            Some(7_000_000_005)
        );
        // None there, or nothing at all.
        assert_eq!(scm_timestampns(&other), None);
        assert_eq!(scm_timestampns(&[]), None);
        // Same type at another level.
        assert_eq!(
            scm_timestampns(&cmsg(libc::IPPROTO_IP, libc::SCM_TIMESTAMPNS, &ts(7, 5))),
            None
        );
        // Cut short: header only, half a timespec, length past the buffer.
        assert_eq!(scm_timestampns(&stamp[..HDR]), None);
        assert_eq!(scm_timestampns(&stamp[..HDR + 8]), None);
        let mut long = stamp.clone();
        long[..8].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(scm_timestampns(&long), None);
        // A zero or short length must not loop forever or be trusted.
        for bad in [0usize, 1, HDR - 1] {
            let mut z = [other.clone(), stamp.clone()].concat();
            z[..8].copy_from_slice(&bad.to_ne_bytes());
            assert_eq!(scm_timestampns(&z), None);
        }
        // Out-of-range times.
        for (s, n) in [(-1, 0), (0, -1), (0, 1_000_000_000), (i64::MAX, 0)] {
            let c = cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &ts(s, n));
            assert_eq!(scm_timestampns(&c), None, "{s} {n}");
        }
        // Every prefix of a valid pair parses or refuses, never panics.
        let two = [other, stamp].concat();
        for i in 0..two.len() {
            let _ = scm_timestampns(&two[..i]);
        }
    }

    #[test]
    fn batches_carry_datagrams_and_kernel_timestamps() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rb = RecvBatch::new(BATCH, 2048);
        // The first datagram arrives without a timestamp...
        tx.send(b"plain").unwrap();
        assert_eq!(rb.recv(rx.as_fd()).unwrap(), 1);
        assert_eq!(rb.datagram(0), (&b"plain"[..], None));
        // ...the later ones, in the same slot, with one.
        RecvBatch::enable_timestamps(rx.as_fd()).unwrap();
        let mut sb = SendBatch::new(BATCH, 100, 0);
        assert_eq!(sb.len(), BATCH);
        for i in 0..5 {
            sb.slot(i).fill(i as u8 + 1);
        }
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(sb.send(tx.as_fd(), 5).unwrap(), 5);
        let mut got = 0;
        while got < 5 {
            let k = rb.recv(rx.as_fd()).unwrap();
            for i in 0..k {
                let (d, t) = rb.datagram(i);
                assert_eq!(d, &[got as u8 + 1; 100][..]);
                let t = Duration::from_nanos(t.expect("a kernel timestamp"));
                let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                assert!(
                    t + Duration::from_millis(100) >= before && t <= after,
                    "{t:?}"
                );
                got += 1;
            }
        }
        // A timeout is a timeout.
        rx.set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        assert!(is_timeout(&rb.recv(rx.as_fd()).unwrap_err()));
        assert!(!wait_readable(rx.as_fd(), Duration::from_millis(10)).unwrap());
        tx.send(b"x").unwrap();
        assert!(wait_readable(rx.as_fd(), Duration::from_secs(5)).unwrap());
    }

    #[test]
    fn tcp_helpers_on_a_real_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        set_nodelay(c.as_fd()).unwrap();
        let _ = set_max_pacing_rate(c.as_fd(), 1 << 20);
        let _ = set_max_pacing_rate(c.as_fd(), 1 << 33);
        assert_eq!(tcp_total_retrans(c.as_fd()), Some(0));
        assert!(set_buffer(s.as_fd(), true, 1 << 20).unwrap() > 0);
        assert!(set_buffer(c.as_fd(), false, 1 << 20).unwrap() > 0);
        assert!(rcvbuf(s.as_fd()) > 0);
        assert_eq!(send(c.as_fd(), b"hello", 0).unwrap(), 5);
        let mut b = [0u8; 16];
        assert!(wait_readable(s.as_fd(), Duration::from_secs(5)).unwrap());
        assert_eq!(recv(s.as_fd(), &mut b, 0).unwrap(), 5);
        assert_eq!(&b[..5], b"hello");
        // Nothing queued: DONTWAIT says so at once.
        let e = recv(s.as_fd(), &mut b, libc::MSG_DONTWAIT).unwrap_err();
        assert!(is_timeout(&e), "{e}");
        assert_eq!(drain_errqueue(c.as_fd()), 0);
        // Not a TCP socket.
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(tcp_total_retrans(u.as_fd()), None);
        // A dead peer gives an error, never SIGPIPE.
        drop(s);
        drop(l);
        let mut failed = false;
        for _ in 0..100 {
            if send(c.as_fd(), &[0u8; 4096], 0).is_err() {
                failed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(failed);
    }
}
