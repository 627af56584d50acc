//! The built-in Kubernetes objects, typed with k8s-openapi.

use crate::plan::{PathKind, Plan};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, Container, ContainerPort, EnvVar, EnvVarSource, KeyToPath,
    Namespace, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, Secret, SecretVolumeSource,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

pub const APP_NAME: &str = "fabperf-agent";
pub const PATH_LABEL: &str = "fabperf.io/path";
pub const SERVICE_ACCOUNT: &str = "fabperf-agent";
pub const TOKEN_SECRET: &str = "fabperf-agent-token";
pub const TOKEN_KEY: &str = "token";
pub const TOKEN_DIR: &str = "/etc/fabperf";
pub const MULTUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
/// Interface names the secondary networks get inside the agent pods.
pub const IPOIB_POD_IF: &str = "ipoib0";
pub const ROCE_POD_IF: &str = "roce0";
/// Non-root user for agents that need no privileges.
pub const AGENT_UID: i64 = 65532;

fn common_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        (
            "app.kubernetes.io/part-of".to_string(),
            "fabperf".to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "fabperf".to_string(),
        ),
    ])
}

/// The labels that select the agents of one path.
pub fn selector_labels(path: PathKind) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        (PATH_LABEL.to_string(), path.name().to_string()),
    ])
}

fn meta(name: &str, namespace: Option<&str>, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels),
        ..Default::default()
    }
}

/// Pod Security Admission level the agents need: `host` (hostNetwork) and
/// `roce` (root + CAP_IPC_LOCK) need `privileged`; the others meet `restricted`.
pub fn pod_security_level(plan: &Plan) -> &'static str {
    if plan.has(PathKind::Host) || plan.has(PathKind::Roce) {
        "privileged"
    } else {
        "restricted"
    }
}

pub fn namespace(plan: &Plan) -> Namespace {
    let mut labels = common_labels();
    labels.insert(
        "pod-security.kubernetes.io/enforce".into(),
        pod_security_level(plan).into(),
    );
    Namespace {
        metadata: meta(&plan.namespace, None, labels),
        ..Default::default()
    }
}

/// The agents' identity: no token mounted, no Role or RoleBinding anywhere,
/// so the agents have no Kubernetes API permissions at all.
pub fn service_account(plan: &Plan) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(SERVICE_ACCOUNT, Some(&plan.namespace), common_labels()),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

pub fn token_secret(plan: &Plan) -> Secret {
    Secret {
        metadata: meta(TOKEN_SECRET, Some(&plan.namespace), common_labels()),
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([(
            TOKEN_KEY.to_string(),
            plan.token.clone(),
        )])),
        ..Default::default()
    }
}

pub fn daemonset_name(path: PathKind) -> String {
    format!("fabperf-{}", path.name())
}

