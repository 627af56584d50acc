//! `fabperf k8s`: render manifests, device-plugin config and CNI values.

use anyhow::{bail, Context, Result};
use fabperf_k8s::crd::{RdmaResourceConfig, RdmaSharedConfig};
use fabperf_k8s::detect::DetectReport;
use fabperf_k8s::plan::{
    read_token_file, selectors_from_detect, split_resource, OperatorPlan, DEFAULT_IB_RESOURCE,
    DEFAULT_OPERATOR_NAMESPACE, DEFAULT_OPERATOR_REPOSITORY, DEFAULT_OPERATOR_VERSION,
};
use fabperf_k8s::render::{self, device_plugin_files, NcpParts, OutDir};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum K8sCmd {
    /// Render manifests from a TOML plan: namespace, agent DaemonSets and Services
    /// per path, NetworkAttachmentDefinitions, device plugin config, CNI Helm values.
    Render(RenderArgs),
    /// Print the RDMA shared device plugin config for the NICs in `fabperf detect --json` files.
    DevicePluginConfig(DevicePluginArgs),
    /// N NetworkPolicies selecting the agents (policy scale): printed from a
    /// plan, or with --apply held in the cluster through the API (what the
    /// in-cluster runner's `[policy]` command does for each count).
    PolicyScale(PolicyScaleArgs),
    /// Run a command while holding the namespace's run Lease (a
    /// coordination.k8s.io Lease): a second run waits for it, then exits 4
    /// naming the holder. The in-cluster runner wraps `fabperf run` in it.
    Lease(LeaseArgs),
}

#[derive(clap::Args)]
pub struct PolicyScaleArgs {
    /// The plan (TOML): its namespace and agent port.
    #[arg(long, value_name = "FILE", required_unless_present = "apply")]
    plan: Option<PathBuf>,
    /// How many policies (default: $FABPERF_POLICIES, as a run plan's
    /// `[policy]` command gets it, else the plan's [policy_scale] count).
    #[arg(long, value_name = "N", env = "FABPERF_POLICIES",
          value_parser = clap::value_parser!(u32).range(0..=fabperf_k8s::policy::MAX_POLICIES as i64))]
    count: Option<u32>,
    /// Make the cluster hold exactly N policy-scale NetworkPolicies (delete
    /// the namespace's old ones, create the new), with the pod's
    /// ServiceAccount token; instead of printing them.
    #[arg(long)]
    apply: bool,
    /// With --apply: the namespace (default: the plan's, else the pod's own).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// With --apply: the agents' port (default: the plan's, else 5301).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// The API server, e.g. http://127.0.0.1:8001 behind `kubectl proxy`
    /// (default: the pod's in-cluster configuration).
    #[arg(
        long,
        value_name = "URL",
        env = "FABPERF_K8S_API",
        requires = "namespace"
    )]
    api_server: Option<String>,
}

#[derive(clap::Args)]
pub struct LeaseArgs {
    /// The Lease's name.
    #[arg(long, default_value = fabperf_k8s::api::RUN_LEASE)]
    name: String,
    /// Its namespace (default: the pod's own).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Who holds it (default: $POD_NAME, else the host name).
    #[arg(long, value_name = "ID", env = "POD_NAME")]
    identity: Option<String>,
    /// How long the Lease lasts without a renewal (renewed every third of it):
    /// a killed runner frees it after this long.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_secs)]
    duration: f64,
    /// How long to wait for another run's Lease before giving up (exit 4).
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = parse_secs)]
    wait: f64,
    /// The API server (default: the pod's in-cluster configuration).
    #[arg(
        long,
        value_name = "URL",
        env = "FABPERF_K8S_API",
        requires = "namespace"
    )]
    api_server: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Exit status when another run holds the Lease (the runner Job fails at
/// once on it: another attempt would find it held too).
pub const EXIT_LEASE_HELD: u8 = 4;
/// Exit status when the API could not be asked (the Job retries).
pub const EXIT_LEASE_API: u8 = 5;

/// Seconds: a number, or a number with `s`, `m` or `h`.
fn parse_secs(s: &str) -> Result<f64, String> {
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        None => (s, 1.0),
        Some((i, _)) => (
            &s[..i],
            match &s[i..] {
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                other => return Err(format!("{s}: unknown unit {other:?}; use s, m or h")),
            },
        ),
    };
    let v = num
        .parse::<f64>()
        .map_err(|_| format!("{s:?} is not a number of seconds (or with s, m, h)"))?
        * mul;
    if !(0.0..=7.0 * 86400.0).contains(&v) {
        return Err(format!("{s}: give 0 to 7 days"));
    }
    Ok(v)
}

