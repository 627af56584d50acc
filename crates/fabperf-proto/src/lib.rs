//! fabperf's control protocol.
//!
//! One TCP control connection per test. Both ends first send an 8-byte
//! preamble (`FBPF`, protocol version u16 BE, reserved u16), then exchange
//! frames: a u32 big-endian length followed by that many bytes of JSON
//! encoding one [`Msg`]. Frames are bounded by [`MAX_FRAME`].
//!
//! Sequence:
//!
//! ```text
//! client                                 agent
//!   preamble  ------------------------>
//!             <------------------------  preamble
//!             <------------------------  Hello {auth_required, nonce, tests, agent}
//!   (when the agent requires a token:)
//!   Auth {nonce, proof} -------------->
//!             <------------------------  AuthOk {proof} | Error {auth_failed}
//!   Start {test, params} ------------->
//!             <------------------------  Accept {info} | Error {code, message}
//!   ... test-specific Test {body} frames in both directions ...
//!             <------------------------  Test {body: results}
//!   Bye       ------------------------>
//! ```
//!
//! Both proofs are HMACs over both sides' nonces ([`auth`]): a client that
//! holds a token refuses an agent that cannot prove it holds the same one.
//! Everything up to `Start` is the handshake: each side bounds it as a
//! whole by its timeout, and the agent reads at most [`PRE_AUTH_FRAME`]
//! bytes per frame from a peer that has not authenticated.
//!
//! Data connections are separate sockets. TCP data connections go to the
//! agent's same port and start with `FBPD` + a 16-byte cookie the agent
//! handed out in `Accept`, so only one port has to be reachable (firewalls,
//! Kubernetes Services); the agent answers `FBPA`, or a refusal saying why
//! (the cookie is another agent's: the address balanced the connection to
//! another agent, see [`data`]). UDP tests say hello with the cookie on the
//! same port number. A test kind is a [`TestKind`] plug-in: the agent
//! looks it up by name and hands it the control channel; the protocol code
//! never changes when a kind is added.

pub mod auth;
pub mod clock;
mod control;
pub mod cpu;
pub mod data;
mod door;
mod error;
pub mod explain;
mod frame;
mod plugin;
pub mod start;
pub mod text;

pub use control::{connect_test, query_agent, resolve, AgentHello, ClientConfig, Control};
pub use door::{DoorGuard, DoorLog};
pub use error::{ErrorCode, ProtoError};
pub use frame::{
    decode_body, encode_frame, read_frame, read_preamble, write_frame, write_preamble,
    AgentCapacity, AgentIdentity, Msg, Preamble, DATA_MAGIC, DEFAULT_PORT, MAGIC, MAX_FRAME,
    OPEN_START_FRAME, PRE_AUTH_FRAME, PROTO_VERSION,
};
pub use plugin::{
    connect_data, control_has_news, decode_params, open_data, read_data_answer, Cookie, DataHub,
    DataWaiter, Limits, Routed, ServeCtx, ServeError, TestClock, TestKind,
};
pub use start::Start;
