//! Plausibility of a record whose figures came (partly) from a peer.
//!
//! A client builds its records from its own measurements and the agent's
//! reports; an agent that is broken or hostile can report anything. Before
//! a record is shown or stored, every number must be one a measurement can
//! produce: finite and not negative (a NaN or infinite CPU share, a
//! negative duration, a loss above 100 % are protocol errors, named by the
//! field), and every text field is passed through the caller's escaping.

use crate::{LatencySummary, Record};

/// A field of a record holding an impossible value.
#[derive(Debug, Clone, PartialEq)]
pub struct BadValue {
    /// The record key, e.g. `cpu_remote_pct` or `lat_us.p99`.
    pub field: String,
    pub value: String,
    pub rule: &'static str,
}

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {} ({})", self.field, self.value, self.rule)
    }
}

impl std::error::Error for BadValue {}

const FINITE: &str = "must be a finite number, zero or more";

fn num(field: &str, v: f64) -> Result<(), BadValue> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(BadValue {
            field: field.to_string(),
            value: v.to_string(),
            rule: FINITE,
        })
    }
}

fn opt(field: &str, v: Option<f64>) -> Result<(), BadValue> {
    v.map_or(Ok(()), |v| num(field, v))
}

fn lat(l: &LatencySummary) -> Result<(), BadValue> {
    for (k, v) in [
        ("min", l.min),
        ("p50", l.p50),
        ("p90", l.p90),
        ("p99", l.p99),
        ("p999", l.p999),
        ("p9999", l.p9999),
        ("max", l.max),
        ("mean", l.mean),
        ("stdev", l.stdev),
    ] {
        num(&format!("lat_us.{k}"), v)?;
    }
    Ok(())
}

impl Record {
    /// Every number finite and not negative; UDP loss within 0..=100 %
    /// and `lost` not above `sent`.
    pub fn check_values(&self) -> Result<(), BadValue> {
        num("duration_s", self.duration_s)?;
        opt("bw_gbps", self.bw_gbps)?;
        opt("bw_peak_gbps", self.bw_peak_gbps)?;
        opt("msg_rate_mpps", self.msg_rate_mpps)?;
        opt("cpu_local_pct", self.cpu_local_pct)?;
        opt("cpu_remote_pct", self.cpu_remote_pct)?;
        opt("requests_per_s", self.requests_per_s)?;
        opt("port_rate_gbps", self.port_rate_gbps)?;
        opt("bw_pct_of_port", self.bw_pct_of_port)?;
        for (k, p) in [
            ("placement_local", &self.placement_local),
            ("placement_remote", &self.placement_remote),
        ] {
            if let Some(p) = p {
                opt(&format!("{k}.port_rate_gbps"), p.port_rate_gbps)?;
            }
        }
        if let Some(f) = self
            .findings
            .iter()
            .find(|f| f.cost_gbps.is_some_and(|c| !(c.is_finite() && c >= 0.0)))
        {
            num(
                &format!("findings[{}].cost_gbps", f.id),
                f.cost_gbps.unwrap_or(-1.0),
            )?;
        }
        if let Some(l) = &self.lat_us {
            lat(l)?;
        }
        if let Some(u) = &self.udp {
            opt("udp.jitter_us", u.jitter_us)?;
            opt("udp.ipdv_us", u.ipdv_us)?;
            opt("udp.loss_pct", u.loss_pct)?;
            if let Some(p) = u.loss_pct.filter(|p| *p > 100.0) {
                return Err(BadValue {
                    field: "udp.loss_pct".into(),
                    value: p.to_string(),
                    rule: "a share of datagrams cannot exceed 100 %",
                });
            }
            if u.lost > u.sent {
                return Err(BadValue {
                    field: "udp.lost".into(),
                    value: u.lost.to_string(),
                    rule: "more datagrams lost than sent",
                });
            }
        }
        Ok(())
    }

