//! What real GPU nodes need: tolerations, hardware-label node selection,
//! Guaranteed QoS, SR-IOV as an alternative (never mixed with the shared
//! plugin), InfiniBand and RoCE as separate resources, host-device that
//! leaves the node's own links alone, and detect-file MTUs checked.

use fabperf_k8s::detect::DetectReport;
use fabperf_k8s::plan::{parse_plan, selectors_from_detect, Plan, PlanErrors};
use fabperf_k8s::{objects, render, PathKind};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn ok(text: &str) -> Plan {
    parse_plan(text, "plan.toml", &examples()).unwrap_or_else(|e| panic!("{e}"))
}

fn errs(text: &str) -> PlanErrors {
    parse_plan(text, "plan.toml", &examples()).expect_err("must be rejected")
}

const BASE: &str = r#"image = "registry.example.com/fabperf:1"
paths = ["pod", "ipoib", "roce"]

[detect]
node-a = "node-a.detect.json"
node-b = "node-b.detect.json"

[ipoib]
range = "192.168.150.0/24"

[roce]
range = "192.168.160.0/24"
"#;

#[test]
fn tolerations_default_to_gpu_taint_and_are_configurable() {
    let p = ok(BASE);
    assert_eq!(p.tolerations.len(), 1);
    let ds = objects::agent_daemonset(&p, PathKind::Pod);
    let t = ds.spec.template.spec.unwrap().tolerations.unwrap();
    assert_eq!(t[0].key.as_deref(), Some("nvidia.com/gpu"));
    let custom = BASE.replace(
        "[detect]",
        "[nodes]\ntolerations = [{ key = \"dedicated\", operator = \"Equal\", value = \"fabric\", effect = \"NoExecute\" }, { operator = \"Exists\" }]\n\n[detect]",
    );
    let p = ok(&custom);
    assert_eq!(p.tolerations.len(), 2);
    assert_eq!(p.tolerations[0].value.as_deref(), Some("fabric"));
    let none = BASE.replace("[detect]", "[nodes]\ntolerations = []\n\n[detect]");
    let ds = objects::agent_daemonset(&ok(&none), PathKind::Pod);
    assert!(ds.spec.template.spec.unwrap().tolerations.is_none());
    for (bad, needle) in [
        (
            "{ key = \"k\", operator = \"Maybe\" }",
            "must be Exists or Equal",
        ),
        (
            "{ key = \"k\", operator = \"Exists\", value = \"v\" }",
            "takes no value",
        ),
        ("{ operator = \"Equal\" }", "without key"),
        (
            "{ key = \"k\", effect = \"Sometimes\" }",
            "NoSchedule, PreferNoSchedule or NoExecute",
        ),
        (
            "{ key = \"bad key!\", operator = \"Exists\" }",
            "not a valid taint key",
        ),
    ] {
        let e = errs(&BASE.replace(
            "[detect]",
            &format!("[nodes]\ntolerations = [{bad}]\n\n[detect]"),
        ));
        assert!(e.to_string().contains(needle), "{bad}: {e}");
    }
}

/// The node names a DaemonSet's required node affinity admits (matchFields
/// metadata.name In ...), if it has one.
fn pinned_to(ds: &k8s_openapi::api::apps::v1::DaemonSet) -> Option<Vec<String>> {
    let na = ds
        .spec
        .template
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?;
    let terms = &na
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    assert!(terms[0].match_expressions.is_none(), "{terms:?}");
    let f = &terms[0].match_fields.as_ref()?[0];
    assert_eq!(
        (f.key.as_str(), f.operator.as_str()),
        ("metadata.name", "In")
    );
    f.values.clone()
}

