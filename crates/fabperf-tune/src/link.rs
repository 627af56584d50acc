//! Interfaces through rtnetlink: which interface holds an address, a
//! link's name, MTU and state, and setting the MTU.

use crate::nl::{find, parse_attrs, Attrs, Nl, NlError, NETLINK_ROUTE};
use netlink_packet_core::NLM_F_DUMP;
use std::net::IpAddr;
use std::time::{Duration, Instant};

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_GETADDR: u16 = 22;
const RTM_NEWADDR: u16 = 20;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_MIN_MTU: u16 = 50;
const IFLA_MAX_MTU: u16 = 51;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IF_OPER_UP: u8 = 6;
const IF_OPER_UNKNOWN: u8 = 0;

/// What the tuner needs of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mtu: u32,
    pub min_mtu: Option<u32>,
    pub max_mtu: Option<u32>,
    /// RFC 2863 operational state (6 = up, 0 = unknown as on loopback).
    pub operstate: u8,
}

fn ifinfomsg(index: u32) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    m
}

/// Parse an RTM_NEWLINK payload.
pub fn parse_link(payload: &[u8]) -> Result<Link, NlError> {
    let hdr = payload
        .get(..16)
        .ok_or_else(|| NlError::Malformed("link message shorter than ifinfomsg".into()))?;
    let index = i32::from_ne_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    let attrs = parse_attrs(&payload[16..])?;
    let name = find(&attrs, IFLA_IFNAME)
        .map(|a| a.string())
        .ok_or_else(|| NlError::Malformed("link without a name".into()))?;
    let mtu = find(&attrs, IFLA_MTU)
        .ok_or_else(|| NlError::Malformed("link without an MTU".into()))?
        .u32()?;
    Ok(Link {
        index: u32::try_from(index)
            .map_err(|_| NlError::Malformed(format!("link index {index}")))?,
        name,
        mtu,
        min_mtu: find(&attrs, IFLA_MIN_MTU).map(|a| a.u32()).transpose()?,
        max_mtu: find(&attrs, IFLA_MAX_MTU).map(|a| a.u32()).transpose()?,
        operstate: find(&attrs, IFLA_OPERSTATE)
            .map(|a| a.u8())
            .transpose()?
            .unwrap_or(IF_OPER_UNKNOWN),
    })
}

/// A link by index.
pub fn link(index: u32) -> Result<Link, NlError> {
    let mut nl = Nl::new(NETLINK_ROUTE)?;
    let replies = nl.request(RTM_GETLINK, 0, &ifinfomsg(index))?;
    replies
        .iter()
        .find(|r| r.msg_type == RTM_NEWLINK)
        .map(|r| parse_link(&r.payload))
        .unwrap_or_else(|| Err(NlError::Malformed("no link in the reply".into())))
}

/// A link by name.
pub fn link_by_name(name: &str) -> Result<Link, NlError> {
    let mut nl = Nl::new(NETLINK_ROUTE)?;
    let mut p = ifinfomsg(0);
    p.extend_from_slice(Attrs::new().str(IFLA_IFNAME, name).bytes());
    let replies = nl.request(RTM_GETLINK, 0, &p)?;
    replies
        .iter()
        .find(|r| r.msg_type == RTM_NEWLINK)
        .map(|r| parse_link(&r.payload))
        .unwrap_or_else(|| Err(NlError::Malformed("no link in the reply".into())))
}

/// Parse an RTM_NEWADDR payload: (interface index, address).
pub fn parse_addr(payload: &[u8]) -> Result<Option<(u32, IpAddr)>, NlError> {
    let hdr = payload
        .get(..8)
        .ok_or_else(|| NlError::Malformed("address message shorter than ifaddrmsg".into()))?;
    let index = u32::from_ne_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    let attrs = parse_attrs(&payload[8..])?;
    let a = find(&attrs, IFA_LOCAL).or_else(|| find(&attrs, IFA_ADDRESS));
    Ok(a.and_then(|a| match a.value.len() {
        4 => {
            let b: [u8; 4] = a.value.try_into().ok()?;
            Some((index, IpAddr::from(b)))
        }
        16 => {
            let b: [u8; 16] = a.value.try_into().ok()?;
            Some((index, IpAddr::from(b)))
        }
        _ => None,
    }))
}

/// The interface that holds `addr` in this network namespace.
pub fn link_of_addr(addr: IpAddr) -> Result<Option<Link>, NlError> {
    let mut nl = Nl::new(NETLINK_ROUTE)?;
    // struct ifaddrmsg, family AF_UNSPEC: every address.
    let replies = nl.request(RTM_GETADDR, NLM_F_DUMP, &[0u8; 8])?;
    let want = addr.to_canonical();
    for r in replies.iter().filter(|r| r.msg_type == RTM_NEWADDR) {
        if let Some((index, a)) = parse_addr(&r.payload)? {
            if a.to_canonical() == want {
                return link(index).map(Some);
            }
        }
    }
    Ok(None)
}

/// Set a link's MTU.
pub fn set_mtu(index: u32, mtu: u32) -> Result<(), NlError> {
    let mut nl = Nl::new(NETLINK_ROUTE)?;
    let mut p = ifinfomsg(index);
    p.extend_from_slice(Attrs::new().u32(IFLA_MTU, mtu).bytes());
    nl.request(RTM_NEWLINK, 0, &p).map(|_| ())
}

/// Wait (bounded) until a link is operationally up again after a change
/// that resets it (MTU, rings, channels on real NICs). True when up (or
/// the driver reports no state).
pub fn wait_up(index: u32, within: Duration) -> bool {
    let t0 = Instant::now();
    loop {
        match link(index) {
            Ok(l) if l.operstate == IF_OPER_UP || l.operstate == IF_OPER_UNKNOWN => return true,
            Err(_) => return false,
            Ok(_) => {}
        }
        if t0.elapsed() >= within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_by_address() {
        let l = link_of_addr("127.0.0.1".parse().unwrap()).unwrap().unwrap();
        assert_eq!(l.name, "lo");
        assert_eq!(link_by_name("lo").unwrap().index, l.index);
        assert!(link_of_addr("192.0.2.123".parse().unwrap())
            .unwrap()
            .is_none());
    }

    #[test]
    fn truncated_messages_are_errors() {
        assert!(parse_link(&[0; 8]).is_err());
        assert!(parse_link(&[0; 16]).is_err(), "no name, no MTU");
        assert!(parse_addr(&[0; 4]).is_err());
        assert_eq!(parse_addr(&[0; 8]).unwrap(), None);
        let mut m = ifinfomsg(2);
        m.extend_from_slice(
            Attrs::new()
                .str(IFLA_IFNAME, "fab0")
                .u8(IFLA_MTU, 1)
                .bytes(),
        );
        assert!(parse_link(&m).is_err(), "a one-byte MTU");
    }
}
