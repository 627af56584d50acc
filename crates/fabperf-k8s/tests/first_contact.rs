//! What `k8s render` writes, checked against the upstream sources at the
//! versions it pins, one test per first-contact problem with a real GPU
//! cluster, and the service path (one single-endpoint Service per node):
//! - Calico v3.32.1 (projectcalico/calico, charts/tigera-operator/README.md
//!   and charts/crd.projectcalico.org.v1 at that tag): the CRD chart first;
//! - the host path reachable from the runner on any node;
//! - policy scale held by the in-cluster runner through the API;
//! - Mellanox/ipoib-cni v1.2.2 (images/ipoib-cni-daemonset.yaml) and
//!   Mellanox/k8s-rdma-shared-dev-plugin v1.5.3
//!   (deployment/k8s/base/daemonset.yaml): the plan's tolerations added;
//! - agents pinned to the detected nodes by metadata.name (nv-ipam v0.4.0
//!   matches IPPool node selectors with MatchNodeSelectorTerms);
//! - host-device RoCE and k8s-rdma-shared-dev-plugin v1.5.3's selectors
//!   (pkg/resources/pci_net_device.go, device_selectors.go);
//! - the run Lease (coordination.k8s.io/v1);
//! - the examples' unpublished image;
//! - flannel v0.27.4 (README.md: the namespace labelled privileged first),
//!   nvidia-k8s-ipam v0.4.0 (pkg/ipam-controller/allocator/allocator.go:
//!   per-node blocks), CPUs from the port rate, the published token.

use fabperf_k8s::plan::{nv_ipam_blocks, parse_plan, Plan, PlanErrors};
use fabperf_k8s::{objects, render, PathKind, Rendered};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example_text() -> String {
    std::fs::read_to_string(examples().join("two-node-roce-ipoib.toml")).unwrap()
}

fn ok(text: &str) -> Plan {
    parse_plan(text, "plan.toml", &examples()).unwrap_or_else(|e| panic!("{e}"))
}

fn errs(text: &str) -> PlanErrors {
    parse_plan(text, "plan.toml", &examples()).expect_err("must be rejected")
}

fn file<'a>(r: &'a Rendered, rel: &str) -> &'a str {
    &r.manifests
        .iter()
        .chain(&r.device_plugin)
        .find(|f| f.rel_path == rel)
        .unwrap_or_else(|| panic!("{rel} not rendered"))
        .content
}

fn docs(r: &Rendered, rel: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(file(r, rel))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// The example plan with `from` replaced by `to`.
fn example_with(from: &str, to: &str) -> String {
    let t = example_text();
    assert!(t.contains(from), "{from:?} not in the example");
    t.replacen(from, to, 1)
}

// ---- the service path

#[test]
fn the_service_path_is_one_single_endpoint_service_per_node() {
    let plan = ok(&example_text());
    let r = render(&plan).unwrap();
    // One pod-agent DaemonSet per node, its pods labelled with the node.
    let pods = docs(&r, "20-agent-pod.yaml");
    let ds: Vec<&Value> = pods.iter().filter(|d| d["kind"] == "DaemonSet").collect();
    let names: Vec<&str> = ds
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fabperf-pod-node-a", "fabperf-pod-node-b"]);
    let svcs = docs(&r, "21-service.yaml");
    for (d, node) in ds.iter().zip(["node-a", "node-b"]) {
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["fabperf.io/node"], node);
        assert_eq!(
            d["spec"]["selector"]["matchLabels"]["fabperf.io/node"],
            node
        );
        let f = &d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
            ["matchFields"][0];
        assert_eq!(f["key"], "metadata.name");
        assert_eq!(f["values"], serde_json::json!([node]));
        // Its Service selects exactly this DaemonSet's pods, on TCP and UDP.
        let svc = svcs
            .iter()
            .find(|s| s["metadata"]["name"] == format!("fabperf-svc-{node}"))
            .unwrap();
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        let sel = svc["spec"]["selector"].as_object().unwrap();
        for (k, v) in sel {
            assert_eq!(&labels[k], v, "{k}");
        }
        assert_eq!(sel["fabperf.io/path"], "pod");
        assert!(svc["spec"].get("sessionAffinity").is_none());
        let protos: Vec<&str> = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["protocol"].as_str().unwrap())
            .collect();
        assert_eq!(protos, ["TCP", "UDP"]);
    }
    // The other node's pods do not match: exactly one endpoint each.
    let a_sel = &svcs[0]["spec"]["selector"];
    assert_ne!(
        a_sel["fabperf.io/node"],
        ds[1]["spec"]["template"]["metadata"]["labels"]["fabperf.io/node"]
    );
    // The balancing Service is still there, for HTTP across endpoints, and
    // its header says what a socket test through it gets.
    assert!(svcs
        .iter()
        .any(|s| s["metadata"]["name"] == "fabperf-service"));
    assert!(file(&r, "21-service.yaml").contains("this address balanced your"));
    // Without the service path: one pod DaemonSet, as before.
    let no_svc = ok(&example_with(
        "paths = [\"host\", \"pod\", \"service\", \"ipoib\", \"roce\"]",
        "paths = [\"host\", \"pod\", \"ipoib\", \"roce\"]",
    ));
    assert_eq!(objects::agent_daemonsets(&no_svc, PathKind::Pod).len(), 1);
}

