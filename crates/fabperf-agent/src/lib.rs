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

/// Most connection threads at once; a connection beyond it is closed.
/// (Handshakes are capped far lower by [`MAX_PENDING`]: beyond them only
/// the authenticated tests of one group run at once, at most
/// [`MAX_GROUP_TESTS`].)
pub const MAX_CONNECTIONS: usize = MAX_GROUP_TESTS + 2 * MAX_PENDING;
/// Most connections in their handshake (not yet authenticated and
/// started) at once. At the cap, the oldest is closed to make room for the
/// new one, so a flood of stalled connections cannot lock clients out.
pub const MAX_PENDING: usize = 128;
/// Most handshakes at once from one source address (IPv4 address, or IPv6
/// /64 prefix); beyond it, that source's oldest is closed.
pub const MAX_PENDING_PER_SOURCE: usize = 16;
/// Most connections that have not yet sent their first four bytes (which
/// say what they are). They wait on the event loop, not on a thread, so
/// the cap is high: an HTTP load opens thousands of connections at once
/// from one host. At the cap the oldest is closed.
pub const MAX_UNSORTED: usize = 8192;
/// Most such connections from one source (its oldest is closed beyond).
pub const MAX_UNSORTED_PER_SOURCE: usize = 4096;
/// Open files kept for fabperf tests, logs and the agent itself when the
/// caps above and the HTTP connection limit are sized to the open-file
/// limit.
pub const FD_RESERVE: u64 = 512;
/// Listen backlog asked for (the kernel caps it at net.core.somaxconn).
pub const LISTEN_BACKLOG: i32 = 4096;

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

struct BusyInfo {
    /// Which connection runs it (to clear its own entry).
    id: u64,
    test: String,
    peer: SocketAddr,
    since: Instant,
    clock: Arc<TestClock>,
    group: Option<String>,
}

/// Most tests of one group running at once (an incast's senders): the
/// incast of a 1025-node cluster. Lower when the agent's open files or
/// threads cannot hold that many ([`capacity`]); the agent announces what
/// it admits in its hello.
pub const MAX_GROUP_TESTS: usize = 1024;
/// Open files (and threads) one test of a group needs at least: its
/// control connection and one data connection, a thread each.
pub const PER_GROUP_TEST: u64 = 2;
/// Threads kept for handshakes, the event loop and the agent itself.
pub const THREAD_RESERVE: u64 = MAX_PENDING as u64 + 64;

/// What the agent can give the tests of one group: the open files left
/// beside the caps on new connections (`nofile`: the open-file limit,
/// `held`: what those caps may take), the threads left (`threads`: how
/// many more this process may start, `None`: no limit found), and from
/// them how many tests (each at least [`PER_GROUP_TEST`] of both).
pub fn capacity(nofile: u64, held: u64, threads: Option<u64>) -> AgentCapacity {
    let fds = nofile
        .saturating_sub(held)
        .saturating_sub(FD_RESERVE / 2)
        .max(FD_RESERVE / 2);
    let threads = threads.unwrap_or(u64::MAX).saturating_sub(THREAD_RESERVE);
    let tests = (fds.min(threads) / PER_GROUP_TEST).min(MAX_GROUP_TESTS as u64) as u32;
    AgentCapacity {
        group_tests: tests.max(1),
        group_fds: fds,
        group_threads: threads.min(1 << 32),
    }
}

/// How many more threads this process may start: the smallest of the
/// kernel's `threads-max` and `pid_max` less the threads running now, and
/// its cgroup's `pids.max` less `pids.current` (`None`: no limit found).
pub fn thread_headroom() -> Option<u64> {
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    // /proc/loadavg's fourth field: running/total scheduling entities.
    let running: Option<u64> = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok());
    let mut best: Option<u64> = None;
    let mut take = |v: Option<u64>| {
        if let Some(v) = v {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
    };
    for k in ["/proc/sys/kernel/threads-max", "/proc/sys/kernel/pid_max"] {
        take(read(k).zip(running).map(|(m, r)| m.saturating_sub(r)));
    }
    // This process's cgroup: "0::/path" (v2) or "N:pids:/path" (v1).
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for l in cgroups.lines() {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        let dir = match ctrl {
            "" => format!("/sys/fs/cgroup{}", path.trim_end_matches('/')),
            c if c.split(',').any(|c| c == "pids") => {
                format!("/sys/fs/cgroup/pids{}", path.trim_end_matches('/'))
            }
            _ => continue,
        };
        let max = read(&format!("{dir}/pids.max"));
        let cur = read(&format!("{dir}/pids.current"));
        take(max.zip(cur).map(|(m, c)| m.saturating_sub(c)));
    }
    best
}

