//! The `tune` test kind: a runner asks an agent to hold a profile and/or a
//! policy-rule count for the length of a cell.
//!
//! ```text
//! runner                                  agent
//!   Start {test: tune, params, group} ->
//!                                           journal, apply, read back
//!         <- Accept {info: ApplyReport}
//!   ... the cell's flows run (same group) ...
//!   Test {end: true} ->
//!                                           restore, read back, drop journal
//!         <- Test {RestoreReport}
//! ```
//!
//! A tune request is authenticated like any test (after the handshake, on
//! agents with `--token-file` only token holders may send one) and checked
//! again on the agent (the profile, the rule count, the address). The
//! agent restores whatever ends the session: the runner's `end`, a closed
//! or broken connection, or the agent's own clock at `hold_s` plus the
//! grace.

use crate::policy::PolicySpec;
use crate::profile::Profile;
use crate::tuner::{ApplyReport, RestoreReport, TuneError, Tuner};
use fabperf_proto::{
    connect_test, decode_params, ClientConfig, Control, ErrorCode, Msg, ProtoError, ServeCtx,
    ServeError, TestKind,
};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The kind's name on the wire.
pub const TUNE: &str = "tune";

/// What the runner asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<PolicySpec>,
    /// The address the agent is tested on (its interface gets the NIC
    /// settings, its pod chain the rules); default: the address the runner
    /// reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<IpAddr>,
    /// Longest the tuning may stay (seconds): the agent restores then even
    /// if the runner never says so.
    pub hold_s: f64,
}

/// The runner's end-of-cell message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneEnd {
    pub end: bool,
}

/// The agent side.
pub struct TuneKind {
    pub tuner: Arc<Tuner>,
    /// The agent's log (escaped by the agent's logger).
    pub log: Arc<dyn Fn(&str) + Send + Sync>,
}

impl TestKind for TuneKind {
    fn name(&self) -> &'static str {
        TUNE
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: TuneParams = decode_params(TUNE, params)?;
        if let Some(prof) = &p.profile {
            prof.validate().map_err(ServeError::bad_request)?;
        }
        if let Some(s) = &p.policies {
            s.validate().map_err(ServeError::bad_request)?;
        }
        if !p.hold_s.is_finite() || p.hold_s <= 0.0 {
            return Err(ServeError::bad_request(
                "tune: hold_s must be a positive number of seconds",
            ));
        }
        ctx.limit_duration(p.hold_s)?;
        let addr = p.addr.unwrap_or_else(|| ctx.local().ip());
        let peer = ctx.peer();
        let report = self
            .tuner
            .apply(
                p.profile.as_ref(),
                p.policies.as_ref(),
                addr,
                ctx.local().port(),
            )
            .map_err(|e| match e {
                TuneError::Busy(m) => ServeError::new(ErrorCode::Busy, m),
                TuneError::Journal(m) | TuneError::Failed(m) => ServeError::failed(m),
            })?;
        for n in &report.notes {
            (self.log)(&format!("{peer}: tune: {n}"));
        }
        (self.log)(&format!(
            "{peer}: tune: {} on {}: {} of {} setting(s) in effect",
            report.what,
            report.interface.as_deref().unwrap_or("-"),
            report.applied(),
            report.items.len()
        ));
        for w in report.warnings("this agent") {
            (self.log)(&format!("{peer}: tune: {w}"));
        }
        let accepted = serde_json::to_value(&report)
            .map_err(|e| ServeError::failed(format!("encoding the report: {e}")));
        let sent = accepted.and_then(|info| {
            ctx.ctl
                .send(&Msg::Accept { info })
                .map_err(ServeError::from)
        });
        // Whatever happens now, the settings go back.
        let waited = match &sent {
            Ok(()) => ctx
                .ctl
                .recv_test_within::<TuneEnd>(
                    Duration::from_secs_f64(p.hold_s),
                    "the runner's end of the cell",
                )
                .map(|_| ()),
            Err(_) => Ok(()),
        };
        let restored = self.tuner.restore();
        if let Some(r) = &restored {
            let why = match &waited {
                Ok(()) => "end of the cell".to_string(),
                Err(e) => format!("the session ended: {e}"),
            };
            (self.log)(&format!("{peer}: tune: restored ({why}): {}", r.summary()));
        }
        sent?;
        match waited {
            Ok(()) => {
                ctx.ctl.send_test(&restored.unwrap_or_default())?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Runner side: open a tune session; the settings hold until
/// [`end_tune`] (or the session's end).
pub fn open_tune(
    addr: SocketAddr,
    cfg: &ClientConfig,
    params: &TuneParams,
) -> Result<(Control, ApplyReport), ProtoError> {
    let v = serde_json::to_value(params).map_err(|e| ProtoError::BadJson(e.to_string()))?;
    let (ctl, info) = connect_test(addr, cfg, TUNE, v)?;
    let report: ApplyReport = serde_json::from_value(info)
        .map_err(|e| ProtoError::BadJson(format!("the agent's tune report: {e}")))?;
    Ok((ctl, report))
}

/// Runner side: end the cell's tuning and get the restore report.
pub fn end_tune(mut ctl: Control, within: Duration) -> Result<RestoreReport, ProtoError> {
    ctl.send_test(&TuneEnd { end: true })?;
    let r = ctl.recv_test_within::<RestoreReport>(within, "the agent's restore report");
    let _ = ctl.send(&Msg::Bye);
    r
}
