//! The fabperf agent (`fabperf server`).
//!
//! One listening TCP port. Each connection starts with a 4-byte magic:
//! `FBPF` opens a control connection (one test), `FBPD` + cookie is a data
//! connection handed to the running test through the [`DataHub`], and an
//! HTTP method starts an HTTP/1.1 request for the agent's HTTP load target
//! (`fabperf_http`, when enabled). The first four bytes are awaited on an
//! event loop (a connection that sends nothing costs no thread); fabperf
//! connections then get a thread each, HTTP connections stay on the event
//! loop. The agent
//! runs one test at a time (measurements would disturb each other); a second
//! client gets a clear `busy` error. Every wait is bounded by the I/O
//! timeout, so a client that stalls or vanishes frees the agent for the next.
//!
//! Against hostile peers (docs/security.md): a connection's whole handshake
//! must end within the I/O timeout; connections that have not sent their
//! first four bytes are capped ([`MAX_UNSORTED`], [`MAX_UNSORTED_PER_SOURCE`],
//! lower when the open-file limit is low), fabperf handshakes too
//! ([`MAX_PENDING`], [`MAX_PENDING_PER_SOURCE`]), each time with the oldest
//! closed to admit a new one;
//! a timer thread closes late handshakes and stops the running test at its
//! deadline ([`fabperf_proto::TestClock`]); a panic in a test becomes an
//! error for the client, and every log line is escaped.
//!
//! Layout: this file holds the agent (config, listener, shared state);
//! `limits.rs` the caps, `handshakes.rs` connections before their test,
//! `admission.rs` which test may start, `connection.rs` one connection from
//! its magic to its test, `timer.rs` the deadlines.

mod admission;
mod connection;
mod handshakes;
mod limits;
mod timer;

pub use limits::{
    capacity, thread_headroom, FD_RESERVE, LISTEN_BACKLOG, MAX_CONNECTIONS, MAX_GROUP_TESTS,
    MAX_PENDING, MAX_PENDING_PER_SOURCE, MAX_UNSORTED, MAX_UNSORTED_PER_SOURCE, PER_GROUP_TEST,
    THREAD_RESERVE,
};

use admission::{admit, valid_group, BusyGuard, BusyInfo};
use connection::sort_connection;
use handshakes::{Pending, Sorting, Source};
use limits::{fd_caps, open_file_limit};
use timer::{later, timer_loop};

pub use fabperf_http::HttpConfig;
use fabperf_http::HttpServer;
use fabperf_proto::auth::{self, Side};
use fabperf_proto::data::RefusalReason;
use fabperf_proto::{
    text, AgentCapacity, AgentIdentity, ErrorCode, Limits, Msg, ProtoError, ServeCtx, ServeError,
    TestClock, TestKind, DATA_MAGIC, MAGIC, MAX_FRAME, OPEN_START_FRAME, PRE_AUTH_FRAME,
    PROTO_VERSION,
};
use fabperf_proto::{Control, DataHub, Routed};
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Agent settings.
pub struct AgentConfig {
    pub bind: SocketAddr,
    /// Shared secret; clients must prove they know it (and the agent
    /// proves it to them).
    pub token: Option<Vec<u8>>,
    /// Allow a non-loopback bind without a token.
    pub insecure: bool,
    pub limits: Limits,
    /// The test kinds served.
    pub kinds: Vec<Box<dyn TestKind>>,
    /// No log lines on stderr.
    pub quiet: bool,
    /// Who this agent is, announced in its hello (node, path label).
    pub identity: Option<AgentIdentity>,
}

