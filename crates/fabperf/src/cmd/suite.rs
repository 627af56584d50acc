//! `fabperf suite`: the quick default set of tests.
//!
//! Without `--peer` an agent starts on loopback inside this process, so a
//! fresh machine gets real figures with one command. Each result is appended
//! to the JSON Lines file as soon as it is measured: a later failure loses
//! nothing. A failing test does not stop the others; the exit status is
//! non-zero when any failed.

use super::common::{
    checked, client_config, emit, test_secs, timeout_secs, OutputOpts, TableStyle,
};
use anyhow::Context;
use fabperf_agent::{Agent, AgentConfig};
use fabperf_proto::{ClientConfig, Limits, DEFAULT_PORT};
use fabperf_results::{write_json_lines, Record};
use fabperf_sock::{TcpBwParams, TcpLatParams, UdpBwParams, UdpLatParams};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run against the agent on HOST instead of an in-process agent on loopback.
    #[arg(long, value_name = "HOST")]
    pub peer: Option<String>,
    /// Agent port (with --peer).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// File holding the agent's shared secret (with --peer).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds without progress after which the peer is declared dead.
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = timeout_secs(),
          allow_negative_numbers = true)]
    pub timeout: f64,
    /// Measured seconds of each bandwidth test (latency tests take 2/3 of it).
    #[arg(short = 't', long, default_value = "3", value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: f64,
    /// Directory the JSON Lines results are written to.
    #[arg(long, default_value = "fabperf-results", value_name = "DIR")]
    pub out: PathBuf,
    /// Skip the RDMA tests even when a device is present.
    #[arg(long)]
    pub no_rdma: bool,
    /// RDMA device for the client side (default: chosen by rule; env FABPERF_RDMA_DEVICE).
    #[arg(long, value_name = "NAME", env = "FABPERF_RDMA_DEVICE")]
    pub rdma_device: Option<String>,
    #[command(flatten)]
    pub output: OutputOpts,
}

type Step<'a> = (String, Box<dyn Fn() -> anyhow::Result<Vec<Record>> + 'a>);

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let cfg = client_config(a.token_file.as_deref(), a.timeout)?;

    // The agent: remote, or in this process on loopback.
    let (_local_agent, addr): (Option<fabperf_agent::AgentHandle>, SocketAddr) = match &a.peer {
        Some(host) => (None, fabperf_proto::resolve(host, a.port)?),
        None => {
            let agent = Agent::bind(AgentConfig {
                bind: "127.0.0.1:0".parse().expect("static address"),
                token: None,
                insecure: false,
                limits: Limits {
                    io_timeout: cfg.timeout,
                    ..Limits::default()
                },
                kinds: super::server::all_kinds(super::server::RdmaOpts {
                    device: a.rdma_device.clone(),
                    ib_port: None,
                    gid_index: None,
                }),
                quiet: true,
                identity: None,
            })
            .map_err(anyhow::Error::msg)
            .context("starting the in-process agent")?;
            let h = agent.spawn();
            let addr = h.addr();
            (Some(h), addr)
        }
    };

    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating results directory {}", a.out.display()))?;
    let stamp = fabperf_results::now_rfc3339()
        .replace([':', '-'], "")
        .replace('.', "-");
    let path = a.out.join(format!("suite-{stamp}.jsonl"));
    let mut file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;

    let d = a.duration;
    let lat_d = (d * 2.0 / 3.0).max(0.5);
    let omit = (d / 6.0).min(1.0);
    let mut steps: Vec<Step> = Vec::new();
    for streams in [1u32, 2] {
        let p = TcpBwParams {
            streams,
            duration_s: d,
            omit_s: omit,
            ..TcpBwParams::default()
        };
        let c = cfg.clone();
        steps.push((
            format!(
                "tcp-bw {streams} stream{}",
                if streams > 1 { "s" } else { "" }
            ),
            Box::new(move || Ok(fabperf_sock::run_tcp_bw(addr, &c, &p)?)),
        ));
    }
    {
        let p = TcpLatParams {
            size: 64,
            duration_s: lat_d,
            ..TcpLatParams::default()
        };
        let c = cfg.clone();
        steps.push((
            "tcp-lat 64 B".into(),
            Box::new(move || Ok(fabperf_sock::run_tcp_lat(addr, &c, &p)?)),
        ));
    }
    {
        let p = UdpBwParams {
            size: 1472,
            rate_bps: None,
            duration_s: d,
            omit_s: omit,
            ..UdpBwParams::default()
        };
        let c = cfg.clone();
        steps.push((
            "udp-bw max rate 1472 B".into(),
            Box::new(move || Ok(fabperf_sock::run_udp_bw(addr, &c, &p)?)),
        ));
    }
    {
        let p = UdpLatParams {
            duration_s: lat_d,
            ..UdpLatParams::default()
        };
        let c = cfg.clone();
        steps.push((
            format!("udp-lat {} B", p.size),
            Box::new(move || Ok(fabperf_sock::run_udp_lat(addr, &c, &p)?)),
        ));
    }
    let rdma_note = rdma_steps(&a, addr, &cfg, &mut steps);

    let total = steps.len();
    let mut all = Vec::new();
    let mut failed = Vec::new();
    for (i, (name, f)) in steps.iter().enumerate() {
        eprint!("[{}/{total}] {name} ... ", i + 1);
        let _ = std::io::stderr().flush();
        // The agent may still be closing the previous test (it is busy
        // until its side has ended): retry that for a while.
        let t0 = std::time::Instant::now();
        let res = loop {
            match f() {
                Err(e) if agent_busy(&e) && t0.elapsed() < cfg.timeout => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                r => break r,
            }
        };
        match res.and_then(checked) {
            Ok(recs) => {
                write_json_lines(&mut file, &recs)
                    .with_context(|| format!("writing {}", path.display()))?;
                let total_rec = recs.iter().find(|r| r.stream.is_none());
                eprintln!("{}", total_rec.map(headline).unwrap_or_default());
                all.extend(recs);
            }
            Err(e) => {
                eprintln!("FAILED: {e:#}");
                failed.push(format!("{name}: {e:#}"));
            }
        }
    }
    if let Some(note) = &rdma_note {
        eprintln!("RDMA: {note}");
    }
    eprintln!();
    let totals: Vec<Record> = all.iter().filter(|r| r.stream.is_none()).cloned().collect();
    emit(&totals, &a.output, TableStyle::Summary)?;
    eprintln!(
        "\n{} measurement{} written to {}",
        all.len(),
        if all.len() == 1 { "" } else { "s" },
        path.display()
    );
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("fabperf: {} of {total} suite tests failed:", failed.len());
        for f in &failed {
            eprintln!("  {f}");
        }
        Ok(ExitCode::FAILURE)
    }
}

