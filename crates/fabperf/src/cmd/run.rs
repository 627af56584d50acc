//! `fabperf run | runs | export | mesh-summary`: plans, the results store.

use fabperf_run::exec::{ProgressMode, RunError, RunOptions};
use fabperf_run::summary;
use fabperf_store::{CellState, Store};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status for an interrupted run (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The plan file (TOML): agents, tests, sweeps, patterns (see docs/run.md).
    pub plan: PathBuf,
    /// The results store (SQLite); created when missing. Default:
    /// fabperf-results/<plan name>.db
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Run the cells stored as failed again.
    #[arg(long)]
    pub retry_failed: bool,
    /// Start a new run instead of resuming the plan's last one.
    #[arg(long, conflicts_with = "run")]
    pub new_run: bool,
    /// Resume this run (default: the plan's last run).
    #[arg(long, value_name = "ID")]
    pub run: Option<i64>,
    /// Find the agents and list the cells; measure nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The shared secret of the agents (overrides the plan's token_file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Plain log lines instead of a progress bar.
    #[arg(long, conflicts_with = "quiet")]
    pub plain: bool,
    /// Only warnings and the final summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print how the run ended as JSON on stdout: the cells, the wall
    /// time and where it went (phases), the runner's peak threads, open
    /// files and resident memory.
    #[arg(long, conflicts_with = "dry_run")]
    pub json: bool,
    /// When another `fabperf run` holds the store, wait this long for it
    /// (`30s`, `10m`, `2h`) before giving up; default: give up at once.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = lease_wait)]
    pub wait: std::time::Duration,
}

fn lease_wait(s: &str) -> Result<std::time::Duration, String> {
    fabperf_units::parse_duration(s, fabperf_units::TimeUnit::Seconds)
}

fn default_db(plan: &Path) -> PathBuf {
    let name = fabperf_run::load(plan)
        .map(|p| p.name)
        .unwrap_or_else(|_| "fabperf".into());
    PathBuf::from("fabperf-results").join(format!("{name}.db"))
}

