//! Cells with an environment (a profile, a policy count applied by the
//! agents): each agent of the cell opens a tune session that holds it
//! while the flows run, and restores it after.

use super::errors::{classify, CellError};
use super::Exec;
use crate::cells::RosterAgent;
use crate::ctlplane;
use fabperf_proto::{ClientConfig, Control, ProtoError};
use fabperf_store::CellSpec;
use fabperf_tune::{end_tune, open_tune, TuneParams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// A batch's tune sessions, the cells that could not be tuned, and each
/// cell's warnings.
type TunedBatch = (
    Vec<TuneSession>,
    BTreeMap<usize, CellError>,
    BTreeMap<usize, Vec<String>>,
);

/// A tune session as opened: cell, agent, the session and its report.
type TuneOpened = (
    usize,
    String,
    Result<(Control, fabperf_tune::ApplyReport), ProtoError>,
);

/// One agent holding a cell's environment.
pub(super) struct TuneSession {
    pub(super) cell: usize,
    pub(super) agent: String,
    pub(super) ctl: Control,
}

impl Exec<'_> {
    /// Log a warning once per run.
    fn warn_once(&mut self, w: &str) {
        if self.logged.insert(w.to_string()) {
            self.progress.warn(w);
        }
    }

    /// The tune request for a cell with an environment (a profile, a
    /// policy count), or `None`.
    fn tune_params(&self, c: &CellSpec, agent: &RosterAgent) -> Option<TuneParams> {
        let profile = c
            .dims
            .get("profile")
            .and_then(Value::as_str)
            .and_then(|n| self.plan.profiles.get(n))
            .cloned();
        // With a policy command the runner sets the count, not the agents.
        let by_agents = self.plan.policy_target == crate::plan::PolicyTarget::Agents;
        let policies = c
            .dims
            .get("policies")
            .and_then(Value::as_u64)
            .filter(|_| by_agents)
            .map(|n| fabperf_tune::PolicySpec {
                rules: n as u32,
                conntrack: c
                    .dims
                    .get("policy_conntrack")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            });
        if profile.is_none() && policies.is_none() {
            return None;
        }
        Some(TuneParams {
            profile,
            policies,
            addr: Some(agent.test_addr.ip()),
            hold_s: self.expected(c) + 3.0 * self.plan.timeout.as_secs_f64() + 30.0,
        })
    }

    /// Every agent of every cell with an environment applies it; returns
    /// the sessions that hold it, the cells that could not get it, and the
    /// warnings of each cell (settings not applied, outside entries).
    pub(super) fn tune_batch(&mut self, cells: &[CellSpec]) -> TunedBatch {
        let mut asks: Vec<(usize, String, SocketAddr, TuneParams, ClientConfig)> = Vec::new();
        let mut failed: BTreeMap<usize, CellError> = BTreeMap::new();
        for (ci, c) in cells.iter().enumerate() {
            let mut names: Vec<&String> = c.flows.iter().flat_map(|(a, b)| [a, b]).collect();
            names.sort();
            names.dedup();
            for n in names {
                let Some(a) = self.agent(&c.path, n) else {
                    continue;
                };
                let Some(p) = self.tune_params(c, a) else {
                    continue;
                };
                if a.addr.port() == 0 {
                    continue;
                }
                let mut cfg = self.cfg.clone();
                cfg.group = Some(c.cell_id.clone());
                asks.push((ci, n.clone(), a.addr, p, cfg));
            }
        }
        let opened: Vec<Option<TuneOpened>> = ctlplane::pooled(
            asks,
            ctlplane::FLOW_WORKERS,
            |(ci, name, addr, p, cfg)| Some((ci, name, open_tune(addr, &cfg, &p))),
            || None,
        );
        let opened = opened.into_iter().flatten();
        let mut sessions = Vec::new();
        let mut warnings: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (ci, agent, r) in opened {
            match r {
                Ok((ctl, report)) => {
                    let w = warnings.entry(ci).or_default();
                    for n in &report.notes {
                        w.push(format!("{} on {agent}: {n}", report.what));
                    }
                    w.extend(report.warnings(&agent));
                    sessions.push(TuneSession {
                        cell: ci,
                        agent,
                        ctl,
                    });
                }
                Err(e) => {
                    failed.entry(ci).or_insert(CellError {
                        transient: classify(&e),
                        msg: format!("tuning {agent} for the cell: {e}"),
                    });
                }
            }
        }
        for ws in warnings.values() {
            for w in ws {
                self.warn_once(w);
            }
        }
        (sessions, failed, warnings)
    }

    /// End the cells' environments: every agent restores and says what it
    /// put back. Returns warnings per cell for restores that failed.
    pub(super) fn untune(&mut self, sessions: Vec<TuneSession>) -> BTreeMap<usize, Vec<String>> {
        let within = self.plan.timeout + Duration::from_secs(30);
        let ended: Vec<(
            usize,
            String,
            Result<fabperf_tune::RestoreReport, ProtoError>,
        )> = ctlplane::pooled(
            sessions,
            ctlplane::FLOW_WORKERS,
            |t| Some((t.cell, t.agent, end_tune(t.ctl, within))),
            || None,
        )
        .into_iter()
        .flatten()
        .collect();
        let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (ci, agent, r) in ended {
            let w = match r {
                Ok(r) if r.ok() => continue,
                Ok(r) => format!("restore on {agent} after the cell: {}", r.summary()),
                Err(e) => format!(
                    "restore on {agent} after the cell: no report ({e}); the agent restores when the session ends, check its log"
                ),
            };
            self.progress.warn(&w);
            out.entry(ci).or_default().push(w);
        }
        out
    }
}
