//! What the two ends exchange over fabperf's control channel: the queue
//! pair information (instead of perftest's separate TCP exchange) and the
//! per-size steps of a test.

use crate::select::{GidKind, LinkLayer};
use fabperf_proto::cpu::HostReport;
use fabperf_results::{Interval, Note};
use serde::{Deserialize, Serialize};
use std::net::Ipv6Addr;

/// One queue pair's connection data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInfo {
    pub qpn: u32,
    pub psn: u32,
}

/// Everything the peer needs to connect to and address this end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointInfo {
    pub device: String,
    pub ib_port: u8,
    pub link_layer: LinkLayer,
    pub lid: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<Ipv6Addr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_type: Option<GidKind>,
    /// RoCE: GRH with the GID; InfiniBand: LID routing.
    pub use_grh: bool,
    /// Active MTU of the port, bytes.
    pub active_mtu: u32,
    /// RDMA reads this end accepts in flight per QP.
    pub max_rd_atomic: u8,
    /// Bytes per QP slot in each buffer.
    pub slot: u64,
    /// Source buffer (peers may RDMA-read it).
    pub src_addr: u64,
    pub src_rkey: u32,
    /// Destination buffer (peers RDMA-write into it).
    pub dst_addr: u64,
    pub dst_rkey: u32,
    pub qps: Vec<QpInfo>,
    /// The buffers are in GPU memory: which GPU, registered how (absent: host memory, and
    /// from a fabperf that predates GPU memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<fabperf_results::GpuMemory>,
}

impl EndpointInfo {
    /// e.g. `rxe0 port 1, GID index 1 (RoCE v2) ::ffff:10.77.0.1` or
    /// `mlx5_0 port 1, LID 7`, then `, GPU memory GPU0 0000:1a:00.0 (dma-buf, PIX)` when the
    /// buffers are in GPU memory.
    pub fn describe(&self) -> String {
        let base = self.describe_port();
        match &self.mem {
            Some(m) => format!("{base}, GPU memory {}", m.describe()),
            None => base,
        }
    }

    fn describe_port(&self) -> String {
        if self.use_grh {
            format!(
                "{} port {}, GID index {} ({}) {}",
                self.device,
                self.ib_port,
                self.gid_index
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "?".into()),
                self.gid_type.map(|k| k.as_str()).unwrap_or("?"),
                self.gid
                    .map(|g| g.to_string())
                    .unwrap_or_else(|| "?".into())
            )
        } else {
            format!(
                "{} port {}, LID {} (InfiniBand, no GRH)",
                self.device, self.ib_port, self.lid
            )
        }
    }
}

/// The client's start parameters: test parameters plus its endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request<P> {
    pub params: P,
    pub client: EndpointInfo,
}

/// The agent's `Accept` info.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcceptInfo {
    pub agent: EndpointInfo,
    /// Path MTU both ends use, bytes.
    pub path_mtu: u32,
    /// The agent's polling loops run at SCHED_IDLE (see `prio`).
    #[serde(default)]
    pub poll_idle: bool,
    /// Why they do not, when that was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_warning: Option<String>,
}

/// Bandwidth figures of one sending side over its measured interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideStats {
    pub bytes: u64,
    pub secs: f64,
    pub msgs: u64,
    /// perftest's BW peak (iteration mode), Gbit/s.
    pub peak_gbps: Option<f64>,
    pub per_qp_msgs: Vec<u64>,
    /// Why the figure may mislead (goes into the record's warnings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
    /// The measured interval in Unix time (this side's clock), with the
    /// bytes completed over time when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
}

/// The agent's account of one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Agent thread CPU over its active interval, percent of one core
    /// (`None`: unknown).
    pub cpu_pct: Option<f64>,
    /// The agent host's CPU over the same interval.
    #[serde(default)]
    pub host: HostReport,
    /// The agent's own sending (bidirectional tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<SideStats>,
}

impl Report {
    /// Refuse figures no agent can have measured (for `size`-byte
    /// messages): counters so large that adding the two sides' or
    /// multiplying by the size overflows, and non-finite or negative
    /// times and CPU shares. The error names the field.
    pub fn check_plausible(&self, size: u64) -> Result<(), String> {
        const MAX: u64 = 1 << 62;
        let num = |f: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{f} = {v} is impossible"))
            }
        };
        if let Some(c) = self.cpu_pct {
            num("cpu_pct", c)?;
        }
        if let Some(s) = &self.sent {
            num("sent.secs", s.secs)?;
            if let Some(m) = s
                .interval
                .as_ref()
                .and_then(|i| i.check().into_iter().next())
            {
                return Err(format!("sent.interval: {m}"));
            }
            if let Some(p) = s.peak_gbps {
                num("sent.peak_gbps", p)?;
            }
            for (f, v) in [("sent.bytes", s.bytes), ("sent.msgs", s.msgs)] {
                if v > MAX {
                    return Err(format!("{f} = {v} is impossible"));
                }
            }
            if let Some(m) = s.per_qp_msgs.iter().find(|&&m| m > MAX / size.max(1)) {
                return Err(format!(
                    "sent.per_qp_msgs holds {m}, impossible for {size}-byte messages"
                ));
            }
        }
        Ok(())
    }
}

