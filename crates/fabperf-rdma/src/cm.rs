//! `--rdma-cm`: connect the queue pairs through librdmacm instead of the
//! out-of-band exchange of QP numbers, PSNs and GIDs.
//!
//! The QPs stay fabperf's own (same PD, CQ and buffers as without the CM);
//! the connection manager resolves the address and route, carries the QP
//! numbers in its REQ/REP, and `rdma_init_qp_attr` supplies the RTR/RTS
//! attributes (destination QP, PSNs, path, GID index). The control channel
//! still carries the buffer addresses and keys. The agent listens in the
//! RDMA CM's own TCP port space on its control port number for the length
//! of one test (it serves one test at a time); the client connects QP i as
//! connection i, one after the other.

use crate::error::RdmaError;
use crate::msg::EndpointInfo;
use crate::verbs::Endpoint;
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, Event, EventChannel, EventType, Identifier, PortSpace,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The CM objects of a connected endpoint. Keep it alive as long as the
/// endpoint: dropping it destroys the CM ids (which disconnects).
pub struct CmLink {
    // Field order = drop order: connections, then the listener, then the
    // channel they belong to.
    _ids: Vec<Arc<Identifier>>,
    _listener: Option<Arc<Identifier>>,
    _channel: Arc<EventChannel>,
}

fn cm_err(what: &str, e: impl std::fmt::Display) -> RdmaError {
    RdmaError::Connect(format!("rdma_cm: {what}: {e}"))
}

fn channel() -> Result<Arc<EventChannel>, RdmaError> {
    let ch = EventChannel::new().map_err(|e| {
        cm_err(
            "cannot create an event channel (is librdmacm installed and rdma_ucm loaded?)",
            e,
        )
    })?;
    ch.set_nonblocking(true)
        .map_err(|e| cm_err("event channel mode", e))?;
    Ok(ch)
}

/// The next CM event within `deadline`, which must be `want`; anything
/// else (rejected, unreachable, address/route error…) is an error that
/// names the event and its status.
fn expect(
    ch: &Arc<EventChannel>,
    want: EventType,
    what: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<Event, RdmaError> {
    loop {
        match ch.get_cm_event() {
            Ok(ev) => {
                let t = ev.event_type();
                if t == want {
                    return Ok(ev);
                }
                let status = ev.status();
                let _ = ev.ack();
                return Err(RdmaError::Connect(format!(
                    "rdma_cm: {what}: got {t:?} (status {status}) instead of {want:?}{}",
                    match t {
                        EventType::Rejected =>
                            ": the peer refused the connection (no fabperf agent listening with --rdma-cm on that address, or a different device)",
                        EventType::Unreachable | EventType::ConnectError =>
                            ": the peer did not answer (firewall on UDP 4791, or no route over the RDMA device)",
                        EventType::AddressError | EventType::RouteError =>
                            ": the address does not lead to an RDMA device (use the peer's address on the RDMA network)",
                        _ => "",
                    }
                )));
            }
            Err(_) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(RdmaError::Stalled(format!(
                        "rdma_cm: {what}: no {want:?} event within {:.1} s",
                        timeout.as_secs_f64()
                    )));
                }
                let left = (deadline - now).min(Duration::from_millis(100));
                crate::sys::wait_readable(ch.as_ref(), left)
                    .map_err(|e| cm_err("waiting for an event", e))?;
            }
        }
    }
}

/// `expect`, then acknowledge the event (all that is needed of most).
fn expect_ack(
    ch: &Arc<EventChannel>,
    want: EventType,
    what: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), RdmaError> {
    expect(ch, want, what, deadline, timeout)?
        .ack()
        .map_err(|e| cm_err("ack", e))
}

/// Agent side, before it sends `Accept`: listen on `addr` (the address and
/// port the client reached the control channel on).
pub fn listen(addr: SocketAddr) -> Result<(Arc<EventChannel>, Arc<Identifier>), RdmaError> {
    let ch = channel()?;
    let id = ch
        .create_id(PortSpace::Tcp)
        .map_err(|e| cm_err("create_id", e))?;
    id.bind_addr(addr).map_err(|e| {
        cm_err(
            &format!("binding {addr} (is it an address of this node's RDMA device?)"),
            e,
        )
    })?;
    id.listen(8).map_err(|e| cm_err("listen", e))?;
    Ok((ch, id))
}

/// Agent side, after `Accept`: take one connection per QP, in order.
pub fn accept_all(
    ep: &mut Endpoint,
    ch: Arc<EventChannel>,
    listener: Arc<Identifier>,
    remote: &EndpointInfo,
    path_mtu: u32,
    timeout: Duration,
) -> Result<CmLink, RdmaError> {
    let deadline = Instant::now() + timeout;
    let mut ids = Vec::new();
    for q in 0..ep.nqps() {
        let ev = expect(
            &ch,
            EventType::ConnectRequest,
            "waiting for the client's connection",
            deadline,
            timeout,
        )?;
        let id = ev
            .cm_id()
            .ok_or_else(|| cm_err("connect request", "no CM id in the event"))?;
        ev.ack().map_err(|e| cm_err("ack", e))?;
        ep.connect_qp_cm(q, &id, remote, path_mtu)?;
        let mut cp = ConnectionParameter::default();
        cp.setup_qp_number(ep.qp_num(q));
        id.accept(cp).map_err(|e| cm_err("accept", e))?;
        expect_ack(
            &ch,
            EventType::Established,
            "connection establishment",
            deadline,
            timeout,
        )?;
        ids.push(id);
    }
    ep.set_connected(remote, path_mtu);
    Ok(CmLink {
        _ids: ids,
        _listener: Some(listener),
        _channel: ch,
    })
}

/// Client side, after `Accept`: connect QP i to the agent at `agent`.
pub fn connect_all(
    ep: &mut Endpoint,
    agent: SocketAddr,
    remote: &EndpointInfo,
    path_mtu: u32,
    timeout: Duration,
) -> Result<CmLink, RdmaError> {
    let ch = channel()?;
    let deadline = Instant::now() + timeout;
    let step = timeout.min(Duration::from_secs(5));
    let mut ids = Vec::new();
    for q in 0..ep.nqps() {
        let id = ch
            .create_id(PortSpace::Tcp)
            .map_err(|e| cm_err("create_id", e))?;
        id.resolve_addr(None, agent, step)
            .map_err(|e| cm_err(&format!("resolving {agent}"), e))?;
        expect_ack(
            &ch,
            EventType::AddressResolved,
            &format!("resolving {agent}"),
            deadline,
            timeout,
        )?;
        id.resolve_route(step)
            .map_err(|e| cm_err(&format!("route to {agent}"), e))?;
        expect_ack(
            &ch,
            EventType::RouteResolved,
            &format!("route to {agent}"),
            deadline,
            timeout,
        )?;
        let mut cp = ConnectionParameter::default();
        cp.setup_qp_number(ep.qp_num(q));
        id.connect(cp)
            .map_err(|e| cm_err(&format!("connecting to {agent}"), e))?;
        // With a QP of its own the active side gets CONNECT_RESPONSE, moves
        // the QP to RTR/RTS and completes the handshake itself.
        expect_ack(
            &ch,
            EventType::ConnectResponse,
            &format!("connecting QP {q} to {agent}"),
            deadline,
            timeout,
        )?;
        ep.connect_qp_cm(q, &id, remote, path_mtu)?;
        id.establish().map_err(|e| cm_err("establish", e))?;
        ids.push(id);
    }
    ep.set_connected(remote, path_mtu);
    Ok(CmLink {
        _ids: ids,
        _listener: None,
        _channel: ch,
    })
}
