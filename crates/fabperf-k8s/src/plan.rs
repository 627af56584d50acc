//! The TOML plan: what to deploy where. Parsing keeps source spans so every
//! problem is reported as `FILE:LINE:COL: message`.

use crate::cidr;
use crate::crd::{CniPlugin, RdmaResourceConfig, RdmaSelectors, RdmaSharedConfig, WhereaboutsIpam};
use crate::detect::{plugin_link_type, DetectReport};
use ipnet::IpNet;
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
    pub(crate) fn parse(s: &str) -> Option<Self> {
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
    /// Bytes the encapsulation adds on an IPv4 underlay, as the CNI itself
    /// reserves them. WireGuard: Cilium (pkg/mtu `WireguardOverhead = 80`)
    /// and flannel (pkg/backend/wireguard, overhead 80) reserve room for an
    /// IPv6 outer header; Antrea (pkg/agent/config `WireGuardOverhead = 60`,
    /// +20 for IPv6) and the wire (20 IP + 8 UDP + 32 WireGuard) use 60.
    pub fn overhead_for(self, cni: CniKind) -> u32 {
        match self {
            Encap::None => 0,
            Encap::Vxlan | Encap::Geneve => 50,
            Encap::Ipip => 20,
            Encap::Wireguard => match cni {
                CniKind::Cilium | CniKind::Flannel => 80,
                CniKind::Antrea | CniKind::Calico => 60,
            },
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

/// How a secondary network reaches the agent pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// IPoIB child (ipoib-cni) or macvlan/host-device over a netdev whose
    /// RDMA device the shared device plugin hands out (RDMA netns `shared`).
    Shared,
    /// An SR-IOV VF with its own RDMA device (sriov-network-operator; RDMA
    /// netns `exclusive`).
    Sriov,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpoibPlan {
    pub nad_name: String,
    pub master: String,
    pub mtu: Option<u32>,
    /// The address range (rendered as whereabouts or nv-ipam, see [`IpamKind`]).
    pub ipam: WhereaboutsIpam,
    pub attach: Attach,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RocePlan {
    pub nad_name: String,
    pub netdev: String,
    /// macvlan (mode, mtu) or host-device.
    pub plugin: CniPlugin,
    /// The address range (rendered as whereabouts or nv-ipam, see [`IpamKind`]).
    pub ipam: WhereaboutsIpam,
    pub attach: Attach,
}

/// Which IPAM plugin the secondary networks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpamKind {
    /// NVIDIA nv-ipam (network-operator `spec.nvIpam` + `IPPool`s): what
    /// network-operator v25.10 and later install.
    NvIpam,
    /// whereabouts, installed on its own (network-operator dropped
    /// `secondaryNetwork.ipamPlugin` in v25.10).
    Whereabouts,
}

impl IpamKind {
    pub fn name(self) -> &'static str {
        match self {
            IpamKind::NvIpam => "nv-ipam",
            IpamKind::Whereabouts => "whereabouts",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct OperatorPlan {
    pub repository: String,
    pub version: String,
    /// Namespace the operator (and nv-ipam, sriov-network-operator) runs in.
    pub namespace: String,
    /// nv-ipam addresses handed to each node at a time.
    pub per_node_block_size: u32,
}

impl OperatorPlan {
    /// The release the component version names: `network-operator-v26.1.0` -> `v26.1.0`.
    pub fn release(&self) -> &str {
        self.version
            .strip_prefix("network-operator-")
            .unwrap_or(&self.version)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CniPlan {
    pub plugins: Vec<CniKind>,
    pub interface: String,
    pub underlay_mtu: u32,
    pub encapsulation: Encap,
    pub pod_cidr: IpNet,
}

impl CniPlan {
    /// MTU left for pod traffic with this CNI after its encapsulation overhead.
    pub fn pod_mtu(&self, cni: CniKind) -> u32 {
        self.underlay_mtu
            .saturating_sub(self.encapsulation.overhead_for(cni))
    }
}

/// A node's address as Kubernetes knows it (detect's `node_ip`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeIp {
    pub address: String,
    pub interface: String,
}

/// One toleration the agent pods carry.
#[derive(Debug, Clone, PartialEq)]
pub struct TolerationPlan {
    pub key: Option<String>,
    pub operator: String,
    pub value: Option<String>,
    pub effect: Option<String>,
}

/// Whole CPUs and memory per agent container (requests = limits: Guaranteed QoS).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourcesPlan {
    pub cpu: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
}

/// The host path bound to a fabric interface: the agent binds each node's
/// address on `interface` and the Service advertises those addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPlan {
    pub interface: String,
    /// node name -> IPv4 address on `interface`.
    pub addresses: BTreeMap<String, String>,
}

/// SR-IOV settings (sriov-network-operator, as shipped by network-operator).
#[derive(Debug, Clone, PartialEq)]
pub struct SriovPlan {
    pub num_vfs: u32,
    /// Resource names registered by the SR-IOV device plugin (prefix `nvidia.com`).
    pub roce_resource: String,
    pub ib_resource: String,
    /// ib-kubernetes (InfiniBand VFs): UFM Secret and the GUID pool.
    pub ib_kubernetes: Option<IbKubernetesPlan>,
    /// For the SriovNetworkNodePolicy nicSelector (from detect: vendor, device ID).
    pub roce_pci: Option<(String, String)>,
    pub ib_pci: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IbKubernetesPlan {
    pub ufm_secret: String,
    pub guid_pool_start: String,
    pub guid_pool_end: String,
}

/// NFD's label for nodes with an NVIDIA (Mellanox) NIC, set by the
/// NodeFeatureRule network-operator v26.1.0 installs
/// (deployment/network-operator/templates/nodefeaturerules.yaml).
pub const NFD_NIC_LABEL: &str = "feature.node.kubernetes.io/pci-15b3.present";
/// Default toleration: GPU nodes are commonly tainted `nvidia.com/gpu:NoSchedule`.
pub const GPU_TAINT_KEY: &str = "nvidia.com/gpu";
pub const DEFAULT_AGENT_CPU: u32 = 2;
/// TCP throughput one agent CPU drives (Gbit/s): the CPUs per agent are
/// sized from the detected port rate with it.
pub const GBPS_PER_AGENT_CPU: f64 = 25.0;
/// Most CPUs render gives an agent on its own (a plan may ask for more).
pub const MAX_AUTO_AGENT_CPU: u32 = 16;
/// The image the example plans name: a placeholder, never published.
pub const EXAMPLE_IMAGE: &str = "ghcr.io/fabperf/fabperf:0.1.0";
pub const DEFAULT_AGENT_MEMORY_MIB: u64 = 4096;
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "nvidia-network-operator";
pub const DEFAULT_SRIOV_PREFIX: &str = "nvidia.com";
pub const DEFAULT_IB_RESOURCE: &str = "rdma/rdma_shared_device_ib";

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
    /// The agent token from token_file; `None`: the Secret is created out of
    /// band (`kubectl create secret`, printed by render).
    pub token: Option<String>,
    pub rdma_resource: String,
    pub ipam: IpamKind,
    pub node_names: Vec<String>,
    /// The nodes with a detect file (sorted).
    pub detected_nodes: Vec<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<TolerationPlan>,
    pub resources: ResourcesPlan,
    /// Node IPs (the link the kubelet advertises) from the detect files.
    pub node_ips: BTreeMap<String, NodeIp>,
    pub host: Option<HostPlan>,
    pub ipoib: Option<IpoibPlan>,
    pub roce: Option<RocePlan>,
    pub sriov: Option<SriovPlan>,
    pub device_plugin: Option<RdmaSharedConfig>,
    pub operator: OperatorPlan,
    pub cni: Option<CniPlan>,
    /// `[policy_scale]`: NetworkPolicies selecting the agents, RBAC for the runner.
    pub policy_scale: Option<crate::policy::PolicyScale>,
    /// Things the plan allows but the user should know (printed by render
    /// and written into the headers they concern).
    pub warnings: Vec<String>,
    /// The in-cluster runner (`[runner]`; `None` with `enabled = false`).
    pub runner: Option<crate::runner::RunnerPlan>,
    /// `[gpu]`: GPUs (and per-rail RDMA resources) for the RDMA agents.
    pub gpu: Option<crate::gpu::GpuPlan>,
}

impl Plan {
    pub fn has(&self, p: PathKind) -> bool {
        self.paths.contains(&p)
    }
    /// The nodes the agents are pinned to: the plan's node names, else the
    /// nodes with a detect file; empty when they are chosen by label only.
    pub fn agent_nodes(&self) -> &[String] {
        if self.node_names.is_empty() {
            &self.detected_nodes
        } else {
            &self.node_names
        }
    }
    /// True when a path attaches a secondary network through Multus.
    pub fn has_multus_path(&self) -> bool {
        self.has(PathKind::Ipoib) || self.has(PathKind::Roce)
    }
    pub fn uses_sriov(&self) -> bool {
        self.roce
            .as_ref()
            .is_some_and(|r| r.attach == Attach::Sriov)
            || self
                .ipoib
                .as_ref()
                .is_some_and(|i| i.attach == Attach::Sriov)
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
    ipam: Option<S<String>>,
    nodes: Option<S<RawNodes>>,
    resources: Option<S<RawResources>>,
    detect: Option<S<BTreeMap<String, S<String>>>>,
    host: Option<S<RawHost>>,
    ipoib: Option<S<RawIpoib>>,
    roce: Option<S<RawRoce>>,
    sriov: Option<S<RawSriov>>,
    device_plugin: Option<S<RawDevicePlugin>>,
    network_operator: Option<S<RawOperator>>,
    cni: Option<S<RawCni>>,
    runner: Option<S<crate::runner::RawRunner>>,
    policy_scale: Option<S<crate::policy::RawPolicyScale>>,
    gpu: Option<S<crate::gpu::RawGpu>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodes {
    names: Option<S<Vec<S<String>>>>,
    selector: Option<S<BTreeMap<String, S<String>>>>,
    tolerations: Option<S<Vec<S<RawToleration>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToleration {
    key: Option<S<String>>,
    operator: Option<S<String>>,
    value: Option<S<String>>,
    effect: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    cpu: Option<S<i64>>,
    memory: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    interface: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSriov {
    num_vfs: Option<S<i64>>,
    roce_resource: Option<S<String>>,
    ib_resource: Option<S<String>>,
    ufm_secret: Option<S<String>>,
    guid_pool_start: Option<S<String>>,
    guid_pool_end: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIpoib {
    nad_name: Option<S<String>>,
    attach: Option<S<String>>,
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
    attach: Option<S<String>>,
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
    ib_resource: Option<S<String>>,
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
    namespace: Option<S<String>>,
    per_node_block_size: Option<S<i64>>,
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

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

pub(crate) fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

pub(crate) fn is_label_key(s: &str) -> bool {
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
    node_ip: Option<NodeIp>,
    span: Range<usize>,
}

/// detect's `node_ip` object (`fabperf.detect/1`): the address the kubelet
/// advertises and the interface that carries it. Read from the same text as
/// the report, since the renderer's detect model has no such field.
#[derive(Deserialize)]
struct NodeIpDoc {
    #[serde(default)]
    node_ip: Option<NodeIpField>,
}

#[derive(Deserialize)]
struct NodeIpField {
    address: String,
    interface: String,
}

/// Read a detect file (size-capped, regular files only) and its node IP.
fn load_detect(path: &Path) -> anyhow::Result<(DetectReport, Option<NodeIp>)> {
    let text = crate::files::read_text_capped(path, crate::files::MAX_INPUT_BYTES, "detect file")?;
    let origin = path.display().to_string();
    let report = DetectReport::parse(&text, &origin)?;
    let doc: NodeIpDoc =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{origin}: node_ip: {e}"))?;
    let node_ip = match doc.node_ip {
        None => None,
        Some(n) => {
            if n.address.parse::<std::net::IpAddr>().is_err() || !is_ifname(&n.interface) {
                anyhow::bail!(
                    "{origin}: node_ip {:?} on {:?} is not an address on an interface name",
                    n.address,
                    n.interface
                );
            }
            Some(NodeIp {
                address: n.address,
                interface: n.interface,
            })
        }
    };
    Ok((report, node_ip))
}

/// Parse and validate a plan file. `display_name` is used in error locations
/// and generated headers (normally the path as the user typed it).
pub fn load_plan(path: &Path) -> anyhow::Result<Plan> {
    let text = crate::files::read_text_capped(path, crate::files::MAX_INPUT_BYTES, "plan")?;
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

    // token: never inline (a plan is a committed file); from token_file or
    // out of band.
    if let Some(t) = &raw.token {
        cx.at(
            t.span(),
            "an inline token ends up in version control with the plan: put it in a file outside the repository (`openssl rand -hex 24 > token; chmod 600 token`) and set token_file = \"FILE\" or pass --token-file, or leave both out and create the Secret with the `kubectl create secret` command render prints",
        );
    }
    let token = match &raw.token_file {
        None => None,
        Some(f) => {
            let p = base_dir.join(f.get_ref());
            match read_token_file(&p) {
                Ok(t) => Some(t),
                Err(e) => {
                    cx.at(f.span(), format!("token_file: {e}"));
                    None
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
    let mut tolerations = vec![TolerationPlan {
        key: Some(GPU_TAINT_KEY.into()),
        operator: "Exists".into(),
        value: None,
        effect: Some("NoSchedule".into()),
    }];
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
        if let Some(t) = &n.tolerations {
            tolerations = check_tolerations(cx, t.get_ref());
        }
    }

    let resources = check_resources(cx, raw.resources.as_ref());

    let ipam = match &raw.ipam {
        None => IpamKind::NvIpam,
        Some(v) => match v.get_ref().as_str() {
            "nv-ipam" => IpamKind::NvIpam,
            "whereabouts" => IpamKind::Whereabouts,
            other => {
                cx.at(
                    v.span(),
                    format!("ipam {other:?} must be \"nv-ipam\" (network-operator's IPAM) or \"whereabouts\" (installed on its own)"),
                );
                IpamKind::NvIpam
            }
        },
    };

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
            if !is_dns_subdomain(node) {
                cx.at(
                    file.span(),
                    format!("[detect] key {node:?} is not a valid Kubernetes node name"),
                );
                continue;
            }
            match load_detect(&base_dir.join(file.get_ref())) {
                Ok((report, node_ip)) => detects.push(NodeDetect {
                    node: node.clone(),
                    report,
                    node_ip,
                    span: file.span(),
                }),
                Err(e) => cx.at(file.span(), format!("{e:#}")),
            }
        }
    }
    let detected_nodes: Vec<String> = {
        let mut v: Vec<String> = detects.iter().map(|d| d.node.clone()).collect();
        v.sort();
        v
    };
    let node_ips: BTreeMap<String, NodeIp> = detects
        .iter()
        .filter_map(|d| d.node_ip.clone().map(|ip| (d.node.clone(), ip)))
        .collect();

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

    // Shared and exclusive RDMA netns modes cannot coexist on one node: the
    // shared device plugin needs `rdma system` netns shared, SR-IOV RDMA VFs
    // in pods need exclusive. Every path of a plan runs on the same nodes.
    let roce_shared = roce.as_ref().is_some_and(|r| r.attach == Attach::Shared);
    let roce_sriov = roce.as_ref().is_some_and(|r| r.attach == Attach::Sriov);
    let ipoib_sriov = ipoib.as_ref().is_some_and(|i| i.attach == Attach::Sriov);
    let any_sriov = roce_sriov || ipoib_sriov;
    if any_sriov && (roce_shared || raw.device_plugin.is_some()) {
        let sp = raw
            .device_plugin
            .as_ref()
            .map(|d| d.span())
            .or_else(|| raw.roce.as_ref().map(|r| r.span()))
            .unwrap_or(0..0);
        cx.at(sp, "the plan mixes shared RDMA (the shared device plugin: [device_plugin] or [roce] attach = \"shared\") with SR-IOV (attach = \"sriov\", RDMA netns exclusive) on the same nodes; a node's RDMA subsystem is either shared or exclusive (`rdma system set netns ...`): choose one for every path");
    }
    if any_sriov && !node_names.is_empty() {
        let sp = raw.nodes.as_ref().map(|n| n.span()).unwrap_or(0..0);
        cx.at(sp, "SR-IOV node policies select nodes by label: drop [nodes].names and use [nodes].selector (the default selects the NFD label feature.node.kubernetes.io/pci-15b3.present=true)");
    }
    // Default node selection: the nodes with a detect file (pinned by name),
    // else the hardware label. SR-IOV node policies select by label only.
    if node_names.is_empty() && node_selector.is_empty() && (detected_nodes.is_empty() || any_sriov)
    {
        node_selector.insert(NFD_NIC_LABEL.into(), "true".into());
    }
    if let (Some(t), false) = (&raw.sriov, any_sriov) {
        cx.at(t.span(), "table [sriov] is given but no path uses attach = \"sriov\"; set it in [roce] or [ipoib], or drop the table");
    }

    let device_plugin = if (roce_shared && paths.contains(&PathKind::Roce))
        || (raw.device_plugin.is_some() && !any_sriov)
    {
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
        namespace: DEFAULT_OPERATOR_NAMESPACE.into(),
        per_node_block_size: 16,
    };
    if let Some(o) = &raw.network_operator {
        let o = o.get_ref();
        if let Some(r) = &o.repository {
            if r.get_ref().is_empty()
                || !r
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"./-:_".contains(&b))
            {
                cx.at(
                    r.span(),
                    format!(
                        "network_operator.repository {:?} is not an image repository (lowercase letters, digits, '.', '/', '-', '_', ':')",
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
        if let Some(n) = &o.namespace {
            if !is_dns_label(n.get_ref()) {
                cx.at(
                    n.span(),
                    format!(
                        "network_operator.namespace {:?} is not a DNS-1123 label",
                        n.get_ref()
                    ),
                );
            }
            operator.namespace = n.get_ref().clone();
        }
        if let Some(b) = &o.per_node_block_size {
            if let Some(n) = u32_in(cx, b, "network_operator.per_node_block_size", 2, 65536) {
                operator.per_node_block_size = n;
            }
        }
    }

    let sriov = if any_sriov {
        check_sriov(
            cx,
            raw.sriov.as_ref(),
            roce.as_ref(),
            ipoib.as_ref(),
            &detects,
        )
    } else {
        None
    };

    let cni = raw
        .cni
        .as_ref()
        .and_then(|c| check_cni(cx, c, roce.as_ref(), &detects));

    // RoCE host-device moves the netdev into the pod: never the one that
    // carries the CNI or the node IP.
    if let (Some(r), Some(t)) = (&roce, &raw.roce) {
        if matches!(r.plugin, CniPlugin::HostDevice { .. }) {
            let sp = t
                .get_ref()
                .netdev
                .as_ref()
                .map(|n| n.span())
                .unwrap_or(t.span());
            if let Some(c) = &cni {
                if c.interface == r.netdev {
                    cx.at(sp.clone(), format!("[roce] network_type = \"host-device\" would move {} into the agent pod, but {} carries the CNI ([cni].interface): the node's pod network would go with it; use macvlan or a second NIC", r.netdev, r.netdev));
                }
            }
            for d in &detects {
                if d.node_ip
                    .as_ref()
                    .is_some_and(|ip| ip.interface == r.netdev)
                {
                    cx.at(sp.clone(), format!("[roce] network_type = \"host-device\" would move {} into the agent pod, but it carries node {}'s node IP: the node would drop off the cluster; use macvlan or a second NIC", r.netdev, d.node));
                }
            }
        }
    }

    let mut warnings = Vec::new();
    if node_names.is_empty() && detected_nodes.is_empty() {
        warnings.push(format!(
            "nodes: no [nodes] names and no detect files, so the agents run on every node with {} (the label{} the plan selects): every such node joins the runner's mesh, and one without a working NIC fails its cells; list the nodes' detect files under [detect] to pin the agents to them",
            node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
            if node_selector.len() == 1 { "" } else { "s" }
        ));
    }
    if let Some(sp) = path_spans.get(&PathKind::Service) {
        if node_names.is_empty() && detected_nodes.is_empty() {
            cx.at(sp.clone(), "path \"service\" renders one single-endpoint Service per node (a Service with several endpoints sends a test's data connections to other agents than its control connection): name the nodes, in [nodes] names or by their detect files under [detect]");
        }
    }
    if let Some(c) = &cni {
        check_cilium_link(
            cx,
            raw.cni.as_ref().map(|t| t.span()).unwrap_or(0..0),
            c,
            &detects,
            &mut warnings,
        );
    }

    let host = if paths.contains(&PathKind::Host) {
        check_host(
            cx,
            raw.host.as_ref(),
            cni.as_ref(),
            &detects,
            &node_names,
            &mut warnings,
        )
    } else {
        if let Some(h) = &raw.host {
            cx.at(
                h.span(),
                "table [host] is given but \"host\" is not in paths; add it or drop the table",
            );
        }
        None
    };

    // overlapping address ranges
    let mut ranges: Vec<(&str, IpNet, Range<usize>)> = Vec::new();
    if let (Some(t), Some(ip)) = (&raw.ipoib, &ipoib) {
        if let Ok(c) = cidr::parse(&ip.ipam.range) {
            ranges.push(("[ipoib].range", c, t.get_ref().range.span()));
        }
    }
    if let (Some(t), Some(r)) = (&raw.roce, &roce) {
        if let Ok(c) = cidr::parse(&r.ipam.range) {
            ranges.push(("[roce].range", c, t.get_ref().range.span()));
        }
    }
    if let (Some(t), Some(c)) = (&raw.cni, &cni) {
        ranges.push(("[cni].pod_cidr", c.pod_cidr, t.get_ref().pod_cidr.span()));
    }
    for i in 0..ranges.len() {
        for j in 0..i {
            if cidr::overlaps(&ranges[i].1, &ranges[j].1) {
                let msg = format!(
                    "{} {} overlaps {} {}; each network needs its own addresses",
                    ranges[i].0, ranges[i].1, ranges[j].0, ranges[j].1
                );
                cx.at(ranges[i].2.clone(), msg);
            }
        }
    }
    // nv-ipam hands out per-node blocks: the range must hold a block for each node.
    if ipam == IpamKind::NvIpam {
        let mut secondary: Vec<(&str, &WhereaboutsIpam, Range<usize>)> = Vec::new();
        if let (Some(t), Some(ip)) = (&raw.ipoib, &ipoib) {
            secondary.push(("[ipoib].range", &ip.ipam, t.get_ref().range.span()));
        }
        if let (Some(t), Some(r)) = (&raw.roce, &roce) {
            secondary.push(("[roce].range", &r.ipam, t.get_ref().range.span()));
        }
        let nodes = if node_names.is_empty() {
            detected_nodes.len()
        } else {
            node_names.len()
        };
        for (name, range, sp) in secondary {
            let Ok(IpNet::V4(c)) = cidr::parse(&range.range) else {
                continue;
            };
            let exclusions = crate::render::nv_ipam_exclusions(range);
            let size = operator.per_node_block_size;
            let blocks = nv_ipam_blocks(c, size, &exclusions);
            if blocks == 0 {
                cx.at(sp, format!("{name} {c} cannot hold one nv-ipam block of {size} addresses (network_operator.per_node_block_size)"));
            } else if nodes > 0 && blocks < nodes as u64 {
                let fits = (0..size.ilog2())
                    .map(|e| size >> (e + 1))
                    .find(|b| nv_ipam_blocks(c, *b, &exclusions) >= nodes as u64);
                cx.at(sp, format!(
                    "{name} {c} holds {blocks} nv-ipam blocks of {size} addresses (nv-ipam v0.4.0 gives every node one block of network_operator.per_node_block_size, from the first address after the network's, never the broadcast's), but the plan has {nodes} nodes: {}",
                    match fits {
                        Some(b) => format!("set [network_operator] per_node_block_size = {b} (each node's agent needs one address) or give a larger range"),
                        None => "give a larger range".into(),
                    }
                ));
            } else if nodes == 0 {
                warnings.push(format!(
                    "{name} {c}: nv-ipam gives every node a block of {size} addresses, so this pool serves at most {blocks} nodes; the agents of any further node stay ContainerCreating without an address (name the nodes to have render check it)"
                ));
            }
        }
    }

    // CPUs per agent from the port rate: TCP at line rate needs about one
    // core per 25 Gbit/s (one stream per core with sendfile and GRO, as the
    // suite measures it) on each end; 2 CPUs stop near 50 Gbit/s.
    let mut resources = resources;
    let tested: Vec<&str> = [
        cni.as_ref().map(|c| c.interface.as_str()),
        host.as_ref().map(|h| h.interface.as_str()),
        roce.as_ref().map(|r| r.netdev.as_str()),
        ipoib.as_ref().map(|i| i.master.as_str()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let fastest = detects
        .iter()
        .flat_map(|d| d.report.netdevs.iter().map(move |n| (d, n)))
        .filter(|(_, n)| tested.contains(&n.name.as_str()))
        .filter_map(|(d, n)| n.speed_mbps.map(|m| (m, d.node.as_str(), n.name.as_str())))
        .max_by_key(|(m, _, _)| *m);
    if let Some((mbps, node, ifname)) = fastest {
        let gbps = mbps as f64 / 1000.0;
        let want = ((gbps / GBPS_PER_AGENT_CPU).ceil() as u32)
            .clamp(DEFAULT_AGENT_CPU, MAX_AUTO_AGENT_CPU);
        let explicit = raw
            .resources
            .as_ref()
            .and_then(|r| r.get_ref().cpu.as_ref().map(|c| c.span()));
        match explicit {
            None => resources.cpu = want,
            Some(sp) if resources.cpu < want => {
                let _ = sp;
                warnings.push(format!(
                    "[resources] cpu = {} per agent: {ifname} on {node} runs at {gbps:.0} Gbit/s, and TCP at that rate needs about {want} CPUs (about {GBPS_PER_AGENT_CPU:.0} Gbit/s per core); socket bandwidth tests will be CPU-bound, not link-bound. Set cpu = {want} (or leave it out: render sizes it from the detected port rate)",
                    resources.cpu
                ));
            }
            Some(_) => {}
        }
    }

    // The example plan's image is not published: say how to build one.
    if image == EXAMPLE_IMAGE {
        warnings.push(format!(
            "image {EXAMPLE_IMAGE} is the examples' placeholder and is not published: the pods would stay ImagePullBackOff. Build and push the image (Containerfile): `buildah build -t REGISTRY/fabperf:TAG -f Containerfile . && buildah push REGISTRY/fabperf:TAG` (or podman/docker), then set image = \"REGISTRY/fabperf:TAG\" in the plan (docs/k8s.md, Agent image)"
        ));
    }

    // The in-cluster runner: its run plan is validated here, so its
    // problems come with the plan's others (unless what it builds on is
    // already reported broken: no cascade of errors from one).
    let runner_inputs_ok = !namespace.is_empty() && control_port != 0 && !paths.is_empty();
    let runner = if !runner_inputs_ok {
        None
    } else {
        let mut rdma_paths = BTreeSet::new();
        if paths.contains(&PathKind::Roce) {
            rdma_paths.insert(PathKind::Roce);
        }
        if paths.contains(&PathKind::Ipoib)
            && ipoib.as_ref().is_some_and(|i| i.attach == Attach::Sriov)
        {
            rdma_paths.insert(PathKind::Ipoib);
        }
        let inputs = crate::runner::Inputs {
            text: cx.text,
            source_name: cx.file,
            namespace: &namespace,
            paths: &paths,
            control_port,
            rdma_paths,
            service_nodes: if node_names.is_empty() {
                &detected_nodes
            } else {
                &node_names
            },
        };
        let mut errs = Vec::new();
        let r = crate::runner::check(raw.runner.as_ref(), &inputs, &mut |sp, m| {
            errs.push((sp, m))
        });
        errs.sort_by_key(|(sp, _): &(Range<usize>, String)| sp.start);
        for (sp, m) in errs {
            cx.at(sp, m);
        }
        r
    };
    let policy_scale = crate::policy::check(raw.policy_scale.as_ref(), &mut |sp, m| cx.at(sp, m));
    let gpu = raw.gpu.as_ref().and_then(|g| {
        let nodes: Vec<crate::gpu::Node<'_>> = detects
            .iter()
            .map(|d| crate::gpu::Node {
                name: &d.node,
                report: &d.report,
            })
            .collect();
        let rdma = paths.contains(&PathKind::Roce)
            || (paths.contains(&PathKind::Ipoib)
                && ipoib.as_ref().is_some_and(|i| i.attach == Attach::Sriov));
        let shared = paths.contains(&PathKind::Roce)
            && roce.as_ref().is_some_and(|r| r.attach == Attach::Shared);
        let moved = roce
            .as_ref()
            .filter(|r| matches!(r.plugin, CniPlugin::HostDevice { .. }))
            .map(|r| r.netdev.as_str());
        crate::gpu::check(
            g,
            &nodes,
            rdma,
            shared,
            moved,
            &mut |sp, m| cx.at(sp, m),
            &mut warnings,
        )
    });
    let mut device_plugin = device_plugin;
    if let (Some(g), Some(dp)) = (&gpu, device_plugin.as_mut()) {
        let max = dp
            .config_list
            .first()
            .map(|c| c.rdma_hca_max)
            .unwrap_or(1000);
        dp.config_list.extend(g.rail_configs(max));
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
        ipam,
        node_names,
        detected_nodes,
        node_selector,
        tolerations,
        resources,
        node_ips,
        host,
        ipoib,
        roce,
        sriov,
        device_plugin,
        operator,
        cni,
        policy_scale,
        warnings,
        runner,
        gpu,
    })
}

/// How many per-node blocks nv-ipam (nvidia-k8s-ipam v0.4.0,
/// pkg/ipam-controller/allocator/allocator.go) can hand out of `net`: blocks
/// of `size` addresses from the first one after the network address (the
/// network address itself for /31 and /32), each ending inside the subnet
/// and before its broadcast address; a block entirely inside the exclusions
/// is skipped.
pub fn nv_ipam_blocks(net: ipnet::Ipv4Net, size: u32, exclusions: &[crate::crd::IpRange]) -> u64 {
    if size == 0 {
        return 0;
    }
    // The exclusions merged (as nv-ipam's MergeExcludeRanges does), so a
    // block is excluded when one merged range covers it.
    let mut ex: Vec<(u64, u64)> = exclusions
        .iter()
        .filter_map(|r| {
            Some((
                u64::from(u32::from(r.start_ip.parse::<std::net::Ipv4Addr>().ok()?)),
                u64::from(u32::from(r.end_ip.parse::<std::net::Ipv4Addr>().ok()?)),
            ))
        })
        .filter(|(a, b)| a <= b)
        .collect();
    ex.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ex {
        match merged.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let network = u64::from(u32::from(net.network()));
    let broadcast = u64::from(u32::from(net.broadcast()));
    let p2p = net.prefix_len() >= 31;
    let mut start = if p2p { network } else { network + 1 };
    let mut n = 0;
    loop {
        let end = start + u64::from(size) - 1;
        if end > broadcast || (!p2p && end == broadcast) {
            return n;
        }
        let excluded = merged.iter().any(|(s, e)| *s <= start && end <= *e);
        if !excluded {
            n += 1;
        }
        start = end + 1;
    }
}

/// The token of the committed examples of earlier releases: refused everywhere.
pub const EXAMPLE_TOKEN: &str = "fabperf-example-token-change-me";

/// Why a token is unusable, or `Ok` for a token worth deploying: at least 16
/// characters without whitespace, not a placeholder, not the old example token.
pub fn check_token_text(t: &str) -> Result<(), String> {
    if t == EXAMPLE_TOKEN || fabperf_proto::auth::refuse_public_token(t.as_bytes()).is_err() {
        return Err("this is the token of fabperf's published examples; generate your own (`openssl rand -hex 24`)".into());
    }
    if t.chars().count() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the token must be at least 16 characters without whitespace (e.g. `openssl rand -hex 24`)".into());
    }
    let lower = t.to_ascii_lowercase();
    for p in [
        "change-me",
        "changeme",
        "change_me",
        "replace",
        "placeholder",
        "example",
        "your-token",
        "yourtoken",
        "secret-here",
        "token-here",
        "insert",
        "todo",
        "fixme",
        "xxxx",
        "<",
        ">",
        "${",
    ] {
        if lower.contains(p) {
            return Err(format!(
                "the token looks like a placeholder (contains {p:?}); generate a real one (`openssl rand -hex 24`)"
            ));
        }
    }
    let distinct: BTreeSet<char> = t.chars().collect();
    if distinct.len() < 6 {
        return Err(format!(
            "the token uses only {} distinct characters; generate a real one (`openssl rand -hex 24`)",
            distinct.len()
        ));
    }
    Ok(())
}

/// Read and check a token file (one line; a trailing newline is ignored).
pub fn read_token_file(p: &Path) -> Result<String, String> {
    let text = crate::files::read_text_capped(p, crate::files::MAX_TOKEN_BYTES, "token file")
        .map_err(|e| format!("{e:#}"))?;
    let t = text.trim_end_matches(['\n', '\r']);
    check_token_text(t).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(t.to_string())
}

fn check_tolerations(cx: &mut Ctx, raw: &[S<RawToleration>]) -> Vec<TolerationPlan> {
    let mut out = Vec::new();
    for t in raw {
        let sp = t.span();
        let t = t.get_ref();
        let operator = match &t.operator {
            None => "Equal".to_string(),
            Some(o) if o.get_ref() == "Exists" || o.get_ref() == "Equal" => o.get_ref().clone(),
            Some(o) => {
                cx.at(
                    o.span(),
                    format!(
                        "toleration operator {:?} must be Exists or Equal",
                        o.get_ref()
                    ),
                );
                continue;
            }
        };
        if let Some(k) = &t.key {
            if !is_label_key(k.get_ref()) {
                cx.at(
                    k.span(),
                    format!("toleration key {:?} is not a valid taint key", k.get_ref()),
                );
            }
        } else if operator != "Exists" {
            cx.at(sp.clone(), "a toleration without key must use operator = \"Exists\" (it then tolerates every taint)");
        }
        if let Some(v) = &t.value {
            if operator == "Exists" {
                cx.at(v.span(), "a toleration with operator Exists takes no value");
            } else if !is_label_value(v.get_ref()) {
                cx.at(
                    v.span(),
                    format!(
                        "toleration value {:?} is not a valid taint value",
                        v.get_ref()
                    ),
                );
            }
        }
        if let Some(e) = &t.effect {
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&e.get_ref().as_str()) {
                cx.at(e.span(), format!("toleration effect {:?} must be NoSchedule, PreferNoSchedule or NoExecute (or left out for all)", e.get_ref()));
            }
        }
        out.push(TolerationPlan {
            key: t.key.as_ref().map(|k| k.get_ref().clone()),
            operator,
            value: t.value.as_ref().map(|v| v.get_ref().clone()),
            effect: t.effect.as_ref().map(|e| e.get_ref().clone()),
        });
    }
    out
}

/// `512Mi`, `4Gi` -> MiB.
pub(crate) fn parse_memory_mib(s: &str) -> Option<u64> {
    let (num, mul) = if let Some(n) = s.strip_suffix("Gi") {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1)
    } else {
        return None;
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 7 {
        return None;
    }
    num.parse::<u64>().ok().map(|n| n * mul)
}

fn check_resources(cx: &mut Ctx, raw: Option<&S<RawResources>>) -> ResourcesPlan {
    let mut r = ResourcesPlan {
        cpu: DEFAULT_AGENT_CPU,
        memory_mib: DEFAULT_AGENT_MEMORY_MIB,
    };
    let Some(raw) = raw else { return r };
    let raw = raw.get_ref();
    if let Some(c) = &raw.cpu {
        // Whole CPUs: the static CPU manager pins only integer requests of Guaranteed pods.
        if let Some(n) = u32_in(cx, c, "[resources].cpu (whole CPUs)", 1, 256) {
            r.cpu = n;
        }
    }
    if let Some(m) = &raw.memory {
        match parse_memory_mib(m.get_ref()) {
            Some(n) if (512..=1024 * 1024).contains(&n) => r.memory_mib = n,
            Some(n) => cx.at(
                m.span(),
                format!("[resources].memory {n} MiB is out of range 512Mi..=1024Gi"),
            ),
            None => cx.at(
                m.span(),
                format!(
                    "[resources].memory {:?} must be a whole number of Mi or Gi, e.g. \"4Gi\"",
                    m.get_ref()
                ),
            ),
        }
    }
    r
}

fn check_ipam(
    cx: &mut Ctx,
    table: &str,
    range: &S<String>,
    start: &Option<S<String>>,
    end: &Option<S<String>>,
    exclude: &Option<Vec<S<String>>>,
) -> Option<WhereaboutsIpam> {
    let net = match cidr::parse(range.get_ref()) {
        Ok(c) => c,
        Err(e) => {
            cx.at(range.span(), format!("[{table}].range: {e}"));
            return None;
        }
    };
    if !cidr::is_network_address(&net) {
        cx.at(
            range.span(),
            format!("[{table}].range {net} has host bits set; write the network address"),
        );
    }
    if cidr::host_bits(&net) < 2 {
        cx.at(
            range.span(),
            format!("[{table}].range {net} is too small for two agents"),
        );
    }
    let mut ip = |v: &Option<S<String>>, key: &str| -> Option<u128> {
        let v = v.as_ref()?;
        match v.get_ref().parse::<std::net::IpAddr>() {
            Ok(a) if net.contains(&a) => Some(match a {
                std::net::IpAddr::V4(x) => u32::from(x) as u128,
                std::net::IpAddr::V6(x) => u128::from(x),
            }),
            Ok(_) => {
                cx.at(
                    v.span(),
                    format!("[{table}].{key} {} is outside range {net}", v.get_ref()),
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
        match cidr::parse(x.get_ref()) {
            Ok(c) if cidr::overlaps(&net, &c) => excl.push(c.to_string()),
            Ok(c) => cx.at(
                x.span(),
                format!("[{table}].exclude {c} is outside range {net}"),
            ),
            Err(er) => cx.at(x.span(), format!("[{table}].exclude: {er}")),
        }
    }
    Some(WhereaboutsIpam {
        kind: "whereabouts",
        range: net.to_string(),
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
    let attach = check_attach(cx, &r.attach, "ipoib", "ipoib-cni");
    if let (Attach::Sriov, Some(m)) = (attach, &r.mtu) {
        cx.at(m.span(), "[ipoib].mtu applies to ipoib-cni children; an InfiniBand VF (attach = \"sriov\") keeps the MTU the subnet manager gives it");
    }
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
        attach,
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
    let attach = check_attach(cx, &r.attach, "roce", "shared");
    if attach == Attach::Sriov {
        for (v, key) in [
            (&r.network_type, "network_type"),
            (&r.macvlan_mode, "macvlan_mode"),
        ] {
            if let Some(x) = v {
                cx.at(x.span(), format!("[roce].{key} applies to attach = \"shared\"; with \"sriov\" the pod gets a VF (sriov-cni)"));
            }
        }
        if let Some(m) = &r.mtu {
            cx.at(m.span(), "[roce].mtu applies to attach = \"shared\"; a VF takes the MTU of its physical function");
        }
    }
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
        attach,
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

/// Selectors for the RDMA devices behind the given netdevs (all PCI RDMA
/// devices when `if_names` is empty), from detect reports, one set per link
/// type: k8s-rdma-shared-dev-plugin (v1.5.3, pkg/resources) would otherwise
/// put InfiniBand and RoCE HCAs into one resource, and a pod asking for it
/// could get either. Returns (plugin link type, selectors), `ether` first.
pub fn selectors_from_detect(
    reports: &[(&str, &DetectReport)],
    if_names: &[String],
) -> Result<Vec<(&'static str, RdmaSelectors)>, String> {
    let mut groups: BTreeMap<&'static str, RdmaSelectors> = BTreeMap::new();
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
            let Some(lt) = port.and_then(|p| plugin_link_type(&p.link_layer)) else {
                return Err(format!(
                    "node {node}: the link layer of {}{} is unknown, so it cannot be put with the InfiniBand or the RoCE devices; name the netdevs (--if-name / [device_plugin].if_names)",
                    dev.name,
                    port.map(|p| format!(" port {}", p.port)).unwrap_or_default()
                ));
            };
            found = true;
            let sel = groups.entry(lt).or_default();
            push(&mut sel.vendors, &pci.vendor_id.to_ascii_lowercase());
            push(&mut sel.device_ids, &pci.device_id.to_ascii_lowercase());
            if let Some(drv) = &dev.driver {
                push(&mut sel.drivers, drv);
            }
            push(&mut sel.link_types, lt);
        }
        if !found {
            return Err(format!(
                "node {node} has no PCI RDMA device{}; k8s-rdma-shared-dev-plugin only serves PCI devices (rxe/siw are not exposed)",
                if if_names.is_empty() { String::new() } else { format!(" behind {}", if_names.join(", ")) }
            ));
        }
    }
    let mut out = Vec::new();
    for (lt, mut sel) in groups {
        for s in [&mut sel.vendors, &mut sel.device_ids, &mut sel.drivers] {
            s.sort();
        }
        if !if_names.is_empty() {
            // Only the netdevs of this link type.
            sel.if_names = if_names
                .iter()
                .filter(|i| {
                    reports.iter().any(|(_, rep)| {
                        matches!(rep.rdma_behind(i), Some((_, Some(p))) if plugin_link_type(&p.link_layer) == Some(lt))
                    })
                })
                .cloned()
                .collect();
        }
        out.push((lt, sel));
    }
    Ok(out)
}

/// Split `PREFIX/NAME` (the prefix defaults to `rdma`).
pub fn split_resource(r: &str) -> (&str, &str) {
    r.split_once('/').unwrap_or(("rdma", r))
}

fn check_device_plugin(
    cx: &mut Ctx,
    t: Option<&S<RawDevicePlugin>>,
    rdma_resource: &str,
    roce: Option<&RocePlan>,
    detects: &[NodeDetect],
) -> Option<RdmaSharedConfig> {
    let empty = RawDevicePlugin {
        ib_resource: None,
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
    let ib_resource = match &r.ib_resource {
        Some(v) => {
            let ok = v.get_ref().split_once('/').is_some_and(|(pre, name)| {
                is_dns_subdomain(pre)
                    && !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            if !ok {
                cx.at(v.span(), format!("[device_plugin].ib_resource {:?} must be PREFIX/NAME, e.g. {DEFAULT_IB_RESOURCE}", v.get_ref()));
            }
            v.get_ref().clone()
        }
        None => DEFAULT_IB_RESOURCE.into(),
    };
    let entry = |resource: &str, selectors: RdmaSelectors| {
        let (prefix, name) = split_resource(resource);
        RdmaResourceConfig {
            resource_name: name.to_string(),
            resource_prefix: prefix.to_string(),
            rdma_hca_max,
            selectors,
        }
    };
    let config_list = if !sel.is_empty() {
        vec![entry(rdma_resource, sel)]
    } else if !detects.is_empty() {
        let if_names: Vec<String> = roce.map(|r| vec![r.netdev.clone()]).unwrap_or_default();
        let reps: Vec<(&str, &DetectReport)> = detects
            .iter()
            .map(|d| (d.node.as_str(), &d.report))
            .collect();
        match selectors_from_detect(&reps, &if_names) {
            Ok(groups) => groups
                .into_iter()
                .map(|(lt, s)| {
                    entry(
                        if lt == "ether" {
                            rdma_resource
                        } else {
                            &ib_resource
                        },
                        s,
                    )
                })
                .collect(),
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
        vec![entry(rdma_resource, sel)]
    } else {
        let sp = t.map(|t| t.span()).unwrap_or(0..0);
        cx.at(sp, "the device plugin needs selectors: set [device_plugin] vendors/device_ids/if_names or list detect files");
        return None;
    };
    let mut config_list = config_list;
    // host-device moves the RoCE netdev into the agent pod: the plugin
    // (k8s-rdma-shared-dev-plugin v1.5.3, pkg/resources/pci_net_device.go)
    // then reads an empty interface name and link type for the NIC at its
    // next periodic update, so ifNames and linkTypes selectors stop matching
    // and the resource drops to 0 while an agent holds the NIC: a restarted
    // agent stays Pending. Select the NIC by its PCI identity only (vendor,
    // device ID, driver), which the move does not change; its RDMA device
    // stays in the host (shared netns mode).
    if let Some(r) = roce.filter(|r| matches!(r.plugin, CniPlugin::HostDevice { .. })) {
        let sp = t.map(|t| t.span()).unwrap_or(0..0);
        let by_hand = !r_if_names_or_link_types(t).is_empty();
        if by_hand {
            cx.at(sp, format!("[roce] network_type = \"host-device\" moves {} into the agent pod, and the device plugin then sees no interface name or link type for its NIC: drop [device_plugin] {} and select the NIC by vendors/device_ids (the PCI identity survives the move)", r.netdev, r_if_names_or_link_types(t).join(" and ")));
            return None;
        }
        let ether = config_list
            .iter()
            .position(|c| format!("{}/{}", c.resource_prefix, c.resource_name) == rdma_resource);
        let Some(i) = ether else {
            return Some(RdmaSharedConfig {
                periodic_update_interval,
                config_list,
            });
        };
        let sel = &mut config_list[i].selectors;
        if sel.device_ids.is_empty() {
            cx.at(sp, format!("[roce] network_type = \"host-device\": the device plugin must select {}'s NIC by PCI IDs (its interface name vanishes from the host while an agent holds it): list the nodes' detect files under [detect], or set [device_plugin] vendors and device_ids", r.netdev));
            return None;
        }
        sel.if_names.clear();
        sel.link_types.clear();
        let ids = sel.device_ids.clone();
        if let Some(other) = config_list
            .iter()
            .enumerate()
            .find(|(j, c)| *j != i && c.selectors.device_ids.iter().any(|d| ids.contains(d)))
        {
            cx.at(sp, format!("[roce] network_type = \"host-device\": the RoCE NIC's PCI device ID ({}) is also the one of the devices of {}/{}; without the link type (which host-device hides) one resource would hand out both. Use macvlan, or name the devices apart by hand", ids.join(", "), other.1.resource_prefix, other.1.resource_name));
            return None;
        }
    }
    Some(RdmaSharedConfig {
        periodic_update_interval,
        config_list,
    })
}

/// The `[device_plugin]` selector keys given by hand that name interfaces
/// or link types.
fn r_if_names_or_link_types(t: Option<&S<RawDevicePlugin>>) -> Vec<&'static str> {
    let Some(t) = t else { return Vec::new() };
    let r = t.get_ref();
    let mut v = Vec::new();
    if r.if_names.is_some() {
        v.push("if_names");
    }
    if r.link_types.is_some() {
        v.push("link_types");
    }
    v
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
            // An MTU from a detect file gets the same bounds as the plan's own.
            let mut bad = false;
            for d in detects {
                if let Some(m) = d.report.netdev(&interface).and_then(|n| n.mtu) {
                    if !(1280..=9216).contains(&m) {
                        cx.at(d.span.clone(), format!(
                            "the detect file of node {} reports MTU {m} for {interface}, out of range 1280..=9216 for a CNI underlay; fix the file (or the link) or set [cni].underlay_mtu",
                            d.node
                        ));
                        bad = true;
                    }
                }
            }
            if bad {
                return None;
            }
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
    let pod_cidr = match cidr::parse(r.pod_cidr.get_ref()) {
        Ok(c) => c,
        Err(e) => {
            cx.at(r.pod_cidr.span(), format!("[cni].pod_cidr: {e}"));
            return None;
        }
    };
    if matches!(pod_cidr, IpNet::V6(_)) {
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

/// Cilium's tunnel (and native-routing routes) run between the nodes'
/// Kubernetes InternalIPs whatever `devices` says (cilium/cilium#14520,
/// #25478): refuse a plan whose node IPs are on another link than
/// [cni].interface, and warn when there is nothing to check against.
fn check_cilium_link(
    cx: &mut Ctx,
    span: Range<usize>,
    c: &CniPlan,
    detects: &[NodeDetect],
    warnings: &mut Vec<String>,
) {
    if !c.plugins.contains(&CniKind::Cilium) {
        return;
    }
    let mut checked = 0;
    for d in detects {
        let Some(ip) = &d.node_ip else { continue };
        checked += 1;
        if ip.interface == c.interface {
            continue;
        }
        let link_mtu = d
            .report
            .netdev(&ip.interface)
            .and_then(|n| n.mtu)
            .map(|m| format!(", MTU {m}"))
            .unwrap_or_default();
        let fast_addr = d
            .report
            .netdev(&c.interface)
            .and_then(|n| n.ipv4.first())
            .map(|a| a.split('/').next().unwrap_or(a).to_string());
        let fix = match fast_addr {
            Some(a) => format!("start the kubelet with --node-ip={a} (the address on {}) on node {}, re-run `fabperf detect --json`", c.interface, d.node),
            None => format!("give {} an address and make it node {}'s --node-ip", c.interface, d.node),
        };
        cx.at(span.clone(), format!(
            "cilium: node {}'s node IP {} is on {}{link_mtu}, not on [cni].interface {}; Cilium tunnels and routes between node IPs whatever `devices` says, so its pod path would run over {} with an MTU meant for {}. Fix: {fix}; or drop cilium from [cni].plugins",
            d.node, ip.address, ip.interface, c.interface, ip.interface, c.interface
        ));
    }
    if checked == 0 {
        warnings.push(format!(
            "cilium: the tunnel runs between the nodes' InternalIPs (kubelet --node-ip), not over `devices`; nothing tells the renderer that those are on {}: list detect files (they carry node_ip) or check `kubectl get nodes -o wide` yourself",
            c.interface
        ));
    }
}

/// The host path: bind and advertise each node's address on the fabric
/// interface ([host].interface, else [cni].interface when detect files say
/// where it is), or the node IP when no interface is named.
fn check_host(
    cx: &mut Ctx,
    raw: Option<&S<RawHost>>,
    cni: Option<&CniPlan>,
    detects: &[NodeDetect],
    node_names: &[String],
    warnings: &mut Vec<String>,
) -> Option<HostPlan> {
    let explicit = raw.and_then(|h| h.get_ref().interface.as_ref());
    let (interface, span) = match (explicit, cni) {
        (Some(i), _) => (i.get_ref().clone(), i.span()),
        (None, Some(c)) if !detects.is_empty() => (c.interface.clone(), 0..0),
        _ => {
            let links: BTreeSet<&str> = detects
                .iter()
                .filter_map(|d| d.node_ip.as_ref().map(|i| i.interface.as_str()))
                .collect();
            if !links.is_empty() {
                warnings.push(format!(
                    "host: the agents listen on the node IP (link {}); name the fabric link with [host].interface to measure it instead",
                    links.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
            return None;
        }
    };
    if !is_ifname(&interface) {
        cx.at(
            span,
            format!("[host].interface {interface:?} is not an interface name"),
        );
        return None;
    }
    if detects.is_empty() {
        cx.at(span, format!("[host].interface {interface}: the agent binds each node's address on it, which comes from the detect files; list them under [detect]"));
        return None;
    }
    for n in node_names {
        if !detects.iter().any(|d| &d.node == n) {
            cx.at(span.clone(), format!("the host path binds each node's address on {interface}, but node {n} has no detect file under [detect]"));
        }
    }
    let mut addresses = BTreeMap::new();
    for d in detects {
        match d.report.netdev(&interface) {
            None => cx.at(d.span.clone(), format!("missing interface: {interface} (the host path's fabric link) not found on node {}", d.node)),
            Some(nd) => match nd.ipv4.first() {
                None => cx.at(d.span.clone(), format!("{interface} on node {} has no IPv4 address for the host agent to bind; give it one or name another [host].interface", d.node)),
                Some(a) => {
                    let addr = a.split('/').next().unwrap_or(a);
                    if addr.parse::<std::net::Ipv4Addr>().is_err() {
                        cx.at(d.span.clone(), format!("{interface} on node {}: {a:?} is not an IPv4 address", d.node));
                    } else {
                        addresses.insert(d.node.clone(), addr.to_string());
                    }
                }
            },
        }
    }
    Some(HostPlan {
        interface,
        addresses,
    })
}

fn is_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 8
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_sriov_resource(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The PCI vendor and device ID of the physical function behind `netdev`,
/// equal on every node.
fn pf_pci(
    cx: &mut Ctx,
    sp: &Range<usize>,
    netdev: &str,
    detects: &[NodeDetect],
) -> Option<(String, String)> {
    let mut found: Option<(String, String, String)> = None;
    for d in detects {
        let Some((dev, _)) = d.report.rdma_behind(netdev) else {
            cx.at(
                d.span.clone(),
                format!("SR-IOV: node {} has no RDMA device behind {netdev}", d.node),
            );
            return None;
        };
        let Some(pci) = &dev.pci else {
            cx.at(
                d.span.clone(),
                format!(
                    "SR-IOV: {} on node {} is not a PCI device (rxe/siw have no VFs)",
                    dev.name, d.node
                ),
            );
            return None;
        };
        if pci.is_vf {
            cx.at(
                d.span.clone(),
                format!(
                    "SR-IOV: {netdev} on node {} is already a VF; name the physical function",
                    d.node
                ),
            );
            return None;
        }
        let v = (
            pci.vendor_id.to_ascii_lowercase(),
            pci.device_id.to_ascii_lowercase(),
        );
        match &found {
            Some((fv, fd, node)) if (fv, fd) != (&v.0, &v.1) => {
                cx.at(d.span.clone(), format!("SR-IOV: {netdev} is PCI {}:{} on node {} but {fv}:{fd} on node {node}; one SriovNetworkNodePolicy selects one device ID", v.0, v.1, d.node));
                return None;
            }
            Some(_) => {}
            None => found = Some((v.0, v.1, d.node.clone())),
        }
    }
    if found.is_none() {
        cx.at(sp.clone(), format!("SR-IOV needs the PCI vendor and device ID of the NIC behind {netdev}: list the nodes' detect files under [detect]"));
    }
    found.map(|(v, d, _)| (v, d))
}

fn check_sriov(
    cx: &mut Ctx,
    raw: Option<&S<RawSriov>>,
    roce: Option<&RocePlan>,
    ipoib: Option<&IpoibPlan>,
    detects: &[NodeDetect],
) -> Option<SriovPlan> {
    let empty = RawSriov {
        num_vfs: None,
        roce_resource: None,
        ib_resource: None,
        ufm_secret: None,
        guid_pool_start: None,
        guid_pool_end: None,
    };
    let sp = raw.map(|r| r.span()).unwrap_or(0..0);
    let r = raw.map(|r| r.get_ref()).unwrap_or(&empty);
    let num_vfs = match &r.num_vfs {
        Some(n) => u32_in(cx, n, "[sriov].num_vfs", 1, 127)?,
        None => 8,
    };
    let mut res = |v: &Option<S<String>>, key: &str, default: &str| -> String {
        match v {
            Some(x) if !is_sriov_resource(x.get_ref()) => {
                cx.at(x.span(), format!("[sriov].{key} {:?} may only hold letters, digits and '_' (the operator adds the prefix {DEFAULT_SRIOV_PREFIX}/)", x.get_ref()));
                String::new()
            }
            Some(x) => x.get_ref().clone(),
            None => default.into(),
        }
    };
    let roce_resource = res(&r.roce_resource, "roce_resource", "fabperf_roce_vf");
    let ib_resource = res(&r.ib_resource, "ib_resource", "fabperf_ib_vf");
    let roce_pci = match roce {
        Some(rp) if rp.attach == Attach::Sriov => Some(pf_pci(cx, &sp, &rp.netdev, detects)?),
        _ => None,
    };
    let (ib_pci, ib_kubernetes) = match ipoib {
        Some(ip) if ip.attach == Attach::Sriov => {
            let pci = pf_pci(cx, &sp, &ip.master, detects)?;
            let need = |cx: &mut Ctx, v: &Option<S<String>>, key: &str| -> Option<String> {
                match v {
                    Some(x) => Some(x.get_ref().clone()),
                    None => {
                        cx.at(sp.clone(), format!("InfiniBand VFs need ib-kubernetes (GUIDs and PKeys from the subnet manager): set [sriov].{key}"));
                        None
                    }
                }
            };
            let secret = need(cx, &r.ufm_secret, "ufm_secret");
            let start = need(cx, &r.guid_pool_start, "guid_pool_start");
            let end = need(cx, &r.guid_pool_end, "guid_pool_end");
            for (v, key) in [
                (&r.guid_pool_start, "guid_pool_start"),
                (&r.guid_pool_end, "guid_pool_end"),
            ] {
                if let Some(x) = v {
                    if !is_guid(x.get_ref()) {
                        cx.at(
                            x.span(),
                            format!(
                                "[sriov].{key} {:?} is not a GUID like 02:00:00:00:00:00:00:00",
                                x.get_ref()
                            ),
                        );
                    }
                }
            }
            if let Some(x) = &r.ufm_secret {
                if !is_dns_subdomain(x.get_ref()) {
                    cx.at(
                        x.span(),
                        format!("[sriov].ufm_secret {:?} is not a Secret name", x.get_ref()),
                    );
                }
            }
            (
                Some(pci),
                match (secret, start, end) {
                    (Some(s), Some(a), Some(b)) => Some(IbKubernetesPlan {
                        ufm_secret: s,
                        guid_pool_start: a,
                        guid_pool_end: b,
                    }),
                    _ => None,
                },
            )
        }
        _ => {
            for (v, key) in [
                (&r.ufm_secret, "ufm_secret"),
                (&r.guid_pool_start, "guid_pool_start"),
                (&r.guid_pool_end, "guid_pool_end"),
            ] {
                if let Some(x) = v {
                    cx.at(x.span(), format!("[sriov].{key} applies to InfiniBand VFs ([ipoib] attach = \"sriov\") only"));
                }
            }
            (None, None)
        }
    };
    Some(SriovPlan {
        num_vfs,
        roce_resource,
        ib_resource,
        ib_kubernetes,
        roce_pci,
        ib_pci,
    })
}

fn check_attach(cx: &mut Ctx, v: &Option<S<String>>, table: &str, shared_name: &str) -> Attach {
    match v {
        None => Attach::Shared,
        Some(a) if a.get_ref() == shared_name => Attach::Shared,
        Some(a) if a.get_ref() == "sriov" => Attach::Sriov,
        Some(a) => {
            cx.at(
                a.span(),
                format!(
                    "[{table}].attach {:?} must be \"{shared_name}\" or \"sriov\"",
                    a.get_ref()
                ),
            );
            Attach::Shared
        }
    }
}
