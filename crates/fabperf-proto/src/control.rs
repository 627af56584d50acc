//! The control channel: a TCP stream carrying frames, with timeouts.

use crate::auth::{self, Side};
use crate::error::{ErrorCode, ProtoError};
use crate::frame::{
    read_frame, read_preamble, write_frame, write_preamble, AgentCapacity, AgentIdentity, Msg,
    MAX_FRAME,
};
use rustix::io::Errno;
use rustix::net::RecvFlags;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One end of a control connection.
#[derive(Debug)]
pub struct Control {
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    /// Default wait for a reply when no other timeout is given.
    io_timeout: Duration,
    current_timeout: Option<Duration>,
    /// Every read ends by then (the handshake's deadline).
    deadline: Option<Instant>,
    /// Largest frame accepted from the peer.
    max_frame: usize,
    /// Set by the agent when it stops the test: reads fail at once.
    stop: Option<Arc<AtomicBool>>,
    /// Client side: what the agent announced.
    hello: Option<AgentHello>,
}

/// What an agent announced in its `Hello` (client side).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentHello {
    pub fabperf_version: String,
    pub auth_required: bool,
    /// Test kinds it serves.
    pub tests: Vec<String>,
    /// Its node name, path label and inventory, when it sends them.
    pub agent: Option<AgentIdentity>,
    /// What it can hold, when it says.
    pub capacity: Option<AgentCapacity>,
}

/// Reads from a stream with a per-message deadline: each read syscall
/// waits at most until the deadline, so a peer trickling one byte at a
/// time cannot stretch a message past it.
struct DeadlineRead<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
    current: &'a mut Option<Duration>,
    stop: Option<&'a AtomicBool>,
}