/// A group id: 8 to 64 lower-case hex digits.
fn valid_group(g: &str) -> bool {
    (8..=64).contains(&g.len())
        && g.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether a test of `group` may start while `running` are running: when
/// nothing runs, or when it and every running test share a group (and the
/// group has fewer than `max` tests). Otherwise the reason it may not.
fn admit(running: &[BusyInfo], group: Option<&str>, max: usize) -> Result<(), String> {
    let Some(first) = running.first() else {
        return Ok(());
    };
    let same = group.is_some() && running.iter().all(|b| b.group.as_deref() == group);
    if same && running.len() < max {
        return Ok(());
    }
    if same {
        return Err(format!(
            "agent is running {max} tests of this group, its most (its hello says so); \
             a run checks a plan against it, so this sender is not part of the cell's start"
        ));
    }
    let others = if running.len() > 1 {
        format!(" and {} more of its group", running.len() - 1)
    } else {
        String::new()
    };
    Err(format!(
        "agent is running {} for {}{others} (started {:.0} s ago); measurements would disturb each other — retry when it finishes",
        first.test,
        first.peer,
        first.since.elapsed().as_secs_f64()
    ))
}

/// Where handshakes come from, for the per-source cap: an IPv4 address,
/// or the /64 prefix of an IPv6 address (one host usually holds a whole
/// /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Source(IpAddr);

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let s = v6.segments();
                Source(IpAddr::V6(Ipv6Addr::new(
                    s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                )))
            }
            v4 => Source(v4),
        }
    }
}

/// A connection in its handshake.
struct PendingConn {
    source: Source,
    /// When the agent closes it if the handshake has not finished.
    deadline: Instant,
    stream: TcpStream,
}

/// Handshakes in progress, oldest first (ids are accept order).
#[derive(Default)]
struct Pending {
    conns: BTreeMap<u64, PendingConn>,
    /// Closed by the agent (evicted or out of time) since the last log line.
    evicted: u64,
    timed_out: u64,
}

impl Pending {
    /// Close and forget the handshake `id`.
    fn close(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    /// Register a new handshake (`id`: its connection's place in accept
    /// order), closing the oldest of its source and then the oldest overall
    /// when at a cap. Connections are sorted on an event loop, so they may
    /// get here out of accept order: when the new one is itself the oldest,
    /// it is the one refused (false).
    fn admit(&mut self, id: u64, stream: &TcpStream, source: Source, deadline: Instant) -> bool {
        let same: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.source == source)
            .map(|(id, _)| *id)
            .collect();
        if same.len() >= MAX_PENDING_PER_SOURCE {
            self.evicted += 1;
            if id < same[0] {
                return false;
            }
            self.close(same[0]);
        }
        if self.conns.len() >= MAX_PENDING {
            if let Some(&oldest) = self.conns.keys().next() {
                self.evicted += 1;
                if id < oldest {
                    return false;
                }
                self.close(oldest);
            }
        }
        let Ok(stream) = stream.try_clone() else {
            return false;
        };
        self.conns.insert(
            id,
            PendingConn {
                source,
                deadline,
                stream,
            },
        );
        true
    }
}

/// A connection that has not sent its first four bytes yet.
struct Unsorted {
    source: Source,
    /// Dropping it closes the connection (its task sees the channel end).
    _cancel: tokio::sync::oneshot::Sender<()>,
}

/// Connections waiting for their first four bytes, oldest first.
#[derive(Default)]
struct Sorting {
    next: u64,
    conns: BTreeMap<u64, Unsorted>,
    per_source: HashMap<Source, usize>,
    cap: usize,
    cap_per_source: usize,
    evicted: u64,
    timed_out: u64,
}