fn api_client(url: Option<&str>, ns: Option<&str>) -> Result<fabperf_k8s::api::ApiClient> {
    let c = match url {
        Some(u) => fabperf_k8s::api::ApiClient::at(u, ns.unwrap_or("default"))?,
        None => fabperf_k8s::api::ApiClient::in_cluster()?,
    };
    Ok(match ns {
        Some(n) => c.with_namespace(n),
        None => c,
    })
}

#[derive(clap::Args)]
pub struct RenderArgs {
    /// The plan (TOML). See examples/two-node-roce-ipoib.toml.
    #[arg(long, value_name = "FILE")]
    plan: PathBuf,
    /// Write one YAML file per concern into DIR (CNI values into DIR/cni/);
    /// without it, print everything to stdout as one multi-document stream.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the device plugin config (config.json, ConfigMap, NicClusterPolicy)
    /// into DIR. Default: DIR/device-plugin/ under --out.
    #[arg(long, value_name = "DIR", requires = "out")]
    device_plugin_out: Option<PathBuf>,
    /// The agent token (one line, 16+ characters, e.g. from `openssl rand -hex 24`):
    /// rendered into a Secret (01-token-secret.yaml, mode 0600). Overrides the
    /// plan's token_file. Without either, render prints the `kubectl create
    /// secret` command instead.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DpFormat {
    /// The plugin's config.json.
    Json,
    /// ConfigMap `rdma-devices` in kube-system.
    Configmap,
    /// NVIDIA network-operator NicClusterPolicy.
    NicClusterPolicy,
}

#[derive(clap::Args)]
pub struct DevicePluginArgs {
    /// A `fabperf detect --json` report; repeat for every node.
    #[arg(long, value_name = "FILE", required = true)]
    detect: Vec<PathBuf>,
    /// Extended resource for the RDMA devices on Ethernet (RoCE) ports, PREFIX/NAME.
    #[arg(long, default_value = "rdma/rdma_shared_device_a")]
    resource: String,
    /// Extended resource for the RDMA devices on InfiniBand ports, PREFIX/NAME
    /// (InfiniBand and RoCE devices are always separate resources).
    #[arg(long, default_value = DEFAULT_IB_RESOURCE)]
    ib_resource: String,
    /// Only the RDMA devices behind these netdevs (adds an ifNames selector).
    #[arg(long = "if-name", value_name = "NETDEV")]
    if_names: Vec<String>,
    /// How many pods may share one device.
    #[arg(long, default_value_t = 1000)]
    rdma_hca_max: u32,
    #[arg(long, value_enum, default_value = "json")]
    format: DpFormat,
    /// network-operator image repository (for --format nic-cluster-policy).
    #[arg(long, default_value = DEFAULT_OPERATOR_REPOSITORY)]
    operator_repository: String,
    /// network-operator component version (for --format nic-cluster-policy).
    #[arg(long, default_value = DEFAULT_OPERATOR_VERSION)]
    operator_version: String,
}

pub fn run(cmd: K8sCmd) -> Result<ExitCode> {
    match cmd {
        K8sCmd::Render(a) => run_render(a),
        K8sCmd::DevicePluginConfig(a) => run_device_plugin(a),
        K8sCmd::PolicyScale(a) => run_policy_scale(a),
        K8sCmd::Lease(a) => run_lease(a),
    }
}