    /// Apply `f` to every text field (e.g. to escape what a peer sent
    /// before it reaches a terminal).
    pub fn map_text(&mut self, f: impl Fn(&str) -> String) {
        let g = |s: &mut String| *s = f(s);
        for o in [
            &mut self.op,
            &mut self.direction,
            &mut self.local,
            &mut self.remote,
            &mut self.device,
            &mut self.gid_type,
            &mut self.link_layer,
            &mut self.poll_priority_local,
            &mut self.poll_priority_remote,
        ]
        .into_iter()
        .flatten()
        {
            g(o);
        }
        g(&mut self.test);
        g(&mut self.started_at);
        g(&mut self.fabperf_version);
        for n in &mut self.warnings {
            g(&mut n.id);
            g(&mut n.message);
        }
        for p in [&mut self.placement_local, &mut self.placement_remote]
            .into_iter()
            .flatten()
        {
            p.map_text(&f);
        }
        if let Some(c) = &mut self.counters {
            c.map_text(&f);
        }
        for x in &mut self.findings {
            x.map_text(&f);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{LatencyKind, Record, Transport, UdpStats};

    fn rec() -> Record {
        let mut r = Record::new("tcp-bw", Transport::Tcp, 1000, 1);
        r.set_throughput(1000, 1.0, Some(1));
        r.cpu_remote_pct = Some(12.0);
        r
    }

    #[test]
    fn plausible_record_passes() {
        rec().check_values().unwrap();
    }

    #[test]
    fn each_impossible_value_is_named() {
        type Spoil = Box<dyn Fn(&mut Record)>;
        let cases: Vec<(Spoil, &str)> = vec![
            (Box::new(|r| r.duration_s = -1.0), "duration_s"),
            (
                Box::new(|r| r.cpu_remote_pct = Some(f64::NAN)),
                "cpu_remote_pct",
            ),
            (
                Box::new(|r| r.cpu_local_pct = Some(f64::INFINITY)),
                "cpu_local_pct",
            ),
            (Box::new(|r| r.bw_gbps = Some(-0.5)), "bw_gbps"),
            (
                Box::new(|r| r.msg_rate_mpps = Some(f64::NEG_INFINITY)),
                "msg_rate_mpps",
            ),
            (
                Box::new(|r| r.bw_peak_gbps = Some(f64::NAN)),
                "bw_peak_gbps",
            ),
            (
                Box::new(|r| r.requests_per_s = Some(-1.0)),
                "requests_per_s",
            ),
            (
                Box::new(|r| {
                    let mut h = crate::LatencyHistogram::new(LatencyKind::Rtt);
                    h.record_rtt_ns(1000);
                    let mut s = h.summary().unwrap();
                    s.p99 = -3.0;
                    r.lat_us = Some(s);
                }),
                "lat_us.p99",
            ),
            (
                Box::new(|r| {
                    r.udp = Some(UdpStats {
                        sent: 10,
                        received: 5,
                        lost: 5,
                        loss_pct: Some(150.0),
                        ..Default::default()
                    })
                }),
                "udp.loss_pct",
            ),
            (
                Box::new(|r| {
                    r.udp = Some(UdpStats {
                        sent: 1,
                        lost: 5,
                        ..Default::default()
                    })
                }),
                "udp.lost",
            ),
        ];
        for (f, field) in cases {
            let mut r = rec();
            f(&mut r);
            let e = r.check_values().unwrap_err();
            assert_eq!(e.field, field);
            assert!(e.to_string().starts_with(field), "{e}");
        }
    }

    #[test]
    fn impossible_port_figures_are_named() {
        let mut r = rec();
        r.placement_remote = Some(crate::Placement {
            port_rate_gbps: Some(f64::INFINITY),
            ..Default::default()
        });
        assert_eq!(
            r.check_values().unwrap_err().field,
            "placement_remote.port_rate_gbps"
        );
        let mut r = rec();
        r.bw_pct_of_port = Some(-1.0);
        assert_eq!(r.check_values().unwrap_err().field, "bw_pct_of_port");
        let mut r = rec();
        r.findings.push(crate::Finding {
            id: "x".into(),
            severity: crate::Severity::Info,
            subject: String::new(),
            summary: String::new(),
            detail: String::new(),
            evidence: vec![],
            cost_gbps: Some(f64::NAN),
            fix: vec![],
        });
        assert_eq!(r.check_values().unwrap_err().field, "findings[x].cost_gbps");
    }

    #[test]
    fn text_fields_are_mapped() {
        let mut r = rec();
        r.remote = Some("a\x1bb".into());
        r.warnings.push(crate::Note {
            id: "peer\nid".into(),
            message: "x\ny".into(),
        });
        r.counters = Some(crate::Counters {
            remote: vec![crate::CounterDelta {
                source: crate::CounterSource::Ethtool,
                subject: "eth\x1b0".into(),
                path: "p".into(),
                deltas: [("rx\n".to_string(), 1)].into_iter().collect(),
                units: Default::default(),
                reset: vec!["\x1b".into()],
            }],
            remote_missing: vec!["\n".into()],
            ..Default::default()
        });
        r.placement_remote = Some(crate::Placement {
            interface: Some("e\x1b".into()),
            ..Default::default()
        });
        r.map_text(|s| s.replace(['\x1b', '\n'], "?"));
        assert_eq!(r.remote.as_deref(), Some("a?b"));
        let c = r.counters.as_ref().unwrap();
        assert_eq!(c.remote[0].subject, "eth?0");
        assert!(c.remote[0].deltas.contains_key("rx?"));
        assert_eq!(c.remote[0].reset, vec!["?".to_string()]);
        assert_eq!(c.remote_missing, vec!["?".to_string()]);
        assert_eq!(r.placement_remote.unwrap().interface.as_deref(), Some("e?"));
        assert_eq!(r.warnings[0].message, "x?y");
        assert_eq!(r.warnings[0].id, "peer?id");
    }
}
