//! The run plan (TOML): agents, tests with sweeps, patterns.
//!
//! ```toml
//! name = "fabric-acceptance"          # the plan's identity (cell ids derive from it)
//! baseline = "host"                   # the path reports compare against
//! token_file = "token"                # relative to the plan file
//! timeout = "10s"                     # control-channel timeout
//! retries = 2                         # extra attempts of a cell that failed transiently
//!
//! [[agents]]                          # a static agent
//! name = "node1"
//! addr = "198.18.0.11"                # host or host:port (port 5301 by default)
//! path = "host"
//!
//! [[agents]]                          # every address behind a name (headless Service)
//! dns = "fabric.agents.fabperf.test"
//! path = "fabric"
//!
//! [[tests]]
//! kind = "tcp-bw"                     # tcp-bw, tcp-lat, udp-bw, udp-lat, rdma-bw, rdma-lat, http-load, mtu
//! paths = ["host", "fabric"]
//! pattern = "mesh"                    # pairs, mesh, incast, bisection
//! sizes = ["128K"]
//! streams = [1, 4]
//! duration = "3s"
//! repeats = 2
//! ```
//!
//! Every problem is reported as `FILE:LINE:COL: message`, all at once.

use fabperf_proto::text::line_col;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

type S<T> = Spanned<T>;

/// The agents' default port.
pub const DEFAULT_PORT: u16 = fabperf_proto::DEFAULT_PORT;
/// Largest plan file read.
pub const MAX_PLAN_BYTES: u64 = 4 << 20;
/// Most cells a plan may expand to (a typo in a sweep must not plan a year).
pub const MAX_CELLS: usize = 1_000_000;
/// Most sweep points (every test's sweep × its profiles × its policy
/// counts) a plan may have. Counted before any is built: each costs a few
/// KiB while the plan is checked.
pub const MAX_POINTS: usize = 20_000;

/// What is left of a plan's sweep points and cells while its tests are
/// expanded: each test is counted before its points are built.
struct Budget {
    points: usize,
    cells: usize,
}

/// One problem in a plan, located in its source.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
    }
}

/// Every problem found in a plan.
#[derive(Debug, Clone)]
pub struct PlanErrors(pub Vec<PlanError>);

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "the plan has {n} problem{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanErrors {}

/// The test kinds a plan may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    TcpBw,
    TcpLat,
    UdpBw,
    UdpLat,
    RdmaBw,
    RdmaLat,
    HttpLoad,
    Mtu,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::TcpBw,
        Kind::TcpLat,
        Kind::UdpBw,
        Kind::UdpLat,
        Kind::RdmaBw,
        Kind::RdmaLat,
        Kind::HttpLoad,
        Kind::Mtu,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Kind::TcpBw => "tcp-bw",
            Kind::TcpLat => "tcp-lat",
            Kind::UdpBw => "udp-bw",
            Kind::UdpLat => "udp-lat",
            Kind::RdmaBw => "rdma-bw",
            Kind::RdmaLat => "rdma-lat",
            Kind::HttpLoad => "http-load",
            Kind::Mtu => "mtu",
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
    pub fn is_rdma(self) -> bool {
        matches!(self, Kind::RdmaBw | Kind::RdmaLat)
    }
    pub fn is_bandwidth(self) -> bool {
        matches!(self, Kind::TcpBw | Kind::UdpBw | Kind::RdmaBw)
    }
    /// Kinds an agent can serve to several senders at once (incast,
    /// bisection). UDP tests bind the agent's one UDP port, latency tests
    /// measure one flow.
    pub fn concurrent_ok(self) -> bool {
        matches!(self, Kind::TcpBw | Kind::RdmaBw)
    }
}

/// How a test's agents are paired.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// The listed (sender, receiver) pairs, one at a time.
    Pairs(Vec<(String, String)>),
    /// Every pair of the path's agents in rounds of disjoint pairs: both
    /// directions, 2(N−1) rounds, when `ordered` (the default unless every
    /// cell is `bidir`); one way, N−1 rounds, otherwise.
    Mesh { ordered: bool, retest: u32 },
    /// All other agents send to one receiver at once; every receiver in turn
    /// (or the listed ones).
    Incast { receivers: Option<Vec<String>> },
    /// Half the agents send to the other half at once, `splits` random splits.
    Bisection { splits: u32, seed: u64 },
}

impl Pattern {
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Pairs(_) => "pairs",
            Pattern::Mesh { .. } => "mesh",
            Pattern::Incast { .. } => "incast",
            Pattern::Bisection { .. } => "bisection",
        }
    }
}

/// Where a plan finds its agents.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentSource {
    Static { name: String, addr: String },
    Dns { name: String, port: u16 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentDecl {
    pub source: AgentSource,
    pub path: String,
}

/// One point of a test's sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    /// The values that vary (for reports): size, streams, op, mtu, direction, rate.
    pub dims: Map<String, Value>,
    /// The engine parameters to send.
    pub params: Value,
    /// The tuning profile and policy-rule count the cell runs under.
    pub env: CellEnv,
}

/// Who applies a cell's policy count (`[policy] target`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PolicyTarget {
    /// The cell's agents install N rules in their data path (fabperf-tune's
    /// nftables per-pod chain model).
    #[default]
    Agents,
    /// The runner runs a command (e.g. kubectl with `fabperf k8s
    /// policy-scale`) with FABPERF_POLICIES=N before the cells of each
    /// count, and with 0 at the end of the run.
    Command {
        argv: Vec<String>,
        timeout: Duration,
    },
}

/// What a cell runs under besides its engine parameters: a tuning profile
/// and a policy-rule count (the plan dimensions `profiles` and
/// `policies`), applied by the cell's agents for the cell's length.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellEnv {
    /// A profile of [`Plan::profiles`], by name.
    pub profile: Option<String>,
    /// Allow rules per pod chain (fabperf-tune's nftables model).
    pub policies: Option<u32>,
    /// Established flows skip the rules (as iptables-mode controllers do).
    pub policy_conntrack: bool,
}

impl CellEnv {
    /// Nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.profile.is_none() && self.policies.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestDecl {
    pub name: String,
    pub kind: Kind,
    pub paths: Vec<String>,
    pub pattern: Pattern,
    pub repeats: u32,
    pub points: Vec<SweepPoint>,
    /// Expected wall time of one cell (duration + warm-up), for ETAs.
    pub cell_secs: f64,
    /// The rule for mesh suspects: bandwidth below this fraction of the
    /// reference pair, latency above this multiple of it.
    pub suspect_bw: f64,
    pub suspect_lat: f64,
    /// The reference pair: the median (default) or ClusterKit's best.
    pub suspect_rule: crate::summary::RuleKind,
    /// The nodes' rails the test runs on (`rails`, `cross_rails`).
    pub rails: Option<crate::rails::Rails>,
}

