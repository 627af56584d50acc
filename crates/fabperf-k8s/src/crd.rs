//! Custom resources and embedded JSON configs, modelled with our own serde
//! structs (k8s-openapi only covers the built-in API):
//! - `NetworkAttachmentDefinition` (k8s.cni.cncf.io/v1), its CNI config;
//! - the k8s-rdma-shared-dev-plugin `config.json`;
//! - NVIDIA network-operator `NicClusterPolicy` (mellanox.com/v1alpha1).

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
    pub ipam: WhereaboutsIpam,
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
    pub rdma_shared_device_plugin: ImageSpecWithConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secondary_network: Option<SecondaryNetworkSpec>,
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

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecondaryNetworkSpec {
    pub multus: ImageSpec,
    pub cni_plugins: ImageSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipoib: Option<ImageSpec>,
    pub ipam_plugin: ImageSpec,
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
            ipam: WhereaboutsIpam {
                kind: "whereabouts",
                range: "192.168.5.0/24".into(),
                range_start: None,
                range_end: None,
                exclude: vec![],
            },
        };
        let v: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cniVersion":"0.3.1","name":"ipoib-net","type":"ipoib","master":"ib0",
                "ipam":{"type":"whereabouts","range":"192.168.5.0/24"}})
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
