//! `fabperf mtu HOST`: probe a path from this host.

use crate::agent::{AcceptInfo, MtuParams, MTU_KIND};
use crate::path::{self, Interface};
use crate::report::{Crossing, PathReport};
use crate::search::{search, Found, Outcome, SearchError};
use crate::sys::{self, Echo, TooBig};
use crate::wire::{self, Datagram};
use fabperf_proto::{connect_test, ClientConfig, Control, ProtoError};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How to probe.
#[derive(Debug, Clone)]
pub struct Options {
    /// UDP probes to the agent (forward and reverse); needs an agent.
    pub udp: bool,
    /// ICMP echo (where permitted).
    pub icmp: bool,
    /// Tries per size before it counts as not crossing.
    pub attempts: u32,
    /// Wait per probe; `None` measures the round trip first and waits
    /// several of it (50 ms to 1 s).
    pub probe_timeout: Option<Duration>,
    /// The longest the whole probing of a path may take (the agent is
    /// asked for a test of this length too); `None`: the agent's
    /// default ([`MtuParams`]'s 60 s).
    pub duration: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            udp: true,
            icmp: true,
            attempts: 3,
            probe_timeout: None,
            duration: None,
        }
    }
}

/// Why a path could not be probed at all.
#[derive(Debug)]
pub enum MtuError {
    /// The agent (control connection, the `mtu` test) failed.
    Agent(ProtoError),
    /// Probing failed.
    Probe(String),
}

impl std::fmt::Display for MtuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MtuError::Agent(e) => write!(f, "{e}"),
            MtuError::Probe(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for MtuError {}

/// When the probing of a path must have ended, and how it says so.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    secs: f64,
}

impl Deadline {
    fn new(opts: &Options) -> Deadline {
        let d = opts
            .duration
            .unwrap_or(Duration::from_secs_f64(MtuParams::default().duration_s));
        Deadline {
            at: Instant::now() + d,
            secs: d.as_secs_f64(),
        }
    }

    fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// An error for a probe asked for after the deadline.
    fn check(&self) -> io::Result<()> {
        if self.passed() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, self.text()));
        }
        Ok(())
    }

    fn text(&self) -> String {
        format!(
            "the probing did not end within its duration of {} s; raise the duration (a plan's `duration`) or lower --attempts/--probe-timeout-ms",
            self.secs
        )
    }
}

/// The smallest IP packet every IPv4 path carries, and IPv6's minimum MTU.
fn smallest(v6: bool) -> usize {
    if v6 {
        1280
    } else {
        68
    }
}

/// The largest IP packet a UDP payload can make.
fn largest(v6: bool) -> usize {
    wire::MAX_PAYLOAD + sys::udp_overhead(v6)
}

fn crossing(f: &Found, overhead: usize, bound: &str) -> Crossing {
    Crossing {
        mtu: f.largest as u32,
        payload: f.largest.saturating_sub(overhead) as u32,
        limited_by: if f.at_bound {
            bound.into()
        } else {
            "path".into()
        },
        probes: f.probes,
        too_big_mtu: f.too_big.map(|t| t.mtu),
        too_big_from: f.too_big.and_then(|t| t.from),
    }
}

