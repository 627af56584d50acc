//! Socket details: DF probes, the ICMP errors the kernel queues for them,
//! and ICMP echo sockets.

use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

// Linux values (linux/in.h, linux/in6.h, linux/errqueue.h). These options
// and the error queue's ancillary data (sock_extended_err) stay hand-written:
// socket2 offers neither the PMTU-discovery/RECVERR options nor a cmsg parser.
const IP_MTU_DISCOVER: libc::c_int = 10;
const IP_PMTUDISC_PROBE: libc::c_int = 3;
const IP_RECVERR: libc::c_int = 11;
const IPV6_MTU_DISCOVER: libc::c_int = 23;
const IPV6_PMTUDISC_PROBE: libc::c_int = 3;
const IPV6_RECVERR: libc::c_int = 25;
const IPV6_DONTFRAG: libc::c_int = 62;
const SO_EE_ORIGIN_LOCAL: u8 = 1;
const SO_EE_ORIGIN_ICMP: u8 = 2;
const SO_EE_ORIGIN_ICMP6: u8 = 3;

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: a valid descriptor and a pointer to an int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Send with Don't Fragment and ignore the path MTU the kernel learned
/// (`IP_PMTUDISC_PROBE`): a datagram larger than the interface's MTU fails
/// with `EMSGSIZE`, anything up to it goes out whole. Also queue the ICMP
/// errors the probes cause (`IP_RECVERR`).
pub fn probe_mode(fd: RawFd, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            IPV6_MTU_DISCOVER,
            IPV6_PMTUDISC_PROBE,
        )?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_DONTFRAG, 1)?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_RECVERR, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)?;
        setsockopt_int(fd, libc::IPPROTO_IP, IP_RECVERR, 1)
    }
}

/// What an ICMP "fragmentation needed" / "packet too big" (or the local
/// stack refusing a datagram) said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig {
    /// The MTU it names (0 when it names none).
    pub mtu: u32,
    /// Who said so: a router's or the remote host's address, `None` for
    /// this host's own stack (e.g. a tunnel device on this host).
    pub from: Option<IpAddr>,
}

