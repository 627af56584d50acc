//! `[gpu]`: the RDMA agents of GPU nodes request GPUs (all of the node's by default, the one
//! placement that puts the GPU under each NIC's PCIe switch in the pod) and one RDMA resource
//! per rail; errors for what cannot work.

use fabperf_k8s::plan::{parse_plan, Plan, PlanErrors};
use fabperf_k8s::{objects, render, PathKind};
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn ok(text: &str) -> Plan {
    parse_plan(text, "plan.toml", &examples()).unwrap_or_else(|e| panic!("{e}"))
}

fn errs(text: &str) -> String {
    let e: PlanErrors = parse_plan(text, "plan.toml", &examples()).expect_err("must be rejected");
    e.to_string()
}

fn example() -> String {
    std::fs::read_to_string(examples().join("gpu-rails-roce.toml")).unwrap()
}

fn limits(plan: &Plan, path: PathKind) -> Vec<(String, String)> {
    let ds = objects::agent_daemonset(plan, path);
    let spec = ds.spec.template.spec.unwrap();
    let c = &spec.containers[0];
    let r = c.resources.as_ref().unwrap();
    assert_eq!(r.limits, r.requests, "Guaranteed QoS");
    r.limits
        .as_ref()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn env(plan: &Plan, path: PathKind) -> Vec<(String, String)> {
    let ds = objects::agent_daemonset(plan, path);
    let spec = ds.spec.template.spec.unwrap();
    let c = &spec.containers[0];
    c.env
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect()
}

#[test]
fn every_gpu_and_every_rail_in_the_rdma_agents() {
    let p = ok(&example());
    let g = p.gpu.as_ref().unwrap();
    assert_eq!(
        (g.count, g.all, g.resource.as_str()),
        (8, true, "nvidia.com/gpu")
    );
    assert_eq!(g.rails.len(), 8);
    // Rail i = the NIC under GPU i's switch: its netdev on both nodes (the same name here).
    assert_eq!(g.rails[0].name, "gpu_rail0");
    assert_eq!(g.rails[0].if_names, ["enp27s0np0"]);
    assert_eq!(g.rails[7].if_names, ["enp193s0np0"]);
    assert!(
        p.warnings.iter().all(|w| !w.contains("[gpu]")),
        "{:?}",
        p.warnings
    );

    let l = limits(&p, PathKind::Roce);
    let get = |k: &str| l.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("nvidia.com/gpu"), Some("8"));
    for i in 0..8 {
        assert_eq!(get(&format!("rdma/gpu_rail{i}")), Some("1"), "rail {i}");
    }
    assert_eq!(get("rdma/rdma_shared_device_a"), Some("1"));
    let e = env(&p, PathKind::Roce);
    assert!(e.contains(&("MLX5_SCATTER_TO_CQE".into(), "0".into())));
    assert!(e.contains(&(
        "NVIDIA_DRIVER_CAPABILITIES".into(),
        "compute,utility".into()
    )));
    // The pod-network agents hold no RDMA device and get no GPU.
    assert!(limits(&p, PathKind::Pod)
        .iter()
        .all(|(k, _)| !k.contains("gpu")));
    assert!(env(&p, PathKind::Pod)
        .iter()
        .all(|(k, _)| k != "MLX5_SCATTER_TO_CQE"));

    // The device plugin announces the rails next to the plan's resource.
    let dp = p.device_plugin.as_ref().unwrap();
    let names: Vec<&str> = dp
        .config_list
        .iter()
        .map(|c| c.resource_name.as_str())
        .collect();
    assert_eq!(names[0], "rdma_shared_device_a");
    assert_eq!(
        names[1..],
        [
            "gpu_rail0",
            "gpu_rail1",
            "gpu_rail2",
            "gpu_rail3",
            "gpu_rail4",
            "gpu_rail5",
            "gpu_rail6",
            "gpu_rail7"
        ]
    );
    assert_eq!(dp.config_list[3].selectors.if_names, ["enp61s0np0"]);

    // The header says what the placement guarantees.
    let r = render(&p).unwrap();
    let roce = r
        .manifests
        .iter()
        .find(|f| f.rel_path == "20-agent-roce.yaml")
        .unwrap();
    assert!(
        roce.content
            .contains("# GPU memory: every GPU of the node (8 x nvidia.com/gpu) in the agent pod"),
        "{}",
        roce.content
    );
}

