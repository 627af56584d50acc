//! The fields that make each path what it is.

use fabperf_k8s::objects::{self, MULTUS_ANNOTATION};
use fabperf_k8s::plan::{parse_plan, PathKind, Plan};
use fabperf_k8s::render;
use fabperf_k8s::render::network_attachments as nads;
use k8s_openapi::api::apps::v1::DaemonSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example() -> Plan {
    let p = repo().join("examples/two-node-roce-ipoib.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    parse_plan(
        &text,
        "examples/two-node-roce-ipoib.toml",
        &repo().join("examples"),
    )
    .unwrap()
}

fn ds(plan: &Plan, p: PathKind) -> DaemonSet {
    objects::agent_daemonset(plan, p)
}

fn daemonset_paths() -> Vec<PathKind> {
    PathKind::ALL
        .into_iter()
        .filter(|p| p.has_daemonset())
        .collect()
}

#[test]
fn host_network_only_on_host() {
    let plan = example();
    for p in daemonset_paths() {
        let spec = ds(&plan, p).spec.template.spec.unwrap();
        if p == PathKind::Host {
            assert_eq!(spec.host_network, Some(true));
            assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
        } else {
            assert_eq!(spec.host_network, None, "{p:?}");
            assert_eq!(spec.dns_policy, None, "{p:?}");
        }
    }
}

#[test]
fn multus_annotation_only_on_secondary_paths() {
    let plan = example();
    for p in daemonset_paths() {
        let meta = ds(&plan, p).spec.template.metadata.unwrap();
        let ann = meta.annotations.unwrap_or_default();
        match p {
            PathKind::Ipoib => assert_eq!(ann[MULTUS_ANNOTATION], "fabperf/fabperf-ipoib@ipoib0"),
            PathKind::Roce => assert_eq!(ann[MULTUS_ANNOTATION], "fabperf/fabperf-roce@roce0"),
            _ => assert!(!ann.contains_key(MULTUS_ANNOTATION), "{p:?}"),
        }
    }
    // The annotations name NADs that are rendered in the same namespace.
    let names: Vec<String> = nads(&plan)
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["fabperf-ipoib", "fabperf-roce"]);
}

#[test]
fn ipc_lock_and_rdma_limit_only_on_roce() {
    let plan = example();
    for p in daemonset_paths() {
        let c = &ds(&plan, p).spec.template.spec.unwrap().containers[0];
        let caps = c
            .security_context
            .as_ref()
            .unwrap()
            .capabilities
            .as_ref()
            .unwrap();
        let limits = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        if p == PathKind::Roce {
            assert_eq!(caps.add.as_deref(), Some(&["IPC_LOCK".to_string()][..]));
            assert_eq!(limits["rdma/rdma_shared_device_a"].0, "1");
        } else {
            assert!(caps.add.is_none(), "{p:?}");
            assert!(!limits.keys().any(|k| k.starts_with("rdma/")), "{p:?}");
        }
        assert_eq!(
            caps.drop.as_deref(),
            Some(&["ALL".to_string()][..]),
            "{p:?}"
        );
    }
}