/// The agent answered `busy`.
fn agent_busy(e: &anyhow::Error) -> bool {
    use fabperf_proto::{ErrorCode, ProtoError};
    let busy = |p: &ProtoError| {
        matches!(
            p,
            ProtoError::Remote {
                code: ErrorCode::Busy,
                ..
            }
        )
    };
    e.chain().any(|c| {
        c.downcast_ref::<ProtoError>().is_some_and(busy)
            || matches!(c.downcast_ref::<fabperf_sock::SockError>(),
                        Some(fabperf_sock::SockError::Proto(p)) if busy(p))
            || matches!(c.downcast_ref::<fabperf_rdma::RdmaError>(),
                        Some(fabperf_rdma::RdmaError::Proto(p)) if busy(p))
    })
}

/// One line per finished test on stderr.
fn headline(r: &Record) -> String {
    if let Some(l) = &r.lat_us {
        format!("p50 {:.2} us ({})", l.p50, l.kind.label())
    } else if let Some(bw) = r.bw_gbps {
        let mut s = format!("{bw:.2} Gbit/s");
        if let Some(p) = r.udp.as_ref().and_then(|u| u.loss_pct) {
            s.push_str(&format!(", {p:.3}% lost"));
        }
        s
    } else {
        "done".into()
    }
}

/// Add the RDMA tests when this host has a usable RDMA device; otherwise
/// return the plain reason they are skipped.
fn rdma_steps<'a>(
    a: &Args,
    addr: SocketAddr,
    cfg: &ClientConfig,
    steps: &mut Vec<Step<'a>>,
) -> Option<String> {
    if a.no_rdma {
        return Some("skipped (--no-rdma)".into());
    }
    let picked = match fabperf_rdma::probe() {
        Ok(p) => p,
        Err(e) => return Some(format!("skipped, no usable RDMA device here: {e}")),
    };
    let bw = fabperf_rdma::BwParams {
        op: fabperf_rdma::Op::Write,
        sizes: vec![65536],
        device: a.rdma_device.clone(),
        ..fabperf_rdma::BwParams::default()
    };
    let lat = fabperf_rdma::LatParams {
        op: fabperf_rdma::Op::Send,
        sizes: vec![2],
        device: a.rdma_device.clone(),
        ..fabperf_rdma::LatParams::default()
    };
    let c = cfg.clone();
    steps.push((
        "rdma-bw write 64 KiB".into(),
        Box::new(move || Ok(fabperf_rdma::run_bw(addr, &c, &bw)?)),
    ));
    let c = cfg.clone();
    steps.push((
        "rdma-lat send 2 B".into(),
        Box::new(move || Ok(fabperf_rdma::run_lat(addr, &c, &lat)?)),
    ));
    Some(format!("using {picked}"))
}

#[cfg(test)]
mod tests {
    use super::agent_busy;
    use fabperf_proto::{ErrorCode, ProtoError};

    #[test]
    fn busy_is_recognised_through_the_engines_errors() {
        let remote = |code| ProtoError::Remote {
            code,
            message: "x".into(),
        };
        assert!(agent_busy(&anyhow::Error::new(remote(ErrorCode::Busy))));
        assert!(agent_busy(&anyhow::Error::new(
            fabperf_sock::SockError::Proto(remote(ErrorCode::Busy))
        )));
        assert!(agent_busy(&anyhow::Error::new(
            fabperf_rdma::RdmaError::Proto(remote(ErrorCode::Busy))
        )));
        assert!(!agent_busy(&anyhow::Error::new(remote(
            ErrorCode::AuthFailed
        ))));
        assert!(!agent_busy(&anyhow::anyhow!("agent busy")));
    }
}
