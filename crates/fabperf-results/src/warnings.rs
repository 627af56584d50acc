//! Every warning a record can carry, defined in one place.
//!
//! A warning says why a figure may mislead, or why a key is absent. Each
//! has a stable `id` (kebab-case; exports and reports key on it and it never
//! changes meaning) and a message written here from the variant's data, so
//! the same situation reads the same in every test. Engines build a
//! [`Warning`] and push [`Warning::note`] into `Record::warnings`.
//!
//! Adding a warning: add the variant, its arm in [`Warning::id`] and
//! [`Warning::message`], a line in [`REGISTRY`] and an example in the tests
//! (the tests check that the three agree and that every id is documented
//! in `docs/records.md`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A warning as stored in a record: its stable id and the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub id: String,
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Which end of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Agent,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Agent => "agent",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every warning fabperf puts in a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// No measured interval (nothing completed after the warm-up, or the
    /// interval had zero length): the rate keys are absent.
    NoInterval { what: String },
    /// The measured interval is too short for a stable figure.
    ShortInterval { secs: f64 },
    /// A thread used (nearly) a whole core.
    CpuBound {
        role: String,
        side: Side,
        pct: f64,
        hint: String,
    },
    /// A thread's CPU time could not be read (getrusage failed).
    CpuUnknown { side: Side, why: String },
    /// The host's CPU time could not be read (/proc/stat).
    HostCpuUnknown { side: Side, why: String },
    /// Fewer samples or messages than a stable figure needs.
    FewSamples {
        count: u64,
        what: String,
        hint: String,
    },
    /// A clock read is slow here (the text comes from fabperf-proto's clock module).
    SlowClock { text: String },
    /// The two ends disagree about how many messages went through.
    CountMismatch { text: String },
    /// UDP: nothing reached the receiver.
    UdpBlocked { from: Side, to: Side },
    /// UDP: nothing was sent after the warm-up.
    NothingSent,
    /// UDP: the receiver's loss happened on a saturated receiving host.
    ReceiverCpuLoss { side: Side, pct: f64 },
    /// UDP: the socket receive buffer is smaller than asked for.
    SmallReceiveBuffer { side: Side, got: u64, want: u64 },
    /// UDP: the paced sender could not reach the asked rate.
    RateNotReached { reached_gbps: f64, asked_gbps: f64 },
    /// UDP: the local send queue was full (ENOBUFS) and sends were retried.
    SendQueueFull { side: Side, count: u64 },
    /// UDP: datagrams arrived further behind than the reordering window.
    StaleDatagrams { count: u64, window: u64 },
    /// UDP: no kernel receive timestamps, so no jitter figure.
    NoJitter { side: Side, why: String },
    /// udp-lat: probes without a reply within the probe timeout.
    ProbesLost {
        lost: u64,
        sent: u64,
        timeout_ms: u64,
        late: u64,
    },
    /// tcp-lat: SO_BUSY_POLL could not be set on both ends.
    BusyPollUnset,
    /// RDMA duration mode: fewer than two completions inside the window.
    WindowTooFewCompletions { cq_mod: u32 },
    /// RDMA iteration mode: the bandwidth peak was not computed (more
    /// post/completion points than it keeps). In duration mode there is no
    /// peak by design (as in perftest) and no warning.
    NoPeak { why: String },
    /// RDMA: the polling loops could not run at SCHED_IDLE.
    PollerPriorityRefused { side: Side, text: String },
    /// RDMA: the device reports a different service level or traffic
    /// class for the QP than was asked (a software device may not keep
    /// one that has no meaning on its wire).
    PathSettingDiffers { what: String, asked: u8, got: u8 },
    /// RDMA: deregistering a memory region failed; the buffer was leaked
    /// so the NIC can never write freed memory.
    BufferLeaked { side: Side, text: String },
    /// RDMA: destroying a queue pair failed (reported, not fatal).
    TeardownFailed { side: Side, text: String },
    /// A run's aggregate of concurrent flows (incast, bisection): the
    /// bytes every flow received inside the flows' common interval, over it.
    Aggregate { flows: u32, secs: f64 },
    /// Flows of an aggregate without progress counts: their bytes inside
    /// the common interval are estimated from their mean rate.
    AggregateEstimated { flows: u32 },
    /// `--cpu auto`: the CPUs this end may use hold none of the NIC's NUMA
    /// node, so its threads and buffers sit on another node.
    NumaCpusetMismatch {
        side: Side,
        nic: String,
        node: u32,
        node_cpus: String,
        allowed: String,
    },
    /// The test's buffers landed on another NUMA node than the NIC's.
    BufferOffNode {
        side: Side,
        buffer_node: u32,
        nic_node: u32,
    },
    /// The data threads could not be pinned to the chosen CPUs.
    CpuPinFailed { side: Side, why: String },
    /// A one-stream / one-QP bandwidth test reached less than 90 % of the
    /// port rate.
    BelowPortRate {
        pct: f64,
        port_gbps: f64,
        one: String,
        hint: String,
    },
    /// A bandwidth test's link has no known rate although it is not virtual.
    PortRateUnknown { side: Side, why: String },
    /// Counters this end meant to read could not be read.
    CountersIncomplete { side: Side, what: String },
    /// `fabperf run`: a setting of the cell's tuning profile or policy
    /// rules was not applied or not restored (the text says which, where
    /// and why).
    Tuning { text: String },
    /// http-load at a fixed rate: fewer requests completed than asked.
    RequestRateNotReached { asked: f64, completed: f64 },
    /// http-load at a fixed rate: more than a tenth of the requests were
    /// due while their connection was still busy.
    LateRequests { late: u64, ok: u64 },
    /// http-load: requests failed during the warm-up.
    WarmupErrors { count: u64 },
    /// tcp-lat: the warm-up reached its time limit (the measurement's
    /// length) before its count of round trips.
    WarmupCut { done: u64, asked: u64 },
    /// http-load: no request completed in the measured interval.
    NoRequests,
    /// mtu: what the path's figure was limited by, the interface the
    /// probes left through and its encapsulation.
    MtuPath { text: String },
    /// mtu: an interface is configured for more than its path carries.
    MtuMismatch { text: String },
}