#[test]
fn anti_affinity_on_hostname_everywhere_and_selectors_match() {
    let plan = example();
    for p in daemonset_paths() {
        let d = ds(&plan, p);
        let tmpl_labels = d.spec.template.metadata.clone().unwrap().labels.unwrap();
        let sel = d.spec.selector.match_labels.clone().unwrap();
        for (k, v) in &sel {
            assert_eq!(
                tmpl_labels.get(k),
                Some(v),
                "{p:?}: selector must match template labels"
            );
        }
        let aff = d.spec.template.spec.clone().unwrap().affinity.unwrap();
        let terms = aff
            .pod_anti_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].topology_key, "kubernetes.io/hostname");
        assert_eq!(
            terms[0]
                .label_selector
                .clone()
                .unwrap()
                .match_labels
                .unwrap(),
            sel,
            "{p:?}"
        );
        // Nodes are the detected ones, pinned by name (matchFields
        // metadata.name: the Node object's name, what spec.nodeName and the
        // ConfigMaps use, not the kubernetes.io/hostname label), and tolerate
        // GPU taints.
        let spec = d.spec.template.spec.clone().unwrap();
        assert!(spec.node_selector.is_none(), "{p:?}");
        let tol = &spec.tolerations.unwrap()[0];
        assert_eq!(
            (
                tol.key.as_deref(),
                tol.operator.as_deref(),
                tol.effect.as_deref()
            ),
            (Some("nvidia.com/gpu"), Some("Exists"), Some("NoSchedule"))
        );
        let node = aff
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert!(node.node_selector_terms[0].match_expressions.is_none());
        let field = &node.node_selector_terms[0].match_fields.as_ref().unwrap()[0];
        assert_eq!(field.key, "metadata.name");
        assert_eq!(field.values.as_deref().unwrap(), ["node-a", "node-b"]);
        // Services find exactly these pods.
        let svc = objects::headless_service(&plan, p);
        assert_eq!(
            svc.spec.as_ref().unwrap().cluster_ip.as_deref(),
            Some("None")
        );
        assert_eq!(svc.spec.unwrap().selector.unwrap(), sel);
    }
    let cip = objects::cluster_ip_service(&plan).spec.unwrap();
    assert_eq!(
        cip.selector.unwrap(),
        objects::selector_labels(PathKind::Pod)
    );
}

#[test]
fn no_agent_has_api_permissions() {
    let plan = example();
    let sa = objects::service_account(&plan);
    assert_eq!(sa.automount_service_account_token, Some(false));
    for p in daemonset_paths() {
        let spec = ds(&plan, p).spec.template.spec.unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("fabperf-agent"));
        assert_eq!(spec.automount_service_account_token, Some(false));
    }
    // Nothing grants the agents' service account anything: the only Role
    // is the runner's (its Lease), bound to the runner's ServiceAccount.
    let r = render(&plan).unwrap();
    for f in r.manifests.iter().chain(&r.device_plugin) {
        for kind in ["ClusterRole", "ClusterRoleBinding"] {
            assert!(
                !f.content.contains(&format!("\nkind: {kind}\n")),
                "{} has a {kind}",
                f.rel_path
            );
        }
        if f.content.contains("\nkind: RoleBinding\n") {
            assert_eq!(f.rel_path, "run/00-runner.yaml");
            assert!(
                !f.content.contains("name: fabperf-agent\n  namespace"),
                "{}",
                f.content
            );
        }
    }
}

#[test]
fn agent_command_ports_probe_env_token() {
    let plan = example();
    for p in daemonset_paths() {
        let c = ds(&plan, p).spec.template.spec.unwrap().containers[0].clone();
        let cmd = c.command.clone().unwrap();
        let tail = [
            "--path-label",
            p.name(),
            "--port",
            "5301",
            "--token-file",
            "/etc/fabperf/token",
            "--max-memory",
            "3840M",
        ];
        if p == PathKind::Host {
            // On every address (the runner reaches the node IP), advertising
            // this node's fabric address, read from the ConfigMap.
            assert_eq!(&cmd[..2], ["/bin/sh", "-c"]);
            assert!(
                cmd[2].contains("exec fabperf server --bind 0.0.0.0 --advertise \"$addr\" --node-name \"$NODE_NAME\" --path-label host --port 5301 --token-file /etc/fabperf/token --max-memory 3840M"),
                "{cmd:?}"
            );
        } else {
            let mut want = vec!["fabperf", "server", "--bind", "0.0.0.0"];
            // Runs send other agents to the secondary interface's address,
            // not to the primary address the headless Service lists.
            match p {
                PathKind::Ipoib => want.extend(["--advertise", "ipoib0"]),
                PathKind::Roce => want.extend(["--advertise", "roce0"]),
                _ => {}
            }
            // The node name from the downward API (env NODE_NAME = spec.nodeName).
            want.extend(["--node-name", "$(NODE_NAME)"]);
            want.extend(tail);
            assert_eq!(cmd, want);
        }
        let ports: Vec<(i32, String)> = c
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.container_port, p.protocol.unwrap()))
            .collect();
        assert_eq!(
            ports,
            [(5301, "TCP".to_string()), (5301, "UDP".to_string())]
        );
        // Every agent listens on the address the kubelet probes.
        let probe = c.readiness_probe.clone().unwrap().tcp_socket.unwrap();
        assert_eq!(
            probe.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(5301)
        );
        // Guaranteed QoS: requests = limits, whole CPUs: 4 for the example's
        // 100 Gbit/s links (one per 25 Gbit/s).
        let res = c.resources.clone().unwrap();
        assert_eq!(res.requests, res.limits, "{p:?}");
        let lim = res.limits.unwrap();
        assert_eq!(lim["cpu"].0, "4");
        assert_eq!(lim["memory"].0, "4096Mi");
        let env = c.env.unwrap();
        let field = |n: &str| {
            env.iter()
                .find(|e| e.name == n)
                .and_then(|e| e.value_from.clone())
                .and_then(|v| v.field_ref)
                .map(|f| f.field_path)
        };
        assert_eq!(field("NODE_NAME").as_deref(), Some("spec.nodeName"));
        assert_eq!(field("POD_IP").as_deref(), Some("status.podIP"));
        assert_eq!(c.volume_mounts.unwrap()[0].mount_path, "/etc/fabperf");
    }
    let svc = objects::headless_service(&plan, PathKind::Pod)
        .spec
        .unwrap()
        .ports
        .unwrap();
    let protos: Vec<&str> = svc.iter().map(|p| p.protocol.as_deref().unwrap()).collect();
    assert_eq!(protos, ["TCP", "UDP"]);
}

