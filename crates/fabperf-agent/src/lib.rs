//! The fabperf agent (`fabperf server`).
//!
//! One listening TCP port. Each connection starts with a 4-byte magic:
//! `FBPF` opens a control connection (one test), `FBPD` + cookie is a data
//! connection handed to the running test through the [`DataHub`]. The agent
//! runs one test at a time (measurements would disturb each other); a second
//! client gets a clear `busy` error. Every wait is bounded by the I/O
//! timeout, so a client that stalls or vanishes frees the agent for the next.

use fabperf_proto::{
    auth, ErrorCode, Limits, Msg, ProtoError, ServeCtx, TestKind, DATA_MAGIC, MAGIC, PROTO_VERSION,
};
use fabperf_proto::{Control, DataHub};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most connections handled at once (handshakes included); more are closed.
pub const MAX_CONNECTIONS: usize = 256;

/// Agent settings.
pub struct AgentConfig {
    pub bind: SocketAddr,
    /// Shared secret; clients must prove they know it.
    pub token: Option<Vec<u8>>,
    /// Allow a non-loopback bind without a token.
    pub insecure: bool,
    pub limits: Limits,
    /// The test kinds served.
    pub kinds: Vec<Box<dyn TestKind>>,
    /// No log lines on stderr.
    pub quiet: bool,
}

impl AgentConfig {
    /// Authentication is required when binding to a non-loopback address,
    /// unless `insecure` is set.
    pub fn check_security(&self) -> Result<(), String> {
        let ip = self.bind.ip();
        if self.token.is_none() && !self.insecure && !ip.is_loopback() {
            return Err(format!(
                "binding to {ip} (not loopback) needs a shared secret: pass --token-file FILE \
                 (clients use the same file), or --insecure to serve anyone who can reach the port"
            ));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct BusyInfo {
    test: String,
    peer: SocketAddr,
    since: Instant,
}

struct Shared {
    kinds: Vec<Box<dyn TestKind>>,
    token: Option<Vec<u8>>,
    limits: Limits,
    quiet: bool,
    busy: Mutex<Option<BusyInfo>>,
    hub: DataHub,
    stop: AtomicBool,
    conns: AtomicUsize,
}

impl Shared {
    fn log(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{} fabperf agent: {msg}", fabperf_results::now_rfc3339());
        }
    }
    fn names(&self) -> Vec<String> {
        self.kinds.iter().map(|k| k.name().to_string()).collect()
    }
}

/// A bound agent, not yet serving.
pub struct Agent {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// A running agent on its own thread.
pub struct AgentHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Bind the listening socket. Fails when the security rule is broken or
    /// the port is taken.
    pub fn bind(cfg: AgentConfig) -> Result<Agent, String> {
        cfg.check_security()?;
        let mut names: Vec<&str> = cfg.kinds.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err("two test kinds share a name".into());
        }
        let listener = TcpListener::bind(cfg.bind).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    "; another agent (or program) holds this port: pick another with --port"
                }
                std::io::ErrorKind::AddrNotAvailable => "; that address is not on this host",
                std::io::ErrorKind::PermissionDenied => "; ports below 1024 need root",
                _ => "",
            };
            format!("cannot listen on {}: {e}{hint}", cfg.bind)
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("reading bound address: {e}"))?;
        Ok(Agent {
            listener,
            addr,
            shared: Arc::new(Shared {
                kinds: cfg.kinds,
                token: cfg.token,
                limits: cfg.limits,
                quiet: cfg.quiet,
                busy: Mutex::new(None),
                hub: DataHub::new(),
                stop: AtomicBool::new(false),
                conns: AtomicUsize::new(0),
            }),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until the process ends (or `stop` is set by a handle).
    pub fn run(self) {
        let shared = self.shared;
        shared.log(&format!(
            "listening on {} (protocol v{PROTO_VERSION}, auth {}, tests: {})",
            self.addr,
            if shared.token.is_some() { "on" } else { "off" },
            shared.names().join(", ")
        ));
        for conn in self.listener.incoming() {
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let stream = match conn {
                Ok(s) => s,
                Err(e) => {
                    shared.log(&format!("accept failed: {e}"));
                    // EMFILE and friends: back off instead of spinning.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if shared.conns.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                shared.conns.fetch_sub(1, Ordering::SeqCst);
                drop(stream);
                continue;
            }
            let sh = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("fabperf-conn".into())
                .spawn(move || {
                    handle_connection(&sh, stream);
                    sh.conns.fetch_sub(1, Ordering::SeqCst);
                });
            if let Err(e) = spawned {
                shared.conns.fetch_sub(1, Ordering::SeqCst);
                shared.log(&format!("cannot start a connection thread: {e}"));
            }
        }
    }

    /// Serve on a background thread (used by `fabperf suite` and tests).
    pub fn spawn(self) -> AgentHandle {
        let addr = self.addr;
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name("fabperf-agent".into())
            .spawn(move || self.run())
            .expect("spawning the agent thread");
        AgentHandle {
            addr,
            shared,
            thread: Some(thread),
        }
    }
}

impl AgentHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting and wait for the accept loop to end.
    pub fn shutdown(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a throwaway connection.
        let wake = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from(([127, 0, 0, 1], self.addr.port()))
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, self.addr.port()))
            }
            _ => self.addr,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_inner();
        }
    }
}