/// Probe the path to `addr` (`target` names it in the report).
pub fn discover(
    target: &str,
    addr: SocketAddr,
    cfg: &ClientConfig,
    opts: &Options,
) -> Result<PathReport, MtuError> {
    let v6 = addr.is_ipv6();
    let (local, interface) = path::toward(addr);
    let mut rep = PathReport {
        target: target.to_string(),
        addr,
        local,
        interface: interface.clone(),
        agent_interface: None,
        forward: None,
        reverse: None,
        icmp: None,
        skipped: Vec::new(),
        mismatches: Vec::new(),
    };
    let hi_local = interface
        .as_ref()
        .map_or(largest(v6), |i| (i.mtu as usize).min(largest(v6)));
    let deadline = Deadline::new(opts);
    if opts.udp {
        udp(addr, cfg, opts, hi_local, deadline, &mut rep)?;
    } else {
        rep.skipped
            .push("UDP probes (--icmp-only): no agent was asked".into());
    }
    if opts.icmp {
        match sys::Pinger::open(addr.ip()) {
            Ok(mut p) => {
                let t = match opts.probe_timeout {
                    Some(t) => t,
                    None => rtt_timeout(|| {
                        deadline.check()?;
                        p.probe(smallest(v6), Duration::from_secs(1))
                            .map(|e| e == Echo::Back)
                    })
                    .map_err(|e| MtuError::Probe(format!("ICMP echo: {e}")))?,
                };
                let r = search(smallest(v6), hi_local, opts.attempts, |size| {
                    deadline.check()?;
                    Ok(match p.probe(size, t)? {
                        Echo::Back => Outcome::Pass,
                        Echo::Lost => Outcome::Lost,
                        Echo::TooBig(t) => Outcome::TooBig(t),
                    })
                });
                match r {
                    Ok(f) => {
                        rep.icmp = Some(crossing(&f, sys::icmp_overhead(v6), "sending interface"))
                    }
                    Err(SearchError::NothingCrosses { .. }) => rep.skipped.push(format!(
                        "ICMP echo ({}): no reply at all (ICMP filtered on the path or at {})",
                        p.kind(),
                        addr.ip()
                    )),
                    Err(_) if deadline.passed() => return Err(MtuError::Probe(deadline.text())),
                    Err(e) => return Err(MtuError::Probe(format!("ICMP echo: {e}"))),
                }
            }
            Err(e) => rep.skipped.push(e),
        }
    } else {
        rep.skipped.push("ICMP echo (--no-icmp)".into());
    }
    rep.judge();
    Ok(rep)
}

/// A probe timeout from the round trip of small probes: 8 round trips,
/// 50 ms to 1 s; 1 s when none came back.
fn rtt_timeout(mut once: impl FnMut() -> io::Result<bool>) -> io::Result<Duration> {
    let mut best: Option<Duration> = None;
    for _ in 0..5 {
        let t0 = Instant::now();
        if once()? {
            let d = t0.elapsed();
            best = Some(best.map_or(d, |b| b.min(d)));
        }
    }
    Ok(best
        .map(|b| (b * 8).clamp(Duration::from_millis(50), Duration::from_secs(1)))
        .unwrap_or(Duration::from_secs(1)))
}

struct Udp {
    sock: UdpSocket,
    session: u32,
    seq: u32,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
    v6: bool,
}

