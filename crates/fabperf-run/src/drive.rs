//! The `drive` test kind: an agent runs the client side of a test against
//! another agent, on the runner's behalf, and returns the records.
//!
//! ```text
//! runner                         agent A (drive)                 agent B
//!   Start {test: drive, params: {target: B, test, params, sync}} ->
//!         <- Accept
//!   [sync] Test {go} ->
//!                                  connect, Start {test, params} ->
//!                                  ... the test itself ...
//!         <- Test {records}
//!   Bye ->
//! ```
//!
//! A drive request is as trusted as the runner's connection: on an agent
//! with `--token-file` only token holders may send one, and the agent then
//! authenticates to the target with its own token. The target must be an IP
//! address and port (no name resolution on the agent), the inner test is one
//! of the measurement kinds (a drive cannot start a drive), and its
//! parameters pass the same checks as on the command line.

use crate::plan::{validate_params, Kind};
use fabperf_proto::{
    decode_params, ClientConfig, ErrorCode, Msg, ProtoError, ServeCtx, ServeError, TestKind,
};
use fabperf_results::Record;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

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
    /// Wait for the runner's `go` before starting (flows that start together).
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
    /// Seconds the inner test took on the driving agent (connect to results).
    pub test_s: f64,
}

/// The runner's start signal for synchronized flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Go {
    pub go: bool,
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

/// The agent side of `drive`.
pub struct DriveKind {
    /// The token this agent presents to targets (its own --token-file).
    pub token: Option<Vec<u8>>,
    /// Client timeout toward targets.
    pub timeout: Duration,
}

impl DriveKind {
    pub fn new(token: Option<Vec<u8>>, timeout: Duration) -> DriveKind {
        DriveKind { token, timeout }
    }
}

/// Run the client side of `kind` against `target`.
pub fn run_client(
    kind: Kind,
    target: SocketAddr,
    cfg: &ClientConfig,
    params: &Value,
) -> Result<Vec<Record>, (ErrorCode, String)> {
    fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, (ErrorCode, String)> {
        serde_json::from_value(v.clone()).map_err(|e| (ErrorCode::BadRequest, e.to_string()))
    }
    fn code_of(e: &ProtoError) -> ErrorCode {
        match e {
            ProtoError::Remote { code, .. } => *code,
            // The target did not answer or went away: worth a retry.
            ProtoError::Timeout { .. } | ProtoError::Io { .. } | ProtoError::Closed { .. } => {
                ErrorCode::Timeout
            }
            _ => ErrorCode::TestFailed,
        }
    }
    let sock = |r: Result<Vec<Record>, fabperf_sock::SockError>| {
        r.map_err(|e| {
            let code = match &e {
                fabperf_sock::SockError::Proto(p) => code_of(p),
                fabperf_sock::SockError::BadParams(_) => ErrorCode::BadRequest,
                fabperf_sock::SockError::PeerGone(_) => ErrorCode::Timeout,
                _ => ErrorCode::TestFailed,
            };
            (code, e.to_string())
        })
    };
    match kind {
        Kind::TcpBw => sock(fabperf_sock::run_tcp_bw(target, cfg, &decode(params)?)),
        Kind::TcpLat => sock(fabperf_sock::run_tcp_lat(target, cfg, &decode(params)?)),
        Kind::UdpBw => sock(fabperf_sock::run_udp_bw(target, cfg, &decode(params)?)),
        Kind::UdpLat => sock(fabperf_sock::run_udp_lat(target, cfg, &decode(params)?)),
        Kind::RdmaBw => fabperf_rdma::run_bw(target, cfg, &decode(params)?)
            .map_err(|e| (ErrorCode::TestFailed, e.to_string())),
        Kind::RdmaLat => fabperf_rdma::run_lat(target, cfg, &decode(params)?)
            .map_err(|e| (ErrorCode::TestFailed, e.to_string())),
        Kind::Mtu => fabperf_mtu::plan::run(target, cfg, &decode(params)?)
            .map_err(|e| (ErrorCode::TestFailed, e.to_string())),
        // HTTP is unauthenticated: the target's HTTP server, not its
        // fabperf protocol, so no token and no group.
        Kind::HttpLoad => {
            fabperf_http::run_load(&fabperf_http::Target::new(target), &decode(params)?).map_err(
                |e| {
                    let code = match e {
                        fabperf_http::LoadError::BadParams(_) => ErrorCode::BadRequest,
                        _ => ErrorCode::TestFailed,
                    };
                    (code, e.to_string())
                },
            )
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
        if p.target.ip().is_unspecified() || p.target.port() == 0 {
            return Err(ServeError::bad_request(format!(
                "drive: target {} is not an agent address",
                p.target
            )));
        }
        let secs = inner_secs(kind, &p.params);
        // Refuse a test longer than the agent allows before accepting;
        // the clock starts once the flow starts.
        ctx.limits.check_duration(secs)?;
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::json!({}),
        })?;
        if p.sync {
            let go: Go = ctx.ctl.recv_test("the runner's go")?;
            if !go.go {
                return Ok(());
            }
        }
        // The agent ends the drive by its own clock: the inner test's length
        // plus the client's set-up allowance (its handshake timeout).
        ctx.limit_duration(secs + self.timeout.as_secs_f64())?;
        let cfg = ClientConfig {
            token: self.token.clone(),
            timeout: self.timeout,
            group: p.group.clone(),
        };
        let t0 = std::time::Instant::now();
        // A target still finishing its previous test answers busy for a
        // moment: try again within the client timeout (the test has not
        // started then).
        let mut pause = std::time::Duration::from_millis(20);
        let records = loop {
            match run_client(kind, p.target, &cfg, &p.params) {
                Err((ErrorCode::Busy, _)) if t0.elapsed() + pause < self.timeout => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(500));
                }
                r => {
                    break r.map_err(|(code, msg)| {
                        ServeError::new(code, format!("{} to {}: {msg}", kind.name(), p.target))
                    })?
                }
            }
        };
        // Return as soon as the results are out, so this agent is free for
        // the runner's next request (it does not wait for a bye).
        ctx.ctl.send_test(&DriveResult {
            records,
            test_s: t0.elapsed().as_secs_f64(),
        })?;
        Ok(())
    }
}
