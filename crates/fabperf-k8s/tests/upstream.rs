//! What upstream projects accept at the versions the plan pins, one test per
//! finding of the field-by-field review (each failed on the earlier render):
//! 1. NicClusterPolicy without `secondaryNetwork.ipamPlugin` (network-operator
//!    v26.1.0), nv-ipam by default, CI schemas from the pinned release;
//! 2. Cilium keeps Multus (`cni.exclusive: false`), is refused when its tunnel
//!    would run on another link than the pinned one, WireGuard overhead 80;
//! 3. flannel gets the underlay MTU;
//! 4. the host path advertises the fabric address and listens where the
//!    runner reaches it;
//! 5. docs/k8s.md names valid, pinned images.

use fabperf_k8s::plan::{parse_plan, CniKind, DEFAULT_OPERATOR_VERSION};
use fabperf_k8s::{render, Plan, Rendered};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example_text() -> String {
    std::fs::read_to_string(repo().join("examples/two-node-roce-ipoib.toml")).unwrap()
}

fn plan_from(text: &str, base: &Path) -> Plan {
    parse_plan(text, "plan.toml", base).unwrap_or_else(|e| panic!("{e}"))
}

fn example() -> Plan {
    plan_from(&example_text(), &repo().join("examples"))
}

/// Every YAML document of a rendered file, as JSON values.
fn docs(r: &Rendered, rel: &str) -> Vec<Value> {
    let f = r
        .manifests
        .iter()
        .chain(&r.device_plugin)
        .find(|f| f.rel_path == rel)
        .unwrap_or_else(|| panic!("{rel} not rendered"));
    let mut out = Vec::new();
    for d in serde_norway::Deserializer::from_str(&f.content) {
        let v: Value = serde::Deserialize::deserialize(d).unwrap();
        out.push(v);
    }
    out
}

fn file<'a>(r: &'a Rendered, rel: &str) -> &'a str {
    &r.manifests
        .iter()
        .chain(&r.device_plugin)
        .find(|f| f.rel_path == rel)
        .unwrap_or_else(|| panic!("{rel} not rendered"))
        .content
}

/// A copy of the example detect files with `edit` applied to each, in a
/// fresh directory, with the example plan next to them.
fn edited_examples(tag: &str, edit: impl Fn(&mut Value)) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fabperf-k8s-up-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for n in ["node-a", "node-b"] {
        let text =
            std::fs::read_to_string(repo().join(format!("examples/{n}.detect.json"))).unwrap();
        let mut v: Value = serde_json::from_str(&text).unwrap();
        edit(&mut v);
        std::fs::write(
            d.join(format!("{n}.detect.json")),
            serde_json::to_string(&v).unwrap(),
        )
        .unwrap();
    }
    d
}

