//! The test plug-in interface and the data-connection hub.

use crate::auth;
use crate::control::Control;
pub use crate::data::Cookie;
use crate::data::{
    parse_udp_hello, refusal_error, CookieMint, DataKind, DataRefusal, RefusalReason,
    DATA_ACCEPTED, DATA_REFUSED, MAX_REFUSAL,
};
use crate::door::{self, Door, DoorGuard, DoorLog};
use crate::error::{ErrorCode, ProtoError};
use crate::frame::{read_full, AgentIdentity, DATA_MAGIC};
use std::collections::HashMap;
use std::io::{Read, Write};
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

/// Routes incoming data connections (`FBPD` + cookie) to the test waiting
/// for them, issues the cookies (marked as this agent's, see
/// [`crate::data`]) and refuses, saying why, a connection no test waits for.
#[derive(Clone)]
pub struct DataHub {
    inner: Arc<Mutex<HashMap<Cookie, Slot>>>,
    mint: Arc<CookieMint>,
    who: Option<Arc<AgentIdentity>>,
    door: Arc<Mutex<Option<Arc<Door>>>>,
}

struct Slot {
    tx: SyncSender<TcpStream>,
    /// Data connections the test still takes.
    left: usize,
}

impl Default for DataHub {
    fn default() -> Self {
        DataHub::for_agent(None, None)
    }
}

/// A registered cookie; dropping it unregisters.
pub struct DataWaiter {
    hub: DataHub,
    cookie: Cookie,
    rx: Receiver<TcpStream>,
}

/// What became of a data connection the agent's listener handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed {
    /// Handed to the test waiting for it.
    ToTest,
    /// Refused (and the client told why).
    Refused(RefusalReason),
    /// The cookie did not arrive.
    NoCookie,
}

impl DataHub {
    /// A hub without an agent identity or token (tests, in-process agents).
    pub fn new() -> DataHub {
        DataHub::default()
    }

    /// The hub of an agent: `token` keys its cookies' marks (agents sharing
    /// it recognise each other's cookies), `who` is named in its refusals.
    pub fn for_agent(token: Option<&[u8]>, who: Option<AgentIdentity>) -> DataHub {
        DataHub {
            inner: Arc::default(),
            mint: Arc::new(CookieMint::new(token)),
            who: who.map(Arc::new),
            door: Arc::default(),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Cookie, Slot>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh cookie of this agent, registered nowhere (a UDP test's: its
    /// hello carries it).
    pub fn issue(&self) -> Cookie {
        self.mint.issue()
    }

    /// Register a fresh cookie for up to `max_conns` data connections.
    pub fn register(&self, max_conns: usize) -> DataWaiter {
        let cookie = self.mint.issue();
        let (tx, rx) = mpsc::sync_channel(max_conns.max(1));
        self.slots().insert(
            cookie,
            Slot {
                tx,
                left: max_conns.max(1),
            },
        );
        DataWaiter {
            hub: self.clone(),
            cookie,
            rx,
        }
    }

    /// Why a cookie no test here waits for is refused.
    pub fn refusal_for(&self, cookie: &Cookie) -> DataRefusal {
        DataRefusal::new(self.mint.refusal_reason(cookie), self.who.as_deref())
    }

    /// Called by the agent's listener after reading `FBPD`: reads the
    /// cookie, then either answers `FBPA` and hands the stream to its test,
    /// or answers with a refusal saying why and closes.
    pub fn route(&self, mut stream: TcpStream, timeout: Duration) -> Routed {
        let mut cookie = [0u8; 16];
        let _ = stream.set_read_timeout(Some(timeout));
        let _ = stream.set_write_timeout(Some(timeout));
        if read_full(&mut stream, &mut cookie, "data cookie", Some(timeout)).is_err() {
            return Routed::NoCookie;
        }
        let tx = {
            let mut slots = self.slots();
            match slots.get_mut(&cookie) {
                Some(s) if s.left > 0 => {
                    s.left -= 1;
                    Ok(s.tx.clone())
                }
                Some(_) => Err(DataRefusal::new(RefusalReason::Full, self.who.as_deref())),
                None => Err(self.refusal_for(&cookie)),
            }
        };
        match tx {
            Ok(tx) => {
                // The answer goes out before the test may write on it.
                if stream.write_all(&DATA_ACCEPTED).is_err() {
                    return Routed::NoCookie;
                }
                let _ = stream.set_read_timeout(None);
                let _ = stream.set_write_timeout(None);
                match tx.try_send(stream) {
                    Ok(()) => Routed::ToTest,
                    // The test stopped waiting in the meantime.
                    Err(_) => Routed::Refused(RefusalReason::Ended),
                }
            }
            Err(r) => {
                let _ = stream.write_all(&r.encode_tcp());
                // Let the answer reach the client before the close.
                let _ = stream.shutdown(Shutdown::Write);
                Routed::Refused(r.reason)
            }
        }
    }

    /// Hold the agent's UDP port on `addr` while no UDP test runs, and
    /// answer a UDP hello for a test this agent does not hold with a
    /// refusal (the door, [`crate::door`]). Once per agent.
    pub fn open_udp_door(&self, addr: SocketAddr, log: DoorLog) -> std::io::Result<()> {
        let hub = self.clone();
        let answer = Arc::new(move |c: &Cookie| Some(hub.refusal_for(c)));
        let d = door::open(addr, answer, log)?;
        *self.door.lock().unwrap_or_else(|p| p.into_inner()) = Some(d);
        Ok(())
    }

    /// Stop the UDP door (the agent is shutting down).
    pub fn close_udp_door(&self) {
        if let Some(d) = self.door.lock().unwrap_or_else(|p| p.into_inner()).take() {
            d.stop();
        }
    }

    /// A UDP test's socket on `local` (the agent's address as the client
    /// reached it, the agent's port): the UDP door, when this agent has one,
    /// stays closed while the returned guard lives.
    pub fn udp_socket(
        &self,
        local: SocketAddr,
    ) -> std::io::Result<(std::net::UdpSocket, Option<DoorGuard>)> {
        let door = self.door.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let guard = door.map(|d| d.close_for_test());
        let s = std::net::UdpSocket::bind(local)?;
        Ok((s, guard))
    }

    /// A UDP test's socket got `d` from `from`: when it is a hello for
    /// another test, the refusal to send back (the caller rate-limits).
    pub fn stray_hello(&self, d: &[u8], own: &Cookie) -> Option<Vec<u8>> {
        let (session, cookie) = parse_udp_hello(d)?;
        (cookie != *own).then(|| self.refusal_for(&cookie).encode_udp(session))
    }
}

impl DataWaiter {
    pub fn cookie(&self) -> Cookie {
        self.cookie
    }

    pub fn cookie_hex(&self) -> String {
        auth::to_hex(&self.cookie)
    }

    /// Wait for the next data connection, watching the control connection:
    /// a client that gives up (its data connection went to another agent,
    /// say) ends the wait at once with what it said, instead of after
    /// `timeout`.
    pub fn accept_watching(
        &self,
        timeout: Duration,
        ctl: &mut Control,
    ) -> Result<TcpStream, ProtoError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(s) => return Ok(s),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ProtoError::Closed {
                        what: "waiting for data connections".into(),
                    })
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if control_has_news(ctl) {
                return Err(match ctl.recv("the client's data connections") {
                    Err(e) => e,
                    Ok(m) => ProtoError::Unexpected {
                        expected: "data connections".into(),
                        got: m.kind().into(),
                    },
                });
            }
            if left.is_zero() {
                return Err(Self::timed_out(timeout));
            }
        }
    }

