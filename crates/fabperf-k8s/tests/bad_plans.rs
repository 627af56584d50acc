//! Bad plans fail with FILE:LINE:COL and a message that says what to do.

use fabperf_k8s::plan::{parse_plan, PlanErrors};
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

const BASE: &str = r#"namespace = "fabperf"
image = "registry.example.com/fabperf:1"
paths = ["host", "pod", "ipoib", "roce"]
rdma_resource = "rdma/rdma_shared_device_a"

[ipoib]
master = "ib0"
range = "192.168.150.0/24"

[roce]
netdev = "ens1f0np0"
range = "192.168.160.0/24"
"#;

fn errs(text: &str) -> PlanErrors {
    parse_plan(text, "plan.toml", &examples()).expect_err("the plan must be rejected")
}

/// Exactly one error, at the given line, whose message contains `needle`.
fn one_error(text: &str, line: usize, needle: &str) {
    let e = errs(text);
    assert_eq!(e.0.len(), 1, "expected one error, got: {e}");
    let e0 = &e.0[0];
    assert_eq!(e0.file, "plan.toml");
    assert_eq!(e0.line, line, "wrong line for: {e0}");
    assert!(e0.msg.contains(needle), "{e0} should mention {needle:?}");
    let shown = e.to_string();
    assert!(shown.contains(&format!("plan.toml:{line}:")), "{shown}");
}

#[test]
fn base_plan_is_valid() {
    let p = parse_plan(BASE, "plan.toml", &examples()).unwrap();
    assert_eq!(p.control_port, 5301);
    assert_eq!(p.rdma_resource, "rdma/rdma_shared_device_a");
    assert_eq!(p.ipoib.unwrap().master, "ib0");
}

#[test]
fn unknown_path() {
    one_error(
        &BASE.replace("\"roce\"]", "\"roce\", \"rdma\"]"),
        3,
        "unknown path \"rdma\"",
    );
}

#[test]
fn unknown_key_top_level_and_nested() {
    let e = errs(&BASE.replace("rdma_resource =", "colour = \"blue\"\nrdma_resource ="));
    assert_eq!(e.0[0].line, 4, "{e}");
    assert!(e.0[0].msg.contains("unknown field `colour`"), "{e}");
    let e = errs(&BASE.replace("master = \"ib0\"", "master = \"ib0\"\nmastr = \"ib1\""));
    assert_eq!(e.0[0].line, 8, "{e}");
    assert!(e.0[0].msg.contains("mastr"), "{e}");
}

#[test]
fn bad_value_types() {
    one_error(
        &BASE.replace(
            "rdma_resource =",
            "control_port = \"5301\"\nrdma_resource =",
        ),
        4,
        "invalid type: string",
    );
    one_error(
        &BASE.replace("rdma_resource =", "control_port = 70000\nrdma_resource ="),
        4,
        "out of range",
    );
}

#[test]
fn overlapping_ranges() {
    one_error(
        &BASE.replace("192.168.160.0/24", "192.168.150.128/25"),
        12,
        "overlaps [ipoib].range",
    );
    let with_cni = format!(
        "{BASE}\n[cni]\nplugins = [\"calico\"]\nunderlay_mtu = 9000\nencapsulation = \"vxlan\"\npod_cidr = \"192.168.0.0/16\"\n"
    );
    let e = errs(&with_cni);
    assert_eq!(e.0.len(), 2, "{e}");
    assert!(
        e.0.iter()
            .all(|x| x.line == 18 && x.msg.contains("[cni].pod_cidr")),
        "{e}"
    );
}

#[test]
fn missing_interface() {
    // No master and no detect files.
    one_error(
        &BASE.replace("master = \"ib0\"\n", ""),
        6,
        "missing interface",
    );
    // Named interface absent from the node's detect report.
    let t = BASE.to_string() + "\n[detect]\nnode-a = \"node-a.detect.json\"\n";
    let e = errs(&t.replace("master = \"ib0\"", "master = \"ib7\""));
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!(e.0[0].line, 7);
    assert!(
        e.0[0]
            .msg
            .contains("missing interface: ib7 not found on node node-a")
            && e.0[0].msg.contains("ib0"),
        "{e}"
    );
    let e = errs(&t.replace("netdev = \"ens1f0np0\"", "netdev = \"eno1\""));
    assert!(e.0[0].msg.contains("no RDMA device behind it"), "{e}");
}

