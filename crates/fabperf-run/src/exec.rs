//! Executing a plan: find the agents, expand the cells, run what the store
//! lacks, batch by batch, committing each finished cell.

use crate::cells::{expand, Roster, RosterAgent};
use crate::ctlplane;
use crate::drive::{DriveParams, DriveResult, Go, Ready, DRIVE};
use crate::plan::{self, Kind, Pattern, Plan};
use crate::summary;
use fabperf_proto::{connect_test, ClientConfig, Control, ErrorCode, Msg, ProtoError};
use fabperf_store::{Attempt, CellRow, CellSpec, CellState, Measurement, Role, Store};
use fabperf_tune::{end_tune, open_tune, TuneParams};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar on a terminal, plain lines otherwise.
    Auto,
    /// Plain log lines.
    Plain,
    /// Only warnings and the summary.
    Quiet,
}

/// `fabperf run` options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: PathBuf,
    pub db: PathBuf,
    /// Rerun cells stored as failed.
    pub retry_failed: bool,
    /// Start a new run instead of resuming the plan's last one.
    pub new_run: bool,
    /// Resume this run.
    pub run_id: Option<i64>,
    /// Find the agents and list the cells, run nothing.
    pub dry_run: bool,
    pub progress: ProgressMode,
    /// Overrides the plan's token_file.
    pub token: Option<Vec<u8>>,
    /// How long to wait for another runner's lease on the store before
    /// giving up (zero: refuse at once).
    pub lease_wait: Duration,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunOutcome {
    pub run_id: i64,
    pub cells: usize,
    pub done: usize,
    pub failed: usize,
    pub pending: usize,
    /// Cells run by this invocation.
    pub ran: usize,
    pub wall_s: f64,
    /// Seconds inside tests (from the start signal to the last result of
    /// each batch), summed over batches.
    pub test_s: f64,
    /// Seconds inside the tests' own intervals (warm-up + measured
    /// interval, the longest of each batch), summed over batches.
    pub measured_s: f64,
    pub interrupted: bool,
    /// Where the wall time went.
    pub phases: ctlplane::Phases,
    /// The process's peak threads and open files (as noted where they
    /// peak) and its resident memory's high-water mark.
    pub usage: ctlplane::Usage,
}

/// Errors that stop a run before or between cells.
#[derive(Debug)]
pub enum RunError {
    /// The plan is invalid (exit 2).
    Plan(String),
    /// Anything else (exit 1): store, agents, ...
    Other(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Plan(s) | RunError::Other(s) => f.write_str(s),
        }
    }
}

impl From<fabperf_store::StoreError> for RunError {
    fn from(e: fabperf_store::StoreError) -> Self {
        RunError::Other(e.to_string())
    }
}

/// Set by SIGINT/SIGTERM.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Route SIGINT and SIGTERM to the runner's flag (a second one kills the
/// process at once, as usual).
pub fn install_signal_handlers() -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        // A second signal while the flag is set terminates with 130.
        signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone())
            .map_err(|e| format!("installing a signal handler: {e}"))?;
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| format!("installing a signal handler: {e}"))?;
    }
    // Mirror the Arc flag into the static one from a watcher thread.
    std::thread::Builder::new()
        .name("fabperf-signals".into())
        .spawn(move || loop {
            if flag.load(Ordering::SeqCst) {
                INTERRUPTED.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        })
        .map_err(|e| format!("starting the signal watcher: {e}"))?;
    Ok(())
}

/// Ask the runner to stop as SIGINT would (tests).
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

// ------------------------------------------------------------ progress

/// Text that came from agents or a store, made safe for a terminal: control
/// and bidirectional characters (escape sequences, newlines) are shown
/// escaped (fabperf-results' one escaping rule).
pub fn printable(s: &str) -> String {
    fabperf_results::escape::terminal(s)
}

/// As [`printable`], keeping line breaks (a rendered block whose pieces of
/// foreign text were escaped one by one).
pub fn printable_block(s: &str) -> String {
    fabperf_results::escape::terminal_block(s)
}

struct Progress {
    mode: ProgressMode,
    bar: Option<indicatif::ProgressBar>,
    total: usize,
    done: usize,
}

impl Progress {
    fn new(mode: ProgressMode, total: usize, done: usize) -> Progress {
        use std::io::IsTerminal;
        let bar = if mode == ProgressMode::Auto && std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_position(done as u64);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} cells, ETA {msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            Some(b)
        } else {
            None
        };
        Progress {
            mode,
            bar,
            total,
            done,
        }
    }

    fn line(&self, s: &str) {
        let s = printable(s);
        match &self.bar {
            Some(b) => b.println(s),
            None if self.mode != ProgressMode::Quiet => eprintln!("{s}"),
            None => {}
        }
    }

    fn warn(&self, s: &str) {
        let s = printable(s);
        match &self.bar {
            Some(b) => b.println(format!("warning: {s}")),
            None => eprintln!("fabperf run: warning: {s}"),
        }
    }

    fn running(&self, what: &str, eta: Option<f64>) {
        let what = printable(what);
        let eta = eta.map(fmt_secs).unwrap_or_else(|| "?".into());
        match &self.bar {
            Some(b) => b.set_message(format!("{eta} | {what}")),
            None if self.mode == ProgressMode::Plain || self.mode == ProgressMode::Auto => {
                eprintln!(
                    "fabperf run: [{}/{}] running {what} (ETA {eta})",
                    self.done, self.total
                )
            }
            None => {}
        }
    }

    fn finished(&mut self, n: usize) {
        self.done += n;
        if let Some(b) = &self.bar {
            b.set_position(self.done as u64);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

// ----------------------------------------------------------- discovery

/// What an agent's hello says, as JSON for the store.
fn probe(addr: SocketAddr, cfg: &ClientConfig) -> Result<Value, String> {
    let h = fabperf_proto::query_agent(addr, cfg).map_err(|e| e.to_string())?;
    Ok(json!({
        "fabperf_version": h.fabperf_version,
        "auth_required": h.auth_required,
        "tests": h.tests,
        "agent": h.agent,
        "capacity": h.capacity,
    }))
}

fn resolve_all(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let mut v: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving {host}: {}", plan::os_text(&e)))?
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

fn resolve_one(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {}", plan::os_text(&e)))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

/// The node name an agent gives in its hello, when it is a safe name.
fn hello_node(hello: &Value) -> Option<String> {
    let n = hello.get("agent")?.get("node")?.as_str()?;
    plan::is_name(n).then(|| n.to_string())
}

/// Most agents asked for their hello at once during discovery.
pub const MAX_PROBE_THREADS: usize = 32;

/// Find every agent of the plan and ask each for its hello.
pub fn discover(
    plan: &Plan,
    client: &ClientConfig,
    warn: &mut dyn FnMut(String),
) -> Result<Roster, String> {
    struct Want {
        name: Option<String>,
        path: String,
        addr: Result<SocketAddr, String>,
        label: String,
    }
    let mut wants = Vec::new();
    for a in &plan.agents {
        match &a.source {
            plan::AgentSource::Static { name, addr } => wants.push(Want {
                name: Some(name.clone()),
                path: a.path.clone(),
                addr: resolve_one(addr),
                label: addr.clone(),
            }),
            plan::AgentSource::Dns { name, port } => match resolve_all(name, *port) {
                Ok(addrs) if addrs.is_empty() => {
                    warn(format!("{name} (path {}) resolves to no address", a.path))
                }
                Ok(addrs) => {
                    for addr in addrs {
                        wants.push(Want {
                            name: None,
                            path: a.path.clone(),
                            addr: Ok(addr),
                            label: name.clone(),
                        })
                    }
                }
                Err(e) => warn(format!("{e} (path {}); its agents are left out", a.path)),
            },
        }
    }
    // Probe concurrently, at most MAX_PROBE_THREADS at once (a name may
    // resolve to hundreds of addresses): dead agents cost one timeout per
    // MAX_PROBE_THREADS of them, not one each.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<Value, String>>>> =
        wants.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..wants.len().min(MAX_PROBE_THREADS) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(w) = wants.get(i) else { break };
                let r = w.addr.clone().and_then(|a| probe(a, client));
                *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    let hellos: Vec<Result<Value, String>> = slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| Err("probe thread panicked".into()))
        })
        .collect();
    let mut roster = Roster::default();
    for (w, hello) in wants.into_iter().zip(hellos) {
        let (hello, reachable) = match hello {
            Ok(h) => (h, true),
            Err(e) => {
                warn(format!(
                    "agent {} ({}, path {}) is unreachable: {e}; its cells will fail",
                    w.name.as_deref().unwrap_or(&w.label),
                    w.addr
                        .as_ref()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|e| e.clone()),
                    w.path
                ));
                (json!({"unreachable": e}), false)
            }
        };
        if reachable
            && hello
                .get("tests")
                .and_then(Value::as_array)
                .is_some_and(|t| !t.iter().any(|x| x == DRIVE))
        {
            warn(format!(
                "agent at {} does not serve `{DRIVE}` (an older fabperf?); its cells will fail",
                w.label
            ));
        }
        let Ok(addr) = w.addr else {
            // A static agent whose name does not resolve: keep it so its
            // cells are planned (and fail), with an unspecified address.
            let name = w.name.expect("only static agents resolve one name");
            roster.insert(RosterAgent {
                name,
                path: w.path,
                addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                test_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                hello,
                reachable: false,
            })?;
            continue;
        };
        let name = w
            .name
            .or_else(|| hello_node(&hello))
            .unwrap_or_else(|| addr.ip().to_string());
        // An agent may advertise another address for tests (its IPoIB or
        // RoCE address behind a Service on the primary network).
        let test_addr = hello
            .get("agent")
            .and_then(|a| a.get("addr"))
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<std::net::IpAddr>().ok())
            .map_or(addr, |ip| SocketAddr::new(ip, addr.port()));
        roster.insert(RosterAgent {
            name,
            path: w.path,
            addr,
            test_addr,
            hello,
            reachable,
        })?;
    }
    Ok(roster)
}

