//! The load generator: `connections` keep-alive connections spread over
//! `threads` threads, each thread its own event loop (as wrk does), one
//! request in flight per connection.
//!
//! - **Closed loop** (no rate): a connection sends its next request as soon
//!   as the previous response is in; latency is response time.
//! - **Open loop** (a rate): every connection has a schedule (rate /
//!   connections requests per second, the connections' start times spread
//!   evenly) and a request is *due* at its slot whether or not the
//!   previous one has returned. Every request's latency counts from its due
//!   time, as wrk2 does (the correction for coordinated omission): a
//!   request that came due while its connection still waited for an earlier
//!   response is charged that wait (`late`), and one that came due on an
//!   idle connection is charged the generator's own delay in sending it
//!   (timer granularity, scheduling), which is also reported on its own
//!   (`send_lag_us`), so a reader can tell the generator's part from the
//!   server's.
//!
//! Every latency goes into one HdrHistogram per thread (every sample, 3
//! significant digits), merged at the end. Requests that complete in the
//! warm-up are not counted; errors are counted by kind ([`RequestErrors`]),
//! and a failed connection is opened again (after a short pause when the
//! connect itself failed).

use crate::params::LoadParams;
use crate::parse::{ResponseParser, MAX_HEAD};
use crate::server::{REASON_CONNECTION_LIMIT, REASON_HTTP_OFF, REASON_SIZE_LIMIT};
use fabperf_results::{
    LatencyHistogram, LatencyKind, Record, RequestErrors, SendLag, Transport, Warning,
};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::rc::Rc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// Descriptors kept free beyond the connections (stdio, threads' epoll
/// and timer descriptors, the control channel).
const FD_RESERVE: u64 = 64;

/// Why a load could not run.
#[derive(Debug)]
pub enum LoadError {
    /// Parameters out of range (a usage error).
    BadParams(String),
    /// The process cannot open enough descriptors.
    Limit(String),
    /// The first request (before the load) failed: the server is not
    /// there, refuses, or is not an HTTP server that serves `/bytes/N`.
    Target(String),
    /// Starting threads or event loops failed.
    Local(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::BadParams(m) => write!(f, "http-load: {m}"),
            LoadError::Limit(m) | LoadError::Target(m) | LoadError::Local(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LoadError {}

/// Where the load goes.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The `Host` header (the name the user gave, with the port).
    pub host: String,
}

impl Target {
    pub fn new(addr: SocketAddr) -> Target {
        Target {
            addr,
            host: addr.to_string(),
        }
    }
}

/// Figures of one thread's connections.
struct Stats {
    hist: LatencyHistogram,
    /// Open loop: send time minus due time of the counted requests that
    /// came due on an idle connection.
    lag: LatencyHistogram,
    ok: u64,
    bytes: u64,
    errors: RequestErrors,
    warmup_errors: u64,
    /// Open-loop counted requests that came due while their connection
    /// still waited for an earlier response.
    late: u64,
    /// CPU seconds of the thread(s) over the measured interval (`None`:
    /// unknown).
    cpu_s: Option<f64>,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            hist: LatencyHistogram::new(LatencyKind::Rtt),
            lag: LatencyHistogram::new(LatencyKind::Rtt),
            ok: 0,
            bytes: 0,
            errors: RequestErrors::default(),
            warmup_errors: 0,
            late: 0,
            cpu_s: Some(0.0),
        }
    }
}

/// What every connection of a load shares.
struct Plan {
    target: Target,
    request: Vec<u8>,
    upload: u64,
    start: Instant,
    measure_from: Instant,
    end: Instant,
    timeout: Duration,
    /// Open loop: time between one connection's requests.
    interval: Option<Duration>,
    /// Open loop: time between consecutive connections' first requests.
    stagger: Duration,
    buffer: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Write,
    Read,
    Timeout,
    Parse,
}

