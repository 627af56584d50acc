//! From both ends' stream reports to result records: the streams matched
//! up, per-direction sums over the union of their intervals, and the times
//! checked before anything is derived from them.

use super::*;

pub(super) fn find(v: &[StreamReport], idx: u32, dir: u8) -> Option<&StreamReport> {
    v.iter().find(|r| r.idx == idx && r.dir == dir)
}

/// The figures of a set of streams (one stream, one direction, or both).
/// Bytes and messages add up; the interval is the longest receiver's, so
/// `bytes * 8 / secs` is the rate of the set; CPU is the sum of the
/// threads' CPU seconds over the longest interval of each end.
#[derive(Default)]
pub(super) struct Agg {
    bytes: u64,
    msgs: u64,
    secs: f64,
    cpu_l: Option<f64>,
    cpu_r: Option<f64>,
    secs_l: f64,
    secs_r: f64,
    retrans: Option<u64>,
    warnings: Vec<Warning>,
    empty: bool,
    /// The receivers' measured interval (the hull of the streams').
    interval: Option<Interval>,
}

impl Agg {
    fn one(l: &StreamReport, r: &StreamReport) -> Agg {
        let (snd, rcv) = if l.sender { (l, r) } else { (r, l) };
        Agg {
            bytes: rcv.bytes,
            msgs: rcv.messages,
            secs: rcv.secs,
            cpu_l: l.cpu_s,
            cpu_r: r.cpu_s,
            secs_l: l.secs,
            secs_r: r.secs,
            retrans: snd.retrans,
            warnings: Vec::new(),
            empty: false,
            interval: match (rcv.from_s, rcv.to_s) {
                (Some(a), Some(b)) => Some(Interval {
                    start_s: a,
                    end_s: b,
                    sent_from_s: snd.sent_from_s,
                    progress: rcv.progress.clone(),
                }),
                _ => None,
            },
        }
    }

    /// Sums streams; a sum that overflows can only come from a report no
    /// real stream produces (a protocol error naming the field).
    fn sum<'a>(parts: impl IntoIterator<Item = &'a Agg>) -> Result<Agg, SockError> {
        let over = |field: &str| {
            SockError::Protocol(format!(
                "the streams' {field} overflow when added up: a report is impossible"
            ))
        };
        let mut t = Agg {
            cpu_l: Some(0.0),
            cpu_r: Some(0.0),
            retrans: Some(0),
            empty: true,
            ..Agg::default()
        };
        let parts: Vec<&Agg> = parts.into_iter().collect();
        t.interval = hull(parts.iter().map(|a| a.interval.as_ref()));
        for o in parts {
            t.empty = false;
            t.bytes = t.bytes.checked_add(o.bytes).ok_or_else(|| over("bytes"))?;
            t.msgs = t.msgs.checked_add(o.msgs).ok_or_else(|| over("messages"))?;
            t.secs = t.secs.max(o.secs);
            t.cpu_l = t.cpu_l.zip(o.cpu_l).map(|(a, b)| a + b);
            t.cpu_r = t.cpu_r.zip(o.cpu_r).map(|(a, b)| a + b);
            t.secs_l = t.secs_l.max(o.secs_l);
            t.secs_r = t.secs_r.max(o.secs_r);
            t.retrans = match t.retrans.zip(o.retrans) {
                Some((a, b)) => Some(a.checked_add(b).ok_or_else(|| over("retransmits"))?),
                None => None,
            };
            for w in &o.warnings {
                if !t.warnings.contains(w) {
                    t.warnings.push(w.clone());
                }
            }
        }
        if t.empty {
            t.cpu_l = None;
            t.cpu_r = None;
        }
        Ok(t)
    }

    fn fill(&self, r: &mut Record) {
        r.set_throughput(self.bytes, self.secs, Some(self.msgs));
        if r.bw_gbps.is_none() {
            r.warn(Warning::NoInterval {
                what: "no byte arrived after the warm-up".into(),
            });
        }
        set_thread_cpu(r, Side::Client, self.cpu_l, self.secs_l);
        set_thread_cpu(r, Side::Agent, self.cpu_r, self.secs_r);
        r.retransmits = self.retrans;
        for w in &self.warnings {
            r.warn(w.clone());
        }
        r.interval = self.interval.clone();
    }
}

/// The smallest interval holding every one given (None when one is
/// missing): earliest start, latest end, earliest sender start, the summed
/// progress when every part has one.
pub(super) fn hull<'a>(parts: impl Iterator<Item = Option<&'a Interval>>) -> Option<Interval> {
    let parts: Option<Vec<&Interval>> = parts.collect();
    let parts = parts?;
    let first = parts.first()?;
    let progress: Option<Vec<&Progress>> = parts.iter().map(|i| i.progress.as_ref()).collect();
    let sent: Option<Vec<f64>> = parts.iter().map(|i| i.sent_from_s).collect();
    Some(Interval {
        start_s: parts
            .iter()
            .map(|i| i.start_s)
            .fold(first.start_s, f64::min),
        end_s: parts.iter().map(|i| i.end_s).fold(first.end_s, f64::max),
        sent_from_s: sent.and_then(|v| v.into_iter().reduce(f64::min)),
        progress: progress.and_then(|v| Progress::sum(&v)),
    })
}