/// Clears the busy slot when the test ends, even by panic.
struct BusyGuard<'a>(&'a Mutex<Option<BusyInfo>>);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

fn handle_connection(sh: &Shared, mut stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let t = sh.limits.io_timeout;
    let _ = stream.set_read_timeout(Some(t));
    let mut magic = [0u8; 4];
    if let Err(e) = read_exact_or(&mut stream, &mut magic) {
        if !sh.stop.load(Ordering::SeqCst) {
            sh.log(&format!("{peer}: no preamble ({e}); closed"));
        }
        return;
    }
    if magic == DATA_MAGIC {
        if !sh.hub.route(stream, t) {
            sh.log(&format!(
                "{peer}: data connection with an unknown cookie; closed"
            ));
        }
        return;
    }
    if magic != MAGIC {
        let _ = stream.write_all(b"fabperf agent: this port speaks the fabperf protocol only\n");
        let _ = stream.shutdown(std::net::Shutdown::Write);
        // Drain what the peer already sent so the close is not a reset that
        // destroys our message before it is read.
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 65536 {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
        sh.log(&format!(
            "{peer}: not a fabperf client (first bytes {magic:02x?}); closed"
        ));
        return;
    }
    let mut rest = [0u8; 4];
    if let Err(e) = read_exact_or(&mut stream, &mut rest) {
        sh.log(&format!("{peer}: truncated preamble ({e}); closed"));
        return;
    }
    let mut ctl = match Control::new(stream, t) {
        Ok(c) => c,
        Err(e) => {
            sh.log(&format!("{peer}: {e}"));
            return;
        }
    };
    if ctl.send_preamble().is_err() {
        return;
    }
    let version = u16::from_be_bytes([rest[0], rest[1]]);
    if version != PROTO_VERSION {
        let msg = format!(
            "client speaks protocol v{version}, this agent (fabperf {}) v{PROTO_VERSION}; run the same fabperf version on both ends",
            fabperf_results::FABPERF_VERSION
        );
        ctl.send_error(ErrorCode::VersionMismatch, &msg);
        sh.log(&format!("{peer}: {msg}"));
        return;
    }
    if let Err(e) = serve_control(sh, &mut ctl) {
        if !e.connection_lost {
            ctl.send_error(e.code, &e.message);
        }
        sh.log(&format!("{peer}: {e}"));
    }
}

fn read_exact_or(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    s.read_exact(buf)
}

fn serve_control(sh: &Shared, ctl: &mut Control) -> Result<(), fabperf_proto::ServeError> {
    use fabperf_proto::ServeError;
    let peer = ctl.peer();
    let nonce = sh.token.as_ref().map(|_| auth::new_nonce());
    ctl.send(&Msg::Hello {
        fabperf_version: fabperf_results::FABPERF_VERSION.to_string(),
        auth_required: sh.token.is_some(),
        nonce: nonce.clone(),
        tests: sh.names(),
    })?;
    let (test, params, client_auth) = match ctl.recv("the client's start request") {
        Ok(Msg::Start {
            test, params, auth, ..
        }) => (test, params, auth),
        Ok(Msg::Bye) => return Ok(()),
        Ok(other) => {
            return Err(ServeError::new(
                ErrorCode::BadFrame,
                format!("expected start, got {}", other.kind()),
            ))
        }
        // The client refused (e.g. unknown test detected on its side).
        Err(ProtoError::Remote { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if let (Some(token), Some(nonce)) = (&sh.token, &nonce) {
        match client_auth {
            None => {
                return Err(ServeError::new(
                    ErrorCode::AuthRequired,
                    "this agent requires a shared secret: pass --token-file with the agent's token",
                ))
            }
            Some(a) if !auth::verify(token, nonce, &a) => {
                return Err(ServeError::new(
                    ErrorCode::AuthFailed,
                    "wrong shared secret: the client's --token-file does not match the agent's",
                ))
            }
            Some(_) => {}
        }
    }
    let Some(kind) = sh.kinds.iter().find(|k| k.name() == test) else {
        return Err(ServeError::new(
            ErrorCode::UnknownTest,
            format!(
                "this agent does not serve test '{test}'; it serves: {}",
                sh.names().join(", ")
            ),
        ));
    };
    {
        let mut busy = sh.busy.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = busy.as_ref() {
            return Err(ServeError::new(
                ErrorCode::Busy,
                format!(
                    "agent is running {} for {} (started {:.0} s ago); measurements would disturb each other — retry when it finishes",
                    b.test,
                    b.peer,
                    b.since.elapsed().as_secs_f64()
                ),
            ));
        }
        *busy = Some(BusyInfo {
            test: test.clone(),
            peer,
            since: Instant::now(),
        });
    }
    let _guard = BusyGuard(&sh.busy);
    let started = Instant::now();
    let mut ctx = ServeCtx {
        ctl,
        limits: sh.limits,
        data: &sh.hub,
    };
    let res = kind.serve(&mut ctx, params);
    match res {
        Ok(()) => sh.log(&format!(
            "{peer}: {test} done in {:.1} s",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => {
            sh.log(&format!("{peer}: {test} failed: {e}"));
            if !e.connection_lost {
                ctl.send_error(e.code, &format!("{test}: {}", e.message));
            }
        }
    }
    Ok(())
}