fn count(st: &mut Stats, plan: &Plan, at: Instant, k: Kind) {
    if at < plan.measure_from {
        st.warmup_errors += 1;
        return;
    }
    if at >= plan.end {
        return;
    }
    let e = &mut st.errors;
    match k {
        Kind::Connect => e.connect += 1,
        Kind::Write => e.write += 1,
        Kind::Read => e.read += 1,
        Kind::Timeout => e.timeout += 1,
        Kind::Parse => e.parse += 1,
    }
}

/// Zeros an upload body is written from.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// The request head for `p`.
pub fn request_head(p: &LoadParams, host: &str) -> Vec<u8> {
    if p.upload {
        format!(
            "PUT /upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n",
            p.size
        )
        .into_bytes()
    } else {
        format!("GET /bytes/{} HTTP/1.1\r\nHost: {host}\r\n\r\n", p.size).into_bytes()
    }
}

/// Run the load and return its record.
pub fn run_load(target: &Target, p: &LoadParams) -> Result<Vec<Record>, LoadError> {
    p.validate().map_err(LoadError::BadParams)?;
    crate::rlimit::ensure_nofile(
        u64::from(p.connections) + FD_RESERVE,
        &format!("a load of {} connections", p.connections),
    )
    .map_err(LoadError::Limit)?;
    let timeout = Duration::from_secs_f64(p.timeout_s);
    preflight(target, p, timeout)?;

    let started_at = fabperf_results::now_rfc3339();
    let threads = p.threads_used() as usize;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let t0 = Arc::new(Mutex::new(None::<Instant>));
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        // Connections t, t + threads, t + 2·threads, ...
        let ids: Vec<u32> = (t as u32..p.connections).step_by(threads).collect();
        let (barrier, t0, target, p) = (barrier.clone(), t0.clone(), target.clone(), p.clone());
        let h = std::thread::Builder::new()
            .name(format!("fabperf-load-{t}"))
            .spawn(move || -> Result<Stats, String> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                barrier.wait();
                barrier.wait();
                let rt = rt.map_err(|e| format!("starting an event loop: {e}"))?;
                let start = t0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("set before the second barrier");
                Ok(thread_main(&rt, ids, plan(&target, &p, start, timeout)))
            })
            .map_err(|e| LoadError::Local(format!("starting a load thread: {e}")))?;
        handles.push(h);
    }
    barrier.wait();
    let start = Instant::now();
    *t0.lock().unwrap_or_else(|e| e.into_inner()) = Some(start);
    barrier.wait();
    let mut total = Stats::new();
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => {
                // Every thread's histogram is of round trips, like the total.
                if let Err(e) = total.hist.merge(&s.hist) {
                    failure = Some(format!("merging the threads' latencies: {e}"));
                }
                if let Err(e) = total.lag.merge(&s.lag) {
                    failure = Some(format!("merging the threads' send lags: {e}"));
                }
                total.ok += s.ok;
                total.bytes += s.bytes;
                total.errors.add(&s.errors);
                total.warmup_errors += s.warmup_errors;
                total.late += s.late;
                total.cpu_s = total.cpu_s.zip(s.cpu_s).map(|(a, b)| a + b);
            }
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some("a load thread panicked (a bug)".into()),
        }
    }
    if let Some(e) = failure {
        return Err(LoadError::Local(e));
    }
    Ok(vec![record(target, p, total, started_at)])
}

fn plan(target: &Target, p: &LoadParams, start: Instant, timeout: Duration) -> Plan {
    let measure_from = start + Duration::from_secs_f64(p.warmup_s);
    let end = measure_from + Duration::from_secs_f64(p.duration_s);
    let interval = p
        .rate
        .map(|r| Duration::from_secs_f64(f64::from(p.connections) / r));
    let stagger = p
        .rate
        .map_or(Duration::ZERO, |r| Duration::from_secs_f64(1.0 / r));
    // A bigger buffer for big bodies (fewer reads), a small one for many
    // connections with small responses.
    let buffer = if p.upload || p.size <= 8192 {
        16 * 1024
    } else {
        64 * 1024
    };
    Plan {
        target: target.clone(),
        request: request_head(p, &target.host),
        upload: if p.upload { p.size } else { 0 },
        start,
        measure_from,
        end,
        timeout,
        interval,
        stagger,
        buffer,
    }
}