pub fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let token = super::common::read_token(a.token_file.as_deref())?;
    let db = a.db.clone().unwrap_or_else(|| default_db(&a.plan));
    let opts = RunOptions {
        plan: a.plan.clone(),
        db: db.clone(),
        retry_failed: a.retry_failed,
        new_run: a.new_run,
        run_id: a.run,
        dry_run: a.dry_run,
        progress: if a.quiet {
            ProgressMode::Quiet
        } else if a.plain {
            ProgressMode::Plain
        } else {
            ProgressMode::Auto
        },
        token,
        lease_wait: a.wait,
    };
    fabperf_run::exec::install_signal_handlers().map_err(anyhow::Error::msg)?;
    let out = match fabperf_run::run(&opts) {
        Ok(o) => o,
        Err(RunError::Plan(e)) => {
            eprintln!("fabperf run: {e}");
            return Ok(ExitCode::from(2));
        }
        Err(RunError::Other(e)) => anyhow::bail!("{e}"),
    };
    if a.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    let pct = |x: f64| {
        if out.wall_s > 0.0 {
            x / out.wall_s * 100.0
        } else {
            0.0
        }
    };
    eprintln!(
        "fabperf run: run {} in {}: {} cells done, {} failed, {} pending; {} run now in {:.1} s ({:.1}% of it inside tests, {:.1}% inside their warm-up and measured intervals)",
        out.run_id,
        db.display(),
        out.done,
        out.failed,
        out.pending,
        out.ran,
        out.wall_s,
        pct(out.test_s),
        pct(out.measured_s)
    );
    let ph = &out.phases;
    eprintln!(
        "fabperf run: wall time: {:.1} s before the first batch, {:.1} s setting flows up, {:.1} s starting them, {:.1} s in the tests, {:.1} s restoring and storing, {:.1} s backing off, {:.1} s choosing re-tests, {:.1} s after; runner peak: {} threads, {} open files, {} MiB resident",
        ph.before_s,
        ph.setup_s,
        ph.start_s,
        ph.tests_s,
        ph.commit_s,
        ph.backoff_s,
        ph.retest_s,
        ph.after_s,
        out.usage.threads,
        out.usage.fds,
        out.usage.rss_kib / 1024
    );
    if a.json {
        let mut v = serde_json::to_value(&out)?;
        v["db"] = serde_json::Value::String(db.display().to_string());
        v["measured_share"] = serde_json::json!(pct(out.measured_s) / 100.0);
        v["test_share"] = serde_json::json!(pct(out.test_s) / 100.0);
        let stdout = std::io::stdout();
        let mut o = stdout.lock();
        writeln!(o, "{}", serde_json::to_string_pretty(&v)?)?;
    }
    if out.interrupted {
        eprintln!(
            "fabperf run: interrupted; the finished cells are stored. The same command resumes: fabperf run {}{}",
            a.plan.display(),
            a.db.as_ref()
                .map(|d| format!(" --db {}", d.display()))
                .unwrap_or_default()
        );
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    eprintln!(
        "fabperf run: see `fabperf mesh-summary --db {0}` and `fabperf export --db {0} --format csv`",
        db.display()
    );
    if out.failed > 0 {
        eprintln!(
            "fabperf run: {} cell(s) failed (errors in the store: `fabperf runs --db {} --cells`); --retry-failed runs them again",
            out.failed,
            db.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct RunsArgs {
    /// The results store.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// Also list every cell of the chosen run (default: the last one).
    #[arg(long)]
    pub cells: bool,
    /// The run whose cells to list.
    #[arg(long, value_name = "ID")]
    pub run: Option<i64>,
}

pub fn runs(a: RunsArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open_read_only(&a.db)?;
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    let runs = store.runs()?;
    writeln!(
        o,
        "{:>4}  {:<24} {:<25} {:<25} {:>6} {:>6} {:>7} {:>6}",
        "run", "plan", "started", "ended", "done", "failed", "pending", "stale"
    )?;
    for r in &runs {
        // The current plan's cells; "stale": stored under an earlier
        // version of the plan, counted nowhere.
        let cells = store.plan_cells(r.id)?;
        let n = |s: CellState| cells.current.iter().filter(|c| c.state == s).count();
        writeln!(
            o,
            "{:>4}  {:<24} {:<25} {:<25} {:>6} {:>6} {:>7} {:>6}",
            r.id,
            fabperf_run::exec::printable(&r.plan_name),
            r.started_at,
            r.ended_at.as_deref().unwrap_or("-"),
            n(CellState::Done),
            n(CellState::Failed),
            n(CellState::Pending),
            cells.stale.len()
        )?;
    }
    if a.cells {
        let id = match a.run.or(runs.last().map(|r| r.id)) {
            Some(id) => id,
            None => return Ok(ExitCode::SUCCESS),
        };
        writeln!(o)?;
        let cells = store.plan_cells(id)?;
        let stale: Vec<(bool, fabperf_store::CellRow)> =
            cells.stale.into_iter().map(|c| (true, c)).collect();
        for (old, c) in cells.current.into_iter().map(|c| (false, c)).chain(stale) {
            writeln!(
                o,
                "{} {:<7} {}{}{}",
                c.spec.cell_id,
                c.state.as_str(),
                if old {
                    "[not in the current plan] "
                } else {
                    ""
                },
                fabperf_run::exec::printable(&fabperf_run::exec::cell_label(&c.spec)),
                c.error
                    .as_deref()
                    .map(|e| format!(": {}", fabperf_run::exec::printable(e)))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ExportFormat {
    Jsonl,
    Csv,
    /// OpenMetrics text: every measurement as labelled gauges.
    Openmetrics,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The results store.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: ExportFormat,
    /// Only this run (default: every run).
    #[arg(long, value_name = "ID")]
    pub run: Option<i64>,
    /// Write here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// PUT the metrics to a Prometheus Pushgateway (http://HOST:9091, one
    /// group per run: job="fabperf", run=ID); needs --format openmetrics.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// OpenMetrics: one series per stored record, with `repeat`, `cell` and
    /// `stream` labels (default: one series per measurement place, the mean
    /// over its repeats, so the cardinality is bounded by the plan).
    #[arg(long)]
    pub per_measurement: bool,
}

pub fn export(a: ExportArgs) -> anyhow::Result<ExitCode> {
    if a.push.is_some() && !matches!(a.format, ExportFormat::Openmetrics) {
        eprintln!("fabperf export: --push needs --format openmetrics");
        return Ok(ExitCode::from(2));
    }
    let store = Store::open_read_only(&a.db)?;
    if let ExportFormat::Openmetrics = a.format {
        return super::report::export_openmetrics(
            &store,
            a.run,
            a.out.as_deref(),
            a.push.as_deref(),
            a.per_measurement,
        );
    }
    let write = |w: &mut dyn Write| -> anyhow::Result<usize> {
        Ok(match a.format {
            ExportFormat::Jsonl => fabperf_store::export_jsonl(&store, a.run, w)?,
            ExportFormat::Csv => fabperf_store::export_csv(&store, a.run, w)?,
            ExportFormat::Openmetrics => unreachable!("written by export_openmetrics above"),
        })
    };
    let n = match &a.out {
        // The rule of every output flag: nothing at FILE changes unless the
        // whole export was written.
        Some(p) => {
            let mut o = fabperf_results::files::Output::create(p).map_err(anyhow::Error::msg)?;
            let n = write(&mut std::io::BufWriter::new(&mut o))?;
            o.commit().map_err(anyhow::Error::msg)?;
            n
        }
        None => write(&mut std::io::BufWriter::new(std::io::stdout().lock()))?,
    };
    super::skipped_note("export", &store);
    if a.out.is_some() {
        eprintln!("fabperf export: {n} measurements written");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args, Debug)]
pub struct MeshSummaryArgs {
    /// The results store.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// The run (default: the last one).
    #[arg(long, value_name = "ID")]
    pub run: Option<i64>,
    /// Only this mesh test (the plan's test name).
    #[arg(long, value_name = "NAME")]
    pub test: Option<String>,
    /// A pair is suspect below this fraction of the reference pair's
    /// bandwidth (default: the plan's suspect_bw, else ClusterKit's 0.93).
    #[arg(long, value_name = "FRACTION", value_parser = fraction)]
    pub bw_threshold: Option<f64>,
    /// A pair is suspect above this multiple of the reference pair's
    /// latency (default: the plan's suspect_lat, else ClusterKit's 2.1).
    #[arg(long, value_name = "FACTOR", value_parser = factor)]
    pub lat_factor: Option<f64>,
    /// The reference pair: `median` (robust to lucky pairs) or `clusterkit`
    /// (the best pair) (default: the plan's suspect_rule, else median).
    #[arg(long, value_name = "RULE", value_parser = rule_kind)]
    pub rule: Option<summary::RuleKind>,
    /// JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v > 0.0 && v <= 1.0) {
        return Err(format!("{v} is not a fraction in (0, 1]"));
    }
    Ok(v)
}

fn rule_kind(s: &str) -> Result<summary::RuleKind, String> {
    summary::RuleKind::parse(s)
        .ok_or_else(|| format!("{s:?} is not a rule; one of: {}", summary::RuleKind::NAMES))
}

fn factor(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v.is_finite() && v >= 1.0) {
        return Err(format!("{v} is not a factor of at least 1"));
    }
    Ok(v)
}

pub fn mesh_summary(a: MeshSummaryArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open_read_only(&a.db)?;
    let run = match a.run {
        Some(id) => store.run(id)?,
        None => store
            .latest_run()?
            .ok_or_else(|| anyhow::anyhow!("{} holds no run yet", a.db.display()))?,
    };
    // The plan's own thresholds, unless overridden.
    let plan = fabperf_run::parse(&run.plan_text, "stored plan", Path::new(".")).ok();
    let tests = summary::mesh_tests(&store, run.id)?;
    match &a.test {
        Some(t) if !tests.contains(t) => anyhow::bail!(
            "run {} has no mesh test {t:?}; its mesh tests: {}",
            run.id,
            if tests.is_empty() {
                "none".to_string()
            } else {
                tests.join(", ")
            }
        ),
        _ => {}
    }
    if tests.is_empty() {
        eprintln!("fabperf mesh-summary: run {} has no mesh test", run.id);
        return Ok(ExitCode::FAILURE);
    }
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    let mut all = Vec::new();
    for t in &tests {
        let decl = plan
            .as_ref()
            .and_then(|p| p.tests.iter().find(|d| &d.name == t));
        let bw = a
            .bw_threshold
            .or(decl.map(|d| d.suspect_bw))
            .unwrap_or(summary::DEFAULT_BW_FRACTION);
        let lat = a
            .lat_factor
            .or(decl.map(|d| d.suspect_lat))
            .unwrap_or(summary::DEFAULT_LAT_FACTOR);
        let kind = a.rule.or(decl.map(|d| d.suspect_rule)).unwrap_or_default();
        all.push(summary::analyze(
            &store,
            run.id,
            t,
            &summary::Rule::new(kind, bw, lat),
        )?);
    }
    // A node one test names explains the links it slows in another: every
    // mesh test is judged, also with `--test`, which picks what is shown.
    summary::explain_across(&mut all);
    if let Some(t) = &a.test {
        all.retain(|an| &an.test == t);
    }
    if a.json {
        serde_json::to_writer_pretty(&mut o, &all)?;
        writeln!(o)?;
    } else {
        for an in &all {
            o.write_all(fabperf_run::exec::printable_block(&summary::render(an)).as_bytes())?;
        }
    }
    super::skipped_note("mesh-summary", &store);
    Ok(ExitCode::SUCCESS)
}
