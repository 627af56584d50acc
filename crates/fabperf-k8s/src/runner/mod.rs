//! The in-cluster runner: a run plan (ConfigMap) generated from the k8s
//! plan's `[runner]` table, and a Job (optionally a CronJob) that runs
//! `fabperf run` against the agents behind each path's headless Service,
//! then prints the mesh summary and exports the results.
//!
//! The runner pod needs no network attachments, RDMA devices, host network
//! or API permissions: it asks the agents (test kind `drive`) to run each
//! flow between themselves, so it only needs to reach their control ports.
//!
//! `check` reads `[runner]` and validates the run plan it generates;
//! `runplan` writes that plan's text; `objects` builds the ServiceAccount,
//! ConfigMap, PVC, Job and CronJob; `cron` checks the CronJob schedule.

mod check;
pub mod cron;
pub mod objects;
pub mod runplan;

use crate::plan::{PathKind, Plan};
use crate::render::{header_lines, Doc, RenderedFile};
use anyhow::Result;
pub(crate) use check::check;
use runplan::{quoted, Gen};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use toml::Spanned;

type S<T> = Spanned<T>;

/// ServiceAccount and `app.kubernetes.io/name` of the runner.
pub const RUNNER_NAME: &str = "fabperf-runner";
/// The Job (and CronJob) name: `kubectl logs job/fabperf-run`.
pub const JOB_NAME: &str = "fabperf-run";
/// The ConfigMap holding the run plan, and its key.
pub const PLAN_CONFIGMAP: &str = "fabperf-run-plan";
pub const PLAN_KEY: &str = "plan.toml";
pub const PLAN_DIR: &str = "/etc/fabperf-run";
/// The PersistentVolumeClaim with the results stores (`storage = "pvc"`).
pub const PVC_NAME: &str = "fabperf-results";
/// Where the store goes in the runner pod.
pub const DATA_DIR: &str = "/data";
/// The runner's files under `--out`: applied after the agents are ready.
pub const RUN_DIR: &str = "run";

pub const DEFAULT_CPU: u32 = 1;
pub const DEFAULT_MEMORY_MIB: u64 = 512;
pub const DEFAULT_STORAGE_SIZE: &str = "1Gi";
pub const DEFAULT_BACKOFF_LIMIT: i32 = 2;

/// Where the results store lives.
#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    /// Goes with the pod: the results leave through the logs (JSON Lines)
    /// and the Pushgateway.
    EmptyDir,
    /// A PersistentVolumeClaim (ReadWriteOnce): one store file per Job.
    Pvc { storage_class: Option<String> },
}

/// The validated `[runner]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerPlan {
    /// The run plan (TOML) the Job runs, as it goes into the ConfigMap.
    pub run_plan: String,
    /// The run plan's `name`.
    pub run_plan_name: String,
    /// The paths whose agents the run plan declares, in order.
    pub paths: Vec<PathKind>,
    /// Whether a test uses the mesh pattern (then the Job prints the mesh summary).
    pub mesh: bool,
    pub schedule: Option<String>,
    pub time_zone: Option<String>,
    pub storage: Storage,
    /// Kubernetes quantity: the PVC's request, or the emptyDir's size limit.
    pub storage_size: String,
    /// Pushgateway base URL (`fabperf export --format openmetrics --push URL`).
    pub pushgateway: Option<String>,
    /// Write OpenMetrics next to the store (PVC only).
    pub openmetrics_file: bool,
    /// Print every measurement as JSON Lines into the log.
    pub export_stdout: bool,
    pub cpu: u32,
    pub memory_mib: u64,
    /// Job activeDeadlineSeconds.
    pub deadline_s: Option<i64>,
    pub backoff_limit: i32,
    /// Extra node selection for the runner pod (it needs no special hardware).
    pub node_selector: BTreeMap<String, String>,
    /// How long a run waits for another run's Lease before it gives up.
    pub lease_wait_s: u64,
    /// A test sweeps `policies`: the runner holds each count of
    /// NetworkPolicies through the API (its Role allows it).
    pub policy_api: bool,
}

