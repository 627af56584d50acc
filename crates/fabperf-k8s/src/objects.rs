//! The built-in Kubernetes objects, typed with k8s-openapi.

use crate::plan::{Attach, PathKind, Plan, DEFAULT_SRIOV_PREFIX};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    EnvVarSource, KeyToPath, Namespace, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, Secret,
    SecretVolumeSource, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec,
    TCPSocketAction, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::Digest;
use std::collections::BTreeMap;

pub const APP_NAME: &str = "fabperf-agent";
pub const PATH_LABEL: &str = "fabperf.io/path";
pub const SERVICE_ACCOUNT: &str = "fabperf-agent";
pub const TOKEN_SECRET: &str = "fabperf-agent-token";
pub const TOKEN_KEY: &str = "token";
pub const TOKEN_DIR: &str = "/etc/fabperf";
/// ConfigMap (and mount) with each node's fabric address for the host path.
pub const HOST_ADDRESSES: &str = "fabperf-host-addresses";
pub const HOST_ADDRESSES_DIR: &str = "/etc/fabperf-host";
/// Memory the agent keeps for itself beyond what one test may allocate.
pub const AGENT_MEMORY_HEADROOM_MIB: u64 = 256;
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
    if plan.has(PathKind::Host) || PathKind::ALL.iter().any(|p| needs_rdma(plan, *p)) {
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

/// The Secret with the agent token (only rendered from a token file).
pub fn token_secret(plan: &Plan, token: &str) -> Secret {
    Secret {
        metadata: meta(TOKEN_SECRET, Some(&plan.namespace), common_labels()),
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([(TOKEN_KEY.to_string(), token.to_string())])),
        ..Default::default()
    }
}

/// The command that creates the token Secret when the plan has no token file.
pub fn create_secret_command(plan: &Plan) -> String {
    format!(
        "kubectl -n {} create secret generic {TOKEN_SECRET} --from-file={TOKEN_KEY}=TOKEN_FILE",
        plan.namespace
    )
}

/// Whether the agents of a path drive an RDMA device (root + CAP_IPC_LOCK,
/// an RDMA resource).
pub fn needs_rdma(plan: &Plan, path: PathKind) -> bool {
    match path {
        PathKind::Roce => plan.has(PathKind::Roce),
        PathKind::Ipoib => {
            plan.has(PathKind::Ipoib)
                && plan
                    .ipoib
                    .as_ref()
                    .is_some_and(|i| i.attach == Attach::Sriov)
        }
        _ => false,
    }
}

/// The extended resource a path's pods request for their RDMA device.
pub fn rdma_resource_of(plan: &Plan, path: PathKind) -> Option<String> {
    let sriov = plan.sriov.as_ref();
    match path {
        PathKind::Roce => match (plan.roce.as_ref().map(|r| r.attach), sriov) {
            (Some(Attach::Sriov), Some(s)) => {
                Some(format!("{DEFAULT_SRIOV_PREFIX}/{}", s.roce_resource))
            }
            (Some(_), _) => Some(plan.rdma_resource.clone()),
            _ => None,
        },
        PathKind::Ipoib => match (plan.ipoib.as_ref().map(|i| i.attach), sriov) {
            (Some(Attach::Sriov), Some(s)) => {
                Some(format!("{DEFAULT_SRIOV_PREFIX}/{}", s.ib_resource))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The agent pods' tolerations.
pub fn tolerations(plan: &Plan) -> Vec<Toleration> {
    plan.tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: Some(t.operator.clone()),
            value: t.value.clone(),
            effect: t.effect.clone(),
            ..Default::default()
        })
        .collect()
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

/// An environment variable from the pod's own fields (downward API).
pub(crate) fn field_env(name: &str, path: &str) -> EnvVar {
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

/// An environment variable with a literal value.
pub(crate) fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The nodes a path's agents run on: the plan's node names, else the nodes
/// with a detect file (so no pod waits on a node that was never inventoried
/// and no mesh includes a node without a host baseline); for a host path
/// bound to a fabric link only the nodes whose address on it is known.
/// Empty: selected by label only.
pub fn node_names_for(plan: &Plan, path: PathKind) -> Vec<String> {
    match (&plan.host, path) {
        (Some(h), PathKind::Host) => h.addresses.keys().cloned().collect(),
        _ => plan.agent_nodes().to_vec(),
    }
}

/// The node field the agents' affinity matches: the Node object's name,
/// which `spec.nodeName` (the agents' `--node-name`, the host addresses'
/// ConfigMap keys) is. The `kubernetes.io/hostname` label may differ from
/// it (cloud providers, kubelet --hostname-override).
pub const NODE_NAME_FIELD: &str = "metadata.name";

/// `metadata.name In names` (or `NotIn`) as a node selector requirement,
/// for `matchFields`.
pub fn name_requirement(names: &[String], operator: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: NODE_NAME_FIELD.into(),
        operator: operator.into(),
        values: Some(names.to_vec()),
    }
}

/// The plan's node selection as a NodeSelector (for nv-ipam IPPools, whose
/// controller matches it with MatchNodeSelectorTerms: matchFields on
/// metadata.name included).
pub fn node_selector_terms(plan: &Plan) -> NodeSelector {
    let exprs: Vec<NodeSelectorRequirement> = plan
        .node_selector
        .iter()
        .map(|(k, v)| NodeSelectorRequirement {
            key: k.clone(),
            operator: "In".into(),
            values: Some(vec![v.clone()]),
        })
        .collect();
    let names = plan.agent_nodes();
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: (!exprs.is_empty() || names.is_empty()).then_some(exprs),
            match_fields: (!names.is_empty()).then(|| vec![name_requirement(names, "In")]),
        }],
    }
}

