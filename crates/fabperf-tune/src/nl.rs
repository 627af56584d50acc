//! Raw netlink exchanges for the tuner: an attribute builder, request/ack
//! and dump round trips with bounded waits, kernel errors with their
//! extended-ack text, and generic netlink family resolution.
//!
//! The socket comes from netlink-sys, the flag constants from
//! netlink-packet-core; the few messages the tuner sends (ethtool get/set,
//! RTM_GETLINK/SETLINK, RTM_GETADDR) are built here. Every reply is parsed
//! as untrusted bytes: lengths are checked before use, and a malformed
//! message is an error, never a panic.

use netlink_packet_core::{NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_REQUEST};
use netlink_sys::Socket;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

pub use netlink_sys::protocols::{NETLINK_GENERIC, NETLINK_ROUTE};

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));
const HDR: usize = 16;
/// How long one netlink reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a netlink exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlError {
    /// The kernel refused: errno and its extended-ack message, if any.
    Kernel { errno: i32, msg: Option<String> },
    /// The socket failed or timed out.
    Io(String),
    /// A reply that does not parse.
    Malformed(String),
}

impl NlError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            NlError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
    pub fn is_unsupported(&self) -> bool {
        matches!(self.errno(), Some(libc::EOPNOTSUPP))
    }
    pub fn is_denied(&self) -> bool {
        matches!(self.errno(), Some(libc::EPERM) | Some(libc::EACCES))
    }
}

impl std::fmt::Display for NlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NlError::Kernel { errno, msg } => {
                let text = io::Error::from_raw_os_error(*errno).to_string();
                let text = text.split(" (os error").next().unwrap_or(&text).to_string();
                match msg {
                    Some(m) => write!(f, "{text} ({})", fabperf_proto::text::escape(m)),
                    None => write!(f, "{text}"),
                }
            }
            NlError::Io(s) => write!(f, "netlink: {s}"),
            NlError::Malformed(s) => write!(f, "netlink: malformed reply: {s}"),
        }
    }
}

impl std::error::Error for NlError {}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds a sequence of netlink attributes (type-length-value, 4-byte
/// aligned), with nesting.
#[derive(Debug, Default, Clone)]
pub struct Attrs {
    buf: Vec<u8>,
    open: Vec<usize>,
}

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }
    fn put(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = 4 + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }
    pub fn u8(&mut self, kind: u16, v: u8) -> &mut Self {
        self.put(kind, &[v])
    }
    pub fn u16(&mut self, kind: u16, v: u16) -> &mut Self {
        self.put(kind, &v.to_ne_bytes())
    }
    pub fn u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.put(kind, &v.to_ne_bytes())
    }
    /// A NUL-terminated string.
    pub fn str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.put(kind, &v)
    }
    /// A flag attribute (no value).
    pub fn flag(&mut self, kind: u16) -> &mut Self {
        self.put(kind, &[])
    }
    pub fn nest(&mut self, kind: u16) -> &mut Self {
        self.open.push(self.buf.len());
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }
    pub fn end(&mut self) -> &mut Self {
        if let Some(start) = self.open.pop() {
            let len = (self.buf.len() - start) as u16;
            self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        }
        self
    }
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// One attribute of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    pub fn u8(&self) -> Result<u8, NlError> {
        self.value
            .first()
            .copied()
            .ok_or_else(|| NlError::Malformed(format!("attribute {} has no u8", self.kind)))
    }
    pub fn u16(&self) -> Result<u16, NlError> {
        match self.value.get(..2) {
            Some(b) => Ok(u16::from_ne_bytes([b[0], b[1]])),
            None => Err(NlError::Malformed(format!(
                "attribute {} is {} bytes, not a u16",
                self.kind,
                self.value.len()
            ))),
        }
    }
    pub fn u32(&self) -> Result<u32, NlError> {
        match self.value.get(..4) {
            Some(b) => Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            None => Err(NlError::Malformed(format!(
                "attribute {} is {} bytes, not a u32",
                self.kind,
                self.value.len()
            ))),
        }
    }
    /// A string, up to its NUL (or the attribute's end), lossy UTF-8, at
    /// most 256 bytes.
    pub fn string(&self) -> String {
        let end = self
            .value
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.value.len())
            .min(256);
        String::from_utf8_lossy(&self.value[..end]).into_owned()
    }
    pub fn nested(&self) -> Result<Vec<Attr<'a>>, NlError> {
        parse_attrs(self.value)
    }
}