#[test]
fn node_keys_fit_labels_and_service_names() {
    assert_eq!(objects::node_key("node-a"), "node-a");
    assert_eq!(objects::node_service_name("gpu-17"), "fabperf-svc-gpu-17");
    for n in [
        "gpu-node-17.rack4.example.com",
        &"n".repeat(253),
        "a.b",
        "a-b",
    ] {
        let k = objects::node_key(n);
        assert!(k.len() <= 40, "{k}");
        assert!(k
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        assert!(!k.starts_with('-') && !k.ends_with('-'), "{k}");
        let s = objects::node_service_name(n);
        assert!(s.len() <= 63, "{s}");
    }
    // Names that would clean up alike stay apart.
    assert_ne!(objects::node_key("a.b"), objects::node_key("a-b"));
}

// ---- 1. Calico v3.32.1: the CRD chart before tigera-operator

#[test]
fn calico_v3_32_installs_its_crds_from_their_own_chart_first() {
    let r = render(&ok(&example_text())).unwrap();
    let v = file(&r, "cni/calico-values.yaml");
    let crds = v
        .find("# helm template calico-crds projectcalico/crd.projectcalico.org.v1 --version v3.32.1 | kubectl apply --server-side -f -")
        .unwrap_or_else(|| panic!("{v}"));
    let op = v
        .find("# helm install calico projectcalico/tigera-operator --version v3.32.1")
        .unwrap();
    assert!(crds < op, "the CRDs must come first:\n{v}");
    assert!(v.contains("no matches for kind \"Installation\""), "{v}");
}

// ---- 2. host agents reachable by the runner: see upstream.rs (bind,
// advertise, Service by selector) and the fabperf CLI's k8s_runner.rs.

// ---- 3. policy scale through the API

#[test]
fn a_runner_test_sweeping_policies_holds_them_through_the_api() {
    let plan = ok(&format!(
        "{}\n[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npaths = [\"pod\"]\npolicies = [0, 50]\n",
        example_text()
    ));
    let r = plan.runner.as_ref().unwrap();
    assert!(r.policy_api);
    let rp = fabperf_run::plan::parse(&r.run_plan, "run plan", Path::new("/")).unwrap();
    match &rp.policy_target {
        fabperf_run::plan::PolicyTarget::Command { argv, .. } => assert_eq!(
            argv,
            &[
                "fabperf",
                "k8s",
                "policy-scale",
                "--apply",
                "--namespace",
                "fabperf",
                "--port",
                "5301"
            ]
        ),
        other => panic!("{other:?}"),
    }
    let out = render(&plan).unwrap();
    let runner = docs(&out, "run/00-runner.yaml");
    let role = runner.iter().find(|d| d["kind"] == "Role").unwrap();
    let groups: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["apiGroups"][0].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["coordination.k8s.io", "networking.k8s.io"]);
    assert_eq!(role["metadata"]["namespace"], "fabperf");
    // Without such a test the Role has the Lease only.
    let plain = render(&ok(&example_text())).unwrap();
    let role = docs(&plain, "run/00-runner.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Role")
        .unwrap();
    assert_eq!(role["rules"].as_array().unwrap().len(), 1);
}

