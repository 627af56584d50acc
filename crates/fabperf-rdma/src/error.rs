//! Errors, and the words that explain them.

use fabperf_proto::{ErrorCode, ProtoError, ServeError};
use std::fmt;

/// Why no RDMA test can run on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaUnavailable {
    /// libibverbs.so.1 could not be loaded.
    NoLibrary,
    /// libibverbs is there but the kernel has no RDMA core (ENOSYS) or
    /// /dev/infiniband is missing.
    NoKernelSupport(String),
    /// The stack works but no RDMA device is registered.
    NoDevice,
    /// `--device NAME` names a device that does not exist.
    DeviceNotFound {
        name: String,
        available: Vec<String>,
    },
    /// Devices exist but no port is ACTIVE (each entry: "rxe0 port 1: DOWN").
    NoActivePort(Vec<String>),
    /// The requested device/port is not ACTIVE.
    PortNotActive {
        device: String,
        port: u8,
        state: String,
    },
    /// The requested port does not exist.
    NoSuchPort { device: String, port: u8, ports: u8 },
    /// Anything else while listing or opening devices.
    Other(String),
}

impl fmt::Display for RdmaUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaUnavailable::NoLibrary => write!(
                f,
                "no RDMA stack here: no verbs library (libibverbs.so.1 could not be loaded); \
                 install rdma-core's libibverbs1 and ibverbs-providers"
            ),
            RdmaUnavailable::NoKernelSupport(e) => write!(
                f,
                "no RDMA stack here: the kernel offers no RDMA verbs (ibv_get_device_list: {e}); \
                 load the NIC's RDMA driver (e.g. mlx5_ib) and ib_uverbs, or create a soft-RoCE \
                 device (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0)"
            ),
            RdmaUnavailable::NoDevice => write!(
                f,
                "no RDMA device: libibverbs and the kernel RDMA core are present but no device is \
                 registered (check `rdma link` / `ibv_devices`; load the NIC's RDMA driver, or \
                 `rdma link add rxe0 type rxe netdev eth0` for soft-RoCE; in a pod, request the \
                 RDMA device resource)"
            ),
            RdmaUnavailable::DeviceNotFound { name, available } => write!(
                f,
                "no RDMA device named '{name}'; available: {}",
                if available.is_empty() {
                    "none".to_string()
                } else {
                    available.join(", ")
                }
            ),
            RdmaUnavailable::NoActivePort(ports) => write!(
                f,
                "no ACTIVE RDMA port: {}; bring the link up (cable, switch port, `ip link set DEV up`) \
                 and on InfiniBand make sure a subnet manager runs (a port stuck in INIT has none)",
                ports.join("; ")
            ),
            RdmaUnavailable::PortNotActive {
                device,
                port,
                state,
            } => write!(
                f,
                "{device} port {port} is {state}, not ACTIVE; bring the link up (on InfiniBand a \
                 port in INIT means no subnet manager) or pick another port with --ib-port / \
                 another device with --device"
            ),
            RdmaUnavailable::NoSuchPort {
                device,
                port,
                ports,
            } => write!(f, "{device} has no port {port} (it has {ports} port(s), numbered from 1)"),
            RdmaUnavailable::Other(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for RdmaUnavailable {}

/// Map the errno of a failed `ibv_get_device_list` to what it means.
pub fn device_list_error(errno: Option<i32>, text: &str) -> RdmaUnavailable {
    match errno {
        // sideway's loader sets EOPNOTSUPP when libibverbs.so.1 was not found.
        Some(libc::EOPNOTSUPP) => RdmaUnavailable::NoLibrary,
        Some(libc::ENOSYS) | Some(libc::ENOENT) | Some(libc::ENODEV) => {
            RdmaUnavailable::NoKernelSupport(text.to_string())
        }
        _ => RdmaUnavailable::Other(format!("listing RDMA devices failed: {text}")),
    }
}

/// Everything that can go wrong in an RDMA test.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    #[error(transparent)]
    Unavailable(#[from] RdmaUnavailable),
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error("invalid request: {0}")]
    BadRequest(String),
    #[error("{0}")]
    Limit(String),
    /// Memory registration failed (message explains memlock).
    #[error("{0}")]
    Register(String),
    /// QP could not reach RTR/RTS, or traffic never got through.
    #[error("{0}")]
    Connect(String),
    /// A work completion with an error status.
    #[error("{0}")]
    Completion(String),
    /// The peer stopped answering.
    #[error("{0}")]
    Stalled(String),
    #[error("{0}")]
    Setup(String),
}

impl RdmaError {
    /// The error to send to the client from the agent.
    pub fn to_serve(&self) -> ServeError {
        match self {
            RdmaError::Proto(p) => ServeError {
                code: p.code(),
                message: p.to_string(),
                connection_lost: p.is_connection_lost(),
            },
            RdmaError::BadRequest(m) => ServeError::bad_request(m.clone()),
            RdmaError::Limit(m) => ServeError::new(ErrorCode::LimitExceeded, m.clone()),
            RdmaError::Stalled(m) => ServeError::new(ErrorCode::Timeout, format!("agent: {m}")),
            other => ServeError::failed(format!("agent: {other}")),
        }
    }
}

impl From<ServeError> for RdmaError {
    fn from(e: ServeError) -> Self {
        match e.code {
            ErrorCode::LimitExceeded => RdmaError::Limit(e.message),
            _ => RdmaError::BadRequest(e.message),
        }
    }
}