fn thread_main(rt: &tokio::runtime::Runtime, ids: Vec<u32>, plan: Plan) -> Stats {
    let plan = Rc::new(plan);
    let stats = Rc::new(RefCell::new(Stats::new()));
    let local = tokio::task::LocalSet::new();
    // This thread's CPU time over the measured interval only (not the
    // warm-up's connection set-up and cold caches), as every record's CPU.
    stats.borrow_mut().cpu_s = None;
    {
        let (plan, stats) = (plan.clone(), stats.clone());
        local.spawn_local(async move {
            tokio::time::sleep_until(plan.measure_from.into()).await;
            let a = thread_cpu_secs();
            tokio::time::sleep_until(plan.end.into()).await;
            let b = thread_cpu_secs();
            stats.borrow_mut().cpu_s = a.zip(b).map(|(a, b)| (b - a).max(0.0));
        });
    }
    for id in ids {
        let (plan, stats) = (plan.clone(), stats.clone());
        local.spawn_local(async move { connection(id, &plan, &stats).await });
    }
    rt.block_on(local);
    Rc::try_unwrap(stats)
        .map(RefCell::into_inner)
        .unwrap_or_else(|rc| {
            let mut s = Stats::new();
            std::mem::swap(&mut s, &mut rc.borrow_mut());
            s
        })
}

/// How one request ended.
enum Outcome {
    /// A complete response: its status, body bytes, whether the connection
    /// may carry another request.
    Done(u16, u64, bool),
    Failed(Kind),
    /// The load ended while waiting.
    End,
}