// ---- 4. the standalone DaemonSets tolerate the GPU taint

#[test]
fn standalone_ipoib_cni_and_rdma_plugin_tolerate_the_plan_taints() {
    let r = render(&ok(&example_text())).unwrap();
    // ipoib-cni v1.2.2 images/ipoib-cni-daemonset.yaml, image fixed and pinned.
    let d = &docs(&r, "ipoib-cni-daemonset.yaml")[0];
    assert_eq!(d["metadata"]["name"], "kube-ipoib-cni-ds");
    assert_eq!(d["metadata"]["namespace"], "kube-system");
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(
        spec["containers"][0]["image"],
        "ghcr.io/mellanox/ipoib-cni:v1.2.2"
    );
    assert_eq!(spec["volumes"][0]["hostPath"]["path"], "/opt/cni/bin");
    let keys: Vec<&str> = spec["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "node-role.kubernetes.io/master",
            "node-role.kubernetes.io/control-plane",
            "nvidia.com/gpu"
        ]
    );
    // k8s-rdma-shared-dev-plugin v1.5.3 deployment/k8s/base/daemonset.yaml.
    let d = &docs(&r, "rdma-shared-dev-plugin-daemonset.yaml")[0];
    assert_eq!(d["metadata"]["name"], "rdma-shared-dp-ds");
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(
        spec["containers"][0]["image"],
        "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"
    );
    assert_eq!(spec["volumes"][2]["configMap"]["name"], "rdma-devices");
    assert_eq!(spec["tolerations"][0]["key"], "nvidia.com/gpu");
    assert_eq!(spec["tolerations"][0]["effect"], "NoSchedule");
    // Custom tolerations go along.
    let custom = render(&ok(&example_with(
        "tolerations = [{ key = \"nvidia.com/gpu\", operator = \"Exists\", effect = \"NoSchedule\" }]",
        "tolerations = [{ key = \"dedicated\", operator = \"Equal\", value = \"gpu\", effect = \"NoExecute\" }]",
    )))
    .unwrap();
    let t = &docs(&custom, "rdma-shared-dev-plugin-daemonset.yaml")[0]["spec"]["template"]["spec"]
        ["tolerations"][0];
    assert_eq!(
        (t["key"].as_str(), t["value"].as_str()),
        (Some("dedicated"), Some("gpu"))
    );
}

// ---- 5 and 6. pinned to the detected nodes, by metadata.name

#[test]
fn ip_pools_and_agents_select_nodes_by_name() {
    let r = render(&ok(&example_text())).unwrap();
    for pool in docs(&r, "11-ippools.yaml") {
        let term = &pool["spec"]["nodeSelector"]["nodeSelectorTerms"][0];
        assert_eq!(term["matchFields"][0]["key"], "metadata.name");
        assert_eq!(
            term["matchFields"][0]["values"],
            serde_json::json!(["node-a", "node-b"])
        );
        assert!(term.get("matchExpressions").is_none(), "{term}");
    }
    for f in [
        "20-agent-host.yaml",
        "20-agent-pod.yaml",
        "20-agent-ipoib.yaml",
        "20-agent-roce.yaml",
    ] {
        let text = file(&r, f);
        assert!(!text.contains("key: kubernetes.io/hostname\n"), "{f}");
        assert!(text.contains("key: metadata.name"), "{f}");
    }
}

// ---- 7. host-device RoCE and the shared device plugin's selectors

const HD: &str = r#"image = "registry.example.com/fabperf:1"
paths = ["pod", "roce"]

[detect]
node-a = "node-a.detect.json"
node-b = "node-b.detect.json"

[roce]
network_type = "host-device"
range = "192.168.170.0/24"
"#;

