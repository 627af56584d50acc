//! fabperf's socket engines: `tcp-bw`, `tcp-lat`, `udp-bw`, `udp-lat`.
//!
//! Each test has a client function (`run_*`, returns result records) and an
//! agent-side [`TestKind`] (see [`kinds`]). Both sides talk over the
//! control channel of `fabperf-proto`; TCP data connections go to the
//! agent's same port (cookie-routed), UDP tests bind the agent's same IP and
//! port number over UDP, so one port number is all a firewall or Kubernetes
//! Service has to let through.
//!
//! Measurement rules shared by the engines:
//! - every blocking wait is bounded by the client's `--timeout` (client) or
//!   the agent's I/O timeout (agent); a peer that dies mid-test is an error
//!   within that time, and the agent side returns so the agent serves the
//!   next client;
//! - buffers are allocated once per stream before the measured interval;
//!   the data loops make one send/recv system call per message and no
//!   allocation;
//! - the warm-up (`omit`) is excluded from the measured interval;
//! - CPU figures are the thread CPU time of the data threads of each end
//!   over the measured wall time, next to each host's CPU time (user,
//!   system, irq, softirq from /proc/stat) over the same interval;
//! - records are self-consistent (`Record::check`): a figure that is not
//!   known is absent, with a warning from `fabperf_results::warnings`.
//!
//! Layout: one file per test kind (client and agent side) beside the shared
//! params, socket and CPU helpers; `tcp_bw/` holds its data path (`streams`)
//! and its records (`records`).

mod cpu;
mod error;
mod net;
mod params;
mod tcp_bw;
mod tcp_lat;
mod udp;
mod udp_bw;
mod udp_lat;

pub use error::SockError;
pub use params::{
    Direction, TcpBwParams, TcpLatParams, UdpBwParams, UdpLatParams, MAX_STREAMS, TCP_MAX_SIZE,
    UDP_HEADER, UDP_MAX_SIZE,
};
pub use tcp_bw::{prepare_tcp_bw, run_tcp_bw, TcpBw, TcpBwPrepared};
pub use tcp_lat::{run_tcp_lat, TcpLat};
pub use udp::test_support;
pub use udp_bw::{run_udp_bw, UdpBw};
pub use udp_lat::{run_udp_lat, UdpLat};

/// The socket test kinds, for the agent.
pub fn kinds() -> Vec<Box<dyn fabperf_proto::TestKind>> {
    vec![
        Box::new(TcpBw),
        Box::new(TcpLat),
        Box::new(UdpBw),
        Box::new(UdpLat),
    ]
}
