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

/// Everything that can go wrong on a control or data connection.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
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
    #[error("agent refused: {} — {message}", .code.as_str())]
    Remote { code: ErrorCode, message: String },
}

impl ProtoError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ProtoError {
        ProtoError::Io {
            context: context.into(),
            source,
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