impl TestDecl {
    /// The rule its mesh suspects are judged by.
    pub fn rule(&self) -> crate::summary::Rule {
        crate::summary::Rule::new(self.suspect_rule, self.suspect_bw, self.suspect_lat)
    }
}

/// A validated plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub baseline: Option<String>,
    pub token_file: Option<PathBuf>,
    pub timeout: Duration,
    pub retries: u32,
    pub retry_delay: Duration,
    pub agents: Vec<AgentDecl>,
    pub tests: Vec<TestDecl>,
    /// The tuning profiles the tests name (`profiles = [FILE, ...]`), by
    /// profile name.
    pub profiles: BTreeMap<String, fabperf_tune::Profile>,
    /// Who applies the `policies` dimension.
    pub policy_target: PolicyTarget,
    /// The plan file's text and its hash (sha256, hex).
    pub text: String,
    pub hash: String,
}

// ------------------------------------------------------------- raw TOML

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    name: Option<S<String>>,
    description: Option<String>,
    baseline: Option<S<String>>,
    token_file: Option<S<String>>,
    timeout: Option<S<toml::Value>>,
    retries: Option<S<i64>>,
    retry_delay: Option<S<toml::Value>>,
    #[serde(default)]
    agents: Vec<S<RawAgent>>,
    #[serde(default)]
    tests: Vec<S<RawTest>>,
    /// How the `policies` dimension is applied.
    policy: Option<S<RawPolicy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    target: Option<S<String>>,
    command: Option<S<Vec<S<String>>>>,
    timeout: Option<S<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: Option<S<String>>,
    addr: Option<S<String>>,
    dns: Option<S<String>>,
    port: Option<S<i64>>,
    path: Option<S<String>>,
}

/// `["sender", "receiver"]` with spans.
type RawPair = S<Vec<S<String>>>;

/// A sweep point under construction: its dims, its params, where it came from.
type Point = (Map<String, Value>, Value, Option<Range<usize>>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTest {
    name: Option<S<String>>,
    kind: S<String>,
    path: Option<S<String>>,
    paths: Option<S<Vec<S<String>>>>,
    pattern: Option<S<String>>,
    pairs: Option<S<Vec<RawPair>>>,
    ordered: Option<bool>,
    retest: Option<S<i64>>,
    receivers: Option<S<Vec<S<String>>>>,
    splits: Option<S<i64>>,
    seed: Option<S<i64>>,
    sizes: Option<S<Vec<S<toml::Value>>>>,
    streams: Option<S<Vec<S<i64>>>>,
    ops: Option<S<Vec<S<String>>>>,
    mtus: Option<S<Vec<S<i64>>>>,
    directions: Option<S<Vec<S<String>>>>,
    rates: Option<S<Vec<S<toml::Value>>>>,
    connections: Option<S<Vec<S<i64>>>>,
    duration: Option<S<toml::Value>>,
    repeats: Option<S<i64>>,
    params: Option<S<toml::Table>>,
    suspect_bw: Option<S<f64>>,
    suspect_lat: Option<S<f64>>,
    suspect_rule: Option<S<String>>,
    /// Tuning profile files (dimension `profile`).
    profiles: Option<S<Vec<S<String>>>>,
    /// Policy-rule counts (dimension `policies`).
    policies: Option<S<Vec<S<i64>>>>,
    policy_conntrack: Option<S<bool>>,
    /// `"rdma"` or a list of RDMA devices / interfaces, rail 0 first.
    rails: Option<S<toml::Value>>,
    cross_rails: Option<S<bool>>,
}

// --------------------------------------------------------------- errors

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<PlanError>,
}

impl Ctx<'_> {
    fn at(&mut self, span: Range<usize>, msg: impl Into<String>) {
        let (line, col) = line_col(self.text, span.start);
        self.errors.push(PlanError {
            file: self.file.to_string(),
            line,
            col,
            msg: msg.into(),
        });
    }
}

/// Names of agents and paths: what a Kubernetes node name or a label value
/// may hold, so they are safe in file names, metric labels and terminals.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
}

/// A duration: seconds as a number, or a string with `ms`, `s`, `m`, `h`.
pub fn parse_duration(v: &toml::Value) -> Result<f64, String> {
    let secs = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        toml::Value::String(s) => parse_duration_str(s)?,
        other => {
            return Err(format!(
                "a duration is a number of seconds or a string such as \"3s\", \"500ms\", \"2m\"; got {}",
                other.type_str()
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!(
            "a duration must be a non-negative number of seconds, got {secs}"
        ));
    }
    if secs > 7.0 * 86400.0 {
        return Err(format!("a duration of {secs} s is more than a week"));
    }
    Ok(secs)
}

fn parse_duration_str(s: &str) -> Result<f64, String> {
    fabperf_units::parse_duration(s, fabperf_units::TimeUnit::Seconds).map(|d| d.as_secs_f64())
}

fn size_value(v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(i) if *i > 0 => Ok(*i as u64),
        toml::Value::Integer(i) => Err(format!("a size must be positive, got {i}")),
        toml::Value::String(s) => fabperf_units::parse_size(s),
        other => Err(format!(
            "a size is a number of bytes or a string such as \"64K\"; got {}",
            other.type_str()
        )),
    }
}

fn rate_value(v: &toml::Value) -> Result<Option<u64>, String> {
    match v {
        toml::Value::Integer(i) if *i > 0 => Ok(Some(*i as u64)),
        toml::Value::Integer(i) => Err(format!("a rate must be positive bits/s, got {i}")),
        toml::Value::String(s) => fabperf_units::parse_rate(s),
        other => Err(format!(
            "a rate is bits/s as a number or a string such as \"10G\" or \"max\"; got {}",
            other.type_str()
        )),
    }
}

/// A request rate (http-load): requests/s as a number or a string such as
/// "20K", or "max" (closed loop).
fn request_rate_value(v: &toml::Value) -> Result<Option<f64>, String> {
    match v {
        toml::Value::Integer(i) if *i > 0 => Ok(Some(*i as f64)),
        toml::Value::Float(f) if f.is_finite() && *f > 0.0 => Ok(Some(*f)),
        toml::Value::Integer(_) | toml::Value::Float(_) => Err(format!(
            "a request rate must be a positive number of requests/s, got {v}"
        )),
        toml::Value::String(s) => fabperf_units::parse_per_second(s),
        other => Err(format!(
            "a request rate is requests/s as a number or a string such as \"20K\" or \"max\"; got {}",
            other.type_str()
        )),
    }
}

fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(f) => json!(f),
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

// ---------------------------------------------------------------- load

/// Read and validate a plan file. Relative files in it resolve against the
/// plan's directory.
pub fn load(path: &Path) -> Result<Plan, String> {
    let text = fabperf_results::files::read_text(path, MAX_PLAN_BYTES, "plan")?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&text, &path.display().to_string(), &base).map_err(|e| e.to_string())
}

