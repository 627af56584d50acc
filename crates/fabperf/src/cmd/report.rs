//! `fabperf report`: baseline-relative tables, verdicts, HTML and gates
//! from a results store.

use fabperf_report::gate::{self, Gate};
use fabperf_report::text::{self, Format};
use fabperf_report::{build, Options, ReportError};
use fabperf_store::Store;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status when a gate is violated.
const EXIT_GATE: u8 = 1;
/// Exit status for bad usage, a malformed gate or an unreadable store.
const EXIT_USAGE: u8 = 2;

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ReportFormat {
    Table,
    Markdown,
    Json,
    Csv,
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 every gate holds (or none given), 1 a gate is violated, \
                        2 bad usage, a malformed gate or an unreadable store.\n\
                        Gate grammar, examples and presets: docs/report.md."
)]
pub struct ReportArgs {
    /// The results store (SQLite) written by `fabperf run`.
    #[arg(long, value_name = "FILE", required_unless_present = "presets")]
    pub db: Option<PathBuf>,
    /// The run (default: the newest).
    #[arg(long, value_name = "ID")]
    pub run: Option<i64>,
    /// What the others are compared with: a path (default: the plan's
    /// `baseline`), or KEY=VALUE of a plan dimension, e.g.
    /// `profile=algebra-1-default` or `policies=0` (each row against the
    /// same test, path and other dimensions at that value).
    #[arg(long, value_name = "PATH")]
    pub baseline: Option<String>,
    /// Compare a row with the baseline's closest row even when it differs in
    /// rate, streams, op or MTU; the difference is marked (≠) with what
    /// differs, and never judged in verdicts or gates. Without it only like
    /// rows are compared.
    #[arg(long)]
    pub compare_unlike: bool,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ReportFormat,
    /// Also write the report as one self-contained HTML file with charts.
    #[arg(long, value_name = "OUT")]
    pub html: Option<PathBuf>,
    /// Write the --format output here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// A pass/fail gate, e.g. 'rdma-bw >= 90% port_rate', 'path:pod tcp-bw >= 0.8 * path:host',
    /// 'tcp-lat p99 <= 50us', 'mesh outliers == 0' (repeatable).
    #[arg(long = "gate", value_name = "EXPR")]
    pub gates: Vec<String>,
    /// A named set of gates (repeatable); `list` prints the presets.
    #[arg(long = "gate-preset", value_name = "NAME")]
    pub presets: Vec<String>,
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("fabperf report: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// Write an output file by the one rule of every output flag
/// ([`fabperf_results::files`]): atomically over a new path or a regular
/// file, through a symlink, device or FIFO, never over a directory.
fn write_out(path: &Path, text: &str) -> anyhow::Result<()> {
    fabperf_results::files::write_output(path, text.as_bytes()).map_err(anyhow::Error::msg)
}

pub fn run(a: ReportArgs) -> anyhow::Result<ExitCode> {
    // Anything that goes wrong is exit 2: 1 means a gate was violated.
    Ok(match report(a) {
        Ok(code) => code,
        Err(e) => usage(format!("{e:#}")),
    })
}

fn report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    if a.presets.iter().any(|p| p == "list") {
        for p in gate::PRESETS {
            println!("{}: {}", p.name, p.about);
            for g in p.gates {
                println!("  --gate '{g}'");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Gates first: a malformed gate is found before anything is read.
    let mut gates: Vec<(Gate, Option<String>)> = Vec::new();
    for (i, g) in a.gates.iter().enumerate() {
        match gate::parse(g) {
            Ok(g) => gates.push((g, None)),
            Err(e) => return Ok(usage(format!("--gate #{} {e}", i + 1))),
        }
    }
    for name in &a.presets {
        let Some(p) = gate::preset(name) else {
            return Ok(usage(format!(
                "no gate preset {name:?}; presets: {} (`--gate-preset list` shows their gates)",
                gate::PRESETS
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        for g in p.gates {
            let parsed = gate::parse(g).map_err(|e| anyhow::anyhow!("preset {name}: {e}"))?;
            gates.push((parsed, Some(p.name.to_string())));
        }
    }
    let Some(db) = &a.db else {
        return Ok(usage("--db FILE is needed (the store `fabperf run` wrote)"));
    };
    let store = match Store::open_read_only(db) {
        Ok(s) => s,
        Err(e) => return Ok(usage(e)),
    };
    let mut rep = match build(
        &store,
        &Options {
            run: a.run,
            baseline: a.baseline.clone(),
            unlike: a.compare_unlike,
        },
    ) {
        Ok(r) => r,
        Err(e @ (ReportError::Usage(_) | ReportError::Store(_))) => return Ok(usage(e)),
        Err(e) => return Err(e.into()),
    };
    super::skipped_note("report", &store);
    rep.gates = gate::evaluate_all(&gates, &rep);
    let fmt = match a.format {
        ReportFormat::Table => Format::Table,
        ReportFormat::Markdown => Format::Markdown,
        ReportFormat::Json => Format::Json,
        ReportFormat::Csv => Format::Csv,
    };
    let body = match fmt {
        Format::Table => fabperf_run::exec::printable_block(&text::render(&rep, false)),
        Format::Markdown => fabperf_run::exec::printable_block(&text::render(&rep, true)),
        Format::Json => serde_json::to_string_pretty(&rep)? + "\n",
        Format::Csv => text::csv(&rep)?,
    };
    match &a.out {
        Some(p) => write_out(p, &body)?,
        None => {
            let stdout = std::io::stdout();
            let mut o = stdout.lock();
            // A closed pipe (`| head`) is not an error worth a message.
            if let Err(e) = o.write_all(body.as_bytes()).and_then(|_| o.flush()) {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(e.into());
                }
            }
        }
    }
    if let Some(p) = &a.html {
        write_out(p, &fabperf_report::html::render(&rep))?;
        eprintln!("fabperf report: HTML report written to {}", p.display());
    }
    if !rep.gates.is_empty() {
        let failed = rep.gates.iter().filter(|g| !g.passed()).count();
        let applied = rep.gates.iter().filter(|g| !g.not_applicable).count();
        if failed > 0 {
            eprintln!(
                "fabperf report: {failed} of {applied} gate(s) violated (run {})",
                rep.run.id
            );
            if matches!(fmt, Format::Json | Format::Csv) || a.out.is_some() {
                eprint!(
                    "{}",
                    fabperf_run::exec::printable_block(&text::gates_text(&rep, false))
                );
            }
            return Ok(ExitCode::from(EXIT_GATE));
        }
        eprintln!(
            "fabperf report: all {applied} gate(s) hold (run {})",
            rep.run.id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `fabperf export --format openmetrics [--push URL]`.
pub fn export_openmetrics(
    store: &Store,
    run: Option<i64>,
    out: Option<&Path>,
    push: Option<&str>,
    per_measurement: bool,
) -> anyhow::Result<ExitCode> {
    use fabperf_report::openmetrics::{self, Flavor, Series};
    let series = if per_measurement {
        Series::PerMeasurement
    } else {
        Series::Bounded
    };
    // Read one cell at a time (a store of a million cells is not loaded).
    let runs = match openmetrics::export_runs(store, run) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fabperf export: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    // What could not be decoded is said once, after the first reading.
    let noted = std::cell::Cell::new(false);
    let expose = |ids: &[i64], flavor: Flavor| {
        let r = openmetrics::exposition_of_store(store, ids, flavor, series);
        if !noted.replace(true) {
            super::skipped_note("export", store);
        }
        r
    };
    if let Some(base) = push {
        // Check every URL before the first push.
        let urls: Vec<String> = match runs
            .iter()
            .map(|r| openmetrics::push_url(base, *r))
            .collect()
        {
            Ok(u) => u,
            Err(e) => {
                eprintln!("fabperf export: {e}");
                return Ok(ExitCode::from(EXIT_USAGE));
            }
        };
        if runs.len() > 1 && base.contains("/metrics/job/") {
            eprintln!(
                "fabperf export: --push {base} names one group, but {} runs would replace each other there; give --run ID or a base URL (http://HOST:9091)",
                runs.len()
            );
            return Ok(ExitCode::from(EXIT_USAGE));
        }
        for (id, url) in runs.iter().zip(&urls) {
            let (body, n) = match expose(std::slice::from_ref(id), Flavor::Prometheus) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("fabperf export: {e}");
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
            };
            openmetrics::push(url, &body, std::time::Duration::from_secs(30))?;
            eprintln!("fabperf export: pushed {n} samples of run {id} to {url}");
        }
        if out.is_none() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    // Written as it is made: the text of a large mesh is gigabytes.
    let write = |o: &mut dyn Write| {
        let r =
            openmetrics::write_exposition_of_store(store, &runs, Flavor::OpenMetrics, series, o);
        if !noted.replace(true) {
            super::skipped_note("export", store);
        }
        r
    };
    match out {
        Some(p) => {
            let mut f = fabperf_results::files::Output::create(p).map_err(anyhow::Error::msg)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f);
            let n = match write(&mut w) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("fabperf export: {e}");
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
            };
            w.flush()
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", p.display()))?;
            drop(w);
            f.commit().map_err(anyhow::Error::msg)?;
            eprintln!("fabperf export: {n} samples written");
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            match write(&mut w) {
                Ok(_) => {}
                Err(fabperf_report::ReportError::Io(e)) if e.contains("Broken pipe") => {}
                Err(fabperf_report::ReportError::Io(e)) => anyhow::bail!("{e}"),
                Err(e) => {
                    eprintln!("fabperf export: {e}");
                    return Ok(ExitCode::from(EXIT_USAGE));
                }
            }
            if let Err(e) = w.flush() {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(e.into());
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