    fn timed_out(timeout: Duration) -> ProtoError {
        ProtoError::Timeout {
            what: "the client's data connection (a firewall may block it)".into(),
            waited: timeout,
        }
    }

    /// Wait for the next data connection.
    pub fn accept(&self, timeout: Duration) -> Result<TcpStream, ProtoError> {
        match self.rx.recv_timeout(timeout) {
            Ok(s) => Ok(s),
            Err(RecvTimeoutError::Timeout) => Err(Self::timed_out(timeout)),
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

/// True when the control connection has something to read (a message,
/// or its end): checked without waiting.
pub fn control_has_news(ctl: &Control) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let fd = ctl.stream();
    let mut p = [PollFd::new(fd, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut p, Some(&zero)), Ok(n) if n > 0)
}

/// Read the agent's answer to a data connection's cookie: `FBPA`, or `FBPR`
/// + length + JSON refusal ([`ProtoError::Refused`]). Bounded: a refusal
///   body is at most [`MAX_REFUSAL`] bytes.
pub fn read_data_answer<R: Read>(r: &mut R, timeout: Option<Duration>) -> Result<(), ProtoError> {
    const WHAT: &str = "waiting for the agent to accept the data connection";
    let mut m = [0u8; 4];
    read_full(r, &mut m, WHAT, timeout)?;
    if m == DATA_ACCEPTED {
        return Ok(());
    }
    if m != DATA_REFUSED {
        return Err(ProtoError::BadMagic { got: m });
    }
    let mut len = [0u8; 2];
    read_full(r, &mut len, WHAT, timeout)?;
    let len = u16::from_be_bytes(len) as usize;
    if len > MAX_REFUSAL {
        return Err(ProtoError::FrameTooLarge {
            len,
            max: MAX_REFUSAL,
        });
    }
    let mut body = vec![0u8; len];
    read_full(r, &mut body, WHAT, timeout)?;
    Err(ProtoError::Refused(DataRefusal::decode_body(&body)?))
}

/// Client side: open a data connection for the test of `ctl` (to the
/// address of its control connection) and wait for the agent to accept
/// it. A connection that reaches another agent — an address that balances
/// connections over several — fails with [`ProtoError::WrongAgent`]
/// naming both agents, and the agent of `ctl` is told so it stops waiting.
pub fn open_data(
    ctl: &mut Control,
    cookie_hex: &str,
    timeout: Duration,
) -> Result<TcpStream, ProtoError> {
    let addr = ctl.peer();
    match connect_data(addr, cookie_hex, timeout) {
        Err(ProtoError::Refused(r)) => {
            let who = ctl.agent_hello().and_then(|h| h.agent.clone());
            let e = refusal_error(&r, who.as_ref(), DataKind::Connection);
            ctl.send_error(ErrorCode::TestFailed, &format!("client: {e}"));
            Err(e)
        }
        other => other,
    }
}

/// Client side: open a data connection to `addr` for the test whose
/// `Accept` carried `cookie_hex`, and wait for the agent's answer (a
/// refusal is [`ProtoError::Refused`]; [`open_data`] explains it).
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
    s.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .map_err(|e| ProtoError::io("setting data connection timeout", e))?;
    read_data_answer(&mut s, Some(timeout))?;
    s.set_read_timeout(None)
        .map_err(|e| ProtoError::io("setting data connection timeout", e))?;
    Ok(s)
}