#[test]
fn a_gpu_count_is_honest_about_placement() {
    let p = ok(&example().replace("gpus = \"all\"", "gpus = 2"));
    let g = p.gpu.as_ref().unwrap();
    assert_eq!((g.count, g.all), (2, false));
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("gpus = 2") && w.contains("without regard to the NIC")),
        "{:?}",
        p.warnings
    );
    assert!(g.header().contains("may sit far from the NIC"));
    // Without rails: only the GPUs.
    let p = ok(&example().replace("rail_resources = true", "rail_resources = false"));
    let l = limits(&p, PathKind::Roce);
    assert!(l.iter().all(|(k, _)| !k.contains("gpu_rail")));
    assert_eq!(p.device_plugin.as_ref().unwrap().config_list.len(), 1);
    // Default: all GPUs, the NVIDIA resource.
    let p = ok(&example()
        .replace("gpus = \"all\"\n", "")
        .replace("rail_resources = true\n", ""));
    assert_eq!(p.gpu.as_ref().map(|g| (g.count, g.all)), Some((8, true)));
}

#[test]
fn what_cannot_work_is_refused() {
    let e = errs(&example().replace("paths = [\"pod\", \"roce\"]", "paths = [\"pod\"]"));
    assert!(
        e.contains("[gpu] gives GPUs to the agents that hold an RDMA device"),
        "{e}"
    );
    for (from, to, want) in [
        (
            "gpus = \"all\"",
            "gpus = 9",
            "node hgx-a's detect file lists 8 GPU(s)",
        ),
        ("gpus = \"all\"", "gpus = 0", "out of range 1..=64"),
        (
            "gpus = \"all\"",
            "gpus = \"many\"",
            "use \"all\" or a number",
        ),
        (
            "gpus = \"all\"",
            "gpus = \"all\"\nresource = \"gpu\"",
            "DOMAIN/NAME",
        ),
        (
            "gpus = \"all\"",
            "gpus = \"all\"\nbogus = 1",
            "unknown field `bogus`",
        ),
    ] {
        let e = errs(&example().replace(from, to));
        assert!(e.contains(want), "{to}: {e}");
        assert!(e.contains("plan.toml:"), "located: {e}");
    }
    // Nodes without GPUs (the RoCE example nodes) would leave the agents Pending.
    let no_gpu = r#"image = "registry.example.com/fabperf:1"
paths = ["pod", "roce"]

[detect]
node-a = "node-a.detect.json"
node-b = "node-b.detect.json"

[roce]
range = "192.168.160.0/24"

[gpu]
"#;
    let e = errs(no_gpu);
    assert!(
        e.contains("the detect files of node-a, node-b list no GPU"),
        "{e}"
    );
    // A count without detect files is taken as given; "all" needs them.
    let no_detect = "image = \"r.example.com/f:1\"\npaths = [\"roce\"]\n\n[roce]\nnetdev = \"ens1f0np0\"\nrange = \"192.168.160.0/24\"\n\n[device_plugin]\nvendors = [\"15b3\"]\n\n[gpu]\n";
    let e = errs(no_detect);
    assert!(
        e.contains("counts the GPUs in the nodes' detect files"),
        "{e}"
    );
    let p = ok(&no_detect.replace("[gpu]\n", "[gpu]\ngpus = 1\n"));
    assert_eq!(p.gpu.as_ref().unwrap().count, 1);
    let e = errs(&no_detect.replace("[gpu]\n", "[gpu]\ngpus = 1\nrail_resources = true\n"));
    assert!(
        e.contains("rail_resources finds each rail's NIC in the nodes' detect files"),
        "{e}"
    );
}

/// host-device and the rails: a rail selected by the netdev
/// host-device moves into the agent pod would lose its resource while an
/// agent holds the NIC; refused with the reason.
#[test]
fn host_device_roce_over_a_rail_nic_is_refused_for_rail_resources() {
    let rail0 = "enp27s0np0";
    // host-device takes the netdev with its own MTU: no [roce] mtu.
    let host_device = |t: String| {
        t.replace(
            "network_type = \"macvlan\"\nmtu = 9000\n",
            "network_type = \"host-device\"\n",
        )
    };
    let over_rail =
        host_device(example()).replace("netdev = \"ens21f0np0\"", &format!("netdev = \"{rail0}\""));
    let e = errs(&over_rail);
    assert!(!e.contains("MTU"), "{e}");
    assert!(
        e.contains(&format!(
            "[gpu] rail_resources selects rail 0's NIC by its netdev {rail0}"
        )) && e.contains("rdma/gpu_rail0 would drop to 0 while an agent holds the NIC")
            && e.contains("Use network_type = \"macvlan\""),
        "{e}"
    );
    assert!(e.starts_with("the plan has 1 problem"), "{e}");
    // Without the rails, or with macvlan (the netdev stays in the host), the
    // plan renders.
    ok(&over_rail.replace("rail_resources = true", "rail_resources = false"));
    let macvlan =
        ok(&example().replace("netdev = \"ens21f0np0\"", &format!("netdev = \"{rail0}\"")));
    assert_eq!(macvlan.gpu.as_ref().unwrap().rails.len(), 8);
}