#[test]
fn host_device_roce_selects_the_nic_by_pci_identity() {
    let p = ok(HD);
    let cfg = p.device_plugin.unwrap();
    let s = &cfg.config_list[0].selectors;
    // What survives moving the netdev into the pod: vendor, device, driver.
    assert_eq!(s.vendors, ["15b3"]);
    assert_eq!(s.device_ids, ["101d"]);
    assert_eq!(s.drivers, ["mlx5_core"]);
    // What does not: the interface name and link type the plugin reads
    // through the netdev (empty while the agent holds it).
    assert!(s.if_names.is_empty() && s.link_types.is_empty(), "{s:?}");
    // By hand with names or link types: refused with the reason.
    let e = errs(&format!(
        "{HD}\n[device_plugin]\nif_names = [\"ens1f0np0\"]\n"
    ));
    assert!(
        e.to_string()
            .contains("device plugin then sees no interface name"),
        "{e}"
    );
    let e = errs(&format!(
        "{HD}\n[device_plugin]\nlink_types = [\"ether\"]\n"
    ));
    assert!(
        e.to_string().contains("drop [device_plugin] link_types"),
        "{e}"
    );
    // Macvlan keeps them (the netdev stays in the host).
    let mv = ok(&HD.replace("host-device", "macvlan"));
    let s = &mv.device_plugin.unwrap().config_list[0].selectors;
    assert_eq!(s.if_names, ["ens1f0np0"]);
    assert_eq!(s.link_types, ["ether"]);
}

// ---- 8. the run Lease

#[test]
fn the_runner_takes_the_namespace_run_lease() {
    let plan = ok(&example_text());
    let r = plan.runner.as_ref().unwrap();
    assert_eq!(r.lease_wait_s, 0);
    let sh = fabperf_k8s::runner::objects::script(r);
    assert!(
        sh.contains(
            "fabperf k8s lease --wait \"$FABPERF_LEASE_WAIT\" -- fabperf run \"$FABPERF_RUN_PLAN\""
        ),
        "{sh}"
    );
    let j = fabperf_k8s::runner::objects::job(&plan, r);
    let c = &j.spec.unwrap().template.spec.unwrap().containers[0];
    let env: Vec<(String, String)> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                e.value
                    .clone()
                    .unwrap_or_else(|| e.value_from.clone().unwrap().field_ref.unwrap().field_path),
            )
        })
        .collect();
    for want in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("FABPERF_LEASE_WAIT", "0"),
    ] {
        assert!(env.contains(&(want.0.into(), want.1.into())), "{env:?}");
    }
    let waiting = ok(&format!(
        "{}\n[runner]\nlease_wait = \"2h\"\n",
        example_text()
    ));
    assert_eq!(waiting.runner.unwrap().lease_wait_s, 7200);
    let e = errs(&format!(
        "{}\n[runner]\nlease_wait = \"soon\"\n",
        example_text()
    ));
    assert!(e.to_string().contains("lease_wait"), "{e}");
}

// ---- 9. the examples' image is not published

#[test]
fn the_unpublished_example_image_is_named_loudly() {
    let plan = ok(&example_text());
    assert!(plan.warnings.iter().any(|w| w
        .starts_with("image ghcr.io/fabperf/fabperf:0.1.0 is the examples' placeholder")
        && w.contains("buildah build -t REGISTRY/fabperf:TAG -f Containerfile .")));
    let r = render(&plan).unwrap();
    for f in ["20-agent-pod.yaml", "20-agent-host.yaml", "run/10-job.yaml"] {
        assert!(
            file(&r, f).contains("# WARNING: image ghcr.io/fabperf/fabperf:0.1.0"),
            "{f}"
        );
    }
    assert!(r.messages.iter().any(|m| m.contains("not published")));
    let own = ok(&example_with(
        "image = \"ghcr.io/fabperf/fabperf:0.1.0\"",
        "image = \"registry.example.com/fabperf:0.1.0\"",
    ));
    assert!(!own.warnings.iter().any(|w| w.contains("placeholder")));
    assert!(!file(&render(&own).unwrap(), "20-agent-pod.yaml").contains("WARNING: image"));
}

// ---- 10. flannel's namespace, nv-ipam pool size, CPUs, the public token

#[test]
fn flannel_namespace_is_labelled_privileged_before_the_install() {
    let r = render(&ok(&example_text())).unwrap();
    let v = file(&r, "cni/flannel-values.yaml");
    let ns = v.find("# kubectl create namespace kube-flannel").unwrap();
    let label = v
        .find("# kubectl label --overwrite namespace kube-flannel pod-security.kubernetes.io/enforce=privileged")
        .unwrap();
    let install = v.find("# helm install flannel").unwrap();
    assert!(ns < label && label < install, "{v}");
    assert!(!v.contains("--create-namespace"), "{v}");
}

