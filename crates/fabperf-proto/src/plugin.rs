//! The test plug-in interface and the data-connection hub.

use crate::auth;
use crate::control::Control;
use crate::error::{ErrorCode, ProtoError};
use crate::frame::{read_full, DATA_MAGIC};
use std::collections::HashMap;
use std::io::Write;
use std::net::Shutdown;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bounds a request may not exceed on this agent.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest test a client may ask for.
    pub max_duration: Duration,
    /// Most memory (buffers, registered regions) one request may make the
    /// agent allocate.
    pub max_memory: u64,
    /// How long either side waits for the other before declaring it stalled.
    pub io_timeout: Duration,
    /// Most streams / QPs per test.
    pub max_streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_duration: Duration::from_secs(3600),
            max_memory: 2 << 30,
            io_timeout: Duration::from_secs(10),
            max_streams: 128,
        }
    }
}

impl Limits {
    pub fn check_duration(&self, secs: f64) -> Result<(), ServeError> {
        if !secs.is_finite() || secs < 0.0 {
            return Err(ServeError::bad_request(format!(
                "duration {secs} is not a valid number of seconds"
            )));
        }
        if secs > self.max_duration.as_secs_f64() {
            return Err(ServeError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "requested duration {secs} s exceeds the agent's limit of {} s (agent option --max-duration)",
                    self.max_duration.as_secs_f64()
                ),
            ));
        }
        Ok(())
    }

    pub fn check_memory(&self, bytes: u64, what: &str) -> Result<(), ServeError> {
        if bytes > self.max_memory {
            return Err(ServeError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{what} would need {bytes} bytes, above the agent's limit of {} bytes (agent option --max-memory)",
                    self.max_memory
                ),
            ));
        }
        Ok(())
    }

    pub fn check_streams(&self, n: u32) -> Result<(), ServeError> {
        if n == 0 {
            return Err(ServeError::bad_request("at least one stream is needed"));
        }
        if n > self.max_streams {
            return Err(ServeError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{n} streams exceed the agent's limit of {}",
                    self.max_streams
                ),
            ));
        }
        Ok(())
    }
}

/// An error a test kind returns from `serve`; sent to the client as an
/// `Error` frame when the control connection still works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeError {
    pub code: ErrorCode,
    pub message: String,
    /// True when the control connection is gone (no frame can be sent).
    pub connection_lost: bool,
}

impl ServeError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ServeError {
        ServeError {
            code,
            message: message.into(),
            connection_lost: false,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ServeError {
        ServeError::new(ErrorCode::BadRequest, message)
    }
    pub fn failed(message: impl std::fmt::Display) -> ServeError {
        ServeError::new(ErrorCode::TestFailed, message.to_string())
    }
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ServeError {}

impl From<ProtoError> for ServeError {
    fn from(e: ProtoError) -> Self {
        ServeError {
            code: e.code(),
            connection_lost: e.is_connection_lost(),
            message: e.to_string(),
        }
    }
}

impl From<std::io::Error> for ServeError {
    fn from(e: std::io::Error) -> Self {
        ServeError::failed(e)
    }
}

/// Decode a test kind's request parameters; a malformed request becomes a
/// `bad request` naming the test.
pub fn decode_params<T: serde::de::DeserializeOwned>(
    test: &str,
    params: serde_json::Value,
) -> Result<T, ServeError> {
    serde_json::from_value(params)
        .map_err(|e| ServeError::bad_request(format!("{test} parameters: {e}")))
}

/// The agent's own clock on one test. Every test ends by its deadline,
/// whatever the client does: the agent's timer calls [`TestClock::enforce`],
/// which sets the stop flag (the control channel's reads then fail at
/// once), shuts down the read side of the control connection (waking a
/// blocked read) and both sides of every data socket the test registered
/// with [`TestClock::watch`]. Loops that read no socket (UDP senders, RDMA
/// polling) end through the control channel's failure or by checking
/// [`TestClock::is_stopped`].
///
/// The deadline starts at the agent's `--max-duration` plus the grace
/// (what bounds iteration-mode tests); a test kind narrows it with
/// [`TestClock::arm`] (through [`ServeCtx::limit_duration`]) to the length
/// the client asked for.
pub struct TestClock {
    grace: Duration,
    max: Duration,
    stop: Arc<AtomicBool>,
    state: Mutex<ClockState>,
}

struct ClockState {
    deadline: Instant,
    /// What the test asked for, once armed.
    length: Option<Duration>,
    control: Option<TcpStream>,
    sockets: Vec<TcpStream>,
}

/// `t + d`, or a point far in the future when that overflows.
fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(10 * 365 * 86400)))
        .unwrap_or(t)
}

