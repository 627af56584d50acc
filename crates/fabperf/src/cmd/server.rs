//! `fabperf server`: the agent.

use super::common::{timeout_secs, MAX_TEST_SECS};
use anyhow::Context;
use fabperf_agent::{Agent, AgentConfig};
use fabperf_proto::AgentIdentity;
use fabperf_proto::{Limits, TestKind, DEFAULT_PORT};
use fabperf_units::{self as units, Zero};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on. A non-loopback address needs --token-file or --insecure.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: IpAddr,
    /// TCP port for control and data connections; UDP tests use the same number.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// File holding the shared secret clients must prove they know.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve anyone who can reach the port (no shared secret) on a non-loopback address.
    #[arg(long)]
    pub insecure: bool,
    /// Longest test a client may request (seconds, or 30m, 2h ...; at most 7 days). The
    /// agent ends every test by its own clock at its length plus a grace of
    /// max(2 s, --timeout), whatever the client does.
    #[arg(long, default_value = "3600", value_name = "SECS",
          value_parser = units::secs_in(Zero::Refused, MAX_TEST_SECS), allow_negative_numbers = true)]
    pub max_duration: f64,
    /// Most memory one request may make the agent allocate (e.g. 512M, 2G).
    #[arg(long, default_value = "2G", value_parser = units::size_in(1, u64::MAX),
          value_name = "SIZE", allow_negative_numbers = true)]
    pub max_memory: u64,
    /// Most streams or queue pairs per test.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_streams: u32,
    /// Seconds without progress from a client before the agent drops it; also the
    /// deadline for a connection's whole handshake (preamble to authenticated start).
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = timeout_secs(),
          allow_negative_numbers = true)]
    pub timeout: f64,
    /// Node name the agent announces to clients (default: $NODE_NAME, else the hostname).
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Label of the network path this agent serves, announced to clients
    /// (e.g. host, pod, ipoib).
    #[arg(long, value_name = "LABEL", default_value = "host")]
    pub path_label: String,
    /// The address other agents use to test this agent's path, as an IP
    /// address or an interface name (its first IPv4 address): e.g. the
    /// IPoIB or RoCE address of a pod reached through a Service on its
    /// primary network. Default: the address the runner reached.
    #[arg(long, value_name = "IP|IFACE")]
    pub advertise: Option<String>,
    /// Do not run tests on a runner's behalf (`fabperf run` asks agents to
    /// drive tests toward other agents; see docs/security.md).
    #[arg(long)]
    pub no_drive: bool,
    /// What runners may change on this node for a cell (tuning profiles and
    /// policy-rule counts, `fabperf run` plans with `profiles`/`policies`):
    /// a list of sysctl (net.* only), nic (offloads, rings, channels,
    /// coalescing), mtu, irq, policy (nftables rules), or all, or none.
    /// Settings left out are reported as not allowed, setting by setting.
    #[arg(long, value_name = "LIST", default_value = "none",
          value_parser = |s: &str| fabperf_tune::Allow::parse(s))]
    pub allow_tune: fabperf_tune::Allow,
    /// Where the agent keeps its tuning journal (previous values, written
    /// before any change, so they come back after a crash). Default:
    /// /var/lib/fabperf for root, else $XDG_STATE_HOME/fabperf.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// RDMA device the agent uses (default: chosen per test by rule).
    #[arg(long, value_name = "NAME")]
    pub rdma_device: Option<String>,
    /// RDMA port of that device.
    #[arg(long, value_name = "N")]
    pub rdma_ib_port: Option<u8>,
    /// GID index the agent uses (default: RoCE v2 + IPv4 by rule).
    #[arg(long, value_name = "N")]
    pub rdma_gid_index: Option<u32>,
    /// Number this node's rails, announced in the hello for runs on rails (a plan's
    /// `rails = "rdma"`): pci-order, gpu-order or DEVICE=RAIL,... as for `fabperf detect
    /// --rails`. Without it a plan numbers the RDMA devices in name order.
    #[arg(long, value_name = "RULE", value_parser = |s: &str| s.parse::<fabperf_detect::RailRule>())]
    pub rails: Option<fabperf_detect::RailRule>,
    /// Also serve HTTP/1.1 on the port, unauthenticated: `GET /bytes/N`
    /// and `PUT /upload`, the target of `fabperf http-load` and wrk
    /// (docs/http.md; docs/security.md says what it exposes).
    #[arg(long)]
    pub http: bool,
    /// Most HTTP connections at once (lowered to what the open-file limit holds).
    #[arg(long, default_value_t = fabperf_http::server::DEFAULT_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000), requires = "http",
          value_name = "N")]
    pub http_max_connections: u64,
    /// Largest HTTP response (GET /bytes/N) or upload body (e.g. 1G, 100M).
    #[arg(long, default_value = "1G", value_parser = units::size_in(0, 1 << 40),
          value_name = "SIZE", requires = "http", allow_negative_numbers = true)]
    pub http_max_size: u64,
    /// No log lines on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Every test kind this build serves.