/// One connection's life: open, send requests until the end, open again
/// after a failure.
async fn connection(id: u32, plan: &Plan, stats: &RefCell<Stats>) {
    let mut buf = vec![0u8; plan.buffer];
    let mut parser = ResponseParser::new(false);
    let mut due = plan.start + plan.stagger * id;
    let mut pause = Duration::from_millis(50);
    let mut timer = Box::pin(tokio::time::sleep_until(plan.end.into()));
    'open: while Instant::now() < plan.end {
        let connected = tokio::select! {
            biased;
            r = tokio::time::timeout(plan.timeout, TcpStream::connect(plan.target.addr)) => r,
            _ = tokio::time::sleep_until(plan.end.into()) => return,
        };
        let mut s = match connected {
            Ok(Ok(s)) => s,
            Ok(Err(_)) | Err(_) => {
                count(&mut stats.borrow_mut(), plan, Instant::now(), Kind::Connect);
                let wake = (Instant::now() + pause).min(plan.end);
                tokio::time::sleep_until(wake.into()).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                continue 'open;
            }
        };
        pause = Duration::from_millis(50);
        let _ = s.set_nodelay(true);
        let mut held = 0usize;
        loop {
            // When this request starts counting: its due time (open loop),
            // or when it is sent (closed loop); and whether it came due on
            // an idle connection (open loop; otherwise it is late).
            let (from, idle_due) = match plan.interval {
                None => {
                    // Closed loop: let the thread's other connections whose
                    // responses are in read them first, so the requests go
                    // out together, as wrk's event loop sends them (one
                    // wake-up of a server thread for several requests).
                    if held == 0 {
                        tokio::task::yield_now().await;
                    }
                    (Instant::now(), false)
                }
                Some(iv) => {
                    let this = due;
                    due += iv;
                    if this >= plan.end {
                        return;
                    }
                    if Instant::now() < this {
                        tokio::time::sleep_until(this.into()).await;
                        (this, true)
                    } else {
                        (this, false)
                    }
                }
            };
            let sent = Instant::now();
            if Instant::now() >= plan.end {
                return;
            }
            let deadline = (Instant::now() + plan.timeout).min(plan.end);
            timer.as_mut().reset(deadline.into());
            parser.reset();
            let outcome = tokio::select! {
                biased;
                o = exchange(&mut s, plan, &mut buf, &mut held, &mut parser) => o,
                _ = &mut timer => {
                    if Instant::now() >= plan.end { Outcome::End } else { Outcome::Failed(Kind::Timeout) }
                }
            };
            let at = Instant::now();
            match outcome {
                Outcome::End => return,
                Outcome::Failed(k) => {
                    count(&mut stats.borrow_mut(), plan, at, k);
                    continue 'open;
                }
                Outcome::Done(status, body, keep) => {
                    if at >= plan.measure_from && at < plan.end {
                        let mut st = stats.borrow_mut();
                        if status >= 400 {
                            st.errors.status += 1;
                        } else {
                            st.ok += 1;
                            st.bytes += if plan.upload > 0 { plan.upload } else { body };
                            st.hist
                                .record_rtt_ns(nanos(at.saturating_duration_since(from)));
                            if plan.interval.is_some() {
                                if idle_due {
                                    st.lag
                                        .record_rtt_ns(nanos(sent.saturating_duration_since(from)));
                                } else {
                                    st.late += 1;
                                }
                            }
                        }
                    } else if status >= 400 && at < plan.measure_from {
                        stats.borrow_mut().warmup_errors += 1;
                    }
                    if !keep || held > 0 {
                        // The server closes, or sent more than was asked
                        // for: start over on a fresh connection.
                        continue 'open;
                    }
                    // Nothing can arrive before the next request: forget
                    // the socket's read readiness so the next read waits
                    // for the response instead of trying a read that
                    // cannot succeed yet.
                    let _ = s.try_io(Interest::READABLE, || {
                        Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                    });
                }
            }
        }
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Send the request and read its response.
async fn exchange(
    s: &mut TcpStream,
    plan: &Plan,
    buf: &mut Vec<u8>,
    held: &mut usize,
    parser: &mut ResponseParser,
) -> Outcome {
    if s.write_all(&plan.request).await.is_err() {
        return Outcome::Failed(Kind::Write);
    }
    let mut left = plan.upload;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        if s.write_all(&ZEROS[..k]).await.is_err() {
            return Outcome::Failed(Kind::Write);
        }
        left -= k as u64;
    }
    loop {
        // Parse what is held first (a response may already be complete).
        if *held > 0 {
            match parser.parse(&buf[..*held]) {
                Err(_) => return Outcome::Failed(Kind::Parse),
                Ok(step) => {
                    buf.copy_within(step.consumed..*held, 0);
                    *held -= step.consumed;
                    if let Some(r) = step.done {
                        return Outcome::Done(r.status, r.body_bytes, r.keep_alive);
                    }
                }
            }
        }
        if *held == buf.len() {
            // A head that does not fit: grow up to the parser's bound.
            if buf.len() >= MAX_HEAD {
                return Outcome::Failed(Kind::Parse);
            }
            buf.resize((buf.len() * 2).min(MAX_HEAD), 0);
        }
        match s.read(&mut buf[*held..]).await {
            Ok(0) => {
                return match parser.eof() {
                    Some(r) => Outcome::Done(r.status, r.body_bytes, false),
                    None => Outcome::Failed(Kind::Read),
                }
            }
            Ok(n) => *held += n,
            Err(_) => return Outcome::Failed(Kind::Read),
        }
    }
}

/// CPU seconds the calling thread used so far (user + system).
fn thread_cpu_secs() -> Option<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let ru = getrusage(UsageWho::RUSAGE_THREAD).ok()?;
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    Some(t(ru.user_time()) + t(ru.system_time()))
}