#[test]
fn device_plugin_selectors_come_from_detect() {
    let plan = example();
    let cfg = plan.device_plugin.clone().unwrap();
    let rc = &cfg.config_list[0];
    assert_eq!(rc.resource_prefix, "rdma");
    assert_eq!(rc.resource_name, "rdma_shared_device_a");
    // Only the RoCE NIC (ConnectX-6 Dx, 101d) behind ens1f0np0, not the IB HCA.
    assert_eq!(rc.selectors.vendors, ["15b3"]);
    assert_eq!(rc.selectors.device_ids, ["101d"]);
    assert_eq!(rc.selectors.drivers, ["mlx5_core"]);
    assert_eq!(rc.selectors.link_types, ["ether"]);
    assert_eq!(rc.selectors.if_names, ["ens1f0np0"]);
}

#[test]
fn render_is_deterministic_and_names_concerns() {
    let plan = example();
    let a = render(&plan).unwrap();
    let b = render(&plan).unwrap();
    assert_eq!(a, b);
    let names: Vec<&str> = a.manifests.iter().map(|f| f.rel_path.as_str()).collect();
    assert_eq!(
        names,
        [
            "00-namespace.yaml",
            "10-networks.yaml",
            "11-ippools.yaml",
            "20-agent-host.yaml",
            "20-agent-pod.yaml",
            "21-service.yaml",
            "20-agent-ipoib.yaml",
            "20-agent-roce.yaml",
            "cni/antrea-values.yaml",
            "cni/calico-values.yaml",
            "cni/flannel-values.yaml",
            "run/00-runner.yaml",
            "run/10-job.yaml",
        ]
    );
    let dp: Vec<&str> = a
        .device_plugin
        .iter()
        .map(|f| f.rel_path.as_str())
        .collect();
    assert_eq!(
        dp,
        [
            "config.json",
            "rdma-devices-configmap.yaml",
            "ipoib-cni-daemonset.yaml",
            "rdma-shared-dev-plugin-daemonset.yaml",
            "nic-cluster-policy.yaml"
        ]
    );
}

#[test]
fn pod_security_admission_level_fits_the_paths() {
    let plan = example();
    let ns = objects::namespace(&plan);
    assert_eq!(
        ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    // Without host and roce the agents meet `restricted`: non-root, no added
    // capabilities, no privilege escalation, RuntimeDefault seccomp.
    let mut small = plan.clone();
    small.paths = [PathKind::Pod, PathKind::Service, PathKind::Ipoib]
        .into_iter()
        .collect();
    let ns = objects::namespace(&small);
    assert_eq!(
        ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    for p in [PathKind::Pod, PathKind::Ipoib] {
        let spec = ds(&small, p).spec.template.spec.unwrap();
        let psc = spec.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let sc = spec.containers[0].security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert!(sc.capabilities.unwrap().add.is_none());
    }
}