/// Per-size steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Client: run `size`, `start_in_s` seconds after this message (at
    /// once when absent: a test on its own); with `progress`, record the
    /// bytes completed over time.
    Go {
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_in_s: Option<f64>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        progress: bool,
    },
    /// Agent: receives posted, ready.
    GoAck,
    /// Either side: still working (sent every second while a side runs).
    Progress,
    /// Either side: my sending (or my part) is complete.
    SideDone,
    /// Agent: its figures for the size.
    Report(Box<Report>),
    /// Client: no more sizes.
    Finish,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> EndpointInfo {
        EndpointInfo {
            device: "rxe0".into(),
            ib_port: 1,
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            gid: Some("::ffff:10.77.0.1".parse().unwrap()),
            gid_index: Some(1),
            gid_type: Some(GidKind::RoceV2),
            use_grh: true,
            active_mtu: 1024,
            max_rd_atomic: 16,
            slot: 65536,
            src_addr: 0x7f00_0000_0000,
            src_rkey: 0x1234,
            dst_addr: 0x7f00_0001_0000,
            dst_rkey: 0x5678,
            qps: vec![QpInfo {
                qpn: 17,
                psn: 0xabcdef,
            }],
            mem: None,
        }
    }

    #[test]
    fn endpoint_round_trips_and_reads_well() {
        let e = ep();
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["gid_type"], "RoCE v2");
        assert_eq!(v["gid"], "::ffff:10.77.0.1");
        assert_eq!(v["link_layer"], "Ethernet");
        let back: EndpointInfo = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        assert_eq!(
            e.describe(),
            "rxe0 port 1, GID index 1 (RoCE v2) ::ffff:10.77.0.1"
        );
        let mut ib = e.clone();
        ib.use_grh = false;
        ib.lid = 7;
        assert!(ib.describe().contains("LID 7"));
    }

    #[test]
    fn impossible_reports_are_named() {
        let ok = Report {
            cpu_pct: Some(3.0),
            host: HostReport::default(),
            sent: Some(SideStats {
                bytes: 10,
                secs: 1.0,
                msgs: 1,
                peak_gbps: Some(1.0),
                per_qp_msgs: vec![1],
                notes: Vec::new(),
                interval: None,
            }),
        };
        ok.check_plausible(65536).unwrap();
        let mut r = ok.clone();
        r.sent.as_mut().unwrap().interval = Some(Interval {
            start_s: 10.0,
            end_s: f64::NAN,
            sent_from_s: None,
            progress: None,
        });
        assert!(r.check_plausible(1).unwrap_err().contains("sent.interval"));
        let mut r = ok.clone();
        r.cpu_pct = Some(f64::INFINITY);
        assert!(r.check_plausible(1).unwrap_err().contains("cpu_pct"));
        let mut r = ok.clone();
        r.sent.as_mut().unwrap().bytes = u64::MAX;
        assert!(r.check_plausible(1).unwrap_err().contains("sent.bytes"));
        let mut r = ok.clone();
        r.sent.as_mut().unwrap().secs = -1.0;
        assert!(r.check_plausible(1).unwrap_err().contains("sent.secs"));
        let mut r = ok;
        r.sent.as_mut().unwrap().per_qp_msgs = vec![u64::MAX / 2];
        assert!(r
            .check_plausible(65536)
            .unwrap_err()
            .contains("per_qp_msgs"));
    }

    #[test]
    fn steps_are_tagged() {
        let s = serde_json::to_value(Step::Go {
            size: 65536,
            start_in_s: None,
            progress: false,
        })
        .unwrap();
        assert_eq!(s, serde_json::json!({"step": "go", "size": 65536}));
        let r = Step::Report(Box::new(Report {
            cpu_pct: Some(1.5),
            host: HostReport::default(),
            sent: Some(SideStats {
                bytes: 10,
                secs: 1.0,
                msgs: 1,
                peak_gbps: None,
                per_qp_msgs: vec![1],
                notes: vec![],
                interval: Some(Interval {
                    start_s: 1.0e9,
                    end_s: 1.0e9 + 1.0,
                    sent_from_s: Some(1.0e9 - 0.5),
                    progress: None,
                }),
            }),
        }));
        let back: Step = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            serde_json::from_value::<Step>(serde_json::json!({"step": "side_done"})).unwrap(),
            Step::SideDone
        );
        assert!(serde_json::from_value::<Step>(serde_json::json!({"step": "bogus"})).is_err());
    }
}