impl AgentConfig {
    /// Authentication is required when binding to a non-loopback address,
    /// unless `insecure` is set.
    pub fn check_security(&self) -> Result<(), String> {
        if let Some(t) = &self.token {
            auth::refuse_public_token(t).map_err(|e| format!("refusing to serve: {e}"))?;
        }
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

/// This host's name (for `--node-name`'s default).
pub fn hostname() -> String {
    match nix::unistd::gethostname() {
        Ok(h) => h.to_string_lossy().into_owned(),
        Err(_) => "unknown".into(),
    }
}

struct Shared {
    kinds: Vec<Box<dyn TestKind>>,
    token: Option<Vec<u8>>,
    limits: Limits,
    quiet: bool,
    identity: Option<AgentIdentity>,
    busy: Mutex<Vec<BusyInfo>>,
    hub: DataHub,
    stop: AtomicBool,
    conns: AtomicUsize,
    pending: Mutex<Pending>,
    sorting: Mutex<Sorting>,
    http: Option<Arc<HttpServer>>,
    /// What the tests of one group may take (announced in the hello).
    capacity: AgentCapacity,
}

impl Shared {
    /// One log line; the whole line is escaped, since parts of it may come
    /// from a peer.
    fn log(&self, msg: &str) {
        if !self.quiet {
            eprintln!(
                "{} fabperf agent: {}",
                fabperf_results::now_rfc3339(),
                text::escape(msg)
            );
        }
    }
    fn names(&self) -> Vec<String> {
        self.kinds.iter().map(|k| k.name().to_string()).collect()
    }
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn sorting(&self) -> MutexGuard<'_, Sorting> {
        self.sorting.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn busy(&self) -> MutexGuard<'_, Vec<BusyInfo>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The handshake `id` is over (authenticated and started, or routed).
    /// False when the agent had already closed it.
    fn handshake_done(&self, id: u64) -> bool {
        self.pending().conns.remove(&id).is_some()
    }
    fn was_closed_by_agent(&self, id: u64) -> bool {
        !self.pending().conns.contains_key(&id)
    }
}

/// Releases a connection's slot (and its handshake entry) however the
/// connection thread ends, panics included.
struct ConnSlot {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.shared.pending().conns.remove(&self.id);
        self.shared.conns.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A bound agent, not yet serving.
pub struct Agent {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The event loop that sorts new connections and serves HTTP.
    rt: tokio::runtime::Runtime,
    /// Said once the agent serves (e.g. caps lowered by the open-file limit).
    notes: Vec<String>,
}

/// The event loop that sorts new connections (and serves HTTP).
fn event_loop(workers: usize) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .thread_name("fabperf-io")
        .enable_all()
        .build()
        .map_err(|e| format!("starting the agent's event loop: {e}"))
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
        // std listens with a backlog of 128; a burst of thousands of HTTP
        // connections needs more (listen() again only resizes the queue).
        let _ = rustix::net::listen(&listener, LISTEN_BACKLOG);
        let nofile = open_file_limit();
        let (unsorted, per_source, _, note) = fd_caps(nofile, None);
        let rt = event_loop(1)?;
        let hub = DataHub::for_agent(cfg.token.as_deref(), cfg.identity.clone());
        Ok(Agent {
            listener,
            addr,
            rt,
            notes: note.into_iter().collect(),
            shared: Arc::new(Shared {
                kinds: cfg.kinds,
                token: cfg.token,
                limits: cfg.limits,
                quiet: cfg.quiet,
                identity: cfg.identity,
                busy: Mutex::new(Vec::new()),
                hub,
                stop: AtomicBool::new(false),
                conns: AtomicUsize::new(0),
                pending: Mutex::new(Pending::default()),
                sorting: Mutex::new(Sorting {
                    cap: unsorted,
                    cap_per_source: per_source,
                    ..Sorting::default()
                }),
                http: None,
                capacity: capacity(nofile, unsorted as u64, thread_headroom()),
            }),
        })
    }

    /// Serve HTTP/1.1 (the HTTP load target) on the agent's port too;
    /// without it, HTTP requests are answered `503` with how to turn it on.
    /// The connection limit is lowered to what the open-file limit holds
    /// (and said in the log).
    pub fn enable_http(&mut self, cfg: HttpConfig) -> Result<(), String> {
        let nofile = open_file_limit();
        let (unsorted, per_source, http_cap, note) = fd_caps(nofile, Some(cfg.max_connections));
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rt = event_loop(workers)?;
        let shared = Arc::get_mut(&mut self.shared)
            .ok_or("enable_http is called before the agent serves")?;
        shared.http = Some(HttpServer::new(HttpConfig {
            max_connections: http_cap.unwrap_or(cfg.max_connections),
            ..cfg
        }));
        shared.capacity = capacity(
            nofile,
            (unsorted + http_cap.unwrap_or(0)) as u64,
            thread_headroom(),
        );
        let so = shared.sorting.get_mut().unwrap_or_else(|p| p.into_inner());
        so.cap = unsorted;
        so.cap_per_source = per_source;
        self.notes = note.into_iter().collect();
        self.rt = rt;
        Ok(())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the agent announces it can hold.
    pub fn capacity(&self) -> AgentCapacity {
        self.shared.capacity
    }

    /// Admit at most `n` tests of one group (tests, and agents that must
    /// announce less than their limits allow).
    pub fn limit_group(&mut self, n: u32) -> Result<(), String> {
        let shared = Arc::get_mut(&mut self.shared)
            .ok_or("limit_group is called before the agent serves")?;
        shared.capacity.group_tests = shared.capacity.group_tests.min(n.max(1));
        Ok(())
    }

    /// Serve until the process ends (or `stop` is set by a handle).
    pub fn run(self) {
        let Agent {
            listener,
            addr,
            shared,
            rt,
            notes,
        } = self;
        shared.log(&format!(
            "listening on {addr} (protocol v{PROTO_VERSION}, auth {}, tests: {}; \
             up to {} tests of one group; HTTP {})",
            if shared.token.is_some() { "on" } else { "off" },
            shared.names().join(", "),
            shared.capacity.group_tests,
            match &shared.http {
                Some(h) => format!(
                    "on: at most {} connections, bodies up to {} bytes",
                    h.config().max_connections,
                    h.config().max_size
                ),
                None => "off".into(),
            }
        ));
        for n in &notes {
            shared.log(n);
        }
        // The UDP door: a UDP hello for another agent's test is answered
        // with a refusal naming this agent (fabperf_proto::data).
        let quiet = shared.quiet;
        let door_log: fabperf_proto::DoorLog = Arc::new(move |m: &str| {
            if !quiet {
                eprintln!(
                    "{} fabperf agent: {}",
                    fabperf_results::now_rfc3339(),
                    text::escape(m)
                );
            }
        });
        if let Err(e) = shared.hub.open_udp_door(addr, door_log) {
            shared.log(&format!(
                "cannot start the UDP door ({e}); UDP hellos for other agents' tests go unanswered"
            ));
        }
        let timer = {
            let sh = shared.clone();
            std::thread::Builder::new()
                .name("fabperf-timer".into())
                .spawn(move || timer_loop(&sh))
        };
        if let Err(e) = &timer {
            shared.log(&format!(
                "cannot start the timer thread ({e}); refusing to serve without it"
            ));
            shared.hub.close_udp_door();
            return;
        }
        for conn in listener.incoming() {
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
            let source = match stream.peer_addr() {
                Ok(a) => Source::of(a.ip()),
                Err(_) => continue,
            };
            let accepted = Instant::now();
            let (id, cancel) = shared.sorting().admit(source);
            rt.spawn(sort_connection(
                shared.clone(),
                stream,
                source,
                id,
                cancel,
                accepted,
            ));
        }
        shared.stop.store(true, Ordering::SeqCst);
        shared.hub.close_udp_door();
        if let Ok(t) = timer {
            let _ = t.join();
        }
        rt.shutdown_background();
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
