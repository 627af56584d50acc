//! rtnetlink dumps of the live host (links, addresses, IPv4 main-table routes, qdiscs and
//! traffic classes) through netlink-sys and netlink-packet-route, so live detection needs no
//! `ip` or `tc` binary (distroless containers have none).
//!
//! The byte parsing is split from the socket: [`parse_messages`] turns one received buffer into
//! [`Item`]s and is what the fuzz target and the malformed-input tests drive.

use crate::ipstate::{scope_from_num, AddrEntry, RouteEntry};
use crate::tc::{TcHandle, TcObject};
use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_DUMP_INTR,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteType,
};
use netlink_packet_route::tc::{TcAttribute, TcMessage, TcOption};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;

/// How often a dump is restarted when the kernel flags it inconsistent (`NLM_F_DUMP_INTR`:
/// the table changed while it was being dumped).
const DUMP_ATTEMPTS: usize = 5;

/// One object of a dump, with interface indexes not yet turned into names.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Link {
        index: u32,
        name: String,
    },
    Addr {
        index: u32,
        addr: IpAddr,
        prefixlen: u8,
        scope: u8,
    },
    /// A unicast IPv4 route of the main table.
    Route {
        dst: Option<(IpAddr, u8)>,
        gateway: Option<IpAddr>,
        oif: Option<u32>,
        prefsrc: Option<IpAddr>,
        metric: Option<u32>,
    },
    /// A qdisc (`class == false`) or a traffic class.
    Tc(TcObject),
}

/// What one received buffer held.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Parsed {
    pub items: Vec<Item>,
    /// `NLMSG_DONE` of the dump was seen.
    pub done: bool,
    /// A message carried `NLM_F_DUMP_INTR`: the dump is inconsistent and must be redone.
    pub interrupted: bool,
    /// Messages that could not be decoded (skipped).
    pub skipped: Vec<String>,
}

/// Why a buffer or a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("netlink: {0}")]
    Io(#[from] io::Error),
    #[error("netlink: malformed message at byte {offset}: {what}")]
    Malformed { offset: usize, what: String },
    #[error("netlink: the kernel answered the dump with error {0}")]
    Kernel(io::Error),
    #[error("netlink: the table kept changing during the dump ({DUMP_ATTEMPTS} attempts were interrupted); retry")]
    Interrupted,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parse one received buffer: a sequence of netlink messages. Messages of another sequence
/// number are ignored; messages the route family cannot decode are skipped with a note; a
/// framing error (a length that does not fit) ends the buffer with an error.
pub fn parse_messages(buf: &[u8], seq: u32) -> Result<Parsed, NetlinkError> {
    let mut out = Parsed::default();
    let mut off = 0usize;
    while off < buf.len() {
        let rest = &buf[off..];
        let nb = NetlinkBuffer::new_checked(rest).map_err(|e| NetlinkError::Malformed {
            offset: off,
            what: e.to_string(),
        })?;
        let len = nb.length() as usize;
        let msg_bytes = &rest[..len];
        let flags = nb.flags();
        let mseq = nb.sequence_number();
        off += align4(len).max(len);
        if mseq != seq {
            continue;
        }
        if flags & NLM_F_DUMP_INTR != 0 {
            out.interrupted = true;
        }
        match NetlinkMessage::<RouteNetlinkMessage>::deserialize(msg_bytes) {
            Ok(m) => match m.payload {
                NetlinkPayload::Done(_) => {
                    out.done = true;
                    return Ok(out);
                }
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    // The kernel sends -errno; netlink-packet-core negates it
                    // (which overflows for i32::MIN), so take the code here.
                    let errno = e.code.map_or(0, |c| c.get().checked_neg().unwrap_or(0));
                    return Err(NetlinkError::Kernel(std::io::Error::from_raw_os_error(
                        errno,
                    )));
                }
                NetlinkPayload::InnerMessage(inner) => {
                    if let Some(item) = to_item(inner) {
                        out.items.push(item);
                    }
                }
                _ => {}
            },
            Err(e) => out
                .skipped
                .push(format!("message type {}: {e}", nb.message_type())),
        }
    }
    Ok(out)
}

