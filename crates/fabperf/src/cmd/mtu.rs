//! `fabperf mtu HOST...`: the largest packet that crosses each path
//! unfragmented (UDP probes to an agent both ways, ICMP echo), the overlay's
//! overhead named, configured MTUs the path does not carry flagged.

use super::common::{client_config, timeout_secs, usage};
use fabperf_mtu::{discover, MtuReport, Options, MTU_SCHEMA};
use fabperf_proto::DEFAULT_PORT;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct MtuArgs {
    /// Agent hosts (IP address or name; `fabperf server` must run there for
    /// the UDP probes): one path each.
    #[arg(required = true, num_args = 1..=64)]
    pub hosts: Vec<String>,
    /// Agent port (TCP control and UDP probes).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// File holding the agents' shared secret.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Control-connection timeout.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = timeout_secs(),
          allow_negative_numbers = true)]
    pub timeout: f64,
    /// ICMP echo only: no agent needed (needs a ping socket or CAP_NET_RAW).
    #[arg(long, conflicts_with = "no_icmp")]
    pub icmp_only: bool,
    /// UDP probes only (ICMP filtered, or not permitted here).
    #[arg(long)]
    pub no_icmp: bool,
    /// Tries per size before it counts as not crossing.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub attempts: u32,
    /// Wait per probe in milliseconds (default: 8 round trips, 50 ms to 1 s).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub probe_timeout_ms: Option<u64>,
    /// Print the report as JSON (schema fabperf.mtu/1; `fabperf doctor --mtu-results` reads it).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: MtuArgs) -> anyhow::Result<ExitCode> {
    let cfg = client_config(a.token_file.as_deref(), a.timeout)?;
    let opts = Options {
        udp: !a.icmp_only,
        icmp: !a.no_icmp,
        attempts: a.attempts,
        probe_timeout: a.probe_timeout_ms.map(Duration::from_millis),
        duration: None,
    };
    let mut rep = MtuReport {
        schema: MTU_SCHEMA.into(),
        hostname: fabperf_mtu::client::hostname(),
        paths: Vec::new(),
    };
    let mut failed = 0;
    for h in &a.hosts {
        if h.is_empty() || h.len() > 255 {
            return Err(usage(format!("{h:?} is not a host")));
        }
        let addr = fabperf_mtu::client::resolve(h, a.port)?;
        match discover(h, addr, &cfg, &opts) {
            Ok(p) => {
                if !a.json {
                    print!("{}", p.text());
                }
                rep.paths.push(p);
            }
            Err(e) => {
                failed += 1;
                eprintln!("fabperf: mtu {h} ({addr}): {e}");
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    }
    let mismatch = rep.paths.iter().any(|p| !p.mismatches.is_empty());
    // 1: a path could not be probed, or an interface is configured for
    // more than its path carries.
    Ok(if failed > 0 || mismatch {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