/// The OS error text without Rust's "(os error N)" suffix.
pub fn os_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Validate plan text. `file` names it in errors; relative files resolve
/// against `base_dir`.
pub fn parse(text: &str, file: &str, base_dir: &Path) -> Result<Plan, PlanErrors> {
    let mut cx = Ctx {
        file,
        text,
        errors: Vec::new(),
    };
    let raw: RawPlan = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            cx.at(span, e.message().trim().to_string());
            return Err(PlanErrors(cx.errors));
        }
    };
    let plan = check(&mut cx, raw, text, base_dir);
    if cx.errors.is_empty() {
        Ok(plan)
    } else {
        Err(PlanErrors(cx.errors))
    }
}

fn check(cx: &mut Ctx, raw: RawPlan, text: &str, base_dir: &Path) -> Plan {
    let name = match &raw.name {
        Some(n) if is_name(n.get_ref()) => n.get_ref().clone(),
        Some(n) => {
            cx.at(n.span(), format!("name {:?}: use letters, digits, '-', '_' and '.', starting with a letter or digit", n.get_ref()));
            String::new()
        }
        None => {
            cx.at(
                0..0,
                "the plan needs a `name = \"...\"` (its identity: a run is resumed by it)",
            );
            String::new()
        }
    };
    let secs = |cx: &mut Ctx, v: &Option<S<toml::Value>>, default: f64, what: &str| -> f64 {
        match v {
            None => default,
            Some(v) => match parse_duration(v.get_ref()) {
                Ok(0.0) => {
                    cx.at(v.span(), format!("{what} must be more than zero"));
                    default
                }
                Ok(s) => s,
                Err(e) => {
                    cx.at(v.span(), format!("{what}: {e}"));
                    default
                }
            },
        }
    };
    let timeout = secs(cx, &raw.timeout, 10.0, "timeout");
    let retry_delay = secs(cx, &raw.retry_delay, 2.0, "retry_delay");
    let retries = match &raw.retries {
        None => 2,
        Some(r) if (0..=20).contains(r.get_ref()) => *r.get_ref() as u32,
        Some(r) => {
            cx.at(
                r.span(),
                format!("retries {} is out of range 0..=20", r.get_ref()),
            );
            2
        }
    };
    let token_file = raw.token_file.as_ref().map(|t| {
        let p = PathBuf::from(t.get_ref());
        if t.get_ref().is_empty() {
            cx.at(t.span(), "token_file is empty");
        }
        if p.is_absolute() {
            p
        } else {
            base_dir.join(p)
        }
    });

    // Agents.
    let mut agents = Vec::new();
    let mut static_names: BTreeSet<(String, String)> = BTreeSet::new();
    let mut paths_declared: BTreeSet<String> = BTreeSet::new();
    for a in &raw.agents {
        let span = a.span();
        let a = a.get_ref();
        let path = match &a.path {
            Some(p) if is_name(p.get_ref()) => p.get_ref().clone(),
            Some(p) => {
                cx.at(
                    p.span(),
                    format!(
                        "path {:?}: use letters, digits, '-', '_' and '.'",
                        p.get_ref()
                    ),
                );
                continue;
            }
            None => "host".to_string(),
        };
        let port = match &a.port {
            None => DEFAULT_PORT,
            Some(p) if (1..=65535).contains(p.get_ref()) => *p.get_ref() as u16,
            Some(p) => {
                cx.at(
                    p.span(),
                    format!("port {} is out of range 1..=65535", p.get_ref()),
                );
                DEFAULT_PORT
            }
        };
        let source = match (&a.addr, &a.dns) {
            (Some(_), Some(d)) => {
                cx.at(d.span(), "an agent has either `addr` (one agent) or `dns` (every address behind a name), not both");
                continue;
            }
            (None, None) => {
                cx.at(
                    span,
                    "an agent needs `addr = \"host[:port]\"` or `dns = \"name\"`",
                );
                continue;
            }
            (Some(addr), None) => {
                let Some(n) = &a.name else {
                    cx.at(span, "a static agent needs a `name` (the node it runs on)");
                    continue;
                };
                if !is_name(n.get_ref()) {
                    cx.at(
                        n.span(),
                        format!(
                            "agent name {:?}: use letters, digits, '-', '_' and '.'",
                            n.get_ref()
                        ),
                    );
                    continue;
                }
                let addr_s = addr.get_ref().trim();
                if addr_s.is_empty() || addr_s.contains(char::is_whitespace) {
                    cx.at(
                        addr.span(),
                        format!(
                            "agent address {:?} is not a host or host:port",
                            addr.get_ref()
                        ),
                    );
                    continue;
                }
                if a.port.is_some() && has_port(addr_s) {
                    cx.at(
                        addr.span(),
                        "give the port either in `addr` or in `port`, not both",
                    );
                }
                if !static_names.insert((n.get_ref().clone(), path.clone())) {
                    cx.at(
                        n.span(),
                        format!("agent {:?} on path {path:?} is declared twice", n.get_ref()),
                    );
                }
                let addr = if has_port(addr_s) {
                    addr_s.to_string()
                } else {
                    join_host_port(addr_s, port)
                };
                AgentSource::Static {
                    name: n.get_ref().clone(),
                    addr,
                }
            }
            (None, Some(d)) => {
                if let Some(n) = &a.name {
                    cx.at(n.span(), "a `dns` agent entry takes its names from the agents (their node names); drop `name`");
                }
                let host = d.get_ref().trim().trim_end_matches('.');
                if host.is_empty()
                    || host.len() > 253
                    || !host.split('.').all(|l| {
                        !l.is_empty()
                            && l.len() <= 63
                            && !l.starts_with('-')
                            && !l.ends_with('-')
                            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    })
                {
                    cx.at(d.span(), format!("dns {:?} is not a DNS name", d.get_ref()));
                    continue;
                }
                AgentSource::Dns {
                    name: host.to_string(),
                    port,
                }
            }
        };
        paths_declared.insert(path.clone());
        agents.push(AgentDecl { source, path });
    }
    if raw.agents.is_empty() {
        cx.at(0..0, "the plan has no [[agents]]");
    }
    let baseline = raw.baseline.as_ref().map(|b| {
        if !paths_declared.contains(b.get_ref()) && !raw.agents.is_empty() {
            cx.at(
                b.span(),
                format!(
                    "baseline path {:?} has no agents; paths with agents: {}",
                    b.get_ref(),
                    join(&paths_declared)
                ),
            );
        }
        b.get_ref().clone()
    });

    // Tests.
    let mut tests = Vec::new();
    let mut profiles = BTreeMap::new();
    let mut test_names = BTreeSet::new();
    let mut total_cells: usize = 0;
    let mut budget = Budget {
        points: MAX_POINTS,
        cells: MAX_CELLS,
    };
    for (i, t) in raw.tests.iter().enumerate() {
        let span = t.span();
        let t = t.get_ref();
        let Some(kind) = Kind::parse(t.kind.get_ref()) else {
            cx.at(
                t.kind.span(),
                format!(
                    "unknown test kind {:?}; one of: {}",
                    t.kind.get_ref(),
                    Kind::ALL.map(Kind::name).join(", ")
                ),
            );
            continue;
        };
        let name = match &t.name {
            Some(n) if is_name(n.get_ref()) => n.get_ref().clone(),
            Some(n) => {
                cx.at(
                    n.span(),
                    format!(
                        "test name {:?}: use letters, digits, '-', '_' and '.'",
                        n.get_ref()
                    ),
                );
                continue;
            }
            None => format!("{}-{}", kind.name(), i + 1),
        };
        if !test_names.insert(name.clone()) {
            cx.at(
                t.name.as_ref().map_or(span.clone(), |n| n.span()),
                format!("two tests are named {name:?}; give each a unique `name`"),
            );
        }
        // Paths.
        let mut paths = Vec::new();
        match (&t.path, &t.paths) {
            (Some(_), Some(ps)) => cx.at(ps.span(), "give `path` or `paths`, not both"),
            (Some(p), None) => paths.push(p.clone()),
            (None, Some(ps)) => {
                if ps.get_ref().is_empty() {
                    cx.at(ps.span(), "`paths` is empty");
                }
                paths.extend(ps.get_ref().iter().cloned());
            }
            (None, None) => {}
        }
        let mut path_names = Vec::new();
        if paths.is_empty() {
            if paths_declared.len() == 1 {
                path_names.push(paths_declared.iter().next().cloned().unwrap_or_default());
            } else if !paths_declared.is_empty() {
                cx.at(span.clone(), format!("test {name:?}: say which path(s) it runs on (`paths = [...]`); paths with agents: {}", join(&paths_declared)));
            }
        }
        for p in &paths {
            if !paths_declared.contains(p.get_ref()) {
                cx.at(
                    p.span(),
                    format!(
                        "path {:?} has no agents; paths with agents: {}",
                        p.get_ref(),
                        join(&paths_declared)
                    ),
                );
            } else if path_names.contains(p.get_ref()) {
                cx.at(p.span(), format!("path {:?} is listed twice", p.get_ref()));
            } else {
                path_names.push(p.get_ref().clone());
            }
        }
        // Pattern.
        let pattern_name = t
            .pattern
            .as_ref()
            .map(|p| p.get_ref().as_str())
            .unwrap_or(if t.pairs.is_some() { "pairs" } else { "mesh" });
        let pspan = t.pattern.as_ref().map_or(span.clone(), |p| p.span());
        let only = |cx: &mut Ctx, present: bool, sp: Option<Range<usize>>, key: &str, pat: &str| {
            if present && pattern_name != pat {
                cx.at(
                    sp.unwrap_or(span.clone()),
                    format!("`{key}` applies to pattern \"{pat}\" only"),
                );
            }
        };
        only(
            cx,
            t.pairs.is_some(),
            t.pairs.as_ref().map(|p| p.span()),
            "pairs",
            "pairs",
        );
        only(cx, t.ordered.is_some(), None, "ordered", "mesh");
        only(
            cx,
            t.retest.is_some(),
            t.retest.as_ref().map(|p| p.span()),
            "retest",
            "mesh",
        );
        only(
            cx,
            t.receivers.is_some(),
            t.receivers.as_ref().map(|p| p.span()),
            "receivers",
            "incast",
        );
        only(
            cx,
            t.splits.is_some(),
            t.splits.as_ref().map(|p| p.span()),
            "splits",
            "bisection",
        );
        only(
            cx,
            t.seed.is_some(),
            t.seed.as_ref().map(|p| p.span()),
            "seed",
            "bisection",
        );
        let pattern = match pattern_name {
            "pairs" => {
                let mut pairs = Vec::new();
                match &t.pairs {
                    None => cx.at(
                        pspan.clone(),
                        "pattern \"pairs\" needs `pairs = [[\"sender\", \"receiver\"], ...]`",
                    ),
                    Some(ps) => {
                        if ps.get_ref().is_empty() {
                            cx.at(ps.span(), "`pairs` is empty");
                        }
                        for p in ps.get_ref() {
                            let v = p.get_ref();
                            if v.len() != 2 {
                                cx.at(
                                    p.span(),
                                    format!(
                                        "a pair is [\"sender\", \"receiver\"], got {} names",
                                        v.len()
                                    ),
                                );
                                continue;
                            }
                            if v[0].get_ref() == v[1].get_ref() {
                                cx.at(
                                    p.span(),
                                    format!(
                                        "pair [{:?}, {:?}] tests an agent against itself",
                                        v[0].get_ref(),
                                        v[1].get_ref()
                                    ),
                                );
                                continue;
                            }
                            for n in v {
                                if !is_name(n.get_ref()) {
                                    cx.at(n.span(), format!("agent name {:?}: use letters, digits, '-', '_' and '.'", n.get_ref()));
                                }
                            }
                            pairs.push((v[0].get_ref().clone(), v[1].get_ref().clone()));
                        }
                    }
                }
                Pattern::Pairs(pairs)
            }
            "mesh" => {
                let retest = match &t.retest {
                    None => 2,
                    Some(r) if (0..=10).contains(r.get_ref()) => *r.get_ref() as u32,
                    Some(r) => {
                        cx.at(
                            r.span(),
                            format!("retest {} is out of range 0..=10", r.get_ref()),
                        );
                        0
                    }
                };
                // Both directions by default (ClusterKit's bandwidth test is
                // bidirectional): a node with a transmit-only fault shows as
                // a node only when each pair is measured both ways. A sweep
                // of `bidir` cells measures both ways in each cell already.
                let bidir_only = t.directions.as_ref().is_some_and(|d| {
                    !d.get_ref().is_empty() && d.get_ref().iter().all(|v| v.get_ref() == "bidir")
                }) || t.params.as_ref().is_some_and(|p| {
                    let p = p.get_ref();
                    p.get("direction").and_then(|v| v.as_str()) == Some("bidir")
                        || p.get("bidir").and_then(|v| v.as_bool()) == Some(true)
                });
                Pattern::Mesh {
                    ordered: t.ordered.unwrap_or(!bidir_only),
                    retest,
                }
            }
            "incast" => {
                if !kind.concurrent_ok() {
                    cx.at(pspan.clone(), format!("pattern \"incast\" runs several senders into one agent at once: {} cannot (use tcp-bw or rdma-bw)", kind.name()));
                }
                let receivers = t.receivers.as_ref().map(|rs| {
                    if rs.get_ref().is_empty() {
                        cx.at(rs.span(), "`receivers` is empty");
                    }
                    rs.get_ref()
                        .iter()
                        .map(|r| {
                            if !is_name(r.get_ref()) {
                                cx.at(
                                    r.span(),
                                    format!(
                                        "agent name {:?}: use letters, digits, '-', '_' and '.'",
                                        r.get_ref()
                                    ),
                                );
                            }
                            r.get_ref().clone()
                        })
                        .collect()
                });
                Pattern::Incast { receivers }
            }
            "bisection" => {
                if !kind.concurrent_ok() {
                    cx.at(pspan.clone(), format!("pattern \"bisection\" runs flows at once across the fabric: {} is not a bandwidth test that can (use tcp-bw or rdma-bw)", kind.name()));
                }
                let splits = match &t.splits {
                    None => 3,
                    Some(s) if (1..=1000).contains(s.get_ref()) => *s.get_ref() as u32,
                    Some(s) => {
                        cx.at(
                            s.span(),
                            format!("splits {} is out of range 1..=1000", s.get_ref()),
                        );
                        1
                    }
                };
                let seed = match &t.seed {
                    None => 1,
                    Some(s) if *s.get_ref() >= 0 => *s.get_ref() as u64,
                    Some(s) => {
                        cx.at(s.span(), "seed must not be negative");
                        1
                    }
                };
                Pattern::Bisection { splits, seed }
            }
            other => {
                cx.at(
                    pspan.clone(),
                    format!("unknown pattern {other:?}; one of: pairs, mesh, incast, bisection"),
                );
                Pattern::Mesh {
                    ordered: false,
                    retest: 0,
                }
            }
        };
        let repeats = match &t.repeats {
            None => 1,
            Some(r) if (1..=1000).contains(r.get_ref()) => *r.get_ref() as u32,
            Some(r) => {
                cx.at(
                    r.span(),
                    format!("repeats {} is out of range 1..=1000", r.get_ref()),
                );
                1
            }
        };
        let frac = |cx: &mut Ctx,
                    v: &Option<S<f64>>,
                    default: f64,
                    lo: f64,
                    hi: f64,
                    what: &str| match v {
            None => default,
            Some(x) if x.get_ref().is_finite() && *x.get_ref() > lo && *x.get_ref() <= hi => {
                *x.get_ref()
            }
            Some(x) => {
                cx.at(
                    x.span(),
                    format!("{what} {} is out of range ({lo}, {hi}]", x.get_ref()),
                );
                default
            }
        };
        let suspect_bw = frac(cx, &t.suspect_bw, 0.93, 0.0, 1.0, "suspect_bw");
        let suspect_lat = frac(cx, &t.suspect_lat, 2.1, 1.0, 1000.0, "suspect_lat");
        let suspect_rule = match &t.suspect_rule {
            None => crate::summary::RuleKind::default(),
            Some(r) => crate::summary::RuleKind::parse(r.get_ref()).unwrap_or_else(|| {
                cx.at(
                    r.span(),
                    format!(
                        "unknown suspect_rule {:?}; one of: {}",
                        r.get_ref(),
                        crate::summary::RuleKind::NAMES
                    ),
                );
                crate::summary::RuleKind::default()
            }),
        };
        let per_point = repeats as usize * path_names.len().max(1);
        let points = sweep(cx, t, kind, &name, per_point, &mut budget);
        let points = env_dims(cx, t, &name, base_dir, &mut profiles, points);
        if matches!(pattern, Pattern::Incast { .. }) {
            if let Some(why) = points.iter().find_map(|p| outcast(&p.params)) {
                cx.at(
                    pspan.clone(),
                    format!(
                        "test {name:?}: pattern \"incast\" sends into one receiver, but {why}: the \
                         data would leave the receiver (an outcast, which is not what an incast \
                         measures); use directions = [\"forward\"] or [\"bidir\"] (each direction \
                         is aggregated on its own), or write/send for RDMA"
                    ),
                );
            }
        }
        let rails = rails_decl(cx, t, kind, pattern_name, &name);
        let cell_secs = points
            .iter()
            .map(|p| expected_secs(kind, &p.params))
            .fold(0.0, f64::max);
        total_cells = total_cells.saturating_add(points.len().saturating_mul(per_point));
        tests.push(TestDecl {
            name,
            kind,
            paths: path_names,
            pattern,
            repeats,
            points,
            cell_secs,
            suspect_bw,
            suspect_lat,
            suspect_rule,
            rails,
        });
    }
    if raw.tests.is_empty() {
        cx.at(0..0, "the plan has no [[tests]]");
    }
    if total_cells > MAX_CELLS {
        cx.at(0..0, format!("the plan expands to more than {MAX_CELLS} cells before pairing agents; shorten its sweeps or repeats"));
    }
    use sha2::Digest;
    let hash = crate::hex(&sha2::Sha256::digest(text.as_bytes()));
    let policy_target = policy_target(cx, raw.policy.as_ref());
    Plan {
        name,
        description: raw.description,
        baseline,
        token_file,
        timeout: Duration::from_secs_f64(timeout),
        retries,
        retry_delay: Duration::from_secs_f64(retry_delay),
        agents,
        tests,
        profiles: profiles.into_iter().map(|(k, (p, _))| (k, p)).collect(),
        policy_target,
        text: text.to_string(),
        hash,
    }
}

