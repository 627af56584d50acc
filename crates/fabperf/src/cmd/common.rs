//! Options and output shared by the client commands (socket and RDMA tests).

use anyhow::Context;
use fabperf_proto::explain::CpuSpec;
use fabperf_proto::{ClientConfig, DEFAULT_PORT};
use fabperf_results::{write_csv, write_json_lines, Record, Table};
use fabperf_units::{self as units, Zero};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest measured interval a test may ask for (the agents refuse more too).
pub const MAX_TEST_SECS: f64 = 7.0 * 86400.0;
/// Longest `--timeout`.
pub const MAX_TIMEOUT_SECS: f64 = 86400.0;

/// A test duration: positive, at most a week (units: docs/units.md).
pub fn test_secs() -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    units::secs_in(Zero::Refused, MAX_TEST_SECS)
}

/// A warm-up: zero or more seconds, at most a week.
pub fn warmup_secs() -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    units::secs_in(Zero::Allowed, MAX_TEST_SECS)
}

/// `--timeout`: positive, at most a day.
pub fn timeout_secs() -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    units::secs_in(Zero::Refused, MAX_TIMEOUT_SECS)
}

/// A directory to create or fill (e.g. `detect --capture`): refused at
/// parse time when something that is not a directory is already there.
pub fn new_dir_arg(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    match std::fs::symlink_metadata(&p) {
        Ok(m) if !m.is_dir() => Err(format!(
            "{s} exists and is not a directory; give a new or empty directory"
        )),
        _ => Ok(p),
    }
}

/// How to reach the agent.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientOpts {
    /// Agent host: IP address or name (`fabperf server` must run there).
    pub host: String,
    /// Agent control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// File holding the agent's shared secret; the agent must prove it holds it too.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds without progress after which the peer is declared dead; also the
    /// deadline for the whole connection handshake.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = timeout_secs(),
          allow_negative_numbers = true)]
    pub timeout: f64,
    /// Where each end's data threads run and their buffers are placed: auto (the CPUs of
    /// the NIC's NUMA node that the process may use, avoiding the NIC's interrupt CPUs),
    /// none (not pinned), or a CPU list for both ends (0-3,8).
    #[arg(long, default_value = "auto", value_name = "auto|none|LIST",
          value_parser = |s: &str| s.parse::<CpuSpec>())]
    pub cpu: CpuSpec,
}

impl ClientOpts {
    pub fn addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(fabperf_proto::resolve(&self.host, self.port)?)
    }

    pub fn config(&self) -> anyhow::Result<ClientConfig> {
        client_config(self.token_file.as_deref(), self.timeout)
    }
}

/// The client settings from `--token-file` and `--timeout` (shared by the
/// test commands and `fabperf suite`).
pub fn client_config(token_file: Option<&Path>, timeout: f64) -> anyhow::Result<ClientConfig> {
    let timeout = Duration::try_from_secs_f64(timeout)
        .ok()
        .filter(|t| !t.is_zero() && timeout <= MAX_TIMEOUT_SECS)
        .ok_or_else(|| {
            usage(format!(
                "--timeout {timeout} is not a positive number of seconds up to a day"
            ))
        })?;
    Ok(ClientConfig {
        token: read_token(token_file)?,
        timeout,
        group: None,
    })
}

/// The shared secret in `--token-file`, if one was given.
pub fn read_token(token_file: Option<&Path>) -> anyhow::Result<Option<Vec<u8>>> {
    token_file
        .map(|p| fabperf_proto::auth::read_token_file(p).map_err(anyhow::Error::msg))
        .transpose()
}

/// A bad command line found after clap's own checks (a combination of
/// values): reported like clap's errors, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Check what the agent reported (impossible values are a protocol error
/// naming the field) and escape text that came from it before it reaches
/// the terminal.
pub fn checked(mut records: Vec<Record>) -> anyhow::Result<Vec<Record>> {
    for r in &mut records {
        r.check_values()
            .map_err(|e| anyhow::anyhow!("protocol error: the results are impossible: {e}"))?;
        r.map_text(fabperf_proto::text::escape);
    }
    Ok(records)
}

/// Output selection.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputOpts {
    /// Print JSON Lines (one object per measurement) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write (append) the records as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

/// Which human table to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableStyle {
    /// The generic summary table.
    Summary,
    /// perftest's bandwidth columns (Gb/sec, or MiB/sec when true).
    PerftestBw { mib: bool },
    /// perftest's latency columns.
    PerftestLat,
}

/// Print records as JSON Lines or a table, and append CSV when asked.
pub fn emit(records: &[Record], out: &OutputOpts, style: TableStyle) -> anyhow::Result<()> {
    if let Some(path) = &out.csv {
        let exists = path.metadata().map(|m| m.len() > 0).unwrap_or(false);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening CSV file {}", path.display()))?;
        write_csv(f, records, !exists)
            .with_context(|| format!("writing CSV file {}", path.display()))?;
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if out.json {
        write_json_lines(&mut lock, records)?;
    } else {
        let t = match style {
            TableStyle::Summary => Table::summary(records),
            TableStyle::PerftestBw { mib } => Table::perftest_bw(records, mib),
            TableStyle::PerftestLat => Table::perftest_lat(records),
        };
        lock.write_all(t.render().as_bytes())?;
        // Where each end ran, the counters that matter and the findings.
        lock.write_all(fabperf_results::table::explain(records).as_bytes())?;
        for r in records {
            for w in &r.warnings {
                writeln!(lock, "warning: {} ({}): {w}", r.test, r.size)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_range() {
        let t = timeout_secs();
        assert!(t("1e30").is_err());
        assert!(t("0").is_err());
        assert!(t("-1").unwrap_err().contains("negative"));
        assert_eq!(t("500ms").unwrap(), 0.5);
        assert!(client_config(None, 1e30).is_err());
        assert!(client_config(None, f64::NAN).is_err());
    }
}