impl Sorting {
    fn remove(&mut self, id: u64) -> bool {
        let Some(c) = self.conns.remove(&id) else {
            return false;
        };
        if let Some(n) = self.per_source.get_mut(&c.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&c.source);
            }
        }
        true
    }

    /// Register a new connection, closing the oldest of its source and then
    /// the oldest overall when at a cap.
    fn admit(&mut self, source: Source) -> (u64, tokio::sync::oneshot::Receiver<()>) {
        if self.per_source.get(&source).copied().unwrap_or(0) >= self.cap_per_source {
            let oldest = self
                .conns
                .iter()
                .find(|(_, c)| c.source == source)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.remove(id);
                self.evicted += 1;
            }
        }
        if self.conns.len() >= self.cap {
            if let Some(&id) = self.conns.keys().next() {
                self.remove(id);
                self.evicted += 1;
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = self.next;
        self.next += 1;
        self.conns.insert(
            id,
            Unsorted {
                source,
                _cancel: tx,
            },
        );
        *self.per_source.entry(source).or_insert(0) += 1;
        (id, rx)
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

/// The soft open-file limit (1024 when it cannot be read).
fn open_file_limit() -> u64 {
    fabperf_http::rlimit::nofile().map_or(1024, |(soft, _)| soft)
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

/// Caps sized to the open-file limit `nofile`: the unsorted connections'
/// (total, per source) and the HTTP connections', and a note when a cap is
/// lower than asked.
fn fd_caps(nofile: u64, http: Option<usize>) -> (usize, usize, Option<usize>, Option<String>) {
    let budget = nofile.saturating_sub(FD_RESERVE).max(64) as usize;
    let http_share = http.map_or(0, |h| h.min(budget / 2));
    let unsorted = MAX_UNSORTED.min(budget - http_share).max(32);
    let per_source = MAX_UNSORTED_PER_SOURCE.min(unsorted / 2).max(16);
    let http_cap = http.map(|h| h.min(budget - unsorted.min(budget - http_share)).max(1));
    // Without HTTP, a few hundred silent connections are plenty: no note.
    let low = http
        .zip(http_cap)
        .is_some_and(|(h, c)| c < h || unsorted < MAX_UNSORTED);
    let note = low.then(|| {
        format!(
            "the open-file limit of {nofile} holds at most {unsorted} new connections{}; \
             raise it (LimitNOFILE=, ulimit -n) for more",
            http_cap.map_or(String::new(), |c| format!(" and {c} HTTP connections"))
        )
    });
    (unsorted, per_source, http_cap, note)
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

/// `t + d`, or far in the future when that overflows.
fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(10 * 365 * 86400)))
        .unwrap_or(t)
}

/// The agent's clock: closes handshakes past their deadline, stops the
/// running test at its deadline, and logs what it closed (aggregated, so
/// a flood of connections cannot flood the log).
fn timer_loop(sh: &Shared) {
    const TICK: Duration = Duration::from_millis(50);
    const LOG_EVERY: Duration = Duration::from_secs(10);
    let mut last_log = Instant::now();
    let mut last_sort_log = Instant::now();
    while !sh.stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
        let now = Instant::now();
        {
            let mut p = sh.pending();
            let late: Vec<u64> = p
                .conns
                .iter()
                .filter(|(_, c)| c.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in late {
                p.close(id);
                p.timed_out += 1;
            }
            if now.duration_since(last_log) >= LOG_EVERY && (p.evicted > 0 || p.timed_out > 0) {
                let (e, t) = (p.evicted, p.timed_out);
                p.evicted = 0;
                p.timed_out = 0;
                drop(p);
                last_log = now;
                sh.log(&format!(
                    "closed {t} connection(s) that did not finish the handshake within {:.1} s \
                     and {e} oldest unfinished handshake(s) to admit new connections \
                     (at most {MAX_PENDING}, {MAX_PENDING_PER_SOURCE} per source address)",
                    sh.limits.io_timeout.as_secs_f64()
                ));
            }
        }
        if now.duration_since(last_sort_log) >= LOG_EVERY {
            let mut so = sh.sorting();
            let (e, t) = (so.evicted, so.timed_out);
            so.evicted = 0;
            so.timed_out = 0;
            let cap = so.cap;
            drop(so);
            if e > 0 || t > 0 {
                last_sort_log = now;
                sh.log(&format!(
                    "closed {t} connection(s) that sent nothing within {:.1} s \
                     and {e} oldest silent connection(s) to admit new ones (at most {cap})",
                    sh.limits.io_timeout.as_secs_f64()
                ));
            }
            if let Some(line) = sh.http.as_ref().and_then(|h| h.take_summary()) {
                last_sort_log = now;
                sh.log(&line);
            }
        }
        let stopped: Vec<(String, SocketAddr, String)> = sh
            .busy()
            .iter()
            .filter(|b| b.clock.enforce(now))
            .map(|b| (b.test.clone(), b.peer, b.clock.describe()))
            .collect();
        for (test, peer, why) in stopped {
            sh.log(&format!(
                "{peer}: stopping {test} at the agent's time limit ({why})"
            ));
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// Clears the test's busy entry when it ends, even by panic.
struct BusyGuard<'a>(&'a Mutex<Vec<BusyInfo>>, u64);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|b| b.id != self.1);
    }
}