/// `(id, what it means)` for every warning, in the order of the enum.
pub const REGISTRY: &[(&str, &str)] = &[
    (
        "no-interval",
        "nothing was measured after the warm-up; rate keys are absent",
    ),
    (
        "short-interval",
        "the measured interval is too short for a stable figure",
    ),
    (
        "cpu-bound",
        "a test thread used (nearly) a whole core: the host may be the limit",
    ),
    (
        "cpu-unknown",
        "a thread's CPU time could not be read; the CPU key is absent",
    ),
    (
        "host-cpu-unknown",
        "the host's CPU time (/proc/stat) could not be read; host_cpu is absent",
    ),
    (
        "few-samples",
        "fewer samples or messages than a stable figure or tail percentile needs",
    ),
    (
        "slow-clock",
        "a clock read is slow here; latency samples carry part of its cost",
    ),
    (
        "count-mismatch",
        "the two ends counted different numbers of messages",
    ),
    (
        "udp-blocked",
        "no UDP datagram reached the receiver (firewall, NAT, security group)",
    ),
    ("nothing-sent", "the sender sent nothing after the warm-up"),
    (
        "receiver-cpu-loss",
        "datagrams were lost on a receiving host that was CPU bound",
    ),
    (
        "small-receive-buffer",
        "the socket receive buffer is smaller than asked for",
    ),
    (
        "rate-not-reached",
        "the paced UDP sender could not reach the asked rate",
    ),
    (
        "send-queue-full",
        "the local send queue was full (ENOBUFS); sends were retried",
    ),
    (
        "stale-datagrams",
        "datagrams arrived further behind than the reordering window",
    ),
    (
        "no-jitter",
        "no kernel receive timestamps: jitter is not reported",
    ),
    (
        "probes-lost",
        "udp-lat probes got no reply within the probe timeout",
    ),
    (
        "busy-poll-unset",
        "SO_BUSY_POLL could not be set on both ends",
    ),
    (
        "window-too-few-completions",
        "RDMA duration mode: fewer than two completions in the window",
    ),
    ("no-peak", "the RDMA bandwidth peak was not computed"),
    (
        "poller-priority-refused",
        "the RDMA polling loops could not run at SCHED_IDLE",
    ),
    (
        "path-setting-differs",
        "the device reports another service level or traffic class than asked",
    ),
    (
        "buffer-leaked",
        "an RDMA memory region could not be deregistered; its buffer was leaked",
    ),
    (
        "teardown-failed",
        "an RDMA queue pair or completion queue could not be destroyed",
    ),
    (
        "aggregate",
        "the sum of a run cell's concurrent flows (incast, bisection) inside their common interval (when every flow was measuring)",
    ),
    (
        "aggregate-estimated",
        "flows of an aggregate carried no progress counts: their bytes in the common interval are estimated from their mean rate",
    ),
    (
        "numa-cpuset-mismatch",
        "the CPUs this end may use hold none of the NIC's NUMA node",
    ),
    (
        "buffer-off-node",
        "the test's buffers are on another NUMA node than the NIC",
    ),
    (
        "cpu-pin-failed",
        "the data threads could not be pinned to the chosen CPUs",
    ),
    (
        "below-port-rate",
        "one stream or queue pair reached less than 90 % of the port rate",
    ),
    (
        "port-rate-unknown",
        "the link's rate is unknown; port_rate_gbps is absent",
    ),
    (
        "counters-incomplete",
        "some counters of an end could not be read",
    ),
    (
        "tuning",
        "a setting of the cell's tuning profile or policy rules was not applied or not restored",
    ),
    (
        "request-rate-not-reached",
        "http-load at a fixed rate completed fewer requests per second than asked",
    ),
    (
        "late-requests",
        "http-load at a fixed rate: over a tenth of the requests were due while their connection was busy",
    ),
    (
        "warmup-errors",
        "http-load: requests failed during the warm-up (not counted)",
    ),
    (
        "warmup-cut",
        "tcp-lat: the warm-up reached its time limit (the measurement's length) before its count of round trips",
    ),
    (
        "no-requests",
        "http-load: no request completed in the measured interval",
    ),
    (
        "mtu-path",
        "mtu: what limited the path's figure, the interface the probes left through and its encapsulation",
    ),
    (
        "mtu-mismatch",
        "mtu: an interface is configured for a larger MTU than its path carries",
    ),
];