/// The multus network selection for a path (only ipoib and roce have one).
pub fn multus_networks(plan: &Plan, path: PathKind) -> Option<String> {
    match path {
        PathKind::Ipoib => plan
            .ipoib
            .as_ref()
            .map(|i| format!("{}/{}@{IPOIB_POD_IF}", plan.namespace, i.nad_name)),
        PathKind::Roce => plan
            .roce
            .as_ref()
            .map(|r| format!("{}/{}@{ROCE_POD_IF}", plan.namespace, r.nad_name)),
        _ => None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn affinity(plan: &Plan, path: PathKind) -> Affinity {
    let node_affinity = if plan.node_names.is_empty() {
        None
    } else {
        Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: HOSTNAME_KEY.into(),
                        operator: "In".into(),
                        values: Some(plan.node_names.clone()),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        })
    };
    Affinity {
        node_affinity,
        // Two agents of one path on one node would measure loopback, not the fabric.
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(selector_labels(path)),
                    ..Default::default()
                }),
                topology_key: HOSTNAME_KEY.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn agent_ports(plan: &Plan) -> Vec<ContainerPort> {
    vec![
        ContainerPort {
            name: Some("control".into()),
            container_port: plan.control_port as i32,
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        ContainerPort {
            name: Some("control-udp".into()),
            container_port: plan.control_port as i32,
            protocol: Some("UDP".into()),
            ..Default::default()
        },
    ]
}

fn agent_container(plan: &Plan, path: PathKind) -> Container {
    let mut env = vec![
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
        value_env("FABPERF_PATH", path.name()),
    ];
    match path {
        PathKind::Ipoib => env.push(value_env("FABPERF_PATH_INTERFACE", IPOIB_POD_IF)),
        PathKind::Roce => env.push(value_env("FABPERF_PATH_INTERFACE", ROCE_POD_IF)),
        _ => {}
    }
    let (resources, security_context) = if path == PathKind::Roce {
        // RDMA memory registration pins pages: it needs CAP_IPC_LOCK (effective
        // only for root) or a large RLIMIT_MEMLOCK from the container runtime.
        (
            Some(ResourceRequirements {
                limits: Some(BTreeMap::from([(
                    plan.rdma_resource.clone(),
                    Quantity("1".into()),
                )])),
                ..Default::default()
            }),
            SecurityContext {
                run_as_user: Some(0),
                run_as_non_root: Some(false),
                capabilities: Some(Capabilities {
                    add: Some(vec!["IPC_LOCK".into()]),
                    drop: Some(vec!["ALL".into()]),
                }),
                allow_privilege_escalation: Some(false),
                ..Default::default()
            },
        )
    } else {
        (
            None,
            SecurityContext {
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Default::default()
                }),
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                ..Default::default()
            },
        )
    };
    Container {
        name: "agent".into(),
        image: Some(plan.image.clone()),
        image_pull_policy: Some(plan.image_pull_policy.clone()),
        command: Some(vec![
            "fabperf".into(),
            "server".into(),
            "--bind".into(),
            "0.0.0.0".into(),
            "--port".into(),
            plan.control_port.to_string(),
            "--token-file".into(),
            format!("{TOKEN_DIR}/{TOKEN_KEY}"),
        ]),
        ports: Some(agent_ports(plan)),
        env: Some(env),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(plan.control_port as i32),
                ..Default::default()
            }),
            initial_delay_seconds: Some(2),
            period_seconds: Some(5),
            ..Default::default()
        }),
        resources,
        security_context: Some(security_context),
        volume_mounts: Some(vec![VolumeMount {
            name: "token".into(),
            mount_path: TOKEN_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// One agent DaemonSet for a path (host, pod, ipoib or roce).
pub fn agent_daemonset(plan: &Plan, path: PathKind) -> DaemonSet {
    assert!(
        path.has_daemonset(),
        "path {} has no DaemonSet",
        path.name()
    );
    let mut labels = common_labels();
    labels.insert(PATH_LABEL.into(), path.name().into());
    let annotations =
        multus_networks(plan, path).map(|n| BTreeMap::from([(MULTUS_ANNOTATION.to_string(), n)]));
    let host = path == PathKind::Host;
    let seccomp = Some(SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    });
    let pod_security = if path == PathKind::Roce {
        PodSecurityContext {
            seccomp_profile: seccomp,
            ..Default::default()
        }
    } else {
        PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(AGENT_UID),
            run_as_group: Some(AGENT_UID),
            fs_group: Some(AGENT_UID),
            seccomp_profile: seccomp,
            ..Default::default()
        }
    };
    DaemonSet {
        metadata: meta(&daemonset_name(path), Some(&plan.namespace), labels.clone()),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(selector_labels(path)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations,
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(SERVICE_ACCOUNT.into()),
                    automount_service_account_token: Some(false),
                    host_network: host.then_some(true),
                    dns_policy: host.then(|| "ClusterFirstWithHostNet".to_string()),
                    node_selector: (!plan.node_selector.is_empty())
                        .then(|| plan.node_selector.clone()),
                    affinity: Some(affinity(plan, path)),
                    security_context: Some(pod_security),
                    termination_grace_period_seconds: Some(10),
                    containers: vec![agent_container(plan, path)],
                    volumes: Some(vec![Volume {
                        name: "token".into(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(TOKEN_SECRET.into()),
                            items: Some(vec![KeyToPath {
                                key: TOKEN_KEY.into(),
                                path: TOKEN_KEY.into(),
                                ..Default::default()
                            }]),
                            default_mode: Some(0o440),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

fn service_ports(plan: &Plan) -> Vec<ServicePort> {
    vec![
        ServicePort {
            name: Some("control".into()),
            port: plan.control_port as i32,
            target_port: Some(IntOrString::Int(plan.control_port as i32)),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        ServicePort {
            name: Some("control-udp".into()),
            port: plan.control_port as i32,
            target_port: Some(IntOrString::Int(plan.control_port as i32)),
            protocol: Some("UDP".into()),
            ..Default::default()
        },
    ]
}

/// Headless Service: DNS lists every agent of the path (discovery).
pub fn headless_service(plan: &Plan, path: PathKind) -> Service {
    let mut labels = common_labels();
    labels.insert(PATH_LABEL.into(), path.name().into());
    Service {
        metadata: meta(&daemonset_name(path), Some(&plan.namespace), labels),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector_labels(path)),
            ports: Some(service_ports(plan)),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// ClusterIP Service in front of the `pod` agents (pod-to-service path).
pub fn cluster_ip_service(plan: &Plan) -> Service {
    let mut labels = common_labels();
    labels.insert(PATH_LABEL.into(), PathKind::Service.name().into());
    Service {
        metadata: meta("fabperf-service", Some(&plan.namespace), labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(PathKind::Pod)),
            ports: Some(service_ports(plan)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// ConfigMap `rdma-devices` in kube-system for k8s-rdma-shared-dev-plugin.
pub fn rdma_devices_configmap(config_json: &str) -> ConfigMap {
    let mut labels = common_labels();
    labels.insert(
        "app.kubernetes.io/component".into(),
        "rdma-shared-device-plugin-config".into(),
    );
    ConfigMap {
        metadata: meta("rdma-devices", Some("kube-system"), labels),
        data: Some(BTreeMap::from([(
            "config.json".to_string(),
            config_json.to_string(),
        )])),
        ..Default::default()
    }
}
