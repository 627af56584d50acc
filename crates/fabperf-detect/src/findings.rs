//! Findings from counter deltas: what the counters that moved during a measurement say went
//! wrong, with the evidence and the fix, in `fabperf doctor`'s vocabulary (the same
//! [`Finding`] struct, stable ids). Records carry them (`findings`).
//!
//! | id | from |
//! |---|---|
//! | `roce-packet-loss` | RDMA sequence errors, retransmits, ACK timeouts, duplicates (`rdma_hw`) |
//! | `pause-storm` | `tx_pause_storm_*_events` (`ethtool`) |
//! | `pause-frames` | pause frames received or sent (`ethtool` `*_pause`, `*_pause_ctrl_phy`) |
//! | `rx-discards` | receive drops and discards (`netdev`, `ethtool`, `rdma_hw` `out_of_buffer`) |
//! | `udp-rcvbuf-overflow` | `Udp.RcvbufErrors` / `Udp6.RcvbufErrors` (`snmp`), UDP tests |
//! | `ecn-without-cnp` | ECN-marked RoCE packets without CNPs, or CNPs nobody acted on (`rdma_hw`) |
//! | `link-errors` | symbol, CRC, integrity errors and link downs (`rdma_port`, `ethtool`, `netdev`) |

use fabperf_results::{
    CounterDelta, CounterSource, Counters, Evidence, Finding, Severity, Transport,
};

/// What the measurement was, as far as the findings care.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    pub transport: Option<Transport>,
    /// RDMA: the GRH traffic class the QPs used.
    pub tclass: Option<u8>,
    /// RDMA: `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: Option<&'a str>,
    /// RDMA: an end used a software device (rxe, siw).
    pub software: bool,
}

/// RDMA counters that count a lost packet's consequences (mlx5 and rxe names).
const RDMA_LOSS: &[&str] = &[
    // mlx5
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "duplicate_request",
    "roce_adp_retrans",
    "req_transport_retries_exceeded",
    // rxe
    "rcvd_seq_err",
    "out_of_seq_request",
    "completer_retry_err",
    "retry_exceeded_err",
];

const LINK_ERRORS: &[(CounterSource, &str)] = &[
    (CounterSource::RdmaPort, "symbol_error"),
    (CounterSource::RdmaPort, "link_error_recovery"),
    (CounterSource::RdmaPort, "link_downed"),
    (CounterSource::RdmaPort, "port_rcv_errors"),
    (CounterSource::RdmaPort, "port_rcv_remote_physical_errors"),
    (CounterSource::RdmaPort, "local_link_integrity_errors"),
    (CounterSource::RdmaPort, "excessive_buffer_overrun_errors"),
    (CounterSource::Ethtool, "rx_crc_errors_phy"),
    (CounterSource::Ethtool, "rx_symbol_err_phy"),
    (CounterSource::Ethtool, "link_down_events_phy"),
    (CounterSource::Netdev, "rx_crc_errors"),
    (CounterSource::Netdev, "rx_frame_errors"),
];

fn is_prio(name: &str, prefix: &str, suffix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(suffix))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_discard(source: CounterSource, name: &str) -> bool {
    match source {
        CounterSource::Netdev => matches!(
            name,
            "rx_dropped" | "rx_missed_errors" | "rx_fifo_errors" | "rx_over_errors"
        ),
        CounterSource::Ethtool => {
            matches!(name, "rx_discards_phy" | "rx_out_of_buffer")
                || is_prio(name, "rx_prio", "_discards")
        }
        CounterSource::RdmaHw => name == "out_of_buffer",
        _ => false,
    }
}

fn is_pause(name: &str) -> bool {
    is_prio(name, "rx_prio", "_pause")
        || is_prio(name, "tx_prio", "_pause")
        || matches!(
            name,
            "rx_pause_ctrl_phy" | "tx_pause_ctrl_phy" | "rx_global_pause" | "tx_global_pause"
        )
}

/// The counters of one end, with the end's name.
struct End<'a> {
    side: &'static str,
    groups: &'a [CounterDelta],
}