/// Read (and empty) the socket's error queue; the last "too big" report in
/// it, if any.
pub fn take_too_big(fd: RawFd) -> Option<TooBig> {
    let mut last = None;
    for _ in 0..64 {
        let mut data = [0u8; 512];
        let mut ctrl = [0u64; 64];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: msghdr points at buffers that live through the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut name as *mut _ as *mut libc::c_void;
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            break;
        }
        // SAFETY: the kernel filled msg's control buffer; the CMSG macros
        // stay within msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let ours = (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == IP_RECVERR)
                    || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == IPV6_RECVERR);
                let need = std::mem::size_of::<libc::sock_extended_err>();
                let have = (h.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                if ours && have >= need {
                    let p = libc::CMSG_DATA(c);
                    let ee: libc::sock_extended_err = std::ptr::read_unaligned(p as *const _);
                    if ee.ee_errno == libc::EMSGSIZE as u32 {
                        let from = if ee.ee_origin == SO_EE_ORIGIN_LOCAL {
                            None
                        } else if have >= need + std::mem::size_of::<libc::sockaddr_in6>()
                            || have >= need + std::mem::size_of::<libc::sockaddr_in>()
                        {
                            offender(p.add(need), have - need)
                        } else {
                            None
                        };
                        if matches!(
                            ee.ee_origin,
                            SO_EE_ORIGIN_LOCAL | SO_EE_ORIGIN_ICMP | SO_EE_ORIGIN_ICMP6
                        ) {
                            last = Some(TooBig {
                                mtu: ee.ee_info,
                                from,
                            });
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
    }
    last
}

/// The address after a `sock_extended_err` (`SO_EE_OFFENDER`).
///
/// # Safety
/// `p` must point at `len` readable bytes.
unsafe fn offender(p: *const u8, len: usize) -> Option<IpAddr> {
    if len < 2 {
        return None;
    }
    let family = std::ptr::read_unaligned(p as *const libc::sa_family_t);
    match i32::from(family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            let a: libc::sockaddr_in = std::ptr::read_unaligned(p as *const _);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let a: libc::sockaddr_in6 = std::ptr::read_unaligned(p as *const _);
            Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Wait up to `timeout` for `fd` to be readable.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

/// Receive on a connected socket until `deadline`; `Ok(None)` at the
/// deadline. Errors the socket reports (an ICMP error for an earlier
/// datagram) are returned as they come.
pub fn recv_until(s: &UdpSocket, buf: &mut [u8], deadline: Instant) -> io::Result<Option<usize>> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        if !wait_readable(s.as_raw_fd(), deadline - now)? {
            continue;
        }
        let e = match SockRef::from(s).recv_with_flags(as_uninit(buf), libc::MSG_DONTWAIT) {
            Ok(n) => return Ok(Some(n)),
            Err(e) => e,
        };
        if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(e);
    }
}

/// Bytes of the IP and transport headers in front of a payload.
pub fn udp_overhead(v6: bool) -> usize {
    if v6 {
        48
    } else {
        28
    }
}

/// ICMP echo: bytes of the IP and ICMP headers in front of the data.
pub fn icmp_overhead(v6: bool) -> usize {
    if v6 {
        48
    } else {
        28
    }
}

/// How a probe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    /// It came back.
    Back,
    /// Nothing within the timeout.
    Lost,
    /// This host refused to send it, or an ICMP error said it is too big.
    TooBig(TooBig),
}

/// An ICMP echo socket toward one address: an unprivileged ping socket
/// where `net.ipv4.ping_group_range` allows it, else a raw socket
/// (CAP_NET_RAW).
pub struct Pinger {
    sock: Socket,
    v6: bool,
    raw: bool,
    id: u16,
    seq: u16,
    buf: Vec<u8>,
}

impl Pinger {
    /// How it was opened, for reports.
    pub fn kind(&self) -> &'static str {
        if self.raw {
            "raw ICMP socket"
        } else {
            "ping socket"
        }
    }

    /// An echo socket connected to `dest`, in probe (DF) mode; `Err` says
    /// why ICMP is not permitted here.
    pub fn open(dest: IpAddr) -> Result<Pinger, String> {
        let v6 = dest.is_ipv6();
        let sa = SocketAddr::new(dest, 0);
        let (domain, proto) = if v6 {
            (Domain::IPV6, Protocol::ICMPV6)
        } else {
            (Domain::IPV4, Protocol::ICMPV4)
        };
        let mut errs = Vec::new();
        for (ty, raw) in [(Type::DGRAM, false), (Type::RAW, true)] {
            // Close-on-exec, as every socket socket2 opens.
            let sock = match Socket::new(domain, ty, Some(proto)) {
                Ok(s) => s,
                Err(e) => {
                    errs.push(e);
                    continue;
                }
            };
            if let Err(e) = sock.connect(&SockAddr::from(sa)) {
                errs.push(e);
                continue;
            }
            if let Err(e) = probe_mode(sock.as_raw_fd(), v6) {
                errs.push(e);
                continue;
            }
            let id = u16::from_be_bytes(fabperf_proto::auth::random_bytes::<2>());
            return Ok(Pinger {
                sock,
                v6,
                raw,
                id,
                seq: 0,
                buf: vec![0u8; 65536 + 128],
            });
        }
        Err(format!(
            "ICMP echo is not permitted here (ping socket: {}; raw socket: {}): it needs \
             net.ipv4.ping_group_range to include this group, or CAP_NET_RAW",
            errs.first().map_or("-".into(), |e| e.to_string()),
            errs.get(1).map_or("-".into(), |e| e.to_string())
        ))
    }

    /// Send one echo request whose IP packet is `packet` bytes (DF set),
    /// wait up to `timeout` for its reply.
    pub fn probe(&mut self, packet: usize, timeout: Duration) -> io::Result<Echo> {
        let data = packet.saturating_sub(icmp_overhead(self.v6));
        let len = 8 + data;
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut msg = vec![0u8; len];
        msg[0] = if self.v6 { 128 } else { 8 };
        msg[4..6].copy_from_slice(&self.id.to_be_bytes());
        msg[6..8].copy_from_slice(&seq.to_be_bytes());
        if self.raw && !self.v6 {
            let c = checksum(&msg);
            msg[2..4].copy_from_slice(&c.to_be_bytes());
        }
        let _ = take_too_big(self.sock.as_raw_fd());
        if let Err(e) = self.sock.send(&msg) {
            if e.raw_os_error() == Some(libc::EMSGSIZE) {
                return Ok(Echo::TooBig(
                    take_too_big(self.sock.as_raw_fd()).unwrap_or(TooBig { mtu: 0, from: None }),
                ));
            }
            return Err(e);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(Echo::Lost);
            }
            if !wait_readable(self.sock.as_raw_fd(), deadline - now)? {
                continue;
            }
            let got = self
                .sock
                .recv_with_flags(as_uninit(&mut self.buf), libc::MSG_DONTWAIT);
            let n = match got {
                Ok(n) => n,
                Err(e) => {
                    if e.raw_os_error() == Some(libc::EMSGSIZE) {
                        if let Some(t) = take_too_big(self.sock.as_raw_fd()) {
                            return Ok(Echo::TooBig(t));
                        }
                    }
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) || e.raw_os_error().is_some()
                    {
                        // Other ICMP errors (unreachable) end as a loss.
                        let _ = take_too_big(self.sock.as_raw_fd());
                        continue;
                    }
                    return Err(e);
                }
            };
            let got = &self.buf[..n];
            if let Some(icmp_len) = echo_reply(got, self.raw, self.v6, self.id, seq) {
                if icmp_len == len {
                    return Ok(Echo::Back);
                }
            }
        }
    }
}

