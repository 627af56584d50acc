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
//! Every problem is reported as `FILE:LINE:COL: message`, all at once
//! (the plan-file layer, `fabperf_planfile`).
//!
//! The checking is split by the rule a reader looks for: `schema` (the
//! keys a plan may hold), `check` (plan-wide keys), `agents`, `test` (one
//! `[[tests]]` entry), `pattern`, `sweep` (dimensions and engine
//! parameters), `env` (profiles and policy counts), `rails` and `values`
//! (names, durations, sizes, rates).

mod agents;
mod check;
mod env;
mod pattern;
mod rails;
pub(crate) mod schema;
mod sweep;
mod test;
mod values;

use agents::check_agents;
use check::check;
use env::{env_dims, policy_target, ProfileFiles};
pub use fabperf_planfile::{PlanError, PlanErrors};
use pattern::check_pattern;
use rails::rails_decl;
use schema::{RawAgent, RawPlan, RawPolicy, RawTest};
pub use sweep::validate_params;
use sweep::{expected_secs, outcast, sweep, Budget};
use test::check_tests;
use values::{
    has_port, join, join_host_port, rate_value, request_rate_value, size_value, toml_to_json,
};
pub use values::{is_name, parse_duration};

use fabperf_planfile::Diagnostics;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
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
/// How many suspect pairs of a node the mesh names are re-tested by
/// default: enough peers that the node rule (all of them, or a clear
/// majority of at least three) judges the sample, few enough that a node of
/// a thousand-node mesh, whose two thousand pairs can only be re-tested one
/// at a time, does not hold the run for an hour.
pub const DEFAULT_RETEST_SAMPLE: u32 = 8;
/// Most sweep points (every test's sweep × its profiles × its policy
/// counts) a plan may have. Counted before any is built: each costs a few
/// KiB while the plan is checked.
pub const MAX_POINTS: usize = 20_000;

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
    /// cell is `bidir`); one way, N−1 rounds, otherwise. `retest` rounds of
    /// re-tests of the suspect pairs; of a node the mesh names, at most
    /// `retest_sample` of its suspect pairs are re-tested (0: every one).
    Mesh {
        ordered: bool,
        retest: u32,
        retest_sample: u32,
    },
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

/// Read and validate a plan file. Relative files in it resolve against the
/// plan's directory.
pub fn load(path: &Path) -> Result<Plan, String> {
    let file = fabperf_planfile::read(path, MAX_PLAN_BYTES)?;
    parse(&file.text, &file.name, &file.base_dir).map_err(|e| e.to_string())
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
    fabperf_planfile::parse(text, file, |cx, raw: RawPlan| {
        check(cx, raw, text, base_dir)
    })
}