/// The attributes of a buffer (type-length-value, 4-byte aligned). A
/// length that does not fit is an error.
pub fn parse_attrs(buf: &[u8]) -> Result<Vec<Attr<'_>>, NlError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < buf.len() {
        let h = buf.get(off..off + 4).ok_or_else(|| {
            NlError::Malformed(format!(
                "{} stray byte(s) after the attributes",
                buf.len() - off
            ))
        })?;
        let len = u16::from_ne_bytes([h[0], h[1]]) as usize;
        let kind = u16::from_ne_bytes([h[2], h[3]]) & NLA_TYPE_MASK;
        if len < 4 || off + len > buf.len() {
            return Err(NlError::Malformed(format!(
                "attribute length {len} at byte {off} of {}",
                buf.len()
            )));
        }
        out.push(Attr {
            kind,
            value: &buf[off + 4..off + len],
        });
        off += align4(len);
    }
    Ok(out)
}

/// The first attribute of a kind.
pub fn find<'a, 'b>(attrs: &'b [Attr<'a>], kind: u16) -> Option<&'b Attr<'a>> {
    attrs.iter().find(|a| a.kind == kind)
}

/// A reply message: its type and the bytes after the netlink header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub msg_type: u16,
    pub payload: Vec<u8>,
}

/// What one received buffer held for a request.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub replies: Vec<Reply>,
    /// The request is over (ACK, error or end of dump).
    pub finished: bool,
}

/// Parse one received buffer of netlink messages for sequence `seq`.
/// Messages of other sequences are skipped; a kernel error ends the
/// exchange with that error.
pub fn parse_buffer(buf: &[u8], seq: u32) -> Result<Batch, NlError> {
    let mut out = Batch::default();
    let mut off = 0usize;
    while off + HDR <= buf.len() {
        let h = &buf[off..off + HDR];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let msg_type = u16::from_ne_bytes([h[4], h[5]]);
        let flags = u16::from_ne_bytes([h[6], h[7]]);
        let mseq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
        if len < HDR || off + len > buf.len() {
            return Err(NlError::Malformed(format!(
                "message length {len} at byte {off} of {}",
                buf.len()
            )));
        }
        let payload = &buf[off + HDR..off + len];
        off += align4(len);
        if mseq != seq {
            continue;
        }
        match msg_type {
            NLMSG_ERROR => {
                let code = payload
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(|| NlError::Malformed("error message without a code".into()))?;
                if code == 0 {
                    out.finished = true;
                    return Ok(out);
                }
                // The kernel sends -errno; guard the negation.
                let errno = code.checked_neg().filter(|e| *e > 0).unwrap_or(libc::EIO);
                let msg = if flags & NLM_F_ACK_TLVS != 0 {
                    // After the code: the request's header, and its payload
                    // unless capped.
                    let inner_len = payload
                        .get(4..8)
                        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
                        .unwrap_or(0);
                    let skip = if flags & NLM_F_CAPPED != 0 {
                        4 + HDR
                    } else {
                        4 + align4(inner_len.max(HDR))
                    };
                    payload.get(skip..).and_then(|tlv| {
                        parse_attrs(tlv)
                            .ok()?
                            .iter()
                            .find(|a| a.kind == NLMSGERR_ATTR_MSG)
                            .map(|a| a.string())
                            .filter(|s| !s.is_empty())
                    })
                } else {
                    None
                };
                return Err(NlError::Kernel { errno, msg });
            }
            NLMSG_DONE => {
                if let Some(b) = payload.get(..4) {
                    let code = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                    if code < 0 {
                        return Err(NlError::Kernel {
                            errno: code.checked_neg().unwrap_or(libc::EIO),
                            msg: None,
                        });
                    }
                }
                out.finished = true;
                return Ok(out);
            }
            _ => out.replies.push(Reply {
                msg_type,
                payload: payload.to_vec(),
            }),
        }
    }
    Ok(out)
}