// ------------------------------------------------------------ execution

/// Why one attempt at a cell failed.
#[derive(Debug, Clone)]
struct CellError {
    msg: String,
    /// Worth another attempt (busy agent, timeout, connection refused).
    transient: bool,
}

fn classify(e: &ProtoError) -> bool {
    match e {
        ProtoError::Remote { code, .. } => matches!(
            code,
            ErrorCode::Busy | ErrorCode::Timeout | ErrorCode::Internal
        ),
        ProtoError::Timeout { .. } | ProtoError::Closed { .. } | ProtoError::Io { .. } => true,
        _ => false,
    }
}

/// Open a drive session. An agent still finishing its previous test (its
/// last frames, a peer's bye) answers busy for a moment: ask again, with a
/// growing pause, within the control timeout.
fn open_session(
    addr: SocketAddr,
    cfg: &ClientConfig,
    params: Value,
) -> Result<Control, ProtoError> {
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match connect_test(addr, cfg, DRIVE, params.clone()) {
            Ok((ctl, _)) => return Ok(ctl),
            Err(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }) if t0.elapsed() + pause < cfg.timeout && !interrupted() => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Flows that set up toward one receiver at a time (below the agent's
/// cap on handshakes in progress).
pub const SETUP_PER_RECEIVER: usize = 32;
/// The least time from the first `go` to the common start; more with many
/// flows (2 ms each), so every `go` is out before the start. Each `go`
/// carries the time left to the start when it is sent, so the margin only
/// has to cover sending them (tens of microseconds each); what it adds to
/// every round is time outside the measured intervals.
pub const START_MARGIN: Duration = Duration::from_millis(50);
/// A cell whose flows' measured intervals overlap for less than this
/// share of the longest one has no common interval to aggregate over.
pub const MIN_OVERLAP_PCT: f64 = 90.0;

/// How long a round's flows that are not ready yet may keep the ready ones
/// waiting for their `go`, after the last one became ready: half the
/// plan's timeout, within 1 to 5 s. The ready flows' agents (and their
/// targets) wait for the start no longer than their own timeout (2 s at
/// least, 10 s by default), so one node whose set-up hangs — a lossy link,
/// an overloaded agent — must not make every other flow of its round time
/// out with it.
pub fn straggle_limit(timeout: Duration) -> Duration {
    (timeout / 2).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// A round's set-up in progress: the flows waiting for their `ready`, and
/// when the last one became ready. A watcher calls off (closes) the flows
/// still waiting [`straggle_limit`] after that.
struct SetupWatch {
    limit: Duration,
    state: std::sync::Mutex<WatchState>,
}

#[derive(Default)]
struct WatchState {
    last_ready: Option<Instant>,
    waiting: BTreeMap<(usize, usize), TcpStream>,
    called_off: BTreeSet<(usize, usize)>,
    done: bool,
}

impl SetupWatch {
    fn new(limit: Duration) -> SetupWatch {
        SetupWatch {
            limit,
            state: std::sync::Mutex::new(WatchState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Flow `id` waits for its `ready` on `stream`.
    fn waiting(&self, id: (usize, usize), stream: &TcpStream) {
        if let Ok(s) = stream.try_clone() {
            self.lock().waiting.insert(id, s);
        }
    }

    /// Flow `id` stopped waiting (`ready`: it is).
    fn settled(&self, id: (usize, usize), ready: bool) {
        let mut st = self.lock();
        st.waiting.remove(&id);
        if ready {
            st.last_ready = Some(Instant::now());
        }
    }

    fn was_called_off(&self, id: (usize, usize)) -> bool {
        self.lock().called_off.contains(&id)
    }

    /// Until the set-up is over: close the flows still waiting `limit`
    /// after the last ready one.
    fn watch(&self) {
        loop {
            {
                let mut st = self.lock();
                if st.done {
                    return;
                }
                if st
                    .last_ready
                    .is_some_and(|t| t.elapsed() > self.limit && !st.waiting.is_empty())
                {
                    let waiting = std::mem::take(&mut st.waiting);
                    for (id, s) in waiting {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                        st.called_off.insert(id);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn finish(&self) {
        self.lock().done = true;
    }
}

/// A counting gate: at most `max` holders at once.
struct Gate {
    held: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
    max: usize,
}

struct GatePermit<'a>(&'a Gate);

impl Gate {
    fn new(max: usize) -> Gate {
        Gate {
            held: std::sync::Mutex::new(0),
            freed: std::sync::Condvar::new(),
            max: max.max(1),
        }
    }
    fn enter(&self) -> GatePermit<'_> {
        let mut n = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= self.max {
            n = self.freed.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        GatePermit(self)
    }
}

impl Drop for GatePermit<'_> {
    fn drop(&mut self) {
        let mut n = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        self.0.freed.notify_one();
    }
}

/// One open drive session.
struct Session {
    cell: usize,
    flow: usize,
    ctl: Control,
}

/// A cell's flows' results (flow index, result), or why it failed.
type CellResult = Result<Vec<(usize, DriveResult)>, CellError>;

/// Where a flow's drive request goes, what it says, and its test group.
type FlowPlan = (
    usize,
    usize,
    Result<(SocketAddr, Value, Option<String>), CellError>,
);

struct FlowResult {
    cell: usize,
    flow: usize,
    result: Result<DriveResult, CellError>,
}

/// A one-line description of a cell.
pub fn cell_label(c: &CellSpec) -> String {
    let dims: Vec<String> = c
        .dims
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| match (k.as_str(), v.as_u64()) {
                    ("size", Some(b)) => format!("size={}", human_size(b)),
                    (_, _) => format!(
                        "{k}={}",
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string())
                    ),
                })
                .collect()
        })
        .unwrap_or_default();
    let who = match c.pattern.as_str() {
        "incast" => format!(
            "incast {} senders -> {}",
            c.flows.len(),
            c.flows.first().map(|f| f.1.as_str()).unwrap_or("?")
        ),
        "bisection" => format!("bisection {} flows", c.flows.len()),
        _ => c
            .flows
            .first()
            .map(|(a, b)| format!("{a} -> {b}"))
            .unwrap_or_default(),
    };
    let retest = if c.pattern == "retest" {
        " (re-test)"
    } else {
        ""
    };
    format!(
        "{} {} {who}{}{}{retest} #{}",
        c.kind,
        c.path,
        if dims.is_empty() { "" } else { " " },
        dims.join(" "),
        c.repeat + 1
    )
}

fn human_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

/// The one-line result of a cell for the log.
fn headline(ms: &[Measurement]) -> String {
    // Path MTU: one record per method.
    let mtus: Vec<String> = ms
        .iter()
        .filter(|m| m.record.test == "mtu")
        .filter_map(|m| Some(format!("{} {}", m.record.op.as_deref()?, m.record.mtu?)))
        .collect();
    if !mtus.is_empty() {
        return format!("MTU {}", mtus.join(", "));
    }
    // Concurrent flows: one aggregate per direction.
    let aggs: Vec<String> = ms
        .iter()
        .filter(|m| m.role == Role::Aggregate)
        .filter_map(|m| {
            let bw = m.record.bw_gbps?;
            Some(match &m.record.direction {
                Some(d) => format!("{d} {bw:.2} Gbit/s"),
                None => format!("{bw:.2} Gbit/s"),
            })
        })
        .collect();
    if aggs.len() > 1 {
        return aggs.join(", ");
    }
    let main = ms
        .iter()
        .find(|m| m.role == Role::Aggregate)
        .or_else(|| ms.iter().find(|m| m.role == Role::Total));
    match main {
        Some(m) => {
            let r = &m.record;
            match (&r.lat_us, r.bw_gbps) {
                (Some(l), _) => format!("p50 {:.2} us, p99 {:.2} us", l.p50, l.p99),
                (None, Some(b)) => format!("{b:.2} Gbit/s"),
                _ => "no figure".into(),
            }
        }
        None => "no records".into(),
    }
}

/// Turn a cell's flow results into measurements, and for concurrent flows
/// one aggregate per direction over the flows' common interval.
///
/// Each flow counts once per direction: a bidirectional flow gives its
/// forward and its reverse record (its `bidir` total, their sum, is not
/// stored for a multi-flow cell). The aggregate of a direction is the bytes
/// every flow received inside the common interval — from the latest start
/// to the earliest end of the flows' measured intervals, cut with each
/// flow's progress counts — over that interval. A cell whose flows overlap
/// for less than [`MIN_OVERLAP_PCT`] of the longest interval, or a flow that
/// measured no interval, fails: its flows did not run together.
fn measurements_of(
    cell: &CellSpec,
    flows: &[(usize, DriveResult)],
) -> Result<Vec<Measurement>, CellError> {
    let multi = cell.flows.len() > 1;
    let mut out = Vec::new();
    for (fi, res) in flows {
        let (src, dst) = &cell.flows[*fi];
        for r in &res.records {
            let role = if r.stream.is_some() {
                Role::Stream
            } else if multi {
                if r.direction.as_deref() == Some("bidir") {
                    continue;
                }
                Role::Flow
            } else {
                Role::Total
            };
            out.push(Measurement {
                role,
                src: Some(src.clone()),
                dst: Some(dst.clone()),
                record: r.clone(),
            });
        }
    }
    if !multi {
        return Ok(out);
    }
    // One aggregate per direction (and message size, for an engine that
    // ran several).
    let mut keys: Vec<(Option<String>, u64)> = Vec::new();
    for m in out.iter().filter(|m| m.role == Role::Flow) {
        let k = (m.record.direction.clone(), m.record.size);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut aggs = Vec::new();
    for (d, size) in keys {
        let of_dir: Vec<&Measurement> = out
            .iter()
            .filter(|m| m.role == Role::Flow && m.record.direction == d && m.record.size == size)
            .collect();
        aggs.push(aggregate(cell, &of_dir, d.as_deref())?);
    }
    out.extend(aggs);
    Ok(out)
}

/// What the runner stores for a cell whose flows returned `flows` (flow
/// index, the driving agent's result), or why the cell fails. The records
/// come from driving agents: hostile values give an error, never a panic
/// (fuzzed: `fuzz/fuzz_targets/flow_intervals.rs`).
pub fn cell_measurements(
    cell: &CellSpec,
    flows: &[(usize, DriveResult)],
) -> Result<Vec<Measurement>, String> {
    if flows.iter().any(|(fi, _)| *fi >= cell.flows.len()) {
        return Err("a result for a flow the cell does not have".into());
    }
    measurements_of(cell, flows).map_err(|e| e.msg)
}

/// The aggregate of one direction's flows over their common interval.
fn aggregate(
    cell: &CellSpec,
    flows: &[&Measurement],
    direction: Option<&str>,
) -> Result<Measurement, CellError> {
    let fail = |msg: String| CellError {
        msg,
        transient: true,
    };
    let dir = direction.unwrap_or("-");
    let who = |m: &Measurement| {
        format!(
            "{} -> {}",
            m.src.as_deref().unwrap_or("?"),
            m.dst.as_deref().unwrap_or("?")
        )
    };
    if flows.len() != cell.flows.len() {
        return Err(fail(format!(
            "{} of the cell's {} flows reported a {dir} figure",
            flows.len(),
            cell.flows.len()
        )));
    }
    let mut intervals = Vec::new();
    for m in flows {
        match (&m.record.interval, m.record.bw_gbps) {
            (Some(i), Some(_)) if i.check().is_empty() && i.len_s() > 0.0 => intervals.push(i),
            _ => {
                return Err(fail(format!(
                    "flow {} ({dir}) measured no interval, so the cell's flows have no common one",
                    who(m)
                )))
            }
        }
    }
    let (cs, ce, overlap) = fabperf_results::interval::common_interval(&intervals)
        .expect("a multi-flow cell has flows");
    let starts: Option<Vec<f64>> = intervals.iter().map(|i| i.sent_from_s).collect();
    let skew = starts.as_ref().map(|v| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        hi - lo
    });
    let skew_text = skew.map_or(String::new(), |s| {
        format!("; their senders started {:.1} ms apart", s * 1e3)
    });
    if overlap < MIN_OVERLAP_PCT {
        return Err(fail(format!(
            "the {} flows' measured intervals ({dir}) overlap for {overlap:.0} % of the longest, below {MIN_OVERLAP_PCT:.0} %{skew_text}: they did not run together, so no aggregate is given",
            flows.len()
        )));
    }
    // Each flow's bytes inside the common interval: from its progress
    // counts, or (a flow without them) its mean rate over the interval.
    let len = ce - cs;
    let mut bytes = 0f64;
    let mut estimated = 0;
    for (m, i) in flows.iter().zip(&intervals) {
        bytes += match &i.progress {
            Some(p) => p.bytes_between(cs, ce),
            None => {
                estimated += 1;
                m.record.bytes as f64 * len / i.len_s()
            }
        };
    }
    let first = &flows[0].record;
    let mut agg =
        fabperf_results::Record::new(&first.test, first.transport, first.size, flows.len() as u32);
    agg.op = first.op.clone();
    agg.direction = first.direction.clone();
    agg.set_throughput(bytes.round() as u64, len, None);
    agg.started_at = first.started_at.clone();
    agg.interval = Some(fabperf_results::Interval {
        start_s: cs,
        end_s: ce,
        sent_from_s: starts
            .as_ref()
            .map(|v| v.iter().copied().fold(f64::INFINITY, f64::min)),
        progress: None,
    });
    agg.flows = Some(fabperf_results::FlowSet {
        count: flows.len() as u32,
        overlap_pct: overlap.min(100.0),
        start_skew_s: skew,
    });
    agg.warn(fabperf_results::Warning::Aggregate {
        flows: flows.len() as u32,
        secs: len,
    });
    if estimated > 0 {
        agg.warn(fabperf_results::Warning::AggregateEstimated { flows: estimated });
    }
    let (src, dst) = match cell.pattern.as_str() {
        "incast" => (None, cell.flows.first().map(|f| f.1.clone())),
        _ => (None, None),
    };
    Ok(Measurement {
        role: Role::Aggregate,
        src,
        dst,
        record: agg,
    })
}

/// The most concurrent flows of one batch, and the most tune sessions
/// of one batch (one per agent of each cell with an environment).
fn largest_batch(cells: &[CellSpec]) -> (usize, usize) {
    let mut per: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for c in cells {
        let e = per.entry(c.batch).or_default();
        e.0 += c.flows.len();
        if c.dims.get("profile").is_some() || c.dims.get("policies").is_some() {
            let agents: BTreeSet<&String> = c.flows.iter().flat_map(|(s, d)| [s, d]).collect();
            e.1 += agents.len();
        }
    }
    per.values()
        .fold((0, 0), |(f, t), &(bf, bt)| (f.max(bf), t.max(bt)))
}

/// Where one batch's time went (seconds).
#[derive(Debug, Clone, Copy, Default)]
struct BatchTiming {
    /// Policy command, tuning, sessions opened and flows set up, to the
    /// first `go`.
    setup_s: f64,
    /// The first `go` to the common start instant.
    start_s: f64,
    /// The start instant to the last result.
    tests_s: f64,
    /// Restoring the cells' environments.
    restore_s: f64,
}

/// The time from the first `go` to the common start of `flows` flows: at
/// least [`START_MARGIN`], and 2 ms more per flow, so every `go` is out
/// before it.
fn start_margin(flows: usize) -> Duration {
    START_MARGIN.max(Duration::from_millis(2) * flows as u32)
}

/// Read every started session's results, each within its own wait from
/// now (`waits`, one per session), on a bounded pool of threads; on SIGINT
/// a watcher closes the sessions. A worker that reaches a session after
/// its deadline still takes what has already arrived.
fn collect_results(sessions: Vec<Session>, waits: &[Duration]) -> Vec<FlowResult> {
    let t0 = Instant::now();
    let streams: Vec<TcpStream> = sessions
        .iter()
        .filter_map(|s| s.ctl.stream().try_clone().ok())
        .collect();
    let finished = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let fin = &finished;
        sc.spawn(move || {
            while !fin.load(Ordering::SeqCst) {
                if interrupted() {
                    for s in &streams {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let items: Vec<(Session, Duration)> =
            sessions.into_iter().zip(waits.iter().copied()).collect();
        let out = ctlplane::pooled(
            items,
            ctlplane::FLOW_WORKERS,
            |(mut s, w)| {
                s.ctl.set_deadline(Some(t0 + w));
                let r = s
                    .ctl
                    .recv_test_within::<DriveResult>(w, "the drive's results")
                    .map_err(|e| CellError {
                        transient: classify(&e),
                        msg: e.to_string(),
                    });
                let _ = s.ctl.send(&Msg::Bye);
                FlowResult {
                    cell: s.cell,
                    flow: s.flow,
                    result: r,
                }
            },
            || FlowResult {
                cell: usize::MAX,
                flow: 0,
                result: Err(CellError {
                    msg: "flow thread panicked".into(),
                    transient: false,
                }),
            },
        );
        finished.store(true, Ordering::SeqCst);
        out
    })
}

struct Exec<'a> {
    plan: &'a Plan,
    roster: &'a Roster,
    cfg: ClientConfig,
    store: &'a mut Store,
    run_id: i64,
    progress: Progress,
    ran: usize,
    test_s: f64,
    measured_s: f64,
    /// Where the wall time went.
    phases: ctlplane::Phases,
    /// Observed wall / expected seconds, for the ETA.
    seen_wall: f64,
    seen_expected: f64,
    /// Tuning warnings already in the log (each is logged once per run).
    logged: BTreeSet<String>,
    /// The policy count the `[policy] command` last set (`None`: unknown,
    /// e.g. after a failure).
    policy_now: Option<u32>,
    /// The policy command ran in this invocation.
    policy_touched: bool,
}

/// Run the plan's policy command with FABPERF_POLICIES=n, bounded by its
/// timeout (killed after it). Err: why, with the end of its output.
pub fn run_policy_command(
    argv: &[String],
    timeout: Duration,
    n: u32,
    plan: &str,
    cell: &str,
) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("FABPERF_POLICIES", n.to_string())
        .env("FABPERF_PLAN", plan)
        .env("FABPERF_CELL", cell)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run the policy command {:?}: {}",
                argv[0],
                plan::os_text(&e)
            )
        })?;
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the policy command did not finish within {} s and was killed",
                    timeout.as_secs_f64()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for the policy command: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for the policy command: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    Err(format!(
        "the policy command for {n} policies failed ({}): {}",
        out.status,
        printable(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
    ))
}

/// A batch's tune sessions, the cells that could not be tuned, and each
/// cell's warnings.
type TunedBatch = (
    Vec<TuneSession>,
    BTreeMap<usize, CellError>,
    BTreeMap<usize, Vec<String>>,
);

/// A tune session as opened: cell, agent, the session and its report.
type TuneOpened = (
    usize,
    String,
    Result<(Control, fabperf_tune::ApplyReport), ProtoError>,
);

/// One agent holding a cell's environment.
struct TuneSession {
    cell: usize,
    agent: String,
    ctl: Control,
}

impl Exec<'_> {
    fn agent(&self, path: &str, name: &str) -> Option<&RosterAgent> {
        self.roster.get(path, name)
    }

    /// Where a flow of cell `c` from `s` to `d` goes, with what parameters:
    /// on its rails for a rail cell ([`crate::rails::route`]).
    fn rail_route(
        &self,
        c: &CellSpec,
        s: &RosterAgent,
        d: &RosterAgent,
    ) -> Result<(SocketAddr, Value), CellError> {
        let t = self.plan.tests.iter().find(|t| t.name == c.test);
        match t.and_then(|t| crate::rails::route(t, c, s, d)) {
            Some(Ok(r)) => Ok((r.target, r.params)),
            Some(Err(msg)) => Err(CellError {
                msg,
                transient: false,
            }),
            None => Ok((d.test_addr, c.params.clone())),
        }
    }

    fn expected(&self, c: &CellSpec) -> f64 {
        Kind::parse(&c.kind)
            .map(|k| crate::drive::inner_secs(k, &c.params))
            .unwrap_or(0.0)
    }

    fn eta(&self, remaining_batches: &[f64]) -> Option<f64> {
        let ratio = if self.seen_expected > 0.0 {
            self.seen_wall / self.seen_expected
        } else {
            1.1
        };
        Some(remaining_batches.iter().sum::<f64>() * ratio)
    }

    /// Log a warning once per run.
    fn warn_once(&mut self, w: &str) {
        if self.logged.insert(w.to_string()) {
            self.progress.warn(w);
        }
    }

    /// The tune request for a cell with an environment (a profile, a
    /// policy count), or `None`.
    fn tune_params(&self, c: &CellSpec, agent: &RosterAgent) -> Option<TuneParams> {
        let profile = c
            .dims
            .get("profile")
            .and_then(Value::as_str)
            .and_then(|n| self.plan.profiles.get(n))
            .cloned();
        // With a policy command the runner sets the count, not the agents.
        let by_agents = self.plan.policy_target == crate::plan::PolicyTarget::Agents;
        let policies = c
            .dims
            .get("policies")
            .and_then(Value::as_u64)
            .filter(|_| by_agents)
            .map(|n| fabperf_tune::PolicySpec {
                rules: n as u32,
                conntrack: c
                    .dims
                    .get("policy_conntrack")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            });
        if profile.is_none() && policies.is_none() {
            return None;
        }
        Some(TuneParams {
            profile,
            policies,
            addr: Some(agent.test_addr.ip()),
            hold_s: self.expected(c) + 3.0 * self.plan.timeout.as_secs_f64() + 30.0,
        })
    }

    /// Every agent of every cell with an environment applies it; returns
    /// the sessions that hold it, the cells that could not get it, and the
    /// warnings of each cell (settings not applied, outside entries).
    fn tune_batch(&mut self, cells: &[CellSpec]) -> TunedBatch {
        let mut asks: Vec<(usize, String, SocketAddr, TuneParams, ClientConfig)> = Vec::new();
        let mut failed: BTreeMap<usize, CellError> = BTreeMap::new();
        for (ci, c) in cells.iter().enumerate() {
            let mut names: Vec<&String> = c.flows.iter().flat_map(|(a, b)| [a, b]).collect();
            names.sort();
            names.dedup();
            for n in names {
                let Some(a) = self.agent(&c.path, n) else {
                    continue;
                };
                let Some(p) = self.tune_params(c, a) else {
                    continue;
                };
                if a.addr.port() == 0 {
                    continue;
                }
                let mut cfg = self.cfg.clone();
                cfg.group = Some(c.cell_id.clone());
                asks.push((ci, n.clone(), a.addr, p, cfg));
            }
        }
        let opened: Vec<Option<TuneOpened>> = ctlplane::pooled(
            asks,
            ctlplane::FLOW_WORKERS,
            |(ci, name, addr, p, cfg)| Some((ci, name, open_tune(addr, &cfg, &p))),
            || None,
        );
        let opened = opened.into_iter().flatten();
        let mut sessions = Vec::new();
        let mut warnings: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (ci, agent, r) in opened {
            match r {
                Ok((ctl, report)) => {
                    let w = warnings.entry(ci).or_default();
                    for n in &report.notes {
                        w.push(format!("{} on {agent}: {n}", report.what));
                    }
                    w.extend(report.warnings(&agent));
                    sessions.push(TuneSession {
                        cell: ci,
                        agent,
                        ctl,
                    });
                }
                Err(e) => {
                    failed.entry(ci).or_insert(CellError {
                        transient: classify(&e),
                        msg: format!("tuning {agent} for the cell: {e}"),
                    });
                }
            }
        }
        for ws in warnings.values() {
            for w in ws {
                self.warn_once(w);
            }
        }
        (sessions, failed, warnings)
    }

    /// End the cells' environments: every agent restores and says what it
    /// put back. Returns warnings per cell for restores that failed.
    fn untune(&mut self, sessions: Vec<TuneSession>) -> BTreeMap<usize, Vec<String>> {
        let within = self.plan.timeout + Duration::from_secs(30);
        let ended: Vec<(
            usize,
            String,
            Result<fabperf_tune::RestoreReport, ProtoError>,
        )> = ctlplane::pooled(
            sessions,
            ctlplane::FLOW_WORKERS,
            |t| Some((t.cell, t.agent, end_tune(t.ctl, within))),
            || None,
        )
        .into_iter()
        .flatten()
        .collect();
        let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (ci, agent, r) in ended {
            let w = match r {
                Ok(r) if r.ok() => continue,
                Ok(r) => format!("restore on {agent} after the cell: {}", r.summary()),
                Err(e) => format!(
                    "restore on {agent} after the cell: no report ({e}); the agent restores when the session ends, check its log"
                ),
            };
            self.progress.warn(&w);
            out.entry(ci).or_default().push(w);
        }
        out
    }

    /// With `[policy] target = "command"`: set the batch's policy count
    /// (when it differs from what is set).
    fn policy_step(&mut self, cells: &[CellSpec]) -> Result<(), CellError> {
        let crate::plan::PolicyTarget::Command { argv, timeout } = &self.plan.policy_target else {
            return Ok(());
        };
        let Some(n) = cells
            .first()
            .and_then(|c| c.dims.get("policies"))
            .and_then(Value::as_u64)
        else {
            return Ok(());
        };
        let n = n as u32;
        if self.policy_now == Some(n) {
            return Ok(());
        }
        self.progress
            .line(&format!("fabperf run: policy command: {n} policies"));
        // Unknown until it succeeds: a failed command may have set part.
        self.policy_now = None;
        self.policy_touched = true;
        run_policy_command(argv, *timeout, n, &self.plan.name, &cells[0].cell_id).map_err(
            |msg| CellError {
                msg,
                transient: false,
            },
        )?;
        self.policy_now = Some(n);
        Ok(())
    }

    /// With `[policy] target = "command"`: back to 0 policies at the end.
    fn policy_reset(&mut self) {
        if let crate::plan::PolicyTarget::Command { argv, timeout } = &self.plan.policy_target {
            if self.policy_touched && self.policy_now != Some(0) {
                if let Err(e) = run_policy_command(argv, *timeout, 0, &self.plan.name, "end") {
                    self.progress
                        .warn(&format!("setting 0 policies at the end of the run: {e}"));
                }
                self.policy_now = Some(0);
            }
        }
    }

    fn run_batch(&mut self, cells: &[CellSpec]) -> (Vec<CellResult>, f64, BatchTiming) {
        let t_setup = Instant::now();
        if let Err(e) = self.policy_step(cells) {
            let timing = BatchTiming {
                setup_s: t_setup.elapsed().as_secs_f64(),
                ..BatchTiming::default()
            };
            return (
                (0..cells.len()).map(|_| Err(e.clone())).collect(),
                0.0,
                timing,
            );
        }
        // Cells with an environment: their agents apply it first, and hold
        // it (one test group per cell) until the flows are done.
        let (tunes, tune_failed, mut env_warnings) = self.tune_batch(cells);
        let tuned: BTreeSet<usize> = cells
            .iter()
            .enumerate()
            .filter(|(_, c)| c.dims.get("profile").is_some() || c.dims.get("policies").is_some())
            .map(|(i, _)| i)
            .collect();
        let (mut per_cell, test_s, mut timing) =
            self.run_flows(cells, &tuned, tune_failed, t_setup);
        let t_restore = Instant::now();
        for (ci, ws) in self.untune(tunes) {
            env_warnings.entry(ci).or_default().extend(ws);
        }
        timing.restore_s = t_restore.elapsed().as_secs_f64();
        for (ci, ws) in env_warnings {
            if let Some(Ok(flows)) = per_cell.get_mut(ci) {
                for (_, d) in flows.iter_mut() {
                    for r in d.records.iter_mut() {
                        r.warnings.extend(
                            ws.iter().map(|t| {
                                fabperf_results::Warning::Tuning { text: t.clone() }.note()
                            }),
                        );
                    }
                }
            }
        }
        (per_cell, test_s, timing)
    }

    /// Open the drive sessions of a batch, start them together, collect.
    fn run_flows(
        &mut self,
        cells: &[CellSpec],
        tuned: &BTreeSet<usize>,
        mut failed: BTreeMap<usize, CellError>,
        t_setup: Instant,
    ) -> (Vec<CellResult>, f64, BatchTiming) {
        let nflows: usize = cells.iter().map(|c| c.flows.len()).sum();
        let sync = nflows > 1;
        // Rail cells: a node serves its rails at once, in one group.
        let rails_group = crate::rails::batch_group(cells);
        // What each flow needs.
        let mut plans: Vec<FlowPlan> = Vec::new();
        // A target that was unreachable when the run began is asked again
        // by the runner itself (once per batch): a driving agent answers a
        // target that does not prove itself only after its full timeout.
        let mut still_down: BTreeMap<SocketAddr, Option<(String, bool)>> = BTreeMap::new();
        for (ci, c) in cells.iter().enumerate() {
            // A cell whose environment could not be applied runs no flow.
            if failed.contains_key(&ci) {
                continue;
            }
            for (fi, (src, dst)) in c.flows.iter().enumerate() {
                let p = (|| {
                    let s = self.agent(&c.path, src).ok_or_else(|| CellError {
                        msg: format!("no agent {src:?} on path {:?}", c.path),
                        transient: false,
                    })?;
                    let d = self.agent(&c.path, dst).ok_or_else(|| CellError {
                        msg: format!("no agent {dst:?} on path {:?}", c.path),
                        transient: false,
                    })?;
                    if s.addr.port() == 0 || d.addr.port() == 0 {
                        let bad = if s.addr.port() == 0 { s } else { d };
                        return Err(CellError {
                            msg: format!(
                                "agent {} has no address ({})",
                                bad.name,
                                bad.hello
                                    .get("unreachable")
                                    .and_then(Value::as_str)
                                    .unwrap_or("not resolved")
                            ),
                            transient: true,
                        });
                    }
                    if !d.reachable {
                        let down = still_down.entry(d.test_addr).or_insert_with(|| {
                            fabperf_proto::query_agent(d.test_addr, &self.cfg)
                                .err()
                                .map(|e| (e.to_string(), classify(&e)))
                        });
                        if let Some((e, transient)) = down {
                            return Err(CellError {
                                msg: format!(
                                    "agent {} ({}) is unreachable: {e}",
                                    d.name, d.test_addr
                                ),
                                transient: *transient,
                            });
                        }
                    }
                    // A cell's concurrent flows share one group, so their
                    // common receiver serves them at once.
                    let group = rails_group.clone().or_else(|| {
                        (c.flows.len() > 1 || tuned.contains(&ci)).then(|| c.cell_id.clone())
                    });
                    let (target, inner) = self.rail_route(c, s, d)?;
                    let params = serde_json::to_value(DriveParams {
                        target,
                        test: c.kind.clone(),
                        params: inner,
                        sync,
                        group,
                    })
                    .map_err(|e| CellError {
                        msg: e.to_string(),
                        transient: false,
                    })?;
                    // A tuned cell's drive session joins the group of the
                    // sender's tune session.
                    Ok((
                        s.addr,
                        params,
                        rails_group
                            .clone()
                            .or_else(|| tuned.contains(&ci).then(|| c.cell_id.clone())),
                    ))
                })();
                plans.push((ci, fi, p));
            }
        }
        let cfg = self.cfg.clone();
        // Open every session concurrently; with `sync` each driving agent
        // sets its test up completely and says so before anything starts.
        // At most SETUP_PER_RECEIVER flows set up toward one receiver at a
        // time, so a cluster-size incast does not flood its handshakes.
        let ready_wait = Duration::from_secs_f64(3.0 * self.plan.timeout.as_secs_f64() + 5.0);
        let gates: BTreeMap<String, Gate> = plans
            .iter()
            .map(|(ci, fi, _)| {
                (
                    cells[*ci].flows[*fi].1.clone(),
                    Gate::new(SETUP_PER_RECEIVER),
                )
            })
            .collect();
        let gates = &gates;
        let watch = SetupWatch::new(straggle_limit(self.plan.timeout));
        let watch = &watch;
        let setup = |(ci, fi, p): FlowPlan| {
            let mut cfg = cfg.clone();
            let _permit = gates[&cells[ci].flows[fi].1].enter();
            let r = p.and_then(|(addr, params, group)| {
                cfg.group = group;
                let ask = |e: ProtoError| CellError {
                    transient: classify(&e),
                    msg: format!("asking {addr} to drive: {e}"),
                };
                let mut ctl = open_session(addr, &cfg, params).map_err(ask)?;
                if sync {
                    watch.waiting((ci, fi), ctl.stream());
                    let r = ctl.recv_test_within::<Ready>(ready_wait, "the flow set up");
                    watch.settled((ci, fi), matches!(r, Ok(Ready { ready: true })));
                    match r {
                        Ok(r) if r.ready => {}
                        Ok(_) => {
                            return Err(CellError {
                                msg: format!("{addr} could not set its flow up"),
                                transient: true,
                            })
                        }
                        Err(_) if watch.was_called_off((ci, fi)) => {
                            return Err(CellError {
                                transient: true,
                                msg: format!(
                                    "setting the flow up on {addr}: not ready {:.1} s after the last other flow of its round was, so it was called off and the round started without it",
                                    watch.limit.as_secs_f64()
                                ),
                            })
                        }
                        Err(e) => {
                            return Err(CellError {
                                transient: classify(&e),
                                msg: format!("setting the flow up on {addr}: {e}"),
                            })
                        }
                    }
                }
                Ok(Session {
                    cell: ci,
                    flow: fi,
                    ctl,
                })
            });
            (ci, fi, r)
        };
        // A bounded pool sets the flows up, however many there are; a
        // watcher calls off the stragglers.
        let opened: Vec<(usize, usize, Result<Session, CellError>)> = std::thread::scope(|sc| {
            if sync {
                sc.spawn(|| watch.watch());
            }
            let opened = ctlplane::pooled(plans, ctlplane::FLOW_WORKERS, setup, || {
                (
                    usize::MAX,
                    0,
                    Err(CellError {
                        msg: "session thread panicked".into(),
                        transient: false,
                    }),
                )
            });
            watch.finish();
            opened
        });
        let mut sessions = Vec::new();
        for (ci, _fi, r) in opened {
            match r {
                Ok(s) => sessions.push(s),
                Err(e) => {
                    failed.entry(ci).or_insert(e);
                }
            }
        }
        // Start together at one instant (or call off the flows of failed
        // cells): each go carries the time left to that instant when it is
        // sent, so sending them one after the other adds no skew.
        let t0 = Instant::now();
        let timing_setup = t0.duration_since(t_setup).as_secs_f64();
        let mut start_at = t0;
        if sync {
            let margin = start_margin(sessions.len());
            let at = Instant::now() + margin;
            start_at = at;
            for s in &mut sessions {
                let go = !failed.contains_key(&s.cell);
                let start_in_s =
                    go.then(|| at.saturating_duration_since(Instant::now()).as_secs_f64());
                if let Err(e) = s.ctl.send_test(&Go { go, start_in_s }) {
                    if go {
                        failed.entry(s.cell).or_insert(CellError {
                            msg: format!("starting the flow: {e}"),
                            transient: true,
                        });
                    }
                }
            }
        }
        sessions.retain(|s| !failed.contains_key(&s.cell));
        let waits: Vec<Duration> = sessions
            .iter()
            .map(|s| {
                Duration::from_secs_f64(
                    self.expected(&cells[s.cell]) + 3.0 * self.plan.timeout.as_secs_f64() + 5.0,
                )
            })
            .collect();
        let results = collect_results(sessions, &waits);
        let t_end = Instant::now();
        let timing = BatchTiming {
            setup_s: timing_setup,
            start_s: start_at.saturating_duration_since(t0).as_secs_f64(),
            tests_s: t_end.saturating_duration_since(start_at).as_secs_f64(),
            restore_s: 0.0,
        };
        let test_s = t0.elapsed().as_secs_f64();
        let mut per_cell: Vec<CellResult> = (0..cells.len()).map(|_| Ok(Vec::new())).collect();
        for (ci, e) in failed {
            if ci < per_cell.len() {
                per_cell[ci] = Err(e);
            }
        }
        for fr in results {
            if fr.cell >= per_cell.len() {
                continue;
            }
            match (&mut per_cell[fr.cell], fr.result) {
                (Ok(v), Ok(r)) => v.push((fr.flow, r)),
                (slot @ Ok(_), Err(e)) => *slot = Err(e),
                (Err(_), _) => {}
            }
        }
        for v in per_cell.iter_mut().flatten() {
            v.sort_by_key(|(f, _)| *f);
        }
        (per_cell, test_s, timing)
    }

    /// Run pending cells batch by batch with retries. Returns false when
    /// interrupted.
    fn run_cells(&mut self, pending: Vec<CellSpec>) -> Result<bool, RunError> {
        // Group by batch, keeping order.
        let mut batches: Vec<Vec<CellSpec>> = Vec::new();
        for c in pending {
            match batches.last_mut() {
                Some(b) if b[0].batch == c.batch => b.push(c),
                _ => batches.push(vec![c]),
            }
        }
        let expected: Vec<f64> = batches
            .iter()
            .map(|b| b.iter().map(|c| self.expected(c)).fold(0.0, f64::max) + 0.2)
            .collect();
        let mut attempts: BTreeMap<String, u32> = BTreeMap::new();
        let mut queue: std::collections::VecDeque<(Vec<CellSpec>, f64)> =
            batches.into_iter().zip(expected.iter().copied()).collect();
        while let Some((batch, exp)) = queue.pop_front() {
            if interrupted() {
                return Ok(false);
            }
            let remaining: Vec<f64> = std::iter::once(exp)
                .chain(queue.iter().map(|(_, e)| *e))
                .collect();
            let what = if batch.len() == 1 {
                cell_label(&batch[0])
            } else {
                format!("{} (+{} at once)", cell_label(&batch[0]), batch.len() - 1)
            };
            self.progress.running(&what, self.eta(&remaining));
            let started_at = fabperf_results::now_rfc3339();
            let t0 = Instant::now();
            let (results, test_s, timing) = self.run_batch(&batch);
            if interrupted() {
                return Ok(false);
            }
            let wall = t0.elapsed().as_secs_f64();
            let t_commit = Instant::now();
            self.phases.setup_s += timing.setup_s;
            self.phases.start_s += timing.start_s;
            self.phases.tests_s += timing.tests_s;
            self.phases.commit_s += timing.restore_s;
            self.test_s += test_s;
            self.measured_s += batch
                .iter()
                .zip(&results)
                .filter_map(|(c, r)| {
                    let flows = r.as_ref().ok()?;
                    // Warm-up seconds: omit_s (socket bandwidth tests), warmup
                    // (RDMA; the latency tests' warmup is a count).
                    let rdma = Kind::parse(&c.kind).is_some_and(Kind::is_rdma);
                    let warm = c
                        .params
                        .get(if rdma { "warmup" } else { "omit_s" })
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0);
                    flows
                        .iter()
                        .flat_map(|(_, d)| d.records.iter())
                        .filter(|r| r.stream.is_none())
                        .map(|r| r.duration_s + warm)
                        .reduce(f64::max)
                })
                .fold(0.0, f64::max)
                // The durations are what agents reported: a batch's
                // measured time cannot exceed its own wall time.
                .clamp(0.0, wall);
            self.seen_wall += wall;
            self.seen_expected += exp;
            let ended_at = fabperf_results::now_rfc3339();
            let mut retry = Vec::new();
            for (cell, res) in batch.into_iter().zip(results) {
                let n = attempts.entry(cell.cell_id.clone()).or_insert(0);
                *n += 1;
                let attempt = Attempt {
                    attempts: *n,
                    started_at: started_at.clone(),
                    ended_at: ended_at.clone(),
                    wall_s: wall,
                };
                let res = res.and_then(|flows| measurements_of(&cell, &flows));
                match res {
                    Ok(ms) => {
                        self.store
                            .finish_cell_done(self.run_id, &cell.cell_id, &attempt, &ms)?;
                        self.progress.finished(1);
                        self.progress.line(&format!(
                            "fabperf run: [{}/{}] {}: {} ({wall:.1} s)",
                            self.progress.done,
                            self.progress.total,
                            cell_label(&cell),
                            headline(&ms)
                        ));
                        self.ran += 1;
                    }
                    Err(e) if e.transient && *n <= self.plan.retries => {
                        self.progress.warn(&format!(
                            "{}: {} — attempt {} of {}, retrying",
                            cell_label(&cell),
                            e.msg,
                            n,
                            self.plan.retries + 1
                        ));
                        retry.push(cell);
                    }
                    Err(e) => {
                        self.store.finish_cell_failed(
                            self.run_id,
                            &cell.cell_id,
                            &attempt,
                            &e.msg,
                        )?;
                        self.progress.finished(1);
                        self.progress
                            .warn(&format!("{} failed: {}", cell_label(&cell), e.msg));
                        self.ran += 1;
                    }
                }
            }
            self.phases.commit_s += t_commit.elapsed().as_secs_f64();
            if !retry.is_empty() {
                // Back off, then retry the failed cells (a round's cells
                // stay together so nodes still take one test at a time).
                let t_backoff = Instant::now();
                let n = retry
                    .iter()
                    .map(|c| attempts[&c.cell_id])
                    .max()
                    .unwrap_or(1);
                let delay = self.plan.retry_delay.mul_f64(n as f64);
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    if interrupted() {
                        return Ok(false);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                self.phases.backoff_s += t_backoff.elapsed().as_secs_f64();
                queue.push_front((retry, exp));
            }
        }
        Ok(true)
    }
}

/// Run (or resume) a plan.
pub fn run(opts: &RunOptions) -> Result<RunOutcome, RunError> {
    let t_start = Instant::now();
    let plan = plan::load(&opts.plan).map_err(RunError::Plan)?;
    let token = match (&opts.token, &plan.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => Some(fabperf_proto::auth::read_token_file(f).map_err(RunError::Plan)?),
        (None, None) => None,
    };
    let cfg = ClientConfig {
        token,
        timeout: plan.timeout,
        group: None,
    };
    let quiet = opts.progress == ProgressMode::Quiet;
    let say = |s: &str| {
        if !quiet {
            eprintln!("fabperf run: {s}");
        }
    };

    // Agents.
    let mut warnings = Vec::new();
    let roster = discover(&plan, &cfg, &mut |w| warnings.push(w)).map_err(RunError::Other)?;
    for w in &warnings {
        eprintln!("fabperf run: warning: {}", printable(w));
    }
    let cells = expand(&plan, &roster).map_err(RunError::Plan)?;
    let up = roster.all().filter(|a| a.reachable).count();
    say(&format!(
        "plan {:?}: {} agents ({} reachable) on {} path(s), {} cells",
        plan.name,
        roster.all().count(),
        up,
        roster.by_path.len(),
        cells.len()
    ));
    if opts.dry_run {
        let stdout = std::io::stdout();
        let mut o = stdout.lock();
        for a in roster.all() {
            let _ = writeln!(
                o,
                "agent {:<20} path {:<10} {} {}",
                a.name,
                a.path,
                a.addr,
                if a.reachable {
                    "reachable"
                } else {
                    "UNREACHABLE"
                }
            );
        }
        for c in &cells {
            let _ = writeln!(
                o,
                "cell {} batch {:>4}  {}",
                c.cell_id,
                c.batch,
                cell_label(c)
            );
        }
        return Ok(RunOutcome {
            run_id: 0,
            cells: cells.len(),
            done: 0,
            failed: 0,
            pending: cells.len(),
            ran: 0,
            wall_s: t_start.elapsed().as_secs_f64(),
            test_s: 0.0,
            measured_s: 0.0,
            interrupted: false,
            phases: ctlplane::Phases::default(),
            usage: ctlplane::peak_usage(),
        });
    }

    // The open files the largest batch needs (a session per flow, its
    // duplicate while results are awaited, a tune session per agent of a
    // cell with an environment).
    let (flows, tunes) = largest_batch(&cells);
    fabperf_http::rlimit::ensure_nofile(
        ctlplane::fds_needed(flows, tunes),
        &format!("this plan's largest batch ({flows} concurrent flows)"),
    )
    .map_err(RunError::Other)?;

    // The store and the run.
    if let Some(dir) = opts.db.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(|e| {
                RunError::Other(format!("creating {}: {}", dir.display(), plan::os_text(&e)))
            })?;
        }
    }
    // One runner per store: two would resume the same run and race.
    let plan_file = opts.plan.display().to_string();
    let what = |run: Option<i64>| {
        format!(
            "fabperf run {plan_file} (plan {:?}{})",
            plan.name,
            run.map(|r| format!(", run {r}")).unwrap_or_default()
        )
    };
    let mut holder = fabperf_store::LeaseHolder::this_process(what(None));
    let mut lease = fabperf_store::Lease::acquire(&opts.db, &holder, opts.lease_wait)?;
    let mut store = Store::open(&opts.db)?;
    let run = match (opts.run_id, opts.new_run) {
        (Some(id), _) => {
            let r = store.run(id)?;
            if r.plan_name != plan.name {
                return Err(RunError::Other(format!(
                    "run {id} in {} is of plan {:?}, not {:?}; give that plan or another --run",
                    opts.db.display(),
                    r.plan_name,
                    plan.name
                )));
            }
            r
        }
        (None, true) => store.create_run(&fabperf_store::NewRun {
            plan_name: &plan.name,
            plan_hash: &plan.hash,
            plan_file: Some(&plan_file),
            plan_text: &plan.text,
        })?,
        (None, false) => match store.latest_run_for_plan(&plan.name)? {
            Some(r) => r,
            None => store.create_run(&fabperf_store::NewRun {
                plan_name: &plan.name,
                plan_hash: &plan.hash,
                plan_file: Some(&plan_file),
                plan_text: &plan.text,
            })?,
        },
    };
    holder.what = what(Some(run.id));
    lease.update(&holder)?;
    let resumed = store
        .cells(run.id)?
        .iter()
        .any(|c| c.state != CellState::Pending);
    let rep = store.sync_cells(run.id, &cells, opts.retry_failed)?;
    if resumed {
        say(&format!(
            "resuming run {} ({} cells done, {} failed, {} to run{})",
            run.id,
            rep.done,
            rep.failed,
            rep.pending,
            if rep.failed > 0 && !opts.retry_failed {
                "; --retry-failed reruns the failed ones"
            } else {
                ""
            }
        ));
        if run.plan_hash != plan.hash {
            say(&format!(
                "the plan changed since run {} started: {} finished cells are reused (same parameters), {} cells to run, {} stored cells are no longer in the plan (kept)",
                run.id, rep.done + rep.failed, rep.pending, rep.not_in_plan
            ));
        }
    } else {
        say(&format!("run {} into {}", run.id, opts.db.display()));
    }
    store.update_run_plan(run.id, &plan.hash, &plan.text, Some(&plan_file))?;
    let now = fabperf_results::now_rfc3339();
    let agents: Vec<fabperf_store::AgentRow> = roster
        .all()
        .map(|a| fabperf_store::AgentRow {
            name: a.name.clone(),
            path: a.path.clone(),
            addr: a.addr.to_string(),
            hello: a.hello.clone(),
            seen_at: now.clone(),
        })
        .collect();
    store.put_agents(run.id, &agents)?;

    let rows = store.cells(run.id)?;
    let in_plan: BTreeSet<&str> = cells.iter().map(|c| c.cell_id.as_str()).collect();
    let pending: Vec<CellSpec> = rows
        .iter()
        .filter(|c| c.state == CellState::Pending && in_plan.contains(c.spec.cell_id.as_str()))
        .map(|c| c.spec.clone())
        .collect();
    let total = cells.len();
    let done_before = total - pending.len();
    if pending.is_empty() && !has_retests(&plan) {
        say(&format!("nothing to run: every cell of run {} is finished; `fabperf run --new-run` measures again", run.id));
    }
    let progress = Progress::new(opts.progress, total, done_before);
    let mut ex = Exec {
        plan: &plan,
        roster: &roster,
        cfg,
        store: &mut store,
        run_id: run.id,
        progress,
        ran: 0,
        test_s: 0.0,
        measured_s: 0.0,
        phases: ctlplane::Phases::default(),
        seen_wall: 0.0,
        seen_expected: 0.0,
        logged: BTreeSet::new(),
        policy_now: None,
        policy_touched: false,
    };

    // Test by test: cells, then the mesh re-tests of that test.
    ex.phases.before_s = t_start.elapsed().as_secs_f64();
    let mut complete = true;
    for t in &plan.tests {
        let mine: Vec<CellSpec> = pending
            .iter()
            .filter(|c| c.test == t.name)
            .cloned()
            .collect();
        if !ex.run_cells(mine)? {
            complete = false;
            break;
        }
        if let Pattern::Mesh { retest, .. } = t.pattern {
            if retest > 0 && !retest_mesh(&mut ex, t, retest, opts.retry_failed)? {
                complete = false;
                break;
            }
        }
    }
    let t_after = Instant::now();
    ex.policy_reset();
    ex.progress.finish();
    let (ran, test_s, measured_s, mut phases) = (ex.ran, ex.test_s, ex.measured_s, ex.phases);
    // The current plan's cells and their re-tests.
    let mine: Vec<CellRow> = store.plan_cells(run.id)?.current;
    let count = |s: CellState| mine.iter().filter(|c| c.state == s).count();
    let (done, failed, pend) = (
        count(CellState::Done),
        count(CellState::Failed),
        count(CellState::Pending),
    );
    if complete && pend == 0 {
        store.end_run(run.id)?;
    }
    phases.after_s = t_after.elapsed().as_secs_f64();
    Ok(RunOutcome {
        run_id: run.id,
        cells: mine.len(),
        done,
        failed,
        pending: pend,
        ran,
        wall_s: t_start.elapsed().as_secs_f64(),
        test_s,
        measured_s,
        interrupted: !complete,
        phases,
        usage: ctlplane::peak_usage(),
    })
}

fn has_retests(plan: &Plan) -> bool {
    plan.tests
        .iter()
        .any(|t| matches!(t.pattern, Pattern::Mesh { retest, .. } if retest > 0))
}

/// The node an agent runs on: the node name it gave in its hello, else its
/// name in the plan. A node's agents on several paths share its NIC.
fn node_of(roster: &Roster, path: &str, name: &str) -> String {
    roster
        .get(path, name)
        .and_then(|a| hello_node(&a.hello))
        .unwrap_or_else(|| name.to_string())
}

/// ClusterKit-style re-tests of a mesh's suspect pairs: every suspect not
/// yet cleared is measured again, up to `rounds` times; a pair that meets
/// the rule in a re-test is cleared (the first figure was noise), the rest
/// go to the next round with the set shrinking. A round's re-tests run in
/// batches that share no node — whatever their path or sweep point — so no
/// two re-tests depress each other or meet on one agent. A re-test that
/// failed leaves its suspect unconfirmed; `--retry-failed` runs it again.
fn retest_mesh(
    ex: &mut Exec<'_>,
    t: &plan::TestDecl,
    rounds: u32,
    retry_failed: bool,
) -> Result<bool, RunError> {
    for round in 0..rounds {
        let t_analysis = Instant::now();
        let analysis = summary::analyze(ex.store, ex.run_id, &t.name, &t.rule())?;
        // One re-test per mesh cell behind a suspect still open after the
        // re-tests so far (a bidirectional cell measures two pairs).
        let mut todo: BTreeMap<String, CellSpec> = BTreeMap::new();
        for g in &analysis.groups {
            for s in g.suspects.iter().filter(|s| {
                s.state != summary::SuspectState::Cleared && s.retests.len() == round as usize
            }) {
                let Some(proto) = g.cell_template(&s.src, &s.dst) else {
                    continue;
                };
                let Some((a, b)) = proto.flows.first().cloned() else {
                    continue;
                };
                let mut instance = json!({"retest": round, "pair": [a, b]});
                crate::rails::tag_instance(&mut instance, &proto.dims);
                let mut c = proto.clone();
                c.cell_id = crate::cells::cell_id(
                    &ex.plan.name,
                    t,
                    &c.path,
                    &instance,
                    &c.params,
                    round,
                    crate::cells::env_key(ex.plan, &c.dims).as_ref(),
                );
                c.pattern = fabperf_store::RETEST.into();
                c.flows = vec![(a, b)];
                c.repeat = round;
                todo.entry(c.cell_id.clone()).or_insert(c);
            }
        }
        if todo.is_empty() {
            ex.phases.retest_s += t_analysis.elapsed().as_secs_f64();
            return Ok(true);
        }
        let mut todo: Vec<CellSpec> = todo.into_values().collect();
        todo.sort_by(|x, y| (x.seq, &x.cell_id).cmp(&(y.seq, &y.cell_id)));
        let nodes: Vec<Vec<String>> = todo
            .iter()
            .map(|c| {
                c.flows
                    .iter()
                    .flat_map(|(a, b)| [a, b])
                    .map(|n| node_of(ex.roster, &c.path, n))
                    .collect()
            })
            .collect();
        let base = 1_000_000_000 + (round as i64) * 1_000_000;
        for (i, (c, b)) in todo
            .iter_mut()
            .zip(crate::schedule::disjoint_batches(&nodes))
            .enumerate()
        {
            c.batch = base + b as i64;
            c.seq = base + i as i64;
        }
        todo.sort_by_key(|c| (c.batch, c.seq));
        ex.store.add_cells(ex.run_id, &todo)?;
        if retry_failed {
            let ids: Vec<&str> = todo.iter().map(|c| c.cell_id.as_str()).collect();
            ex.store.retry_failed_cells(ex.run_id, &ids)?;
        }
        let rows = ex.store.cells(ex.run_id)?;
        let pending: Vec<CellSpec> = todo
            .iter()
            .filter(|c| {
                rows.iter()
                    .any(|r| r.spec.cell_id == c.cell_id && r.state == CellState::Pending)
            })
            .cloned()
            .collect();
        ex.phases.retest_s += t_analysis.elapsed().as_secs_f64();
        if pending.is_empty() {
            continue;
        }
        ex.progress.total += pending.len();
        ex.progress.line(&format!(
            "fabperf run: {}: re-testing {} suspect cell(s), round {} of {rounds}",
            t.name,
            pending.len(),
            round + 1
        ));
        if !ex.run_cells(pending)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_not_ready_long_after_the_others_is_called_off() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let slow = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut far, _) = l.accept().unwrap();
        let watch = SetupWatch::new(Duration::from_millis(200));
        // Nothing is ready yet: nobody is called off, however long.
        watch.waiting((0, 1), &slow);
        std::thread::scope(|sc| {
            sc.spawn(|| watch.watch());
            std::thread::sleep(Duration::from_millis(300));
            assert!(!watch.was_called_off((0, 1)));
            // Flow (0, 0) is ready; (0, 1) still waits 200 ms later.
            watch.settled((0, 0), true);
            let t0 = Instant::now();
            let mut b = [0u8; 1];
            far.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(
                far.read(&mut b).unwrap(),
                0,
                "the straggler's session is closed"
            );
            let waited = t0.elapsed();
            assert!(waited >= Duration::from_millis(200), "{waited:?}");
            assert!(watch.was_called_off((0, 1)));
            assert!(!watch.was_called_off((0, 0)));
            watch.finish();
        });
        assert_eq!(
            straggle_limit(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        assert_eq!(
            straggle_limit(Duration::from_secs(5)),
            Duration::from_millis(2500)
        );
        assert_eq!(
            straggle_limit(Duration::from_millis(500)),
            Duration::from_secs(1)
        );
    }

    /// Re-tests are kept apart per node, and a node's agents on several
    /// paths (host, pod) are one node: the node name of their hellos.
    #[test]
    fn an_agents_node_is_the_node_its_hello_names() {
        let mut r = Roster::default();
        for (name, path, node, port) in [
            ("n1", "host", Some("node-a"), 1),
            ("10.1.0.5", "pod", Some("node-a"), 2),
            ("n2", "host", None, 3),
            ("bad", "host", Some("a b\n"), 4),
        ] {
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            r.insert(RosterAgent {
                name: name.into(),
                path: path.into(),
                addr,
                test_addr: addr,
                hello: node.map_or(json!({}), |n| json!({"agent": {"node": n}})),
                reachable: true,
            })
            .unwrap();
        }
        assert_eq!(node_of(&r, "host", "n1"), "node-a");
        assert_eq!(node_of(&r, "pod", "10.1.0.5"), "node-a");
        assert_eq!(node_of(&r, "host", "n2"), "n2", "no node in its hello");
        assert_eq!(node_of(&r, "host", "bad"), "bad", "not a safe name");
        assert_eq!(node_of(&r, "host", "gone"), "gone");
        let b = crate::schedule::disjoint_batches(&[
            vec![node_of(&r, "host", "n1"), node_of(&r, "host", "n2")],
            vec![node_of(&r, "pod", "10.1.0.5"), "node-c".into()],
        ]);
        assert_eq!(b, vec![0, 1], "host and pod suspects on node-a run apart");
    }
}
