use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Error codes carried by `Msg::Error`; both ends print the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    VersionMismatch,
    AuthRequired,
    AuthFailed,
    UnknownTest,
    Busy,
    BadFrame,
    BadRequest,
    LimitExceeded,
    Timeout,
    TestFailed,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::VersionMismatch => "version mismatch",
            ErrorCode::AuthRequired => "authentication required",
            ErrorCode::AuthFailed => "authentication failed",
            ErrorCode::UnknownTest => "unknown test",
            ErrorCode::Busy => "agent busy",
            ErrorCode::BadFrame => "bad frame",
            ErrorCode::BadRequest => "bad request",
            ErrorCode::LimitExceeded => "limit exceeded",
            ErrorCode::Timeout => "timeout",
            ErrorCode::TestFailed => "test failed",
            ErrorCode::Internal => "internal error",
        }
    }
}

impl ProtoError {
    /// A peer's `Error` frame, with its text escaped (it is shown to
    /// people and logged).
    pub fn remote(code: ErrorCode, message: &str) -> ProtoError {
        ProtoError::Remote {
            code,
            message: crate::text::escape(message),
        }
    }
}

/// Everything that can go wrong on a control or data connection.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The OS error is part of the message and deliberately not a
    /// `source()`, so printing the error chain does not repeat it.
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: std::io::Error,
    },
    #[error("timed out after {:.1} s waiting for {what}; the peer stalled or is unreachable", .waited.as_secs_f64())]
    Timeout { what: String, waited: Duration },
    #[error("the peer closed the connection while {what}")]
    Closed { what: String },
    #[error(
        "the peer is not a fabperf agent or client (first bytes {got:02x?}); check host and port"
    )]
    BadMagic { got: [u8; 4] },
    #[error("protocol version mismatch: this side speaks v{local}, the peer v{remote}; run the same fabperf version on both ends")]
    VersionMismatch { local: u16, remote: u16 },
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: usize, max: usize },
    #[error("empty frame")]
    EmptyFrame,
    #[error("malformed frame: {0}")]
    BadJson(String),
    #[error("unexpected message: expected {expected}, got {got}")]
    Unexpected { expected: String, got: String },
    #[error("the peer reports: {} — {message}", .code.as_str())]
    Remote { code: ErrorCode, message: String },
    /// This side refuses the peer's authentication (or its lack of it).
    #[error("authentication: {0}")]
    Auth(String),
    /// The agent stopped the test (its time limit passed).
    #[error("{0}")]
    Stopped(String),
    /// An agent refused a data connection (see [`crate::data`]); the
    /// client explains it with [`crate::data::refusal_error`].
    #[error("{} refused the data connection ({})", .0.who(), crate::data::reason_text(.0.reason))]
    Refused(crate::data::DataRefusal),
    /// A data connection or UDP datagrams reached another agent than the
    /// control connection: "this address balanced your … to another agent".
    #[error("{0}")]
    WrongAgent(String),
    /// The agent refused a data connection for another reason.
    #[error("{0}")]
    DataRefused(String),
}

impl ProtoError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ProtoError {
        ProtoError::Io {
            context: context.into(),
            error: source,
        }
    }

    /// The code to send to the peer for this local error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtoError::Io { .. } | ProtoError::Closed { .. } => ErrorCode::Internal,
            ProtoError::Timeout { .. } => ErrorCode::Timeout,
            ProtoError::BadMagic { .. }
            | ProtoError::FrameTooLarge { .. }
            | ProtoError::EmptyFrame
            | ProtoError::BadJson(_)
            | ProtoError::Unexpected { .. } => ErrorCode::BadFrame,
            ProtoError::VersionMismatch { .. } => ErrorCode::VersionMismatch,
            ProtoError::Remote { code, .. } => *code,
            ProtoError::Auth(_) => ErrorCode::AuthFailed,
            ProtoError::Stopped(_) => ErrorCode::LimitExceeded,
            ProtoError::Refused(_) | ProtoError::WrongAgent(_) | ProtoError::DataRefused(_) => {
                ErrorCode::TestFailed
            }
        }
    }

    /// True when the connection is unusable (no point sending an error frame).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            ProtoError::Io { .. } | ProtoError::Closed { .. } | ProtoError::Timeout { .. }
        )
    }
}