impl TestClock {
    /// A clock for a test starting now. `control` is a handle on the
    /// test's control connection (shut down for reading at the deadline).
    pub fn new(limits: &Limits, control: Option<TcpStream>) -> TestClock {
        let grace = Self::grace_for(limits);
        TestClock {
            grace,
            max: limits.max_duration,
            stop: Arc::new(AtomicBool::new(false)),
            state: Mutex::new(ClockState {
                deadline: later(Instant::now(), limits.max_duration.saturating_add(grace)),
                length: None,
                control,
                sockets: Vec::new(),
            }),
        }
    }

    /// What a test may run past its length: max(2 s, the I/O timeout).
    pub fn grace_for(limits: &Limits) -> Duration {
        limits.io_timeout.max(Duration::from_secs(2))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on, the test may run `length` plus the grace (at most
    /// the agent's limit plus the grace).
    pub fn arm(&self, length: Duration) {
        let length = length.min(self.max);
        let mut st = self.state();
        st.deadline = later(Instant::now(), length.saturating_add(self.grace));
        st.length = Some(length);
    }

    /// Shut `s` down (both ways) when the test is stopped.
    pub fn watch(&self, s: &TcpStream) {
        if let Ok(c) = s.try_clone() {
            if self.is_stopped() {
                let _ = c.shutdown(Shutdown::Both);
            }
            self.state().sockets.push(c);
        }
    }

    pub fn deadline(&self) -> Instant {
        self.state().deadline
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The flag [`TestClock::enforce`] sets (for the control channel).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Stop the test if its deadline has passed; true the first time.
    pub fn enforce(&self, now: Instant) -> bool {
        if self.is_stopped() || now < self.deadline() {
            return false;
        }
        self.stop_now();
        true
    }

    /// Stop the test now.
    pub fn stop_now(&self) {
        self.stop.store(true, Ordering::Release);
        let st = self.state();
        if let Some(c) = &st.control {
            let _ = c.shutdown(Shutdown::Read);
        }
        for s in &st.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// The limit in words: "asked for 10 s, allowed 10 s + 2 s grace".
    pub fn describe(&self) -> String {
        let g = self.grace.as_secs_f64();
        match self.state().length {
            Some(l) => format!(
                "the test asked for {} s and may run {} s + {g} s grace",
                l.as_secs_f64(),
                l.as_secs_f64()
            ),
            None => format!(
                "a test without a set length may run the agent's --max-duration of {} s + {g} s grace",
                self.max.as_secs_f64()
            ),
        }
    }
}

/// What a test kind gets from the agent for one test.
pub struct ServeCtx<'a> {
    pub ctl: &'a mut Control,
    pub limits: Limits,
    /// Where the agent accepts data connections for this test.
    pub data: &'a DataHub,
    /// The agent's clock on this test.
    pub clock: &'a TestClock,
}

impl ServeCtx<'_> {
    /// The agent's address as the client reached it (IP and port); UDP tests
    /// bind the same address.
    pub fn local(&self) -> SocketAddr {
        self.ctl.local()
    }
    pub fn peer(&self) -> SocketAddr {
        self.ctl.peer()
    }

    /// Check a requested length (measured time plus warm-up, seconds)
    /// against `--max-duration`, and end the test by the agent's clock at
    /// that length plus the grace.
    pub fn limit_duration(&mut self, secs: f64) -> Result<(), ServeError> {
        self.limits.check_duration(secs)?;
        self.clock
            .arm(Duration::try_from_secs_f64(secs).unwrap_or(self.limits.max_duration));
        Ok(())
    }

    /// Shut this data socket down when the agent stops the test.
    pub fn watch(&self, s: &TcpStream) {
        self.clock.watch(s)
    }
}

/// A test kind served by the agent. Implementations live in the engine
/// crates (sockets, RDMA); the agent only knows them by name.
pub trait TestKind: Send + Sync {
    /// The name clients ask for, e.g. `tcp-bw`.
    fn name(&self) -> &'static str;
    /// Validate `params`, then run the agent side of the test. The `Accept`
    /// frame is the kind's job (so it can include setup info, or refuse
    /// with a `ServeError` first).
    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError>;
}

/// A 16-byte secret naming one test's data connections.
pub type Cookie = [u8; 16];

/// Routes incoming data connections (`FBPD` + cookie) to the test waiting
/// for them.
#[derive(Clone, Default)]
pub struct DataHub {
    inner: Arc<Mutex<HashMap<Cookie, SyncSender<TcpStream>>>>,
}

/// A registered cookie; dropping it unregisters.
pub struct DataWaiter {
    hub: DataHub,
    cookie: Cookie,
    rx: Receiver<TcpStream>,
}

impl DataHub {
    pub fn new() -> DataHub {
        DataHub::default()
    }

    /// Register a fresh cookie for up to `max_conns` data connections.
    pub fn register(&self, max_conns: usize) -> DataWaiter {
        let cookie = auth::random_bytes::<16>();
        let (tx, rx) = mpsc::sync_channel(max_conns.max(1));
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cookie, tx);
        DataWaiter {
            hub: self.clone(),
            cookie,
            rx,
        }
    }

    /// Called by the agent's listener after reading `FBPD`: reads the cookie
    /// and hands the stream over. Returns false when the cookie is unknown.
    pub fn route(&self, mut stream: TcpStream, timeout: Duration) -> bool {
        let mut cookie = [0u8; 16];
        let _ = stream.set_read_timeout(Some(timeout));
        if read_full(&mut stream, &mut cookie, "data cookie", Some(timeout)).is_err() {
            return false;
        }
        let tx = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cookie)
            .cloned();
        match tx {
            Some(tx) => {
                let _ = stream.set_read_timeout(None);
                tx.try_send(stream).is_ok()
            }
            None => false,
        }
    }
}