/// A netlink socket of one protocol with bounded waits.
pub struct Nl {
    sock: Socket,
    seq: u32,
}

impl Nl {
    pub fn new(protocol: isize) -> Result<Nl, NlError> {
        let io = |what: &str, e: io::Error| NlError::Io(format!("{what}: {e}"));
        let mut sock = Socket::new(protocol).map_err(|e| io("opening a netlink socket", e))?;
        sock.bind_auto()
            .map_err(|e| io("binding a netlink socket", e))?;
        // Best effort: the kernel's reason for a refusal, and no echo of
        // the request in errors.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        let tv = libc::timeval {
            tv_sec: REPLY_TIMEOUT.as_secs() as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: a valid socket and a timeval of the right size.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io("setting a receive timeout", io::Error::last_os_error()));
        }
        Ok(Nl { sock, seq: 1 })
    }

    /// Send one request and collect its replies until the ACK (or the end
    /// of a dump). `flags` are added to `NLM_F_REQUEST | NLM_F_ACK`.
    pub fn request(
        &mut self,
        msg_type: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Vec<Reply>, NlError> {
        self.seq = self.seq.wrapping_add(1).max(1);
        let seq = self.seq;
        let len = HDR + payload.len();
        let mut msg = Vec::with_capacity(align4(len));
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&msg_type.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(payload);
        self.sock
            .send(&msg, 0)
            .map_err(|e| NlError::Io(format!("sending a request: {e}")))?;
        let mut replies = Vec::new();
        // A dump of a big table arrives in many buffers; a request gets
        // an answer in a few. Bound the loop anyway.
        for _ in 0..100_000 {
            let timeout = |e: io::Error| {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    NlError::Io(format!(
                        "the kernel did not answer within {} s",
                        REPLY_TIMEOUT.as_secs()
                    ))
                } else {
                    NlError::Io(format!("receiving: {e}"))
                }
            };
            // Peek at the datagram's size so that no message is truncated.
            let mut probe: Vec<u8> = Vec::with_capacity(0);
            let size = self
                .sock
                .recv(&mut probe, libc::MSG_PEEK | libc::MSG_TRUNC)
                .map_err(timeout)?;
            let mut buf: Vec<u8> = Vec::with_capacity(size.clamp(16, 16 << 20));
            let n = self.sock.recv(&mut buf, 0).map_err(timeout)?;
            if n == 0 {
                return Err(NlError::Io("the netlink socket closed".into()));
            }
            let b = parse_buffer(&buf[..n.min(buf.len())], seq)?;
            replies.extend(b.replies);
            if b.finished {
                return Ok(replies);
            }
        }
        Err(NlError::Io("the kernel's answer did not end".into()))
    }
}

