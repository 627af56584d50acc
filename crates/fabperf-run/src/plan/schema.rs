//! The keys a run plan may hold: the TOML as read, with spans, before any
//! rule is checked. Unknown keys are refused here (`deny_unknown_fields`).

use super::S;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlan {
    pub(crate) name: Option<S<String>>,
    pub(crate) description: Option<String>,
    pub(crate) baseline: Option<S<String>>,
    pub(crate) token_file: Option<S<String>>,
    pub(crate) timeout: Option<S<toml::Value>>,
    pub(crate) retries: Option<S<i64>>,
    pub(crate) retry_delay: Option<S<toml::Value>>,
    #[serde(default)]
    pub(crate) agents: Vec<S<RawAgent>>,
    #[serde(default)]
    pub(crate) tests: Vec<S<RawTest>>,
    /// How the `policies` dimension is applied.
    pub(crate) policy: Option<S<RawPolicy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub(crate) target: Option<S<String>>,
    pub(crate) command: Option<S<Vec<S<String>>>>,
    pub(crate) timeout: Option<S<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub(crate) name: Option<S<String>>,
    pub(crate) addr: Option<S<String>>,
    pub(crate) dns: Option<S<String>>,
    pub(crate) port: Option<S<i64>>,
    pub(crate) path: Option<S<String>>,
}

/// `["sender", "receiver"]` with spans.
pub(crate) type RawPair = S<Vec<S<String>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTest {
    pub(crate) name: Option<S<String>>,
    pub(crate) kind: S<String>,
    pub(crate) path: Option<S<String>>,
    pub(crate) paths: Option<S<Vec<S<String>>>>,
    pub(crate) pattern: Option<S<String>>,
    pub(crate) pairs: Option<S<Vec<RawPair>>>,
    pub(crate) ordered: Option<bool>,
    pub(crate) retest: Option<S<i64>>,
    pub(crate) retest_sample: Option<S<i64>>,
    pub(crate) receivers: Option<S<Vec<S<String>>>>,
    pub(crate) splits: Option<S<i64>>,
    pub(crate) seed: Option<S<i64>>,
    pub(crate) sizes: Option<S<Vec<S<toml::Value>>>>,
    pub(crate) streams: Option<S<Vec<S<i64>>>>,
    pub(crate) ops: Option<S<Vec<S<String>>>>,
    pub(crate) mtus: Option<S<Vec<S<i64>>>>,
    pub(crate) directions: Option<S<Vec<S<String>>>>,
    pub(crate) rates: Option<S<Vec<S<toml::Value>>>>,
    pub(crate) connections: Option<S<Vec<S<i64>>>>,
    pub(crate) duration: Option<S<toml::Value>>,
    pub(crate) repeats: Option<S<i64>>,
    pub(crate) params: Option<S<toml::Table>>,
    pub(crate) suspect_bw: Option<S<f64>>,
    pub(crate) suspect_lat: Option<S<f64>>,
    pub(crate) suspect_rule: Option<S<String>>,
    /// Tuning profile files (dimension `profile`).
    pub(crate) profiles: Option<S<Vec<S<String>>>>,
    /// Policy-rule counts (dimension `policies`).
    pub(crate) policies: Option<S<Vec<S<i64>>>>,
    pub(crate) policy_conntrack: Option<S<bool>>,
    /// `"rdma"` or a list of RDMA devices / interfaces, rail 0 first.
    pub(crate) rails: Option<S<toml::Value>>,
    pub(crate) cross_rails: Option<S<bool>>,
}
