//! Options and output shared by the client commands (socket and RDMA tests).

use anyhow::Context;
use fabperf_proto::{ClientConfig, DEFAULT_PORT};
use fabperf_results::{write_csv, write_json_lines, Record, Table};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to reach the agent.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientOpts {
    /// Agent host: IP address or name (`fabperf server` must run there).
    pub host: String,
    /// Agent control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// File holding the agent's shared secret.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds without progress after which the peer is declared dead.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub timeout: f64,
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
    if !(timeout.is_finite() && timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    Ok(ClientConfig {
        token: read_token(token_file)?,
        timeout: Duration::from_secs_f64(timeout),
    })
}

/// The shared secret in `--token-file`, if one was given.
pub fn read_token(token_file: Option<&Path>) -> anyhow::Result<Option<Vec<u8>>> {
    token_file
        .map(|p| fabperf_proto::auth::read_token_file(p).map_err(anyhow::Error::msg))
        .transpose()
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
        for r in records {
            for w in &r.warnings {
                writeln!(lock, "warning: {} ({}): {w}", r.test, r.size)?;
            }
        }
    }
    Ok(())
}

/// Parse a byte count with an optional binary suffix: `65536`, `64K`, `8M`, `2G`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let suf = t[i..].to_ascii_lowercase();
            let m: u64 = match suf.as_str() {
                "k" | "kb" | "kib" => 1 << 10,
                "m" | "mb" | "mib" => 1 << 20,
                "g" | "gb" | "gib" => 1 << 30,
                "t" | "tb" | "tib" => 1 << 40,
                "b" => 1,
                _ => return Err(format!("unknown size suffix in {s:?}; use K, M, G or T")),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 65536, 64K, 8M)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("65536").unwrap(), 65536);
        assert_eq!(parse_bytes("64K").unwrap(), 65536);
        assert_eq!(parse_bytes("8m").unwrap(), 8 << 20);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
