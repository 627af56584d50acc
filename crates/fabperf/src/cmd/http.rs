//! `fabperf http-load HOST`: HTTP/1.1 load against a fabperf agent started
//! with `--http` (or any server that answers `GET /bytes/N`).

use super::common::{checked, emit, test_secs, usage, warmup_secs, OutputOpts, TableStyle};
use fabperf_http::params::{MAX_CONNECTIONS, MAX_SIZE, MAX_THREADS};
use fabperf_http::{LoadError, LoadParams, Target};
use fabperf_proto::DEFAULT_PORT;
use fabperf_units as units;
use std::io::Write;
use std::process::ExitCode;

/// A request rate; `None` is `max` (closed loop).
#[derive(Debug, Clone, Copy)]
pub struct PerSecond(pub Option<f64>);

fn per_second(s: &str) -> Result<PerSecond, String> {
    units::parse_per_second(s).map(PerSecond)
}

#[derive(clap::Args, Debug)]
pub struct HttpLoadArgs {
    /// The server: host, host:port or http://host[:port] (a fabperf agent
    /// started with --http, or a Service in front of such agents).
    pub host: String,
    /// Port, when HOST does not name one.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Open connections (keep-alive, one request in flight each).
    #[arg(short = 'c', long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS as i64))]
    pub connections: u32,
    /// Threads the connections are spread over, each its own event loop.
    #[arg(long, default_value_t = 2, value_name = "T",
          value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS as i64))]
    pub threads: u32,
    /// Measured seconds, after the warm-up (or 500ms, 2m ...).
    #[arg(short = 't', long, default_value = "10", value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: f64,
    /// Seconds of load before the measurement (not counted).
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = warmup_secs(),
          allow_negative_numbers = true)]
    pub warmup: f64,
    /// Response body bytes per request (GET /bytes/SIZE), or request body
    /// bytes with --upload (K, M, G: x1024).
    #[arg(short = 'l', long, default_value = "1K", value_name = "BYTES",
          value_parser = units::size_in(0, MAX_SIZE), allow_negative_numbers = true)]
    pub size: u64,
    /// Requests per second over all connections (open loop, latency
    /// corrected for coordinated omission), e.g. 20K; `max` sends each
    /// connection's next request as soon as its response is in.
    #[arg(long, default_value = "max", value_name = "R|max", value_parser = per_second,
          allow_negative_numbers = true)]
    pub rate: PerSecond,
    /// Send SIZE bytes per request (PUT /upload) instead of receiving them.
    #[arg(long)]
    pub upload: bool,
    /// A request without a complete response after this long counts as a
    /// timeout (and its connection is opened again); also the connect timeout.
    #[arg(long, default_value = "2", value_name = "SECS",
          value_parser = super::common::timeout_secs(), allow_negative_numbers = true)]
    pub timeout: f64,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// Split what the user typed into the address to connect to and the
/// `Host` header.
fn target(host: &str, port: u16) -> anyhow::Result<Target> {
    let h = host.trim();
    if h.len() >= 8 && h[..8].eq_ignore_ascii_case("https://") {
        return Err(usage(format!(
            "{host}: http-load speaks plain HTTP/1.1; give http://HOST or HOST"
        )));
    }
    let h = if h.len() >= 7 && h[..7].eq_ignore_ascii_case("http://") {
        &h[7..]
    } else {
        h
    };
    let h = h.strip_suffix('/').unwrap_or(h);
    if h.is_empty() || h.contains('/') || h.contains(char::is_whitespace) {
        return Err(usage(format!(
            "{host}: give a host, host:port or http://host[:port] (the path is always /bytes/SIZE or /upload)"
        )));
    }
    let addr = fabperf_proto::resolve(h, port)?;
    let host_header = if h.parse::<std::net::IpAddr>().is_ok() || !h.contains(':') {
        // A bare name or address: the port we connect to goes in too.
        match h.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("[{h}]:{}", addr.port()),
            Err(_) => format!("{h}:{}", addr.port()),
        }
    } else {
        h.to_string()
    };
    Ok(Target {
        addr,
        host: host_header,
    })
}

pub fn run_http_load(a: HttpLoadArgs) -> anyhow::Result<ExitCode> {
    let p = LoadParams {
        connections: a.connections,
        threads: a.threads,
        duration_s: a.duration,
        warmup_s: a.warmup,
        size: a.size,
        rate: a.rate.0,
        upload: a.upload,
        timeout_s: a.timeout,
    };
    p.validate().map_err(usage)?;
    let t = target(&a.host, a.port)?;
    let recs = match fabperf_http::run_load(&t, &p) {
        Ok(r) => checked(r)?,
        Err(LoadError::BadParams(m)) => return Err(usage(m)),
        Err(e) => return Err(e.into()),
    };
    emit(&recs, &a.out, TableStyle::Summary)?;
    if !a.out.json {
        let stdout = std::io::stdout();
        let mut o = stdout.lock();
        for r in &recs {
            writeln!(o, "{}", describe(r))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The figures of an http-load record in two lines.
pub fn describe(r: &fabperf_results::Record) -> String {
    let rps = r.requests_per_s.unwrap_or(0.0);
    let mut s = format!(
        "{} {} {}: {} requests in {:.2} s, {:.1} requests/s, {:.3} Gbit/s of bodies",
        r.test,
        r.op.as_deref().unwrap_or(""),
        units::describe_size(r.size),
        r.iterations.unwrap_or(0),
        r.duration_s,
        rps,
        r.bw_gbps.unwrap_or(0.0)
    );
    if let Some(l) = &r.lat_us {
        s.push_str(&format!(
            "\nlatency (us, {} samples): min {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            l.samples, l.min, l.p50, l.p90, l.p99, l.p999, l.max, l.mean
        ));
    }
    let e = r.errors.clone().unwrap_or_default();
    if e.total() == 0 {
        s.push_str("\nerrors: none");
    } else {
        s.push_str(&format!(
            "\nerrors: {} (connect {}, write {}, read {}, timeout {}, status {}, parse {})",
            e.total(),
            e.connect,
            e.write,
            e.read,
            e.timeout,
            e.status,
            e.parse
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = target("127.0.0.1", 5301).unwrap();
        assert_eq!(t.addr.to_string(), "127.0.0.1:5301");
        assert_eq!(t.host, "127.0.0.1:5301");
        let t = target("http://127.0.0.1:8080/", 5301).unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(t.host, "127.0.0.1:8080");
        let t = target("::1", 5301).unwrap();
        assert_eq!(t.host, "[::1]:5301");
        for bad in ["https://x", "http://h/path", "", "a b", "http://"] {
            let e = target(bad, 5301).unwrap_err();
            assert!(
                e.downcast_ref::<super::super::common::UsageError>()
                    .is_some(),
                "{bad}"
            );
        }
    }
}
