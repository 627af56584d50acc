//! `mtu` cells of `fabperf run` plans: the parameters a plan gives, and a
//! path's report as result records (one per method that measured).

use crate::client::{discover, MtuError, Options};
use crate::report::{Crossing, PathReport};
use fabperf_proto::ClientConfig;
use fabperf_results::{Record, Transport, Warning};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Longest an `mtu` cell may take (the agent's test length for the probes).
pub const MAX_PLAN_SECS: f64 = 300.0;

/// A plan's parameters for an `mtu` cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanParams {
    /// Upper bound of the probing (the agent ends it there).
    pub duration_s: f64,
    /// ICMP echo too (needs a ping socket or CAP_NET_RAW on the driving node).
    pub icmp: bool,
    /// Tries per size before it counts as not crossing.
    pub attempts: u32,
    /// Wait per probe, milliseconds; 0 measures the round trip first.
    pub probe_timeout_ms: u64,
}

impl Default for PlanParams {
    fn default() -> Self {
        PlanParams {
            duration_s: 30.0,
            icmp: true,
            attempts: 3,
            probe_timeout_ms: 0,
        }
    }
}

impl PlanParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.duration_s.is_finite()
            && self.duration_s > 0.0
            && self.duration_s <= MAX_PLAN_SECS)
        {
            return Err(format!(
                "duration_s {} is not more than 0 and at most {MAX_PLAN_SECS}",
                self.duration_s
            ));
        }
        if !(1..=20).contains(&self.attempts) {
            return Err(format!("attempts {} is not 1 to 20", self.attempts));
        }
        if self.probe_timeout_ms > 10_000 {
            return Err(format!(
                "probe_timeout_ms {} is above 10000",
                self.probe_timeout_ms
            ));
        }
        Ok(())
    }
}

/// Probe the path to the agent at `target` and return one record per
/// method that measured (`op` forward, reverse or icmp; `mtu` the largest
/// packet that crossed, `size` its payload).
pub fn run(
    target: SocketAddr,
    cfg: &ClientConfig,
    p: &PlanParams,
) -> Result<Vec<Record>, MtuError> {
    p.validate().map_err(MtuError::Probe)?;
    let opts = Options {
        udp: true,
        icmp: p.icmp,
        attempts: p.attempts,
        probe_timeout: (p.probe_timeout_ms > 0).then(|| Duration::from_millis(p.probe_timeout_ms)),
        // The plan's `duration`: the agent's test length and the bound of
        // the whole probing.
        duration: Some(Duration::from_secs_f64(p.duration_s)),
    };
    let t0 = Instant::now();
    let rep = discover(&target.to_string(), target, cfg, &opts)?;
    Ok(records(&rep, t0.elapsed().as_secs_f64()))
}

/// A path's report as records.
pub fn records(rep: &PathReport, secs: f64) -> Vec<Record> {
    let mut out = Vec::new();
    let rows: [(&str, &Option<Crossing>, Transport); 3] = [
        ("forward", &rep.forward, Transport::Udp),
        ("reverse", &rep.reverse, Transport::Udp),
        ("icmp", &rep.icmp, Transport::Icmp),
    ];
    for (op, c, transport) in rows {
        let Some(c) = c else { continue };
        let mut r = Record::new("mtu", transport, u64::from(c.payload), 1);
        r.op = Some(op.to_string());
        r.direction = Some(
            if op == "reverse" {
                "reverse"
            } else {
                "forward"
            }
            .to_string(),
        );
        r.mtu = Some(c.mtu);
        r.iterations = Some(u64::from(c.probes));
        r.duration_s = secs;
        r.remote = Some(rep.addr.to_string());
        r.local = rep.local.map(|l| l.to_string());
        if op == "icmp" {
            r.warnings.push(
                Warning::MtuPath {
                    text: "ICMP echo round trip: both directions at once".into(),
                }
                .note(),
            );
        }
        r.warnings.push(
            Warning::MtuPath {
                text: format!("limited by the {}", c.limited_by),
            }
            .note(),
        );
        let iface = if op == "reverse" {
            &rep.agent_interface
        } else {
            &rep.interface
        };
        if let Some(i) = iface {
            let mut w = format!("interface {} (MTU {}, {})", i.name, i.mtu, i.kind);
            if let Some(o) = &i.overhead {
                w.push_str(&format!(
                    ", {} bytes of encapsulation ({})",
                    o.bytes, o.parts
                ));
            }
            r.warnings.push(Warning::MtuPath { text: w }.note());
        }
        for m in &rep.mismatches {
            if m.by == op {
                r.warnings.push(
                    Warning::MtuMismatch {
                        text: format!(
                            "MTU mismatch: {} interface {} configured for {}, {} crosses",
                            m.side, m.interface, m.configured, m.measured
                        ),
                    }
                    .note(),
                );
            }
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_checked() {
        assert!(PlanParams::default().validate().is_ok());
        for bad in [
            serde_json::json!({"duration_s": 0}),
            serde_json::json!({"duration_s": 301}),
            serde_json::json!({"attempts": 0}),
            serde_json::json!({"probe_timeout_ms": 20000}),
        ] {
            let p: PlanParams = serde_json::from_value(bad.clone()).unwrap();
            assert!(p.validate().is_err(), "{bad}");
        }
        assert!(serde_json::from_value::<PlanParams>(serde_json::json!({"size": 1})).is_err());
    }

    #[test]
    fn a_report_becomes_one_record_per_method() {
        let c = |mtu: u32, by: &str| Crossing {
            mtu,
            payload: mtu - 28,
            limited_by: by.into(),
            probes: 9,
            too_big_mtu: None,
            too_big_from: None,
        };
        let mut rep = PathReport {
            target: "x".into(),
            addr: "198.18.2.2:5301".parse().unwrap(),
            local: None,
            interface: None,
            agent_interface: None,
            forward: Some(c(1450, "sending interface")),
            reverse: Some(c(1354, "path")),
            icmp: None,
            skipped: vec![],
            mismatches: vec![],
        };
        rep.judge();
        let r = records(&rep, 1.5);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].op.as_deref(), Some("forward"));
        assert_eq!(r[0].mtu, Some(1450));
        assert_eq!(r[0].size, 1422);
        assert_eq!(r[1].op.as_deref(), Some("reverse"));
        assert_eq!(r[1].mtu, Some(1354));
        assert!(r
            .iter()
            .all(|x| x.check_values().is_ok() && x.test == "mtu"));
        assert!(r.iter().all(|x| x.transport == Transport::Udp));
        // The ICMP round trip is an ICMP record, not a UDP one.
        rep.icmp = Some(c(1400, "path"));
        let r = records(&rep, 1.5);
        let icmp = r.iter().find(|x| x.op.as_deref() == Some("icmp")).unwrap();
        assert_eq!(icmp.transport, Transport::Icmp);
        assert_eq!(
            serde_json::to_value(icmp).unwrap()["transport"],
            "icmp",
            "as stored and exported"
        );
    }
}