fn record(target: &Target, p: &LoadParams, st: Stats, started_at: String) -> Record {
    let mut r = Record::new("http-load", Transport::Tcp, p.size, p.connections);
    r.started_at = started_at;
    r.op = Some(if p.upload { "PUT" } else { "GET" }.to_string());
    r.direction = Some(if p.upload { "forward" } else { "reverse" }.to_string());
    r.set_throughput(st.bytes, p.duration_s, Some(st.ok));
    let rps = st.ok as f64 / p.duration_s;
    r.requests_per_s = Some(rps);
    r.set_latency(&st.hist);
    if p.rate.is_some() {
        r.send_lag_us = SendLag::from_hist(&st.lag);
    }
    r.errors = Some(st.errors.clone());
    r.remote = Some(target.addr.to_string());
    // The load threads' CPU over the measured interval.
    r.cpu_local_pct = st.cpu_s.map(|c| (c / p.duration_s * 100.0).max(0.0));
    if r.cpu_local_pct.is_none() {
        r.warnings.push(
            Warning::CpuUnknown {
                side: fabperf_results::Side::Client,
                why: "a load thread could not read its CPU time over the whole measured interval"
                    .into(),
            }
            .note(),
        );
    }
    if let Some(rate) = p.rate {
        if rps < rate * 0.95 {
            r.warnings.push(
                Warning::RequestRateNotReached {
                    asked: rate,
                    completed: rps,
                }
                .note(),
            );
        }
        if st.ok > 0 && st.late * 10 > st.ok {
            r.warnings.push(
                Warning::LateRequests {
                    late: st.late,
                    ok: st.ok,
                }
                .note(),
            );
        }
    }
    if st.warmup_errors > 0 {
        r.warnings.push(
            Warning::WarmupErrors {
                count: st.warmup_errors,
            }
            .note(),
        );
    }
    if st.ok == 0 {
        r.warnings.push(Warning::NoRequests.note());
    }
    r
}

/// One request before the load, on a blocking socket: the server answers,
/// speaks HTTP, serves the size asked for. Errors say what to do.
fn preflight(target: &Target, p: &LoadParams, timeout: Duration) -> Result<(), LoadError> {
    let addr = target.addr;
    let mut s = StdTcpStream::connect_timeout(&addr, timeout).map_err(|e| {
        LoadError::Target(format!(
            "cannot connect to {addr}: {e} (is `fabperf server --http` running there?)"
        ))
    })?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let head = format!(
        "HEAD /bytes/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        p.size, target.host
    );
    s.write_all(head.as_bytes())
        .map_err(|e| LoadError::Target(format!("sending a request to {addr}: {e}")))?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut parser = ResponseParser::new(true);
    loop {
        let n = s.read(&mut chunk).map_err(|e| {
            LoadError::Target(format!(
                "no HTTP response from {addr} within {:.1} s: {e}",
                timeout.as_secs_f64()
            ))
        })?;
        if n == 0 {
            return Err(LoadError::Target(format!(
                "{addr} closed the connection without an HTTP response; is it a fabperf agent with --http?"
            )));
        }
        raw.extend_from_slice(&chunk[..n]);
        let step = parser.parse(&raw).map_err(|e| {
            LoadError::Target(format!(
                "{addr} is not an HTTP server fabperf can load: {e}"
            ))
        })?;
        if step.done.is_some() {
            break;
        }
        if raw.len() > MAX_HEAD {
            return Err(LoadError::Target(format!(
                "{addr} sent no complete HTTP response head in {MAX_HEAD} bytes"
            )));
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; crate::parse::MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let _ = resp.parse(&raw);
    let status = resp.code.unwrap_or(0);
    if (200..300).contains(&status) {
        return Ok(());
    }
    let reason = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-fabperf-reason"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .unwrap_or_default();
    let what = if reason == REASON_HTTP_OFF {
        "HTTP is off on that agent: start it with `fabperf server --http`".to_string()
    } else if reason == REASON_CONNECTION_LIMIT {
        "the agent is at its HTTP connection limit (its --http-max-connections)".to_string()
    } else if let Some(max) = reason.strip_prefix(&format!("{REASON_SIZE_LIMIT}=")) {
        format!(
            "--size {} is above the agent's limit of {} bytes (its --http-max-size)",
            p.size,
            max.chars()
                .filter(char::is_ascii_digit)
                .take(20)
                .collect::<String>()
        )
    } else {
        format!(
            "it answered HEAD /bytes/{} with status {status}; fabperf's load needs a server that serves GET /bytes/N (a fabperf agent with --http)",
            p.size
        )
    };
    Err(LoadError::Target(format!("{addr}: {what}")))
}