#[test]
fn nv_ipam_pools_are_sized_to_the_nodes() {
    let net: ipnet::Ipv4Net = "192.168.150.0/24".parse().unwrap();
    // nv-ipam v0.4.0: blocks from .1, the last one must end before .255.
    assert_eq!(nv_ipam_blocks(net, 16, &[]), 15);
    assert_eq!(nv_ipam_blocks(net, 8, &[]), 31);
    assert_eq!(nv_ipam_blocks(net, 1, &[]), 254);
    assert_eq!(nv_ipam_blocks(net, 256, &[]), 0);
    // A block entirely excluded is skipped; one partly excluded counts.
    let ex = |a: &str, b: &str| fabperf_k8s::crd::IpRange {
        start_ip: a.into(),
        end_ip: b.into(),
    };
    assert_eq!(
        nv_ipam_blocks(net, 16, &[ex("192.168.150.1", "192.168.150.16")]),
        14
    );
    assert_eq!(
        nv_ipam_blocks(net, 16, &[ex("192.168.150.1", "192.168.150.9")]),
        15
    );
    // /31 and /32 use the network address too.
    assert_eq!(nv_ipam_blocks("10.0.0.0/31".parse().unwrap(), 1, &[]), 2);

    let nodes = |n: usize| {
        let names: Vec<String> = (1..=n).map(|i| format!("\"gpu-{i}\"")).collect();
        format!(
            "image = \"registry.example.com/fabperf:1\"\npaths = [\"pod\", \"roce\"]\n[nodes]\nnames = [{}]\n[roce]\nnetdev = \"ens1f0np0\"\nrange = \"192.168.160.0/24\"\n",
            names.join(", ")
        )
    };
    ok(&nodes(15));
    let e = errs(&nodes(16)).to_string();
    assert!(
        e.contains("holds 15 nv-ipam blocks of 16 addresses")
            && e.contains("the plan has 16 nodes")
            && e.contains("per_node_block_size = 8"),
        "{e}"
    );
    // Nodes by label only: a warning with the pool's capacity.
    let p = ok("image = \"registry.example.com/fabperf:1\"\npaths = [\"roce\"]\n[roce]\nnetdev = \"ens1f0np0\"\nrange = \"192.168.160.0/24\"\n");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("serves at most 15 nodes")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn cpus_per_agent_follow_the_detected_port_rate() {
    // The example's links run at 100 Gbit/s: 4 CPUs, no warning.
    let p = ok(&example_text());
    assert_eq!(p.resources.cpu, 4);
    assert!(!p.warnings.iter().any(|w| w.contains("[resources] cpu")));
    // Asked for 2: kept, and told why it is too few.
    let two = ok(&example_with("[resources]\n", "[resources]\ncpu = 2\n"));
    assert_eq!(two.resources.cpu, 2);
    assert!(
        two.warnings
            .iter()
            .any(|w| w.starts_with("[resources] cpu = 2 per agent")
                && w.contains("100 Gbit/s")
                && w.contains("Set cpu = 4")),
        "{:?}",
        two.warnings
    );
    // Asked for more: kept, quietly.
    let eight = ok(&example_with("[resources]\n", "[resources]\ncpu = 8\n"));
    assert_eq!(eight.resources.cpu, 8);
    assert!(!eight.warnings.iter().any(|w| w.contains("[resources] cpu")));
    // Without detect files nothing to size from: the default 2.
    let p = ok("image = \"registry.example.com/fabperf:1\"\npaths = [\"pod\"]\n");
    assert_eq!(p.resources.cpu, 2);
}

#[test]
fn the_published_token_is_refused_by_render_and_by_the_agent() {
    let e = fabperf_k8s::plan::check_token_text("fabperf-example-token-change-me").unwrap_err();
    assert!(e.contains("published examples"), "{e}");
    let e =
        fabperf_proto::auth::refuse_public_token(b"fabperf-example-token-change-me").unwrap_err();
    assert!(
        e.contains("kubectl -n NAMESPACE create secret generic fabperf-agent-token"),
        "{e}"
    );
    assert!(e.contains("rollout restart"), "{e}");
}
