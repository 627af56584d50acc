//! `fabperf cni-bench`: pod network launch time of CNI plugin chains.

use anyhow::{bail, Context, Result};
use fabperf_cnibench::{
    bench_chain, conf, preflight, record, CniRecord, Observer, Options, DEFAULT_CNI_PATH,
};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A CNI conflist, a single plugin config, or a NetworkAttachmentDefinition
    /// (YAML/JSON; every NAD in the file). Repeat to compare chains.
    #[arg(long = "config", short = 'c', value_name = "FILE", required = true)]
    configs: Vec<PathBuf>,
    /// Recorded pod sandboxes (ADD + DEL in a fresh network namespace) per chain.
    #[arg(short = 'n', long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: u32,
    /// Sandboxes run first and not recorded.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    warmup: u32,
    /// Directories searched for plugin binaries, colon-separated (CNI_PATH).
    #[arg(long, default_value = DEFAULT_CNI_PATH, value_name = "DIRS")]
    cni_path: String,
    /// Interface name inside the sandbox (CNI_IFNAME).
    #[arg(long, default_value = "eth0", value_name = "NAME")]
    ifname: String,
    /// Longest one plugin call may take before it is killed, seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = parse_timeout, allow_hyphen_values = true)]
    timeout: f64,
    /// Print JSON Lines (one object per chain and op) instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write (append) the records as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(short, long)]
    quiet: bool,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() {
        return Err("the timeout must be a finite number of seconds".into());
    }
    if v <= 0.0 {
        return Err(format!("the timeout must be positive, got {v}"));
    }
    if v > 3600.0 {
        return Err(format!("the timeout {v} s is above one hour"));
    }
    Ok(v)
}

fn valid_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && s != "."
        && s != ".."
}

struct Progress {
    quiet: bool,
}

impl Observer for Progress {
    fn iteration(&mut self, chain: &fabperf_cnibench::Chain, done: u32, total: u32) {
        if !self.quiet && (done == total || done.is_multiple_of(50)) {
            eprintln!("cni-bench: {}: {done}/{total} sandboxes", chain.label());
        }
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    if !valid_ifname(&a.ifname) {
        eprintln!("fabperf: error: --ifname {:?} is not an interface name (1-15 of letters, digits, '-', '_', '.')", a.ifname);
        return Ok(ExitCode::from(2));
    }
    let cni_path: Vec<PathBuf> = a
        .cni_path
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    if cni_path.is_empty() {
        eprintln!("fabperf: error: --cni-path names no directory");
        return Ok(ExitCode::from(2));
    }
    let mut chains = Vec::new();
    for c in &a.configs {
        chains.extend(conf::load(c)?);
    }
    if chains.is_empty() {
        bail!("no network configuration to run");
    }
    let opts = Options {
        cni_path,
        iterations: a.iterations,
        warmup: a.warmup,
        ifname: a.ifname.clone(),
        timeout: Duration::from_secs_f64(a.timeout),
    };
    // Every chain's plugins are found before the first one runs.
    for chain in &chains {
        preflight(chain, &opts)?;
    }
    // SIGINT/SIGTERM: the running sandbox is cleaned up (DEL, namespace
    // removed) before the process ends; a second signal ends it at once.
    {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let flag = fabperf_cnibench::stop_flag();
        for sig in [SIGINT, SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone())
                .context("installing a signal handler")?;
            signal_hook::flag::register(sig, flag.clone())
                .context("installing a signal handler")?;
        }
    }
    let mut records: Vec<CniRecord> = Vec::new();
    let mut obs = Progress { quiet: a.quiet };
    let mut failure = None;
    for chain in &chains {
        match bench_chain(chain, &opts, &mut obs) {
            Ok(r) => records.extend(r),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    // The chains that completed are reported even when a later one failed.
    emit(&a, &records)?;
    match failure {
        Some(e) if fabperf_cnibench::stop_flag().load(std::sync::atomic::Ordering::SeqCst) => {
            eprintln!(
                "fabperf: {}",
                fabperf_results::escape::terminal(&format!("{e:#}"))
            );
            Ok(ExitCode::from(130))
        }
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn emit(a: &Args, records: &[CniRecord]) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    if let Some(path) = &a.csv {
        let exists = path.metadata().map(|m| m.len() > 0).unwrap_or(false);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening CSV file {}", path.display()))?;
        record::write_csv(f, records, !exists)
            .with_context(|| format!("writing CSV file {}", path.display()))?;
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if a.json {
        record::write_json_lines(&mut lock, records)?;
    } else {
        lock.write_all(record::table(records).as_bytes())?;
    }
    Ok(())
}
