//! The `drive` test kind: an agent runs the client side of a test against
//! another agent, on the runner's behalf, and returns the records.
//!
//! ```text
//! runner                         agent A (drive)                 agent B
//!   Start {test: drive, params: {target: B, test, params, sync}} ->
//!         <- Accept
//!                                  handshake with B, mutual auth, bye
//!                                  (B proves it is an agent of the cluster)
//!   [sync]                         set the test up with B: connect, start,
//!                                  data connections, queue pairs, ready
//!         <- Test {ready}
//!   Test {go, start_in_s} ->
//!                                  both ends start at that instant
//!                                  ... the test itself ...
//!         <- Test {records}
//!   Bye ->
//! ```
//!
//! A drive request is as trusted as the runner's connection: on an agent
//! with `--token-file` only token holders may send one, and the agent then
//! authenticates to the target with its own token. The target must be an IP
//! address and port (no name resolution on the agent; checked on its
//! canonical form, so `::ffff:0.0.0.0` is the unspecified address it is),
//! the inner test is one of the measurement kinds (a drive cannot start a
//! drive), and its parameters pass the same checks as on the command line.
//! Before any load — the HTTP load included — the target must prove it is a
//! fabperf agent of the same cluster (the handshake, with mutual
//! authentication when the agent has a token). A target that does not gets
//! one answer, whatever the reason (a closed port, no route, another
//! program, another token), and not before the handshake's timeout, so a
//! drive does not tell a port's state; the driving agent's log has the
//! reason.

use crate::plan::{validate_params, Kind};
use fabperf_proto::{
    decode_params, ClientConfig, ErrorCode, Msg, ProtoError, ServeCtx, ServeError, Start, TestKind,
};
use fabperf_results::Record;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The kind's name on the wire.
pub const DRIVE: &str = "drive";

/// What the runner asks a driving agent to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriveParams {
    /// The target agent (IP:port).
    pub target: SocketAddr,
    /// The inner test kind (`tcp-bw`, ...).
    pub test: String,
    /// The inner test's parameters.
    pub params: Value,
    /// Set the test up, say so, and wait for the runner's `go` (with the
    /// start instant) before starting it: flows that start together.
    #[serde(default)]
    pub sync: bool,
    /// The group the inner test runs in: the receiver of an incast serves
    /// the tests of one group at the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// The driving agent's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriveResult {
    pub records: Vec<Record>,
    /// Seconds the inner test took on the driving agent (its start to its
    /// results).
    pub test_s: f64,
}

/// The driving agent to the runner (sync sessions): the inner test is set
/// up and waits for its start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ready {
    pub ready: bool,
}

/// The runner's start signal for synchronized flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Go {
    /// False: the flow is called off (another flow of its cell failed to
    /// set up).
    pub go: bool,
    /// Start this many seconds after the message was sent (the common
    /// start of the cell's flows); 0 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_in_s: Option<f64>,
}

/// Expected wall time of an inner test (measured interval + warm-up), from
/// its parameters (0 when they bound it by a count instead).
pub fn inner_secs(kind: Kind, params: &Value) -> f64 {
    let f = |k: &str| params.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    match kind {
        Kind::TcpBw | Kind::UdpBw => f("duration_s") + f("omit_s"),
        Kind::TcpLat | Kind::UdpLat => f("duration_s"),
        Kind::HttpLoad => f("duration_s") + f("warmup_s"),
        Kind::Mtu => f("duration_s"),
        Kind::RdmaBw | Kind::RdmaLat => {
            let d = f("duration");
            let w = params
                .get("warmup")
                .and_then(Value::as_f64)
                .unwrap_or(if d > 0.0 { 1.0 } else { 0.0 });
            d + w
        }
    }
}

/// Where the driving agent's log lines go.
pub type DriveLog = Arc<dyn Fn(&str) + Send + Sync>;

/// The agent side of `drive`.
pub struct DriveKind {
    /// The token this agent presents to targets (its own --token-file).
    pub token: Option<Vec<u8>>,
    /// Client timeout toward targets.
    pub timeout: Duration,
    /// The agent's log (why a target did not prove itself).
    pub log: DriveLog,
}