impl Udp {
    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&self, b: &[u8]) -> io::Result<Option<TooBig>> {
        let _ = sys::take_too_big(self.sock.as_raw_fd());
        match self.sock.send(b) {
            Ok(_) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => Ok(Some(
                sys::take_too_big(self.sock.as_raw_fd()).unwrap_or(TooBig { mtu: 0, from: None }),
            )),
            // An earlier datagram's ICMP error surfaces on this send.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Wait for the datagram `want` accepts until `deadline`.
    fn wait(
        &mut self,
        deadline: Instant,
        want: impl Fn(&Datagram) -> Option<Outcome>,
    ) -> io::Result<Outcome> {
        loop {
            match sys::recv_until(&self.sock, &mut self.rbuf, deadline) {
                Ok(None) => return Ok(Outcome::Lost),
                Ok(Some(n)) => {
                    if let Some(d) = wire::parse(&self.rbuf[..n]) {
                        if d.session() == self.session {
                            if let Some(o) = want(&d) {
                                return Ok(o);
                            }
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    if let Some(t) = sys::take_too_big(self.sock.as_raw_fd()) {
                        return Ok(Outcome::TooBig(t));
                    }
                }
                // ICMP errors (port unreachable ...) for earlier datagrams.
                Err(e) if e.raw_os_error().is_some() => {
                    let _ = sys::take_too_big(self.sock.as_raw_fd());
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Does a packet of `size` bytes cross to the agent?
    fn forward(&mut self, size: usize, timeout: Duration) -> io::Result<Outcome> {
        let payload = size
            .saturating_sub(sys::udp_overhead(self.v6))
            .max(wire::HEADER);
        let seq = self.next_seq();
        let mut b = std::mem::take(&mut self.buf);
        wire::padded(&mut b, wire::PROBE, self.session, seq, payload);
        let sent = self.send(&b[..payload]);
        self.buf = b;
        if let Some(t) = sent? {
            return Ok(Outcome::TooBig(t));
        }
        self.wait(Instant::now() + timeout, |d| match *d {
            Datagram::Ack { seq: s, len, .. } if s == seq => Some(if len as usize == payload {
                Outcome::Pass
            } else {
                Outcome::Lost
            }),
            _ => None,
        })
    }

    /// Does a packet of `size` bytes cross from the agent?
    fn reverse(&mut self, size: usize, timeout: Duration) -> io::Result<Outcome> {
        let payload = size
            .saturating_sub(sys::udp_overhead(self.v6))
            .max(wire::HEADER_LEN);
        let seq = self.next_seq();
        let ask = wire::short(wire::ASK, self.session, seq, payload as u32, None);
        self.send(&ask)?;
        let agent = self.sock.peer_addr().ok().map(|a| a.ip());
        self.wait(Instant::now() + timeout, |d| match *d {
            Datagram::Reply {
                seq: s, len, got, ..
            } if s == seq => Some(if len as usize == payload && got == payload {
                Outcome::Pass
            } else {
                Outcome::Lost
            }),
            Datagram::TooBig { seq: s, mtu, .. } if s == seq => {
                Some(Outcome::TooBig(TooBig { mtu, from: agent }))
            }
            _ => None,
        })
    }
}

fn udp(
    addr: SocketAddr,
    cfg: &ClientConfig,
    opts: &Options,
    hi_local: usize,
    deadline: Deadline,
    rep: &mut PathReport,
) -> Result<(), MtuError> {
    let v6 = addr.is_ipv6();
    // The agent answers for as long as the probing may take.
    let params = serde_json::to_value(MtuParams {
        duration_s: deadline.secs,
    })
    .expect("params serialize");
    let (mut ctl, info) = connect_test(addr, cfg, MTU_KIND, params).map_err(MtuError::Agent)?;
    let info: AcceptInfo = serde_json::from_value(info).map_err(|e| {
        MtuError::Agent(ProtoError::BadJson(format!("the agent's mtu accept: {e}")))
    })?;
    rep.agent_interface = info.interface.clone().and_then(plausible_interface);
    let res = udp_probe(addr, v6, &info, opts, hi_local, deadline, rep);
    finish(&mut ctl);
    res
}

/// Most bytes an encapsulation can add per packet (Geneve over IPv6 with
/// the most options, 14 + 40 + 8 + 8 + 252, rounded up).
pub const MAX_OVERHEAD: u32 = 400;

/// An interface a (possibly hostile) agent reported, with plausible values
/// only: `None` when its name, kind or MTU is not one an interface can
/// have; an encapsulation overhead or underlay that is not plausible is
/// dropped (never shown as "4294967295 bytes per packet").
pub fn plausible_interface(mut i: Interface) -> Option<Interface> {
    let name_ok =
        |n: &str| !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_graphic());
    let mtu_ok = |m: u32| (68..=1 << 20).contains(&m);
    if !(mtu_ok(i.mtu)
        && name_ok(&i.name)
        && i.kind.len() <= 32
        && i.kind.chars().all(|c| c.is_ascii_graphic()))
    {
        return None;
    }
    if let Some(o) = &i.overhead {
        let ok = (1..=MAX_OVERHEAD).contains(&o.bytes)
            && o.bytes < i.mtu
            && o.parts.len() <= 200
            && o.parts.chars().all(|c| c == ' ' || c.is_ascii_graphic());
        if !ok {
            i.overhead = None;
        }
    }
    if let Some(u) = &i.underlay {
        if !(name_ok(&u.name) && mtu_ok(u.mtu)) {
            i.underlay = None;
        }
    }
    Some(i)
}

fn finish(ctl: &mut Control) {
    let _ = ctl.send_test(&serde_json::json!({"done": true}));
    let _ = ctl.send(&fabperf_proto::Msg::Bye);
}

fn udp_probe(
    addr: SocketAddr,
    v6: bool,
    info: &AcceptInfo,
    opts: &Options,
    hi_local: usize,
    deadline: Deadline,
    rep: &mut PathReport,
) -> Result<(), MtuError> {
    let io_err = |what: &str, e: io::Error| MtuError::Probe(format!("{what}: {e}"));
    let any: SocketAddr = if v6 {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let sock = UdpSocket::bind(any).map_err(|e| io_err("binding a UDP socket", e))?;
    let dest = SocketAddr::new(addr.ip(), info.port);
    sock.connect(dest)
        .map_err(|e| io_err(&format!("connecting the UDP socket to {dest}"), e))?;
    sys::probe_mode(sock.as_raw_fd(), v6).map_err(|e| io_err("setting Don't Fragment", e))?;
    let mut u = Udp {
        sock,
        session: info.session,
        seq: 0,
        buf: vec![0u8; wire::MAX_PAYLOAD],
        rbuf: vec![0u8; wire::MAX_PAYLOAD + 1],
        v6,
    };
    let t = match opts.probe_timeout {
        Some(t) => t,
        None => rtt_timeout(|| {
            deadline.check()?;
            u.forward(smallest(v6), Duration::from_secs(1))
                .map(|o| o == Outcome::Pass)
        })
        .map_err(|e| io_err("UDP probes", e))?,
    };
    let no_udp = |e: SearchError| {
        if deadline.passed() {
            return MtuError::Probe(deadline.text());
        }
        match e {
        SearchError::NothingCrosses { smallest, .. } => MtuError::Probe(format!(
            "no UDP probe crossed to {dest} (not even {smallest} bytes), though the agent accepted the test: \
             a firewall or NetworkPolicy lets TCP through but not UDP to port {}; try --icmp-only",
            info.port
        )),
        e => MtuError::Probe(format!("UDP probes: {e}")),
    }
    };
    let f = search(smallest(v6), hi_local, opts.attempts, |s| {
        deadline.check()?;
        u.forward(s, t)
    })
    .map_err(no_udp)?;
    rep.forward = Some(crossing(&f, sys::udp_overhead(v6), "sending interface"));
    let hi_agent = rep
        .agent_interface
        .as_ref()
        .map_or(largest(v6), |i| (i.mtu as usize).min(largest(v6)));
    // The forward direction is measured: a reverse that fails is reported
    // as the reverse direction's, and the forward result is kept.
    match search(smallest(v6), hi_agent, opts.attempts, |s| {
        deadline.check()?;
        u.reverse(s, t)
    }) {
        Err(_) if deadline.passed() => return Err(MtuError::Probe(deadline.text())),
        Ok(r) => rep.reverse = Some(crossing(&r, sys::udp_overhead(v6), "agent's interface")),
        Err(SearchError::NothingCrosses { smallest, probes }) => rep.skipped.push(format!(
            "reverse (UDP from the agent): no datagram came back from {dest} (not even {smallest} bytes, {probes} probes), \
             though probes to it crossed: a firewall or NetworkPolicy on the way back (agent to this host) drops UDP from port {}",
            info.port
        )),
        Err(e) => rep.skipped.push(format!("reverse (UDP from the agent): {e}")),
    }
    Ok(())
}

/// The address to probe for `host` (`port` when it names none).
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, ProtoError> {
    fabperf_proto::resolve(host, port)
}

/// This host's name, for the report.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}