impl Read for DeadlineRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.stop.is_some_and(|s| s.load(Ordering::Acquire)) {
            return Err(std::io::Error::other("stopped"));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // Past the deadline only what has already arrived is read: a
            // frame whose rest is buffered is not cut in the middle (which
            // would leave the stream out of step), and a trickling peer
            // gains nothing.
            return match rustix::net::recv(self.stream, buf, RecvFlags::DONTWAIT) {
                Ok((n, _)) => Ok(n),
                Err(e) if e == Errno::AGAIN => Err(std::io::ErrorKind::TimedOut.into()),
                Err(e) => Err(e.into()),
            };
        }
        // Round up to whole milliseconds; resetting the option costs a
        // system call, so only when it changes by more than that.
        let t = Duration::from_millis((left.as_millis() as u64).max(1));
        if self
            .current
            .is_none_or(|c| c > t || t - c > Duration::from_millis(50))
        {
            self.stream.set_read_timeout(Some(t))?;
            *self.current = Some(t);
        }
        (&*self.stream).read(buf)
    }
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
            .set_write_timeout(Some(io_timeout.max(Duration::from_millis(1))))
            .map_err(|e| ProtoError::io("setting write timeout", e))?;
        Ok(Control {
            stream,
            peer,
            local,
            io_timeout,
            current_timeout: None,
            deadline: None,
            max_frame: MAX_FRAME,
            stop: None,
            hello: None,
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

    /// Every later read ends by `deadline` (`None`: only the per-message
    /// timeouts apply).
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Largest frame accepted from the peer from now on.
    pub fn set_max_frame(&mut self, max: usize) {
        self.max_frame = max;
    }

    /// Reads fail with [`ProtoError::Stopped`] once `flag` is set (the
    /// agent's time limit for a test).
    pub fn set_stop_flag(&mut self, flag: Arc<AtomicBool>) {
        self.stop = Some(flag);
    }

    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire))
    }

    /// What the agent announced (client side, after [`connect_test`]).
    pub fn agent_hello(&self) -> Option<&AgentHello> {
        self.hello.as_ref()
    }

    pub fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        write_frame(&mut self.stream, msg)
    }

    fn stopped_error() -> ProtoError {
        ProtoError::Stopped("the agent stopped the test at its time limit".into())
    }

    /// Receive one message within `timeout` (a deadline for the whole
    /// message, not per read). A peer's `Error` frame becomes
    /// `ProtoError::Remote`, its text escaped.
    pub fn recv_within(&mut self, timeout: Duration, what: &str) -> Result<Msg, ProtoError> {
        if self.stopped() {
            return Err(Self::stopped_error());
        }
        let now = Instant::now();
        let mut deadline = now.checked_add(timeout).unwrap_or(now + MAX_WAIT);
        let mut waited = timeout;
        if let Some(d) = self.deadline {
            if d < deadline {
                deadline = d;
                waited = self.io_timeout;
            }
        }
        let mut r = DeadlineRead {
            stream: &self.stream,
            deadline,
            current: &mut self.current_timeout,
            stop: self.stop.as_deref(),
        };
        let res = read_frame(&mut r, self.max_frame, Some(waited), what);
        if self.stopped() {
            return Err(Self::stopped_error());
        }
        match res? {
            Msg::Error { code, message } => Err(ProtoError::remote(code, &message)),
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

    /// Read the peer's preamble within the I/O timeout (and the deadline).
    pub fn read_preamble(&mut self) -> Result<(), ProtoError> {
        let now = Instant::now();
        let mut deadline = now.checked_add(self.io_timeout).unwrap_or(now + MAX_WAIT);
        if let Some(d) = self.deadline {
            deadline = deadline.min(d);
        }
        let mut r = DeadlineRead {
            stream: &self.stream,
            deadline,
            current: &mut self.current_timeout,
            stop: self.stop.as_deref(),
        };
        read_preamble(&mut r, Some(self.io_timeout)).map(|_| ())
    }

    /// Mutable access to the raw stream for the agent's dispatcher.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

/// A wait longer than any timeout a flag accepts (a day).
const MAX_WAIT: Duration = Duration::from_secs(2 * 86400);

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Shared secret, when the agent requires one.
    pub token: Option<Vec<u8>>,
    /// Connect and reply timeout; a stalled agent is reported after this.
    /// Also the deadline for the whole handshake (connect to accept).
    pub timeout: Duration,
    /// Run in this group: agents run tests of one group concurrently (see
    /// `Msg::Start`). `None` for an ordinary test.
    pub group: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: None,
            group: None,
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

/// Connect, exchange preambles, read the agent's hello and authenticate
/// both ways when a token is involved. Everything must finish within
/// `cfg.timeout`.
fn open(addr: SocketAddr, cfg: &ClientConfig) -> Result<Control, ProtoError> {
    let deadline = Instant::now() + cfg.timeout;
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
    ctl.set_deadline(Some(deadline));
    ctl.send_preamble()?;
    ctl.read_preamble()?;
    let hello = match ctl.recv("the agent's hello")? {
        Msg::Hello {
            fabperf_version,
            auth_required,
            nonce,
            tests,
            agent,
            capacity,
        } => (
            AgentHello {
                fabperf_version,
                auth_required,
                tests,
                agent,
                capacity,
            },
            nonce,
        ),
        other => {
            return Err(ProtoError::Unexpected {
                expected: "hello".into(),
                got: other.kind().into(),
            })
        }
    };
    let (hello, nonce) = hello;
    match (&cfg.token, hello.auth_required, nonce) {
        (None, false, _) => {}
        (None, true, _) => {
            let msg = "the client has no shared secret (--token-file)";
            ctl.send_error(ErrorCode::AuthRequired, msg);
            return Err(ProtoError::Auth(format!(
                "the agent at {addr} requires a shared secret; pass --token-file with the agent's token"
            )));
        }
        (Some(_), false, _) => {
            let msg = "the client holds a shared secret but the agent asks for none, so it cannot prove it is the right agent";
            ctl.send_error(ErrorCode::AuthRequired, msg);
            return Err(ProtoError::Auth(format!(
                "the agent at {addr} does not require authentication, so it cannot prove it holds \
                 the secret in --token-file; refusing it (a fake agent could feed false results). \
                 Start the agent with the same --token-file, or drop --token-file here"
            )));
        }
        (Some(_), true, None) => {
            return Err(ProtoError::BadJson(
                "the agent requires authentication but sent no nonce".into(),
            ))
        }
        (Some(token), true, Some(agent_nonce)) => {
            if !auth::is_nonce(&agent_nonce) {
                return Err(ProtoError::BadJson(
                    "the agent's nonce is not 64 hex digits".into(),
                ));
            }
            let client_nonce = auth::new_nonce();
            ctl.send(&Msg::Auth {
                proof: auth::prove(token, Side::Client, &agent_nonce, &client_nonce),
                nonce: client_nonce.clone(),
            })?;
            match ctl.recv("the agent's answer to authentication")? {
                Msg::AuthOk { proof }
                    if auth::verify(token, Side::Agent, &agent_nonce, &client_nonce, &proof) => {}
                Msg::AuthOk { .. } => {
                    let msg = "the agent's proof of the shared secret is wrong";
                    ctl.send_error(ErrorCode::AuthFailed, msg);
                    return Err(ProtoError::Auth(format!(
                        "the agent at {addr} could not prove it holds the secret in --token-file; \
                         refusing it (a different or fake agent answers at that address)"
                    )));
                }
                other => {
                    return Err(ProtoError::Unexpected {
                        expected: "auth_ok".into(),
                        got: other.kind().into(),
                    })
                }
            }
        }
    }
    ctl.hello = Some(hello);
    Ok(ctl)
}

/// Connect to an agent and start `test`: preambles, hello, mutual
/// authentication, start, accept, all within `cfg.timeout`. Returns the
/// control channel (whose [`Control::agent_hello`] tells what the agent
/// announced) and the agent's setup info.
pub fn connect_test(
    addr: SocketAddr,
    cfg: &ClientConfig,
    test: &str,
    params: serde_json::Value,
) -> Result<(Control, serde_json::Value), ProtoError> {
    let mut ctl = open(addr, cfg)?;
    let tests = ctl
        .hello
        .as_ref()
        .map(|h| h.tests.clone())
        .unwrap_or_default();
    if !tests.is_empty() && !tests.iter().any(|t| t == test) {
        let msg = format!(
            "the agent at {addr} does not serve test '{test}'; it serves: {}",
            crate::text::escape(&tests.join(", "))
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
        group: cfg.group.clone(),
    })?;
    match ctl.recv("the agent's answer to start")? {
        Msg::Accept { info } => {
            ctl.set_deadline(None);
            Ok((ctl, info))
        }
        other => Err(ProtoError::Unexpected {
            expected: "accept".into(),
            got: other.kind().into(),
        }),
    }
}

/// Ask an agent who it is without running a test: the handshake (with
/// mutual authentication when a token is given), then `Bye`.
pub fn query_agent(addr: SocketAddr, cfg: &ClientConfig) -> Result<AgentHello, ProtoError> {
    let mut ctl = open(addr, cfg)?;
    let _ = ctl.send(&Msg::Bye);
    Ok(ctl.hello.take().expect("open() stores the hello"))
}
