//! The flow runner: a batch's drive sessions opened (toward their rails
//! for rail cells), set up, started together at one instant, and their
//! results collected within each flow's wait.

use super::errors::{classify, CellError};
use super::setup::{straggle_limit, Gate, SetupWatch, SETUP_PER_RECEIVER};
use super::signals::interrupted;
use super::{batches::BatchTiming, Exec};
use crate::cells::RosterAgent;
use crate::ctlplane;
use crate::drive::{DriveParams, DriveResult, Go, Ready, DRIVE};
use fabperf_proto::{connect_test, ClientConfig, Control, ErrorCode, Msg, ProtoError};
use fabperf_store::CellSpec;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The least time from the first `go` to the common start; more with many
/// flows (2 ms each), so every `go` is out before the start. Each `go`
/// carries the time left to the start when it is sent, so the margin only
/// has to cover sending them (tens of microseconds each); what it adds to
/// every round is time outside the measured intervals.
pub const START_MARGIN: Duration = Duration::from_millis(50);

/// Open a drive session. An agent still finishing its previous test (its
/// last frames, a peer's bye) answers busy for a moment: ask again, with a
/// growing pause, within the control timeout.
fn open_session(
    addr: SocketAddr,
    cfg: &ClientConfig,
    params: Value,
) -> Result<Control, ProtoError> {
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match connect_test(addr, cfg, DRIVE, params.clone()) {
            Ok((ctl, _)) => return Ok(ctl),
            Err(ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }) if t0.elapsed() + pause < cfg.timeout && !interrupted() => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

/// One open drive session.
struct Session {
    cell: usize,
    flow: usize,
    ctl: Control,
}

/// A cell's flows' results (flow index, result), or why it failed.
pub(super) type CellResult = Result<Vec<(usize, DriveResult)>, CellError>;

/// Where a flow's drive request goes, what it says, and its test group.
type FlowPlan = (
    usize,
    usize,
    Result<(SocketAddr, Value, Option<String>), CellError>,
);

struct FlowResult {
    cell: usize,
    flow: usize,
    result: Result<DriveResult, CellError>,
}

/// The time from the first `go` to the common start of `flows` flows: at
/// least [`START_MARGIN`], and 2 ms more per flow, so every `go` is out
/// before it.
fn start_margin(flows: usize) -> Duration {
    START_MARGIN.max(Duration::from_millis(2) * flows as u32)
}

/// Read every started session's results, each within its own wait from
/// now (`waits`, one per session), on a bounded pool of threads; on SIGINT
/// a watcher closes the sessions. A worker that reaches a session after
/// its deadline still takes what has already arrived.
fn collect_results(sessions: Vec<Session>, waits: &[Duration]) -> Vec<FlowResult> {
    let t0 = Instant::now();
    let streams: Vec<TcpStream> = sessions
        .iter()
        .filter_map(|s| s.ctl.stream().try_clone().ok())
        .collect();
    let finished = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let fin = &finished;
        sc.spawn(move || {
            while !fin.load(Ordering::SeqCst) {
                if interrupted() {
                    for s in &streams {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let items: Vec<(Session, Duration)> =
            sessions.into_iter().zip(waits.iter().copied()).collect();
        let out = ctlplane::pooled(
            items,
            ctlplane::FLOW_WORKERS,
            |(mut s, w)| {
                s.ctl.set_deadline(Some(t0 + w));
                let r = s
                    .ctl
                    .recv_test_within::<DriveResult>(w, "the drive's results")
                    .map_err(|e| CellError {
                        transient: classify(&e),
                        msg: e.to_string(),
                    });
                let _ = s.ctl.send(&Msg::Bye);
                FlowResult {
                    cell: s.cell,
                    flow: s.flow,
                    result: r,
                }
            },
            || FlowResult {
                cell: usize::MAX,
                flow: 0,
                result: Err(CellError {
                    msg: "flow thread panicked".into(),
                    transient: false,
                }),
            },
        );
        finished.store(true, Ordering::SeqCst);
        out
    })
}

impl Exec<'_> {
    /// Where a flow of cell `c` from `s` to `d` goes, with what parameters:
    /// on its rails for a rail cell ([`crate::rails::route`]).
    fn rail_route(
        &self,
        c: &CellSpec,
        s: &RosterAgent,
        d: &RosterAgent,
    ) -> Result<(SocketAddr, Value), CellError> {
        let t = self.plan.tests.iter().find(|t| t.name == c.test);
        match t.and_then(|t| crate::rails::route(t, c, s, d)) {
            Some(Ok(r)) => Ok((r.target, r.params)),
            Some(Err(msg)) => Err(CellError {
                msg,
                transient: false,
            }),
            None => Ok((d.test_addr, c.params.clone())),
        }
    }

    /// Open the drive sessions of a batch, start them together, collect.
    pub(super) fn run_flows(
        &mut self,
        cells: &[CellSpec],
        tuned: &BTreeSet<usize>,
        mut failed: BTreeMap<usize, CellError>,
        t_setup: Instant,
    ) -> (Vec<CellResult>, f64, BatchTiming) {
        let nflows: usize = cells.iter().map(|c| c.flows.len()).sum();
        let sync = nflows > 1;
        // Rail cells: a node serves its rails at once, in one group.
        let rails_group = crate::rails::batch_group(cells);
        // What each flow needs.
        let mut plans: Vec<FlowPlan> = Vec::new();
        // A target that was unreachable when the run began is asked again
        // by the runner itself (once per batch): a driving agent answers a
        // target that does not prove itself only after its full timeout.
        let mut still_down: BTreeMap<SocketAddr, Option<(String, bool)>> = BTreeMap::new();
        for (ci, c) in cells.iter().enumerate() {
            // A cell whose environment could not be applied runs no flow.
            if failed.contains_key(&ci) {
                continue;
            }
            for (fi, (src, dst)) in c.flows.iter().enumerate() {
                let p = (|| {
                    let s = self.agent(&c.path, src).ok_or_else(|| CellError {
                        msg: format!("no agent {src:?} on path {:?}", c.path),
                        transient: false,
                    })?;
                    let d = self.agent(&c.path, dst).ok_or_else(|| CellError {
                        msg: format!("no agent {dst:?} on path {:?}", c.path),
                        transient: false,
                    })?;
                    if s.addr.port() == 0 || d.addr.port() == 0 {
                        let bad = if s.addr.port() == 0 { s } else { d };
                        return Err(CellError {
                            msg: format!(
                                "agent {} has no address ({})",
                                bad.name,
                                bad.hello
                                    .get("unreachable")
                                    .and_then(Value::as_str)
                                    .unwrap_or("not resolved")
                            ),
                            transient: true,
                        });
                    }
                    if !d.reachable {
                        let down = still_down.entry(d.test_addr).or_insert_with(|| {
                            fabperf_proto::query_agent(d.test_addr, &self.cfg)
                                .err()
                                .map(|e| (e.to_string(), classify(&e)))
                        });
                        if let Some((e, transient)) = down {
                            return Err(CellError {
                                msg: format!(
                                    "agent {} ({}) is unreachable: {e}",
                                    d.name, d.test_addr
                                ),
                                transient: *transient,
                            });
                        }
                    }
                    // A cell's concurrent flows share one group, so their
                    // common receiver serves them at once.
                    let group = rails_group.clone().or_else(|| {
                        (c.flows.len() > 1 || tuned.contains(&ci)).then(|| c.cell_id.clone())
                    });
                    let (target, inner) = self.rail_route(c, s, d)?;
                    let params = serde_json::to_value(DriveParams {
                        target,
                        test: c.kind.clone(),
                        params: inner,
                        sync,
                        group,
                    })
                    .map_err(|e| CellError {
                        msg: e.to_string(),
                        transient: false,
                    })?;
                    // A tuned cell's drive session joins the group of the
                    // sender's tune session.
                    Ok((
                        s.addr,
                        params,
                        rails_group
                            .clone()
                            .or_else(|| tuned.contains(&ci).then(|| c.cell_id.clone())),
                    ))
                })();
                plans.push((ci, fi, p));
            }
        }
        let cfg = self.cfg.clone();
        // Open every session concurrently; with `sync` each driving agent
        // sets its test up completely and says so before anything starts.
        // At most SETUP_PER_RECEIVER flows set up toward one receiver at a
        // time, so a cluster-size incast does not flood its handshakes.
        let ready_wait = Duration::from_secs_f64(3.0 * self.plan.timeout.as_secs_f64() + 5.0);
        let gates: BTreeMap<String, Gate> = plans
            .iter()
            .map(|(ci, fi, _)| {
                (
                    cells[*ci].flows[*fi].1.clone(),
                    Gate::new(SETUP_PER_RECEIVER),
                )
            })
            .collect();
        let gates = &gates;
        let watch = SetupWatch::new(straggle_limit(self.plan.timeout));
        let watch = &watch;
        let setup = |(ci, fi, p): FlowPlan| {
            let mut cfg = cfg.clone();
            let _permit = gates[&cells[ci].flows[fi].1].enter();
            let r = p.and_then(|(addr, params, group)| {
                cfg.group = group;
                let ask = |e: ProtoError| CellError {
                    transient: classify(&e),
                    msg: format!("asking {addr} to drive: {e}"),
                };
                let mut ctl = open_session(addr, &cfg, params).map_err(ask)?;
                if sync {
                    watch.waiting((ci, fi), ctl.stream());
                    let r = ctl.recv_test_within::<Ready>(ready_wait, "the flow set up");
                    watch.settled((ci, fi), matches!(r, Ok(Ready { ready: true })));
                    match r {
                        Ok(r) if r.ready => {}
                        Ok(_) => {
                            return Err(CellError {
                                msg: format!("{addr} could not set its flow up"),
                                transient: true,
                            })
                        }
                        Err(_) if watch.was_called_off((ci, fi)) => {
                            return Err(CellError {
                                transient: true,
                                msg: format!(
                                    "setting the flow up on {addr}: not ready {:.1} s after the last other flow of its round was, so it was called off and the round started without it",
                                    watch.limit.as_secs_f64()
                                ),
                            })
                        }
                        Err(e) => {
                            return Err(CellError {
                                transient: classify(&e),
                                msg: format!("setting the flow up on {addr}: {e}"),
                            })
                        }
                    }
                }
                Ok(Session {
                    cell: ci,
                    flow: fi,
                    ctl,
                })
            });
            (ci, fi, r)
        };
        // A bounded pool sets the flows up, however many there are; a
        // watcher calls off the stragglers.
        let opened: Vec<(usize, usize, Result<Session, CellError>)> = std::thread::scope(|sc| {
            if sync {
                sc.spawn(|| watch.watch());
            }
            let opened = ctlplane::pooled(plans, ctlplane::FLOW_WORKERS, setup, || {
                (
                    usize::MAX,
                    0,
                    Err(CellError {
                        msg: "session thread panicked".into(),
                        transient: false,
                    }),
                )
            });
            watch.finish();
            opened
        });
        let mut sessions = Vec::new();
        for (ci, _fi, r) in opened {
            match r {
                Ok(s) => sessions.push(s),
                Err(e) => {
                    failed.entry(ci).or_insert(e);
                }
            }
        }
        // Start together at one instant (or call off the flows of failed
        // cells): each go carries the time left to that instant when it is
        // sent, so sending them one after the other adds no skew.
        let t0 = Instant::now();
        let timing_setup = t0.duration_since(t_setup).as_secs_f64();
        let mut start_at = t0;
        if sync {
            let margin = start_margin(sessions.len());
            let at = Instant::now() + margin;
            start_at = at;
            for s in &mut sessions {
                let go = !failed.contains_key(&s.cell);
                let start_in_s =
                    go.then(|| at.saturating_duration_since(Instant::now()).as_secs_f64());
                if let Err(e) = s.ctl.send_test(&Go { go, start_in_s }) {
                    if go {
                        failed.entry(s.cell).or_insert(CellError {
                            msg: format!("starting the flow: {e}"),
                            transient: true,
                        });
                    }
                }
            }
        }
        sessions.retain(|s| !failed.contains_key(&s.cell));
        let waits: Vec<Duration> = sessions
            .iter()
            .map(|s| {
                Duration::from_secs_f64(
                    self.expected(&cells[s.cell]) + 3.0 * self.plan.timeout.as_secs_f64() + 5.0,
                )
            })
            .collect();
        let results = collect_results(sessions, &waits);
        let t_end = Instant::now();
        let timing = BatchTiming {
            setup_s: timing_setup,
            start_s: start_at.saturating_duration_since(t0).as_secs_f64(),
            tests_s: t_end.saturating_duration_since(start_at).as_secs_f64(),
            restore_s: 0.0,
        };
        let test_s = t0.elapsed().as_secs_f64();
        let mut per_cell: Vec<CellResult> = (0..cells.len()).map(|_| Ok(Vec::new())).collect();
        for (ci, e) in failed {
            if ci < per_cell.len() {
                per_cell[ci] = Err(e);
            }
        }
        for fr in results {
            if fr.cell >= per_cell.len() {
                continue;
            }
            match (&mut per_cell[fr.cell], fr.result) {
                (Ok(v), Ok(r)) => v.push((fr.flow, r)),
                (slot @ Ok(_), Err(e)) => *slot = Err(e),
                (Err(_), _) => {}
            }
        }
        for v in per_cell.iter_mut().flatten() {
            v.sort_by_key(|(f, _)| *f);
        }
        (per_cell, test_s, timing)
    }
}
