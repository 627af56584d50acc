//! Custom resources and embedded JSON configs, modelled with our own serde
//! structs (k8s-openapi only covers the built-in API):
//! - `NetworkAttachmentDefinition` (k8s.cni.cncf.io/v1), its CNI config;
//! - the k8s-rdma-shared-dev-plugin `config.json`;
//! - NVIDIA network-operator `NicClusterPolicy` (mellanox.com/v1alpha1) as
//!   api/v1alpha1/nicclusterpolicy_types.go of network-operator v26.1.0
//!   defines it (no `secondaryNetwork.ipamPlugin`: removed in v25.10);
//! - nv-ipam `IPPool` (nv-ipam.nvidia.com/v1alpha1, the CRD network-operator
//!   v26.1.0 ships in manifests/state-nv-ipam-cni/);
//! - sriov-network-operator `SriovNetworkNodePolicy`, `SriovNetwork`,
//!   `SriovIBNetwork`, `SriovNetworkPoolConfig` (sriovnetwork.openshift.io/v1,
//!   the CRDs of the chart network-operator v26.1.0 bundles).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

/// k8s.cni.cncf.io/v1 NetworkAttachmentDefinition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAttachmentDefinition {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: ObjectMeta,
    pub spec: NadSpec,
}

#[derive(Debug, Clone, Serialize)]
pub struct NadSpec {
    /// The CNI network configuration, as a JSON string.
    pub config: String,
}

impl NetworkAttachmentDefinition {
    pub fn new(metadata: ObjectMeta, config: &CniConfig) -> Self {
        NetworkAttachmentDefinition {
            api_version: "k8s.cni.cncf.io/v1",
            kind: "NetworkAttachmentDefinition",
            metadata,
            spec: NadSpec {
                config: serde_json::to_string_pretty(config).expect("CNI config serializes"),
            },
        }
    }
}

/// A CNI network configuration for one of the secondary networks.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CniConfig {
    #[serde(rename = "cniVersion")]
    pub cni_version: &'static str,
    pub name: String,
    #[serde(flatten)]
    pub plugin: CniPlugin,
    pub ipam: Ipam,
}

/// The IPAM section of a CNI config.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Ipam {
    Whereabouts(WhereaboutsIpam),
    NvIpam(NvIpamConfig),
}

/// nv-ipam's CNI IPAM config: `{"type": "nv-ipam", "poolName": ...}`
/// (network-operator v26.1.0 example/crs/*nvidia-ipam*.yaml).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NvIpamConfig {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(rename = "poolName")]
    pub pool_name: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type")]
pub enum CniPlugin {
    /// Mellanox ipoib-cni: creates an IPoIB child of `master` in the pod.
    #[serde(rename = "ipoib")]
    Ipoib {
        master: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mtu: Option<u32>,
    },
    /// containernetworking macvlan over the RoCE netdev.
    #[serde(rename = "macvlan")]
    Macvlan {
        master: String,
        mode: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mtu: Option<u32>,
    },
    /// containernetworking host-device: moves the netdev itself into the pod.
    #[serde(rename = "host-device")]
    HostDevice { device: String },
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WhereaboutsIpam {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub range: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_end: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

/// k8s-rdma-shared-dev-plugin configuration (`config.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RdmaSharedConfig {
    pub periodic_update_interval: u32,
    pub config_list: Vec<RdmaResourceConfig>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RdmaResourceConfig {
    pub resource_name: String,
    pub resource_prefix: String,
    pub rdma_hca_max: u32,
    pub selectors: RdmaSelectors,
}

/// Values within one selector are OR'ed; selectors are AND'ed.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RdmaSelectors {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vendors: Vec<String>,
    #[serde(rename = "deviceIDs", skip_serializing_if = "Vec::is_empty")]
    pub device_ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drivers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub if_names: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub link_types: Vec<String>,
}

impl RdmaSelectors {
    pub fn is_empty(&self) -> bool {
        self.vendors.is_empty()
            && self.device_ids.is_empty()
            && self.drivers.is_empty()
            && self.if_names.is_empty()
            && self.link_types.is_empty()
    }
}

impl RdmaSharedConfig {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("plugin config serializes");
        s.push('\n');
        s
    }
}

/// mellanox.com/v1alpha1 NicClusterPolicy (cluster-scoped; the operator
/// expects the name `nic-cluster-policy`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NicClusterPolicy {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: ObjectMeta,
    pub spec: NicClusterPolicySpec,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NicClusterPolicySpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdma_shared_device_plugin: Option<ImageSpecWithConfig>,
    #[serde(rename = "ibKubernetes", skip_serializing_if = "Option::is_none")]
    pub ib_kubernetes: Option<IbKubernetesSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secondary_network: Option<SecondaryNetworkSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nv_ipam: Option<NvIpamSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImageSpec {
    pub image: String,
    pub repository: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImageSpecWithConfig {
    pub image: String,
    pub repository: String,
    pub version: String,
    pub config: String,
}

/// `secondaryNetwork` at v26.1.0: multus, cniPlugins, ipoib — nothing else.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecondaryNetworkSpec {
    pub multus: ImageSpec,
    pub cni_plugins: ImageSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipoib: Option<ImageSpec>,
}

