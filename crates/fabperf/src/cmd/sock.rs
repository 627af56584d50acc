//! `fabperf tcp-bw | tcp-lat | udp-bw | udp-lat HOST`: socket tests against
//! a `fabperf server` agent.

use super::common::{
    checked, emit, test_secs, usage, warmup_secs, ClientOpts, OutputOpts, TableStyle,
};
use fabperf_results::Record;
use fabperf_sock::{
    Direction, TcpBwParams, TcpLatParams, UdpBwParams, UdpLatParams, MAX_STREAMS, TCP_MAX_SIZE,
    UDP_HEADER, UDP_MAX_SIZE,
};
use fabperf_units::{self as units, TimeUnit, Zero};
use std::io::Write;
use std::process::ExitCode;

/// An offered rate in bits/s; `None` is `max`.
#[derive(Debug, Clone, Copy)]
pub struct Rate(pub Option<u64>);

fn rate_arg(s: &str) -> Result<Rate, String> {
    units::parse_rate(s).map(Rate)
}

/// `--window`: 4 KiB .. 1 GiB.
fn window_arg() -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    units::size_in(4096, 1 << 30)
}

fn udp_size() -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    units::size_in(UDP_HEADER, UDP_MAX_SIZE)
}

/// `--probe-timeout`: a bare number is milliseconds; 1 ms .. 60 s.
fn probe_timeout_ms(s: &str) -> Result<u64, String> {
    let d = units::duration_in(Zero::Refused, 60.0, TimeUnit::Millis)(s)?;
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return Err(format!("{s} is below the smallest probe timeout, 1 ms"));
    }
    Ok(ms)
}

fn direction(reverse: bool, bidir: bool) -> Direction {
    match (reverse, bidir) {
        (_, true) => Direction::Bidir,
        (true, false) => Direction::Reverse,
        (false, false) => Direction::Forward,
    }
}

#[derive(clap::Args, Debug)]
pub struct TcpBwArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Parallel TCP streams per direction, each on its own thread.
    #[arg(short = 'P', long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_STREAMS as i64))]
    pub streams: u32,
    /// Bytes per send/recv call (K, M suffixes: x1024).
    #[arg(short = 'l', long, default_value = "128K", value_parser = units::size_in(1, TCP_MAX_SIZE),
          value_name = "SIZE", allow_negative_numbers = true)]
    pub size: u64,
    /// Measured seconds, after the warm-up (or 500ms, 2m ...).
    #[arg(short = 't', long, default_value = "10", value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: f64,
    /// Warm-up seconds excluded from the measurement (TCP slow start, CPU clocks).
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = warmup_secs(),
          allow_negative_numbers = true)]
    pub omit: f64,
    /// The agent sends, this host receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once (separate connections and threads).
    #[arg(long)]
    pub bidir: bool,
    /// Send with MSG_ZEROCOPY from a user buffer instead of sendfile(2).
    #[arg(long, conflicts_with = "copy")]
    pub zerocopy: bool,
    /// Copy through user buffers at both ends like an application (send/recv);
    /// default: sendfile(2) from memory and in-kernel discard (recv MSG_TRUNC).
    #[arg(long)]
    pub copy: bool,
    /// Socket buffer (SO_SNDBUF/SO_RCVBUF) on both ends; default: kernel autotuning.
    #[arg(short = 'w', long, value_parser = window_arg(), value_name = "SIZE")]
    pub window: Option<u64>,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(clap::Args, Debug)]
pub struct TcpLatArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Bytes per request and per response.
    #[arg(short = 'l', long, default_value = "64", value_parser = units::size_in(1, 1 << 20),
          value_name = "SIZE", allow_negative_numbers = true)]
    pub size: u64,
    /// Measured seconds (unless --iterations).
    #[arg(short = 't', long, default_value = "5", value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: f64,
    /// Measured round trips instead of a duration.
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub iterations: Option<u64>,
    /// Round trips before the measurement (not recorded).
    #[arg(long, default_value_t = 1000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub warmup: u64,
    /// Report full round-trip times instead of half round trips.
    #[arg(long)]
    pub rtt: bool,
    /// Spin on non-blocking receives on both ends (and set SO_BUSY_POLL): lower latency, a core each.
    #[arg(long)]
    pub busy_poll: bool,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(clap::Args, Debug)]
