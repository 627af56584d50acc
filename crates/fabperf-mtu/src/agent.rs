//! The agent's `mtu` kind: answers a client's DF probes on UDP (an
//! acknowledgement per probe) and, on request, sends datagrams of a given
//! size back with DF set, so both directions of a path are measured.
//!
//! Bounded like every test: the agent's clock ends it at its length, only
//! datagrams from the control connection's peer address with the test's
//! session are answered, and the datagrams and bytes sent back are capped
//! ([`MAX_ANSWERS`], [`MAX_REPLY_BYTES`]).

use crate::path::{self, Interface};
use crate::sys;
use crate::wire::{self, Datagram};
use fabperf_proto::{decode_params, ErrorCode, Msg, ServeCtx, ServeError, TestKind};
use rustix::event::{PollFd, PollFlags, Timespec};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd};

/// How long the agent waits for a probe or the client before it looks at
/// its clock again.
const POLL_STEP: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};

/// The kind's name on the wire.
pub const MTU_KIND: &str = "mtu";
/// Most datagrams the agent answers in one test.
pub const MAX_ANSWERS: u64 = 20_000;
/// Most bytes of requested datagrams the agent sends in one test.
pub const MAX_REPLY_BYTES: u64 = 256 << 20;
/// Longest test a client may ask for.
pub const MAX_SECS: f64 = 300.0;

/// The client's request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MtuParams {
    /// How long the agent answers probes at most.
    pub duration_s: f64,
}

impl Default for MtuParams {
    fn default() -> Self {
        MtuParams { duration_s: 60.0 }
    }
}

/// What the agent says in its `Accept`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcceptInfo {
    pub session: u32,
    /// The UDP port the probes go to (the agent's port number).
    pub port: u16,
    /// The interface the agent answers from.
    #[serde(default)]
    pub interface: Option<Interface>,
}

/// The agent side of `fabperf mtu`.
pub struct MtuKind;

impl TestKind for MtuKind {
    fn name(&self) -> &'static str {
        MTU_KIND
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: MtuParams = decode_params(MTU_KIND, params)?;
        if !(p.duration_s.is_finite() && p.duration_s > 0.0 && p.duration_s <= MAX_SECS) {
            return Err(ServeError::bad_request(format!(
                "mtu: duration_s {} is not more than 0 and at most {MAX_SECS}",
                p.duration_s
            )));
        }
        ctx.limit_duration(p.duration_s)?;
        let local = ctx.local();
        // The agent's UDP door (fabperf_proto::data) stays closed while
        // this socket holds the port.
        let (sock, _door) = ctx.data.udp_socket(local).map_err(|e| {
            ServeError::failed(format!(
                "cannot bind UDP {local} (the agent's port number over UDP): {e}; another program holds that UDP port"
            ))
        })?;
        sys::probe_mode(sock.as_raw_fd(), local.is_ipv6())
            .map_err(|e| ServeError::failed(format!("setting Don't Fragment: {e}")))?;
        // The interface the answers leave through: the route back to the client.
        let interface = path::interface_toward(ctx.peer().ip().to_canonical(), Some(local.ip()));
        let session = u32::from_be_bytes(fabperf_proto::auth::random_bytes::<4>());
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                session,
                port: local.port(),
                interface: interface.clone(),
            })
            .expect("accept info serializes"),
        })?;
        let peer = ctx.peer().ip().to_canonical();
        let mut buf = vec![0u8; wire::MAX_PAYLOAD + 1];
        let mut out = vec![0u8; wire::MAX_PAYLOAD];
        let (mut answers, mut bytes) = (0u64, 0u64);
        loop {
            if ctx.clock.is_stopped() {
                return Err(ServeError::new(
                    ErrorCode::LimitExceeded,
                    "the client did not finish within the test's length",
                ));
            }
            let (ctl_ready, sock_ready) = {
                let ctl = ctx.ctl.stream().as_fd();
                let mut fds = [
                    PollFd::new(&ctl, PollFlags::IN),
                    PollFd::new(&sock, PollFlags::IN),
                ];
                match rustix::event::poll(&mut fds, Some(&POLL_STEP)) {
                    Ok(_) => (!fds[0].revents().is_empty(), !fds[1].revents().is_empty()),
                    Err(_) => continue,
                }
            };
            if ctl_ready {
                // The client is done (or gone): either ends the test.
                let _: serde_json::Value = ctx.ctl.recv_test("the client's done")?;
                return Ok(());
            }
            if !sock_ready {
                continue;
            }
            let (n, from) = match sock.recv_from(&mut buf) {
                Ok(v) => v,
                Err(_) => {
                    let _ = sys::take_too_big(sock.as_raw_fd());
                    continue;
                }
            };
            if from.ip().to_canonical() != peer || answers >= MAX_ANSWERS {
                continue;
            }
            let Some(d) = wire::parse(&buf[..n]) else {
                continue;
            };
            if d.session() != session {
                continue;
            }
            match d {
                Datagram::Probe { seq, len, .. } => {
                    answers += 1;
                    let _ = sock.send_to(
                        &wire::short(wire::ACK, session, seq, len as u32, None),
                        from,
                    );
                }
                Datagram::Ask { seq, len, .. } => {
                    let len = len as usize;
                    if !(wire::HEADER_LEN..=wire::MAX_PAYLOAD).contains(&len)
                        || bytes + len as u64 > MAX_REPLY_BYTES
                    {
                        continue;
                    }
                    answers += 1;
                    bytes += len as u64;
                    wire::padded(&mut out, wire::REPLY, session, seq, len);
                    let _ = sys::take_too_big(sock.as_raw_fd());
                    if let Err(e) = sock.send_to(&out[..len], from) {
                        if e.raw_os_error() == Some(libc::EMSGSIZE) {
                            let mtu = sys::take_too_big(sock.as_raw_fd())
                                .map(|t| t.mtu)
                                .filter(|m| *m > 0)
                                .or(interface.as_ref().map(|i| i.mtu))
                                .unwrap_or(0);
                            let _ = sock.send_to(
                                &wire::short(wire::TOO_BIG, session, seq, len as u32, Some(mtu)),
                                from,
                            );
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