/// The ICMP length of an echo reply matching `id` (raw sockets only: a
/// ping socket's kernel matches the id) and `seq`; `None` for anything else.
/// Raw IPv4 sockets deliver the IP header in front.
pub fn echo_reply(pkt: &[u8], raw: bool, v6: bool, id: u16, seq: u16) -> Option<usize> {
    let icmp = if raw && !v6 {
        let first = *pkt.first()?;
        if first >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(first & 0x0f) * 4;
        if ihl < 20 {
            return None;
        }
        pkt.get(ihl..)?
    } else {
        pkt
    };
    if icmp.len() < 8 {
        return None;
    }
    let reply = if v6 { 129 } else { 0 };
    if icmp[0] != reply || icmp[1] != 0 {
        return None;
    }
    if raw && u16::from_be_bytes([icmp[4], icmp[5]]) != id {
        return None;
    }
    if u16::from_be_bytes([icmp[6], icmp[7]]) != seq {
        return None;
    }
    Some(icmp.len())
}

/// The Internet checksum (RFC 1071).
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An initialised buffer lent to socket2's receive calls, which take
/// possibly-uninitialised memory.
fn as_uninit(buf: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the receive
    // calls only write initialised bytes into it.
    unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_known_echo() {
        // type 8, code 0, id 0x1234, seq 1, no data.
        let mut m = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1];
        let c = checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&m), 0);
        assert_eq!(checksum(&[0xff]), !0xff00u16);
    }

    #[test]
    fn echo_replies_are_matched_and_garbage_ignored() {
        let reply = [0u8, 0, 0, 0, 0x12, 0x34, 0, 7, 1, 2, 3];
        assert_eq!(echo_reply(&reply, false, false, 0, 7), Some(11));
        assert_eq!(echo_reply(&reply, false, false, 0, 8), None);
        assert_eq!(
            echo_reply(&reply, true, true, 0x1234, 7),
            None,
            "v6 wants 129"
        );
        let mut ip = vec![0x45u8; 1];
        ip.extend([0u8; 19]);
        ip.extend(reply);
        assert_eq!(echo_reply(&ip, true, false, 0x1234, 7), Some(11));
        assert_eq!(echo_reply(&ip, true, false, 0x4321, 7), None);
        for bad in [
            &[][..],
            &[0x4f][..],
            &[0x41, 0, 0][..],
            &[0x60; 30][..],
            &ip[..24],
        ] {
            assert_eq!(echo_reply(bad, true, false, 0x1234, 7), None);
        }
    }

    /// An echo over loopback comes back, and a datagram larger than any IP
    /// packet is refused by this host's stack; where ICMP is not permitted,
    /// the error names what it needs.
    #[test]
    fn loopback_echo_comes_back_and_an_oversized_one_is_refused() {
        for dest in ["127.0.0.1", "::1"] {
            let mut p = match Pinger::open(dest.parse().unwrap()) {
                Ok(p) => p,
                Err(e) => {
                    assert!(e.contains("CAP_NET_RAW"), "{e}");
                    continue;
                }
            };
            let t = Duration::from_secs(2);
            assert_eq!(
                p.probe(1000, t).unwrap(),
                Echo::Back,
                "{dest} ({})",
                p.kind()
            );
            match p.probe(70_000, t) {
                Ok(Echo::TooBig(_)) | Err(_) => {}
                other => panic!("{dest}: {other:?}"),
            }
        }
    }
}
