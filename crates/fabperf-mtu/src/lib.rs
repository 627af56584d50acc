//! Path MTU discovery (`fabperf mtu`, docs/mtu.md).
//!
//! The largest IP packet that crosses a path unfragmented, found by a
//! binary search with Don't-Fragment probes: UDP datagrams to a fabperf
//! agent (the `mtu` test kind, which acknowledges each probe and sends
//! datagrams of a requested size back, so both directions are measured)
//! and ICMP echo where this host may send it. The local interface the
//! probes leave through is described with its encapsulation (VXLAN,
//! Geneve, WireGuard, IP-in-IP ...) and the bytes it costs, and an
//! interface configured for more than its path carries is reported as a
//! mismatch (`fabperf doctor --mtu-results` turns that into a finding).

pub mod agent;
pub mod client;
pub mod doctor;
pub mod path;
pub mod plan;
pub mod report;
pub mod search;
pub mod sys;
pub mod wire;

pub use agent::{MtuKind, MTU_KIND};
pub use client::{discover, MtuError, Options};
pub use report::{Crossing, Mismatch, MtuReport, PathReport, MTU_SCHEMA};
