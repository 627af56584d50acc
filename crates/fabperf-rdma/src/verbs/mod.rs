//! Safe layer over sideway: device discovery, and an `Endpoint` (PD, CQ,
//! RC queue pairs, registered buffers) with the few operations the tests
//! need. Crate-private: the public API is `run_bw`/`run_lat` and the agent
//! kinds.
//!
//! Teardown never takes the process down: sideway asserts that
//! `ibv_destroy_qp`/`ibv_destroy_cq` succeed, which panics in a destructor
//! (and aborts when that happens during unwinding). `Endpoint::close`
//! destroys the queue pairs and the CQ one by one inside `catch_unwind` and
//! reports failures as text; while the thread is already unwinding it
//! leaks them instead. Buffers are deregistered with the result checked
//! (see `sys::RegBuf`).
//!
//! `device` opens devices and picks the port and GID, `endpoint` is the
//! endpoint (its queue pairs, posts and completions, connection and
//! teardown), `memory` registers its buffers (host or GPU memory); here is
//! the operation they carry out.

mod device;
mod endpoint;
mod memory;

pub(crate) use device::{open_device, Device};
#[cfg(test)]
pub(crate) use endpoint::{signaled, wr_id};
pub(crate) use endpoint::{wr_qp, wr_seq, Endpoint, EpConfig, Wc, RECV_FLAG};

/// RDMA operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Write,
    Read,
    Send,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
        }
    }
}

impl std::str::FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Op, String> {
        match s {
            "write" => Ok(Op::Write),
            "read" => Ok(Op::Read),
            "send" => Ok(Op::Send),
            _ => Err(format!(
                "unknown RDMA operation '{s}': use write, read or send"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_parsing() {
        assert_eq!("read".parse::<Op>().unwrap(), Op::Read);
        assert!("atomic"
            .parse::<Op>()
            .unwrap_err()
            .contains("write, read or send"));
    }
}