/// Move each node's InternalIP onto ens1f0np0 (kubelet --node-ip fixed).
fn node_ip_on_fast_link(v: &mut Value) {
    let addr = v["netdevs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "ens1f0np0")
        .unwrap()["ipv4"][0]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    v["node_ip"] =
        serde_json::json!({"address": addr, "interface": "ens1f0np0", "source": "node-ip-flag"});
}

// ---- 1. NicClusterPolicy / IPAM / schema version

#[test]
fn nic_cluster_policy_has_no_ipam_plugin_and_installs_nv_ipam() {
    let r = render(&example()).unwrap();
    let ncp = &docs(&r, "nic-cluster-policy.yaml")[0];
    let sn = &ncp["spec"]["secondaryNetwork"];
    assert!(sn.get("ipamPlugin").is_none(), "{sn}");
    let keys: Vec<&String> = sn.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["cniPlugins", "ipoib", "multus"]);
    assert_eq!(ncp["spec"]["nvIpam"]["image"], "nvidia-k8s-ipam");
    assert_eq!(ncp["spec"]["nvIpam"]["enableWebhook"], false);
    // Each NAD names an IPPool that the render also writes.
    let pools: Vec<String> = docs(&r, "11-ippools.yaml")
        .iter()
        .map(|p| {
            assert_eq!(p["apiVersion"], "nv-ipam.nvidia.com/v1alpha1");
            assert_eq!(p["metadata"]["namespace"], "nvidia-network-operator");
            p["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    for nad in docs(&r, "10-networks.yaml") {
        let cfg: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(cfg["ipam"]["type"], "nv-ipam");
        assert!(pools.contains(&cfg["ipam"]["poolName"].as_str().unwrap().to_string()));
    }
}

#[test]
fn whereabouts_is_the_plans_choice_and_stays_out_of_the_policy() {
    let text = example_text().replace("ipam = \"nv-ipam\"", "ipam = \"whereabouts\"");
    let r = render(&plan_from(&text, &repo().join("examples"))).unwrap();
    let ncp = &docs(&r, "nic-cluster-policy.yaml")[0];
    assert!(ncp["spec"].get("nvIpam").is_none());
    assert!(ncp["spec"]["secondaryNetwork"].get("ipamPlugin").is_none());
    assert!(!r.manifests.iter().any(|f| f.rel_path == "11-ippools.yaml"));
    for nad in docs(&r, "10-networks.yaml") {
        let cfg: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
        assert_eq!(cfg["ipam"]["type"], "whereabouts");
    }
}

/// The network-operator release each CI schema was authored from.
fn schema_releases() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(repo().join("ci/k8s/schemas")).unwrap() {
        let p = e.unwrap().path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        if v["x-fabperf-upstream"]["project"] == "Mellanox/network-operator" {
            out.push((
                p.file_name().unwrap().to_string_lossy().to_string(),
                v["x-fabperf-upstream"]["version"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ));
        }
    }
    out.sort();
    out
}

fn version_mismatches(pinned: &str, schemas: &[(String, String)]) -> Vec<String> {
    schemas
        .iter()
        .filter(|(_, v)| v != pinned)
        .map(|(f, v)| {
            format!("ci/k8s/schemas/{f} is from network-operator {v}, the plan pins {pinned}")
        })
        .collect()
}

#[test]
fn ci_schemas_come_from_the_pinned_operator_release() {
    let schemas = schema_releases();
    let names: Vec<&str> = schemas.iter().map(|(f, _)| f.as_str()).collect();
    for want in [
        "nicclusterpolicy-v1alpha1.json",
        "nv-ipam-ippool-v1alpha1.json",
        "sriovnetworknodepolicy-v1.json",
        "sriovnetwork-v1.json",
        "sriovibnetwork-v1.json",
        "sriovnetworkpoolconfig-v1.json",
    ] {
        assert!(
            names.contains(&want),
            "{want} records no upstream release: {names:?}"
        );
    }
    // The default pin and every example plan's pin.
    let default_release = DEFAULT_OPERATOR_VERSION.trim_start_matches("network-operator-");
    let mut pins = vec![default_release.to_string()];
    for e in std::fs::read_dir(repo().join("examples")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let plan = plan_from(
                &std::fs::read_to_string(&p).unwrap(),
                &repo().join("examples"),
            );
            pins.push(plan.operator.release().to_string());
        }
    }
    for pin in pins {
        let bad = version_mismatches(&pin, &schemas);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
    // The comparison itself fails on a different pin.
    assert_eq!(version_mismatches("v25.7.0", &schemas).len(), schemas.len());
}

// ---- 2. Cilium

const CILIUM_PLUGINS: &str = "plugins = [\"antrea\", \"calico\", \"flannel\"]";

#[test]
fn cilium_is_refused_when_its_tunnel_would_use_the_node_ip_link() {
    let text = example_text().replace(CILIUM_PLUGINS, "plugins = [\"cilium\"]");
    let e = parse_plan(&text, "plan.toml", &repo().join("examples")).unwrap_err();
    let s = e.to_string();
    assert_eq!(e.0.len(), 2, "{s}");
    assert!(
        s.contains("node node-a's node IP 10.0.0.11 is on eno1, MTU 1500"),
        "{s}"
    );
    assert!(s.contains("--node-ip=192.168.60.11"), "{s}");
}

#[test]
fn cilium_keeps_multus_and_reserves_80_bytes_for_wireguard() {
    let dir = edited_examples("cilium", node_ip_on_fast_link);
    let text = example_text().replace(CILIUM_PLUGINS, "plugins = [\"cilium\"]");
    let r = render(&plan_from(&text, &dir)).unwrap();
    let v = &docs(&r, "cni/cilium-values.yaml")[0];
    assert_eq!(v["cni"]["exclusive"], false, "Multus would be renamed away");
    assert_eq!(v["MTU"], 9000);
    let wg = text.replace("encapsulation = \"vxlan\"", "encapsulation = \"wireguard\"");
    let r = render(&plan_from(&wg, &dir)).unwrap();
    let header = file(&r, "cni/cilium-values.yaml");
    assert!(
        header.contains("cilium reserves 80 B) -> pod MTU 8920"),
        "{header}"
    );
    // Without a Multus path, exclusive mode stays Cilium's default.
    let plan = plan_from(&text, &dir);
    let c = plan.cni.as_ref().unwrap();
    let (v, _) = fabperf_k8s::cni::values(CniKind::Cilium, c, false);
    assert!(v.get("cni").is_none());
}

#[test]
fn cilium_without_node_ips_is_rendered_with_a_warning() {
    let dir = edited_examples("cilium-noip", |v| {
        v.as_object_mut().unwrap().remove("node_ip");
    });
    let text = example_text().replace(CILIUM_PLUGINS, "plugins = [\"cilium\"]");
    let plan = plan_from(&text, &dir);
    assert!(
        plan.warnings.iter().any(|w| w.contains("InternalIPs")),
        "{:?}",
        plan.warnings
    );
    let r = render(&plan).unwrap();
    assert!(file(&r, "cni/cilium-values.yaml").contains("WARNING cilium:"));
    assert!(r.messages.iter().any(|m| m.contains("warning: cilium:")));
}

// ---- 3. flannel

#[test]
fn flannel_gets_the_underlay_mtu() {
    let r = render(&example()).unwrap();
    let v = &docs(&r, "cni/flannel-values.yaml")[0];
    assert_eq!(v["flannel"]["mtu"], 9000);
    assert!(file(&r, "cni/flannel-values.yaml").contains("-> pod MTU 8950"));
}

// ---- 4. host path: tested on the fabric address, reachable on the node IP

#[test]
fn host_path_binds_and_advertises_the_fabric_address() {
    let plan = example();
    let r = render(&plan).unwrap();
    let host = docs(&r, "20-agent-host.yaml");
    let kinds: Vec<&str> = host.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ConfigMap", "DaemonSet", "Service"]);
    assert_eq!(host[0]["data"]["node-a"], "192.168.60.11");
    assert_eq!(host[0]["data"]["node-b"], "192.168.60.12");
    // A headless Service with a selector: it lists the hostNetwork pods'
    // addresses, the node IPs, which an in-cluster runner on any node
    // reaches (a fabric subnet is often routed on the NIC nodes only); the
    // agents advertise their fabric address for the flows between them.
    assert_eq!(host[2]["spec"]["clusterIP"], "None");
    assert_eq!(host[2]["spec"]["selector"]["fabperf.io/path"], "host");
    let c = &host[1]["spec"]["template"]["spec"]["containers"][0];
    assert!(c["command"][2]
        .as_str()
        .unwrap()
        .contains("exec fabperf server --bind 0.0.0.0 --advertise \"$addr\""));
    // The kubelet probes the node IP, where the agent now listens.
    assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], 5301);
    // Every agent header says which link the path uses.
    let text = file(&r, "20-agent-host.yaml");
    assert!(text.contains("# Link: ens1f0np0"), "{text}");
    assert!(text.contains("listens on every address"), "{text}");
    assert!(file(&r, "20-agent-pod.yaml").contains("# Link: the primary CNI over ens1f0np0"));
    assert!(file(&r, "20-agent-roce.yaml").contains("# Link: ens1f0np0"));
    assert!(file(&r, "20-agent-ipoib.yaml").contains("# Link: ib0"));
}

