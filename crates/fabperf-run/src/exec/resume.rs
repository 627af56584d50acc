//! Which run a plan goes into, and what is left of it: the store under
//! this runner's lease (one runner per store: two would resume the same
//! run and race), the run resumed or a new one, the plan's cells synced
//! with the stored ones, and the cells still pending.

use super::RunError;
use super::RunOptions;
use crate::cells::Roster;
use crate::plan::{self, Plan};
use fabperf_store::{CellSpec, CellState, Lease, LeaseHolder, NewRun, RunInfo, Store};
use std::collections::BTreeSet;

/// The store and the run, held under this runner's lease until dropped;
/// the store closes before the lease is released (fields drop in order).
pub(super) struct OpenRun {
    pub(super) store: Store,
    pub(super) run: RunInfo,
    _lease: Lease,
}

/// Take the store's lease, open the store, choose the run, sync its
/// cells with the plan's and record the agents found.
pub(super) fn open_run(
    opts: &RunOptions,
    plan: &Plan,
    roster: &Roster,
    cells: &[CellSpec],
    say: &dyn Fn(&str),
) -> Result<OpenRun, RunError> {
    if let Some(dir) = opts.db.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(|e| {
                RunError::Other(format!("creating {}: {}", dir.display(), plan::os_text(&e)))
            })?;
        }
    }
    let plan_file = opts.plan.display().to_string();
    let what = |run: Option<i64>| {
        format!(
            "fabperf run {plan_file} (plan {:?}{})",
            plan.name,
            run.map(|r| format!(", run {r}")).unwrap_or_default()
        )
    };
    let mut holder = LeaseHolder::this_process(what(None));
    let mut lease = Lease::acquire(&opts.db, &holder, opts.lease_wait)?;
    let mut store = Store::open(&opts.db)?;
    let run = choose_run(&mut store, opts, plan, &plan_file)?;
    holder.what = what(Some(run.id));
    lease.update(&holder)?;
    sync_cells(&mut store, &run, opts, plan, cells, say)?;
    store.update_run_plan(run.id, &plan.hash, &plan.text, Some(&plan_file))?;
    record_agents(&mut store, run.id, roster)?;
    Ok(OpenRun {
        store,
        run,
        _lease: lease,
    })
}

/// `--run N` (of this plan), a new run with `--new-run`, else the plan's
/// latest run (a new one when it has none).
fn choose_run(
    store: &mut Store,
    opts: &RunOptions,
    plan: &Plan,
    plan_file: &str,
) -> Result<RunInfo, RunError> {
    let new_run = NewRun {
        plan_name: &plan.name,
        plan_hash: &plan.hash,
        plan_file: Some(plan_file),
        plan_text: &plan.text,
    };
    Ok(match (opts.run_id, opts.new_run) {
        (Some(id), _) => {
            let r = store.run(id)?;
            if r.plan_name != plan.name {
                return Err(RunError::Other(format!(
                    "run {id} in {} is of plan {:?}, not {:?}; give that plan or another --run",
                    opts.db.display(),
                    r.plan_name,
                    plan.name
                )));
            }
            r
        }
        (None, true) => store.create_run(&new_run)?,
        (None, false) => match store.latest_run_for_plan(&plan.name)? {
            Some(r) => r,
            None => store.create_run(&new_run)?,
        },
    })
}

/// Put the plan's cells in the run (finished ones with the same
/// parameters are reused; `--retry-failed` makes failed ones pending) and
/// say what a resumed run reuses.
fn sync_cells(
    store: &mut Store,
    run: &RunInfo,
    opts: &RunOptions,
    plan: &Plan,
    cells: &[CellSpec],
    say: &dyn Fn(&str),
) -> Result<(), RunError> {
    let resumed = store
        .cells(run.id)?
        .iter()
        .any(|c| c.state != CellState::Pending);
    let rep = store.sync_cells(run.id, cells, opts.retry_failed)?;
    if resumed {
        say(&format!(
            "resuming run {} ({} cells done, {} failed, {} to run{})",
            run.id,
            rep.done,
            rep.failed,
            rep.pending,
            if rep.failed > 0 && !opts.retry_failed {
                "; --retry-failed reruns the failed ones"
            } else {
                ""
            }
        ));
        if run.plan_hash != plan.hash {
            say(&format!(
                "the plan changed since run {} started: {} finished cells are reused (same parameters), {} cells to run, {} stored cells are no longer in the plan (kept)",
                run.id, rep.done + rep.failed, rep.pending, rep.not_in_plan
            ));
        }
    } else {
        say(&format!("run {} into {}", run.id, opts.db.display()));
    }
    Ok(())
}

/// The agents found, with their hellos, as seen now.
fn record_agents(store: &mut Store, run_id: i64, roster: &Roster) -> Result<(), RunError> {
    let now = fabperf_results::now_rfc3339();
    let agents: Vec<fabperf_store::AgentRow> = roster
        .all()
        .map(|a| fabperf_store::AgentRow {
            name: a.name.clone(),
            path: a.path.clone(),
            addr: a.addr.to_string(),
            hello: a.hello.clone(),
            seen_at: now.clone(),
        })
        .collect();
    store.put_agents(run_id, &agents)?;
    Ok(())
}

/// The plan's cells still pending in the run.
pub(super) fn pending_cells(
    store: &Store,
    run_id: i64,
    cells: &[CellSpec],
) -> Result<Vec<CellSpec>, RunError> {
    let rows = store.cells(run_id)?;
    let in_plan: BTreeSet<&str> = cells.iter().map(|c| c.cell_id.as_str()).collect();
    Ok(rows
        .iter()
        .filter(|c| c.state == CellState::Pending && in_plan.contains(c.spec.cell_id.as_str()))
        .map(|c| c.spec.clone())
        .collect())
}
