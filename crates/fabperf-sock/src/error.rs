use fabperf_proto::{ProtoError, ServeError};
use std::io;

/// Why a socket test failed. The message says what happened and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SockError {
    /// The parameters are invalid; nothing was sent.
    #[error("invalid parameters: {0}")]
    BadParams(String),
    /// The control channel failed or the agent refused.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// A data socket failed. (The cause is part of the message, not a
    /// separate source, so `{:#}` chains do not print it twice.)
    #[error("{what}: {}", describe(.source))]
    Data { what: String, source: io::Error },
    /// The peer stopped answering or sending within the timeout.
    #[error("{0}")]
    PeerGone(String),
    /// The peer sent something that breaks the test's rules.
    #[error("protocol violation: {0}")]
    Protocol(String),
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "no progress within the timeout: the peer stalled, died or the path drops packets"
                .to_string()
        }
        _ => format!("{e}{}", hint(e)),
    }
}

fn hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
            " (the peer closed the connection: did it stop or fail? see its log)"
        }
        io::ErrorKind::ConnectionRefused => {
            " (nothing listens there any more: the agent stopped, or a firewall rejects the port)"
        }
        io::ErrorKind::AddrInUse => " (another program holds this port)",
        _ => "",
    }
}

impl SockError {
    pub(crate) fn data(what: impl Into<String>, source: io::Error) -> SockError {
        SockError::Data {
            what: what.into(),
            source,
        }
    }
}

impl From<SockError> for ServeError {
    fn from(e: SockError) -> ServeError {
        match e {
            SockError::Proto(p) => p.into(),
            SockError::BadParams(m) => ServeError::bad_request(m),
            SockError::Data { .. } | SockError::PeerGone(_) | SockError::Protocol(_) => {
                ServeError::failed(e)
            }
        }
    }
}
