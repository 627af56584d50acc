//! Pieces shared by the UDP tests: the datagram header, the receiver's
//! accounting (loss, reordering, duplicates, RFC 3550 jitter), the UDP
//! handshake over the agent's same IP and port number, and waiting on the
//! control channel with heartbeats.

use crate::error::SockError;
use crate::net;
use fabperf_proto::{data, Control, Cookie};
use rustix::event::{PollFd, PollFlags, Timespec};
use serde::de::DeserializeOwned;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

pub(crate) const MAGIC: [u8; 4] = data::UDP_MAGIC;
// Kind 1 is the hello and 5 an agent's refusal of one (fabperf_proto::data).
pub(crate) const T_DATA: u8 = 2;
pub(crate) const T_PROBE: u8 = 3;
pub(crate) const T_REPLY: u8 = 4;
pub(crate) const F_MEASURED: u8 = 1;
/// Not the first datagram of its `sendmmsg` call: its timestamp is the
/// call's (the first datagram's send time), not its own, so the receiver
/// leaves it out of the jitter estimate.
pub(crate) const F_BATCHED: u8 = 2;

/// The fixed 32-byte header at the start of every fabperf datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: u8,
    pub flags: u8,
    pub session: u32,
    pub seq: u64,
    /// Sender's monotonic clock, nanoseconds since its own start: this
    /// datagram's send time, or its call's when `F_BATCHED` is set.
    pub ts_ns: u64,
}

impl Header {
    #[inline]
    pub fn write(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.kind;
        b[5] = self.flags;
        b[6] = 0;
        b[7] = 0;
        b[8..12].copy_from_slice(&self.session.to_be_bytes());
        b[12..16].copy_from_slice(&[0; 4]);
        b[16..24].copy_from_slice(&self.seq.to_be_bytes());
        b[24..32].copy_from_slice(&self.ts_ns.to_be_bytes());
    }

    #[inline]
    pub fn read(b: &[u8]) -> Option<Header> {
        if b.len() < 32 || b[0..4] != MAGIC {
            return None;
        }
        let u64at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        Some(Header {
            kind: b[4],
            flags: b[5],
            session: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            seq: u64at(16),
            ts_ns: u64at(24),
        })
    }
}

/// Which sequence numbers were seen, over a sliding window below the
/// highest one (allocated once; no allocation per datagram).
pub(crate) struct SeenWindow {
    bits: Vec<u64>,
    /// Highest sequence number seen so far, plus one (0 = none yet).
    top: u64,
    window: u64,
}

/// What [`SeenWindow::mark`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// First time, in order (the highest so far).
    New,
    /// First time, but after a higher sequence number.
    Reordered,
    /// Already seen.
    Duplicate,
    /// Older than the window: a late datagram cannot be told from a
    /// duplicate this old, so it counts as neither received nor duplicate.
    TooOld,
}

impl SeenWindow {
    /// Sequence numbers tracked below the highest one.
    pub const WINDOW: u64 = 1 << 22;

    pub fn new() -> SeenWindow {
        SeenWindow::with_window(Self::WINDOW)
    }

    /// A window of `window` sequence numbers (a multiple of 64).
    pub fn with_window(window: u64) -> SeenWindow {
        let window = window.max(64) / 64 * 64;
        SeenWindow {
            bits: vec![0u64; (window / 64) as usize],
            top: 0,
            window,
        }
    }

    #[inline]
    fn bit(&mut self, s: u64) -> (&mut u64, u64) {
        let i = (s % self.window) as usize;
        (&mut self.bits[i / 64], 1u64 << (i % 64))
    }

    #[inline]
    pub fn mark(&mut self, s: u64) -> Seen {
        // The last sequence number cannot be tracked (top is one past the
        // highest); no real sender gets there, a hostile one is told apart.
        if s == u64::MAX {
            return Seen::TooOld;
        }
        if s >= self.top {
            // Clear the slots the window slides over.
            let from = self.top;
            let to = s + 1;
            if to - from >= self.window {
                self.bits.iter_mut().for_each(|w| *w = 0);
            } else {
                for x in from..to {
                    let (w, m) = self.bit(x);
                    *w &= !m;
                }
            }
            self.top = to;
            let (w, m) = self.bit(s);
            *w |= m;
            return Seen::New;
        }
        if self.top - s > self.window {
            return Seen::TooOld;
        }
        let (w, m) = self.bit(s);
        if *w & m != 0 {
            Seen::Duplicate
        } else {
            *w |= m;
            Seen::Reordered
        }
    }
}

