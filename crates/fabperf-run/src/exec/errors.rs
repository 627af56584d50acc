//! Why a run stops, why one attempt at a cell failed, and which failures
//! are worth another attempt.

use fabperf_proto::{ErrorCode, ProtoError};

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

/// Why one attempt at a cell failed.
#[derive(Debug, Clone)]
pub(super) struct CellError {
    pub(super) msg: String,
    /// Worth another attempt (busy agent, timeout, connection refused).
    pub(super) transient: bool,
}

pub(super) fn classify(e: &ProtoError) -> bool {
    match e {
        ProtoError::Remote { code, .. } => matches!(
            code,
            ErrorCode::Busy | ErrorCode::Timeout | ErrorCode::Internal
        ),
        ProtoError::Timeout { .. } | ProtoError::Closed { .. } | ProtoError::Io { .. } => true,
        _ => false,
    }
}