impl DataWaiter {
    pub fn cookie(&self) -> Cookie {
        self.cookie
    }

    pub fn cookie_hex(&self) -> String {
        auth::to_hex(&self.cookie)
    }

    /// Wait for the next data connection.
    pub fn accept(&self, timeout: Duration) -> Result<TcpStream, ProtoError> {
        match self.rx.recv_timeout(timeout) {
            Ok(s) => Ok(s),
            Err(RecvTimeoutError::Timeout) => Err(ProtoError::Timeout {
                what: "the client's data connection (a firewall may block it)".into(),
                waited: timeout,
            }),
            Err(RecvTimeoutError::Disconnected) => Err(ProtoError::Closed {
                what: "waiting for data connections".into(),
            }),
        }
    }
}

impl Drop for DataWaiter {
    fn drop(&mut self) {
        self.hub
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.cookie);
    }
}

/// Client side: open a data connection to the agent for the test whose
/// `Accept` carried `cookie_hex`.
pub fn connect_data(
    addr: SocketAddr,
    cookie_hex: &str,
    timeout: Duration,
) -> Result<TcpStream, ProtoError> {
    let cookie = auth::from_hex(cookie_hex)
        .filter(|c| c.len() == 16)
        .ok_or_else(|| ProtoError::BadJson(format!("bad data cookie {cookie_hex:?}")))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| ProtoError::io(format!("opening data connection to {addr}"), e))?;
    let mut hello = Vec::with_capacity(20);
    hello.extend_from_slice(&DATA_MAGIC);
    hello.extend_from_slice(&cookie);
    s.write_all(&hello)
        .map_err(|e| ProtoError::io("sending data cookie", e))?;
    Ok(s)
}
