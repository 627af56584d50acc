//! The control channel: a TCP stream carrying frames, with timeouts.

use crate::auth;
use crate::error::{ErrorCode, ProtoError};
use crate::frame::{read_frame, read_preamble, write_frame, write_preamble, Msg};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One end of a control connection.
#[derive(Debug)]
pub struct Control {
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    /// Default wait for a reply when no other timeout is given.
    io_timeout: Duration,
    current_timeout: Option<Duration>,
}

impl Control {
    /// Wrap an established stream (preambles not yet exchanged).
    pub fn new(stream: TcpStream, io_timeout: Duration) -> Result<Control, ProtoError> {
        let peer = stream
            .peer_addr()
            .map_err(|e| ProtoError::io("reading peer address", e))?;
        let local = stream
            .local_addr()
            .map_err(|e| ProtoError::io("reading local address", e))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(io_timeout))
            .map_err(|e| ProtoError::io("setting write timeout", e))?;
        Ok(Control {
            stream,
            peer,
            local,
            io_timeout,
            current_timeout: None,
        })
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn local(&self) -> SocketAddr {
        self.local
    }

    pub fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// The underlying stream (e.g. to clone for a watchdog).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    fn set_timeout(&mut self, t: Duration) -> Result<(), ProtoError> {
        let t = t.max(Duration::from_millis(1));
        if self.current_timeout != Some(t) {
            self.stream
                .set_read_timeout(Some(t))
                .map_err(|e| ProtoError::io("setting read timeout", e))?;
            self.current_timeout = Some(t);
        }
        Ok(())
    }

    pub fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        write_frame(&mut self.stream, msg)
    }

    /// Receive one message within `timeout`. A peer's `Error` frame becomes
    /// `ProtoError::Remote`.
    pub fn recv_within(&mut self, timeout: Duration, what: &str) -> Result<Msg, ProtoError> {
        self.set_timeout(timeout)?;
        match read_frame(&mut self.stream, Some(timeout), what)? {
            Msg::Error { code, message } => Err(ProtoError::Remote { code, message }),
            m => Ok(m),
        }
    }

    /// Receive one message within the default I/O timeout.
    pub fn recv(&mut self, what: &str) -> Result<Msg, ProtoError> {
        self.recv_within(self.io_timeout, what)
    }

    /// Send a test-specific message.
    pub fn send_test<T: Serialize>(&mut self, body: &T) -> Result<(), ProtoError> {
        let body = serde_json::to_value(body).map_err(|e| ProtoError::BadJson(e.to_string()))?;
        self.send(&Msg::Test { body })
    }

    /// Receive a test-specific message of type `T` within `timeout`.
    pub fn recv_test_within<T: DeserializeOwned>(
        &mut self,
        timeout: Duration,
        what: &str,
    ) -> Result<T, ProtoError> {
        match self.recv_within(timeout, what)? {
            Msg::Test { body } => serde_json::from_value(body)
                .map_err(|e| ProtoError::BadJson(format!("{what}: {e}"))),
            other => Err(ProtoError::Unexpected {
                expected: what.to_string(),
                got: other.kind().to_string(),
            }),
        }
    }

    /// Receive a test-specific message within the default I/O timeout.
    pub fn recv_test<T: DeserializeOwned>(&mut self, what: &str) -> Result<T, ProtoError> {
        self.recv_test_within(self.io_timeout, what)
    }

    /// Tell the peer this side failed (best effort).
    pub fn send_error(&mut self, code: ErrorCode, message: &str) {
        let _ = self.send(&Msg::Error {
            code,
            message: message.to_string(),
        });
    }

    /// Agent side of the handshake after the magic was read by the listener:
    /// reads the rest of the peer preamble is the caller's job. Sends our
    /// preamble.
    pub fn send_preamble(&mut self) -> Result<(), ProtoError> {
        write_preamble(&mut self.stream)
    }

    /// Read the peer's preamble within the I/O timeout.
    pub fn read_preamble(&mut self) -> Result<(), ProtoError> {
        let t = self.io_timeout;
        self.set_timeout(t)?;
        read_preamble(&mut self.stream, Some(t)).map(|_| ())
    }

    /// Mutable access to the raw stream for the agent's dispatcher.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Shared secret, when the agent requires one.
    pub token: Option<Vec<u8>>,
    /// Connect and reply timeout; a stalled agent is reported after this.
    pub timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Resolve `host` (name, IPv4, IPv6, optionally with `:port` or `[v6]:port`).
pub fn resolve(host: &str, default_port: u16) -> Result<SocketAddr, ProtoError> {
    let try_parse = |s: &str| -> Option<SocketAddr> { s.to_socket_addrs().ok()?.next() };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    if let Some(a) = try_parse(host) {
        return Ok(a);
    }
    if let Some(a) = try_parse(&format!("{host}:{default_port}")) {
        return Ok(a);
    }
    Err(ProtoError::io(
        format!("resolving {host}"),
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such host; give an IP address or a resolvable name",
        ),
    ))
}

/// Connect to an agent and start `test`: preambles, hello, auth, start,
/// accept. Returns the control channel and the agent's setup info.
pub fn connect_test(
    addr: SocketAddr,
    cfg: &ClientConfig,
    test: &str,
    params: serde_json::Value,
) -> Result<(Control, serde_json::Value), ProtoError> {
    let stream = TcpStream::connect_timeout(&addr, cfg.timeout).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                "; is `fabperf server` running there and the port open?"
            }
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                "; the host did not answer: check the address, routing and firewalls"
            }
            _ => "",
        };
        ProtoError::io(format!("connecting to agent at {addr}{hint}"), e)
    })?;
    let mut ctl = Control::new(stream, cfg.timeout)?;
    ctl.send_preamble()?;
    ctl.read_preamble()?;
    let (auth_required, nonce, tests) = match ctl.recv("the agent's hello")? {
        Msg::Hello {
            auth_required,
            nonce,
            tests,
            ..
        } => (auth_required, nonce, tests),
        other => {
            return Err(ProtoError::Unexpected {
                expected: "hello".into(),
                got: other.kind().into(),
            })
        }
    };
    let auth = match (auth_required, &cfg.token, nonce) {
        (true, None, _) => {
            return Err(ProtoError::Remote {
                code: ErrorCode::AuthRequired,
                message: format!(
                    "the agent at {addr} requires a shared secret; pass --token-file with the agent's token"
                ),
            })
        }
        (true, Some(t), Some(n)) => Some(auth::respond(t, &n)),
        (true, Some(_), None) => {
            return Err(ProtoError::BadJson(
                "agent requires auth but sent no nonce".into(),
            ))
        }
        (false, _, _) => None,
    };
    if !tests.is_empty() && !tests.iter().any(|t| t == test) {
        let msg = format!(
            "the agent at {addr} does not serve test '{test}'; it serves: {}",
            tests.join(", ")
        );
        ctl.send_error(ErrorCode::UnknownTest, &msg);
        return Err(ProtoError::Remote {
            code: ErrorCode::UnknownTest,
            message: msg,
        });
    }
    ctl.send(&Msg::Start {
        test: test.to_string(),
        params,
        fabperf_version: fabperf_results::FABPERF_VERSION.to_string(),
        auth,
    })?;
    match ctl.recv("the agent's answer to start")? {
        Msg::Accept { info } => Ok((ctl, info)),
        other => Err(ProtoError::Unexpected {
            expected: "accept".into(),
            got: other.kind().into(),
        }),
    }
}