impl Warning {
    /// The stable id.
    pub fn id(&self) -> &'static str {
        match self {
            Warning::NoInterval { .. } => "no-interval",
            Warning::ShortInterval { .. } => "short-interval",
            Warning::CpuBound { .. } => "cpu-bound",
            Warning::CpuUnknown { .. } => "cpu-unknown",
            Warning::HostCpuUnknown { .. } => "host-cpu-unknown",
            Warning::FewSamples { .. } => "few-samples",
            Warning::SlowClock { .. } => "slow-clock",
            Warning::CountMismatch { .. } => "count-mismatch",
            Warning::UdpBlocked { .. } => "udp-blocked",
            Warning::NothingSent => "nothing-sent",
            Warning::ReceiverCpuLoss { .. } => "receiver-cpu-loss",
            Warning::SmallReceiveBuffer { .. } => "small-receive-buffer",
            Warning::RateNotReached { .. } => "rate-not-reached",
            Warning::SendQueueFull { .. } => "send-queue-full",
            Warning::StaleDatagrams { .. } => "stale-datagrams",
            Warning::NoJitter { .. } => "no-jitter",
            Warning::ProbesLost { .. } => "probes-lost",
            Warning::BusyPollUnset => "busy-poll-unset",
            Warning::WindowTooFewCompletions { .. } => "window-too-few-completions",
            Warning::NoPeak { .. } => "no-peak",
            Warning::PollerPriorityRefused { .. } => "poller-priority-refused",
            Warning::PathSettingDiffers { .. } => "path-setting-differs",
            Warning::BufferLeaked { .. } => "buffer-leaked",
            Warning::TeardownFailed { .. } => "teardown-failed",
            Warning::Aggregate { .. } => "aggregate",
            Warning::AggregateEstimated { .. } => "aggregate-estimated",
            Warning::NumaCpusetMismatch { .. } => "numa-cpuset-mismatch",
            Warning::BufferOffNode { .. } => "buffer-off-node",
            Warning::CpuPinFailed { .. } => "cpu-pin-failed",
            Warning::BelowPortRate { .. } => "below-port-rate",
            Warning::PortRateUnknown { .. } => "port-rate-unknown",
            Warning::CountersIncomplete { .. } => "counters-incomplete",
            Warning::Tuning { .. } => "tuning",
            Warning::RequestRateNotReached { .. } => "request-rate-not-reached",
            Warning::LateRequests { .. } => "late-requests",
            Warning::WarmupErrors { .. } => "warmup-errors",
            Warning::WarmupCut { .. } => "warmup-cut",
            Warning::NoRequests => "no-requests",
            Warning::MtuPath { .. } => "mtu-path",
            Warning::MtuMismatch { .. } => "mtu-mismatch",
        }
    }

    /// The message, written from the variant's data.
    pub fn message(&self) -> String {
        match self {
            Warning::NoInterval { what } => format!(
                "no measured interval: {what}; the rate keys (bw_gbps, msg_rate_mpps) are absent \
                 — raise --duration / --iterations or lower the warm-up"
            ),
            Warning::ShortInterval { secs } => format!(
                "measured interval of {secs:.3} s is short; use --duration 2 or more for a stable figure"
            ),
            Warning::CpuBound {
                role,
                side,
                pct,
                hint,
            } => format!(
                "the {role} ({side}) used {pct:.0}% of a core: the figure may be limited by host CPU, \
                 not the network{}{hint}",
                if hint.is_empty() { "" } else { "; " }
            ),
            Warning::CpuUnknown { side, why } => format!(
                "the {side}'s thread CPU time could not be read ({why}); its CPU figure is absent"
            ),
            Warning::HostCpuUnknown { side, why } => {
                format!("no host CPU figure for the {side}: {why}")
            }
            Warning::FewSamples { count, what, hint } => {
                format!("only {count} {what}: {hint}")
            }
            Warning::SlowClock { text } => text.clone(),
            Warning::CountMismatch { text } => text.clone(),
            Warning::UdpBlocked { from, to } => format!(
                "no datagram reached the {to}: UDP from the {from} to the {to} is blocked \
                 (firewall, NAT, security group)"
            ),
            Warning::NothingSent => "nothing was sent after the warm-up: raise --duration".into(),
            Warning::ReceiverCpuLoss { side, pct } => format!(
                "the receiver ({side}) used {pct:.0}% of a core and lost datagrams: the loss is the \
                 receiving host's, not the network's"
            ),
            Warning::SmallReceiveBuffer { side, got, want } => format!(
                "the {side}'s receive buffer is {got} bytes, not the {want} asked for: raise \
                 net.core.rmem_max (or run as root) to avoid drops"
            ),
            Warning::RateNotReached {
                reached_gbps,
                asked_gbps,
            } => format!(
                "the sender reached only {reached_gbps:.3} Gbit/s of the {asked_gbps:.3} Gbit/s asked for"
            ),
            Warning::SendQueueFull { side, count } => format!(
                "the {side}'s send queue was full {count} times (ENOBUFS); those datagrams were retried"
            ),
            Warning::StaleDatagrams { count, window } => format!(
                "{count} datagrams arrived more than {window} sequence numbers behind the newest: \
                 too old to tell a late datagram from a duplicate, so they are counted in \
                 udp.stale and not as received (a late one shows as lost)"
            ),
            Warning::NoJitter { side, why } => format!(
                "the {side} got no kernel receive timestamps ({why}): jitter needs one clock and a \
                 timestamp per datagram, so it is not reported"
            ),
            Warning::ProbesLost {
                lost,
                sent,
                timeout_ms,
                late,
            } => format!(
                "{lost} of {sent} probes got no reply within {timeout_ms} ms (counted lost{})",
                if *late > 0 {
                    format!("; {late} replies came later, counted in udp.late")
                } else {
                    String::new()
                }
            ),
            Warning::BusyPollUnset => {
                "SO_BUSY_POLL could not be set on both ends (needs CAP_NET_ADMIN above \
                 net.core.busy_read); both ends still spin on non-blocking receives"
                    .into()
            }
            Warning::WindowTooFewCompletions { cq_mod } => format!(
                "fewer than two completions inside the measured window (the link moved less than \
                 2 x --cq-mod {cq_mod} messages); the figure covers the whole run including warm-up \
                 — use a longer --duration or a smaller --cq-mod"
            ),
            Warning::NoPeak { why } => format!("BW peak not computed: {why}"),
            Warning::PollerPriorityRefused { side, text } => format!("{side}: {text}"),
            Warning::PathSettingDiffers { what, asked, got } => format!(
                "{what} {asked} was asked for, but the device reports {got} for the queue pair \
                 (the record holds what the device reports); a software device may not keep a \
                 setting its wire format has no place for"
            ),
            Warning::BufferLeaked { side, text } => format!("{side}: {text}"),
            Warning::TeardownFailed { side, text } => format!("{side}: {text}"),
            Warning::Aggregate { flows, secs } => format!(
                "aggregate of {flows} concurrent flows: the bytes they received in their common \
                 interval ({secs:.2} s, when every flow was measuring); each flow has its own record"
            ),
            Warning::AggregateEstimated { flows } => format!(
                "{flows} flow(s) carried no progress counts: their bytes inside the common interval \
                 are their mean rate times its length (right when the rate was steady)"
            ),
            Warning::NumaCpusetMismatch {
                side,
                nic,
                node,
                node_cpus,
                allowed,
            } => format!(
                "the {side} may only use CPUs {allowed}, none of them on NUMA node {node} of {nic} \
                 (CPUs {node_cpus}): every byte crosses the inter-socket link, which can halve \
                 the bandwidth; in Kubernetes use the topology manager policy single-numa-node \
                 with the static CPU manager and a Guaranteed pod, elsewhere taskset/numactl \
                 --cpunodebind={node}"
            ),
            Warning::BufferOffNode {
                side,
                buffer_node,
                nic_node,
            } => format!(
                "the {side}'s buffers are on NUMA node {buffer_node}, the NIC on node {nic_node} \
                 (the node's memory was full, or a memory policy placed them there)"
            ),
            Warning::CpuPinFailed { side, why } => format!(
                "the {side}'s data threads could not be pinned ({why}); they ran wherever the \
                 scheduler put them"
            ),
            Warning::BelowPortRate {
                pct,
                port_gbps,
                one,
                hint,
            } => format!(
                "{one} reached {pct:.0}% of the {port_gbps} Gbit/s port rate: {one} at one \
                 message size under-reports what the link carries; {hint}"
            ),
            Warning::PortRateUnknown { side, why } => {
                format!("no port rate for the {side}'s link: {why}")
            }
            Warning::CountersIncomplete { side, what } => format!(
                "the {side} could not read all its counters ({what}); deltas and findings from \
                 those sources are missing"
            ),
            Warning::Tuning { text } => text.clone(),
            Warning::RequestRateNotReached { asked, completed } => format!(
                "asked for {asked:.0} requests/s, completed {completed:.0}: the server or this \
                 client is saturated (latency counts from when each request was due)"
            ),
            Warning::LateRequests { late, ok } => format!(
                "{late} of {ok} requests were due while their connection was still busy; their \
                 latency counts from the due time"
            ),
            Warning::WarmupErrors { count } => {
                format!("{count} request(s) failed during the warm-up (not counted)")
            }
            Warning::WarmupCut { done, asked } => format!(
                "the warm-up ended after {done} of its {asked} round trips, at its time limit (the \
                 measurement's length): round trips this slow suggest loss or an overloaded peer"
            ),
            Warning::NoRequests => "no request completed in the measured interval (requests \
                 still in flight when it ended count neither as done nor as failed)"
                .into(),
            Warning::MtuPath { text } | Warning::MtuMismatch { text } => text.clone(),
        }
    }

    /// The warning as stored in a record.
    pub fn note(&self) -> Note {
        Note {
            id: self.id().to_string(),
            message: self.message(),
        }
    }
}