/// The message for a failed `ibv_reg_mr` of `bytes` bytes, after
/// `already` bytes registered by the same test.
pub(crate) fn register_error(
    bytes: usize,
    what: &str,
    err: &std::io::Error,
    memlock: Option<u64>,
    already: usize,
) -> String {
    let errno = err.raw_os_error();
    if errno == Some(libc::ENOMEM) || errno == Some(libc::EPERM) || errno == Some(libc::EAGAIN) {
        let limit = match memlock {
            Some(l) => format!("{l} bytes"),
            None => "unlimited".to_string(),
        };
        let total = if already > 0 {
            format!(
                " (the test pins {} bytes in all: {already} already registered)",
                already + bytes
            )
        } else {
            String::new()
        };
        format!(
            "ibv_reg_mr of the {what} ({bytes} bytes) failed: {err}. Registered memory is pinned and \
             counts against RLIMIT_MEMLOCK (now {limit}); at least {bytes} bytes more must be \
             lockable{total}. Fix: `ulimit -l unlimited` in the shell that starts fabperf (or \
             LimitMEMLOCK=infinity in its systemd unit); in a container add the IPC_LOCK capability \
             and raise the runtime's limit (containerd/docker service LimitMEMLOCK=infinity, or \
             --ulimit memlock=-1)"
        )
    } else {
        format!("ibv_reg_mr of the {what} ({bytes} bytes) failed: {err}")
    }
}

/// What a work-completion status means for the user.
pub(crate) fn wc_hint(status: u32) -> &'static str {
    match status {
        // IBV_WC_RETRY_EXC_ERR
        12 => {
            "the peer never acknowledged: it died, the path drops packets, or the two ends use \
             different GID types / addresses (use the RoCE v2 GID with the IPv4 address on both ends)"
        }
        // IBV_WC_RNR_RETRY_EXC_ERR
        13 => "the receiver had no receive posted for too long (receiver stalled or died)",
        // IBV_WC_REM_ACCESS_ERR
        10 => "remote access error: the peer's memory key or address was refused (wrong rkey, address outside its buffer, or missing remote access rights)",
        // IBV_WC_REM_INV_REQ_ERR
        9 => "remote invalid request: the peer refused the operation (message larger than its receive buffer, or operation not allowed on its QP)",
        // IBV_WC_REM_OP_ERR
        11 => "remote operation error: the peer's QP failed to process the request",
        // IBV_WC_LOC_PROT_ERR
        4 => "local protection error: a local buffer address or key was wrong",
        // IBV_WC_LOC_LEN_ERR
        1 => "local length error: message larger than the posted receive buffer",
        // IBV_WC_WR_FLUSH_ERR
        5 => "the queue pair went to the error state (an earlier failure or the peer went away)",
        // IBV_WC_RESP_TIMEOUT_ERR
        19 => "response timeout: the peer stopped answering",
        // IBV_WC_LOC_ACCESS_ERR
        8 => "local access error: a local memory key lacks the needed access rights",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_list_errors_say_which() {
        let no_lib = device_list_error(Some(libc::EOPNOTSUPP), "x").to_string();
        assert!(no_lib.contains("no verbs library"), "{no_lib}");
        assert!(no_lib.starts_with("no RDMA stack here"));
        let no_kernel =
            device_list_error(Some(libc::ENOSYS), "Function not implemented").to_string();
        assert!(no_kernel.contains("no RDMA stack here"), "{no_kernel}");
        assert!(no_kernel.contains("Function not implemented"));
        assert!(RdmaUnavailable::NoDevice
            .to_string()
            .starts_with("no RDMA device"));
        let port = RdmaUnavailable::PortNotActive {
            device: "mlx5_0".into(),
            port: 1,
            state: "INIT".into(),
        }
        .to_string();
        assert!(
            port.contains("not ACTIVE") && port.contains("subnet manager"),
            "{port}"
        );
        let nf = RdmaUnavailable::DeviceNotFound {
            name: "mlx5_9".into(),
            available: vec!["rxe0".into()],
        }
        .to_string();
        assert!(nf.contains("mlx5_9") && nf.contains("rxe0"));
    }

    #[test]
    fn memlock_message_names_limit_bytes_and_fix() {
        let e = std::io::Error::from_raw_os_error(libc::ENOMEM);
        let m = register_error(1 << 20, "source buffer", &e, Some(65536), 0);
        assert!(m.contains("RLIMIT_MEMLOCK"), "{m}");
        assert!(m.contains("65536 bytes"), "{m}");
        assert!(m.contains("source buffer (1048576 bytes)"), "{m}");
        assert!(!m.contains("in all"), "{m}");
        // The destination buffer's own size, with the source's counted apart.
        let m = register_error(1 << 20, "destination buffer", &e, Some(65536), 1 << 20);
        assert!(m.contains("destination buffer (1048576 bytes)"), "{m}");
        assert!(
            m.contains("2097152 bytes in all: 1048576 already registered"),
            "{m}"
        );
        assert!(m.contains("ulimit -l"), "{m}");
        assert!(m.contains("IPC_LOCK"), "{m}");
        assert!(m.contains("LimitMEMLOCK"), "{m}");
        let other = register_error(
            10,
            "x",
            &std::io::Error::from_raw_os_error(libc::EINVAL),
            None,
            0,
        );
        assert!(!other.contains("RLIMIT_MEMLOCK"));
    }

    #[test]
    fn retry_exceeded_hint_suggests_roce_v2() {
        assert!(wc_hint(12).contains("RoCE v2"));
        assert!(wc_hint(10).contains("remote access"));
        assert_eq!(wc_hint(0), "");
    }

    #[test]
    fn serve_error_codes() {
        assert_eq!(
            RdmaError::Limit("x".into()).to_serve().code,
            ErrorCode::LimitExceeded
        );
        assert_eq!(
            RdmaError::BadRequest("x".into()).to_serve().code,
            ErrorCode::BadRequest
        );
        assert_eq!(
            RdmaError::Completion("x".into()).to_serve().code,
            ErrorCode::TestFailed
        );
    }
}