/// Wait (on the event loop) for a new connection's first four bytes, then
/// hand it on: fabperf connections to a thread of their own, HTTP to the
/// HTTP server; anything else gets a one-line answer and is closed.
async fn sort_connection(
    sh: Arc<Shared>,
    stream: TcpStream,
    source: Source,
    id: u64,
    mut cancel: tokio::sync::oneshot::Receiver<()>,
    accepted: Instant,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = sh.limits.io_timeout;
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let peer_addr = stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let s = if stream.set_nonblocking(true).is_ok() {
        tokio::net::TcpStream::from_std(stream).ok()
    } else {
        None
    };
    let Some(mut s) = s else {
        sh.sorting().remove(id);
        return;
    };
    let mut magic = [0u8; 4];
    let read = tokio::select! {
        r = tokio::time::timeout_at(later(accepted, t).into(), s.read_exact(&mut magic)) => Some(r),
        _ = &mut cancel => None,
    };
    let was_listed = sh.sorting().remove(id);
    match read {
        // Closed by the agent to make room (counted there).
        None => return,
        Some(Err(_)) => {
            if was_listed {
                sh.sorting().timed_out += 1;
            }
            return;
        }
        Some(Ok(Err(e))) => {
            if !sh.stop.load(Ordering::SeqCst) {
                sh.log(&format!("{peer}: no preamble ({e}); closed"));
            }
            return;
        }
        Some(Ok(Ok(_))) => {}
    }
    if magic == DATA_MAGIC || magic == MAGIC {
        let stream = match s.into_std() {
            Ok(st) if st.set_nonblocking(false).is_ok() => st,
            _ => return,
        };
        start_fabperf_connection(&sh, id, stream, source, magic, accepted);
        return;
    }
    if fabperf_http::is_http_start(&magic) {
        match &sh.http {
            Some(h) => h.clone().serve(s, magic, peer_addr).await,
            None => {
                fabperf_http::refuse(
                    &mut s,
                    "503 Service Unavailable",
                    fabperf_http::REASON_HTTP_OFF,
                    "fabperf agent: HTTP is off on this agent; start it with `fabperf server --http` \
                     (docs/http.md)",
                )
                .await;
                sh.log(&format!(
                    "{peer}: an HTTP request, but HTTP is off (fabperf server --http); answered 503"
                ));
            }
        }
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = s
            .write_all(b"fabperf agent: this port speaks the fabperf protocol (and HTTP with --http) only\n")
            .await;
        let _ = s.shutdown().await;
    })
    .await;
    // Drain what the peer already sent so the close is not a reset that
    // destroys our message before it is read.
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 65536 {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
    sh.log(&format!(
        "{peer}: not a fabperf client (first bytes {magic:02x?}); closed"
    ));
}

/// A connection that sent fabperf's magic: a thread runs its handshake
/// (capped as [`Pending`] says) and its test.
fn start_fabperf_connection(
    sh: &Arc<Shared>,
    id: u64,
    stream: TcpStream,
    source: Source,
    magic: [u8; 4],
    accepted: Instant,
) {
    if sh.conns.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
        return;
    }
    // The agent's own backstop: a little after the handshake's own
    // deadline (which gives the better log line) the timer closes it.
    let deadline = later(accepted, sh.limits.io_timeout + Duration::from_millis(250));
    if !sh.pending().admit(id, &stream, source, deadline) {
        return;
    }
    sh.conns.fetch_add(1, Ordering::SeqCst);
    let slot = ConnSlot {
        shared: sh.clone(),
        id,
    };
    let spawned = std::thread::Builder::new()
        .name("fabperf-conn".into())
        .spawn(move || {
            let sh = slot.shared.clone();
            let r = catch_unwind(AssertUnwindSafe(|| {
                handle_connection(&sh, stream, id, magic, accepted)
            }));
            if let Err(p) = r {
                sh.log(&format!(
                    "internal error (a bug) in a connection thread: {}",
                    panic_text(&p)
                ));
            }
            drop(slot);
        });
    if let Err(e) = spawned {
        sh.log(&format!("cannot start a connection thread: {e}"));
    }
}

