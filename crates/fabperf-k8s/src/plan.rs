//! The TOML plan: what to deploy where. Parsing keeps source spans so every
//! problem is reported as `FILE:LINE:COL: message`.

use crate::cidr::Cidr;
use crate::crd::{CniPlugin, RdmaResourceConfig, RdmaSelectors, RdmaSharedConfig, WhereaboutsIpam};
use crate::detect::{plugin_link_type, DetectReport};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

pub const DEFAULT_CONTROL_PORT: u16 = 5301;
pub const DEFAULT_RDMA_RESOURCE: &str = "rdma/rdma_shared_device_a";
pub const DEFAULT_OPERATOR_REPOSITORY: &str = "nvcr.io/nvidia/mellanox";
pub const DEFAULT_OPERATOR_VERSION: &str = "network-operator-v26.1.0";
/// IPoIB datagram mode: IB MTU 4096 minus the 4-byte IPoIB header.
pub const IPOIB_DATAGRAM_MAX_MTU: u32 = 4092;
/// IPoIB connected mode maximum.
pub const IPOIB_CONNECTED_MAX_MTU: u32 = 65520;

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

/// All problems found in a plan (reported together).
#[derive(Debug, Clone)]
pub struct PlanErrors(pub Vec<PlanError>);

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "the plan has {n} problem{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for (i, e) in self.0.iter().enumerate() {
            if i + 1 < n {
                writeln!(f, "  {e}")?;
            } else {
                write!(f, "  {e}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for PlanErrors {}

/// The network paths fabperf can deploy an agent set for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathKind {
    Host,
    Pod,
    Service,
    Ipoib,
    Roce,
}

impl PathKind {
    pub const ALL: [PathKind; 5] = [
        PathKind::Host,
        PathKind::Pod,
        PathKind::Service,
        PathKind::Ipoib,
        PathKind::Roce,
    ];
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Host => "host",
            PathKind::Pod => "pod",
            PathKind::Service => "service",
            PathKind::Ipoib => "ipoib",
            PathKind::Roce => "roce",
        }
    }
    fn parse(s: &str) -> Option<Self> {
        PathKind::ALL.into_iter().find(|p| p.name() == s)
    }
    /// Paths that run their own DaemonSet (`service` fronts the `pod` agents).
    pub fn has_daemonset(self) -> bool {
        self != PathKind::Service
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CniKind {
    Antrea,
    Calico,
    Cilium,
    Flannel,
}

impl CniKind {
    pub const ALL: [CniKind; 4] = [
        CniKind::Antrea,
        CniKind::Calico,
        CniKind::Cilium,
        CniKind::Flannel,
    ];
    pub fn name(self) -> &'static str {
        match self {
            CniKind::Antrea => "antrea",
            CniKind::Calico => "calico",
            CniKind::Cilium => "cilium",
            CniKind::Flannel => "flannel",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    None,
    Vxlan,
    Geneve,
    Ipip,
    Wireguard,
}

impl Encap {
    pub const ALL: [Encap; 5] = [
        Encap::None,
        Encap::Vxlan,
        Encap::Geneve,
        Encap::Ipip,
        Encap::Wireguard,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Encap::None => "none",
            Encap::Vxlan => "vxlan",
            Encap::Geneve => "geneve",
            Encap::Ipip => "ipip",
            Encap::Wireguard => "wireguard",
        }
    }
    /// Bytes the encapsulation adds on an IPv4 underlay.
    pub fn overhead(self) -> u32 {
        match self {
            Encap::None => 0,
            Encap::Vxlan | Encap::Geneve => 50,
            Encap::Ipip => 20,
            Encap::Wireguard => 60,
        }
    }
    /// Whether the CNI can carry this encapsulation through its Helm values.
    pub fn supported_by(self, cni: CniKind) -> Result<(), &'static str> {
        match (cni, self) {
            (CniKind::Antrea, Encap::Ipip) => Err("Antrea tunnels are geneve, vxlan, gre or stt; no IP-in-IP"),
            (CniKind::Calico, Encap::Geneve) => Err("Calico encapsulates with IPIP or VXLAN only"),
            (CniKind::Calico, Encap::Wireguard) => Err(
                "Calico WireGuard is a FelixConfiguration setting (wireguardEnabled), not part of the operator's Helm values",
            ),
            (CniKind::Cilium, Encap::Ipip) => Err("Cilium tunnels are vxlan or geneve; no IP-in-IP"),
            (CniKind::Flannel, Encap::Geneve) => Err("flannel backends are vxlan, host-gw, wireguard and udp; no geneve"),
            (CniKind::Flannel, Encap::Ipip) => Err("flannel backends are vxlan, host-gw, wireguard and udp; no IP-in-IP"),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpoibPlan {
    pub nad_name: String,
    pub master: String,
    pub mtu: Option<u32>,
    pub ipam: WhereaboutsIpam,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RocePlan {
    pub nad_name: String,
    pub netdev: String,
    /// macvlan (mode, mtu) or host-device.
    pub plugin: CniPlugin,
    pub ipam: WhereaboutsIpam,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OperatorPlan {
    pub repository: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CniPlan {
    pub plugins: Vec<CniKind>,
    pub interface: String,
    pub underlay_mtu: u32,
    pub encapsulation: Encap,
    pub pod_cidr: Cidr,
}

impl CniPlan {
    /// MTU left for pod traffic after the encapsulation overhead.
    pub fn pod_mtu(&self) -> u32 {
        self.underlay_mtu - self.encapsulation.overhead()
    }
}

/// A validated plan, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// How the plan is named in generated headers (the path given on the command line).
    pub source_name: String,
    pub namespace: String,
    pub image: String,
    pub image_pull_policy: String,
    pub paths: BTreeSet<PathKind>,
    pub control_port: u16,
    pub token: String,
    pub rdma_resource: String,
    pub node_names: Vec<String>,
    pub node_selector: BTreeMap<String, String>,
    pub ipoib: Option<IpoibPlan>,
    pub roce: Option<RocePlan>,
    pub device_plugin: Option<RdmaSharedConfig>,
    pub operator: OperatorPlan,
    pub cni: Option<CniPlan>,
}

impl Plan {
    pub fn has(&self, p: PathKind) -> bool {
        self.paths.contains(&p)
    }
}

// ---------------------------------------------------------------- raw TOML

type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    namespace: Option<S<String>>,
    image: S<String>,
    image_pull_policy: Option<S<String>>,
    paths: S<Vec<S<String>>>,
    control_port: Option<S<i64>>,
    token: Option<S<String>>,
    token_file: Option<S<String>>,
    rdma_resource: Option<S<String>>,
    nodes: Option<S<RawNodes>>,
    detect: Option<S<BTreeMap<String, S<String>>>>,
    ipoib: Option<S<RawIpoib>>,
    roce: Option<S<RawRoce>>,
    device_plugin: Option<S<RawDevicePlugin>>,
    network_operator: Option<S<RawOperator>>,
    cni: Option<S<RawCni>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodes {
    names: Option<S<Vec<S<String>>>>,
    selector: Option<S<BTreeMap<String, S<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIpoib {
    nad_name: Option<S<String>>,
    master: Option<S<String>>,
    mode: Option<S<String>>,
    mtu: Option<S<i64>>,
    range: S<String>,
    range_start: Option<S<String>>,
    range_end: Option<S<String>>,
    exclude: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoce {
    nad_name: Option<S<String>>,
    netdev: Option<S<String>>,
    network_type: Option<S<String>>,
    macvlan_mode: Option<S<String>>,
    mtu: Option<S<i64>>,
    range: S<String>,
    range_start: Option<S<String>>,
    range_end: Option<S<String>>,
    exclude: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevicePlugin {
    rdma_hca_max: Option<S<i64>>,
    periodic_update_interval: Option<S<i64>>,
    vendors: Option<Vec<S<String>>>,
    device_ids: Option<Vec<S<String>>>,
    drivers: Option<Vec<S<String>>>,
    if_names: Option<Vec<S<String>>>,
    link_types: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    repository: Option<S<String>>,
    version: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCni {
    plugins: S<Vec<S<String>>>,
    interface: Option<S<String>>,
    underlay_mtu: Option<S<i64>>,
    encapsulation: S<String>,
    pod_cidr: S<String>,
}

// ---------------------------------------------------------------- checking

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<PlanError>,
}

impl<'a> Ctx<'a> {
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

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

fn is_ifname(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && !s.contains(['/', ' ', ':']) && s != "." && s != ".."
}

fn is_hex4(s: &str) -> bool {
    s.len() == 4
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// One node's detect report, with where it was named in the plan.
struct NodeDetect {
    node: String,
    report: DetectReport,
    span: Range<usize>,
}

/// Parse and validate a plan file. `display_name` is used in error locations
/// and generated headers (normally the path as the user typed it).
pub fn load_plan(path: &Path) -> anyhow::Result<Plan> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read plan {}: {e}", path.display()))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_plan(&text, &path.display().to_string(), &base).map_err(anyhow::Error::new)
}

/// Parse and validate plan text. Relative file names in the plan (token_file,
/// detect files) resolve against `base_dir`.
pub fn parse_plan(text: &str, file: &str, base_dir: &Path) -> Result<Plan, PlanErrors> {
    let mut cx = Ctx {
        file,
        text,
        errors: Vec::new(),
    };
    let raw: RawPlan = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let msg = e.message().trim().to_string();
            cx.at(span, msg);
            return Err(PlanErrors(cx.errors));
        }
    };
    let plan = check(&mut cx, raw, base_dir);
    if cx.errors.is_empty() {
        Ok(plan.expect("a plan without errors resolves"))
    } else {
        Err(PlanErrors(cx.errors))
    }
}

fn u32_in(cx: &mut Ctx, v: &S<i64>, what: &str, lo: i64, hi: i64) -> Option<u32> {
    let n = *v.get_ref();
    if n < lo || n > hi {
        cx.at(v.span(), format!("{what} {n} is out of range {lo}..={hi}"));
        None
    } else {
        Some(n as u32)
    }
}

fn check(cx: &mut Ctx, raw: RawPlan, base_dir: &Path) -> Option<Plan> {
    // namespace, image, pull policy
    let namespace = match &raw.namespace {
        Some(ns) if !is_dns_label(ns.get_ref()) => {
            cx.at(
                ns.span(),
                format!(
                    "namespace {:?} is not a DNS-1123 label (lowercase a-z, 0-9, '-', at most 63)",
                    ns.get_ref()
                ),
            );
            String::new()
        }
        Some(ns) => ns.get_ref().clone(),
        None => "fabperf".to_string(),
    };
    let image = raw.image.get_ref().trim().to_string();
    if image.is_empty() || image.contains(char::is_whitespace) {
        cx.at(
            raw.image.span(),
            "image must be a container image reference such as registry.example.com/fabperf:0.1.0",
        );
    }
    let image_pull_policy = match &raw.image_pull_policy {
        Some(p) if !["Always", "IfNotPresent", "Never"].contains(&p.get_ref().as_str()) => {
            cx.at(
                p.span(),
                format!(
                    "image_pull_policy {:?} must be Always, IfNotPresent or Never",
                    p.get_ref()
                ),
            );
            String::new()
        }
        Some(p) => p.get_ref().clone(),
        None => "IfNotPresent".into(),
    };

    // paths
    let mut paths = BTreeSet::new();
    let mut path_spans: BTreeMap<PathKind, Range<usize>> = BTreeMap::new();
    if raw.paths.get_ref().is_empty() {
        cx.at(
            raw.paths.span(),
            "paths is empty; list at least one of host, pod, service, ipoib, roce",
        );
    }
    for p in raw.paths.get_ref() {
        match PathKind::parse(p.get_ref()) {
            Some(k) => {
                if !paths.insert(k) {
                    cx.at(p.span(), format!("path {:?} is listed twice", p.get_ref()));
                }
                path_spans.insert(k, p.span());
            }
            None => cx.at(
                p.span(),
                format!(
                    "unknown path {:?}: expected one of host, pod, service, ipoib, roce",
                    p.get_ref()
                ),
            ),
        }
    }
    if let Some(sp) = path_spans.get(&PathKind::Service) {
        if !paths.contains(&PathKind::Pod) {
            cx.at(sp.clone(), "path \"service\" puts a ClusterIP Service in front of the \"pod\" agents; add \"pod\" to paths");
        }
    }

    let control_port = match &raw.control_port {
        Some(p) => u32_in(cx, p, "control_port", 1, 65535).unwrap_or(0) as u16,
        None => DEFAULT_CONTROL_PORT,
    };

    // token
    let token = match (&raw.token, &raw.token_file) {
        (Some(_), Some(f)) => {
            cx.at(f.span(), "give either token or token_file, not both");
            String::new()
        }
        (None, None) => {
            cx.at(0..0, "missing token: set token = \"...\" (16+ characters) or token_file = \"FILE\"; the agents reject clients without it");
            String::new()
        }
        (Some(t), None) => check_token(cx, t.get_ref(), t.span()),
        (None, Some(f)) => {
            let p = base_dir.join(f.get_ref());
            match std::fs::read_to_string(&p) {
                Ok(s) => check_token(cx, s.trim_end_matches(['\n', '\r']), f.span()),
                Err(e) => {
                    cx.at(
                        f.span(),
                        format!("cannot read token_file {}: {e}", p.display()),
                    );
                    String::new()
                }
            }
        }
    };

    let rdma_resource = match &raw.rdma_resource {
        Some(r) => {
            let v = r.get_ref();
            let ok = v.split_once('/').is_some_and(|(pre, name)| {
                is_dns_subdomain(pre)
                    && !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            if !ok {
                cx.at(r.span(), format!("rdma_resource {v:?} must be PREFIX/NAME, e.g. {DEFAULT_RDMA_RESOURCE} (NAME: letters, digits, '_')"));
            }
            v.clone()
        }
        None => DEFAULT_RDMA_RESOURCE.into(),
    };

    // nodes
    let mut node_names = Vec::new();
    let mut node_selector = BTreeMap::new();
    if let Some(n) = &raw.nodes {
        let n = n.get_ref();
        if let Some(names) = &n.names {
            for nm in names.get_ref() {
                if !is_dns_subdomain(nm.get_ref()) {
                    cx.at(
                        nm.span(),
                        format!(
                            "node name {:?} is not a valid Kubernetes node name",
                            nm.get_ref()
                        ),
                    );
                } else if node_names.contains(nm.get_ref()) {
                    cx.at(
                        nm.span(),
                        format!("node {:?} is listed twice", nm.get_ref()),
                    );
                } else {
                    node_names.push(nm.get_ref().clone());
                }
            }
            if names.get_ref().is_empty() {
                cx.at(
                    names.span(),
                    "nodes.names is empty; list node names or drop the key",
                );
            }
        }
        if let Some(sel) = &n.selector {
            for (k, v) in sel.get_ref() {
                if !is_label_key(k) || !is_label_value(v.get_ref()) {
                    cx.at(
                        v.span(),
                        format!(
                            "node selector {k:?} = {:?} is not a valid label key/value",
                            v.get_ref()
                        ),
                    );
                }
                node_selector.insert(k.clone(), v.get_ref().clone());
            }
        }
    }

    // detect files
    let mut detects: Vec<NodeDetect> = Vec::new();
    if let Some(d) = &raw.detect {
        for (node, file) in d.get_ref() {
            if !node_names.is_empty() && !node_names.contains(node) {
                cx.at(
                    file.span(),
                    format!(
                        "detect file for node {node:?}, which is not in nodes.names {node_names:?}"
                    ),
                );
                continue;
            }
            match DetectReport::load(&base_dir.join(file.get_ref())) {
                Ok(report) => detects.push(NodeDetect {
                    node: node.clone(),
                    report,
                    span: file.span(),
                }),
                Err(e) => cx.at(file.span(), format!("{e:#}")),
            }
        }
    }

    let ipoib = match (&raw.ipoib, path_spans.get(&PathKind::Ipoib)) {
        (Some(t), Some(_)) => check_ipoib(cx, t, &detects),
        (Some(t), None) => {
            cx.at(
                t.span(),
                "table [ipoib] is given but \"ipoib\" is not in paths; add it or drop the table",
            );
            None
        }
        (None, Some(sp)) => {
            cx.at(
                sp.clone(),
                "path \"ipoib\" needs an [ipoib] table with at least range = \"CIDR\"",
            );
            None
        }
        (None, None) => None,
    };
    let roce = match (&raw.roce, path_spans.get(&PathKind::Roce)) {
        (Some(t), Some(_)) => check_roce(cx, t, &detects),
        (Some(t), None) => {
            cx.at(
                t.span(),
                "table [roce] is given but \"roce\" is not in paths; add it or drop the table",
            );
            None
        }
        (None, Some(sp)) => {
            cx.at(
                sp.clone(),
                "path \"roce\" needs a [roce] table with at least range = \"CIDR\"",
            );
            None
        }
        (None, None) => None,
    };

    let device_plugin =
        if (paths.contains(&PathKind::Roce) && roce.is_some()) || raw.device_plugin.is_some() {
            check_device_plugin(
                cx,
                raw.device_plugin.as_ref(),
                &rdma_resource,
                roce.as_ref(),
                &detects,
            )
        } else {
            None
        };

    let mut operator = OperatorPlan {
        repository: DEFAULT_OPERATOR_REPOSITORY.into(),
        version: DEFAULT_OPERATOR_VERSION.into(),
    };
    if let Some(o) = &raw.network_operator {
        let o = o.get_ref();
        if let Some(r) = &o.repository {
            if r.get_ref().is_empty()
                || !r
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"./-:_".contains(&b))
            {
                cx.at(
                    r.span(),
                    format!(
                        "network_operator.repository {:?} is not an image repository",
                        r.get_ref()
                    ),
                );
            }
            operator.repository = r.get_ref().clone();
        }
        if let Some(v) = &o.version {
            if v.get_ref().is_empty()
                || !v
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                cx.at(
                    v.span(),
                    format!(
                        "network_operator.version {:?} may only hold letters, digits, '.' and '-'",
                        v.get_ref()
                    ),
                );
            }
            operator.version = v.get_ref().clone();
        }
    }

    let cni = raw
        .cni
        .as_ref()
        .and_then(|c| check_cni(cx, c, roce.as_ref(), &detects));

    // overlapping address ranges
    let mut ranges: Vec<(&str, Cidr, Range<usize>)> = Vec::new();
    if let (Some(t), Some(ip)) = (&raw.ipoib, &ipoib) {
        if let Ok(c) = ip.ipam.range.parse() {
            ranges.push(("[ipoib].range", c, t.get_ref().range.span()));
        }
    }
    if let (Some(t), Some(r)) = (&raw.roce, &roce) {
        if let Ok(c) = r.ipam.range.parse() {
            ranges.push(("[roce].range", c, t.get_ref().range.span()));
        }
    }
    if let (Some(t), Some(c)) = (&raw.cni, &cni) {
        ranges.push(("[cni].pod_cidr", c.pod_cidr, t.get_ref().pod_cidr.span()));
    }
    for i in 0..ranges.len() {
        for j in 0..i {
            if ranges[i].1.overlaps(&ranges[j].1) {
                let msg = format!(
                    "{} {} overlaps {} {}; each network needs its own addresses",
                    ranges[i].0, ranges[i].1, ranges[j].0, ranges[j].1
                );
                cx.at(ranges[i].2.clone(), msg);
            }
        }
    }

    if !cx.errors.is_empty() {
        return None;
    }
    Some(Plan {
        source_name: cx.file.to_string(),
        namespace,
        image,
        image_pull_policy,
        paths,
        control_port,
        token,
        rdma_resource,
        node_names,
        node_selector,
        ipoib,
        roce,
        device_plugin,
        operator,
        cni,
    })
}

fn check_token(cx: &mut Ctx, t: &str, span: Range<usize>) -> String {
    if t.chars().count() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        cx.at(span, "the token must be at least 16 characters without whitespace (e.g. `openssl rand -hex 24`)");
    }
    t.to_string()
}

fn check_ipam(
    cx: &mut Ctx,
    table: &str,
    range: &S<String>,
    start: &Option<S<String>>,
    end: &Option<S<String>>,
    exclude: &Option<Vec<S<String>>>,
) -> Option<WhereaboutsIpam> {
    let cidr: Cidr = match range.get_ref().parse() {
        Ok(c) => c,
        Err(e) => {
            cx.at(range.span(), format!("[{table}].range: {e}"));
            return None;
        }
    };
    if !cidr.is_network_address() {
        cx.at(
            range.span(),
            format!("[{table}].range {cidr} has host bits set; write the network address"),
        );
    }
    let host_bits = if cidr.is_v6() { 128 } else { 32 } - cidr.prefix as u32;
    if host_bits < 2 {
        cx.at(
            range.span(),
            format!("[{table}].range {cidr} is too small for two agents"),
        );
    }
    let mut ip = |v: &Option<S<String>>, key: &str| -> Option<u128> {
        let v = v.as_ref()?;
        match v.get_ref().parse::<std::net::IpAddr>() {
            Ok(a) if cidr.contains(a) => Some(match a {
                std::net::IpAddr::V4(x) => u32::from(x) as u128,
                std::net::IpAddr::V6(x) => u128::from(x),
            }),
            Ok(_) => {
                cx.at(
                    v.span(),
                    format!("[{table}].{key} {} is outside range {cidr}", v.get_ref()),
                );
                None
            }
            Err(_) => {
                cx.at(
                    v.span(),
                    format!("[{table}].{key} {:?} is not an IP address", v.get_ref()),
                );
                None
            }
        }
    };
    let s = ip(start, "range_start");
    let e = ip(end, "range_end");
    if let (Some(s), Some(e), Some(es)) = (s, e, end.as_ref()) {
        if s > e {
            cx.at(
                es.span(),
                format!("[{table}].range_end is below range_start"),
            );
        }
    }
    let mut excl = Vec::new();
    for x in exclude.iter().flatten() {
        match x.get_ref().parse::<Cidr>() {
            Ok(c) if cidr.overlaps(&c) => excl.push(c.to_string()),
            Ok(c) => cx.at(
                x.span(),
                format!("[{table}].exclude {c} is outside range {cidr}"),
            ),
            Err(er) => cx.at(x.span(), format!("[{table}].exclude: {er}")),
        }
    }
    Some(WhereaboutsIpam {
        kind: "whereabouts",
        range: cidr.to_string(),
        range_start: start.as_ref().map(|v| v.get_ref().clone()),
        range_end: end.as_ref().map(|v| v.get_ref().clone()),
        exclude: excl,
    })
}

fn check_nad_name(cx: &mut Ctx, v: &Option<S<String>>, default: &str) -> String {
    match v {
        Some(n) if !is_dns_subdomain(n.get_ref()) => {
            cx.at(
                n.span(),
                format!("nad_name {:?} is not a valid object name", n.get_ref()),
            );
            String::new()
        }
        Some(n) => n.get_ref().clone(),
        None => default.into(),
    }
}

/// Pick one interface name that every detect report agrees on.
fn pick_from_detect(
    cx: &mut Ctx,
    table_span: Range<usize>,
    what: &str,
    key: &str,
    detects: &[NodeDetect],
    candidates: impl Fn(&DetectReport) -> Vec<String>,
) -> Option<String> {
    if detects.is_empty() {
        cx.at(
            table_span,
            format!("missing interface: set {key} = \"NAME\" (the {what}) or list per-node detect files under [detect]"),
        );
        return None;
    }
    let mut chosen: Option<(String, String)> = None;
    for d in detects {
        let c = candidates(&d.report);
        match c.as_slice() {
            [] => {
                let note = d
                    .report
                    .rdma_note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                cx.at(
                    d.span.clone(),
                    format!(
                        "missing interface: node {} has no {what}{note}; fix the node or set {key}",
                        d.node
                    ),
                );
                return None;
            }
            [one] => match &chosen {
                Some((name, node)) if name != one => {
                    cx.at(d.span.clone(), format!(
                        "the {what} is {one} on {} but {name} on {node}; a NetworkAttachmentDefinition names one interface, so give them one name (udev rule) and set {key}",
                        d.node
                    ));
                    return None;
                }
                Some(_) => {}
                None => chosen = Some((one.clone(), d.node.clone())),
            },
            many => {
                cx.at(d.span.clone(), format!("node {} has several candidates for the {what} ({}); set {key} to one of them", d.node, many.join(", ")));
                return None;
            }
        }
    }
    chosen.map(|c| c.0)
}

fn check_ipoib(cx: &mut Ctx, t: &S<RawIpoib>, detects: &[NodeDetect]) -> Option<IpoibPlan> {
    let r = t.get_ref();
    let nad_name = check_nad_name(cx, &r.nad_name, "fabperf-ipoib");
    let mut mode = match &r.mode {
        Some(m) if m.get_ref() == "datagram" || m.get_ref() == "connected" => {
            Some(m.get_ref().clone())
        }
        Some(m) => {
            cx.at(
                m.span(),
                format!(
                    "[ipoib].mode {:?} must be \"datagram\" or \"connected\"",
                    m.get_ref()
                ),
            );
            None
        }
        None => None,
    };
    let master =
        match &r.master {
            Some(m) => {
                if !is_ifname(m.get_ref()) {
                    cx.at(
                        m.span(),
                        format!("[ipoib].master {:?} is not an interface name", m.get_ref()),
                    );
                }
                for d in detects {
                    match d.report.netdev(m.get_ref()) {
                        None => cx.at(
                            m.span(),
                            format!(
                        "missing interface: {} not found on node {} (its IPoIB interfaces: {})",
                        m.get_ref(), d.node,
                        names_or_none(d.report.ipoib_candidates().iter().map(|n| n.name.as_str()))
                    ),
                        ),
                        Some(nd) if nd.kind != "ipoib" => cx.at(
                            m.span(),
                            format!(
                                "{} on node {} is {} (kind {:?}), not an IPoIB interface",
                                m.get_ref(),
                                d.node,
                                m.get_ref(),
                                nd.kind
                            ),
                        ),
                        Some(_) => {}
                    }
                }
                m.get_ref().clone()
            }
            None => pick_from_detect(
                cx,
                t.span(),
                "IPoIB interface",
                "[ipoib].master",
                detects,
                |rep| {
                    rep.ipoib_candidates()
                        .iter()
                        .map(|n| n.name.clone())
                        .collect()
                },
            )?,
        };
    // The mode and MTU limits from what the nodes report.
    let mut master_mtu: Option<(u32, String)> = None;
    for d in detects {
        if let Some(nd) = d.report.netdev(&master) {
            if let Some(m) = &nd.ipoib_mode {
                match (&mode, &r.mode) {
                    (Some(plan_mode), Some(sp)) if plan_mode != m => cx.at(
                        sp.span(),
                        format!(
                            "[ipoib].mode is {plan_mode} but {master} on node {} runs in {m} mode",
                            d.node
                        ),
                    ),
                    (None, _) => mode = Some(m.clone()),
                    _ => {}
                }
            }
            if let Some(nm) = nd.mtu {
                if master_mtu.as_ref().is_none_or(|(v, _)| nm < *v) {
                    master_mtu = Some((nm, d.node.clone()));
                }
            }
        }
    }
    let mode = mode.unwrap_or_else(|| "datagram".into());
    let mtu = match &r.mtu {
        Some(m) => {
            let n = *m.get_ref();
            let limit = if mode == "connected" {
                IPOIB_CONNECTED_MAX_MTU
            } else {
                IPOIB_DATAGRAM_MAX_MTU
            };
            if n < 1280 {
                cx.at(m.span(), format!("[ipoib].mtu {n} is below 1280"));
                None
            } else if n > limit as i64 {
                let hint = if mode == "datagram" {
                    format!("above the IPoIB datagram limit {IPOIB_DATAGRAM_MAX_MTU} (4K IB MTU minus the 4-byte IPoIB header); ConnectX-4 and later run datagram only")
                } else {
                    format!("above the IPoIB connected-mode limit {IPOIB_CONNECTED_MAX_MTU}")
                };
                cx.at(m.span(), format!("[ipoib].mtu {n} is {hint}"));
                None
            } else {
                if let Some((mm, node)) = &master_mtu {
                    if n as u32 > *mm {
                        cx.at(m.span(), format!("[ipoib].mtu {n} exceeds the MTU {mm} of {master} on node {node}; ipoib-cni children cannot exceed their master"));
                    }
                }
                Some(n as u32)
            }
        }
        None => None,
    };
    let ipam = check_ipam(
        cx,
        "ipoib",
        &r.range,
        &r.range_start,
        &r.range_end,
        &r.exclude,
    )?;
    Some(IpoibPlan {
        nad_name,
        master,
        mtu,
        ipam,
    })
}

fn names_or_none<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn check_roce(cx: &mut Ctx, t: &S<RawRoce>, detects: &[NodeDetect]) -> Option<RocePlan> {
    let r = t.get_ref();
    let nad_name = check_nad_name(cx, &r.nad_name, "fabperf-roce");
    let netdev = match &r.netdev {
        Some(n) => {
            if !is_ifname(n.get_ref()) {
                cx.at(
                    n.span(),
                    format!("[roce].netdev {:?} is not an interface name", n.get_ref()),
                );
            }
            for d in detects {
                let rep = &d.report;
                match rep.netdev(n.get_ref()) {
                    None => cx.at(n.span(), format!(
                        "missing interface: {} not found on node {} (its RoCE netdevs: {})",
                        n.get_ref(), d.node, names_or_none(rep.roce_candidates().iter().map(|x| x.name.as_str()))
                    )),
                    Some(_) => match rep.rdma_behind(n.get_ref()) {
                        None => cx.at(n.span(), format!(
                            "{} on node {} has no RDMA device behind it; RoCE needs an RDMA-capable NIC (or rxe for tests)",
                            n.get_ref(), d.node
                        )),
                        Some((_, Some(p))) if p.link_layer != "Ethernet" => cx.at(n.span(), format!(
                            "{} on node {} sits on an {} port; RoCE needs an Ethernet link layer", n.get_ref(), d.node, p.link_layer
                        )),
                        Some(_) => {}
                    },
                }
            }
            n.get_ref().clone()
        }
        None => pick_from_detect(
            cx,
            t.span(),
            "RoCE netdev",
            "[roce].netdev",
            detects,
            |rep| {
                rep.roce_candidates()
                    .iter()
                    .map(|n| n.name.clone())
                    .collect()
            },
        )?,
    };
    let netdev_mtu = detects
        .iter()
        .filter_map(|d| {
            d.report
                .netdev(&netdev)
                .and_then(|n| n.mtu)
                .map(|m| (m, d.node.clone()))
        })
        .min_by_key(|x| x.0);
    let mtu = match &r.mtu {
        Some(m) => {
            let n = u32_in(cx, m, "[roce].mtu", 1280, 9216);
            if let (Some(n), Some((nm, node))) = (n, &netdev_mtu) {
                if n > *nm {
                    cx.at(
                        m.span(),
                        format!("[roce].mtu {n} exceeds the MTU {nm} of {netdev} on node {node}"),
                    );
                }
            }
            n
        }
        None => None,
    };
    let network_type = r
        .network_type
        .as_ref()
        .map(|s| s.get_ref().as_str())
        .unwrap_or("macvlan");
    let plugin = match network_type {
        "macvlan" => {
            let mode = match &r.macvlan_mode {
                Some(m)
                    if ["bridge", "private", "vepa", "passthru"]
                        .contains(&m.get_ref().as_str()) =>
                {
                    m.get_ref().clone()
                }
                Some(m) => {
                    cx.at(
                        m.span(),
                        format!(
                            "[roce].macvlan_mode {:?} must be bridge, private, vepa or passthru",
                            m.get_ref()
                        ),
                    );
                    String::new()
                }
                None => "bridge".into(),
            };
            CniPlugin::Macvlan {
                master: netdev.clone(),
                mode,
                mtu,
            }
        }
        "host-device" => {
            if let Some(m) = &r.macvlan_mode {
                cx.at(
                    m.span(),
                    "macvlan_mode applies to network_type = \"macvlan\" only",
                );
            }
            if let Some(m) = &r.mtu {
                cx.at(m.span(), "host-device moves the netdev into the pod with its own MTU; drop [roce].mtu or set it on the host");
            }
            CniPlugin::HostDevice {
                device: netdev.clone(),
            }
        }
        other => {
            let sp = r
                .network_type
                .as_ref()
                .map(|s| s.span())
                .unwrap_or(t.span());
            cx.at(
                sp,
                format!("[roce].network_type {other:?} must be \"macvlan\" or \"host-device\""),
            );
            return None;
        }
    };
    let ipam = check_ipam(
        cx,
        "roce",
        &r.range,
        &r.range_start,
        &r.range_end,
        &r.exclude,
    )?;
    Some(RocePlan {
        nad_name,
        netdev,
        plugin,
        ipam,
    })
}

fn str_list(
    cx: &mut Ctx,
    v: &Option<Vec<S<String>>>,
    key: &str,
    ok: impl Fn(&str) -> bool,
    expect: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for s in v.iter().flatten() {
        if !ok(s.get_ref()) {
            cx.at(
                s.span(),
                format!(
                    "[device_plugin].{key} value {:?}: expected {expect}",
                    s.get_ref()
                ),
            );
        } else if !out.contains(s.get_ref()) {
            out.push(s.get_ref().clone());
        }
    }
    out
}

/// Selectors for the RDMA devices behind the given netdevs, from detect reports.
pub fn selectors_from_detect(
    reports: &[(&str, &DetectReport)],
    if_names: &[String],
) -> Result<RdmaSelectors, String> {
    let mut sel = RdmaSelectors::default();
    let push = |v: &mut Vec<String>, s: &str| {
        if !v.iter().any(|x| x == s) {
            v.push(s.to_string());
        }
    };
    for (node, rep) in reports {
        if !rep.rdma_available {
            return Err(format!(
                "node {node} has no RDMA stack{}",
                rep.rdma_note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            ));
        }
        let devices: Vec<(&crate::detect::RdmaDevice, Option<&crate::detect::RdmaPort>)> =
            if if_names.is_empty() {
                rep.rdma_devices
                    .iter()
                    .flat_map(|d| {
                        if d.ports.is_empty() {
                            vec![(d, None)]
                        } else {
                            d.ports.iter().map(|p| (d, Some(p))).collect()
                        }
                    })
                    .collect()
            } else {
                let mut v = Vec::new();
                for i in if_names {
                    match rep.rdma_behind(i) {
                        Some(x) => v.push(x),
                        None => return Err(format!("node {node}: no RDMA device behind {i}")),
                    }
                }
                v
            };
        let mut found = false;
        for (dev, port) in devices {
            if dev.software {
                continue;
            }
            let Some(pci) = &dev.pci else { continue };
            found = true;
            push(&mut sel.vendors, &pci.vendor_id.to_ascii_lowercase());
            push(&mut sel.device_ids, &pci.device_id.to_ascii_lowercase());
            if let Some(drv) = &dev.driver {
                push(&mut sel.drivers, drv);
            }
            if let Some(lt) = port.and_then(|p| plugin_link_type(&p.link_layer)) {
                push(&mut sel.link_types, lt);
            }
        }
        if !found {
            return Err(format!(
                "node {node} has no PCI RDMA device{}; k8s-rdma-shared-dev-plugin only serves PCI devices (rxe/siw are not exposed)",
                if if_names.is_empty() { String::new() } else { format!(" behind {}", if_names.join(", ")) }
            ));
        }
    }
    for s in [
        &mut sel.vendors,
        &mut sel.device_ids,
        &mut sel.drivers,
        &mut sel.link_types,
    ] {
        s.sort();
    }
    sel.if_names = if_names.to_vec();
    Ok(sel)
}

fn check_device_plugin(
    cx: &mut Ctx,
    t: Option<&S<RawDevicePlugin>>,
    rdma_resource: &str,
    roce: Option<&RocePlan>,
    detects: &[NodeDetect],
) -> Option<RdmaSharedConfig> {
    let (prefix, name) = rdma_resource
        .split_once('/')
        .unwrap_or(("rdma", rdma_resource));
    let empty = RawDevicePlugin {
        rdma_hca_max: None,
        periodic_update_interval: None,
        vendors: None,
        device_ids: None,
        drivers: None,
        if_names: None,
        link_types: None,
    };
    let r = t.map(|t| t.get_ref()).unwrap_or(&empty);
    let rdma_hca_max = match &r.rdma_hca_max {
        Some(v) => u32_in(cx, v, "[device_plugin].rdma_hca_max", 1, 65535)?,
        None => 1000,
    };
    let periodic_update_interval = match &r.periodic_update_interval {
        Some(v) => u32_in(cx, v, "[device_plugin].periodic_update_interval", 0, 86400)?,
        None => 300,
    };
    let mut sel = RdmaSelectors {
        vendors: str_list(
            cx,
            &r.vendors,
            "vendors",
            is_hex4,
            "a 4-digit lowercase hex PCI vendor ID such as \"15b3\"",
        ),
        device_ids: str_list(
            cx,
            &r.device_ids,
            "device_ids",
            is_hex4,
            "a 4-digit lowercase hex PCI device ID such as \"101b\"",
        ),
        drivers: str_list(
            cx,
            &r.drivers,
            "drivers",
            |s| !s.is_empty(),
            "a driver name such as \"mlx5_core\"",
        ),
        if_names: str_list(cx, &r.if_names, "if_names", is_ifname, "an interface name"),
        link_types: str_list(
            cx,
            &r.link_types,
            "link_types",
            |s| s == "ether" || s == "infiniband",
            "\"ether\" or \"infiniband\"",
        ),
    };
    if sel.is_empty() {
        let if_names: Vec<String> = roce.map(|r| vec![r.netdev.clone()]).unwrap_or_default();
        if !detects.is_empty() {
            let reps: Vec<(&str, &DetectReport)> = detects
                .iter()
                .map(|d| (d.node.as_str(), &d.report))
                .collect();
            match selectors_from_detect(&reps, &if_names) {
                Ok(s) => sel = s,
                Err(e) => {
                    let sp = detects[0].span.clone();
                    cx.at(sp, format!("device plugin selectors: {e}; or set [device_plugin] vendors/device_ids/if_names by hand"));
                    return None;
                }
            }
        } else if let Some(r) = roce {
            sel.vendors = vec!["15b3".into()];
            sel.if_names = vec![r.netdev.clone()];
            sel.link_types = vec!["ether".into()];
        } else {
            let sp = t.map(|t| t.span()).unwrap_or(0..0);
            cx.at(sp, "the device plugin needs selectors: set [device_plugin] vendors/device_ids/if_names or list detect files");
            return None;
        }
    }
    Some(RdmaSharedConfig {
        periodic_update_interval,
        config_list: vec![RdmaResourceConfig {
            resource_name: name.to_string(),
            resource_prefix: prefix.to_string(),
            rdma_hca_max,
            selectors: sel,
        }],
    })
}

fn check_cni(
    cx: &mut Ctx,
    t: &S<RawCni>,
    roce: Option<&RocePlan>,
    detects: &[NodeDetect],
) -> Option<CniPlan> {
    let r = t.get_ref();
    let encapsulation = match Encap::ALL
        .into_iter()
        .find(|e| e.name() == r.encapsulation.get_ref())
    {
        Some(e) => e,
        None => {
            cx.at(
                r.encapsulation.span(),
                format!(
                    "[cni].encapsulation {:?} must be one of none, vxlan, geneve, ipip, wireguard",
                    r.encapsulation.get_ref()
                ),
            );
            return None;
        }
    };
    let mut plugins = Vec::new();
    for p in r.plugins.get_ref() {
        match CniKind::ALL.into_iter().find(|k| k.name() == p.get_ref()) {
            Some(k) => {
                if let Err(why) = encapsulation.supported_by(k) {
                    cx.at(
                        p.span(),
                        format!(
                            "{} cannot use encapsulation {}: {why}",
                            k.name(),
                            encapsulation.name()
                        ),
                    );
                }
                if !plugins.contains(&k) {
                    plugins.push(k);
                }
            }
            None => cx.at(
                p.span(),
                format!(
                    "unknown CNI {:?}: expected antrea, calico, cilium or flannel",
                    p.get_ref()
                ),
            ),
        }
    }
    if r.plugins.get_ref().is_empty() {
        cx.at(
            r.plugins.span(),
            "[cni].plugins is empty; list antrea, calico, cilium and/or flannel",
        );
    }
    plugins.sort();
    let interface = match (&r.interface, roce) {
        (Some(i), _) => {
            for d in detects {
                if d.report.netdev(i.get_ref()).is_none() {
                    cx.at(
                        i.span(),
                        format!(
                            "missing interface: {} not found on node {}",
                            i.get_ref(),
                            d.node
                        ),
                    );
                }
            }
            i.get_ref().clone()
        }
        (None, Some(r)) => r.netdev.clone(),
        (None, None) => {
            cx.at(t.span(), "missing interface: set [cni].interface to the fast node interface the CNI should use");
            return None;
        }
    };
    let underlay_mtu = match &r.underlay_mtu {
        Some(m) => u32_in(cx, m, "[cni].underlay_mtu", 1280, 9216)?,
        None => {
            let mtus: BTreeSet<u32> = detects
                .iter()
                .filter_map(|d| d.report.netdev(&interface).and_then(|n| n.mtu))
                .collect();
            match mtus.len() {
                1 => *mtus.iter().next().unwrap(),
                0 => {
                    cx.at(t.span(), format!("set [cni].underlay_mtu (the MTU of {interface}); no detect file reports it"));
                    return None;
                }
                _ => {
                    cx.at(t.span(), format!("{interface} has different MTUs across nodes ({mtus:?}); make them equal or set [cni].underlay_mtu"));
                    return None;
                }
            }
        }
    };
    if let Some(m) = &r.underlay_mtu {
        for d in detects {
            if let Some(nd_mtu) = d.report.netdev(&interface).and_then(|n| n.mtu) {
                if nd_mtu != underlay_mtu {
                    cx.at(m.span(), format!("[cni].underlay_mtu {underlay_mtu} differs from the MTU {nd_mtu} of {interface} on node {}", d.node));
                }
            }
        }
    }
    let pod_cidr: Cidr = match r.pod_cidr.get_ref().parse() {
        Ok(c) => c,
        Err(e) => {
            cx.at(r.pod_cidr.span(), format!("[cni].pod_cidr: {e}"));
            return None;
        }
    };
    if pod_cidr.is_v6() {
        cx.at(
            r.pod_cidr.span(),
            "[cni].pod_cidr must be IPv4 (the overheads used for the MTU are the IPv4 ones)",
        );
    }
    Some(CniPlan {
        plugins,
        interface,
        underlay_mtu,
        encapsulation,
        pod_cidr,
    })
}