pub struct UdpBwArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// UDP payload bytes per datagram, 32..65507 (fabperf's 32-byte header included).
    #[arg(short = 'l', long, default_value = "1472", value_parser = udp_size(),
          value_name = "SIZE", allow_negative_numbers = true)]
    pub size: u64,
    /// Offered rate in bits/s (K, M, G suffixes: x1000) or `max`.
    #[arg(short = 'b', long, default_value = "max", value_parser = rate_arg,
          allow_negative_numbers = true)]
    pub rate: Rate,
    /// Measured seconds, after the warm-up.
    #[arg(short = 't', long, default_value = "10", value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: f64,
    /// Warm-up seconds excluded from the measurement.
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = warmup_secs(),
          allow_negative_numbers = true)]
    pub omit: f64,
    /// The agent sends, this host receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,
    /// Socket buffers on both ends (default 8M; past net.core.rmem_max only as root).
    #[arg(short = 'w', long, value_parser = window_arg(), value_name = "SIZE")]
    pub window: Option<u64>,
    #[command(flatten)]
    pub out: OutputOpts,
}

#[derive(clap::Args, Debug)]
pub struct UdpLatArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Datagram payload bytes, 32..65507.
    #[arg(short = 'l', long, default_value = "64", value_parser = udp_size(),
          value_name = "SIZE", allow_negative_numbers = true)]
    pub size: u64,
    /// Measured seconds (unless --iterations).
    #[arg(short = 't', long, default_value = "5", value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: f64,
    /// Measured probes instead of a duration.
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub iterations: Option<u64>,
    /// Probes before the measurement (not recorded).
    #[arg(long, default_value_t = 100, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: u64,
    /// A probe without a reply after this long is counted lost (a bare number is
    /// milliseconds; 1 ms .. 60 s).
    #[arg(long, default_value = "200", value_name = "MS", value_parser = probe_timeout_ms)]
    pub probe_timeout: u64,
    /// Report full round-trip times instead of half round trips.
    #[arg(long)]
    pub rtt: bool,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// Print the records; for latency tests also every percentile.
fn report(records: &[Record], out: &OutputOpts) -> anyhow::Result<ExitCode> {
    emit(records, out, TableStyle::Summary)?;
    if !out.json {
        std::io::stdout()
            .lock()
            .write_all(fabperf_results::table::details(records).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_tcp_bw(a: TcpBwArgs) -> anyhow::Result<ExitCode> {
    let p = TcpBwParams {
        streams: a.streams,
        size: a.size,
        duration_s: a.duration,
        omit_s: a.omit,
        direction: direction(a.reverse, a.bidir),
        zerocopy: a.zerocopy,
        copy: a.copy,
        window: a.window,
        rate_bps: None,
        cpu: a.client.cpu.clone(),
    };
    p.validate().map_err(usage)?;
    let recs = checked(fabperf_sock::run_tcp_bw(
        a.client.addr()?,
        &a.client.config()?,
        &p,
    )?)?;
    report(&recs, &a.out)
}

pub fn run_tcp_lat(a: TcpLatArgs) -> anyhow::Result<ExitCode> {
    let p = TcpLatParams {
        size: a.size,
        duration_s: a.duration,
        iterations: a.iterations,
        warmup: a.warmup,
        rtt: a.rtt,
        busy_poll: a.busy_poll,
        cpu: a.client.cpu.clone(),
    };
    p.validate().map_err(usage)?;
    let recs = checked(fabperf_sock::run_tcp_lat(
        a.client.addr()?,
        &a.client.config()?,
        &p,
    )?)?;
    report(&recs, &a.out)
}

pub fn run_udp_bw(a: UdpBwArgs) -> anyhow::Result<ExitCode> {
    let p = UdpBwParams {
        size: a.size,
        rate_bps: a.rate.0,
        duration_s: a.duration,
        omit_s: a.omit,
        direction: direction(a.reverse, a.bidir),
        window: a.window,
        cpu: a.client.cpu.clone(),
    };
    p.validate().map_err(usage)?;
    let recs = checked(fabperf_sock::run_udp_bw(
        a.client.addr()?,
        &a.client.config()?,
        &p,
    )?)?;
    report(&recs, &a.out)
}

pub fn run_udp_lat(a: UdpLatArgs) -> anyhow::Result<ExitCode> {
    let p = UdpLatParams {
        size: a.size,
        duration_s: a.duration,
        iterations: a.iterations,
        warmup: a.warmup,
        probe_timeout_ms: a.probe_timeout,
        rtt: a.rtt,
        cpu: a.client.cpu.clone(),
    };
    p.validate().map_err(usage)?;
    let recs = checked(fabperf_sock::run_udp_lat(
        a.client.addr()?,
        &a.client.config()?,
        &p,
    )?)?;
    report(&recs, &a.out)
}