fn handle_connection(
    sh: &Shared,
    mut stream: TcpStream,
    id: u64,
    magic: [u8; 4],
    accepted: Instant,
) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let t = sh.limits.io_timeout;
    let _ = stream.set_read_timeout(Some(t));
    if magic == DATA_MAGIC {
        let why = match sh.hub.route(stream, t) {
            Routed::ToTest => return,
            Routed::NoCookie if sh.was_closed_by_agent(id) => return,
            Routed::NoCookie => "no cookie arrived",
            Routed::Refused(RefusalReason::OtherAgent) => {
                "its cookie is another agent's: the client's address balances connections \
                 over several agents (a Service with several endpoints); told the client"
            }
            Routed::Refused(RefusalReason::Ended) => {
                "its test no longer waits for it; told the client"
            }
            Routed::Refused(RefusalReason::Full) => {
                "its test already has every connection it asked for; told the client"
            }
            Routed::Refused(RefusalReason::Unknown) => {
                "its cookie is unknown (no agent sharing this token issued it); told the client"
            }
        };
        sh.log(&format!("{peer}: data connection refused: {why}"));
        return;
    }
    let mut rest = [0u8; 4];
    if let Err(e) = stream.read_exact(&mut rest) {
        if !sh.was_closed_by_agent(id) {
            sh.log(&format!("{peer}: truncated preamble ({e}); closed"));
        }
        return;
    }
    let mut ctl = match Control::new(stream, t) {
        Ok(c) => c,
        Err(e) => {
            sh.log(&format!("{peer}: {e}"));
            return;
        }
    };
    // The whole handshake, preamble to start, has the I/O timeout.
    ctl.set_deadline(Some(later(accepted, t)));
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
    let mut started = false;
    if let Err(e) = serve_control(sh, &mut ctl, id, &mut started) {
        if !e.connection_lost {
            ctl.send_error(e.code, &e.message);
        }
        // A handshake the timer closed is counted in its summary line.
        if started || !e.connection_lost || !sh.was_closed_by_agent(id) {
            sh.log(&format!("{peer}: {e}"));
        }
    }
}

/// A client's message that ends its part of the handshake early.
fn client_gave_up(code: ErrorCode, message: String) -> ServeError {
    let what = match code {
        ErrorCode::AuthRequired | ErrorCode::AuthFailed => "authentication failed",
        _ => "the client gave up",
    };
    ServeError {
        code,
        message: format!("{what}: the client says: {message}"),
        connection_lost: true,
    }
}