#[test]
fn ipoib_mtu_above_datagram_limit() {
    one_error(
        &BASE.replace("master = \"ib0\"", "master = \"ib0\"\nmtu = 9000"),
        8,
        "above the IPoIB datagram limit 4092",
    );
    // Connected mode allows it...
    parse_plan(
        &BASE.replace(
            "master = \"ib0\"",
            "master = \"ib0\"\nmode = \"connected\"\nmtu = 9000",
        ),
        "plan.toml",
        &examples(),
    )
    .unwrap();
    // ...but not above the master's MTU reported by detect (ib0: 4092).
    let t = BASE.replace("master = \"ib0\"", "master = \"ib0\"\nmtu = 4092")
        + "\n[detect]\nnode-a = \"node-a.detect.json\"\n";
    parse_plan(&t, "plan.toml", &examples()).unwrap();
}

#[test]
fn path_needs_its_table_and_service_needs_pod() {
    one_error(
        &BASE.replace(
            "[roce]\nnetdev = \"ens1f0np0\"\nrange = \"192.168.160.0/24\"\n",
            "",
        ),
        3,
        "needs a [roce] table",
    );
    let named = format!("{BASE}\n[nodes]\nnames = [\"node-a\", \"node-b\"]\n");
    one_error(
        &named.replace("\"host\", \"pod\",", "\"host\", \"service\","),
        3,
        "add \"pod\" to paths",
    );
    // The service path is one single-endpoint Service per node: it needs
    // the nodes.
    one_error(
        &BASE.replace("\"host\", \"pod\",", "\"host\", \"pod\", \"service\","),
        3,
        "one single-endpoint Service per node",
    );
}