/// Receiver-side accounting of measured datagrams.
pub(crate) struct RxAccount {
    seen: SeenWindow,
    pub received: u64,
    pub bytes: u64,
    pub reordered: u64,
    pub duplicates: u64,
    /// Older than the window (see [`Seen::TooOld`]).
    pub stale: u64,
    jitter_ns: f64,
    /// Datagrams that went into the jitter estimate.
    pub jitter_samples: u64,
    prev_transit: Option<i64>,
    pub first_arrival: Option<Instant>,
    pub last_arrival: Option<Instant>,
}

impl RxAccount {
    pub fn new() -> RxAccount {
        RxAccount::with_seen(SeenWindow::new())
    }

    #[cfg(test)]
    fn with_window(window: u64) -> RxAccount {
        RxAccount::with_seen(SeenWindow::with_window(window))
    }

    fn with_seen(seen: SeenWindow) -> RxAccount {
        RxAccount {
            seen,
            received: 0,
            bytes: 0,
            reordered: 0,
            duplicates: 0,
            stale: 0,
            jitter_ns: 0.0,
            jitter_samples: 0,
            prev_transit: None,
            first_arrival: None,
            last_arrival: None,
        }
    }

    /// Account one measured datagram. `stamps` is `(send_ns, arrival_ns)`
    /// when the datagram can time jitter: `send_ns` read by the sender for
    /// this datagram just before it went out, `arrival_ns` the receiving
    /// kernel's timestamp of it (one clock per side; the offset between the
    /// two clocks cancels in the estimate). `None` leaves it out.
    #[inline]
    pub fn on_datagram(&mut self, seq: u64, len: usize, stamps: Option<(u64, u64)>, now: Instant) {
        match self.seen.mark(seq) {
            Seen::Duplicate => {
                self.duplicates += 1;
                return;
            }
            Seen::TooOld => {
                self.stale += 1;
                return;
            }
            Seen::Reordered => self.reordered += 1,
            Seen::New => {}
        }
        self.received += 1;
        self.bytes += len as u64;
        if self.first_arrival.is_none() {
            self.first_arrival = Some(now);
        }
        self.last_arrival = Some(now);
        // RFC 3550 section 6.4.1: J += (|D| - J) / 16, D from successive
        // timed arrivals' transit times. Wrapping: the two clocks are
        // unrelated and the sender's stamp is the peer's choice; only
        // differences of transits matter.
        if let Some((send_ns, arrival_ns)) = stamps {
            let transit = (arrival_ns as i64).wrapping_sub(send_ns as i64);
            if let Some(p) = self.prev_transit {
                let d = transit.wrapping_sub(p).unsigned_abs() as f64;
                self.jitter_ns += (d - self.jitter_ns) / 16.0;
                self.jitter_samples += 1;
            }
            self.prev_transit = Some(transit);
        }
    }

    /// A receiver with a small window (for fuzzing, where a fresh one is
    /// made per input).
    pub fn new_small() -> RxAccount {
        RxAccount {
            seen: SeenWindow::with_window(1 << 12),
            ..RxAccount::new()
        }
    }

    /// The jitter estimate, once at least one pair of timed datagrams came.
    pub fn jitter_us(&self) -> Option<f64> {
        (self.jitter_samples > 0).then_some(self.jitter_ns / 1000.0)
    }
}