fn serve_control(
    sh: &Shared,
    ctl: &mut Control,
    id: u64,
    started: &mut bool,
) -> Result<(), ServeError> {
    let peer = ctl.peer();
    let nonce = sh.token.as_ref().map(|_| auth::new_nonce());
    ctl.send(&Msg::Hello {
        fabperf_version: fabperf_results::FABPERF_VERSION.to_string(),
        auth_required: sh.token.is_some(),
        nonce: nonce.clone(),
        tests: sh.names(),
        agent: sh.identity.clone(),
        capacity: Some(sh.capacity),
    })?;
    if let (Some(token), Some(nonce)) = (&sh.token, &nonce) {
        // Nothing but a small Auth frame is read from a peer that has not
        // proven it holds the token.
        ctl.set_max_frame(PRE_AUTH_FRAME);
        match ctl.recv("the client's authentication") {
            Ok(Msg::Auth {
                nonce: client_nonce,
                proof,
            }) => {
                if !auth::verify(token, Side::Client, nonce, &client_nonce, &proof) {
                    return Err(ServeError::new(
                        ErrorCode::AuthFailed,
                        "authentication failed: wrong shared secret (the client's --token-file does not match the agent's)",
                    ));
                }
                ctl.send(&Msg::AuthOk {
                    proof: auth::prove(token, Side::Agent, nonce, &client_nonce),
                })?;
            }
            Ok(Msg::Start { .. }) => {
                return Err(ServeError::new(
                    ErrorCode::AuthRequired,
                    "authentication failed: the client sent no proof; this agent requires a shared secret: pass --token-file with the agent's token",
                ))
            }
            Ok(Msg::Bye) => return Ok(()),
            Ok(other) => {
                return Err(ServeError::new(
                    ErrorCode::BadFrame,
                    format!("expected auth, got {}", other.kind()),
                ))
            }
            Err(ProtoError::Remote { code, message }) => {
                return Err(client_gave_up(code, message))
            }
            Err(e @ ProtoError::FrameTooLarge { .. }) => {
                return Err(ServeError::new(
                    ErrorCode::BadFrame,
                    format!("before authentication: {e}"),
                ))
            }
            Err(e) => return Err(e.into()),
        }
        ctl.set_max_frame(MAX_FRAME);
    } else {
        ctl.set_max_frame(OPEN_START_FRAME);
    }
    let (test, params, group) = match ctl.recv("the client's start request") {
        Ok(Msg::Start {
            test,
            params,
            group,
            ..
        }) => (test, params, group),
        Ok(Msg::Bye) => return Ok(()),
        Ok(other) => {
            return Err(ServeError::new(
                ErrorCode::BadFrame,
                format!("expected start, got {}", other.kind()),
            ))
        }
        // The client refused (an unknown test, or an agent that cannot
        // prove a token).
        Err(ProtoError::Remote { code, message }) => return Err(client_gave_up(code, message)),
        Err(e) => return Err(e.into()),
    };
    // The handshake is over: no deadline, no eviction from here on.
    if !sh.handshake_done(id) {
        return Err(ServeError {
            code: ErrorCode::Timeout,
            message: "the handshake took too long; closed".into(),
            connection_lost: true,
        });
    }
    *started = true;
    ctl.set_deadline(None);
    ctl.set_max_frame(MAX_FRAME);
    let Some(kind) = sh.kinds.iter().find(|k| k.name() == test) else {
        return Err(ServeError::new(
            ErrorCode::UnknownTest,
            format!(
                "this agent does not serve test '{test}'; it serves: {}",
                sh.names().join(", ")
            ),
        ));
    };
    if let Some(g) = &group {
        if !valid_group(g) {
            return Err(ServeError::bad_request(
                "a test group id is 8 to 64 lower-case hex digits",
            ));
        }
    }
    let clock = Arc::new(TestClock::new(&sh.limits, ctl.stream().try_clone().ok()));
    {
        let mut busy = sh.busy();
        admit(&busy, group.as_deref(), sh.capacity.group_tests as usize)
            .map_err(|m| ServeError::new(ErrorCode::Busy, m))?;
        busy.push(BusyInfo {
            id,
            test: test.clone(),
            peer,
            since: Instant::now(),
            clock: clock.clone(),
            group,
        });
    }
    let guard = BusyGuard(&sh.busy, id);
    let t0 = Instant::now();
    ctl.set_stop_flag(clock.stop_flag());
    let mut ctx = ServeCtx {
        ctl,
        limits: sh.limits,
        data: &sh.hub,
        clock: &clock,
    };
    let res = catch_unwind(AssertUnwindSafe(|| kind.serve(&mut ctx, params)));
    // Free before the last frame goes out, so a client that starts its next
    // test as soon as it has read it does not find the agent busy.
    drop(guard);
    if clock.is_stopped() {
        let msg = format!(
            "{test} stopped by the agent at its time limit: {} (agent options --max-duration, --timeout)",
            clock.describe()
        );
        sh.log(&format!("{peer}: {msg}"));
        ctl.send_error(ErrorCode::LimitExceeded, &msg);
        return Ok(());
    }
    match res {
        Ok(Ok(())) => sh.log(&format!(
            "{peer}: {test} done in {:.1} s",
            t0.elapsed().as_secs_f64()
        )),
        Ok(Err(e)) => {
            sh.log(&format!("{peer}: {test} failed: {e}"));
            if !e.connection_lost {
                ctl.send_error(e.code, &format!("{test}: {}", e.message));
            }
        }
        Err(p) => {
            sh.log(&format!(
                "{peer}: {test} failed: internal error (a bug): {}",
                panic_text(&p)
            ));
            ctl.send_error(
                ErrorCode::Internal,
                &format!(
                    "{test}: the agent hit an internal error (a bug); its log has the details"
                ),
            );
        }
    }
    Ok(())
}
