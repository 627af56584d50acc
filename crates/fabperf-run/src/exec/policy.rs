//! The `[policy] target = "command"` hook: the runner sets each batch's
//! policy count with the plan's command (bounded by its timeout), and 0
//! at the end of the run.

use super::errors::CellError;
use super::progress::printable;
use super::Exec;
use crate::plan;
use fabperf_store::CellSpec;
use serde_json::Value;
use std::time::Duration;
use wait_timeout::ChildExt;

/// Run the plan's policy command with FABPERF_POLICIES=n, bounded by its
/// timeout (killed after it). Err: why, with the end of its output.
pub fn run_policy_command(
    argv: &[String],
    timeout: Duration,
    n: u32,
    plan: &str,
    cell: &str,
) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("FABPERF_POLICIES", n.to_string())
        .env("FABPERF_PLAN", plan)
        .env("FABPERF_CELL", cell)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run the policy command {:?}: {}",
                argv[0],
                plan::os_text(&e)
            )
        })?;
    match child.wait_timeout(timeout) {
        Ok(Some(_)) => {}
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "the policy command did not finish within {} s and was killed",
                timeout.as_secs_f64()
            ));
        }
        Err(e) => return Err(format!("waiting for the policy command: {e}")),
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for the policy command: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    Err(format!(
        "the policy command for {n} policies failed ({}): {}",
        out.status,
        printable(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
    ))
}

impl Exec<'_> {
    /// With `[policy] target = "command"`: set the batch's policy count
    /// (when it differs from what is set).
    pub(super) fn policy_step(&mut self, cells: &[CellSpec]) -> Result<(), CellError> {
        let crate::plan::PolicyTarget::Command { argv, timeout } = &self.plan.policy_target else {
            return Ok(());
        };
        let Some(n) = cells
            .first()
            .and_then(|c| c.dims.get("policies"))
            .and_then(Value::as_u64)
        else {
            return Ok(());
        };
        let n = n as u32;
        if self.policy_now == Some(n) {
            return Ok(());
        }
        self.progress
            .line(&format!("fabperf run: policy command: {n} policies"));
        // Unknown until it succeeds: a failed command may have set part.
        self.policy_now = None;
        self.policy_touched = true;
        run_policy_command(argv, *timeout, n, &self.plan.name, &cells[0].cell_id).map_err(
            |msg| CellError {
                msg,
                transient: false,
            },
        )?;
        self.policy_now = Some(n);
        Ok(())
    }

    /// With `[policy] target = "command"`: back to 0 policies at the end.
    pub(super) fn policy_reset(&mut self) {
        if let crate::plan::PolicyTarget::Command { argv, timeout } = &self.plan.policy_target {
            if self.policy_touched && self.policy_now != Some(0) {
                if let Err(e) = run_policy_command(argv, *timeout, 0, &self.plan.name, "end") {
                    self.progress
                        .warn(&format!("setting 0 policies at the end of the run: {e}"));
                }
                self.policy_now = Some(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn the_policy_command_gets_the_count_and_its_failure_says_why() {
        let ok = sh(r#"test "$FABPERF_POLICIES/$FABPERF_PLAN/$FABPERF_CELL" = "4/p/c1""#);
        assert_eq!(
            run_policy_command(&ok, Duration::from_secs(10), 4, "p", "c1"),
            Ok(())
        );
        let e = run_policy_command(&ok, Duration::from_secs(10), 5, "p", "c1").unwrap_err();
        assert!(
            e.starts_with("the policy command for 5 policies failed ("),
            "{e}"
        );
        let e = run_policy_command(
            &sh("echo one >&2; echo two >&2; printf 'x\\033y\\n' >&2; exit 3"),
            Duration::from_secs(10),
            2,
            "p",
            "c1",
        )
        .unwrap_err();
        assert_eq!(
            e,
            "the policy command for 2 policies failed (exit status: 3): one | two | x\\x1by"
        );
        let e = run_policy_command(
            &["/nonexistent/policy-cmd".into()],
            Duration::from_secs(10),
            1,
            "p",
            "c1",
        )
        .unwrap_err();
        assert!(
            e.starts_with("cannot run the policy command \"/nonexistent/policy-cmd\": "),
            "{e}"
        );
    }

    #[test]
    fn a_policy_command_past_its_timeout_is_killed() {
        let t0 = Instant::now();
        let e = run_policy_command(&sh("sleep 30"), Duration::from_millis(300), 1, "p", "c")
            .unwrap_err();
        assert_eq!(
            e,
            "the policy command did not finish within 0.3 s and was killed"
        );
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(10),
            "{took:?}"
        );
    }
}