/// A UDP socket of the right family, bound and with buffers sized.
pub(crate) fn client_socket(agent: SocketAddr) -> Result<UdpSocket, SockError> {
    let any: IpAddr = match agent.ip() {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let s = UdpSocket::bind(SocketAddr::new(any, 0))
        .map_err(|e| SockError::data("binding a local UDP socket", e))?;
    s.connect(agent)
        .map_err(|e| SockError::data(format!("connecting the UDP socket to {agent}"), e))?;
    Ok(s)
}

/// The agent's UDP socket on the same IP and port number as its control
/// connection, and the hello's cookie. The agent's UDP door (which answers
/// hellos for other agents' tests) stays closed while the guard lives.
pub(crate) fn agent_socket(
    ctx: &fabperf_proto::ServeCtx<'_>,
) -> Result<(UdpSocket, Option<fabperf_proto::DoorGuard>, Cookie), fabperf_proto::ServeError> {
    let local = ctx.local();
    let (s, guard) = ctx.data.udp_socket(local).map_err(|e| {
        fabperf_proto::ServeError::failed(format!(
            "cannot bind UDP {local} (the agent's port number over UDP): {e}; another program holds that UDP port"
        ))
    })?;
    Ok((s, guard, ctx.data.issue()))
}

/// The cookie as the accept info carries it.
pub(crate) fn cookie_hex(c: &Cookie) -> String {
    fabperf_proto::auth::to_hex(c)
}

/// The cookie of an accept info.
pub(crate) fn cookie_of(hex: &str) -> Result<Cookie, SockError> {
    fabperf_proto::auth::from_hex(hex)
        .and_then(|v| <[u8; 16]>::try_from(v.as_slice()).ok())
        .ok_or_else(|| {
            SockError::Protocol(format!(
                "the agent's UDP cookie {hex:?} is not 16 bytes of hex"
            ))
        })
}

/// Agent: wait for the client's hello on `sock`, then connect to its
/// address (its port as seen through any NAT). Only a hello with this
/// test's session and cookie from the control connection's peer address
/// (`peer`) counts: the agent never sends a stream to an address that did
/// not open the test. A hello carrying another test's cookie is answered
/// with a refusal (at most every 100 ms), as the UDP door does. A client
/// that gives up on the control connection ends the wait at once.
pub(crate) fn agent_wait_hello(
    sock: &UdpSocket,
    session: u32,
    cookie: &Cookie,
    timeout: Duration,
    ctx: &mut fabperf_proto::ServeCtx<'_>,
) -> Result<SocketAddr, fabperf_proto::ServeError> {
    let peer = ctx.peer().ip();
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 2048];
    let mut last_refusal: Option<Instant> = None;
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    while Instant::now() < deadline {
        if fabperf_proto::control_has_news(ctx.ctl) {
            return Err(match ctx.ctl.recv("the client's UDP hello") {
                Err(e) => e.into(),
                Ok(m) => fabperf_proto::ServeError::bad_request(format!(
                    "expected the client's UDP hello, got {}",
                    m.kind()
                )),
            });
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let d = &buf[..n];
                if let Some((s, c)) = data::parse_udp_hello(d) {
                    if s == session.to_be_bytes()
                        && c == *cookie
                        && from.ip().to_canonical() == peer.to_canonical()
                    {
                        sock.connect(from).map_err(|e| {
                            fabperf_proto::ServeError::failed(format!(
                                "connecting UDP socket to {from}: {e}"
                            ))
                        })?;
                        return Ok(from);
                    }
                    if last_refusal.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
                        if let Some(r) = ctx.data.stray_hello(d, cookie) {
                            last_refusal = Some(Instant::now());
                            let _ = sock.send_to(&r, from);
                        }
                    }
                }
            }
            Err(e) if net::is_timeout(&e) || e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(fabperf_proto::ServeError::failed(format!(
                    "waiting for the client's UDP hello: {e}"
                )))
            }
        }
    }
    Err(fabperf_proto::ServeError::new(
        fabperf_proto::ErrorCode::Timeout,
        format!(
            "no UDP hello from the client within {:.1} s: a firewall probably blocks UDP to this port",
            timeout.as_secs_f64()
        ),
    ))
}

