//! Executing a plan: find the agents, expand the cells, run what the store
//! lacks, batch by batch, committing each finished cell. One file per
//! concern:
//!
//! - `discovery`: find the plan's agents and ask each for its hello;
//! - `resume`: the store under the runner's lease, the run a plan goes
//!   into, and the cells left to run;
//! - `batches`: pending cells batch by batch, with retries and the ETA;
//!   each batch's policy step, environment, flows and restore;
//! - `policy`: the `[policy] command` hook (the batch's policy count);
//! - `tuning`: the agents' tune sessions that hold a cell's environment;
//! - `flows`: a batch's drive sessions opened, started together, collected;
//! - `setup`: a round's set-up: at most [`SETUP_PER_RECEIVER`] flows toward
//!   one receiver, and the watch that calls off stragglers ([`straggle_limit`]);
//! - `aggregate`: a cell's flow results turned into measurements;
//! - `retest`: a mesh's suspect pairs measured again, batches sharing no node;
//! - `labels`: one-line texts of a cell and of its result;
//! - `progress`: the progress bar or log lines, text made terminal-safe;
//! - `signals`: SIGINT/SIGTERM as a flag the runner checks;
//! - `errors`: why a run or one attempt at a cell fails, and which
//!   failures are worth another attempt.

mod aggregate;
mod batches;
mod discovery;
mod errors;
mod flows;
mod labels;
mod policy;
mod progress;
mod resume;
mod retest;
mod setup;
mod signals;
mod tuning;

pub use aggregate::{cell_measurements, MIN_OVERLAP_PCT};
pub use discovery::{discover, MAX_PROBE_THREADS};
pub use errors::RunError;
pub use flows::START_MARGIN;
pub use labels::cell_label;
pub use policy::run_policy_command;
pub use progress::{printable, printable_block, ProgressMode};
pub use setup::{straggle_limit, SETUP_PER_RECEIVER};
pub use signals::{install_signal_handlers, interrupt};

use crate::cells::{expand, Roster, RosterAgent};
use crate::ctlplane;
use crate::plan::{self, Pattern, Plan};
use batches::largest_batch;
use fabperf_proto::ClientConfig;
use fabperf_store::{CellRow, CellSpec, CellState, Store};
use progress::Progress;
use retest::{has_retests, retest_mesh};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `fabperf run` options.
/// `fabperf run` options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: PathBuf,
    pub db: PathBuf,
    /// Rerun cells stored as failed.
    pub retry_failed: bool,
    /// Start a new run instead of resuming the plan's last one.
    pub new_run: bool,
    /// Resume this run.
    pub run_id: Option<i64>,
    /// Find the agents and list the cells, run nothing.
    pub dry_run: bool,
    pub progress: ProgressMode,
    /// Overrides the plan's token_file.
    pub token: Option<Vec<u8>>,
    /// How long to wait for another runner's lease on the store before
    /// giving up (zero: refuse at once).
    pub lease_wait: Duration,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunOutcome {
    pub run_id: i64,
    pub cells: usize,
    pub done: usize,
    pub failed: usize,
    pub pending: usize,
    /// Cells run by this invocation.
    pub ran: usize,
    pub wall_s: f64,
    /// Seconds inside tests (from the start signal to the last result of
    /// each batch), summed over batches.
    pub test_s: f64,
    /// Seconds inside the tests' own intervals (warm-up + measured
    /// interval, the longest of each batch), summed over batches.
    pub measured_s: f64,
    pub interrupted: bool,
    /// Where the wall time went.
    pub phases: ctlplane::Phases,
    /// The process's peak threads and open files (as noted where they
    /// peak) and its resident memory's high-water mark.
    pub usage: ctlplane::Usage,
}