#[test]
fn agents_pinned_to_the_detected_nodes_else_by_hardware_label() {
    // Detect files: pinned to those nodes by name (metadata.name, what the
    // ConfigMaps and --node-name use), no hardware label needed.
    let p = ok(BASE);
    assert!(p.node_selector.is_empty(), "{:?}", p.node_selector);
    assert!(p.node_names.is_empty());
    assert_eq!(p.agent_nodes(), ["node-a", "node-b"]);
    for path in [PathKind::Pod, PathKind::Ipoib, PathKind::Roce] {
        let ds = objects::agent_daemonset(&p, path);
        assert_eq!(pinned_to(&ds).unwrap(), ["node-a", "node-b"], "{path:?}");
        assert!(ds.spec.template.spec.unwrap().node_selector.is_none());
    }
    // Names given: those.
    let named = ok(&BASE.replace(
        "[detect]",
        "[nodes]\nnames = [\"node-a\", \"node-b\"]\n\n[detect]",
    ));
    assert!(named.node_selector.is_empty());
    assert_eq!(
        pinned_to(&objects::agent_daemonset(&named, PathKind::Pod)).unwrap(),
        ["node-a", "node-b"]
    );
    // Neither: the NFD label, and a warning that names it.
    let unnamed = ok(r#"image = "registry.example.com/fabperf:1"
paths = ["pod"]
"#);
    assert_eq!(
        unnamed.node_selector["feature.node.kubernetes.io/pci-15b3.present"],
        "true"
    );
    assert!(pinned_to(&objects::agent_daemonset(&unnamed, PathKind::Pod)).is_none());
    assert!(
        unnamed.warnings.iter().any(|w| w
            .starts_with("nodes: no [nodes] names and no detect files")
            && w.contains("feature.node.kubernetes.io/pci-15b3.present=true")),
        "{:?}",
        unnamed.warnings
    );
    assert!(!p.warnings.iter().any(|w| w.starts_with("nodes:")));
}

#[test]
fn guaranteed_qos_with_configurable_whole_cpus() {
    let p = ok(&BASE.replace(
        "[detect]",
        "[resources]\ncpu = 4\nmemory = \"8Gi\"\n\n[detect]",
    ));
    let c = &objects::agent_daemonset(&p, PathKind::Roce)
        .spec
        .template
        .spec
        .unwrap()
        .containers[0];
    let r = c.resources.clone().unwrap();
    assert_eq!(r.requests, r.limits);
    let l = r.limits.unwrap();
    assert_eq!(
        (l["cpu"].0.as_str(), l["memory"].0.as_str()),
        ("4", "8192Mi")
    );
    assert_eq!(l["rdma/rdma_shared_device_a"].0, "1");
    assert!(c
        .command
        .as_ref()
        .unwrap()
        .join(" ")
        .contains("--max-memory 7936M"));
    for (bad, needle) in [
        ("cpu = 0", "out of range 1..=256"),
        ("memory = \"1.5Gi\"", "whole number of Mi or Gi"),
        ("memory = \"100Mi\"", "out of range 512Mi"),
        ("memory = \"4G\"", "whole number"),
    ] {
        let e = errs(&BASE.replace("[detect]", &format!("[resources]\n{bad}\n\n[detect]")));
        assert!(e.to_string().contains(needle), "{bad}: {e}");
    }
    let r = render(&p).unwrap();
    let roce = &r
        .manifests
        .iter()
        .find(|f| f.rel_path == "20-agent-roce.yaml")
        .unwrap()
        .content;
    assert!(
        roce.contains("static CPU manager")
            && roce.contains("topology-manager-policy=single-numa-node")
    );
}

const SRIOV: &str = r#"image = "registry.example.com/fabperf:1"
paths = ["pod", "ipoib", "roce"]

[detect]
node-a = "node-a.detect.json"
node-b = "node-b.detect.json"

[ipoib]
attach = "sriov"
range = "192.168.150.0/24"

[roce]
attach = "sriov"
range = "192.168.160.0/24"

[sriov]
num_vfs = 4
ufm_secret = "ufm-credentials"
guid_pool_start = "02:00:00:00:00:00:00:00"
guid_pool_end = "02:00:00:00:00:00:ff:ff"
"#;

fn docs_of(content: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(content)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

#[test]
fn sriov_renders_operator_objects_and_vf_resources() {
    let p = ok(SRIOV);
    assert!(p.device_plugin.is_none(), "no shared plugin with SR-IOV");
    let r = render(&p).unwrap();
    let sriov = r
        .manifests
        .iter()
        .find(|f| f.rel_path == "15-sriov.yaml")
        .unwrap();
    let d = docs_of(&sriov.content);
    let kinds: Vec<&str> = d.iter().map(|x| x["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "SriovNetworkPoolConfig",
            "SriovNetworkNodePolicy",
            "SriovNetwork",
            "SriovNetworkNodePolicy",
            "SriovIBNetwork"
        ]
    );
    assert_eq!(d[0]["spec"]["rdmaMode"], "exclusive");
    assert_eq!(d[1]["spec"]["isRdma"], true);
    assert_eq!(d[1]["spec"]["linkType"], "eth");
    assert_eq!(d[1]["spec"]["nicSelector"]["pfNames"][0], "ens1f0np0");
    assert_eq!(d[1]["spec"]["nicSelector"]["deviceID"], "101d");
    assert_eq!(d[1]["spec"]["numVfs"], 4);
    assert_eq!(d[2]["spec"]["networkNamespace"], "fabperf");
    assert_eq!(d[2]["spec"]["metaPlugins"], "{\"type\": \"rdma\"}");
    let ipam: Value = serde_json::from_str(d[2]["spec"]["ipam"].as_str().unwrap()).unwrap();
    assert_eq!(ipam["type"], "nv-ipam");
    assert_eq!(d[3]["spec"]["linkType"], "ib");
    assert_eq!(d[3]["spec"]["nicSelector"]["deviceID"], "101b");
    // The operator writes the NADs: none rendered here.
    assert!(!r.manifests.iter().any(|f| f.rel_path == "10-networks.yaml"));
    // Pods request VFs; the IB pods drive RDMA too (root + IPC_LOCK).
    for (path, res) in [
        (PathKind::Roce, "nvidia.com/fabperf_roce_vf"),
        (PathKind::Ipoib, "nvidia.com/fabperf_ib_vf"),
    ] {
        let c = &objects::agent_daemonset(&p, path)
            .spec
            .template
            .spec
            .unwrap()
            .containers[0];
        assert_eq!(
            c.resources.clone().unwrap().limits.unwrap()[res].0,
            "1",
            "{path:?}"
        );
        let caps = c.security_context.clone().unwrap().capabilities.unwrap();
        assert_eq!(caps.add.unwrap(), ["IPC_LOCK"]);
    }
    // ib-kubernetes in the NicClusterPolicy, no ipoib-cni, no shared plugin.
    let ncp = r
        .device_plugin
        .iter()
        .find(|f| f.rel_path == "nic-cluster-policy.yaml")
        .unwrap();
    let v = &docs_of(&ncp.content)[0];
    assert_eq!(v["spec"]["ibKubernetes"]["ufmSecret"], "ufm-credentials");
    assert!(v["spec"].get("rdmaSharedDevicePlugin").is_none());
    assert!(v["spec"]["secondaryNetwork"].get("ipoib").is_none());
}

#[test]
fn shared_and_exclusive_rdma_are_never_mixed_on_one_node() {
    // SR-IOV RoCE with the shared plugin's table.
    let t = SRIOV.replace("[sriov]", "[device_plugin]\nrdma_hca_max = 10\n\n[sriov]");
    let e = errs(&t);
    assert!(e.to_string().contains("mixes shared RDMA"), "{e}");
    // SR-IOV InfiniBand with shared RoCE.
    let t = SRIOV.replace("[roce]\nattach = \"sriov\"", "[roce]\nattach = \"shared\"");
    let e = errs(&t);
    assert!(e.to_string().contains("mixes shared RDMA"), "{e}");
    // SR-IOV needs label selection, and IB VFs need ib-kubernetes.
    let e = errs(&SRIOV.replace(
        "[detect]",
        "[nodes]\nnames = [\"node-a\", \"node-b\"]\n\n[detect]",
    ));
    assert!(e.to_string().contains("select nodes by label"), "{e}");
    let e = errs(&SRIOV.replace("ufm_secret = \"ufm-credentials\"\n", ""));
    assert!(e.to_string().contains("set [sriov].ufm_secret"), "{e}");
    let e = errs(&SRIOV.replace("02:00:00:00:00:00:ff:ff", "nope"));
    assert!(e.to_string().contains("is not a GUID"), "{e}");
    let e = errs(&BASE.replace("[roce]", "[sriov]\nnum_vfs = 2\n\n[roce]"));
    assert!(
        e.to_string().contains("no path uses attach = \"sriov\""),
        "{e}"
    );
}

fn report(name: &str) -> DetectReport {
    DetectReport::parse(
        &std::fs::read_to_string(examples().join(name)).unwrap(),
        name,
    )
    .unwrap()
}

#[test]
fn device_plugin_config_separates_infiniband_and_roce() {
    let a = report("node-a.detect.json");
    let b = report("node-b.detect.json");
    let groups = selectors_from_detect(&[("node-a", &a), ("node-b", &b)], &[]).unwrap();
    let lts: Vec<&str> = groups.iter().map(|(lt, _)| *lt).collect();
    assert_eq!(lts, ["ether", "infiniband"]);
    assert_eq!(groups[0].1.device_ids, ["101d"]);
    assert_eq!(groups[0].1.link_types, ["ether"]);
    assert_eq!(groups[1].1.device_ids, ["101b"]);
    assert_eq!(groups[1].1.link_types, ["infiniband"]);
    // In a plan without a RoCE path the IB devices get their own resource.
    let t = BASE
        .replace(
            "paths = [\"pod\", \"ipoib\", \"roce\"]",
            "paths = [\"pod\", \"ipoib\"]",
        )
        .replace(
            "[roce]\nrange = \"192.168.160.0/24\"\n",
            "[device_plugin]\nrdma_hca_max = 100\n",
        );
    let p = ok(&t);
    let names: Vec<String> = p
        .device_plugin
        .unwrap()
        .config_list
        .iter()
        .map(|c| format!("{}/{}", c.resource_prefix, c.resource_name))
        .collect();
    assert_eq!(
        names,
        ["rdma/rdma_shared_device_a", "rdma/rdma_shared_device_ib"]
    );
}

#[test]
fn host_device_never_takes_the_cni_or_node_ip_link() {
    let hd = |netdev: &str, cni: &str| {
        format!(
            "{BASE}\n[cni]\nplugins = [\"calico\"]\ninterface = \"{cni}\"\nencapsulation = \"vxlan\"\npod_cidr = \"10.244.0.0/16\"\n"
        )
        .replace("[roce]\n", &format!("[roce]\nnetwork_type = \"host-device\"\nnetdev = \"{netdev}\"\n"))
    };
    let e = errs(&hd("ens1f0np0", "ens1f0np0"));
    assert!(e.to_string().contains("carries the CNI"), "{e}");
    // eno1 carries the node IP in the example detect files (and has no RDMA
    // device, which is reported too).
    let e = errs(&hd("eno1", "ens1f0np0"));
    assert!(
        e.to_string().contains("carries node node-a's node IP"),
        "{e}"
    );
    ok(&hd("ens1f0np0", "eno1"));
}

#[test]
fn mtu_from_a_detect_file_is_checked_like_the_plans() {
    let d = std::env::temp_dir().join(format!("fabperf-k8s-mtu-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for n in ["node-a", "node-b"] {
        let mut v: Value = serde_json::from_str(
            &std::fs::read_to_string(examples().join(format!("{n}.detect.json"))).unwrap(),
        )
        .unwrap();
        for nd in v["netdevs"].as_array_mut().unwrap() {
            if nd["name"] == "ens1f0np0" {
                nd["mtu"] = 40.into();
            }
        }
        std::fs::write(d.join(format!("{n}.detect.json")), v.to_string()).unwrap();
    }
    let t = format!(
        "{BASE}\n[cni]\nplugins = [\"antrea\"]\ninterface = \"ens1f0np0\"\nencapsulation = \"vxlan\"\npod_cidr = \"10.244.0.0/16\"\n"
    );
    let e = parse_plan(&t, "plan.toml", &d).unwrap_err();
    assert!(
        e.to_string()
            .contains("reports MTU 40 for ens1f0np0, out of range 1280..=9216"),
        "{e}"
    );
}