fn affinity(path: PathKind, names: Vec<String>) -> Affinity {
    let node_affinity = if names.is_empty() {
        None
    } else {
        Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![name_requirement(&names, "In")]),
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

/// The interface whose address other agents must use to test a path, for
/// `fabperf server --advertise`: the secondary network's interface in the
/// pod (the headless Service lists the pod's primary address, which the
/// runner uses only for control).
pub fn advertise_interface(path: PathKind) -> Option<&'static str> {
    match path {
        PathKind::Ipoib => Some(IPOIB_POD_IF),
        PathKind::Roce => Some(ROCE_POD_IF),
        _ => None,
    }
}

/// The `fabperf server` arguments after `--bind ADDRESS` (and, for the host
/// path bound to the fabric link, the identity arguments the shell adds).
fn server_args(plan: &Plan, path: PathKind) -> Vec<String> {
    vec![
        // The path label the agent announces: runs store it with every
        // measurement of this agent.
        "--path-label".into(),
        path.name().into(),
        "--port".into(),
        plan.control_port.to_string(),
        "--token-file".into(),
        format!("{TOKEN_DIR}/{TOKEN_KEY}"),
        // One test may allocate this much; the rest of the container's
        // memory limit is the agent's own headroom.
        "--max-memory".into(),
        format!(
            "{}M",
            plan.resources
                .memory_mib
                .saturating_sub(AGENT_MEMORY_HEADROOM_MIB)
        ),
    ]
}