fn to_item(m: RouteNetlinkMessage) -> Option<Item> {
    match m {
        RouteNetlinkMessage::NewLink(l) => link_item(l),
        RouteNetlinkMessage::NewAddress(a) => addr_item(a),
        RouteNetlinkMessage::NewRoute(r) => route_item(r),
        RouteNetlinkMessage::NewQueueDiscipline(t) => Some(Item::Tc(tc_object(t, false)?)),
        RouteNetlinkMessage::NewTrafficClass(t) => Some(Item::Tc(tc_object(t, true)?)),
        _ => None,
    }
}

fn link_item(l: LinkMessage) -> Option<Item> {
    let name = l.attributes.into_iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n),
        _ => None,
    })?;
    Some(Item::Link {
        index: l.header.index,
        name,
    })
}

fn addr_item(a: AddressMessage) -> Option<Item> {
    let mut local = None;
    let mut address = None;
    for attr in a.attributes {
        match attr {
            AddressAttribute::Local(ip) => local = Some(ip),
            AddressAttribute::Address(ip) => address = Some(ip),
            _ => {}
        }
    }
    let addr = local.or(address)?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if a.header.prefix_len > max {
        return None;
    }
    Some(Item::Addr {
        index: a.header.index,
        addr,
        prefixlen: a.header.prefix_len,
        scope: a.header.scope.into(),
    })
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn route_item(r: RouteMessage) -> Option<Item> {
    let h = &r.header;
    if h.address_family != AddressFamily::Inet
        || h.kind != RouteType::Unicast
        || h.flags.contains(RouteFlags::Cloned)
        || h.destination_prefix_length > 32
    {
        return None;
    }
    let mut table = u32::from(h.table);
    let mut dst = None;
    let mut gateway = None;
    let mut oif = None;
    let mut prefsrc = None;
    let mut metric = None;
    for attr in &r.attributes {
        match attr {
            RouteAttribute::Destination(a) => dst = route_ip(a),
            RouteAttribute::Gateway(a) => gateway = route_ip(a),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::PrefSource(a) => prefsrc = route_ip(a),
            RouteAttribute::Priority(p) => metric = Some(*p),
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::MultiPath(hops) => {
                // The first next hop stands for the route, as `ip route` lists it first.
                if let Some(nh) = hops.first() {
                    if oif.is_none() {
                        oif = Some(nh.interface_index);
                    }
                    if gateway.is_none() {
                        gateway = nh.attributes.iter().find_map(|a| match a {
                            RouteAttribute::Gateway(g) => route_ip(g),
                            _ => None,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
        return None;
    }
    let plen = h.destination_prefix_length;
    let dst = if plen == 0 { None } else { Some((dst?, plen)) };
    Some(Item::Route {
        dst,
        gateway,
        oif,
        prefsrc,
        metric,
    })
}

fn tc_object(t: TcMessage, class: bool) -> Option<TcObject> {
    let kind = t.attributes.iter().find_map(|a| match a {
        TcAttribute::Kind(k) => Some(k.clone()),
        _ => None,
    })?;
    let mut options = Vec::new();
    for a in &t.attributes {
        if let TcAttribute::Options(opts) = a {
            for o in opts {
                if let TcOption::Other(nla) = o {
                    use netlink_packet_core::Nla;
                    let mut v = vec![0u8; nla.value_len()];
                    nla.emit_value(&mut v);
                    options = v;
                }
            }
        }
    }
    let mut obj = TcObject {
        ifindex: u32::try_from(t.header.index).ok()?,
        ifname: String::new(),
        kind,
        class,
        handle: TcHandle {
            major: t.header.handle.major,
            minor: t.header.handle.minor,
        },
        parent: TcHandle {
            major: t.header.parent.major,
            minor: t.header.parent.minor,
        },
        rate_bps: None,
        ceil_bps: None,
        default_class: None,
    };
    crate::tc::decode_options(&mut obj, &options);
    Some(obj)
}

fn request(msg: RouteNetlinkMessage, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    m.finalize();
    let mut buf = vec![0u8; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// Run one dump to its end; restart it while the kernel flags it interrupted.
fn dump(make: impl Fn() -> RouteNetlinkMessage) -> Result<Vec<Item>, NetlinkError> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let mut seq: u32 = 0x4642_5046; // "FPBF"
    for _ in 0..DUMP_ATTEMPTS {
        seq = seq.wrapping_add(1);
        sock.send(&request(make(), seq), 0)?;
        let mut items = Vec::new();
        let mut interrupted = false;
        loop {
            // Peek at the datagram's size first so that no message is ever truncated.
            let mut probe: Vec<u8> = Vec::with_capacity(0);
            let size = sock.recv(&mut probe, libc::MSG_PEEK | libc::MSG_TRUNC)?;
            let mut buf: Vec<u8> = Vec::with_capacity(size.max(16));
            let n = sock.recv(&mut buf, 0)?;
            if n == 0 {
                return Err(NetlinkError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "netlink socket closed during the dump",
                )));
            }
            let p = parse_messages(&buf[..n.min(buf.len())], seq)?;
            items.extend(p.items);
            interrupted |= p.interrupted;
            if p.done {
                break;
            }
        }
        if !interrupted {
            return Ok(items);
        }
    }
    Err(NetlinkError::Interrupted)
}

/// Parse the answer to one request that is not a dump: the messages of
/// sequence `seq` in `buf`; an error message from the kernel is an error.
pub fn parse_answer(buf: &[u8], seq: u32) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < buf.len() {
        let rest = &buf[off..];
        let nb = NetlinkBuffer::new_checked(rest).map_err(|e| NetlinkError::Malformed {
            offset: off,
            what: e.to_string(),
        })?;
        let len = nb.length() as usize;
        let msg_bytes = &rest[..len];
        let mseq = nb.sequence_number();
        off += align4(len).max(len);
        if mseq != seq {
            continue;
        }
        match NetlinkMessage::<RouteNetlinkMessage>::deserialize(msg_bytes) {
            Ok(m) => match m.payload {
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    let errno = e.code.map_or(0, |c| c.get().checked_neg().unwrap_or(0));
                    return Err(NetlinkError::Kernel(std::io::Error::from_raw_os_error(
                        errno,
                    )));
                }
                NetlinkPayload::InnerMessage(inner) => out.push(inner),
                _ => {}
            },
            Err(e) => {
                return Err(NetlinkError::Malformed {
                    offset: off,
                    what: e.to_string(),
                })
            }
        }
    }
    Ok(out)
}

/// Send one request (not a dump) and parse the answer.
fn ask(msg: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let seq: u32 = 0x4642_5047;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    m.finalize();
    let mut req = vec![0u8; m.buffer_len()];
    m.serialize(&mut req);
    sock.send(&req, 0)?;
    let mut probe: Vec<u8> = Vec::with_capacity(0);
    let size = sock.recv(&mut probe, libc::MSG_PEEK | libc::MSG_TRUNC)?;
    let mut buf: Vec<u8> = Vec::with_capacity(size.max(16));
    let n = sock.recv(&mut buf, 0)?;
    parse_answer(&buf[..n.min(buf.len())], seq)
}

/// The kernel's route to one address, as `ip route get` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteTo {
    /// The output interface's index.
    pub oif: Option<u32>,
    /// The source address the kernel picks.
    pub prefsrc: Option<IpAddr>,
}

/// The route a packet to `dst` takes (RTM_GETROUTE for the address).
pub fn route_get(dst: IpAddr) -> Result<RouteTo, NetlinkError> {
    let mut m = RouteMessage::default();
    m.header.address_family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
    m.attributes.push(RouteAttribute::Destination(match dst {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }));
    let answer = ask(RouteNetlinkMessage::GetRoute(m))?;
    Ok(route_to(&answer))
}

/// The output interface and source of a route-get answer.
pub fn route_to(answer: &[RouteNetlinkMessage]) -> RouteTo {
    let mut out = RouteTo::default();
    for m in answer {
        if let RouteNetlinkMessage::NewRoute(r) = m {
            for a in &r.attributes {
                match a {
                    RouteAttribute::Oif(i) => out.oif = Some(*i),
                    RouteAttribute::PrefSource(a) => out.prefsrc = route_ip(a),
                    _ => {}
                }
            }
        }
    }
    out
}

/// A link by index: its name and, for a VXLAN or Geneve device, whether
/// its underlay is IPv6 (`Some(true)`), IPv4 (`Some(false)`) or not fixed
/// by the device (a device in external/metadata mode: `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkDetails {
    pub name: String,
    pub underlay_v6: Option<bool>,
}

/// Ask the kernel for link `index` (RTM_GETLINK).
pub fn link_details(index: u32) -> Result<Option<LinkDetails>, NetlinkError> {
    let mut m = LinkMessage::default();
    m.header.index = index;
    let answer = ask(RouteNetlinkMessage::GetLink(m))?;
    Ok(link_details_of(&answer))
}

/// The details of the first link in an answer.
pub fn link_details_of(answer: &[RouteNetlinkMessage]) -> Option<LinkDetails> {
    use netlink_packet_route::link::{InfoData, InfoGeneve, InfoVxlan, LinkInfo};
    let l = answer.iter().find_map(|m| match m {
        RouteNetlinkMessage::NewLink(l) => Some(l),
        _ => None,
    })?;
    let mut d = LinkDetails::default();
    for a in &l.attributes {
        match a {
            LinkAttribute::IfName(n) => d.name = n.clone(),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    match i {
                        LinkInfo::Data(InfoData::Vxlan(v)) => {
                            for x in v {
                                match x {
                                    InfoVxlan::Group6(_) | InfoVxlan::Local6(_) => {
                                        d.underlay_v6 = Some(true)
                                    }
                                    InfoVxlan::Group(_) | InfoVxlan::Local(_) => {
                                        d.underlay_v6.get_or_insert(false);
                                    }
                                    _ => {}
                                }
                            }
                        }
                        LinkInfo::Data(InfoData::Geneve(v)) => {
                            for x in v {
                                match x {
                                    InfoGeneve::Remote6(_) | InfoGeneve::Local6(_) => {
                                        d.underlay_v6 = Some(true)
                                    }
                                    InfoGeneve::Remote(_) | InfoGeneve::Local(_) => {
                                        d.underlay_v6.get_or_insert(false);
                                    }
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(d)
}

/// Links, addresses, IPv4 main-table routes and the traffic-control objects of this network
/// namespace, with interface names resolved from the same link dump.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveDump {
    pub links: BTreeMap<u32, String>,
    pub addrs: Vec<AddrEntry>,
    pub routes: Vec<RouteEntry>,
    pub tc: Vec<TcObject>,
}

/// Turn parsed items into named entries; objects on unknown interfaces are dropped.
pub fn resolve(items: Vec<Item>) -> LiveDump {
    let mut d = LiveDump::default();
    for it in &items {
        if let Item::Link { index, name } = it {
            d.links.insert(*index, name.clone());
        }
    }
    for it in items {
        match it {
            Item::Link { .. } => {}
            Item::Addr {
                index,
                addr,
                prefixlen,
                scope,
            } => {
                if let Some(name) = d.links.get(&index) {
                    d.addrs.push(AddrEntry {
                        ifname: name.clone(),
                        addr,
                        prefixlen,
                        scope: scope_from_num(scope),
                    });
                }
            }
            Item::Route {
                dst,
                gateway,
                oif,
                prefsrc,
                metric,
            } => d.routes.push(RouteEntry {
                dst: match dst {
                    None => "default".to_string(),
                    Some((a, p)) => format!("{a}/{p}"),
                },
                gateway: gateway.map(|g| g.to_string()),
                dev: oif.and_then(|i| d.links.get(&i).cloned()),
                prefsrc: prefsrc.map(|p| p.to_string()),
                metric,
            }),
            Item::Tc(mut t) => {
                if let Some(name) = d.links.get(&t.ifindex) {
                    t.ifname = name.clone();
                    d.tc.push(t);
                }
            }
        }
    }
    d
}

/// Dump this network namespace. Qdiscs are dumped for every interface at once; classes only for
/// interfaces whose qdiscs have classes (htb), one dump each, as the kernel requires.
pub fn dump_all() -> Result<LiveDump, NetlinkError> {
    let mut items = dump(|| RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
    items.extend(dump(|| {
        RouteNetlinkMessage::GetAddress(AddressMessage::default())
    })?);
    items.extend(dump(|| {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        RouteNetlinkMessage::GetRoute(m)
    })?);
    let qdiscs = dump(|| RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()))?;
    let mut classful: Vec<u32> = qdiscs
        .iter()
        .filter_map(|i| match i {
            Item::Tc(t) if crate::tc::has_classes(&t.kind) => Some(t.ifindex),
            _ => None,
        })
        .collect();
    classful.sort_unstable();
    classful.dedup();
    items.extend(qdiscs);
    for idx in classful {
        let Ok(i) = i32::try_from(idx) else { continue };
        items.extend(dump(|| {
            RouteNetlinkMessage::GetTrafficClass(TcMessage::with_index(i))
        })?);
    }
    Ok(resolve(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_dump_has_loopback_and_names() {
        let d = dump_all().expect("netlink dump");
        assert!(d.links.values().any(|n| n == "lo"), "{:?}", d.links);
        for a in &d.addrs {
            assert!(!a.ifname.is_empty());
        }
    }

    fn msg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = 16 + payload.len();
        let mut v = Vec::new();
        v.extend_from_slice(&(len as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn new_link(index: u32, name: &str, seq: u32) -> Vec<u8> {
        let mut l = LinkMessage::default();
        l.header.index = index;
        l.attributes.push(LinkAttribute::IfName(name.into()));
        let mut header = NetlinkHeader::default();
        header.sequence_number = seq;
        header.flags = netlink_packet_core::NLM_F_MULTIPART;
        let mut m = NetlinkMessage::new(
            header,
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)),
        );
        m.finalize();
        let mut b = vec![0u8; m.buffer_len()];
        m.serialize(&mut b);
        b
    }

    #[test]
    fn messages_parse_and_malformed_buffers_are_errors_not_panics() {
        let seq = 9;
        let mut buf = new_link(3, "eth0", seq);
        buf.extend(new_link(4, "other-seq", seq + 1));
        buf.extend(msg(3, 0, seq, &0i32.to_ne_bytes())); // NLMSG_DONE
        let p = parse_messages(&buf, seq).unwrap();
        assert!(p.done && !p.interrupted);
        assert_eq!(
            p.items,
            vec![Item::Link {
                index: 3,
                name: "eth0".into()
            }]
        );
        // NLM_F_DUMP_INTR on any message marks the dump for a restart.
        let mut b = new_link(3, "eth0", seq);
        b[6] |= NLM_F_DUMP_INTR as u8;
        assert!(parse_messages(&b, seq).unwrap().interrupted);
        // The kernel's error answer becomes an error.
        let e = parse_messages(&msg(2, 0, seq, &(-1i32).to_ne_bytes().repeat(5)), seq);
        assert!(matches!(e, Err(NetlinkError::Kernel(_))), "{e:?}");
        // ... even with an error code that has no positive errno (i32::MIN:
        // negating it overflows; found by fuzzing).
        let mut body = i32::MIN.to_ne_bytes().to_vec();
        body.extend((-1i32).to_ne_bytes().repeat(4));
        let e = parse_messages(&msg(2, 0, seq, &body), seq);
        assert!(matches!(e, Err(NetlinkError::Kernel(_))), "{e:?}");
        // Framing errors: too short, length beyond the buffer, length below a header.
        let good = new_link(3, "eth0", seq);
        for bad in [
            vec![1u8, 2, 3],
            good[..good.len() - 1].to_vec(),
            msg(16, 0, seq, &[])[..15].to_vec(),
            {
                let mut x = good.clone();
                x[..4].copy_from_slice(&u32::MAX.to_ne_bytes());
                x
            },
            {
                let mut x = good.clone();
                x[..4].copy_from_slice(&4u32.to_ne_bytes());
                x
            },
        ] {
            assert!(parse_messages(&bad, seq).is_err(), "{bad:?}");
        }
        // Every truncation of a valid buffer, and garbage bodies of each message type we use,
        // are handled without a panic.
        for cut in 0..buf.len() {
            let _ = parse_messages(&buf[..cut], seq);
        }
        for ty in [16u16, 20, 24, 36, 40] {
            for body in [
                vec![],
                vec![0xff; 3],
                vec![0xff; 40],
                vec![8, 0, 1, 0, 1, 2],
            ] {
                let p = parse_messages(&msg(ty, 0, seq, &body), seq).unwrap();
                assert!(p.items.len() <= 1);
            }
        }
        // Items without names are dropped when resolving.
        let d = resolve(vec![Item::Addr {
            index: 42,
            addr: "10.0.0.1".parse().unwrap(),
            prefixlen: 8,
            scope: 0,
        }]);
        assert!(d.addrs.is_empty());
    }

    #[test]
    fn requests_are_well_formed_dumps() {
        let b = request(
            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
            7,
        );
        let nb = NetlinkBuffer::new_checked(&b[..]).unwrap();
        assert_eq!(nb.length() as usize, b.len());
        assert_eq!(nb.flags(), NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(nb.sequence_number(), 7);
    }
}