impl DriveKind {
    pub fn new(token: Option<Vec<u8>>, timeout: Duration) -> DriveKind {
        DriveKind {
            token,
            timeout,
            log: Arc::new(|_: &str| {}),
        }
    }

    /// Log through `log` (the agent's log).
    pub fn with_log(self, log: DriveLog) -> DriveKind {
        DriveKind { log, ..self }
    }
}

/// An error with the class it keeps end to end (busy stays busy).
pub type ClassedError = (ErrorCode, String);

/// The class of a control-channel error toward the target.
pub(crate) fn proto_code(e: &ProtoError) -> ErrorCode {
    match e {
        ProtoError::Remote { code, .. } => *code,
        // The target did not answer or went away: worth a retry.
        ProtoError::Timeout { .. } | ProtoError::Io { .. } | ProtoError::Closed { .. } => {
            ErrorCode::Timeout
        }
        other => other.code(),
    }
}

pub(crate) fn sock_code(e: &fabperf_sock::SockError) -> ErrorCode {
    match e {
        fabperf_sock::SockError::Proto(p) => proto_code(p),
        fabperf_sock::SockError::BadParams(_) => ErrorCode::BadRequest,
        fabperf_sock::SockError::PeerGone(_) => ErrorCode::Timeout,
        _ => ErrorCode::TestFailed,
    }
}

pub(crate) fn rdma_code(e: &fabperf_rdma::RdmaError) -> ErrorCode {
    use fabperf_rdma::RdmaError as R;
    match e {
        R::Proto(p) => proto_code(p),
        R::BadRequest(_) => ErrorCode::BadRequest,
        R::Limit(_) => ErrorCode::LimitExceeded,
        R::Stalled(_) => ErrorCode::Timeout,
        _ => ErrorCode::TestFailed,
    }
}

pub(crate) fn mtu_code(e: &fabperf_mtu::MtuError) -> ErrorCode {
    match e {
        fabperf_mtu::MtuError::Agent(p) => proto_code(p),
        fabperf_mtu::MtuError::Probe(_) => ErrorCode::TestFailed,
    }
}