/// Generic netlink: the family's id by name (e.g. `ethtool`).
pub fn genl_family(nl: &mut Nl, name: &str) -> Result<u16, NlError> {
    const GENL_ID_CTRL: u16 = 0x10;
    const CTRL_CMD_GETFAMILY: u8 = 3;
    const CTRL_ATTR_FAMILY_ID: u16 = 1;
    const CTRL_ATTR_FAMILY_NAME: u16 = 2;
    let mut p = vec![CTRL_CMD_GETFAMILY, 1, 0, 0];
    p.extend_from_slice(Attrs::new().str(CTRL_ATTR_FAMILY_NAME, name).bytes());
    let replies = nl.request(GENL_ID_CTRL, 0, &p)?;
    for r in &replies {
        let attrs = parse_attrs(r.payload.get(4..).unwrap_or(&[]))?;
        if let Some(a) = find(&attrs, CTRL_ATTR_FAMILY_ID) {
            return a.u16();
        }
    }
    Err(NlError::Malformed(format!(
        "no id in the answer for generic netlink family {name}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(msg_type: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = HDR + payload.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&msg_type.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(align4(m.len()), 0);
        m
    }

    #[test]
    fn attrs_round_trip_with_nesting() {
        let mut a = Attrs::new();
        a.u32(6, 4096)
            .nest(1)
            .str(2, "fab0")
            .end()
            .u8(11, 1)
            .flag(7);
        let parsed = parse_attrs(a.bytes()).unwrap();
        assert_eq!(parsed.len(), 4);
        assert_eq!(parsed[0].u32().unwrap(), 4096);
        let inner = parsed[1].nested().unwrap();
        assert_eq!(inner[0].kind, 2);
        assert_eq!(inner[0].string(), "fab0");
        assert_eq!(parsed[2].u8().unwrap(), 1);
        assert_eq!(parsed[3].kind, 7);
        assert!(parsed[3].value.is_empty());
    }

    #[test]
    fn errors_carry_the_extended_ack_text() {
        let mut p = Vec::new();
        p.extend_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
        p.extend_from_slice(&msg(20, 5, 9, &[])[..HDR]);
        p.extend_from_slice(
            Attrs::new()
                .str(NLMSGERR_ATTR_MSG, "no ring\n\x1b[31m")
                .bytes(),
        );
        let buf = msg(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, 9, &p);
        let e = parse_buffer(&buf, 9).unwrap_err();
        assert!(e.is_unsupported());
        let text = e.to_string();
        assert!(text.contains("no ring"), "{text}");
        assert!(!text.contains('\x1b'), "escaped: {text}");
        // An ACK ends the exchange; other sequences are ignored.
        let mut ok = msg(16, 0, 8, &[1, 2, 3, 4]);
        ok.extend(msg(NLMSG_ERROR, 0, 9, &0i32.to_ne_bytes()));
        let b = parse_buffer(&ok, 9).unwrap();
        assert!(b.finished && b.replies.is_empty());
    }

    #[test]
    fn hostile_buffers_are_errors_not_panics() {
        // Length below the header, beyond the buffer, an error code of
        // i32::MIN, a truncated error, attributes that overrun.
        let mut short = msg(16, 0, 1, &[]);
        short[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert!(parse_buffer(&short, 1).is_err());
        let mut long = msg(16, 0, 1, &[0; 8]);
        long[0..4].copy_from_slice(&4000u32.to_ne_bytes());
        assert!(parse_buffer(&long, 1).is_err());
        let e = parse_buffer(&msg(NLMSG_ERROR, 0, 1, &i32::MIN.to_ne_bytes()), 1).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
        assert!(parse_buffer(&msg(NLMSG_ERROR, 0, 1, &[1]), 1).is_err());
        let e = parse_buffer(
            &msg(
                NLMSG_ERROR,
                NLM_F_ACK_TLVS,
                1,
                &[0xff, 0xff, 0xff, 0xff, 200, 0, 0, 0],
            ),
            1,
        )
        .unwrap_err();
        assert_eq!(e.errno(), Some(1));
        assert!(parse_attrs(&[40, 0, 1, 0, 1, 2]).is_err());
        assert!(parse_attrs(&[2, 0, 1, 0]).is_err());
        // Garbage of every short length.
        for n in 0..64u8 {
            let g: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(n)).collect();
            let _ = parse_buffer(&g, 1);
            let _ = parse_attrs(&g);
        }
    }
}