#[cfg(unix)]
#[test]
fn host_agent_command_reads_its_address_with_a_posix_shell() {
    let plan = example();
    let cmd = fabperf_k8s::objects::host_fabric_command(&plan);
    let d = std::env::temp_dir().join(format!("fabperf-k8s-sh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("bin")).unwrap();
    std::fs::create_dir_all(d.join("etc")).unwrap();
    let fake = d.join("bin/fabperf");
    std::fs::write(&fake, "#!/bin/sh\necho \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    // ConfigMap values carry no trailing newline.
    std::fs::write(d.join("etc/node-a"), "192.168.60.11").unwrap();
    let script = cmd[2].replace("/etc/fabperf-host", &d.join("etc").display().to_string());
    let run = |node: &str| {
        std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .env("PATH", format!("{}:/usr/bin:/bin", d.join("bin").display()))
            .env("NODE_NAME", node)
            .output()
            .unwrap()
    };
    let ok = run("node-a");
    assert!(ok.status.success(), "{ok:?}");
    assert!(
        String::from_utf8_lossy(&ok.stdout).starts_with("server --bind 0.0.0.0 --advertise 192.168.60.11 --node-name node-a --path-label host --port 5301")
    );
    let missing = run("node-z");
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("node node-z has no ens1f0np0 address")
    );
}

// ---- 5. docs

#[test]
fn docs_name_valid_pinned_images() {
    let docs = std::fs::read_to_string(repo().join("docs/k8s.md")).unwrap();
    let mut refs = 0;
    for (i, line) in docs.lines().enumerate() {
        // Image references (not URLs of manifests).
        for reg in ["ghcr.io/", "nvcr.io/", "quay.io/", "docker.io/"] {
            let mut rest = line;
            while let Some(pos) = rest.find(reg) {
                let start = &rest[pos..];
                let end = start
                    .find(|c: char| c.is_whitespace() || "'\"`#,)|".contains(c))
                    .unwrap_or(start.len());
                let r = &start[..end];
                rest = &start[end..];
                if line[..line.find(r).unwrap()].ends_with("://") {
                    continue;
                }
                // A registry path without a tag on a line not about images
                // (e.g. the operator's `repository`) is not an image reference.
                if !r.contains(':') && !line.contains("image") {
                    continue;
                }
                refs += 1;
                let (repo_part, tag) = r.rsplit_once(':').unwrap_or((r, ""));
                assert_eq!(
                    repo_part,
                    repo_part.to_ascii_lowercase(),
                    "docs/k8s.md:{}: image {r} has upper-case letters (InvalidImageName)",
                    i + 1
                );
                assert!(
                    !tag.is_empty() && tag != "latest" && !tag.starts_with("snapshot"),
                    "docs/k8s.md:{}: image {r} is not pinned to a release",
                    i + 1
                );
            }
        }
        // The upstream ipoib-cni DaemonSet names ghcr.io/Mellanox/...:latest:
        // applying it unpatched gives InvalidImageName (the docs apply the
        // rendered one, device-plugin-config/ipoib-cni-daemonset.yaml, whose
        // image tests/first_contact.rs checks).
        if line.contains("raw.githubusercontent.com/Mellanox/ipoib-cni") {
            assert!(
                line.contains("ghcr.io/mellanox/ipoib-cni:v"),
                "docs/k8s.md:{}: the ipoib-cni manifest must be applied with its image replaced",
                i + 1
            );
        }
    }
    assert!(refs > 0, "docs/k8s.md names no image");
}

#[test]
fn hostile_detect_files_are_refused() {
    for (tag, edit, needle) in [
        (
            "ip",
            Box::new(|v: &mut Value| v["node_ip"]["address"] = "$(reboot)".into())
                as Box<dyn Fn(&mut Value)>,
            "is not an address on an interface name",
        ),
        (
            "if",
            Box::new(|v: &mut Value| v["node_ip"]["interface"] = "../../etc".into()),
            "is not an address on an interface name",
        ),
        (
            "addr",
            Box::new(|v: &mut Value| {
                for nd in v["netdevs"].as_array_mut().unwrap() {
                    if nd["name"] == "ens1f0np0" {
                        nd["ipv4"] = serde_json::json!(["192.168.60.11; rm -rf /"]);
                    }
                }
            }),
            "is not an IPv4 address",
        ),
        (
            "type",
            Box::new(|v: &mut Value| v["node_ip"] = "eno1".into()),
            "expected struct NodeIp",
        ),
    ] {
        let dir = edited_examples(tag, edit);
        let e = parse_plan(&example_text(), "plan.toml", &dir).unwrap_err();
        assert!(e.to_string().contains(needle), "{tag}: {e}");
    }
    // A [detect] key that is no node name (it becomes a ConfigMap key and a file name).
    let t = example_text().replace(
        "node-b = \"node-b.detect.json\"",
        "\"../node-b\" = \"node-b.detect.json\"",
    );
    let e = parse_plan(&t, "plan.toml", &repo().join("examples")).unwrap_err();
    assert!(
        e.to_string()
            .contains("is not a valid Kubernetes node name"),
        "{e}"
    );
}