/// A shell word: as is when it holds only safe characters, else single-quoted.
fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./=:-".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The host agent of a fabric link: read this node's address on it from
/// the ConfigMap mounted at HOST_ADDRESSES_DIR (POSIX sh builtins only) and
/// exec the agent on every address (so the runner, on any node, reaches its
/// control port at the node IP the headless Service lists), advertising the
/// fabric address as the one its path is tested on.
pub fn host_fabric_command(plan: &Plan) -> Vec<String> {
    let args: Vec<String> = server_args(plan, PathKind::Host)
        .iter()
        .map(|a| sh_quote(a))
        .collect();
    let iface = plan
        .host
        .as_ref()
        .map(|h| h.interface.as_str())
        .unwrap_or("");
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "addr=; read -r addr < \"{HOST_ADDRESSES_DIR}/$NODE_NAME\"; if [ -z \"$addr\" ]; then echo \"fabperf: node $NODE_NAME has no {iface} address in ConfigMap {HOST_ADDRESSES}; add its detect file to the plan and render again\" >&2; exit 1; fi; exec fabperf server --bind 0.0.0.0 --advertise \"$addr\" --node-name \"$NODE_NAME\" {}",
            args.join(" ")
        ),
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
        PathKind::Host => {
            if let Some(h) = &plan.host {
                env.push(value_env("FABPERF_PATH_INTERFACE", &h.interface));
            }
        }
        _ => {}
    }
    // Guaranteed QoS: requests = limits, whole CPUs (the static CPU manager
    // pins such containers to exclusive cores).
    let mut limits = BTreeMap::from([
        ("cpu".to_string(), Quantity(plan.resources.cpu.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Mi", plan.resources.memory_mib)),
        ),
    ]);
    if let Some(r) = rdma_resource_of(plan, path) {
        limits.insert(r, Quantity("1".into()));
        // GPU memory tests ([gpu]): the GPUs and the rails' RDMA resources, see crate::gpu.
        if let Some(g) = plan
            .gpu
            .as_ref()
            .filter(|_| crate::gpu::applies_to(true, path))
        {
            limits.extend(g.limits().into_iter().map(|(k, v)| (k, Quantity(v))));
            env.extend(g.env().into_iter().map(|(k, v)| value_env(k, v)));
        }
    }
    let resources = Some(ResourceRequirements {
        requests: Some(limits.clone()),
        limits: Some(limits),
        ..Default::default()
    });
    let security_context = if needs_rdma(plan, path) {
        // RDMA memory registration pins pages: it needs CAP_IPC_LOCK (effective
        // only for root) or a large RLIMIT_MEMLOCK from the container runtime.
        SecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            capabilities: Some(Capabilities {
                add: Some(vec!["IPC_LOCK".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }
    } else {
        SecurityContext {
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }
    };
    let host_fabric = path == PathKind::Host && plan.host.is_some();
    let command = if host_fabric {
        host_fabric_command(plan)
    } else {
        let mut c: Vec<String> = vec![
            "fabperf".into(),
            "server".into(),
            "--bind".into(),
            "0.0.0.0".into(),
        ];
        if let Some(iface) = advertise_interface(path) {
            c.extend(["--advertise".into(), iface.into()]);
        }
        // The kubelet expands $(NODE_NAME) from the env (spec.nodeName).
        c.extend(["--node-name".into(), "$(NODE_NAME)".into()]);
        c.extend(server_args(plan, path));
        c
    };
    // The kubelet probes the pod IP (the node IP with hostNetwork), where
    // every agent listens.
    let readiness_probe = Some(Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(plan.control_port as i32),
            ..Default::default()
        }),
        initial_delay_seconds: Some(2),
        period_seconds: Some(5),
        ..Default::default()
    });
    let mut volume_mounts = vec![VolumeMount {
        name: "token".into(),
        mount_path: TOKEN_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }];
    if host_fabric {
        volume_mounts.push(VolumeMount {
            name: "host-addresses".into(),
            mount_path: HOST_ADDRESSES_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    Container {
        name: "agent".into(),
        image: Some(plan.image.clone()),
        image_pull_policy: Some(plan.image_pull_policy.clone()),
        command: Some(command),
        ports: Some(agent_ports(plan)),
        env: Some(env),
        readiness_probe,
        resources,
        security_context: Some(security_context),
        volume_mounts: Some(volume_mounts),
        ..Default::default()
    }
}

/// A node name as a label value and a DNS-1035 name part (at most 40
/// characters: `fabperf-svc-` + it fits a Service name's 63): the name
/// itself when it is one, else its lower-case letters and digits with `-`
/// for the rest, cut, and a hash of the whole name.
pub fn node_key(node: &str) -> String {
    let plain = node.len() <= 40
        && node
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !node.starts_with('-')
        && !node.ends_with('-');
    if plain {
        return node.to_string();
    }
    let mut s: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(31)
        .collect();
    while s.ends_with('-') {
        s.pop();
    }
    let h = sha2::Sha256::digest(node.as_bytes());
    format!(
        "{}{}{:02x}{:02x}{:02x}{:02x}",
        s,
        if s.is_empty() { "n" } else { "-" },
        h[0],
        h[1],
        h[2],
        h[3]
    )
}

/// The pod label naming an agent's node (by its [`node_key`]): the
/// single-endpoint Service of the service path selects one agent by it.
pub const NODE_LABEL: &str = "fabperf.io/node";

/// The single-endpoint Service in front of one node's pod agent.
pub fn node_service_name(node: &str) -> String {
    format!("fabperf-svc-{}", node_key(node))
}

/// The agent DaemonSets of a path: one for every node when the plan has the
/// service path and this is the pod path (each pod labelled with its node,
/// so one Service can select exactly one agent), else one.
pub fn agent_daemonsets(plan: &Plan, path: PathKind) -> Vec<DaemonSet> {
    if path == PathKind::Pod && plan.has(PathKind::Service) {
        plan.agent_nodes()
            .iter()
            .map(|n| agent_daemonset_for(plan, path, Some(n)))
            .collect()
    } else {
        vec![agent_daemonset_for(plan, path, None)]
    }
}

/// One agent DaemonSet for a path (host, pod, ipoib or roce).
pub fn agent_daemonset(plan: &Plan, path: PathKind) -> DaemonSet {
    agent_daemonset_for(plan, path, None)
}

/// One agent DaemonSet for a path, on one node when `node` is given.
fn agent_daemonset_for(plan: &Plan, path: PathKind, node: Option<&String>) -> DaemonSet {
    assert!(
        path.has_daemonset(),
        "path {} has no DaemonSet",
        path.name()
    );
    let mut labels = common_labels();
    labels.insert(PATH_LABEL.into(), path.name().into());
    let mut selector = selector_labels(path);
    if let Some(n) = node {
        labels.insert(NODE_LABEL.into(), node_key(n));
        selector.insert(NODE_LABEL.into(), node_key(n));
    }
    let names = match node {
        Some(n) => vec![n.clone()],
        None => node_names_for(plan, path),
    };
    let name = match node {
        Some(n) => format!("{}-{}", daemonset_name(path), node_key(n)),
        None => daemonset_name(path),
    };
    let annotations =
        multus_networks(plan, path).map(|n| BTreeMap::from([(MULTUS_ANNOTATION.to_string(), n)]));
    let host = path == PathKind::Host;
    let seccomp = Some(SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    });
    let pod_security = if needs_rdma(plan, path) {
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
        metadata: meta(&name, Some(&plan.namespace), labels.clone()),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(selector),
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
                    affinity: Some(affinity(path, names)),
                    tolerations: (!plan.tolerations.is_empty()).then(|| tolerations(plan)),
                    security_context: Some(pod_security),
                    termination_grace_period_seconds: Some(10),
                    containers: vec![agent_container(plan, path)],
                    volumes: Some(agent_volumes(plan, path)),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

fn agent_volumes(plan: &Plan, path: PathKind) -> Vec<Volume> {
    let mut v = vec![Volume {
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
    }];
    if path == PathKind::Host && plan.host.is_some() {
        v.push(Volume {
            name: "host-addresses".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: HOST_ADDRESSES.into(),
                default_mode: Some(0o444),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    v
}

/// Each node's fabric address, one key per node name, for the host agents.
pub fn host_addresses_configmap(plan: &Plan) -> Option<ConfigMap> {
    let h = plan.host.as_ref()?;
    let mut labels = common_labels();
    labels.insert(PATH_LABEL.into(), PathKind::Host.name().into());
    Some(ConfigMap {
        metadata: meta(HOST_ADDRESSES, Some(&plan.namespace), labels),
        data: Some(h.addresses.clone()),
        ..Default::default()
    })
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

/// The service path: one ClusterIP Service per node whose only endpoint is
/// that node's pod agent, so every connection and datagram of a test
/// (TCP and UDP alike) reaches the agent the address names, through
/// kube-proxy's Service translation.
pub fn node_services(plan: &Plan) -> Vec<Service> {
    plan.agent_nodes()
        .iter()
        .map(|n| {
            let mut labels = common_labels();
            labels.insert(PATH_LABEL.into(), PathKind::Service.name().into());
            labels.insert(NODE_LABEL.into(), node_key(n));
            let mut selector = selector_labels(PathKind::Pod);
            selector.insert(NODE_LABEL.into(), node_key(n));
            Service {
                metadata: meta(&node_service_name(n), Some(&plan.namespace), labels),
                spec: Some(ServiceSpec {
                    type_: Some("ClusterIP".into()),
                    selector: Some(selector),
                    ports: Some(service_ports(plan)),
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
        .collect()
}

/// ClusterIP Service in front of all the `pod` agents: kube-proxy picks an
/// endpoint for every connection (and for the UDP port on its own), so it
/// suits HTTP load across endpoints, not socket tests of one agent.
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

/// Release of Mellanox/ipoib-cni whose DaemonSet the standalone install uses
/// (images/ipoib-cni-daemonset.yaml at that tag; its release workflow
/// pushes the lower-case ghcr.io/mellanox/ipoib-cni:TAG).
pub const IPOIB_CNI_VERSION: &str = "v1.2.2";
/// Release of Mellanox/k8s-rdma-shared-dev-plugin whose DaemonSet the
/// standalone install uses (deployment/k8s/base/daemonset.yaml at that tag).
pub const RDMA_SHARED_DP_VERSION: &str = "v1.5.3";

fn host_path_volume(name: &str, path: &str) -> Volume {
    Volume {
        name: name.into(),
        host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: path.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

/// The upstream DaemonSets tolerate only the control-plane taints; GPU nodes
/// are commonly tainted `nvidia.com/gpu:NoSchedule`, so the plan's
/// tolerations are added to theirs.
fn with_plan_tolerations(upstream: Vec<Toleration>, plan: &[Toleration]) -> Vec<Toleration> {
    let mut v = upstream;
    for t in plan {
        if !v.contains(t) {
            v.push(t.clone());
        }
    }
    v
}

/// ipoib-cni's DaemonSet as upstream ships it at [`IPOIB_CNI_VERSION`]
/// (kube-system/kube-ipoib-cni-ds: copies the ipoib binary into
/// /opt/cni/bin), with the image pinned and valid (upstream names
/// `ghcr.io/Mellanox/ipoib-cni:latest`, which kubelet refuses as
/// InvalidImageName) and the plan's tolerations added.
pub fn standalone_ipoib_cni(tolerations: &[Toleration]) -> DaemonSet {
    let labels = BTreeMap::from([
        ("tier".to_string(), "node".to_string()),
        ("app".to_string(), "ipoib-cni".to_string()),
    ]);
    let mut pod_labels = labels.clone();
    pod_labels.insert("name".into(), "ipoib-cni".into());
    let control_plane = [
        "node-role.kubernetes.io/master",
        "node-role.kubernetes.io/control-plane",
    ]
    .iter()
    .map(|k| Toleration {
        key: Some((*k).into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    })
    .collect();
    let res = BTreeMap::from([
        ("cpu".to_string(), Quantity("100m".into())),
        ("memory".to_string(), Quantity("50Mi".into())),
    ]);
    DaemonSet {
        metadata: meta("kube-ipoib-cni-ds", Some("kube-system"), labels),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "name".to_string(),
                    "ipoib-cni".to_string(),
                )])),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    host_network: Some(true),
                    tolerations: Some(with_plan_tolerations(control_plane, tolerations)),
                    containers: vec![Container {
                        name: "kube-ipoib-cni".into(),
                        image: Some(format!("ghcr.io/mellanox/ipoib-cni:{IPOIB_CNI_VERSION}")),
                        image_pull_policy: Some("IfNotPresent".into()),
                        security_context: Some(SecurityContext {
                            privileged: Some(true),
                            ..Default::default()
                        }),
                        resources: Some(ResourceRequirements {
                            requests: Some(res.clone()),
                            limits: Some(res),
                            ..Default::default()
                        }),
                        volume_mounts: Some(vec![mount("cnibin", "/host/opt/cni/bin")]),
                        ..Default::default()
                    }],
                    volumes: Some(vec![host_path_volume("cnibin", "/opt/cni/bin")]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// k8s-rdma-shared-dev-plugin's DaemonSet as upstream ships it at
/// [`RDMA_SHARED_DP_VERSION`] (kube-system/rdma-shared-dp-ds, config from
/// ConfigMap rdma-devices), with the image pinned (upstream names it without
/// a tag) and the plan's tolerations (upstream has none).
pub fn standalone_rdma_shared_dp(tolerations: &[Toleration]) -> DaemonSet {
    let sel = BTreeMap::from([("name".to_string(), "rdma-shared-dp-ds".to_string())]);
    DaemonSet {
        metadata: ObjectMeta {
            name: Some("rdma-shared-dp-ds".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(sel.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(sel),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    host_network: Some(true),
                    priority_class_name: Some("system-node-critical".into()),
                    tolerations: (!tolerations.is_empty()).then(|| tolerations.to_vec()),
                    containers: vec![Container {
                        name: "k8s-rdma-shared-dp-ds".into(),
                        image: Some(format!(
                            "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:{RDMA_SHARED_DP_VERSION}"
                        )),
                        image_pull_policy: Some("IfNotPresent".into()),
                        security_context: Some(SecurityContext {
                            privileged: Some(true),
                            ..Default::default()
                        }),
                        volume_mounts: Some(vec![
                            VolumeMount {
                                read_only: Some(false),
                                ..mount("device-plugin", "/var/lib/kubelet/device-plugins")
                            },
                            VolumeMount {
                                read_only: Some(false),
                                ..mount("plugins-registry", "/var/lib/kubelet/plugins_registry")
                            },
                            mount("config", "/k8s-rdma-shared-dev-plugin"),
                            mount("devs", "/dev/"),
                        ]),
                        ..Default::default()
                    }],
                    volumes: Some(vec![
                        host_path_volume("device-plugin", "/var/lib/kubelet/device-plugins"),
                        host_path_volume("plugins-registry", "/var/lib/kubelet/plugins_registry"),
                        Volume {
                            name: "config".into(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: "rdma-devices".into(),
                                items: Some(vec![KeyToPath {
                                    key: "config.json".into(),
                                    path: "config.json".into(),
                                    ..Default::default()
                                }]),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        host_path_volume("devs", "/dev/"),
                    ]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}