/// `nvIpam`: the image plus `enableWebhook` (off: the webhook needs cert-manager).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NvIpamSpec {
    pub image: String,
    pub repository: String,
    pub version: String,
    pub enable_webhook: bool,
}

/// `ibKubernetes`: GUIDs for InfiniBand VFs from a pool, PKeys via UFM.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IbKubernetesSpec {
    pub image: String,
    pub repository: String,
    pub version: String,
    #[serde(rename = "pKeyGUIDPoolRangeStart")]
    pub pkey_guid_pool_range_start: String,
    #[serde(rename = "pKeyGUIDPoolRangeEnd")]
    pub pkey_guid_pool_range_end: String,
    pub ufm_secret: String,
}

/// A generic namespaced custom resource: apiVersion, kind, metadata, spec.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomResource<T: Serialize> {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: ObjectMeta,
    pub spec: T,
}

/// nv-ipam.nvidia.com/v1alpha1 IPPool spec (required: subnet, perNodeBlockSize).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpPoolSpec {
    pub subnet: String,
    pub per_node_block_size: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclusions: Vec<IpRange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<k8s_openapi::api::core::v1::NodeSelector>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IpRange {
    #[serde(rename = "startIP")]
    pub start_ip: String,
    #[serde(rename = "endIP")]
    pub end_ip: String,
}

/// sriovnetwork.openshift.io/v1 SriovNetworkNodePolicy spec.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SriovNetworkNodePolicySpec {
    pub resource_name: String,
    pub node_selector: std::collections::BTreeMap<String, String>,
    pub num_vfs: u32,
    pub nic_selector: SriovNicSelector,
    pub device_type: &'static str,
    pub is_rdma: bool,
    pub link_type: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SriovNicSelector {
    pub vendor: String,
    #[serde(rename = "deviceID")]
    pub device_id: String,
    pub pf_names: Vec<String>,
}

/// SriovNetwork / SriovIBNetwork spec (the fields fabperf sets).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SriovNetworkSpec {
    pub resource_name: String,
    pub network_namespace: String,
    /// The IPAM section as a JSON string.
    pub ipam: String,
    /// Chained after sriov-cni / ib-sriov-cni: rdma-cni moves the VF's RDMA
    /// device into the pod (exclusive netns mode).
    pub meta_plugins: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_state: Option<&'static str>,
}

/// SriovNetworkPoolConfig spec: the nodes' RDMA netns mode.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SriovNetworkPoolConfigSpec {
    pub node_selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    pub rdma_mode: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_config_json_shape() {
        let c = CniConfig {
            cni_version: "0.3.1",
            name: "ipoib-net".into(),
            plugin: CniPlugin::Ipoib {
                master: "ib0".into(),
                mtu: None,
            },
            ipam: Ipam::Whereabouts(WhereaboutsIpam {
                kind: "whereabouts",
                range: "192.168.5.0/24".into(),
                range_start: None,
                range_end: None,
                exclude: vec![],
            }),
        };
        let v: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cniVersion":"0.3.1","name":"ipoib-net","type":"ipoib","master":"ib0",
                "ipam":{"type":"whereabouts","range":"192.168.5.0/24"}})
        );
        let nv = Ipam::NvIpam(NvIpamConfig {
            kind: "nv-ipam",
            pool_name: "fabperf-roce".into(),
        });
        assert_eq!(
            serde_json::to_value(&nv).unwrap(),
            serde_json::json!({"type":"nv-ipam","poolName":"fabperf-roce"})
        );
        let h = CniPlugin::HostDevice {
            device: "ens1f0np0".into(),
        };
        assert_eq!(
            serde_json::to_value(&h).unwrap(),
            serde_json::json!({"type":"host-device","device":"ens1f0np0"})
        );
    }

    #[test]
    fn plugin_config_json_shape() {
        let c = RdmaSharedConfig {
            periodic_update_interval: 300,
            config_list: vec![RdmaResourceConfig {
                resource_name: "rdma_shared_device_a".into(),
                resource_prefix: "rdma".into(),
                rdma_hca_max: 1000,
                selectors: RdmaSelectors {
                    vendors: vec!["15b3".into()],
                    device_ids: vec!["101b".into()],
                    link_types: vec!["infiniband".into()],
                    ..Default::default()
                },
            }],
        };
        let v: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"periodicUpdateInterval":300,"configList":[{"resourceName":"rdma_shared_device_a",
              "resourcePrefix":"rdma","rdmaHcaMax":1000,"selectors":{"vendors":["15b3"],"deviceIDs":["101b"],
              "linkTypes":["infiniband"]}}]})
        );
    }
}
