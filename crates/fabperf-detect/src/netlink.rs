//! Minimal rtnetlink dumps (addresses, IPv4 main-table routes) over a raw `NETLINK_ROUTE` socket,
//! so live detection needs no `ip` binary (distroless containers have none).

use crate::ipstate::{scope_from_num, AddrEntry, RouteEntry};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_PREFSRC: u16 = 7;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RT_TABLE_MAIN: u32 = 254;
const RTN_UNICAST: u8 = 1;
const RTM_F_CLONED: u32 = 0x200;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Iterate `rtattr`s: (type, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let (Some(len), Some(ty)) = (u16_at(b, 0), u16_at(b, 2)) else {
            break;
        };
        let len = len as usize;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((ty & 0x3fff, &b[4..len]));
        let next = align4(len).min(b.len());
        b = &b[next..];
    }
    out
}

fn ip_from(family: u8, data: &[u8]) -> Option<IpAddr> {
    match (family as i32, data.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(
            data[0], data[1], data[2], data[3],
        ))),
        (libc::AF_INET6, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(data);
            Some(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    }
}

fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf holds IF_NAMESIZE bytes as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(s.to_string_lossy().to_string())
}

/// Send one dump request and collect the payloads of messages of type `want`.
fn dump(msg_type: u16, payload: &[u8], want: u16) -> io::Result<Vec<Vec<u8>>> {
    // SAFETY: plain socket(2) call; the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let seq: u32 = 0x4642_5046; // "FPBF"
    let total = NLMSG_HDRLEN + payload.len();
    let mut req = Vec::with_capacity(total);
    req.extend_from_slice(&(total as u32).to_ne_bytes());
    req.extend_from_slice(&msg_type.to_ne_bytes());
    req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend_from_slice(&seq.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(payload);
    // SAFETY: sockaddr_nl zeroed = the kernel as destination.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: req and sa are valid for the lengths given.
    let n = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut b = &buf[..n as usize];
        if b.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "netlink socket closed during dump",
            ));
        }
        while b.len() >= NLMSG_HDRLEN {
            let len = u32_at(b, 0).unwrap_or(0) as usize;
            let ty = u16_at(b, 4).unwrap_or(0);
            let mseq = u32_at(b, 8).unwrap_or(0);
            if len < NLMSG_HDRLEN || len > b.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated netlink message",
                ));
            }
            let body = &b[NLMSG_HDRLEN..len];
            if mseq == seq {
                match ty {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = u32_at(body, 0).map(|e| e as i32).unwrap_or(0);
                        if errno != 0 {
                            return Err(io::Error::from_raw_os_error(-errno));
                        }
                    }
                    t if t == want => out.push(body.to_vec()),
                    _ => {}
                }
            }
            let next = align4(len).min(b.len());
            b = &b[next..];
        }
    }
}

/// All interface addresses (IPv4 then IPv6, kernel order), like `ip addr show`.
pub fn dump_addrs() -> io::Result<Vec<AddrEntry>> {
    // struct ifaddrmsg { family, prefixlen, flags, scope, index: u32 }
    let req = [0u8; 8];
    let msgs = dump(RTM_GETADDR, &req, RTM_NEWADDR)?;
    let mut out = Vec::new();
    for m in msgs {
        if m.len() < 8 {
            continue;
        }
        let family = m[0];
        let prefixlen = m[1];
        let scope = m[3];
        let index = u32_at(&m, 4).unwrap_or(0);
        let mut local = None;
        let mut address = None;
        for (ty, data) in attrs(&m[8..]) {
            match ty {
                IFA_LOCAL => local = ip_from(family, data),
                IFA_ADDRESS => address = ip_from(family, data),
                _ => {}
            }
        }
        let Some(addr) = local.or(address) else {
            continue;
        };
        let Some(name) = ifname(index) else {
            continue;
        };
        out.push(AddrEntry {
            ifname: name,
            addr,
            prefixlen,
            scope: scope_from_num(scope),
        });
    }
    Ok(out)
}

/// Unicast IPv4 routes of the main table, like `ip route show table main`.
pub fn dump_routes() -> io::Result<Vec<RouteEntry>> {
    // struct rtmsg { family, dst_len, src_len, tos, table, protocol, scope, type, flags: u32 }
    let mut req = [0u8; 12];
    req[0] = libc::AF_INET as u8;
    let msgs = dump(RTM_GETROUTE, &req, RTM_NEWROUTE)?;
    let mut out = Vec::new();
    for m in msgs {
        if m.len() < 12 {
            continue;
        }
        let family = m[0];
        let dst_len = m[1];
        let mut table = u32::from(m[4]);
        let rtype = m[7];
        let flags = u32_at(&m, 8).unwrap_or(0);
        if family as i32 != libc::AF_INET || rtype != RTN_UNICAST || flags & RTM_F_CLONED != 0 {
            continue;
        }
        let mut dst = None;
        let mut gateway = None;
        let mut oif = None;
        let mut prefsrc = None;
        let mut metric = None;
        for (ty, data) in attrs(&m[12..]) {
            match ty {
                RTA_DST => dst = ip_from(family, data),
                RTA_GATEWAY => gateway = ip_from(family, data),
                RTA_OIF => oif = u32_at(data, 0),
                RTA_PREFSRC => prefsrc = ip_from(family, data),
                RTA_PRIORITY => metric = u32_at(data, 0),
                RTA_TABLE => table = u32_at(data, 0).unwrap_or(table),
                RTA_MULTIPATH => {
                    // struct rtnexthop { len: u16, flags: u8, hops: u8, ifindex: i32 } + attrs
                    if let Some(nlen) = u16_at(data, 0) {
                        let nlen = (nlen as usize).min(data.len());
                        if oif.is_none() {
                            oif = u32_at(data, 4);
                        }
                        if nlen >= 8 {
                            for (t, d) in attrs(&data[8..nlen]) {
                                if t == RTA_GATEWAY && gateway.is_none() {
                                    gateway = ip_from(family, d);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if table != RT_TABLE_MAIN {
            continue;
        }
        let dst = if dst_len == 0 {
            "default".to_string()
        } else {
            match dst {
                Some(d) => format!("{d}/{dst_len}"),
                None => continue,
            }
        };
        out.push(RouteEntry {
            dst,
            gateway: gateway.map(|g| g.to_string()),
            dev: oif.and_then(ifname),
            prefsrc: prefsrc.map(|p| p.to_string()),
            metric,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_address_is_dumped() {
        // Every Linux netns has lo with 127.0.0.1/8 once it is up; if lo is down the dump is
        // still well-formed, so only check the parser does not fail and names resolve.
        let addrs = dump_addrs().expect("netlink address dump");
        for a in &addrs {
            assert!(!a.ifname.is_empty());
        }
        dump_routes().expect("netlink route dump");
    }

    #[test]
    fn attr_parser_tolerates_garbage() {
        assert!(attrs(&[1, 0]).is_empty());
        assert!(attrs(&[200, 0, 1, 0, 9]).is_empty());
        let a = attrs(&[8, 0, 1, 0, 10, 0, 0, 1]);
        assert_eq!(a.len(), 1);
        assert_eq!(
            ip_from(libc::AF_INET as u8, a[0].1),
            Some("10.0.0.1".parse().unwrap())
        );
    }
}
