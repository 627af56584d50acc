//! `fabperf cni-bench`: pod network launch time. A CNI plugin chain (a
//! conflist, a single config or a NetworkAttachmentDefinition's config) is run
//! ADD then DEL in a fresh network namespace, N times, with the real plugin
//! binaries, as a container runtime would for each pod sandbox. The time of
//! the whole chain's ADD (what a pod waits for before its containers start)
//! and DEL are recorded in fabperf's latency histograms, one record per chain
//! and command.

pub mod conf;
pub mod exec;
mod netns;
pub mod record;

pub use conf::Chain;
pub use exec::{CniCommand, PluginError};
pub use record::{write_csv, write_json_lines, CniRecord};

use anyhow::{bail, Context, Result};
use exec::{find_plugin, invoke, join_path, Invocation};
use fabperf_results::{LatencyHistogram, LatencyKind};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The stop flag: set it (a SIGINT/SIGTERM handler does) and the bench
/// stops before the next plugin call, DELs what the sandbox being set up
/// has ADDed, removes its network namespace and returns an error.
pub fn stop_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone()
}

fn stopped() -> bool {
    stop_flag().load(Ordering::SeqCst)
}

/// The error a stopped bench returns.
const INTERRUPTED: &str = "interrupted: the sandbox being set up was deleted (DEL of every plugin it had added) and its network namespace removed";

/// Where container runtimes and Debian's package put CNI plugins.
pub const DEFAULT_CNI_PATH: &str = "/opt/cni/bin:/usr/lib/cni";

#[derive(Debug, Clone)]
pub struct Options {
    pub cni_path: Vec<PathBuf>,
    /// Recorded iterations per chain.
    pub iterations: u32,
    /// Unrecorded iterations first (page cache, first-run setup such as a bridge).
    pub warmup: u32,
    pub ifname: String,
    /// Per plugin call.
    pub timeout: Duration,
}

/// Progress and outcome reporting.
pub trait Observer {
    fn iteration(&mut self, _chain: &Chain, _done: u32, _total: u32) {}
}

pub struct Quiet;
impl Observer for Quiet {}

/// The stdin config for plugin `i` of the chain.
fn plugin_config(chain: &Chain, i: usize, prev: Option<&Value>) -> Vec<u8> {
    let mut m: Map<String, Value> = chain.plugins[i].clone();
    m.insert(
        "cniVersion".into(),
        Value::String(chain.cni_version.clone()),
    );
    m.insert("name".into(), Value::String(chain.name.clone()));
    if let Some(p) = prev {
        m.insert("prevResult".into(), p.clone());
    }
    serde_json::to_vec(&Value::Object(m)).expect("a JSON map serializes")
}

struct Binaries {
    /// (plugin type, binary) for each plugin of the chain, in order.
    plugins: Vec<(String, PathBuf)>,
    cni_path: String,
}

/// Every binary the chain runs must exist before anything is timed.
fn resolve(chain: &Chain, opts: &Options) -> Result<Binaries, PluginError> {
    for b in chain.binaries() {
        find_plugin(b, &opts.cni_path)?;
    }
    let plugins = chain
        .types()
        .into_iter()
        .map(|t| Ok((t.to_string(), find_plugin(t, &opts.cni_path)?)))
        .collect::<Result<Vec<_>, PluginError>>()?;
    Ok(Binaries {
        plugins,
        cni_path: join_path(&opts.cni_path),
    })
}

/// Check before anything runs: root, and every binary of the chain in the CNI path.
pub fn preflight(chain: &Chain, opts: &Options) -> Result<()> {
    netns::check_privileges()?;
    resolve(chain, opts)
        .map(|_| ())
        .map_err(|e| anyhow::Error::new(e).context(format!("network {}", chain.label())))
}

/// One pod sandbox: ADD the chain in `ns`, then DEL it. Returns the ADD and
/// DEL times of the whole chain. On an ADD failure the plugins already added
/// are deleted (in reverse order) before the error is returned.
fn one_sandbox(
    chain: &Chain,
    bins: &Binaries,
    opts: &Options,
    ns: &netns::Netns,
    container_id: &str,
) -> Result<(Duration, Duration)> {
    let mut prev: Option<Value> = None;
    let mut add = Duration::ZERO;
    let call = |i: usize, cmd: CniCommand, prev: Option<&Value>| {
        let (plugin, binary) = &bins.plugins[i];
        let stdin = plugin_config(chain, i, prev);
        invoke(&Invocation {
            plugin,
            binary,
            command: cmd,
            container_id,
            netns: ns.path(),
            ifname: &opts.ifname,
            cni_path: &bins.cni_path,
            stdin: &stdin,
            timeout: opts.timeout,
        })
    };
    for i in 0..bins.plugins.len() {
        if stopped() {
            for j in (0..i).rev() {
                let _ = call(j, CniCommand::Del, prev.as_ref());
            }
            bail!("network {}: {INTERRUPTED}", chain.label());
        }
        match call(i, CniCommand::Add, prev.as_ref()) {
            Ok((r, t)) => {
                add += t;
                prev = Some(r);
            }
            Err(e) => {
                for j in (0..=i).rev() {
                    let _ = call(j, CniCommand::Del, prev.as_ref());
                }
                return Err(anyhow::Error::new(e).context(format!("network {}", chain.label())));
            }
        }
    }
    let mut del = Duration::ZERO;
    let mut first_err = None;
    for i in (0..bins.plugins.len()).rev() {
        match call(i, CniCommand::Del, prev.as_ref()) {
            Ok((_, t)) => del += t,
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(anyhow::Error::new(e).context(format!("network {}", chain.label())));
    }
    Ok((add, del))
}

/// Run one chain: warm-up, then `iterations` sandboxes, each in a fresh
/// network namespace. Returns the ADD and DEL records.
pub fn bench_chain(
    chain: &Chain,
    opts: &Options,
    obs: &mut dyn Observer,
) -> Result<[CniRecord; 2]> {
    if opts.iterations == 0 {
        bail!("the number of iterations must be at least 1");
    }
    netns::check_privileges()?;
    let bins = resolve(chain, opts)?;
    let started_at = fabperf_results::now_rfc3339();
    let mut add_h = LatencyHistogram::new(LatencyKind::Rtt);
    let mut del_h = LatencyHistogram::new(LatencyKind::Rtt);
    let total = opts.warmup + opts.iterations;
    let mut wall = std::time::Instant::now();
    for n in 0..total {
        if stopped() {
            bail!(
                "network {}: interrupted between sandboxes; nothing is left behind",
                chain.label()
            );
        }
        if n == opts.warmup {
            wall = std::time::Instant::now();
        }
        let ns = netns::Netns::create(n).context("creating the sandbox network namespace")?;
        let id = format!("fabperf-cnibench-{}-{n}", std::process::id());
        let r = one_sandbox(chain, &bins, opts, &ns, &id);
        ns.remove()
            .context("removing the sandbox network namespace")?;
        let (add, del) = r?;
        if n >= opts.warmup {
            add_h.record_rtt_ns(add.as_nanos().min(u64::MAX as u128) as u64);
            del_h.record_rtt_ns(del.as_nanos().min(u64::MAX as u128) as u64);
        }
        obs.iteration(chain, n + 1, total);
    }
    let wall_s = wall.elapsed().as_secs_f64();
    let make = |cmd: CniCommand, h: &LatencyHistogram| {
        CniRecord::new(chain, cmd, opts, h.summary(), wall_s, &started_at)
    };
    Ok([make(CniCommand::Add, &add_h), make(CniCommand::Del, &del_h)])
}
