//! The probe datagrams between `fabperf mtu` and the agent's `mtu` kind.
//!
//! Every datagram starts with a 16-byte header (big-endian):
//!
//! ```text
//! "FBMT" | kind u8 | 0 u8 | 0 u16 | session u32 | seq u32
//! ```
//!
//! | kind | from | rest | meaning |
//! |---|---|---|---|
//! | `PROBE` 1 | client | zeros up to the probe size | does a datagram this big cross to the agent? |
//! | `ACK` 2 | agent | `len` u32 | the probe `seq` arrived with `len` bytes |
//! | `ASK` 3 | client | `len` u32 | send me a datagram of `len` bytes |
//! | `REPLY` 4 | agent | `len` u32, zeros up to `len` | the asked datagram |
//! | `TOO_BIG` 5 | agent | `len` u32, `mtu` u32 | the agent's kernel refused to send `len` bytes (its interface or known path MTU is `mtu`, 0 if unknown) |
//!
//! Only datagrams with the test's session, from the control connection's
//! peer address, are answered; everything else is ignored.

/// Magic of every probe datagram.
pub const MAGIC: [u8; 4] = *b"FBMT";
/// Bytes of the header.
pub const HEADER: usize = 16;
/// Bytes of the header and the length field (the smallest `ASK`, `ACK`,
/// `REPLY`).
pub const HEADER_LEN: usize = HEADER + 4;
/// The largest UDP payload (IPv4: 65535 - 20 - 8).
pub const MAX_PAYLOAD: usize = 65507;

pub const PROBE: u8 = 1;
pub const ACK: u8 = 2;
pub const ASK: u8 = 3;
pub const REPLY: u8 = 4;
pub const TOO_BIG: u8 = 5;

/// A parsed datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram {
    /// A probe of this many bytes (the datagram's own length).
    Probe {
        session: u32,
        seq: u32,
        len: usize,
    },
    Ack {
        session: u32,
        seq: u32,
        len: u32,
    },
    Ask {
        session: u32,
        seq: u32,
        len: u32,
    },
    /// A reply claiming `len` bytes, `got` bytes long.
    Reply {
        session: u32,
        seq: u32,
        len: u32,
        got: usize,
    },
    TooBig {
        session: u32,
        seq: u32,
        len: u32,
        mtu: u32,
    },
}