/// A test table as written: keys and values with their spans.
type RawTest = BTreeMap<S<String>, S<toml::Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRunner {
    enabled: Option<S<bool>>,
    name: Option<S<toml::Value>>,
    description: Option<S<toml::Value>>,
    baseline: Option<S<String>>,
    timeout: Option<S<toml::Value>>,
    retries: Option<S<toml::Value>>,
    retry_delay: Option<S<toml::Value>>,
    schedule: Option<S<String>>,
    time_zone: Option<S<String>>,
    storage: Option<S<String>>,
    storage_size: Option<S<String>>,
    storage_class: Option<S<String>>,
    pushgateway: Option<S<String>>,
    openmetrics_file: Option<S<bool>>,
    export_stdout: Option<S<bool>>,
    cpu: Option<S<i64>>,
    memory: Option<S<String>>,
    deadline: Option<S<toml::Value>>,
    backoff_limit: Option<S<i64>>,
    cluster_domain: Option<S<String>>,
    node_selector: Option<S<BTreeMap<String, S<String>>>>,
    lease_wait: Option<S<toml::Value>>,
    tests: Option<S<Vec<S<RawTest>>>>,
}

/// What the runner needs from the rest of the plan.
pub(crate) struct Inputs<'a> {
    /// The plan's text (spans index it) and how it is named in headers.
    pub text: &'a str,
    pub source_name: &'a str,
    pub namespace: &'a str,
    pub paths: &'a BTreeSet<PathKind>,
    pub control_port: u16,
    /// Paths whose agent pods hold an RDMA device.
    pub rdma_paths: BTreeSet<PathKind>,
    /// The nodes of the service path's single-endpoint Services.
    pub service_nodes: &'a [String],
}

/// Paths the runner can test: every path's agents, the service path's
/// through their single-endpoint Services (one per node, so a run still
/// pairs named agents).
fn runnable(p: PathKind, inp: &Inputs) -> bool {
    p != PathKind::Service || !inp.service_nodes.is_empty()
}

/// The Service name of one node's single-endpoint Service.
pub fn node_service_dns(namespace: &str, node: &str, cluster_domain: Option<&str>) -> String {
    let name = crate::objects::node_service_name(node);
    match cluster_domain {
        Some(d) => format!("{name}.{namespace}.svc.{d}"),
        None => format!("{name}.{namespace}.svc"),
    }
}

/// The headless Service name the run plan resolves for a path.
pub fn service_dns(namespace: &str, path: PathKind, cluster_domain: Option<&str>) -> String {
    match cluster_domain {
        Some(d) => format!("fabperf-{}.{namespace}.svc.{d}", path.name()),
        None => format!("fabperf-{}.{namespace}.svc", path.name()),
    }
}

/// A `storage_size` quantity: a whole number of Mi, Gi or Ti.
fn storage_mib(s: &str) -> Option<u64> {
    let (num, mul) = if let Some(n) = s.strip_suffix("Ti") {
        (n, 1024 * 1024)
    } else if let Some(n) = s.strip_suffix("Gi") {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1)
    } else {
        return None;
    };
    if num.is_empty() || num.len() > 7 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok().map(|n| n * mul)
}