/// Refuse a peer's stream report whose times are not times.
pub(super) fn check_times(v: &[StreamReport], who: &str) -> Result<(), SockError> {
    for r in v {
        let bad =
            |what: &str| SockError::Protocol(format!("{who}'s report of stream {}: {what}", r.idx));
        for t in [r.from_s, r.to_s, r.sent_from_s].into_iter().flatten() {
            if !t.is_finite() {
                return Err(bad(&format!("time {t} is not a time")));
            }
        }
        if let (Some(a), Some(b)) = (r.from_s, r.to_s) {
            if b < a {
                return Err(bad("its interval ends before it starts"));
            }
        }
        if let Some(p) = &r.progress {
            if let Some(m) = p.check().into_iter().next() {
                return Err(bad(&m));
            }
        }
    }
    Ok(())
}

pub(super) fn build_records(
    p: &TcpBwParams,
    mine: &EndReport,
    theirs: &EndReport,
    started_at: &str,
    local: Option<SocketAddr>,
    remote: SocketAddr,
) -> Result<Vec<Record>, SockError> {
    check_times(&theirs.streams, "the agent")?;
    check_times(&mine.streams, "this end")?;
    let mut dirs = Vec::new();
    if p.direction.client_sends() {
        dirs.push(C2A);
    }
    if p.direction.agent_sends() {
        dirs.push(A2C);
    }
    let base = |stream: Option<u32>, direction: &str| {
        let mut r = Record::new("tcp-bw", Transport::Tcp, p.size, p.streams);
        r.started_at = started_at.to_string();
        r.direction = Some(direction.to_string());
        r.stream = stream;
        r.local = local.map(|a| a.to_string());
        r.remote = Some(remote.to_string());
        r
    };
    // The hosts' CPU goes on every record that is not a single stream's.
    let host = |r: &mut Record| {
        set_host_cpu(r, Side::Client, &mine.host.result());
        set_host_cpu(r, Side::Agent, &theirs.host.result());
    };
    let mut per_dir = Vec::new();
    let mut rows = Vec::new();
    for &dir in &dirs {
        let dname = if dir == C2A { "forward" } else { "reverse" };
        let mut parts = Vec::new();
        for idx in 0..p.streams {
            let (l, r) = match (
                find(&mine.streams, idx, dir),
                find(&theirs.streams, idx, dir),
            ) {
                (Some(l), Some(r)) => (l, r),
                _ => {
                    return Err(SockError::Protocol(format!(
                        "stream {idx} ({dname}) missing from a report"
                    )))
                }
            };
            let mut a = Agg::one(l, r);
            let rcv = if l.sender { r } else { l };
            if rcv.secs > 0.0 && rcv.secs < 0.5 {
                a.warnings.push(Warning::ShortInterval { secs: rcv.secs });
            }
            for (rep, side) in [(l, Side::Client), (r, Side::Agent)] {
                if let Some(cpu) = rep.cpu_s.filter(|_| rep.secs > 0.0) {
                    if cpu / rep.secs > 0.95 {
                        a.warnings.push(Warning::CpuBound {
                            role: format!(
                                "{} thread",
                                if rep.sender { "sender" } else { "receiver" }
                            ),
                            side,
                            pct: cpu / rep.secs * 100.0,
                            hint: "try more --streams".into(),
                        });
                    }
                }
            }
            if p.streams > 1 || p.direction == Direction::Bidir {
                let mut rec = base(Some(idx), dname);
                a.fill(&mut rec);
                // A stream's row keeps its interval, not its progress.
                if let Some(i) = rec.interval.as_mut() {
                    i.progress = None;
                }
                rows.push(rec);
            }
            parts.push(a);
        }
        per_dir.push((dname, Agg::sum(&parts)?));
    }
    let mut out = Vec::new();
    if p.direction == Direction::Bidir {
        let total = Agg::sum(per_dir.iter().map(|(_, d)| d))?;
        let mut rec = base(None, "bidir");
        total.fill(&mut rec);
        // The two directions' progress are on their own records.
        if let Some(i) = rec.interval.as_mut() {
            i.progress = None;
        }
        host(&mut rec);
        out.push(rec);
    }
    for (dname, d) in &per_dir {
        let mut rec = base(None, dname);
        d.fill(&mut rec);
        host(&mut rec);
        out.push(rec);
    }
    out.extend(rows);
    Ok(out)
}