fn run_policy_scale(a: PolicyScaleArgs) -> Result<ExitCode> {
    let plan = match &a.plan {
        Some(p) => Some(fabperf_k8s::load_plan(p)?),
        None => None,
    };
    let Some(count) = a.count.or_else(|| {
        plan.as_ref()
            .and_then(|p| p.policy_scale.as_ref().map(|p| p.count))
    }) else {
        return Err(super::common::usage(
            "give --count N (or $FABPERF_POLICIES, or [policy_scale] count in the plan)",
        ));
    };
    if a.apply {
        let ns = a
            .namespace
            .clone()
            .or_else(|| plan.as_ref().map(|p| p.namespace.clone()));
        let port = a
            .port
            .or_else(|| plan.as_ref().map(|p| p.control_port))
            .unwrap_or(fabperf_proto::DEFAULT_PORT);
        let c = api_client(a.api_server.as_deref(), ns.as_deref())?;
        let (deleted, created) = c.apply_policy_scale(port, count)?;
        eprintln!(
            "fabperf k8s policy-scale: {} now holds {created} policy-scale NetworkPolicies selecting the agents on port {port} ({deleted} removed)",
            c.namespace()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(plan) = plan else {
        return Err(super::common::usage("give --plan FILE (or --apply)"));
    };
    let mut out = String::new();
    for (i, p) in fabperf_k8s::policy::network_policies(&plan.namespace, plan.control_port, count)
        .iter()
        .enumerate()
    {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&render::to_yaml(p)?);
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn run_render(a: RenderArgs) -> Result<ExitCode> {
    let mut plan = match fabperf_k8s::load_plan(&a.plan) {
        Ok(p) => p,
        Err(e) => match e.downcast_ref::<fabperf_k8s::PlanErrors>() {
            // One problem a line, each escaped (a plan quotes what the user
            // typed); exit 2 like `fabperf run` with a bad plan.
            Some(errs) => {
                let n = errs.0.len();
                eprintln!(
                    "fabperf: error: the plan has {n} problem{}:",
                    if n == 1 { "" } else { "s" }
                );
                for pe in &errs.0 {
                    eprintln!("  {}", fabperf_proto::text::escape(&pe.to_string()));
                }
                return Ok(ExitCode::from(2));
            }
            None => return Err(e),
        },
    };
    if let Some(t) = &a.token_file {
        plan.token = Some(read_token_file(t).map_err(anyhow::Error::msg)?);
    }
    let rendered = fabperf_k8s::render(&plan)?;
    match &a.out {
        None => {
            let mut all = rendered.manifests.clone();
            all.extend(rendered.device_plugin.iter().cloned().map(|mut f| {
                f.rel_path = format!("device-plugin/{}", f.rel_path);
                f
            }));
            print!("{}", render::concat(&all));
            if plan.runner.is_some() {
                eprintln!(
                    "runner: the stream ends with the runner Job (# file: {}/...); it starts measuring when applied, so apply it after the agents are ready",
                    fabperf_k8s::runner::RUN_DIR
                );
            }
        }
        Some(out) => {
            let dp_dir = a
                .device_plugin_out
                .clone()
                .unwrap_or_else(|| out.join("device-plugin"));
            let mut dirs = vec![OutDir {
                dir: out,
                files: &rendered.manifests,
            }];
            if !rendered.device_plugin.is_empty() {
                dirs.push(OutDir {
                    dir: &dp_dir,
                    files: &rendered.device_plugin,
                });
            }
            // All or nothing: nothing under --out changes unless every file could be written.
            let removed = render::write_all(&dirs)?;
            for f in &rendered.manifests {
                eprintln!("wrote {}", out.join(&f.rel_path).display());
            }
            for f in &rendered.device_plugin {
                eprintln!("wrote {}", dp_dir.join(&f.rel_path).display());
            }
            for r in removed {
                eprintln!("removed stale {r}");
            }
            if plan.runner.is_some() {
                let run = out.join(fabperf_k8s::runner::RUN_DIR);
                eprintln!(
                    "runner: once the agents are ready (`for ds in $(kubectl -n {ns} get ds -o name); do kubectl -n {ns} rollout status $ds; done`), start it with `kubectl apply -f {}/` and follow it with `kubectl -n {ns} logs -f job/{}`",
                    run.display(),
                    fabperf_k8s::runner::JOB_NAME,
                    ns = plan.namespace
                );
            }
        }
    }
    for m in &rendered.messages {
        eprintln!("{m}");
    }
    Ok(ExitCode::SUCCESS)
}

fn check_resource<'a>(flag: &str, r: &'a str) -> Result<(&'a str, &'a str)> {
    let Some((prefix, name)) = r.split_once('/') else {
        bail!("{flag} {r:?} must be PREFIX/NAME, e.g. rdma/rdma_shared_device_a");
    };
    if prefix.is_empty() {
        bail!("{flag} {r:?} has an empty prefix");
    }
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        bail!("{flag} name {name:?} may only hold letters, digits and '_'");
    }
    let _ = split_resource(r);
    Ok((prefix, name))
}

fn run_device_plugin(a: DevicePluginArgs) -> Result<ExitCode> {
    let (prefix, name) = check_resource("--resource", &a.resource)?;
    let (ib_prefix, ib_name) = check_resource("--ib-resource", &a.ib_resource)?;
    if a.rdma_hca_max == 0 {
        bail!("--rdma-hca-max must be at least 1");
    }
    let mut reports = Vec::new();
    for p in &a.detect {
        let text = fabperf_k8s::files::read_text_capped(
            p,
            fabperf_k8s::files::MAX_INPUT_BYTES,
            "detect file",
        )?;
        reports.push(DetectReport::parse(&text, &p.display().to_string())?);
    }
    let named: Vec<(&str, &DetectReport)> =
        reports.iter().map(|r| (r.hostname.as_str(), r)).collect();
    let groups = selectors_from_detect(&named, &a.if_names)
        .map_err(anyhow::Error::msg)
        .context("cannot derive device plugin selectors")?;
    let config = RdmaSharedConfig {
        periodic_update_interval: 300,
        config_list: groups
            .into_iter()
            .map(|(lt, selectors)| {
                let (p, n) = if lt == "ether" {
                    (prefix, name)
                } else {
                    (ib_prefix, ib_name)
                };
                RdmaResourceConfig {
                    resource_name: n.into(),
                    resource_prefix: p.into(),
                    rdma_hca_max: a.rdma_hca_max,
                    selectors,
                }
            })
            .collect(),
    };
    let op = OperatorPlan {
        repository: a.operator_repository,
        version: a.operator_version,
        namespace: DEFAULT_OPERATOR_NAMESPACE.into(),
        per_node_block_size: 16,
    };
    match a.format {
        DpFormat::Json => print!("{}", config.to_json()),
        DpFormat::Configmap | DpFormat::NicClusterPolicy => {
            let parts = NcpParts {
                device_plugin: Some(&config),
                ..Default::default()
            };
            let files = device_plugin_files(&op, &parts, "fabperf k8s device-plugin-config")?;
            let want = if matches!(a.format, DpFormat::Configmap) {
                "rdma-devices-configmap.yaml"
            } else {
                "nic-cluster-policy.yaml"
            };
            let f = files.iter().find(|f| f.rel_path == want).expect("rendered");
            print!("{}", f.content);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_lease(a: LeaseArgs) -> Result<ExitCode> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use wait_timeout::ChildExt;
    let say = |m: &str| eprintln!("fabperf k8s lease: {m}");
    let identity = a
        .identity
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(fabperf_agent::hostname);
    let c = match api_client(a.api_server.as_deref(), a.namespace.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            say(&format!("{e:#}"));
            return Ok(ExitCode::from(EXIT_LEASE_API));
        }
    };
    let duration = Duration::from_secs_f64(a.duration.max(3.0));
    let wait = Duration::from_secs_f64(a.wait);
    let poll = Duration::from_secs(5).min(duration / 3);
    let lease = format!("{}/{}", c.namespace(), a.name);
    let got = c.acquire_lease(&a.name, &identity, duration, wait, poll, &mut |h| {
        say(&format!(
            "the Lease {lease} is held by {h}; waiting up to {:.0} s for it",
            wait.as_secs_f64()
        ))
    });
    match got {
        Ok(()) => say(&format!(
            "holding the Lease {lease} as {identity} (renewed every {:.0} s; a killed run frees it within {:.0} s)",
            (duration / 3).as_secs_f64(),
            duration.as_secs_f64()
        )),
        Err(e @ fabperf_k8s::api::LeaseError::Held { .. }) => {
            say(&format!(
                "{e}. Not starting. When it has finished (kubectl -n {ns} get lease {name}; kubectl -n {ns} get jobs), run again; [runner] lease_wait makes a run wait for the Lease instead",
                ns = c.namespace(),
                name = a.name
            ));
            return Ok(ExitCode::from(EXIT_LEASE_HELD));
        }
        Err(e) => {
            say(&format!("{e}"));
            return Ok(ExitCode::from(EXIT_LEASE_API));
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing the signal handlers")?;
    }
    let mut child = match std::process::Command::new(&a.command[0])
        .args(&a.command[1..])
        .spawn()
    {
        Ok(ch) => ch,
        Err(e) => {
            let _ = c.release_lease(&a.name, &identity);
            bail!("cannot start {:?}: {e}", a.command[0]);
        }
    };
    let mut last_renew = Instant::now();
    let mut forwarded = false;
    let status = loop {
        // Wakes up when the command ends, or every 100 ms to pass a signal
        // on and renew the Lease.
        if let Some(st) = child
            .wait_timeout(Duration::from_millis(100))
            .context("waiting for the command")?
        {
            break st;
        }
        if stop.load(Ordering::Relaxed) && !forwarded {
            forwarded = true;
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        if last_renew.elapsed() >= duration / 3 {
            last_renew = Instant::now();
            if let Err(e) = c.renew_lease(&a.name, &identity) {
                say(&format!(
                    "{e:#}; the run goes on, but another run may start beside it"
                ));
            }
        }
    };
    match c.release_lease(&a.name, &identity) {
        Ok(()) => say(&format!("released the Lease {lease}")),
        Err(e) => say(&format!(
            "{e:#}; it expires by itself within {:.0} s",
            duration.as_secs_f64()
        )),
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(ExitCode::from(match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        _ => 1,
    }))
}