/// A test's `rails` and `cross_rails`, checked.
fn rails_decl(
    cx: &mut Ctx,
    t: &RawTest,
    kind: Kind,
    pattern: &str,
    name: &str,
) -> Option<crate::rails::Rails> {
    use crate::rails::{RailSpec, Rails, MAX_RAILS};
    let Some(r) = &t.rails else {
        if let Some(c) = &t.cross_rails {
            cx.at(c.span(), "`cross_rails` needs `rails`");
        }
        return None;
    };
    let sp = r.span();
    let spec = match r.get_ref() {
        toml::Value::String(s) if s == "rdma" => RailSpec::Rdma,
        toml::Value::Array(a) => {
            let mut names: Vec<String> = Vec::new();
            for v in a {
                match v.as_str() {
                    Some(n) if is_name(n) && n.len() <= 64 => {
                        if names.iter().any(|m| m == n) {
                            cx.at(sp.clone(), format!("rails: {n:?} is listed twice; each rail is one device or interface"));
                        }
                        names.push(n.to_string());
                    }
                    _ => cx.at(sp.clone(), format!("rails: {v} is not a device or interface name (letters, digits, '-', '_', '.')")),
                }
            }
            if names.is_empty() {
                cx.at(sp.clone(), "`rails` is empty");
            }
            if names.len() > MAX_RAILS {
                cx.at(
                    sp.clone(),
                    format!("rails: {} rails, at most {MAX_RAILS}", names.len()),
                );
            }
            RailSpec::Named(names)
        }
        other => {
            cx.at(
                sp.clone(),
                format!("rails = {other}: give \"rdma\" (every RDMA device with an address) or a list of RDMA devices or interfaces, rail 0 first (e.g. [\"mlx5_0\", \"mlx5_1\"])"),
            );
            return None;
        }
    };
    if !crate::rails::kind_ok(kind) {
        cx.at(sp.clone(), format!("test {name:?}: {} cannot run on rails (several tests at once on one agent): use tcp-bw, tcp-lat, rdma-bw or rdma-lat", kind.name()));
    }
    if pattern != "mesh" && pattern != "pairs" {
        cx.at(sp.clone(), format!("test {name:?}: rails take the patterns \"mesh\" and \"pairs\" (rail i of one node with rail i of the other), not {pattern:?}"));
    }
    if t.profiles.is_some() || t.policies.is_some() {
        cx.at(sp.clone(), format!("test {name:?}: rails run a node's rails at once, and `profiles`/`policies` apply per cell: give them to a test without rails"));
    }
    if let Some(p) = &t.params {
        for k in ["device", "ib_port", "remote_device", "remote_ib_port"] {
            if p.get_ref().contains_key(k) {
                cx.at(p.span(), format!("test {name:?}: with rails the runner names each end's RDMA device and port for its rail; remove `{k}` from params"));
            }
        }
    }
    let cross = t.cross_rails.as_ref().is_some_and(|c| *c.get_ref());
    if cross && !kind.is_rdma() {
        if let Some(c) = &t.cross_rails {
            cx.at(c.span(), format!("test {name:?}: cross_rails needs an RDMA kind: a socket test to another rail's address leaves by the interface the routing table picks (that rail's own), so it would not cross; RDMA names each end's NIC"));
        }
    }
    Some(Rails { spec, cross })
}