impl<'a> End<'a> {
    /// `(group, name, delta)` for every counter that `pick` keeps.
    fn hits(
        &self,
        pick: impl Fn(CounterSource, &str) -> bool,
    ) -> Vec<(&'a CounterDelta, &'a str, u64)> {
        self.groups
            .iter()
            .flat_map(|g| g.deltas.iter().map(move |(k, v)| (g, k.as_str(), *v)))
            .filter(|(g, k, v)| *v > 0 && pick(g.source, k))
            .collect()
    }

    fn get(&self, source: CounterSource, name: &str) -> Option<u64> {
        self.groups
            .iter()
            .filter(|g| g.source == source)
            .find_map(|g| g.deltas.get(name).copied())
    }

    /// The interface this end's counters name (for fixes), or a placeholder.
    fn netdev(&self) -> String {
        self.groups
            .iter()
            .find(|g| matches!(g.source, CounterSource::Netdev | CounterSource::Ethtool))
            .map(|g| g.subject.clone())
            .unwrap_or_else(|| "<netdev>".into())
    }

    fn subject(&self, hits: &[(&CounterDelta, &str, u64)]) -> String {
        let mut subs: Vec<&str> = hits.iter().map(|(g, _, _)| g.subject.as_str()).collect();
        subs.dedup();
        format!("{} {}", self.side, subs.join(", "))
    }
}

fn evidence(hits: &[(&CounterDelta, &str, u64)]) -> Vec<Evidence> {
    hits.iter()
        .map(|(g, k, v)| Evidence {
            // Files of a directory by name; a file or an ioctl with the key after a space.
            path: if matches!(
                g.source,
                CounterSource::Ethtool | CounterSource::Snmp | CounterSource::Netstat
            ) {
                format!("{} {k}", g.path)
            } else {
                format!("{}/{k}", g.path)
            },
            value: format!("+{v} during the measured interval"),
        })
        .collect()
}

