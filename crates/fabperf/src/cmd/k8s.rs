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
    /// Print N NetworkPolicies selecting the plan's agents (policy scale), for
    /// a runner's `[policy] command` (`... | kubectl apply -f -`).
    PolicyScale(PolicyScaleArgs),
}

#[derive(clap::Args)]
pub struct PolicyScaleArgs {
    /// The plan (TOML): its namespace and agent port.
    #[arg(long, value_name = "FILE")]
    plan: PathBuf,
    /// How many policies (default: the plan's [policy_scale] count).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=fabperf_k8s::policy::MAX_POLICIES as i64))]
    count: Option<u32>,
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
    }
}

fn run_policy_scale(a: PolicyScaleArgs) -> Result<ExitCode> {
    let plan = fabperf_k8s::load_plan(&a.plan)?;
    let Some(count) = a
        .count
        .or_else(|| plan.policy_scale.as_ref().map(|p| p.count))
    else {
        return Err(super::common::usage(
            "give --count N (or [policy_scale] count in the plan)",
        ));
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
                    "runner: once the agents are ready (kubectl -n {ns} rollout status ds/fabperf-<path>), start it with `kubectl apply -f {}/` and follow it with `kubectl -n {ns} logs -f job/{}`",
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