/// A Pushgateway URL `fabperf export --push` can use: plain HTTP, a host,
/// nothing a shell or an HTTP request line would read differently.
pub fn check_pushgateway(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Err("fabperf export --push speaks plain HTTP; push to the Pushgateway inside the cluster (e.g. http://pushgateway.monitoring.svc:9091) or through a TLS-terminating proxy".into());
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!(
            "pushgateway {url:?} is not an http:// URL, e.g. \"http://pushgateway.monitoring.svc:9091\""
        ));
    };
    if url.len() > 2048 {
        return Err("pushgateway URL is longer than 2048 characters".into());
    }
    if rest
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "\"'`\\<>{}|^$;".contains(c))
    {
        return Err(format!(
            "pushgateway {url:?} holds characters a URL may not (spaces, quotes, control characters, ...)"
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("pushgateway URL with user:password@: credentials do not belong in a committed plan (use a Pushgateway reachable without them inside the cluster)".into());
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !h.ends_with(']') || authority.starts_with('[') => {
            if port.is_empty()
                || !port.bytes().all(|b| b.is_ascii_digit())
                || port.parse::<u32>().map_or(true, |p| p == 0 || p > 65535)
            {
                return Err(format!(
                    "pushgateway {url:?}: port {port:?} is not 1..=65535"
                ));
            }
            h
        }
        _ => authority,
    };
    if host.is_empty() {
        return Err(format!("pushgateway {url:?} names no host"));
    }
    Ok(())
}

/// The runner's files: `run/00-runner.yaml` (ServiceAccount, run plan
/// ConfigMap, PVC), `run/10-job.yaml`, `run/20-cronjob.yaml` (with a schedule).
pub fn files(plan: &Plan, r: &RunnerPlan) -> Result<Vec<RenderedFile>> {
    let paths = r
        .paths
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(", ");
    let storage = match &r.storage {
        Storage::EmptyDir => format!(
            "emptyDir (size limit {}): the store goes with the pod; the results leave through the log{}",
            r.storage_size,
            if r.pushgateway.is_some() { " and the Pushgateway" } else { "" }
        ),
        Storage::Pvc { storage_class } => format!(
            "PVC {PVC_NAME} ({}, class {}): one store per Job, {DATA_DIR}/<job>-<uid>.db",
            r.storage_size,
            storage_class.as_deref().unwrap_or("the cluster's default")
        ),
    };
    let mut out = Vec::new();
    let mut d = Doc::new(&header_lines(
        plan,
        &[
            "In-cluster runner: its ServiceAccount and Role (its run Lease, coordination.k8s.io, so two runs never".into(),
            format!(
                "measure at once{}; this namespace only), the run plan",
                if r.policy_api { "; the policy-scale NetworkPolicies" } else { "" }
            ),
            format!(
                "(ConfigMap {PLAN_CONFIGMAP}: agents by DNS behind the headless Services of {paths}){}.",
                if matches!(r.storage, Storage::Pvc { .. }) { " and the results PVC" } else { "" }
            ),
        ],
    ));
    d.push(&objects::service_account(plan))?;
    let (role, binding) = objects::rbac(plan, r);
    d.push(&role)?;
    d.push(&binding)?;
    d.push(&objects::plan_configmap(plan, r))?;
    if let Some(p) = objects::pvc(plan, r) {
        d.push(&p)?;
    }
    out.push(d.file(&format!("{RUN_DIR}/00-runner.yaml")));

    let mut exports = Vec::new();
    if r.mesh {
        exports.push("the mesh summary".to_string());
    }
    if r.export_stdout {
        exports.push("every measurement as JSON Lines".into());
    }
    let mut job_header = vec![
        format!(
            "The runner Job: `fabperf run` over the plan in ConfigMap {PLAN_CONFIGMAP}, then {} to the log;",
            if exports.is_empty() { "nothing more".to_string() } else { exports.join(" and ") }
        ),
        format!(
            "follow it with `kubectl -n {} logs -f job/{JOB_NAME}`. Store: {storage}.",
            plan.namespace
        ),
    ];
    if r.openmetrics_file {
        job_header.push(format!(
            "OpenMetrics next to the store ({DATA_DIR}/<job>-<uid>.prom)."
        ));
    }
    if let Some(u) = &r.pushgateway {
        job_header.push(format!(
            "OpenMetrics pushed to {u} (`fabperf export --format openmetrics --push`)."
        ));
    }
    job_header.extend([
        "It needs no network attachment, RDMA device or host network: the agents run each flow between".into(),
        "themselves (test kind drive); it reaches their control ports, and the API for its Lease (fabperf k8s".into(),
        format!(
            "lease: another run holding it is {}). Guaranteed QoS, non-root, read-only root filesystem.",
            if r.lease_wait_s == 0 {
                "named and this one exits 4".to_string()
            } else {
                format!("waited for up to {} s, then named and this one exits 4", r.lease_wait_s)
            }
        ),
        "Exit status: fabperf run's (0 all done, 1 cells failed, 2 bad plan, 130 interrupted), 3 when the run".into(),
        "passed but an export failed, 4 another run held the Lease, 5 the API could not be asked; 1 to 4 fail".into(),
        "the Job without a retry, an evicted pod is replaced without counting. Apply after the agents are".into(),
        format!("ready; to run again, delete the Job first (`kubectl -n {} delete job {JOB_NAME}`).", plan.namespace),
    ]);
    job_header.extend(crate::render::image_note(plan));
    let mut d = Doc::new(&header_lines(plan, &job_header));
    d.push(&objects::job(plan, r))?;
    out.push(d.file(&format!("{RUN_DIR}/10-job.yaml")));

    if let Some(cj) = objects::cron_job(plan, r) {
        let mut d = Doc::new(&header_lines(
            plan,
            &[
                format!(
                    "The runner on a schedule ({}{}): the Job of 10-job.yaml, never two at once",
                    r.schedule.as_deref().unwrap_or_default(),
                    r.time_zone.as_deref().map(|z| format!(", {z}")).unwrap_or_default()
                ),
                format!(
                    "(concurrencyPolicy Forbid). Each run is a Job {JOB_NAME}-<time>: `kubectl -n {} get jobs`.",
                    plan.namespace
                ),
            ],
        ));
        d.push(&cj)?;
        out.push(d.file(&format!("{RUN_DIR}/20-cronjob.yaml")));
    }
    Ok(out)
}