/// The state of a run in progress: the plan, its agents, the store, the
/// progress shown and the tallies of the outcome.
struct Exec<'a> {
    plan: &'a Plan,
    roster: &'a Roster,
    cfg: ClientConfig,
    store: &'a mut Store,
    run_id: i64,
    progress: Progress,
    ran: usize,
    test_s: f64,
    measured_s: f64,
    /// Where the wall time went.
    phases: ctlplane::Phases,
    /// Observed wall / expected seconds, for the ETA.
    seen_wall: f64,
    seen_expected: f64,
    /// Tuning warnings already in the log (each is logged once per run).
    logged: BTreeSet<String>,
    /// The policy count the `[policy] command` last set (`None`: unknown,
    /// e.g. after a failure).
    policy_now: Option<u32>,
    /// The policy command ran in this invocation.
    policy_touched: bool,
}

impl<'a> Exec<'a> {
    fn new(
        plan: &'a Plan,
        roster: &'a Roster,
        cfg: ClientConfig,
        store: &'a mut Store,
        run_id: i64,
        progress: Progress,
    ) -> Exec<'a> {
        Exec {
            plan,
            roster,
            cfg,
            store,
            run_id,
            progress,
            ran: 0,
            test_s: 0.0,
            measured_s: 0.0,
            phases: ctlplane::Phases::default(),
            seen_wall: 0.0,
            seen_expected: 0.0,
            logged: BTreeSet::new(),
            policy_now: None,
            policy_touched: false,
        }
    }

    fn agent(&self, path: &str, name: &str) -> Option<&RosterAgent> {
        self.roster.get(path, name)
    }

    /// Test by test: its pending cells, then the mesh re-tests of that
    /// test. Returns false when interrupted.
    fn run_tests(&mut self, pending: &[CellSpec], retry_failed: bool) -> Result<bool, RunError> {
        let plan = self.plan;
        for t in &plan.tests {
            let mine: Vec<CellSpec> = pending
                .iter()
                .filter(|c| c.test == t.name)
                .cloned()
                .collect();
            if !self.run_cells(mine)? {
                return Ok(false);
            }
            if let Pattern::Mesh {
                retest,
                retest_sample,
                ..
            } = t.pattern
            {
                if retest > 0 && !retest_mesh(self, t, retest, retest_sample, retry_failed)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// Run (or resume) a plan.
pub fn run(opts: &RunOptions) -> Result<RunOutcome, RunError> {
    let t_start = Instant::now();
    let plan = plan::load(&opts.plan).map_err(RunError::Plan)?;
    let cfg = client_config(opts, &plan)?;
    let quiet = opts.progress == ProgressMode::Quiet;
    let say = |s: &str| {
        if !quiet {
            eprintln!("fabperf run: {s}");
        }
    };
    let roster = find_agents(&plan, &cfg)?;
    let cells = expand(&plan, &roster).map_err(RunError::Plan)?;
    say(&plan_line(&plan, &roster, &cells));
    if opts.dry_run {
        list_agents_and_cells(&roster, &cells);
        return Ok(RunOutcome::nothing_run(cells.len(), t_start));
    }
    ensure_open_files(&cells)?;
    let mut open = resume::open_run(opts, &plan, &roster, &cells, &say)?;
    let run_id = open.run.id;
    let pending = resume::pending_cells(&open.store, run_id, &cells)?;
    if pending.is_empty() && !has_retests(&plan) {
        say(&format!("nothing to run: every cell of run {run_id} is finished; `fabperf run --new-run` measures again"));
    }
    let progress = Progress::new(opts.progress, cells.len(), cells.len() - pending.len());
    let mut ex = Exec::new(&plan, &roster, cfg, &mut open.store, run_id, progress);
    ex.phases.before_s = t_start.elapsed().as_secs_f64();
    let complete = ex.run_tests(&pending, opts.retry_failed)?;
    let t_after = Instant::now();
    ex.policy_reset();
    ex.progress.finish();
    let (ran, test_s, measured_s, mut phases) = (ex.ran, ex.test_s, ex.measured_s, ex.phases);
    let (cells, done, failed, pending) = tally(&mut open.store, run_id, complete)?;
    phases.after_s = t_after.elapsed().as_secs_f64();
    Ok(RunOutcome {
        run_id,
        cells,
        done,
        failed,
        pending,
        ran,
        wall_s: t_start.elapsed().as_secs_f64(),
        test_s,
        measured_s,
        interrupted: !complete,
        phases,
        usage: ctlplane::peak_usage(),
    })
}

/// How the runner talks to agents: the token (the command line's, else
/// the plan's token file) and the plan's timeout.
fn client_config(opts: &RunOptions, plan: &Plan) -> Result<ClientConfig, RunError> {
    let token = match (&opts.token, &plan.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => Some(fabperf_proto::auth::read_token_file(f).map_err(RunError::Plan)?),
        (None, None) => None,
    };
    Ok(ClientConfig {
        token,
        timeout: plan.timeout,
        group: None,
    })
}

/// The plan's agents, each asked for its hello; what discovery found
/// wrong is printed as warnings (even when quiet).
fn find_agents(plan: &Plan, cfg: &ClientConfig) -> Result<Roster, RunError> {
    let mut warnings = Vec::new();
    let roster = discover(plan, cfg, &mut |w| warnings.push(w)).map_err(RunError::Other)?;
    for w in &warnings {
        eprintln!("fabperf run: warning: {}", printable(w));
    }
    Ok(roster)
}

/// The line that opens a run: the plan, its agents, its cells.
fn plan_line(plan: &Plan, roster: &Roster, cells: &[CellSpec]) -> String {
    let up = roster.all().filter(|a| a.reachable).count();
    format!(
        "plan {:?}: {} agents ({} reachable) on {} path(s), {} cells",
        plan.name,
        roster.all().count(),
        up,
        roster.by_path.len(),
        cells.len()
    )
}

/// `--dry-run`: the agents and the cells on stdout.
fn list_agents_and_cells(roster: &Roster, cells: &[CellSpec]) {
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    for a in roster.all() {
        let _ = writeln!(
            o,
            "agent {:<20} path {:<10} {} {}",
            a.name,
            a.path,
            a.addr,
            if a.reachable {
                "reachable"
            } else {
                "UNREACHABLE"
            }
        );
    }
    for c in cells {
        let _ = writeln!(
            o,
            "cell {} batch {:>4}  {}",
            c.cell_id,
            c.batch,
            cell_label(c)
        );
    }
}

impl RunOutcome {
    /// A dry run's outcome: every cell pending, nothing run.
    fn nothing_run(cells: usize, t_start: Instant) -> RunOutcome {
        RunOutcome {
            run_id: 0,
            cells,
            done: 0,
            failed: 0,
            pending: cells,
            ran: 0,
            wall_s: t_start.elapsed().as_secs_f64(),
            test_s: 0.0,
            measured_s: 0.0,
            interrupted: false,
            phases: ctlplane::Phases::default(),
            usage: ctlplane::peak_usage(),
        }
    }
}

/// Raise the open-files limit to what the largest batch needs (a session
/// per flow, its duplicate while results are awaited, a tune session per
/// agent of a cell with an environment).
fn ensure_open_files(cells: &[CellSpec]) -> Result<(), RunError> {
    let (flows, tunes) = largest_batch(cells);
    fabperf_http::rlimit::ensure_nofile(
        ctlplane::fds_needed(flows, tunes),
        &format!("this plan's largest batch ({flows} concurrent flows)"),
    )
    .map_err(RunError::Other)?;
    Ok(())
}

/// The current plan's cells and their re-tests: how many, done, failed
/// and pending. A run that completed with none pending is ended.
fn tally(
    store: &mut Store,
    run_id: i64,
    complete: bool,
) -> Result<(usize, usize, usize, usize), RunError> {
    let mine: Vec<CellRow> = store.plan_cells(run_id)?.current;
    let count = |s: CellState| mine.iter().filter(|c| c.state == s).count();
    let (done, failed, pend) = (
        count(CellState::Done),
        count(CellState::Failed),
        count(CellState::Pending),
    );
    if complete && pend == 0 {
        store.end_run(run_id)?;
    }
    Ok((mine.len(), done, failed, pend))
}