fn tmp_file(name: &str, content: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fabperf-k8s-bad-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[test]
fn token_rules() {
    // An inline token is refused (it would be committed with the plan).
    one_error(
        &BASE.replace(
            "rdma_resource = \"rdma/rdma_shared_device_a\"",
            "token = \"0123456789abcdef0123\"",
        ),
        4,
        "inline token ends up in version control",
    );
    let e = errs(&BASE.replace(
        "rdma_resource = \"rdma/rdma_shared_device_a\"",
        "token_file = \"no-such-token\"",
    ));
    assert!(e.0[0].msg.contains("cannot read token file"), "{e}");
    // The committed example token, placeholders and weak tokens in a token file.
    for (content, needle) in [
        ("fabperf-example-token-change-me\n", "published examples"),
        ("CHANGE-ME-0123456789abcdef", "placeholder"),
        ("<your-token-goes-here>", "placeholder"),
        ("aaaaaaaaaaaaaaaaaaaaaaaa", "distinct characters"),
        ("short", "at least 16 characters"),
        ("two words here 0123456789", "at least 16 characters"),
    ] {
        let f = tmp_file("tok", content);
        let e = errs(&BASE.replace(
            "rdma_resource = \"rdma/rdma_shared_device_a\"",
            &format!("token_file = {:?}", f.display().to_string()),
        ));
        assert!(e.0[0].msg.contains(needle), "{content:?}: {e}");
    }
    // A directory, a FIFO-like non-file, an oversized file.
    let dir = std::env::temp_dir();
    let e = errs(&BASE.replace(
        "rdma_resource = \"rdma/rdma_shared_device_a\"",
        &format!("token_file = {:?}", dir.display().to_string()),
    ));
    assert!(e.0[0].msg.contains("not a regular file"), "{e}");
    let big = tmp_file("big-token", &"ab".repeat(4000));
    let e = errs(&BASE.replace(
        "rdma_resource = \"rdma/rdma_shared_device_a\"",
        &format!("token_file = {:?}", big.display().to_string()),
    ));
    assert!(e.0[0].msg.contains("larger than"), "{e}");
    // A good token file is read, trailing newline dropped.
    let good = tmp_file("good-token", "3f9c1e77a0b24d6e8c5f1a2b3c4d5e6f\n");
    let p = parse_plan(
        &BASE.replace(
            "rdma_resource = \"rdma/rdma_shared_device_a\"",
            &format!("token_file = {:?}", good.display().to_string()),
        ),
        "plan.toml",
        &examples(),
    )
    .unwrap();
    assert_eq!(p.token.as_deref(), Some("3f9c1e77a0b24d6e8c5f1a2b3c4d5e6f"));
}

#[test]
fn cni_encapsulation_support() {
    let t = format!(
        "{BASE}\n[cni]\nplugins = [\"flannel\", \"calico\"]\nunderlay_mtu = 9000\nencapsulation = \"geneve\"\npod_cidr = \"10.244.0.0/16\"\n"
    );
    let e = errs(&t);
    assert_eq!(e.0.len(), 2, "{e}");
    assert!(
        e.0[0]
            .msg
            .contains("flannel cannot use encapsulation geneve"),
        "{e}"
    );
    assert!(
        e.0[1]
            .msg
            .contains("calico cannot use encapsulation geneve"),
        "{e}"
    );
}

#[test]
fn toml_syntax_error_has_location() {
    one_error(&BASE.replace("[roce]", "[roce"), 10, "");
}

#[test]
fn several_errors_reported_together() {
    let t = BASE
        .replace("\"roce\"]", "\"roce\", \"x\"]")
        .replace("rdma/rdma_shared_device_a", "no-slash!");
    let e = errs(&t);
    assert_eq!(e.0.len(), 2, "{e}");
    assert!(e.to_string().starts_with("the plan has 2 problems:"));
}

#[test]
fn bad_ipam_ranges() {
    // whereabouts: no nv-ipam block size to hold as well.
    let base = BASE.replace("rdma_resource =", "ipam = \"whereabouts\"\nrdma_resource =");
    let r = |range: &str| base.replace("192.168.150.0/24", range);
    one_error(&r("192.168.150.0"), 9, "not in CIDR form ADDRESS/PREFIX");
    one_error(
        &r("192.168.150.0/33"),
        9,
        "prefix /33 in \"192.168.150.0/33\" exceeds /32",
    );
    one_error(&r("fd00::/129"), 9, "exceeds /128");
    one_error(&r("192.168.350.0/24"), 9, "is not an IP address");
    one_error(&r("192.168.150.0/x"), 9, "prefix \"x\" in");
    one_error(
        &r("192.168.150.1/24"),
        9,
        "[ipoib].range 192.168.150.1/24 has host bits set; write the network address",
    );
    one_error(&r("192.168.150.0/31"), 9, "is too small for two agents");
    // A /30 holds two agents.
    parse_plan(&r("192.168.150.0/30"), "plan.toml", &examples()).unwrap();
    let extra = |line: &str| {
        base.replace(
            "range = \"192.168.150.0/24\"",
            &format!("range = \"192.168.150.0/24\"\n{line}"),
        )
    };
    one_error(
        &extra("range_start = \"192.168.151.10\""),
        10,
        "[ipoib].range_start 192.168.151.10 is outside range 192.168.150.0/24",
    );
    one_error(
        &extra("range_end = \"fd00::1\""),
        10,
        "[ipoib].range_end fd00::1 is outside range",
    );
    one_error(
        &extra("range_start = \"192.168.150.x\""),
        10,
        "[ipoib].range_start \"192.168.150.x\" is not an IP address",
    );
    one_error(
        &extra("range_start = \"192.168.150.200\"\nrange_end = \"192.168.150.100\""),
        11,
        "[ipoib].range_end is below range_start",
    );
    one_error(
        &extra("exclude = [\"192.168.150.0/28\", \"192.168.149.0/24\"]"),
        10,
        "[ipoib].exclude 192.168.149.0/24 is outside range 192.168.150.0/24",
    );
    one_error(
        &extra("exclude = [\"192.168.150.0/33\"]"),
        10,
        "[ipoib].exclude: prefix /33",
    );
    // Excludes that overlap the range are kept, as written.
    let p = parse_plan(
        &extra("exclude = [\"192.168.150.0/28\", \"192.168.0.0/16\"]"),
        "plan.toml",
        &examples(),
    )
    .unwrap();
    assert_eq!(
        p.ipoib.unwrap().ipam.exclude,
        ["192.168.150.0/28", "192.168.0.0/16"]
    );
}

#[test]
fn nv_ipam_range_must_hold_a_block() {
    // network_operator.per_node_block_size is 16 by default.
    let plan = |range: &str| BASE.replace("192.168.150.0/24", range);
    parse_plan(&plan("192.168.150.0/27"), "plan.toml", &examples()).unwrap();
    // 16 addresses less network and broadcast cannot hold a block of 16.
    one_error(
        &plan("192.168.150.0/28"),
        8,
        "[ipoib].range 192.168.150.0/28 cannot hold one nv-ipam block of 16 addresses",
    );
}