fn join(s: &BTreeSet<String>) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

fn has_port(addr: &str) -> bool {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.contains("]:");
    }
    addr.matches(':').count() == 1
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Why a sweep point's data flows from the agent to the client (the
/// receiver of an incast to its senders): `reverse`, or an RDMA read.
fn outcast(params: &Value) -> Option<String> {
    if params.get("direction").and_then(Value::as_str) == Some("reverse") {
        return Some("its direction is reverse".into());
    }
    if params.get("op").and_then(Value::as_str) == Some("read") {
        return Some("an RDMA read pulls from the receiver".into());
    }
    None
}

/// Seconds one cell is expected to take (measured interval + warm-up).
fn expected_secs(kind: Kind, params: &Value) -> f64 {
    crate::drive::inner_secs(kind, params)
}

/// The engine's default parameters for a kind, as JSON.
fn defaults(kind: Kind) -> Value {
    let v = match kind {
        Kind::TcpBw => serde_json::to_value(fabperf_sock::TcpBwParams::default()),
        Kind::TcpLat => serde_json::to_value(fabperf_sock::TcpLatParams::default()),
        Kind::UdpBw => serde_json::to_value(fabperf_sock::UdpBwParams::default()),
        Kind::UdpLat => serde_json::to_value(fabperf_sock::UdpLatParams::default()),
        Kind::RdmaBw => serde_json::to_value(fabperf_rdma::BwParams::default()),
        Kind::RdmaLat => serde_json::to_value(fabperf_rdma::LatParams::default()),
        Kind::HttpLoad => serde_json::to_value(fabperf_http::LoadParams::default()),
        Kind::Mtu => serde_json::to_value(fabperf_mtu::plan::PlanParams::default()),
    };
    v.unwrap_or(Value::Null)
}