impl Datagram {
    pub fn session(&self) -> u32 {
        match *self {
            Datagram::Probe { session, .. }
            | Datagram::Ack { session, .. }
            | Datagram::Ask { session, .. }
            | Datagram::Reply { session, .. }
            | Datagram::TooBig { session, .. } => session,
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Parse a datagram a peer sent; `None` for anything that is not one.
pub fn parse(b: &[u8]) -> Option<Datagram> {
    if b.len() < HEADER || b[..4] != MAGIC || b[5] != 0 || b[6] != 0 || b[7] != 0 {
        return None;
    }
    let session = u32_at(b, 8)?;
    let seq = u32_at(b, 12)?;
    match b[4] {
        PROBE => Some(Datagram::Probe {
            session,
            seq,
            len: b.len(),
        }),
        ACK if b.len() == HEADER_LEN => Some(Datagram::Ack {
            session,
            seq,
            len: u32_at(b, HEADER)?,
        }),
        ASK if b.len() == HEADER_LEN => Some(Datagram::Ask {
            session,
            seq,
            len: u32_at(b, HEADER)?,
        }),
        REPLY if b.len() >= HEADER_LEN => Some(Datagram::Reply {
            session,
            seq,
            len: u32_at(b, HEADER)?,
            got: b.len(),
        }),
        TOO_BIG if b.len() == HEADER_LEN + 4 => Some(Datagram::TooBig {
            session,
            seq,
            len: u32_at(b, HEADER)?,
            mtu: u32_at(b, HEADER + 4)?,
        }),
        _ => None,
    }
}

/// Write a header into `buf` (at least [`HEADER`] bytes).
pub fn header(buf: &mut [u8], kind: u8, session: u32, seq: u32) {
    buf[..4].copy_from_slice(&MAGIC);
    buf[4] = kind;
    buf[5..8].fill(0);
    buf[8..12].copy_from_slice(&session.to_be_bytes());
    buf[12..16].copy_from_slice(&seq.to_be_bytes());
}

/// A datagram of `kind` with one or two u32 fields after the header.
pub fn short(kind: u8, session: u32, seq: u32, a: u32, b: Option<u32>) -> Vec<u8> {
    let mut v = vec![0u8; HEADER_LEN + if b.is_some() { 4 } else { 0 }];
    header(&mut v, kind, session, seq);
    v[HEADER..HEADER_LEN].copy_from_slice(&a.to_be_bytes());
    if let Some(b) = b {
        v[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&b.to_be_bytes());
    }
    v
}

/// Fill `buf[..len]` as a datagram of `kind` (`PROBE`, or `REPLY` with its
/// length field) padded with zeros.
pub fn padded(buf: &mut [u8], kind: u8, session: u32, seq: u32, len: usize) {
    header(buf, kind, session, seq);
    let mut from = HEADER;
    if kind == REPLY {
        buf[HEADER..HEADER_LEN].copy_from_slice(&(len as u32).to_be_bytes());
        from = HEADER_LEN;
    }
    buf[from..len].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut b = vec![0u8; 1400];
        padded(&mut b, PROBE, 7, 9, 1400);
        assert_eq!(
            parse(&b),
            Some(Datagram::Probe {
                session: 7,
                seq: 9,
                len: 1400
            })
        );
        padded(&mut b, REPLY, 7, 10, 1000);
        assert_eq!(
            parse(&b[..1000]),
            Some(Datagram::Reply {
                session: 7,
                seq: 10,
                len: 1000,
                got: 1000
            })
        );
        assert_eq!(
            parse(&short(ACK, 1, 2, 1400, None)),
            Some(Datagram::Ack {
                session: 1,
                seq: 2,
                len: 1400
            })
        );
        assert_eq!(
            parse(&short(TOO_BIG, 1, 2, 9000, Some(1500))),
            Some(Datagram::TooBig {
                session: 1,
                seq: 2,
                len: 9000,
                mtu: 1500
            })
        );
    }

    #[test]
    fn garbage_is_ignored() {
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"FBMT"), None);
        assert_eq!(parse(&[0u8; 100]), None);
        let mut ack = short(ACK, 1, 2, 3, None);
        ack.push(0);
        assert_eq!(parse(&ack), None, "an ACK of the wrong length");
        let mut bad = short(ASK, 1, 2, 3, None);
        bad[5] = 1;
        assert_eq!(parse(&bad), None, "reserved bytes must be zero");
        bad[5] = 0;
        bad[4] = 99;
        assert_eq!(parse(&bad), None, "unknown kind");
        assert_eq!(parse(&short(REPLY, 1, 2, 3, None)[..HEADER + 2]), None);
    }
    #[test]
    fn hostile_bytes_never_panic_and_lengths_are_checked() {
        // Every truncation and extension of every valid datagram.
        let mut valid = vec![
            short(ACK, 1, 2, 3, None),
            short(ASK, 1, 2, u32::MAX, None),
            short(TOO_BIG, 1, 2, 9000, Some(u32::MAX)),
        ];
        let mut p = vec![0u8; 100];
        padded(&mut p, REPLY, 5, 6, 100);
        valid.push(p);
        for v in &valid {
            for n in 0..v.len() + 8 {
                let mut b = v.clone();
                b.resize(n, 0xff);
                if let Some(d) = parse(&b) {
                    assert!(b.len() >= HEADER);
                    match d {
                        Datagram::Ack { .. } | Datagram::Ask { .. } => {
                            assert_eq!(b.len(), HEADER_LEN)
                        }
                        Datagram::TooBig { .. } => assert_eq!(b.len(), HEADER_LEN + 4),
                        Datagram::Reply { got, .. } => assert_eq!(got, b.len()),
                        Datagram::Probe { len, .. } => assert_eq!(len, b.len()),
                    }
                }
            }
        }
        // Pseudo-random garbage behind a valid magic, every kind byte.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 40) as usize;
            let mut b: Vec<u8> = (0..n).map(|j| (x >> (j % 8 * 8)) as u8).collect();
            if n >= 5 {
                b[..4].copy_from_slice(&MAGIC);
                b[4] = (i % 7) as u8;
            }
            let _ = parse(&b);
        }
    }
}
