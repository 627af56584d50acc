//! The rule a mesh's pairs are judged by: bandwidth below a fraction of
//! the reference pair's, latency above a multiple of it; which pair is the
//! reference ([`RuleKind`]); the metric a group is judged by.

use serde::Serialize;

/// ClusterKit's defaults (for either reference).
pub const DEFAULT_BW_FRACTION: f64 = 0.93;
pub const DEFAULT_LAT_FACTOR: f64 = 2.1;

/// Which pair a mesh's figures are judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// The median pair (of an even count, the better of the two middle
    /// ones): robust to lucky pairs and to faults on fewer than half of
    /// the pairs.
    #[default]
    Median,
    /// ClusterKit's: the best pair (highest bandwidth, lowest latency).
    Clusterkit,
}

impl RuleKind {
    pub const NAMES: &'static str = "median, clusterkit";

    pub fn parse(s: &str) -> Option<RuleKind> {
        match s {
            "median" => Some(RuleKind::Median),
            "clusterkit" => Some(RuleKind::Clusterkit),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuleKind::Median => "median",
            RuleKind::Clusterkit => "clusterkit",
        }
    }
}

/// How a mesh's pairs are judged: bandwidth below `bw_fraction` of the
/// reference pair's, latency above `lat_factor` times its.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    pub kind: RuleKind,
    pub bw_fraction: f64,
    pub lat_factor: f64,
}

impl Rule {
    pub fn new(kind: RuleKind, bw_fraction: f64, lat_factor: f64) -> Rule {
        Rule {
            kind,
            bw_fraction,
            lat_factor,
        }
    }
}

impl Default for Rule {
    fn default() -> Rule {
        Rule::new(RuleKind::Median, DEFAULT_BW_FRACTION, DEFAULT_LAT_FACTOR)
    }
}

/// What a mesh group is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Gbit/s, higher is better.
    BandwidthGbps,
    /// Median latency in µs, lower is better.
    LatencyP50Us,
}

impl Metric {
    pub fn unit(self) -> &'static str {
        match self {
            Metric::BandwidthGbps => "Gbit/s",
            Metric::LatencyP50Us => "us (p50)",
        }
    }
}

impl Rule {
    /// The figure a pair of a group judged by `metric` is held to, given
    /// the reference's.
    pub(super) fn threshold(&self, metric: Metric, reference: f64) -> f64 {
        match metric {
            Metric::BandwidthGbps => reference * self.bw_fraction,
            Metric::LatencyP50Us => reference * self.lat_factor,
        }
    }
}

/// A figure meets the rule: at or above the threshold for bandwidth, at
/// or below it for latency.
pub(super) fn passes(metric: Metric, v: f64, threshold: f64) -> bool {
    match metric {
        Metric::BandwidthGbps => v >= threshold,
        Metric::LatencyP50Us => v <= threshold,
    }
}

pub(super) fn metric_of(kind: &str) -> Metric {
    if kind.ends_with("-lat") {
        Metric::LatencyP50Us
    } else {
        Metric::BandwidthGbps
    }
}