pub(crate) fn load_code(e: &fabperf_http::LoadError) -> ErrorCode {
    match e {
        fabperf_http::LoadError::BadParams(_) => ErrorCode::BadRequest,
        fabperf_http::LoadError::Limit(_) => ErrorCode::LimitExceeded,
        fabperf_http::LoadError::Target(_) => ErrorCode::TestFailed,
        fabperf_http::LoadError::Local(_) => ErrorCode::Internal,
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, ClassedError> {
    serde_json::from_value(v.clone()).map_err(|e| (ErrorCode::BadRequest, e.to_string()))
}

/// Run the client side of `kind` against `target`, at once.
pub fn run_client(
    kind: Kind,
    target: SocketAddr,
    cfg: &ClientConfig,
    params: &Value,
) -> Result<Vec<Record>, ClassedError> {
    let sock = |r: Result<Vec<Record>, fabperf_sock::SockError>| {
        r.map_err(|e| (sock_code(&e), e.to_string()))
    };
    match kind {
        Kind::TcpBw => sock(fabperf_sock::run_tcp_bw(target, cfg, &decode(params)?)),
        Kind::TcpLat => sock(fabperf_sock::run_tcp_lat(target, cfg, &decode(params)?)),
        Kind::UdpBw => sock(fabperf_sock::run_udp_bw(target, cfg, &decode(params)?)),
        Kind::UdpLat => sock(fabperf_sock::run_udp_lat(target, cfg, &decode(params)?)),
        Kind::RdmaBw => fabperf_rdma::run_bw(target, cfg, &decode(params)?)
            .map_err(|e| (rdma_code(&e), e.to_string())),
        Kind::RdmaLat => fabperf_rdma::run_lat(target, cfg, &decode(params)?)
            .map_err(|e| (rdma_code(&e), e.to_string())),
        Kind::Mtu => fabperf_mtu::plan::run(target, cfg, &decode(params)?)
            .map_err(|e| (mtu_code(&e), e.to_string())),
        // HTTP is unauthenticated: the target's HTTP server, not its
        // fabperf protocol, so no token and no group (the target proved
        // itself an agent of the cluster before this).
        Kind::HttpLoad => {
            fabperf_http::run_load(&fabperf_http::Target::new(target), &decode(params)?)
                .map_err(|e| (load_code(&e), e.to_string()))
        }
    }
}

/// The inner test, set up to its start.
enum Prepared {
    TcpBw(Box<fabperf_sock::TcpBwPrepared>),
    RdmaBw(Box<fabperf_rdma::BwPrepared>),
    RdmaLat(Box<fabperf_rdma::LatPrepared>),
    /// A kind without a separate set-up: the whole client runs at the start.
    Whole,
}

/// Set the inner test up (everything before its start).
fn prepare(
    kind: Kind,
    target: SocketAddr,
    cfg: &ClientConfig,
    params: &Value,
) -> Result<Prepared, ClassedError> {
    match kind {
        Kind::TcpBw => fabperf_sock::prepare_tcp_bw(target, cfg, &decode(params)?)
            .map(|p| Prepared::TcpBw(Box::new(p)))
            .map_err(|e| (sock_code(&e), e.to_string())),
        Kind::RdmaBw => fabperf_rdma::prepare_bw(target, cfg, &decode(params)?)
            .map(|p| Prepared::RdmaBw(Box::new(p)))
            .map_err(|e| (rdma_code(&e), e.to_string())),
        Kind::RdmaLat => fabperf_rdma::prepare_lat(target, cfg, &decode(params)?)
            .map(|p| Prepared::RdmaLat(Box::new(p)))
            .map_err(|e| (rdma_code(&e), e.to_string())),
        _ => Ok(Prepared::Whole),
    }
}

impl Prepared {
    fn run(
        self,
        kind: Kind,
        target: SocketAddr,
        cfg: &ClientConfig,
        params: &Value,
        start: Start,
        retry: Duration,
    ) -> Result<Vec<Record>, ClassedError> {
        match self {
            Prepared::TcpBw(p) => p.run(start).map_err(|e| (sock_code(&e), e.to_string())),
            Prepared::RdmaBw(p) => p.run(start).map_err(|e| (rdma_code(&e), e.to_string())),
            Prepared::RdmaLat(p) => p.run(start).map_err(|e| (rdma_code(&e), e.to_string())),
            Prepared::Whole => {
                start.wait();
                retry_busy(retry, || run_client(kind, target, cfg, params))
            }
        }
    }
}

/// A target still finishing its previous test answers busy for a moment:
/// try again within `within` (the test has not started then).
fn retry_busy<T>(
    within: Duration,
    mut f: impl FnMut() -> Result<T, ClassedError>,
) -> Result<T, ClassedError> {
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match f() {
            Err((ErrorCode::Busy, _)) if t0.elapsed() + pause < within => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            r => return r,
        }
    }
}

/// Why `target` cannot be a drive's target, judged on its canonical form
/// (`::ffff:a.b.c.d` is `a.b.c.d`). A loopback target is only for an agent
/// the runner reached over loopback (`via`): on a node, loopback holds the
/// node's own services.
pub fn check_target(target: SocketAddr, via: IpAddr) -> Result<SocketAddr, String> {
    let ip = target.ip().to_canonical();
    let bad = |why: &str| Err(format!("target {target} {why}"));
    if target.port() == 0 {
        return bad("has port 0: not an agent address");
    }
    if ip.is_unspecified() {
        return bad("is the unspecified address: not an agent address");
    }
    if ip.is_multicast() {
        return bad("is a multicast address: not an agent address");
    }
    if let IpAddr::V4(v4) = ip {
        if v4.is_broadcast() {
            return bad("is the broadcast address: not an agent address");
        }
    }
    if ip.is_loopback() && !via.to_canonical().is_loopback() {
        return bad(
            "is a loopback address: a drive aims at other nodes' agents (loopback only for \
             an agent the runner reached over loopback)",
        );
    }
    Ok(SocketAddr::new(ip, target.port()))
}

/// The one answer for a target that did not prove it is an agent of this
/// cluster, whatever the reason.
pub fn not_proven(target: SocketAddr, timeout: Duration) -> ServeError {
    ServeError::new(
        ErrorCode::Timeout,
        format!(
            "{target} did not prove within {:.1} s that it is a fabperf agent of this cluster \
             (no answer, not a fabperf agent, or another token); no test was started toward \
             it. The driving agent's log says why",
            timeout.as_secs_f64()
        ),
    )
}

impl DriveKind {
    /// The target's proof: fabperf's handshake with mutual authentication
    /// (when this agent has a token), then bye. Failure answers after the
    /// full timeout, with the one text of [`not_proven`].
    fn prove(&self, target: SocketAddr, peer: SocketAddr) -> Result<(), ServeError> {
        let t0 = Instant::now();
        let cfg = ClientConfig {
            token: self.token.clone(),
            timeout: self.timeout,
            group: None,
        };
        match fabperf_proto::query_agent(target, &cfg) {
            Ok(_) => Ok(()),
            Err(e) => {
                (self.log)(&format!(
                    "{peer}: drive: the target {target} did not prove it is a fabperf agent of \
                     this cluster: {e}"
                ));
                let left = (t0 + self.timeout).saturating_duration_since(Instant::now());
                std::thread::sleep(left);
                Err(not_proven(target, self.timeout))
            }
        }
    }
}

impl TestKind for DriveKind {
    fn name(&self) -> &'static str {
        DRIVE
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: Value) -> Result<(), ServeError> {
        let p: DriveParams = decode_params(DRIVE, params)?;
        let Some(kind) = Kind::parse(&p.test) else {
            return Err(ServeError::bad_request(format!(
                "drive: {:?} is not a test this agent can drive; one of: {}",
                p.test,
                Kind::ALL.map(Kind::name).join(", ")
            )));
        };
        validate_params(kind, &p.params)
            .map_err(|e| ServeError::bad_request(format!("drive {}: {e}", kind.name())))?;
        let target = check_target(p.target, ctx.local().ip()).map_err(ServeError::bad_request)?;
        let secs = inner_secs(kind, &p.params);
        // Refuse a test longer than the agent allows before accepting.
        ctx.limits.check_duration(secs)?;
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::json!({}),
        })?;
        // Set-up: the proof, the inner test's set-up (with busy retries),
        // and the wait for the runner's go, each within the timeout.
        ctx.limit_duration(secs + 4.0 * self.timeout.as_secs_f64())?;
        let peer = ctx.peer();
        self.prove(target, peer)?;
        let cfg = ClientConfig {
            token: self.token.clone(),
            timeout: self.timeout,
            group: p.group.clone(),
        };
        let wrap = |(code, msg): ClassedError| {
            ServeError::new(code, format!("{} to {target}: {msg}", kind.name()))
        };
        let prepared =
            retry_busy(self.timeout, || prepare(kind, target, &cfg, &p.params)).map_err(wrap)?;
        let start = if p.sync {
            ctx.ctl.send_test(&Ready { ready: true })?;
            let go: Go = ctx.ctl.recv_test("the runner's go")?;
            if !go.go {
                return Ok(());
            }
            let delay = fabperf_proto::start::check_delay(go.start_in_s.unwrap_or(0.0))
                .map_err(ServeError::bad_request)?;
            Start::after(delay, true)
        } else {
            Start::now()
        };
        // The agent ends the drive by its own clock: the start delay, the
        // inner test's length, and the client's allowance (its timeout).
        ctx.limit_duration(start.delay_s() + secs + 2.0 * self.timeout.as_secs_f64())?;
        let t0 = start.at;
        let records = prepared
            .run(kind, target, &cfg, &p.params, start, self.timeout)
            .map_err(wrap)?;
        // Return as soon as the results are out, so this agent is free for
        // the runner's next request (it does not wait for a bye).
        ctx.ctl.send_test(&DriveResult {
            records,
            test_s: t0.elapsed().as_secs_f64(),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_class_through_every_engine() {
        let busy = || ProtoError::Remote {
            code: ErrorCode::Busy,
            message: "agent is running tcp-bw".into(),
        };
        assert_eq!(
            rdma_code(&fabperf_rdma::RdmaError::Proto(busy())),
            ErrorCode::Busy
        );
        assert_eq!(
            sock_code(&fabperf_sock::SockError::Proto(busy())),
            ErrorCode::Busy
        );
        assert_eq!(
            mtu_code(&fabperf_mtu::MtuError::Agent(busy())),
            ErrorCode::Busy
        );
        assert_eq!(
            rdma_code(&fabperf_rdma::RdmaError::Stalled("x".into())),
            ErrorCode::Timeout
        );
        assert_eq!(
            rdma_code(&fabperf_rdma::RdmaError::Limit("x".into())),
            ErrorCode::LimitExceeded
        );
        assert_eq!(
            rdma_code(&fabperf_rdma::RdmaError::BadRequest("x".into())),
            ErrorCode::BadRequest
        );
        assert_eq!(
            proto_code(&ProtoError::Closed { what: "x".into() }),
            ErrorCode::Timeout
        );
        assert_eq!(
            proto_code(&ProtoError::Auth("x".into())),
            ErrorCode::AuthFailed
        );
        assert_eq!(
            load_code(&fabperf_http::LoadError::Limit("x".into())),
            ErrorCode::LimitExceeded
        );
        // The busy retry fires on the class, whatever the engine.
        let mut n = 0;
        let r: Result<(), ClassedError> = retry_busy(Duration::from_secs(5), || {
            n += 1;
            if n < 3 {
                Err((
                    rdma_code(&fabperf_rdma::RdmaError::Proto(busy())),
                    "busy".into(),
                ))
            } else {
                Ok(())
            }
        });
        assert!(r.is_ok());
        assert_eq!(n, 3);
    }

    /// Both RDMA kinds are set up before the start (their own `Prepared`
    /// arm); a bad request fails the set-up with its class, before any
    /// device or connection, and a kind without a separate set-up waits
    /// for the start whole.
    #[test]
    fn rdma_kinds_are_prepared_and_bad_requests_keep_their_class() {
        let cfg = ClientConfig {
            token: None,
            timeout: Duration::from_secs(1),
            group: None,
        };
        // Nothing listens there: only a request refused before connecting
        // can come back from it.
        let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for kind in [Kind::RdmaBw, Kind::RdmaLat] {
            for (params, want) in [
                (serde_json::json!({"sizes": [0]}), "outside"),
                (serde_json::json!({"iterations": 0}), "at least 1"),
                (serde_json::json!({"sizes": [2], "sl": 16}), "--sl 16"),
            ] {
                match prepare(kind, nowhere, &cfg, &params) {
                    Err((ErrorCode::BadRequest, m)) => {
                        assert!(m.contains(want), "{kind:?} {params}: {m}")
                    }
                    Err(e) => panic!("{kind:?} {params}: {e:?}"),
                    Ok(_) => panic!("{kind:?} {params}: prepared"),
                }
            }
            // Parameters that do not decode are a bad request too.
            let e = prepare(kind, nowhere, &cfg, &serde_json::json!({"sizes": "x"}));
            assert!(matches!(e, Err((ErrorCode::BadRequest, _))), "{kind:?}");
        }
        let whole = prepare(Kind::TcpLat, nowhere, &cfg, &serde_json::json!({}));
        assert!(matches!(whole, Ok(Prepared::Whole)));
    }

    #[test]
    fn targets_are_judged_on_their_canonical_form() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let node: IpAddr = "10.0.0.1".parse().unwrap();
        let t = |s: &str| s.parse::<SocketAddr>().unwrap();
        for bad in [
            "0.0.0.0:5301",
            "[::]:5301",
            "[::ffff:0.0.0.0]:5301",
            "[::ffff:255.255.255.255]:5301",
            "255.255.255.255:5301",
            "224.0.0.1:5301",
            "[ff02::1]:5301",
            "10.0.0.2:0",
        ] {
            assert!(check_target(t(bad), lo).is_err(), "{bad} accepted");
        }
        // Loopback only for an agent reached over loopback, mapped or not.
        for l in ["127.0.0.1:5301", "[::ffff:127.0.0.2]:5301", "[::1]:5301"] {
            assert!(
                check_target(t(l), node).is_err(),
                "{l} accepted via a node address"
            );
            assert!(check_target(t(l), lo).is_ok(), "{l} refused via loopback");
        }
        assert_eq!(
            check_target(t("[::ffff:10.0.0.2]:5301"), node).unwrap(),
            t("10.0.0.2:5301")
        );
    }
}
