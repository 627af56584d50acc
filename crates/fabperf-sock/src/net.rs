//! Thin, allocation-free socket helpers over libc.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

const SO_ZEROCOPY: libc::c_int = 60;

fn setopt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to a live T of the given size for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getopt_int(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for writes of their sizes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Set the receive or send buffer to `bytes`, past net.core.{r,w}mem_max
/// when privileged (SO_*BUFFORCE), else as far as the sysctl allows.
/// Returns the size the kernel reports afterwards (it doubles the request
/// for bookkeeping; the figure is halved back).
pub fn set_buffer(fd: RawFd, receive: bool, bytes: u64) -> io::Result<u64> {
    let v = bytes.min(i32::MAX as u64 / 2) as libc::c_int;
    let (force, plain) = if receive {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    if setopt(fd, libc::SOL_SOCKET, force, &v).is_err() {
        setopt(fd, libc::SOL_SOCKET, plain, &v)?;
    }
    Ok(getopt_int(fd, libc::SOL_SOCKET, plain)? as u64 / 2)
}

/// Current receive buffer size (as usable bytes).
pub fn rcvbuf(fd: RawFd) -> u64 {
    getopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
        .map(|v| v as u64 / 2)
        .unwrap_or(0)
}

/// `tcpi_total_retrans` of a TCP socket.
pub fn tcp_total_retrans(fd: RawFd) -> Option<u64> {
    // SAFETY: tcp_info is plain old data; zeroed is a valid value.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: ti and len are valid for writes; the kernel writes at most len bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut ti as *mut libc::tcp_info as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    Some(ti.tcpi_total_retrans as u64)
}

/// SO_BUSY_POLL in microseconds (raising it above net.core.busy_read needs
/// CAP_NET_ADMIN).
pub fn set_busy_poll(fd: RawFd, usec: u32) -> io::Result<()> {
    let v = usec as libc::c_int;
    setopt(fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, &v)
}

/// Cap the socket's pacing rate (bytes per second): the kernel's TCP
/// pacing (internal since Linux 4.13, or the fq qdisc) then spaces the
/// packets so the flow never exceeds it.
pub fn set_max_pacing_rate(fd: RawFd, bytes_per_sec: u64) -> io::Result<()> {
    match u32::try_from(bytes_per_sec) {
        Ok(v) if v != u32::MAX => setopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &v),
        // Above 4 GB/s the kernel (4.20+) takes a 64-bit value.
        _ => setopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &bytes_per_sec,
        ),
    }
}

pub fn enable_zerocopy(fd: RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    setopt(fd, libc::SOL_SOCKET, SO_ZEROCOPY, &one)
}

pub fn set_nodelay(fd: RawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, &one)
}

/// Consume MSG_ZEROCOPY completion notifications from the error queue
/// (non-blocking). Our send buffer's content never changes, so the ranges
/// themselves need no bookkeeping: the notifications only have to be read
/// so the socket's option memory does not fill up.
pub fn drain_errqueue(fd: RawFd) -> usize {
    let mut n = 0;
    let mut ctrl = [0u64; 16];
    loop {
        // SAFETY: msghdr is plain old data; all pointers set below are valid
        // for the duration of recvmsg.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
        // SAFETY: see above.
        let rc = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if rc < 0 {
            return n;
        }
        n += 1;
    }
}

/// Wait until `fd` is readable (or has an error / hang-up) for at most
/// `timeout`. Returns false on timeout.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: p is a valid pollfd array of length 1.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(rc > 0);
    }
}

/// One `send(2)` with MSG_NOSIGNAL (a dead peer gives EPIPE, never SIGPIPE).
#[inline]
pub fn send(fd: RawFd, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let rc = unsafe {
        libc::send(
            fd,
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            flags | libc::MSG_NOSIGNAL,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// One `sendfile(2)` of `len` bytes from `file` at `offset`.
#[inline]
pub fn sendfile(sock: RawFd, file: RawFd, offset: usize, len: usize) -> io::Result<usize> {
    let mut off = offset as libc::off_t;
    // SAFETY: off is a valid, writable off_t.
    let rc = unsafe { libc::sendfile(sock, file, &mut off, len) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// One `recv(2)`.
#[inline]
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let rc = unsafe { libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), flags) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
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
    // Pointed to by `msgs`; kept alive (and never resized) with them.
    _iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl SendBatch {
    pub fn new(n: usize, size: usize, fill: u8) -> SendBatch {
        let mut buf = vec![fill; n * size];
        let mut iov: Vec<libc::iovec> = (0..n)
            .map(|i| libc::iovec {
                // SAFETY: i * size is within buf (n * size bytes).
                iov_base: unsafe { buf.as_mut_ptr().add(i * size) } as *mut libc::c_void,
                iov_len: size,
            })
            .collect();
        let msgs = (0..n)
            .map(|i| {
                // SAFETY: mmsghdr is plain old data; zeroed is valid.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                // SAFETY: i < n = iov.len().
                m.msg_hdr.msg_iov = unsafe { iov.as_mut_ptr().add(i) };
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        SendBatch {
            buf,
            size,
            _iov: iov,
            msgs,
        }
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
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
    pub fn send(&mut self, fd: RawFd, k: usize) -> io::Result<usize> {
        let k = k.min(self.msgs.len());
        // SAFETY: msgs[..k] point at live iovecs and buffers owned by self.
        let rc = unsafe {
            libc::sendmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                k as libc::c_uint,
                libc::MSG_NOSIGNAL,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

const CTRL_WORDS: usize = 8;

/// A fixed set of receive buffers for recvmmsg(2), with room for a kernel
/// receive timestamp (SO_TIMESTAMPNS) per datagram.
pub struct RecvBatch {
    buf: Vec<u8>,
    stride: usize,
    _iov: Vec<libc::iovec>,
    ctrl: Vec<u64>,
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
        let mut ctrl = vec![0u64; n * CTRL_WORDS];
        let mut iov: Vec<libc::iovec> = (0..n)
            .map(|i| libc::iovec {
                // SAFETY: within buf.
                iov_base: unsafe { buf.as_mut_ptr().add(i * stride) } as *mut libc::c_void,
                iov_len: stride,
            })
            .collect();
        let msgs = (0..n)
            .map(|i| {
                // SAFETY: plain old data.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                // SAFETY: indices are within iov and ctrl.
                unsafe {
                    m.msg_hdr.msg_iov = iov.as_mut_ptr().add(i);
                    m.msg_hdr.msg_control =
                        ctrl.as_mut_ptr().add(i * CTRL_WORDS) as *mut libc::c_void;
                }
                m.msg_hdr.msg_iovlen = 1;
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
    pub fn enable_timestamps(fd: RawFd) -> io::Result<()> {
        let one: libc::c_int = 1;
        setopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one)
    }

    /// Receive at least one datagram (waiting up to the socket's receive
    /// timeout) and whatever else is queued, up to the batch size.
    #[inline]
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let clen = CTRL_WORDS * 8;
        for m in self.msgs.iter_mut() {
            m.msg_hdr.msg_controllen = clen as _;
            m.msg_hdr.msg_flags = 0;
        }
        // SAFETY: msgs point at live iovecs, buffers and control space owned
        // by self; a null timeout means the socket's SO_RCVTIMEO applies.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
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
        let _ = &self.ctrl;
        // SAFETY: msg_hdr describes our control buffer as filled by the
        // kernel; CMSG_* walk within msg_controllen.
        let ts = unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            let mut found = None;
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let t: libc::timespec =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    found = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                    break;
                }
                c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
            }
            found
        };
        (data, ts)
    }
}