/// Client: send hellos (with the test's cookie) every 50 ms until the agent
/// confirms on the control channel that one arrived. A refusal from
/// another agent — the address sent the datagrams elsewhere — ends it with
/// [`fabperf_proto::ProtoError::WrongAgent`] naming both agents.
pub(crate) fn client_hello<T: DeserializeOwned>(
    sock: &UdpSocket,
    ctl: &mut Control,
    session: u32,
    cookie: &Cookie,
    timeout: Duration,
    agent: SocketAddr,
) -> Result<T, SockError> {
    let deadline = Instant::now() + timeout;
    let hello = data::udp_hello(session, cookie);
    let mut buf = [0u8; 2048];
    let mut icmp_refused = false;
    loop {
        // A refused hello (ICMP port unreachable) shows up on a later send
        // or receive; keep trying until the deadline.
        if let Err(e) = sock.send(&hello) {
            icmp_refused |= e.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        let (ctl_ready, udp_ready) = {
            let cfd = ctl.stream().as_fd();
            let ufd = sock.as_fd();
            let mut p = [
                PollFd::new(&cfd, PollFlags::IN),
                PollFd::new(&ufd, PollFlags::IN),
            ];
            let t = Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            match rustix::event::poll(&mut p, Some(&t)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(SockError::data(
                        "waiting on the control connection",
                        e.into(),
                    ))
                }
            }
            (!p[0].revents().is_empty(), !p[1].revents().is_empty())
        };
        if ctl_ready {
            return Ok(ctl.recv_test("the agent's UDP confirmation")?);
        }
        if udp_ready {
            loop {
                match net::recv(sock.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
                    Ok(n) => {
                        if let Some((s, r)) = data::DataRefusal::decode_udp(&buf[..n]) {
                            if s != session.to_be_bytes() {
                                continue;
                            }
                            let who = ctl.agent_hello().and_then(|h| h.agent.clone());
                            let e =
                                data::refusal_error(&r, who.as_ref(), data::DataKind::Datagrams);
                            ctl.send_error(
                                fabperf_proto::ErrorCode::TestFailed,
                                &format!("client: {e}"),
                            );
                            return Err(e.into());
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        icmp_refused = true
                    }
                    Err(_) => break,
                }
            }
        }
        if Instant::now() >= deadline {
            let why = if icmp_refused {
                format!(
                    "its hellos were answered with ICMP port unreachable: nothing listens on UDP {} \
                     where they arrived, while the agent that took the control connection listens \
                     there for this test — the address sends UDP to another host (a Service or load \
                     balancer with several endpoints, or a NAT), or a firewall rejects the port",
                    agent.port()
                )
            } else {
                format!("a firewall probably blocks UDP to port {}", agent.port())
            };
            return Err(SockError::PeerGone(format!(
                "the agent at {agent} got no UDP datagram from this host within {:.1} s: {why}",
                timeout.as_secs_f64(),
            )));
        }
    }
}

/// Set both buffers of a UDP socket; returns the receive buffer obtained.
pub(crate) fn size_buffers(sock: &UdpSocket, bytes: u64) -> u64 {
    let fd = sock.as_fd();
    let _ = net::set_buffer(fd, false, bytes);
    net::set_buffer(fd, true, bytes).unwrap_or_else(|_| net::rcvbuf(fd))
}

/// A random session number for the datagram headers.
pub(crate) fn new_session() -> u32 {
    u32::from_be_bytes(fabperf_proto::auth::random_bytes::<4>())
}

/// Test helpers: drive the agent's `udp-bw` receiver with a scripted
/// sequence of datagrams (reordered, dropped, duplicated) to check its
/// accounting end to end. Not for measurements.
pub mod test_support {
    pub use crate::udp_bw::run_udp_bw_scripted;

    /// Feed a peer's datagrams to the receiver's parsing and accounting,
    /// as the agent's and the client's UDP receivers do (for fuzzing:
    /// sequence numbers, timestamps and lengths are the peer's choice).
    /// `input` is a list of datagrams, each prefixed by a 2-byte
    /// big-endian length. Returns (received, reordered + duplicates).
    pub fn receive_datagrams(input: &[u8], session: u32) -> (u64, u64) {
        let mut acc = super::RxAccount::new_small();
        let now = std::time::Instant::now();
        let mut rest = input;
        let mut arrival = 0u64;
        while rest.len() >= 2 {
            let n = (u16::from_be_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
            let d = &rest[2..2 + n];
            rest = &rest[2 + n..];
            arrival = arrival.wrapping_add(977);
            if let Some(h) = super::Header::read(d) {
                if h.session == session && h.kind == super::T_DATA {
                    acc.on_datagram(h.seq, d.len(), Some((h.ts_ns, arrival)), now);
                }
            }
        }
        (acc.received, acc.reordered + acc.duplicates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            kind: T_DATA,
            flags: F_MEASURED,
            session: 0xdeadbeef,
            seq: 1 << 40,
            ts_ns: 123456789,
        };
        let mut b = [0u8; 64];
        h.write(&mut b);
        assert_eq!(Header::read(&b), Some(h));
        assert_eq!(Header::read(&b[..31]), None);
        b[0] = b'X';
        assert_eq!(Header::read(&b), None);
    }

    #[test]
    fn seen_window_classifies() {
        let mut w = SeenWindow::new();
        assert_eq!(w.mark(0), Seen::New);
        assert_eq!(w.mark(2), Seen::New);
        assert_eq!(w.mark(1), Seen::Reordered);
        assert_eq!(w.mark(1), Seen::Duplicate);
        assert_eq!(w.mark(2), Seen::Duplicate);
        // The largest sequence number cannot be tracked: a hostile peer's.
        assert_eq!(w.mark(u64::MAX), Seen::TooOld);
        // A jump past the whole window forgets everything below it.
        let far = 10 + SeenWindow::WINDOW * 3;
        assert_eq!(w.mark(far), Seen::New);
        assert_eq!(w.mark(3), Seen::TooOld);
        assert_eq!(w.mark(far - 1), Seen::Reordered);
        assert_eq!(w.mark(far - 1), Seen::Duplicate);
        // Slots reused after the window slides are clear again.
        let mut w = SeenWindow::new();
        assert_eq!(w.mark(5), Seen::New);
        assert_eq!(w.mark(5 + SeenWindow::WINDOW), Seen::New);
        assert_eq!(w.mark(5 + SeenWindow::WINDOW - 1), Seen::Reordered);
    }

    #[test]
    fn reordered_are_not_lost() {
        let mut a = RxAccount::new();
        let now = Instant::now();
        // 0..10 sent; 3 dropped, 5 and 6 swapped, 8 duplicated.
        for (i, s) in [0u64, 1, 2, 4, 6, 5, 7, 8, 8, 9].iter().enumerate() {
            a.on_datagram(*s, 100, Some((*s * 1000, i as u64 * 1000)), now);
        }
        assert_eq!(a.received, 9);
        assert_eq!(a.reordered, 1);
        assert_eq!(a.duplicates, 1);
        assert_eq!(a.bytes, 900);
        let lost = 10 - a.received;
        assert_eq!(lost, 1);
    }

    #[test]
    fn a_duplicate_older_than_the_window_does_not_hide_a_loss() {
        // Window of 64: datagram 3 is lost, then 0 arrives again long after
        // (a duplicate from far behind): it must not count as received.
        let mut a = RxAccount::with_window(64);
        let now = Instant::now();
        for s in (0..200u64).filter(|&s| s != 3) {
            a.on_datagram(s, 10, None, now);
        }
        a.on_datagram(0, 10, None, now);
        assert_eq!(a.received, 199, "sent 200, one lost");
        assert_eq!(a.stale, 1);
        assert_eq!(a.duplicates + a.reordered, 0);
        // A late original of 3, as far behind, is stale too (counted lost:
        // the conservative side).
        a.on_datagram(3, 10, None, now);
        assert_eq!((a.received, a.stale), (199, 2));
    }

    #[test]
    fn jitter_follows_rfc3550() {
        let mut a = RxAccount::new();
        let now = Instant::now();
        assert_eq!(a.jitter_us(), None, "no jitter before two timed datagrams");
        // Constant transit: zero jitter.
        for s in 0..100u64 {
            a.on_datagram(s, 10, Some((s * 1000, s * 1000 + 500)), now);
        }
        assert!(a.jitter_us().unwrap() < 1e-9);
        // Alternating transit of 0 and 2000 ns: |D| = 2000 every time, so J
        // converges to 2 us.
        let mut a = RxAccount::new();
        for s in 0..2000u64 {
            let extra = if s % 2 == 0 { 0 } else { 2000 };
            a.on_datagram(s, 10, Some((s * 10_000, s * 10_000 + extra)), now);
        }
        let j = a.jitter_us().unwrap();
        assert!((j - 2.0).abs() < 0.01, "{j}");
        // Untimed datagrams (later ones of a send batch) are counted but
        // leave the estimate alone: a burst of 31 arriving 1 us apart
        // behind each timed one adds no jitter.
        let mut a = RxAccount::new();
        for b in 0..100u64 {
            let t = b * 100_000;
            a.on_datagram(b * 32, 10, Some((t, t + 5_000)), now);
            for i in 1..32 {
                a.on_datagram(b * 32 + i, 10, None, now);
            }
        }
        assert_eq!(a.received, 3200);
        assert!(a.jitter_us().unwrap() < 1e-9);
        assert_eq!(a.jitter_samples, 99);
    }
}