impl From<Warning> for Note {
    fn from(w: Warning) -> Note {
        w.note()
    }
}

/// Is `id` a warning fabperf defines?
pub fn is_known(id: &str) -> bool {
    REGISTRY.iter().any(|(i, _)| *i == id)
}

#[cfg(test)]
pub(crate) fn examples() -> Vec<Warning> {
    use Side::*;
    vec![
        Warning::NoInterval {
            what: "nothing completed".into(),
        },
        Warning::ShortInterval { secs: 0.1 },
        Warning::CpuBound {
            role: "sender thread".into(),
            side: Client,
            pct: 99.0,
            hint: "try more --streams".into(),
        },
        Warning::CpuUnknown {
            side: Agent,
            why: "getrusage: EINVAL".into(),
        },
        Warning::HostCpuUnknown {
            side: Client,
            why: "/proc/stat: not found".into(),
        },
        Warning::FewSamples {
            count: 10,
            what: "round trips".into(),
            hint: "tail percentiles need more".into(),
        },
        Warning::SlowClock {
            text: "a clock read costs 800 ns here".into(),
        },
        Warning::CountMismatch {
            text: "the agent echoed 3 messages, the client counted 4".into(),
        },
        Warning::UdpBlocked {
            from: Client,
            to: Agent,
        },
        Warning::NothingSent,
        Warning::ReceiverCpuLoss {
            side: Agent,
            pct: 99.0,
        },
        Warning::SmallReceiveBuffer {
            side: Agent,
            got: 212992,
            want: 8 << 20,
        },
        Warning::RateNotReached {
            reached_gbps: 0.5,
            asked_gbps: 1.0,
        },
        Warning::SendQueueFull {
            side: Client,
            count: 3,
        },
        Warning::StaleDatagrams {
            count: 2,
            window: 1 << 22,
        },
        Warning::NoJitter {
            side: Agent,
            why: "SO_TIMESTAMPNS refused".into(),
        },
        Warning::ProbesLost {
            lost: 1,
            sent: 100,
            timeout_ms: 200,
            late: 1,
        },
        Warning::BusyPollUnset,
        Warning::WindowTooFewCompletions { cq_mod: 100 },
        Warning::NoPeak {
            why: "more than 4194304 points".into(),
        },
        Warning::PollerPriorityRefused {
            side: Agent,
            text: "EPERM".into(),
        },
        Warning::PathSettingDiffers {
            what: "service level".into(),
            asked: 3,
            got: 0,
        },
        Warning::BufferLeaked {
            side: Client,
            text: "ibv_dereg_mr failed".into(),
        },
        Warning::TeardownFailed {
            side: Client,
            text: "ibv_destroy_qp failed".into(),
        },
        Warning::Aggregate {
            flows: 3,
            secs: 2.0,
        },
        Warning::AggregateEstimated { flows: 2 },
        Warning::NumaCpusetMismatch {
            side: Agent,
            nic: "mlx5_0".into(),
            node: 1,
            node_cpus: "16-31".into(),
            allowed: "0-3".into(),
        },
        Warning::BufferOffNode {
            side: Client,
            buffer_node: 0,
            nic_node: 1,
        },
        Warning::CpuPinFailed {
            side: Client,
            why: "sched_setaffinity: EINVAL".into(),
        },
        Warning::BelowPortRate {
            pct: 42.0,
            port_gbps: 100.0,
            one: "one queue pair".into(),
            hint: "try --qps 4 and --size 1M".into(),
        },
        Warning::PortRateUnknown {
            side: Client,
            why: "eth0 reports no speed".into(),
        },
        Warning::CountersIncomplete {
            side: Agent,
            what: "/sys/class/net/eth0/statistics: permission denied".into(),
        },
        Warning::Tuning {
            text:
                "profile x on fp-node1: sysctl net.core.rmem_max = 8388608 not applied, not allowed"
                    .into(),
        },
        Warning::RequestRateNotReached {
            asked: 5000.0,
            completed: 4000.0,
        },
        Warning::LateRequests { late: 20, ok: 100 },
        Warning::WarmupErrors { count: 2 },
        Warning::WarmupCut {
            done: 3,
            asked: 1000,
        },
        Warning::NoRequests,
        Warning::MtuPath {
            text: "limited by the path".into(),
        },
        Warning::MtuMismatch {
            text: "MTU mismatch: local interface mgmt0 configured for 1500, 1400 crosses".into(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_registered_and_in_enum_order() {
        let ex = examples();
        assert_eq!(ex.len(), REGISTRY.len(), "one example per registry entry");
        for (w, (id, what)) in ex.iter().zip(REGISTRY) {
            assert_eq!(w.id(), *id);
            assert!(!what.is_empty());
            assert!(
                id.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{id} is not kebab-case"
            );
            let n = w.note();
            assert_eq!(n.id, *id);
            assert!(!n.message.is_empty());
            assert_eq!(n.to_string(), n.message);
        }
        let mut ids: Vec<_> = REGISTRY.iter().map(|(i, _)| *i).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), REGISTRY.len(), "duplicate id");
        assert!(is_known("cpu-bound") && !is_known("bogus"));
    }

    #[test]
    fn every_id_is_documented() {
        let doc = include_str!("../../../docs/records.md");
        for (id, _) in REGISTRY {
            assert!(
                doc.contains(&format!("`{id}`")),
                "docs/records.md lacks `{id}`"
            );
        }
    }

    #[test]
    fn notes_serialize_with_id_and_message() {
        let n = Warning::NothingSent.note();
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(v["id"], "nothing-sent");
        assert!(v["message"].as_str().unwrap().contains("--duration"));
        let back: Note = serde_json::from_value(v).unwrap();
        assert_eq!(back, n);
    }
}