pub fn all_kinds(rdma: RdmaOpts) -> Vec<Box<dyn TestKind>> {
    let mut k = fabperf_sock::kinds();
    k.extend(fabperf_rdma::kinds(rdma));
    k.push(Box::new(fabperf_mtu::MtuKind));
    k
}

/// SIGINT and SIGTERM restore whatever a cell tuned, then end the agent
/// (exit status 128 + the signal).
fn restore_on_signals(
    tuner: Arc<fabperf_tune::Tuner>,
    log: Arc<dyn Fn(&str) + Send + Sync>,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the SIGINT/SIGTERM handlers")?;
    std::thread::Builder::new()
        .name("fabperf-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                match tuner.restore() {
                    Some(r) => log(&format!("{name}: tuning restored: {}", r.summary())),
                    None => log(&format!("{name}: nothing tuned; exiting")),
                }
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Agent-side RDMA selection.
pub use fabperf_rdma::AgentRdmaOpts as RdmaOpts;

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let token = super::common::read_token(a.token_file.as_deref())?;
    let mut kinds = all_kinds(RdmaOpts {
        device: a.rdma_device,
        ib_port: a.rdma_ib_port,
        gid_index: a.rdma_gid_index,
    });
    // Tuning for a cell (profiles, policy rules), journaled; what a dead
    // agent left is restored now, before anything is served.
    let quiet = a.quiet;
    let log: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(move |m: &str| {
        if !quiet {
            eprintln!(
                "{} fabperf agent: {}",
                fabperf_results::now_rfc3339(),
                fabperf_proto::text::escape(m)
            );
        }
    });
    // Runs (`fabperf run`) ask agents to drive tests toward other agents;
    // the agent authenticates to them with its own token (and logs why a
    // target did not prove itself).
    if !a.no_drive {
        kinds.push(Box::new(
            fabperf_run::DriveKind::new(token.clone(), Duration::from_secs_f64(a.timeout))
                .with_log(log.clone()),
        ));
    }
    let state_dir = a
        .state_dir
        .clone()
        .unwrap_or_else(fabperf_tune::journal::default_state_dir);
    let tuner = Arc::new(fabperf_tune::Tuner::new(state_dir.clone(), a.allow_tune));
    for line in tuner.recover() {
        log(&format!("tune: {line}"));
    }
    log(&format!(
        "tuning allowed: {} (journal in {})",
        a.allow_tune.describe(),
        state_dir.display()
    ));
    kinds.push(Box::new(fabperf_tune::TuneKind {
        tuner: tuner.clone(),
        log: log.clone(),
    }));
    restore_on_signals(tuner, log)?;
    // What the agent announces about the link it serves.
    let (mut inv, _) = super::inventory::for_agent(None);
    if let (Some(rule), Some(inv)) = (&a.rails, inv.as_mut()) {
        fabperf_detect::assign_rails(inv, rule).map_err(|e| anyhow::anyhow!("--rails: {e}"))?;
    }
    let advertise = match (&a.advertise, &inv) {
        (None, _) => None,
        (Some(s), _) if s.parse::<IpAddr>().is_ok() => s.parse::<IpAddr>().ok(),
        (Some(s), Some(inv)) => {
            Some(super::inventory::interface_ipv4(inv, s).ok_or_else(|| {
                anyhow::anyhow!(
                    "--advertise {s}: no such interface with an IPv4 address on this node"
                )
            })?)
        }
        (Some(s), None) => anyhow::bail!(
            "--advertise {s}: cannot look the interface up (detect failed); give an IP address"
        ),
    };
    let inventory = match &inv {
        Some(i) => super::inventory::describe(i, advertise.or(Some(a.bind))),
        None => serde_json::json!({"error": "detect failed"}),
    };
    let cfg = AgentConfig {
        bind: SocketAddr::new(a.bind, a.port),
        token,
        insecure: a.insecure,
        limits: Limits {
            max_duration: Duration::from_secs_f64(a.max_duration),
            max_memory: a.max_memory,
            io_timeout: Duration::from_secs_f64(a.timeout),
            max_streams: a.max_streams,
        },
        kinds,
        quiet: a.quiet,
        identity: Some(AgentIdentity {
            node: a.node_name.unwrap_or_else(fabperf_agent::hostname),
            path: a.path_label,
            addr: advertise,
            inventory: Some(inventory),
        }),
    };
    // Every connection is an open file: use what the hard limit allows
    // (the agent sizes its caps to it and says so when it is low).
    if let Err(e) = fabperf_http::rlimit::raise_to_hard() {
        eprintln!("fabperf agent: {e}");
    }
    let mut agent = Agent::bind(cfg)
        .map_err(anyhow::Error::msg)
        .context("starting the agent")?;
    if a.http {
        agent
            .enable_http(fabperf_agent::HttpConfig {
                max_connections: a.http_max_connections as usize,
                max_size: a.http_max_size,
                timeout: Duration::from_secs_f64(a.timeout),
            })
            .map_err(anyhow::Error::msg)
            .context("starting the agent's HTTP server")?;
    }
    agent.run();
    Ok(ExitCode::SUCCESS)
}