fn list(hits: &[(&CounterDelta, &str, u64)]) -> String {
    hits.iter()
        .map(|(_, k, v)| format!("{k} +{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn roce_loss(ctx: &Context, end: &End, out: &mut Vec<Finding>) {
    if ctx.transport != Some(Transport::Rdma) {
        return;
    }
    let hits = end.hits(|s, k| s == CounterSource::RdmaHw && RDMA_LOSS.contains(&k));
    if hits.is_empty() {
        return;
    }
    let nd = end.netdev();
    let ib = ctx.link_layer == Some("InfiniBand");
    let mut fix = Vec::new();
    if ib {
        fix.push("InfiniBand is lossless by credit flow control: lost packets mean corrupted ones on a link. Read the error counters of every port on the path (`ibdiagnet`; symbol_error, port_rcv_errors, link_error_recovery) and reseat or replace the cable that counts them".to_string());
    } else {
        fix.push(format!(
            "make the fabric lossless for the RDMA priority: PFC on the NIC (`mlnx_qos -i {nd} --trust dscp --pfc 0,0,0,1,0,0,0,0` for priority 3, the usual RoCE choice) and the same no-drop class on every switch port of the path"
        ));
        fix.push(format!(
            "or keep queues short with congestion control: ECN marking on the switches for that class and DCQCN on both NICs (`echo 1 > /sys/class/net/{nd}/ecn/roce_np/enable/3` and `.../roce_rp/enable/3`)"
        ));
        match ctx.tclass {
            Some(t) => fix.push(format!(
                "test on the class the fabric reserves for RoCE: this test used traffic class {t} (DSCP {}); `--tclass 106` is DSCP 26 with ECN capable, the common RoCE class",
                t >> 2
            )),
            None => fix.push(
                "test on the class the fabric reserves for RoCE (`--tclass 106`: DSCP 26, the common RoCE class)"
                    .into(),
            ),
        }
    }
    if ctx.software {
        fix.push("on soft-RoCE (rxe, siw) the loss is on the host's path: a qdisc that drops (netem, a full queue), a congested virtual link, or receive processing that could not keep up".into());
    }
    out.push(Finding {
        id: "roce-packet-loss".into(),
        severity: Severity::Error,
        subject: end.subject(&hits),
        summary: format!(
            "packets were lost on the {} path during the test ({})",
            if ib { "InfiniBand" } else { "RoCE" },
            list(&hits)
        ),
        detail: "RDMA reliable connections recover a lost packet only by go-back-N: the responder NAKs the next packet out of sequence (or the requester waits for its ACK timeout, 67 ms at timeout 14) and everything after the lost packet is sent again, so a fraction of a percent of loss can halve the throughput and multiply tail latency. RoCE needs a lossless class (PFC) or congestion control that keeps the queues from overflowing (ECN with DCQCN).".into(),
        evidence: evidence(&hits),
        cost_gbps: None,
        fix,
    });
}

fn pauses(end: &End, out: &mut Vec<Finding>) {
    let nd = end.netdev();
    let storm = end.hits(|s, k| s == CounterSource::Ethtool && k.contains("pause_storm"));
    if !storm.is_empty() {
        out.push(Finding {
            id: "pause-storm".into(),
            severity: Severity::Error,
            subject: end.subject(&storm),
            summary: format!("the NIC detected a pause storm ({})", list(&storm)),
            detail: "A device that stops draining its receive queue (a hung host, a NIC out of buffers) sends pause frames without end; the pauses spread hop by hop and stall every flow of that priority in the fabric. The NIC's storm protection then stops honoring pauses from that port, which keeps the fabric alive but drops its traffic.".into(),
            evidence: evidence(&storm),
            cost_gbps: None,
            fix: vec![
                format!("find the port that does not drain: on this host and its peer, check `ethtool -S {nd} | grep -E 'out_of_buffer|discards|pause'` and whether the receiving CPUs are saturated"),
                format!("keep the protection on: `ethtool --get-tunable {nd} pfc-prevention-tout` (mlx5 default 100 ms); a storm that it ends still loses traffic, so fix the stalled receiver"),
            ],
        });
    }
    let hits = end.hits(|s, k| s == CounterSource::Ethtool && is_pause(k));
    if hits.is_empty() {
        return;
    }
    let durations = end.hits(|s, k| s == CounterSource::Ethtool && k.ends_with("_pause_duration"));
    let rx: u64 = hits
        .iter()
        .filter(|(_, k, _)| k.starts_with("rx_"))
        .map(|h| h.2)
        .sum();
    let tx: u64 = hits
        .iter()
        .filter(|(_, k, _)| k.starts_with("tx_"))
        .map(|h| h.2)
        .sum();
    let mut fix = Vec::new();
    if rx > 0 {
        fix.push("received pauses: the peer or a switch egress queue could not take more (incast, a slow receiver): look at the peer's counters and the switch's queue".to_string());
    }
    if tx > 0 {
        fix.push(format!(
            "sent pauses: this host drained its receive queues too slowly: larger rings (`ethtool -G {nd} rx <max from ethtool -g>`), more channels (`ethtool -L {nd} combined <CPUs of the NIC's node>`), the receiving threads on the NIC's NUMA node (`--cpu auto`)"
        ));
    }
    let mut ev = evidence(&hits);
    ev.extend(evidence(&durations));
    out.push(Finding {
        id: "pause-frames".into(),
        severity: Severity::Info,
        subject: end.subject(&hits),
        summary: format!(
            "flow control paused the link: {rx} pause frames received, {tx} sent ({})",
            list(&hits)
        ),
        detail: "Pause frames (PFC per priority, or global pause) stop a sender instead of dropping: on a lossless fabric that is their job, but every pause is time the link carried nothing, so the figure shows the slowest receiver on the path, not the link.".into(),
        evidence: ev,
        cost_gbps: None,
        fix,
    });
}

fn discards(end: &End, out: &mut Vec<Finding>) {
    let hits = end.hits(is_discard);
    if hits.is_empty() {
        return;
    }
    let nd = end.netdev();
    let has = |n: &str| hits.iter().any(|(_, k, _)| *k == n);
    let mut fix = Vec::new();
    if has("rx_out_of_buffer")
        || has("rx_missed_errors")
        || has("rx_fifo_errors")
        || has("rx_over_errors")
    {
        fix.push(format!(
            "the host did not refill receive descriptors fast enough: larger rings (`ethtool -G {nd} rx <max from ethtool -g>`), more channels (`ethtool -L {nd} combined N`), the receiving threads on the NIC's NUMA node (`--cpu auto`)"
        ));
    }
    if has("rx_discards_phy")
        || hits
            .iter()
            .any(|(_, k, _)| is_prio(k, "rx_prio", "_discards"))
    {
        fix.push("the NIC's own buffer overflowed (the host or PCIe could not keep up with the link): on a lossless fabric enable PFC for the priority so the switch pauses instead of the NIC dropping; check the PCIe link (`fabperf doctor`: pcie-ceiling, pcie-downgraded)".into());
    }
    if has("out_of_buffer") {
        fix.push("RDMA messages arrived with no receive request posted: the receiving side posts too few receives (raise its receive queue depth); the sender gets RNR NAKs and backs off".into());
    }
    if has("rx_dropped") {
        fix.push("the kernel dropped received packets (backlog full, no handler): check `/proc/net/softnet_stat` and raise `net.core.netdev_max_backlog`".into());
    }
    out.push(Finding {
        id: "rx-discards".into(),
        severity: Severity::Warning,
        subject: end.subject(&hits),
        summary: format!("received packets were discarded for lack of buffer ({})", list(&hits)),
        detail: "A discard is a loss the sender must repair (TCP retransmits, RDMA go-back-N) or never learns of (UDP): the figure measures the receiver's buffers, not the link.".into(),
        evidence: evidence(&hits),
        cost_gbps: None,
        fix,
    });
}

fn udp_rcvbuf(ctx: &Context, end: &End, out: &mut Vec<Finding>) {
    if ctx.transport != Some(Transport::Udp) {
        return;
    }
    let hits = end.hits(|s, k| {
        s == CounterSource::Snmp && matches!(k, "Udp.RcvbufErrors" | "Udp6.RcvbufErrors")
    });
    if hits.is_empty() {
        return;
    }
    let n: u64 = hits.iter().map(|h| h.2).sum();
    let mut ev = evidence(&hits);
    for k in ["Udp.InErrors", "Udp6.InErrors"] {
        if let Some(v) = end.get(CounterSource::Snmp, k) {
            ev.push(Evidence {
                path: format!("/proc/net/snmp {k}"),
                value: format!("+{v} during the measured interval"),
            });
        }
    }
    out.push(Finding {
        id: "udp-rcvbuf-overflow".into(),
        severity: Severity::Warning,
        subject: format!("{} host", end.side),
        summary: format!(
            "{n} datagrams were dropped because a UDP socket's receive buffer was full"
        ),
        detail: "The kernel drops a datagram when the receiving socket's buffer is full: the reader was slower than the sender for longer than the buffer could hold. The counter is the host's (every UDP socket of its network namespace), so another program can add to it.".into(),
        evidence: ev,
        cost_gbps: None,
        fix: vec![
            "allow larger buffers: `sysctl -w net.core.rmem_max=67108864` (a socket gets at most rmem_max unless its process has CAP_NET_ADMIN), then give the test more: `-w 32M`".into(),
            "or read faster: a receiving thread at 100 % of a core cannot drain the socket (see the record's CPU figures and receiver-cpu-loss); lower the offered rate (`-b`)".into(),
        ],
    });
}

fn ecn(ctx: &Context, ends: &[End], out: &mut Vec<Finding>) {
    if ctx.transport != Some(Transport::Rdma) {
        return;
    }
    for (i, end) in ends.iter().enumerate() {
        let nd = end.netdev();
        let marked = end
            .get(CounterSource::RdmaHw, "np_ecn_marked_roce_packets")
            .unwrap_or(0);
        let sent = end.get(CounterSource::RdmaHw, "np_cnp_sent").unwrap_or(0);
        if marked > 0 && sent == 0 {
            let hits =
                end.hits(|s, k| s == CounterSource::RdmaHw && k == "np_ecn_marked_roce_packets");
            out.push(Finding {
                id: "ecn-without-cnp".into(),
                severity: Severity::Warning,
                subject: end.subject(&hits),
                summary: format!("{marked} ECN-marked RoCE packets arrived but no CNP was sent back"),
                detail: "The switches mark packets when their queues fill; the receiving NIC (DCQCN's notification point) must answer with congestion notification packets so the sender slows down. Without them the queues keep growing until the fabric pauses or drops.".into(),
                evidence: evidence(&hits),
                cost_gbps: None,
                fix: vec![format!(
                    "enable the notification point for the RDMA priority on this NIC: `echo 1 > /sys/class/net/{nd}/ecn/roce_np/enable/3` (priority 3), and check that CNPs are not filtered on the way back"
                )],
            });
        }
        if sent > 0 {
            if let Some(peer) = ends.get(1 - i) {
                let handled = peer
                    .get(CounterSource::RdmaHw, "rp_cnp_handled")
                    .unwrap_or(0);
                // Only when the peer reports hardware counters at all (rxe has none of these).
                if handled == 0
                    && peer
                        .groups
                        .iter()
                        .any(|g| g.source == CounterSource::RdmaHw)
                {
                    let hits = end.hits(|s, k| s == CounterSource::RdmaHw && k == "np_cnp_sent");
                    let pnd = peer.netdev();
                    out.push(Finding {
                        id: "ecn-without-cnp".into(),
                        severity: Severity::Warning,
                        subject: format!("{} (CNPs from {})", peer.side, end.subject(&hits)),
                        summary: format!("the {} sent {sent} CNPs but the {} handled none", end.side, peer.side),
                        detail: "Congestion notification packets reached no reaction point: the sender never lowered its rate, so congestion control did nothing.".into(),
                        evidence: evidence(&hits),
                        cost_gbps: None,
                        fix: vec![format!(
                            "enable the reaction point on the {} NIC: `echo 1 > /sys/class/net/{pnd}/ecn/roce_rp/enable/3` (priority 3)",
                            peer.side
                        )],
                    });
                }
            }
        }
    }
}

fn link_errors(ctx: &Context, end: &End, out: &mut Vec<Finding>) {
    let hits = end.hits(|s, k| LINK_ERRORS.iter().any(|(ls, ln)| *ls == s && *ln == k));
    if hits.is_empty() {
        return;
    }
    let nd = end.netdev();
    let down = hits.iter().any(|(_, k, _)| k.contains("down"));
    let mut fix = vec![format!(
        "reseat or replace the cable or transceiver of this port (or of the switch port facing it): read the optics with `ethtool -m {nd}` and the link's error rate with `mlxlink -d <PCI address> -c`"
    )];
    if ctx.link_layer == Some("InfiniBand") {
        fix.push("`ibdiagnet` reads the same counters on every port of the path".into());
    }
    out.push(Finding {
        id: "link-errors".into(),
        severity: if down { Severity::Error } else { Severity::Warning },
        subject: end.subject(&hits),
        summary: format!("the physical link counted errors during the test ({})", list(&hits)),
        detail: "Symbol, CRC and integrity errors are corrupted frames: each one is a lost packet for the protocols above, and a growing count usually means a failing cable, transceiver or port.".into(),
        evidence: evidence(&hits),
        cost_gbps: None,
        fix,
    });
}

/// Every finding the counter deltas of both ends support, errors first.
pub fn from_counters(ctx: &Context, c: &Counters) -> Vec<Finding> {
    let ends = [
        End {
            side: "client",
            groups: &c.local,
        },
        End {
            side: "agent",
            groups: &c.remote,
        },
    ];
    let mut out = Vec::new();
    for end in &ends {
        roce_loss(ctx, end, &mut out);
        pauses(end, &mut out);
        discards(end, &mut out);
        udp_rcvbuf(ctx, end, &mut out);
        link_errors(ctx, end, &mut out);
    }
    ecn(ctx, &ends, &mut out);
    out.sort_by(|a, b| a.severity.cmp(&b.severity).then_with(|| a.id.cmp(&b.id)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn g(source: CounterSource, subject: &str, kv: &[(&str, u64)]) -> CounterDelta {
        CounterDelta {
            source,
            subject: subject.into(),
            path: match source {
                CounterSource::RdmaHw => format!(
                    "/sys/class/infiniband/{}/ports/1/hw_counters",
                    subject.split(' ').next().unwrap()
                ),
                CounterSource::Ethtool => format!("SIOCETHTOOL {subject}"),
                CounterSource::Snmp => "/proc/net/snmp".into(),
                _ => format!("/sys/x/{subject}"),
            },
            deltas: kv
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
            units: BTreeMap::new(),
            reset: vec![],
        }
    }

    fn rdma() -> Context<'static> {
        Context {
            transport: Some(Transport::Rdma),
            tclass: Some(0),
            link_layer: Some("Ethernet"),
            software: false,
        }
    }

    #[test]
    fn roce_loss_on_both_ends_with_the_traffic_class() {
        let c = Counters {
            local: vec![
                g(
                    CounterSource::RdmaHw,
                    "mlx5_0 port 1",
                    &[
                        ("packet_seq_err", 4),
                        ("local_ack_timeout_err", 1),
                        ("rx_write_requests", 9),
                    ],
                ),
                g(CounterSource::Netdev, "ens1f0np0", &[("rx_bytes", 1)]),
            ],
            remote: vec![g(
                CounterSource::RdmaHw,
                "mlx5_1 port 1",
                &[("out_of_sequence", 5)],
            )],
            ..Default::default()
        };
        let f = from_counters(&rdma(), &c);
        let loss: Vec<_> = f.iter().filter(|x| x.id == "roce-packet-loss").collect();
        assert_eq!(loss.len(), 2, "{f:?}");
        assert_eq!(loss[0].subject, "client mlx5_0 port 1");
        assert_eq!(loss[0].severity, Severity::Error);
        assert!(
            loss[0].summary.contains("packet_seq_err +4") && !loss[0].summary.contains("rx_write")
        );
        assert!(loss[0]
            .fix
            .iter()
            .any(|x| x.contains("mlnx_qos -i ens1f0np0")));
        assert!(loss[0]
            .fix
            .iter()
            .any(|x| x.contains("traffic class 0 (DSCP 0)")));
        assert_eq!(
            loss[0].evidence[0].path,
            "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err"
        );
        assert_eq!(loss[1].subject, "agent mlx5_1 port 1");
        assert!(loss[1].fix.iter().any(|x| x.contains("<netdev>")));
        // The same counters on a TCP test, or nothing moved: no RDMA finding.
        let tcp = Context {
            transport: Some(Transport::Tcp),
            ..rdma()
        };
        assert!(from_counters(&tcp, &c).is_empty());
        assert!(from_counters(&rdma(), &Counters::default()).is_empty());
    }

    #[test]
    fn rxe_retransmits_and_infiniband() {
        let c = Counters {
            local: vec![g(
                CounterSource::RdmaHw,
                "rxe0 port 1",
                &[
                    ("rcvd_seq_err", 3),
                    ("completer_retry_err", 2),
                    ("sent_pkts", 100),
                ],
            )],
            remote: vec![g(
                CounterSource::RdmaHw,
                "rxe1 port 1",
                &[("out_of_seq_request", 7), ("duplicate_request", 1)],
            )],
            ..Default::default()
        };
        let ctx = Context {
            software: true,
            ..rdma()
        };
        let f = from_counters(&ctx, &c);
        assert_eq!(f.iter().filter(|x| x.id == "roce-packet-loss").count(), 2);
        assert!(f[0].fix.iter().any(|x| x.contains("soft-RoCE")));
        let ib = Context {
            link_layer: Some("InfiniBand"),
            ..rdma()
        };
        let f = from_counters(&ib, &c);
        assert!(f[0].summary.contains("InfiniBand") && f[0].fix[0].contains("ibdiagnet"));
    }

    #[test]
    fn pauses_storms_discards_and_link_errors() {
        let c = Counters {
            local: vec![g(
                CounterSource::Ethtool,
                "ens1f0np0",
                &[
                    ("tx_pause_storm_warning_events", 1),
                    ("rx_prio3_pause", 120),
                    ("rx_prio3_pause_duration", 5000),
                    ("tx_prio3_pause", 7),
                    ("rx_discards_phy", 9),
                    ("rx_out_of_buffer", 2),
                    ("rx_crc_errors_phy", 1),
                    ("rx_prio3_bytes", 5),
                ],
            )],
            remote: vec![
                g(CounterSource::Netdev, "eth1", &[("rx_dropped", 3)]),
                g(
                    CounterSource::RdmaPort,
                    "mlx5_1 port 1",
                    &[("link_downed", 1)],
                ),
            ],
            ..Default::default()
        };
        let f = from_counters(&Context::default(), &c);
        let id = |i: &str| f.iter().filter(|x| x.id == i).collect::<Vec<_>>();
        assert_eq!(id("pause-storm").len(), 1);
        let p = id("pause-frames");
        assert_eq!(p.len(), 1);
        assert!(
            p[0].summary.contains("120 pause frames received, 7 sent"),
            "{}",
            p[0].summary
        );
        assert_eq!(p[0].fix.len(), 2);
        assert!(p[0]
            .evidence
            .iter()
            .any(|e| e.path.ends_with("rx_prio3_pause_duration")));
        let d = id("rx-discards");
        assert_eq!(d.len(), 2);
        assert!(d[0].fix.iter().any(|x| x.contains("ethtool -G ens1f0np0")));
        assert!(d[0].fix.iter().any(|x| x.contains("PFC")));
        assert!(d[1].fix.iter().any(|x| x.contains("netdev_max_backlog")));
        let l = id("link-errors");
        assert_eq!(l.len(), 2);
        assert!(l
            .iter()
            .any(|x| x.severity == Severity::Error && x.subject == "agent mlx5_1 port 1"));
        // Errors first.
        assert_eq!(f[0].severity, Severity::Error);
        assert!(f.windows(2).all(|w| w[0].severity <= w[1].severity));
        // Names that only look alike do not count.
        let c = Counters {
            local: vec![g(
                CounterSource::Ethtool,
                "e",
                &[
                    ("rx_prio_pause", 1),
                    ("rx_priox_discards", 1),
                    ("rx_prio3_pause_transition", 1),
                ],
            )],
            ..Default::default()
        };
        assert!(from_counters(&Context::default(), &c).is_empty());
    }

    #[test]
    fn udp_buffer_overflow_only_for_udp_tests() {
        let c = Counters {
            remote: vec![g(
                CounterSource::Snmp,
                "host",
                &[
                    ("Udp.RcvbufErrors", 1200),
                    ("Udp.InErrors", 1200),
                    ("Udp.InDatagrams", 5),
                ],
            )],
            ..Default::default()
        };
        let udp = Context {
            transport: Some(Transport::Udp),
            ..Default::default()
        };
        let f = from_counters(&udp, &c);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "udp-rcvbuf-overflow");
        assert_eq!(f[0].subject, "agent host");
        assert!(f[0].summary.starts_with("1200 datagrams"));
        assert!(f[0].fix[0].contains("net.core.rmem_max"));
        assert_eq!(f[0].evidence.len(), 2);
        let tcp = Context {
            transport: Some(Transport::Tcp),
            ..Default::default()
        };
        assert!(from_counters(&tcp, &c).is_empty());
    }

    #[test]
    fn ecn_marks_without_cnps() {
        let c = Counters {
            local: vec![g(
                CounterSource::RdmaHw,
                "mlx5_0 port 1",
                &[("rp_cnp_ignored", 4)],
            )],
            remote: vec![g(
                CounterSource::RdmaHw,
                "mlx5_1 port 1",
                &[("np_ecn_marked_roce_packets", 50)],
            )],
            ..Default::default()
        };
        let f = from_counters(&rdma(), &c);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].summary.contains("50 ECN-marked") && f[0].fix[0].contains("roce_np"));
        // CNPs sent by the agent that the client's reaction point never handled.
        let c = Counters {
            local: vec![g(
                CounterSource::RdmaHw,
                "mlx5_0 port 1",
                &[("rp_cnp_ignored", 4)],
            )],
            remote: vec![g(
                CounterSource::RdmaHw,
                "mlx5_1 port 1",
                &[("np_ecn_marked_roce_packets", 50), ("np_cnp_sent", 50)],
            )],
            ..Default::default()
        };
        let f = from_counters(&rdma(), &c);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0]
            .summary
            .contains("the agent sent 50 CNPs but the client handled none"));
        assert!(f[0].fix[0].contains("roce_rp"));
        // Handled: no finding.
        let mut ok = c.clone();
        ok.local[0].deltas.insert("rp_cnp_handled".into(), 50);
        assert!(from_counters(&rdma(), &ok).is_empty());
    }
}