/// Check engine parameters by decoding them as the engine will.
pub fn validate_params(kind: Kind, params: &Value) -> Result<(), String> {
    fn go<T: serde::de::DeserializeOwned>(
        v: &Value,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<(), String> {
        let p: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        check(&p)
    }
    match kind {
        Kind::TcpBw => go::<fabperf_sock::TcpBwParams>(params, |p| p.validate()),
        Kind::TcpLat => go::<fabperf_sock::TcpLatParams>(params, |p| p.validate()),
        Kind::UdpBw => go::<fabperf_sock::UdpBwParams>(params, |p| p.validate()),
        Kind::UdpLat => go::<fabperf_sock::UdpLatParams>(params, |p| p.validate()),
        Kind::RdmaBw => go::<fabperf_rdma::BwParams>(params, |p| p.validate()),
        Kind::RdmaLat => go::<fabperf_rdma::LatParams>(params, |p| p.validate()),
        Kind::HttpLoad => go::<fabperf_http::LoadParams>(params, |p| p.validate()),
        Kind::Mtu => go::<fabperf_mtu::plan::PlanParams>(params, |p| p.validate()),
    }
}

/// The sweep's points: the cross product of the listed dimensions, in the
/// order sizes × streams × ops × mtus × directions × rates.
fn sweep(
    cx: &mut Ctx,
    t: &RawTest,
    kind: Kind,
    name: &str,
    per_point: usize,
    budget: &mut Budget,
) -> Vec<SweepPoint> {
    let mut base = defaults(kind);
    let tspan = t.kind.span();
    // Plan-wide fixed parameters.
    if let Some(p) = &t.params {
        if let (Some(obj), Value::Object(extra)) = (
            base.as_object_mut(),
            toml_to_json(&toml::Value::Table(p.get_ref().clone())),
        ) {
            for (k, v) in extra {
                if !obj.contains_key(&k) {
                    let known: Vec<&String> = obj.keys().collect();
                    cx.at(
                        p.span(),
                        format!(
                            "test {name:?}: {} has no parameter {k:?}; it has: {}",
                            kind.name(),
                            known
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                    continue;
                }
                obj.insert(k, v);
            }
        }
    }
    // The duration (every cell must be bounded).
    let dur_key = if kind.is_rdma() {
        "duration"
    } else {
        "duration_s"
    };
    match &t.duration {
        Some(d) => match parse_duration(d.get_ref()) {
            Ok(s) if s > 0.0 => base[dur_key] = json!(s),
            Ok(_) => cx.at(d.span(), "duration must be more than zero"),
            Err(e) => cx.at(d.span(), format!("duration: {e}")),
        },
        None => {
            if kind.is_rdma() && base.get("duration").is_none_or(Value::is_null) {
                // Iteration mode is bounded by its count; give cells a
                // duration anyway so the agent's limit and ETAs apply.
                base["duration"] = json!(5.0);
            }
        }
    }
    // Dimensions.
    type Dim = (&'static str, Vec<(Value, Range<usize>)>);
    let mut dims: Vec<Dim> = Vec::new();
    if let Some(sz) = &t.sizes {
        let mut vals = Vec::new();
        for s in sz.get_ref() {
            match size_value(s.get_ref()) {
                Ok(b) => vals.push((json!(b), s.span())),
                Err(e) => cx.at(s.span(), e),
            }
        }
        if sz.get_ref().is_empty() {
            cx.at(sz.span(), "`sizes` is empty");
        }
        dims.push(("size", vals));
    }
    if let Some(st) = &t.streams {
        if !matches!(kind, Kind::TcpBw | Kind::RdmaBw) {
            cx.at(
                st.span(),
                format!(
                    "`streams` applies to tcp-bw (streams) and rdma-bw (QPs), not {}",
                    kind.name()
                ),
            );
        }
        let mut vals = Vec::new();
        for s in st.get_ref() {
            if (1..=1024).contains(s.get_ref()) {
                vals.push((json!(s.get_ref()), s.span()));
            } else {
                cx.at(
                    s.span(),
                    format!("streams {} is out of range 1..=1024", s.get_ref()),
                );
            }
        }
        if matches!(kind, Kind::TcpBw | Kind::RdmaBw) {
            dims.push(("streams", vals));
        }
    }
    if let Some(ops) = &t.ops {
        if !kind.is_rdma() {
            cx.at(
                ops.span(),
                format!("`ops` applies to rdma-bw and rdma-lat, not {}", kind.name()),
            );
        }
        let mut vals = Vec::new();
        for o in ops.get_ref() {
            if ["write", "read", "send"].contains(&o.get_ref().as_str()) {
                vals.push((json!(o.get_ref()), o.span()));
            } else {
                cx.at(
                    o.span(),
                    format!("unknown op {:?}; one of: write, read, send", o.get_ref()),
                );
            }
        }
        if kind.is_rdma() {
            dims.push(("op", vals));
        }
    }
    if let Some(m) = &t.mtus {
        if !kind.is_rdma() {
            cx.at(m.span(), format!("`mtus` applies to RDMA tests (the path MTU of the QPs); a socket path's MTU is the interface's (set it with a tuning profile), not {}", kind.name()));
        }
        let mut vals = Vec::new();
        for v in m.get_ref() {
            if [256, 512, 1024, 2048, 4096].contains(v.get_ref()) {
                vals.push((json!(v.get_ref()), v.span()));
            } else {
                cx.at(
                    v.span(),
                    format!(
                        "RDMA MTU {} is not one of 256, 512, 1024, 2048, 4096",
                        v.get_ref()
                    ),
                );
            }
        }
        if kind.is_rdma() {
            dims.push(("mtu", vals));
        }
    }
    if let Some(d) = &t.directions {
        if !matches!(kind, Kind::TcpBw | Kind::UdpBw | Kind::RdmaBw) {
            cx.at(
                d.span(),
                format!(
                    "`directions` applies to bandwidth tests, not {}",
                    kind.name()
                ),
            );
        }
        let mut vals = Vec::new();
        for v in d.get_ref() {
            let ok = if kind == Kind::RdmaBw {
                ["forward", "bidir"].contains(&v.get_ref().as_str())
            } else {
                ["forward", "reverse", "bidir"].contains(&v.get_ref().as_str())
            };
            if ok {
                vals.push((json!(v.get_ref()), v.span()));
            } else {
                cx.at(
                    v.span(),
                    format!(
                        "direction {:?}: use {}",
                        v.get_ref(),
                        if kind == Kind::RdmaBw {
                            "forward or bidir"
                        } else {
                            "forward, reverse or bidir"
                        }
                    ),
                );
            }
        }
        if matches!(kind, Kind::TcpBw | Kind::UdpBw | Kind::RdmaBw) {
            dims.push(("direction", vals));
        }
    }
    if let Some(r) = &t.rates {
        if !matches!(kind, Kind::UdpBw | Kind::HttpLoad) {
            cx.at(
                r.span(),
                format!(
                    "`rates` applies to udp-bw (bits/s) and http-load (requests/s), not {}",
                    kind.name()
                ),
            );
        }
        let mut vals = Vec::new();
        for v in r.get_ref() {
            let x = if kind == Kind::HttpLoad {
                request_rate_value(v.get_ref()).map(|x| json!(x))
            } else {
                rate_value(v.get_ref()).map(|x| json!(x))
            };
            match x {
                Ok(x) => vals.push((x, v.span())),
                Err(e) => cx.at(v.span(), e),
            }
        }
        if matches!(kind, Kind::UdpBw | Kind::HttpLoad) {
            dims.push(("rate", vals));
        }
    }
    if let Some(c) = &t.connections {
        if kind != Kind::HttpLoad {
            cx.at(
                c.span(),
                format!("`connections` applies to http-load, not {}", kind.name()),
            );
        }
        let mut vals = Vec::new();
        for v in c.get_ref() {
            let max = i64::from(fabperf_http::params::MAX_CONNECTIONS);
            if (1..=max).contains(v.get_ref()) {
                vals.push((json!(v.get_ref()), v.span()));
            } else {
                cx.at(
                    v.span(),
                    format!("connections {} is out of range 1..={max}", v.get_ref()),
                );
            }
        }
        if c.get_ref().is_empty() {
            cx.at(c.span(), "`connections` is empty");
        }
        if kind == Kind::HttpLoad {
            dims.push(("connections", vals));
        }
    }
    // Count before building: the cross product, each point under every
    // profile and policy count, each of those repeats × paths cells.
    let env = t.profiles.as_ref().map_or(1, |l| l.get_ref().len().max(1))
        * t.policies.as_ref().map_or(1, |l| l.get_ref().len().max(1));
    let n_points = dims
        .iter()
        .fold(env, |n, (_, vals)| n.saturating_mul(vals.len().max(1)));
    let n_cells = n_points.saturating_mul(per_point);
    if n_points > budget.points || n_cells > budget.cells {
        let mut factors: Vec<String> = dims
            .iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(d, v)| {
                let plural = if d.ends_with('s') { "" } else { "s" };
                format!("{} {d}{plural}", v.len())
            })
            .collect();
        if env > 1 {
            factors.push(format!("{env} profile/policy settings"));
        }
        let what = if n_points > budget.points {
            format!(
                "{n_points} sweep points ({}), more than the {} left of the {MAX_POINTS} a plan may have",
                factors.join(" × "),
                budget.points
            )
        } else {
            format!(
                "{n_cells} cells ({n_points} sweep points × {per_point} repeats and paths), more than the {} left of the {MAX_CELLS} a plan may have",
                budget.cells
            )
        };
        cx.at(
            tspan.clone(),
            format!("test {name:?} expands to {what}; shorten its lists"),
        );
        return Vec::new();
    }
    budget.points -= n_points;
    budget.cells -= n_cells;
    // Cross product.
    let mut points: Vec<Point> = vec![(Map::new(), base, None)];
    for (dim, vals) in &dims {
        let mut next = Vec::new();
        for (d, p, sp) in &points {
            for (v, vspan) in vals {
                let mut d = d.clone();
                let mut p = p.clone();
                d.insert((*dim).to_string(), v.clone());
                apply_dim(kind, &mut p, dim, v);
                next.push((d, p, sp.clone().or(Some(vspan.clone()))));
            }
        }
        points = next;
        if points.len() > MAX_CELLS {
            cx.at(
                tspan.clone(),
                format!("test {name:?}: the sweep has more than {MAX_CELLS} points"),
            );
            return Vec::new();
        }
    }
    let mut out = Vec::new();
    for (dims, params, sp) in points {
        if let Err(e) = validate_params(kind, &params) {
            cx.at(
                sp.unwrap_or(tspan.clone()),
                format!(
                    "test {name:?}: {} rejects these parameters: {e}",
                    kind.name()
                ),
            );
            continue;
        }
        out.push(SweepPoint {
            dims,
            params,
            env: CellEnv::default(),
        });
    }
    out
}

fn apply_dim(kind: Kind, p: &mut Value, dim: &str, v: &Value) {
    match (dim, kind.is_rdma()) {
        ("size", false) => p["size"] = v.clone(),
        ("size", true) => p["sizes"] = json!([v]),
        ("streams", false) => p["streams"] = v.clone(),
        ("streams", true) => p["qps"] = v.clone(),
        ("op", _) => p["op"] = v.clone(),
        ("mtu", _) => p["mtu"] = v.clone(),
        ("direction", false) => p["direction"] = v.clone(),
        ("direction", true) => p["bidir"] = json!(v == "bidir"),
        ("rate", _) if kind == Kind::HttpLoad => p["rate"] = v.clone(),
        ("rate", _) => p["rate_bps"] = v.clone(),
        ("connections", _) => p["connections"] = v.clone(),
        _ => {}
    }
}

/// The environment dimensions of a test: each sweep point under each
/// profile (`profiles = [FILE, ...]`, relative to the plan) and each
/// policy-rule count (`policies = [0, 50, 200]`).
fn env_dims(
    cx: &mut Ctx,
    t: &RawTest,
    name: &str,
    base_dir: &Path,
    profiles: &mut BTreeMap<String, (fabperf_tune::Profile, PathBuf)>,
    points: Vec<SweepPoint>,
) -> Vec<SweepPoint> {
    let mut names: Vec<Option<String>> = vec![None];
    if let Some(list) = &t.profiles {
        names.clear();
        if list.get_ref().is_empty() {
            cx.at(list.span(), "`profiles` is empty");
        }
        for f in list.get_ref() {
            let path = base_dir.join(f.get_ref());
            match fabperf_tune::load_profile(&path) {
                Err(errs) => {
                    for e in errs {
                        cx.at(f.span(), format!("test {name:?}: profile {}", e));
                    }
                }
                Ok(p) => {
                    if let Some((old, file)) = profiles.get(&p.name) {
                        if *old != p {
                            cx.at(
                                f.span(),
                                format!(
                                    "two different profiles are named {:?} ({} and {}); give each its own name",
                                    p.name,
                                    file.display(),
                                    path.display()
                                ),
                            );
                            continue;
                        }
                    }
                    if names.contains(&Some(p.name.clone())) {
                        cx.at(f.span(), format!("profile {:?} is listed twice", p.name));
                        continue;
                    }
                    names.push(Some(p.name.clone()));
                    profiles.insert(p.name.clone(), (p, path));
                }
            }
        }
    }
    let mut counts: Vec<Option<u32>> = vec![None];
    if let Some(list) = &t.policies {
        counts.clear();
        if list.get_ref().is_empty() {
            cx.at(list.span(), "`policies` is empty");
        }
        for n in list.get_ref() {
            let v = *n.get_ref();
            if !(0..=fabperf_tune::policy::MAX_RULES as i64).contains(&v) {
                cx.at(
                    n.span(),
                    format!(
                        "policies {v} is out of range 0..={}",
                        fabperf_tune::policy::MAX_RULES
                    ),
                );
            } else if counts.contains(&Some(v as u32)) {
                cx.at(n.span(), format!("policies {v} is listed twice"));
            } else {
                counts.push(Some(v as u32));
            }
        }
    }
    let conntrack = match &t.policy_conntrack {
        Some(c) if t.policies.is_none() => {
            cx.at(c.span(), "`policy_conntrack` applies with `policies` only");
            false
        }
        Some(c) => *c.get_ref(),
        None => false,
    };
    let mut out = Vec::new();
    for prof in &names {
        for n in &counts {
            for p in &points {
                let mut q = p.clone();
                if let Some(pn) = prof {
                    q.dims.insert("profile".into(), json!(pn));
                }
                if let Some(n) = n {
                    q.dims.insert("policies".into(), json!(n));
                    if conntrack {
                        q.dims.insert("policy_conntrack".into(), json!(true));
                    }
                }
                q.env = CellEnv {
                    profile: prof.clone(),
                    policies: *n,
                    policy_conntrack: conntrack && n.is_some(),
                };
                out.push(q);
            }
        }
    }
    out
}

/// `[policy]`: `target = "agents"` (default) or `target = "command"` with
/// `command = ["argv", ...]` and `timeout`.
fn policy_target(cx: &mut Ctx, raw: Option<&S<RawPolicy>>) -> PolicyTarget {
    let Some(r) = raw else {
        return PolicyTarget::Agents;
    };
    let span = r.span();
    let r = r.get_ref();
    let target = r
        .target
        .as_ref()
        .map(|t| t.get_ref().as_str())
        .unwrap_or("agents");
    match target {
        "agents" => {
            if let Some(c) = &r.command {
                cx.at(c.span(), "`command` applies to target = \"command\" only");
            }
            PolicyTarget::Agents
        }
        "command" => {
            let argv: Vec<String> = r
                .command
                .as_ref()
                .map(|c| c.get_ref().iter().map(|a| a.get_ref().clone()).collect())
                .unwrap_or_default();
            if argv.is_empty() || argv[0].is_empty() {
                cx.at(
                    r.command.as_ref().map_or(span.clone(), |c| c.span()),
                    "target = \"command\" needs `command = [\"program\", \"arg\", ...]` (run with FABPERF_POLICIES=N)",
                );
            }
            if argv.len() > 64 || argv.iter().any(|a| a.len() > 4096 || a.contains('\0')) {
                cx.at(
                    span.clone(),
                    "`command`: at most 64 arguments of 4096 bytes, no NUL",
                );
            }
            let timeout = match &r.timeout {
                None => 120.0,
                Some(t) => match parse_duration(t.get_ref()) {
                    Ok(s) if s > 0.0 => s,
                    Ok(_) => {
                        cx.at(t.span(), "timeout must be more than zero");
                        120.0
                    }
                    Err(e) => {
                        cx.at(t.span(), format!("timeout: {e}"));
                        120.0
                    }
                },
            };
            PolicyTarget::Command {
                argv,
                timeout: Duration::from_secs_f64(timeout),
            }
        }
        other => {
            cx.at(
                r.target.as_ref().map_or(span, |t| t.span()),
                format!("policy target {other:?}: one of agents, command"),
            );
            PolicyTarget::Agents
        }
    }
}
