//! The keys a k8s plan may hold: the TOML as read, with spans, before any
//! rule is checked. Unknown keys are refused here (`deny_unknown_fields`).

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub(super) type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlan {
    pub(crate) namespace: Option<S<String>>,
    pub(crate) image: S<String>,
    pub(crate) image_pull_policy: Option<S<String>>,
    pub(crate) paths: S<Vec<S<String>>>,
    pub(crate) control_port: Option<S<i64>>,
    pub(crate) token: Option<S<String>>,
    pub(crate) token_file: Option<S<String>>,
    pub(crate) rdma_resource: Option<S<String>>,
    pub(crate) ipam: Option<S<String>>,
    pub(crate) nodes: Option<S<RawNodes>>,
    pub(crate) resources: Option<S<RawResources>>,
    pub(crate) detect: Option<S<BTreeMap<String, S<String>>>>,
    pub(crate) host: Option<S<RawHost>>,
    pub(crate) ipoib: Option<S<RawIpoib>>,
    pub(crate) roce: Option<S<RawRoce>>,
    pub(crate) sriov: Option<S<RawSriov>>,
    pub(crate) device_plugin: Option<S<RawDevicePlugin>>,
    pub(crate) network_operator: Option<S<RawOperator>>,
    pub(crate) cni: Option<S<RawCni>>,
    pub(crate) runner: Option<S<crate::runner::RawRunner>>,
    pub(crate) policy_scale: Option<S<crate::policy::RawPolicyScale>>,
    pub(crate) gpu: Option<S<crate::gpu::RawGpu>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNodes {
    pub(crate) names: Option<S<Vec<S<String>>>>,
    pub(crate) selector: Option<S<BTreeMap<String, S<String>>>>,
    pub(crate) tolerations: Option<S<Vec<S<RawToleration>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToleration {
    pub(crate) key: Option<S<String>>,
    pub(crate) operator: Option<S<String>>,
    pub(crate) value: Option<S<String>>,
    pub(crate) effect: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResources {
    pub(crate) cpu: Option<S<i64>>,
    pub(crate) memory: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHost {
    pub(crate) interface: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSriov {
    pub(crate) num_vfs: Option<S<i64>>,
    pub(crate) roce_resource: Option<S<String>>,
    pub(crate) ib_resource: Option<S<String>>,
    pub(crate) ufm_secret: Option<S<String>>,
    pub(crate) guid_pool_start: Option<S<String>>,
    pub(crate) guid_pool_end: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIpoib {
    pub(crate) nad_name: Option<S<String>>,
    pub(crate) attach: Option<S<String>>,
    pub(crate) master: Option<S<String>>,
    pub(crate) mode: Option<S<String>>,
    pub(crate) mtu: Option<S<i64>>,
    pub(crate) range: S<String>,
    pub(crate) range_start: Option<S<String>>,
    pub(crate) range_end: Option<S<String>>,
    pub(crate) exclude: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoce {
    pub(crate) nad_name: Option<S<String>>,
    pub(crate) attach: Option<S<String>>,
    pub(crate) netdev: Option<S<String>>,
    pub(crate) network_type: Option<S<String>>,
    pub(crate) macvlan_mode: Option<S<String>>,
    pub(crate) mtu: Option<S<i64>>,
    pub(crate) range: S<String>,
    pub(crate) range_start: Option<S<String>>,
    pub(crate) range_end: Option<S<String>>,
    pub(crate) exclude: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDevicePlugin {
    pub(crate) ib_resource: Option<S<String>>,
    pub(crate) rdma_hca_max: Option<S<i64>>,
    pub(crate) periodic_update_interval: Option<S<i64>>,
    pub(crate) vendors: Option<Vec<S<String>>>,
    pub(crate) device_ids: Option<Vec<S<String>>>,
    pub(crate) drivers: Option<Vec<S<String>>>,
    pub(crate) if_names: Option<Vec<S<String>>>,
    pub(crate) link_types: Option<Vec<S<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOperator {
    pub(crate) repository: Option<S<String>>,
    pub(crate) version: Option<S<String>>,
    pub(crate) namespace: Option<S<String>>,
    pub(crate) per_node_block_size: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCni {
    pub(crate) plugins: S<Vec<S<String>>>,
    pub(crate) interface: Option<S<String>>,
    pub(crate) underlay_mtu: Option<S<i64>>,
    pub(crate) encapsulation: S<String>,
    pub(crate) pod_cidr: S<String>,
}
