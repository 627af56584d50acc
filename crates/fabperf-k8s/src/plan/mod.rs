//! The TOML plan: what to deploy where. Parsing keeps source spans so every
//! problem is reported as `FILE:LINE:COL: message`.
//!
//! The checking is split by the section or rule a reader looks for:
//! `schema` (the keys), `check` (the plan as a whole), one file per section
//! (`nodes`, `detect_files`, `host`, `ipoib`, `roce`, `attach`, `ipam`,
//! `sriov`, `device_plugin`, `cni`), `token` and `names`.

mod attach;
mod check;
mod cni;
mod detect_files;
mod device_plugin;
mod host;
mod ipam;
mod ipoib;
mod names;
mod nodes;
mod roce;
pub(crate) mod schema;
mod sriov;
mod token;

use attach::{check_attach, check_nad_name};
use check::check;
use cni::{check_cilium_link, check_cni};
use detect_files::{check_detect, pick_from_detect, NodeDetect};
use device_plugin::check_device_plugin;
pub use device_plugin::selectors_from_detect;
pub use fabperf_planfile::{PlanError, PlanErrors};
use host::check_host;
use ipam::check_ipam;
pub use ipam::nv_ipam_blocks;
use ipoib::check_ipoib;
pub use names::split_resource;
use names::{is_dns_label, is_guid, is_hex4, is_ifname, is_sriov_resource, names_or_none, u32_in};
pub(crate) use names::{is_dns_subdomain, is_label_key, is_label_value};
pub(crate) use nodes::parse_memory_mib;
use nodes::{check_nodes, check_resources};
use roce::check_roce;
use schema::{
    RawCni, RawDevicePlugin, RawHost, RawIpoib, RawNodes, RawPlan, RawResources, RawRoce, RawSriov,
    RawToleration, S,
};
use sriov::check_sriov;
pub use token::{check_token_text, read_token_file, EXAMPLE_TOKEN};

use crate::cidr;
use crate::crd::{CniPlugin, RdmaResourceConfig, RdmaSelectors, RdmaSharedConfig, WhereaboutsIpam};
use crate::detect::{plugin_link_type, DetectReport};
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

use fabperf_planfile::Diagnostics;

pub const DEFAULT_CONTROL_PORT: u16 = 5301;
pub const DEFAULT_RDMA_RESOURCE: &str = "rdma/rdma_shared_device_a";
pub const DEFAULT_OPERATOR_REPOSITORY: &str = "nvcr.io/nvidia/mellanox";
pub const DEFAULT_OPERATOR_VERSION: &str = "network-operator-v26.1.0";
/// IPoIB datagram mode: IB MTU 4096 minus the 4-byte IPoIB header.
pub const IPOIB_DATAGRAM_MAX_MTU: u32 = 4092;
/// IPoIB connected mode maximum.
pub const IPOIB_CONNECTED_MAX_MTU: u32 = 65520;

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

/// Parse and validate a plan file. `display_name` is used in error locations
/// and generated headers (normally the path as the user typed it).
pub fn load_plan(path: &Path) -> anyhow::Result<Plan> {
    let file =
        fabperf_planfile::read(path, crate::files::MAX_INPUT_BYTES).map_err(anyhow::Error::msg)?;
    parse_plan(&file.text, &file.name, &file.base_dir).map_err(anyhow::Error::new)
}

/// Parse and validate plan text. Relative file names in the plan (token_file,
/// detect files) resolve against `base_dir`.
pub fn parse_plan(text: &str, file: &str, base_dir: &Path) -> Result<Plan, PlanErrors> {
    fabperf_planfile::parse(text, file, |cx, raw: RawPlan| check(cx, raw, base_dir))
        .map(|plan| plan.expect("a plan without errors resolves"))
}
