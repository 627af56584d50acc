//! The in-cluster runner: a run plan (ConfigMap) generated from the k8s
//! plan's `[runner]` table, and a Job (optionally a CronJob) that runs
//! `fabperf run` against the agents behind each path's headless Service,
//! then prints the mesh summary and exports the results.
//!
//! The runner pod needs no network attachments, RDMA devices, host network
//! or API permissions: it asks the agents (test kind `drive`) to run each
//! flow between themselves, so it only needs to reach their control ports.

pub mod cron;
pub mod objects;
pub mod runplan;

use crate::plan::{PathKind, Plan};
use crate::render::{header_lines, Doc, RenderedFile};
use anyhow::Result;
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

/// Item spans of a string or an array of strings as written (`path =
/// "x"`, `paths = ["x", "y"]`): each string with where it starts.
fn string_items(text: &str, v: &S<toml::Value>) -> Vec<(String, usize)> {
    #[derive(Deserialize)]
    struct Many {
        v: Vec<S<String>>,
    }
    let raw = text.get(v.span()).unwrap_or_default();
    let prefix = "v = ".len();
    let base = v.span().start;
    match v.get_ref() {
        toml::Value::String(s) => vec![(s.clone(), base)],
        toml::Value::Array(items) => {
            let exact = toml::from_str::<Many>(&format!("v = {raw}\n"))
                .ok()
                .filter(|m| m.v.len() == items.len());
            items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| {
                    let s = x.as_str()?.to_string();
                    let at = exact
                        .as_ref()
                        .map_or(base, |m| base + m.v[i].span().start - prefix);
                    Some((s, at))
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// What every generated run plan starts with.
struct PlanHead<'a> {
    r: &'a RawRunner,
    inp: &'a Inputs<'a>,
    default_name: &'a str,
    baseline: Option<&'a (String, Range<usize>)>,
    paths: &'a [PathKind],
    cluster_domain: Option<&'a str>,
    policy_api: bool,
}

impl PlanHead<'_> {
    /// The run plan with these of the user's tests (none: the default tests).
    fn generate(&self, tests: &[&S<RawTest>]) -> Gen {
        let (r, inp) = (self.r, self.inp);
        let mut g = Gen::default();
        g.line(&format!(
            "# Run plan of the in-cluster runner (Job {JOB_NAME}), generated by `fabperf k8s render --plan {}`",
            inp.source_name
        ));
        g.line("# from its [runner] table: edit the plan and render again. Agents: every address behind each");
        g.line("# path's headless Service; each names itself by its node (--node-name) and advertises the");
        g.line("# address its path is tested on (--advertise). The service path: each node's pod agent through");
        g.line("# its own single-endpoint Service.");
        match &r.name {
            Some(n) => g.key_value(inp.text, "name", n.span(), n.get_ref(), n.span()),
            None => g.line(&format!("name = {}", quoted(self.default_name))),
        }
        for (key, v) in [
            ("description", &r.description),
            ("timeout", &r.timeout),
            ("retries", &r.retries),
            ("retry_delay", &r.retry_delay),
        ] {
            if let Some(v) = v {
                g.key_value(inp.text, key, v.span(), v.get_ref(), v.span());
            }
        }
        if let Some((b, sp)) = self.baseline {
            g.line_from(&format!("baseline = {}", quoted(b)), sp.start);
        }
        g.line(&format!(
            "token_file = {}",
            quoted(&format!(
                "{}/{}",
                crate::objects::TOKEN_DIR,
                crate::objects::TOKEN_KEY
            ))
        ));
        if self.policy_api {
            g.line("");
            g.line("# Policy scale: before the cells of each count the runner makes the cluster hold that many");
            g.line("# NetworkPolicies selecting the agents, through the API with its ServiceAccount token (its Role");
            g.line("# allows networkpolicies in this namespace only); 0 at the end of the run.");
            g.line("[policy]");
            g.line("target = \"command\"");
            g.line(&format!(
                "command = [\"fabperf\", \"k8s\", \"policy-scale\", \"--apply\", \"--namespace\", {}, \"--port\", \"{}\"]",
                quoted(inp.namespace),
                inp.control_port
            ));
        }
        for p in self.paths {
            if *p == PathKind::Service {
                for n in inp.service_nodes {
                    g.line("");
                    g.line("[[agents]]");
                    g.line(&format!("name = {}", quoted(n)));
                    g.line(&format!(
                        "addr = {}",
                        quoted(&format!(
                            "{}:{}",
                            node_service_dns(inp.namespace, n, self.cluster_domain),
                            inp.control_port
                        ))
                    ));
                    g.line(&format!("path = {}", quoted(p.name())));
                }
                continue;
            }
            g.line("");
            g.line("[[agents]]");
            g.line(&format!(
                "dns = {}",
                quoted(&service_dns(inp.namespace, *p, self.cluster_domain))
            ));
            g.line(&format!("port = {}", inp.control_port));
            g.line(&format!("path = {}", quoted(p.name())));
        }
        if tests.is_empty() {
            default_tests(&mut g, self.paths);
        }
        for t in tests {
            g.line("");
            g.line_from("[[tests]]", t.span().start);
            // In the order the user wrote them.
            let mut kv: Vec<_> = t.get_ref().iter().collect();
            kv.sort_by_key(|(k, _)| k.span().start);
            for (k, v) in kv {
                g.key_value(inp.text, k.get_ref(), k.span(), v.get_ref(), v.span());
            }
        }
        g
    }
}

/// Without `[[runner.tests]]`: tcp-bw (4 streams) and tcp-lat over every
/// pair of nodes on the socket paths (host, pod, service, ipoib), rdma-bw
/// and rdma-lat over every pair on the RoCE path.
fn default_tests(g: &mut Gen, paths: &[PathKind]) {
    let tcp: Vec<&PathKind> = paths
        .iter()
        .filter(|p| {
            matches!(
                p,
                PathKind::Host | PathKind::Pod | PathKind::Service | PathKind::Ipoib
            )
        })
        .collect();
    let list = format!(
        "[{}]",
        tcp.iter()
            .map(|p| quoted(p.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    g.line("");
    g.line("# Default tests: every pair of nodes on each path, one pair per node at a time.");
    if !tcp.is_empty() {
        for (kind, extra) in [("tcp-bw", Some("streams = [4]")), ("tcp-lat", None)] {
            g.line("");
            g.line("[[tests]]");
            g.line(&format!("name = {}", quoted(kind)));
            g.line(&format!("kind = {}", quoted(kind)));
            g.line(&format!("paths = {list}"));
            g.line("pattern = \"mesh\"");
            if let Some(x) = extra {
                g.line(x);
            }
        }
    }
    if paths.contains(&PathKind::Roce) {
        for kind in ["rdma-bw", "rdma-lat"] {
            g.line("");
            g.line("[[tests]]");
            g.line(&format!("name = {}", quoted(kind)));
            g.line(&format!("kind = {}", quoted(kind)));
            g.line("path = \"roce\"");
            g.line("pattern = \"mesh\"");
        }
    }
}

/// Check `[runner]` and build the run plan. Errors go to `err` with their
/// span in the plan; `None` when the runner is disabled or broken.
pub(crate) fn check(
    raw: Option<&S<RawRunner>>,
    inp: &Inputs,
    err: &mut dyn FnMut(Range<usize>, String),
) -> Option<RunnerPlan> {
    let table_span = raw.map_or(0..0, |r| r.span());
    let empty = RawRunner {
        enabled: None,
        name: None,
        description: None,
        baseline: None,
        timeout: None,
        retries: None,
        retry_delay: None,
        schedule: None,
        time_zone: None,
        storage: None,
        storage_size: None,
        storage_class: None,
        pushgateway: None,
        openmetrics_file: None,
        export_stdout: None,
        cpu: None,
        memory: None,
        deadline: None,
        backoff_limit: None,
        cluster_domain: None,
        node_selector: None,
        lease_wait: None,
        tests: None,
    };
    let r = raw.map_or(&empty, |r| r.get_ref());
    if r.enabled.as_ref().is_some_and(|e| !e.get_ref()) {
        return None;
    }
    let errors_before = std::cell::Cell::new(0usize);
    let mut e = |sp: Range<usize>, msg: String| {
        errors_before.set(errors_before.get() + 1);
        err(sp, format!("[runner] {msg}"));
    };

    let paths: Vec<PathKind> = inp
        .paths
        .iter()
        .copied()
        .filter(|p| runnable(*p, inp))
        .collect();

    // Storage.
    let storage = match r.storage.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("emptyDir", _)) => Storage::EmptyDir,
        Some(("pvc", _)) => Storage::Pvc {
            storage_class: None,
        },
        Some((other, sp)) => {
            e(
                sp,
                format!("storage {other:?} must be \"emptyDir\" (the store goes with the pod; results leave through the log and the Pushgateway) or \"pvc\" (a PersistentVolumeClaim keeps one store per Job)"),
            );
            Storage::EmptyDir
        }
    };
    let storage = match (storage, &r.storage_class) {
        (Storage::Pvc { .. }, Some(c)) => {
            if !crate::plan::is_dns_subdomain(c.get_ref()) {
                e(
                    c.span(),
                    format!(
                        "storage_class {:?} is not a StorageClass name (lowercase DNS subdomain)",
                        c.get_ref()
                    ),
                );
            }
            Storage::Pvc {
                storage_class: Some(c.get_ref().clone()),
            }
        }
        (Storage::EmptyDir, Some(c)) => {
            e(
                c.span(),
                "storage_class applies to storage = \"pvc\" only".into(),
            );
            Storage::EmptyDir
        }
        (s, None) => s,
    };
    let storage_size = match &r.storage_size {
        None => DEFAULT_STORAGE_SIZE.to_string(),
        Some(s) => {
            match storage_mib(s.get_ref()) {
                Some(n) if (64..=16 * 1024 * 1024).contains(&n) => s.get_ref().clone(),
                Some(_) => {
                    e(
                        s.span(),
                        format!("storage_size {:?} is out of range 64Mi..=16Ti", s.get_ref()),
                    );
                    DEFAULT_STORAGE_SIZE.into()
                }
                None => {
                    e(
                    s.span(),
                    format!("storage_size {:?} must be a whole number of Mi, Gi or Ti, e.g. \"1Gi\"", s.get_ref()),
                );
                    DEFAULT_STORAGE_SIZE.into()
                }
            }
        }
    };

    // Exports.
    let pushgateway = r
        .pushgateway
        .as_ref()
        .and_then(|p| match check_pushgateway(p.get_ref()) {
            Ok(()) => Some(p.get_ref().clone()),
            Err(m) => {
                e(p.span(), m);
                None
            }
        });
    let openmetrics_file = match &r.openmetrics_file {
        Some(o) if *o.get_ref() && storage == Storage::EmptyDir => {
            e(
                o.span(),
                "openmetrics_file = true with storage = \"emptyDir\": the file would go with the pod; set storage = \"pvc\", or use pushgateway".into(),
            );
            false
        }
        Some(o) => *o.get_ref(),
        None => false,
    };
    let export_stdout = r.export_stdout.as_ref().is_none_or(|x| *x.get_ref());
    if !export_stdout && storage == Storage::EmptyDir && pushgateway.is_none() {
        if let Some(x) = &r.export_stdout {
            e(
                x.span(),
                "export_stdout = false with storage = \"emptyDir\" and no pushgateway: the results would go with the pod unseen; keep the log export, set storage = \"pvc\" or a pushgateway".into(),
            );
        }
    }

    // Resources, Job settings.
    let cpu = match &r.cpu {
        None => DEFAULT_CPU,
        Some(c) if (1..=64).contains(c.get_ref()) => *c.get_ref() as u32,
        Some(c) => {
            e(
                c.span(),
                format!(
                    "cpu {} is out of range 1..=64 (whole CPUs: Guaranteed QoS)",
                    c.get_ref()
                ),
            );
            DEFAULT_CPU
        }
    };
    let memory_mib = match &r.memory {
        None => DEFAULT_MEMORY_MIB,
        Some(m) => match crate::plan::parse_memory_mib(m.get_ref()) {
            Some(n) if (128..=64 * 1024).contains(&n) => n,
            Some(n) => {
                e(
                    m.span(),
                    format!("memory {n} MiB is out of range 128Mi..=64Gi"),
                );
                DEFAULT_MEMORY_MIB
            }
            None => {
                e(
                    m.span(),
                    format!(
                        "memory {:?} must be a whole number of Mi or Gi, e.g. \"512Mi\"",
                        m.get_ref()
                    ),
                );
                DEFAULT_MEMORY_MIB
            }
        },
    };
    let deadline_s = r.deadline.as_ref().and_then(|d| {
        match fabperf_run::plan::parse_duration(d.get_ref()) {
            Ok(s) if s >= 60.0 => Some(s.ceil() as i64),
            Ok(s) => {
                e(
                    d.span(),
                    format!("deadline {s} s is shorter than a minute; a run needs time to find the agents and measure (e.g. \"6h\")"),
                );
                None
            }
            Err(m) => {
                e(d.span(), format!("deadline: {m}"));
                None
            }
        }
    });
    let backoff_limit = match &r.backoff_limit {
        None => DEFAULT_BACKOFF_LIMIT,
        Some(b) if (0..=20).contains(b.get_ref()) => *b.get_ref() as i32,
        Some(b) => {
            e(
                b.span(),
                format!("backoff_limit {} is out of range 0..=20", b.get_ref()),
            );
            DEFAULT_BACKOFF_LIMIT
        }
    };
    let mut node_selector = BTreeMap::new();
    if let Some(ns) = &r.node_selector {
        for (k, v) in ns.get_ref() {
            if !crate::plan::is_label_key(k) {
                e(
                    ns.span(),
                    format!("node_selector key {k:?} is not a label key"),
                );
            } else if !crate::plan::is_label_value(v.get_ref()) {
                e(
                    v.span(),
                    format!("node_selector value {:?} is not a label value", v.get_ref()),
                );
            } else {
                node_selector.insert(k.clone(), v.get_ref().clone());
            }
        }
    }
    let cluster_domain = r.cluster_domain.as_ref().and_then(|d| {
        let v = d.get_ref().trim_end_matches('.');
        if crate::plan::is_dns_subdomain(v) {
            Some(v.to_string())
        } else {
            e(
                d.span(),
                format!(
                    "cluster_domain {:?} is not a DNS name (e.g. \"cluster.local\")",
                    d.get_ref()
                ),
            );
            None
        }
    });

    // Schedule.
    let schedule = r
        .schedule
        .as_ref()
        .and_then(|s| match cron::check_schedule(s.get_ref()) {
            Ok(()) => Some(s.get_ref().trim().to_string()),
            Err(m) => {
                e(s.span(), format!("schedule {:?}: {m}", s.get_ref()));
                None
            }
        });
    let time_zone = r.time_zone.as_ref().and_then(|z| {
        if r.schedule.is_none() {
            e(z.span(), "time_zone applies to a schedule (the CronJob); add schedule = \"0 3 * * *\" or drop it".into());
            return None;
        }
        match cron::check_time_zone(z.get_ref()) {
            Ok(()) => Some(z.get_ref().clone()),
            Err(m) => {
                e(z.span(), m);
                None
            }
        }
    });

    // Offsets of problems reported here, for which the run-plan parser's
    // own message about the same place would be a repetition.
    let mut own_errors: BTreeSet<usize> = BTreeSet::new();

    // Baseline.
    let baseline = match &r.baseline {
        Some(b) => {
            let ok = PathKind::parse(b.get_ref()).is_some_and(|p| paths.contains(&p));
            if !ok {
                own_errors.insert(b.span().start);
                e(
                    b.span(),
                    format!(
                        "baseline {:?} is not a path the runner tests; one of: {}",
                        b.get_ref(),
                        paths
                            .iter()
                            .map(|p| p.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            Some((b.get_ref().clone(), b.span()))
        }
        None => paths
            .contains(&PathKind::Host)
            .then(|| ("host".to_string(), table_span.clone())),
    };

    // The tests' paths and kinds, checked here for messages about the k8s
    // plan (the run-plan parser only knows which paths have agents).
    let mut mesh = false;
    let user_tests = r
        .tests
        .as_ref()
        .map(|t| t.get_ref().as_slice())
        .unwrap_or(&[]);
    if let Some(t) = &r.tests {
        if t.get_ref().is_empty() {
            e(t.span(), "tests is empty; leave it out for the default tests, or list [[runner.tests]] tables".into());
        }
    }
    for t in user_tests {
        let get = |k: &str| {
            t.get_ref()
                .iter()
                .find(|(kk, _)| kk.get_ref() == k)
                .map(|(_, v)| v)
        };
        let kind =
            get("kind").and_then(|k| k.get_ref().as_str().map(|s| (s.to_string(), k.span())));
        let pattern = get("pattern").and_then(|p| p.get_ref().as_str().map(str::to_string));
        if pattern.as_deref().unwrap_or(if get("pairs").is_some() {
            "pairs"
        } else {
            "mesh"
        }) == "mesh"
        {
            mesh = true;
        }
        let mut named = Vec::new();
        for key in ["path", "paths"] {
            if let Some(v) = get(key) {
                named.extend(string_items(inp.text, v));
            }
        }
        for (name, at) in &named {
            match PathKind::parse(name) {
                Some(p) if !paths.contains(&p) => {
                    own_errors.insert(*at);
                    e(
                        *at..*at,
                        format!(
                            "path {name:?} is not among the plan's paths ({}); add it to paths or drop it here",
                            paths.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
                Some(p) => {
                    if let Some((k, ksp)) = &kind {
                        if k.starts_with("rdma-") && !inp.rdma_paths.contains(&p) {
                            e(
                                ksp.clone(),
                                format!(
                                    "{k} on path {name:?}: its agents have no RDMA device: {}; run {k} on {} and TCP/UDP tests on {name:?}",
                                    match p {
                                        PathKind::Ipoib => "ipoib-cni gives the pod an IPoIB child, not a verbs device (attach = \"sriov\" gives it an InfiniBand VF)",
                                        _ => "only the roce agents get one, and the ipoib agents with attach = \"sriov\"",
                                    },
                                    if inp.rdma_paths.is_empty() {
                                        "a path with one (roce)".to_string()
                                    } else {
                                        inp.rdma_paths.iter().map(|p| format!("{:?}", p.name())).collect::<Vec<_>>().join(" or ")
                                    }
                                ),
                            );
                        }
                    }
                }
                None => {
                    own_errors.insert(*at);
                    e(
                        *at..*at,
                        format!(
                            "unknown path {name:?}; the runner tests: {}",
                            paths
                                .iter()
                                .map(|p| p.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                }
            }
        }
    }

    // A test sweeping `policies` gets them from the API: the pods' ports
    // are the CNI's, where the agents cannot install nftables rules.
    let policy_api = user_tests
        .iter()
        .any(|t| t.get_ref().keys().any(|k| k.get_ref() == "policies"));
    let lease_wait_s = match &r.lease_wait {
        None => 0,
        Some(w) => match fabperf_run::plan::parse_duration(w.get_ref()) {
            Ok(s) if (0.0..=7.0 * 86400.0).contains(&s) => s.ceil() as u64,
            Ok(s) => {
                e(
                    w.span(),
                    format!("lease_wait {s} s is out of range 0 s..=7 days"),
                );
                0
            }
            Err(m) => {
                e(w.span(), format!("lease_wait: {m}"));
                0
            }
        },
    };

    // The run plan.
    let default_name = format!("k8s-{}", inp.namespace);
    let run_plan_name = match &r.name {
        Some(n) => n.get_ref().as_str().unwrap_or_default().to_string(),
        None => default_name.clone(),
    };
    let head = PlanHead {
        r,
        inp,
        default_name: &default_name,
        baseline: baseline.as_ref(),
        paths: &paths,
        cluster_domain: cluster_domain.as_deref(),
        policy_api,
    };
    let all: Vec<&S<RawTest>> = user_tests.iter().collect();
    let g = head.generate(&all);
    if user_tests.is_empty() {
        mesh = true;
    }

    // Validate the run plan as `fabperf run` will, and report its problems
    // where the user wrote them: each test on its own first (the parser
    // stops at the first key it cannot read, so one bad test must not hide
    // another's problems), then the whole plan.
    let mut seen = BTreeSet::new();
    let mut report = |g: &Gen, errs: fabperf_run::PlanErrors| {
        for pe in errs.0 {
            let at = g.source_offset(g.offset_of(pe.line, pe.col), table_span.start);
            if own_errors.contains(&at) || !seen.insert((at, pe.msg.clone())) {
                continue;
            }
            e(at..at, pe.msg);
        }
    };
    let parse = |g: &Gen| fabperf_run::plan::parse(&g.text, "run plan", std::path::Path::new("/"));
    let mut each_ok = true;
    if all.len() > 1 {
        for t in &all {
            let one = head.generate(&[*t]);
            if let Err(errs) = parse(&one) {
                each_ok = false;
                report(&one, errs);
            }
        }
    }
    if each_ok {
        if let Err(errs) = parse(&g) {
            report(&g, errs);
        }
    }
    if errors_before.get() > 0 {
        return None;
    }
    Some(RunnerPlan {
        run_plan: g.text,
        run_plan_name,
        paths,
        mesh,
        schedule,
        time_zone,
        storage,
        storage_size,
        pushgateway,
        openmetrics_file,
        export_stdout,
        cpu,
        memory_mib,
        deadline_s,
        backoff_limit,
        node_selector,
        lease_wait_s,
        policy_api,
    })
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
