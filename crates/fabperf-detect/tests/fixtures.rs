//! The five fixture nodes: inventory and findings.

mod common;

use common::{fixture, put, remove, scratch};
use fabperf_detect::doctor::{diagnose, DoctorReport, Finding, Severity};
use fabperf_detect::{detect_root, DetectError, DetectOptions, Inventory};
use std::net::IpAddr;
use std::path::Path;

fn inv(name: &str) -> Inventory {
    detect_root(&fixture(name), &DetectOptions::default()).expect("fixture reads")
}

fn ids(r: &DoctorReport, sev: Severity) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.severity == sev)
        .map(|f| f.id.clone())
        .collect()
}

fn one<'a>(r: &'a DoctorReport, id: &'a str) -> &'a Finding {
    let v: Vec<&Finding> = r.with_id(id).collect();
    assert_eq!(v.len(), 1, "expected one {id}, got {:#?}", r.findings);
    v[0]
}

fn has_evidence(f: &Finding, path_suffix: &str, value: &str) -> bool {
    f.evidence
        .iter()
        .any(|e| e.path.ends_with(path_suffix) && e.value == value)
}

#[test]
fn cx5_roce_node() {
    let i = inv("cx5-roce");
    assert_eq!(i.schema, "fabperf.detect/1");
    assert_eq!(i.hostname, "node-cx5");
    assert!(i.rdma_available);
    assert_eq!(i.rdma_note, None);
    assert_eq!(i.rdma_netns_mode.as_deref(), Some("shared"));
    assert_eq!(i.rdma_devices.len(), 1);
    let d = &i.rdma_devices[0];
    assert_eq!(d.name, "mlx5_0");
    assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
    assert!(!d.software);
    assert_eq!(d.model.as_deref(), Some("ConnectX-5"));
    assert_eq!(d.node_guid.as_deref(), Some("0c42:a103:0065:3f5c"));
    assert_eq!(d.fw_ver.as_deref(), Some("16.35.2000"));
    assert_eq!(d.hca_type.as_deref(), Some("MT4119"));
    assert_eq!(d.numa_node, Some(0));
    let pci = d.pci.as_ref().unwrap();
    assert_eq!(pci.address, "0000:3b:00.0");
    assert_eq!(
        (pci.vendor_id.as_str(), pci.device_id.as_str()),
        ("15b3", "1017")
    );
    assert!(!pci.is_vf);
    assert_eq!(pci.current_gen, Some(3));
    assert_eq!(pci.current_width, Some(16));
    assert_eq!(pci.ceiling_gbps, Some(126.016));
    let p = &d.ports[0];
    assert_eq!(p.port, 1);
    assert_eq!(p.link_layer, "Ethernet");
    assert_eq!(p.state, "ACTIVE");
    assert_eq!(p.phys_state.as_deref(), Some("LinkUp"));
    assert_eq!(p.rate_gbps, Some(100.0));
    assert_eq!(p.lanes, Some(4));
    assert_eq!(p.lane_speed.as_deref(), Some("EDR"));
    assert_eq!(p.lane_gbps, Some(25.0));
    assert_eq!(p.lid, None, "LIDs are IB-only");
    // Four valid GIDs; the zero entries are skipped.
    assert_eq!(p.gids.len(), 4);
    assert_eq!(p.gids[3].gid_type.as_deref(), Some("RoCE v2"));
    assert_eq!(p.gids[3].ipv4.as_deref(), Some("10.10.0.11"));
    assert_eq!(p.gids[3].netdev.as_deref(), Some("ens1f0np0"));
    assert!(p.gids[0].link_local && !p.gids[3].link_local);
    assert_eq!(p.roce_v2_ipv4_gid_index, Some(3));
    assert_eq!(p.preferred_gid_index, Some(3));
    assert_eq!(p.netdevs, vec!["ens1f0np0"]);

    let n = i.netdev("ens1f0np0").unwrap();
    assert_eq!(n.kind, "ethernet");
    assert_eq!(n.mtu, Some(9000));
    assert_eq!(n.speed_mbps, Some(100_000));
    assert_eq!(n.operstate.as_deref(), Some("up"));
    assert_eq!(n.ipv4, vec!["10.10.0.11/24"]);
    assert_eq!(n.ipv6, vec!["fe80::e42:a1ff:fe65:3f5c/64"]);
    assert_eq!(n.rdma_device.as_deref(), Some("mlx5_0"));
    assert_eq!(n.rdma_port, Some(1));
    assert_eq!(n.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(n.ipoib_mode, None);
    let lo = i.netdev("lo").unwrap();
    assert_eq!(lo.kind, "loopback");
    assert!(lo.virtual_device && lo.rdma_device.is_none());

    let ni = i.node_ip.as_ref().unwrap();
    assert_eq!(ni.address, "10.10.0.11");
    assert_eq!(ni.interface, "ens1f0np0");
    assert_eq!(ni.source, "default-route");
    assert_eq!(
        ni.route.as_deref(),
        Some("default via 10.10.0.1 dev ens1f0np0")
    );
    assert_eq!(i.sysctl.all.rp_filter, Some(2));
    let m = i.memlock.as_ref().unwrap();
    assert!(m.unlimited && m.cap_ipc_lock == Some(true));
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);

    let r = diagnose(&i);
    assert!(!r.has_error(), "healthy node: {:#?}", r.findings);
    assert!(ids(&r, Severity::Warning).is_empty(), "{:#?}", r.findings);
    assert_eq!(ids(&r, Severity::Info), vec!["roce-gid-index"]);
    assert!(one(&r, "roce-gid-index").fix[0].contains("-x 3"));
}

#[test]
fn cx6_hdr_infiniband_node_with_datagram_ipoib() {
    let i = inv("cx6-hdr-ib");
    let d = i.rdma_device("mlx5_0").unwrap();
    assert_eq!(d.model.as_deref(), Some("ConnectX-6"));
    assert_eq!(d.numa_node, Some(1));
    let pci = d.pci.as_ref().unwrap();
    assert_eq!(pci.class.as_deref(), Some("020700"));
    assert_eq!(pci.current_gen, Some(4));
    assert_eq!(pci.ceiling_gbps, Some(252.048));
    let p = &d.ports[0];
    assert_eq!(p.link_layer, "InfiniBand");
    assert_eq!(p.rate_gbps, Some(200.0));
    assert_eq!(p.lane_speed.as_deref(), Some("HDR"));
    assert_eq!(p.lane_gbps, Some(50.0));
    assert_eq!(p.lid.as_deref(), Some("0x12"));
    assert_eq!(p.sm_lid.as_deref(), Some("0x1"));
    // ndevs are unreadable on IB ports: no netdev from GIDs, IPoIB bound by its address.
    assert_eq!(p.gids.len(), 1);
    assert_eq!(p.gids[0].netdev, None);
    assert_eq!(p.roce_v2_ipv4_gid_index, None);
    assert_eq!(p.preferred_gid_index, Some(0));
    assert_eq!(p.netdevs, vec!["ib0"]);
    let ib0 = i.netdev("ib0").unwrap();
    assert_eq!(ib0.kind, "ipoib");
    assert_eq!(ib0.mtu, Some(2044));
    assert_eq!(ib0.speed_mbps, Some(200_000));
    assert_eq!(ib0.ipoib_mode.as_deref(), Some("datagram"));
    assert_eq!(ib0.ipoib_pkey.as_deref(), Some("0xffff"));
    assert_eq!(ib0.rdma_device.as_deref(), Some("mlx5_0"));
    assert_eq!(ib0.rdma_port, Some(1));
    assert_eq!(i.node_ip.as_ref().unwrap().interface, "ib0");

    let r = diagnose(&i);
    assert!(!r.has_error(), "{:#?}", r.findings);
    assert_eq!(ids(&r, Severity::Warning), vec!["ipoib-datagram-mtu"]);
    let f = one(&r, "ipoib-datagram-mtu");
    assert_eq!(f.subject, "ib0");
    assert!(has_evidence(f, "sys/class/net/ib0/mode", "datagram"));
    assert!(has_evidence(f, "sys/class/net/ib0/mtu", "2044"));
    // 2K IB MTU: raise to 4K; ConnectX-6 runs enhanced IPoIB (datagram only inbox).
    assert!(f.fix.iter().any(|x| x.contains("mtu=5")));
    assert!(f.fix.iter().any(|x| x.contains("ipoib_enhanced=0")));
    assert!(f
        .fix
        .iter()
        .any(|x| x.contains("echo connected > /sys/class/net/ib0/mode")));
}

#[test]
fn soft_roce_on_veth_node() {
    let i = inv("rxe-veth");
    let d = i.rdma_device("rxe0").unwrap();
    assert!(d.software);
    assert_eq!(d.pci, None);
    assert_eq!(d.driver.as_deref(), Some("rdma_rxe"));
    assert_eq!(d.model.as_deref(), Some("Soft-RoCE (rxe)"));
    assert_eq!(d.parent_netdev.as_deref(), Some("veth0"));
    assert_eq!(d.numa_node, None);
    let p = &d.ports[0];
    assert_eq!(p.rate_gbps, Some(10.0));
    assert_eq!(p.lane_speed.as_deref(), Some("FDR10"));
    // rxe is RoCE v2 only: idx 0 link-local, idx 1 IPv4.
    assert_eq!(p.roce_v2_ipv4_gid_index, Some(1));
    assert_eq!(p.preferred_gid_index, Some(1));
    assert_eq!(p.netdevs, vec!["veth0"]);
    let v = i.netdev("veth0").unwrap();
    assert!(v.virtual_device);
    assert_eq!(v.rdma_device.as_deref(), Some("rxe0"));
    assert_eq!(v.pci_address, None);
    let veth1 = i.netdev("veth1").unwrap();
    assert_eq!(veth1.rdma_device, None);
    // virtio: speed -1 is unknown; the PCI function is found through the virtio bus.
    let eth0 = i.netdev("eth0").unwrap();
    assert_eq!(eth0.speed_mbps, None);
    assert_eq!(eth0.pci_address.as_deref(), Some("0000:00:03.0"));
    assert_eq!(eth0.driver.as_deref(), Some("virtio_net"));
    let epci = eth0.pci.as_ref().unwrap();
    assert_eq!(epci.current_link_speed, None);
    assert_eq!(epci.ceiling_gbps, None);
    assert_eq!(epci.numa_node, None, "numa_node -1 is unknown");
    assert_eq!(i.node_ip.as_ref().unwrap().interface, "eth0");

    let r = diagnose(&i);
    assert!(!r.has_error(), "{:#?}", r.findings);
    assert!(ids(&r, Severity::Warning).is_empty(), "{:#?}", r.findings);
    // A software device is not "the fabric": no node-ip-slow-link, no PCIe findings.
    assert_eq!(r.with_id("node-ip-slow-link").count(), 0);
}

#[test]
fn multihomed_node_ip_on_1g_next_to_100g() {
    let i = inv("multihomed-1g");
    assert_eq!(i.rdma_netns_mode.as_deref(), Some("exclusive"));
    let names: Vec<&str> = i.rdma_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["rocep94s0f0", "rocep94s0f1"]);
    assert_eq!(
        i.netdev("ens2f1np1").unwrap().rdma_device.as_deref(),
        Some("rocep94s0f1")
    );
    // Link down: speed unreadable -> unknown.
    let eno2 = i.netdev("eno2").unwrap();
    assert_eq!(eno2.speed_mbps, None);
    assert_eq!(eno2.operstate.as_deref(), Some("down"));
    let ni = i.node_ip.as_ref().unwrap();
    assert_eq!(
        (ni.address.as_str(), ni.interface.as_str()),
        ("172.16.1.12", "eno1")
    );
    assert_eq!(ni.subnet.as_deref(), Some("172.16.1.0/24"));
    assert_eq!(i.default_routes[0].metric, Some(100));
    let m = i.memlock.as_ref().unwrap();
    assert_eq!(m.soft_bytes, Some(65536));
    assert_eq!(m.cap_ipc_lock, Some(false));

    let r = diagnose(&i);
    assert!(r.has_error());
    assert_eq!(
        ids(&r, Severity::Error),
        vec!["memlock-low", "node-ip-slow-link"]
    );
    assert_eq!(
        ids(&r, Severity::Warning),
        vec![
            "mtu-mismatch",
            "rdma-netns-exclusive",
            "rp-filter-multihomed"
        ]
    );

    let f = one(&r, "node-ip-slow-link");
    assert_eq!(f.subject, "eno1");
    assert_eq!(f.cost_gbps, Some(99.0));
    assert!(has_evidence(f, "sys/class/net/eno1/speed", "1000"));
    assert!(has_evidence(f, "sys/class/net/ens2f0np0/speed", "100000"));
    // The jumbo-MTU fabric port is the one to use.
    assert!(f.fix.iter().any(|x| x.contains("--node-ip=10.10.0.12")));
    assert!(f
        .fix
        .iter()
        .any(|x| x.contains("IP_AUTODETECTION_METHOD=interface=ens2f0np0")));
    assert!(f.fix.iter().any(|x| x.contains("--iface=ens2f0np0")));
    assert!(f.fix.iter().any(|x| x.contains("devices: [ens2f0np0]")));
    assert!(f
        .fix
        .iter()
        .any(|x| x.contains("transportInterface: ens2f0np0")));
    // The published 0.908 Gbit/s figure is VXLAN over this 1 GbE link.
    assert!(f.detail.contains("0.909"), "{}", f.detail);

    let f = one(&r, "mtu-mismatch");
    assert_eq!(f.cost_gbps, Some(4.9));
    assert!(f.fix[0].contains("ip link set ens2f1np1 mtu 9000"));

    let f = one(&r, "rp-filter-multihomed");
    assert_eq!(f.subject, "10.10.0.0/24");
    assert!(has_evidence(
        f,
        "proc/sys/net/ipv4/conf/ens2f0np0/rp_filter",
        "1"
    ));

    let f = one(&r, "memlock-low");
    assert!(f.fix.iter().any(|x| x.contains("ulimit -l unlimited")));
    assert!(f.fix.iter().any(|x| x.contains("IPC_LOCK")));

    let f = one(&r, "rdma-netns-exclusive");
    assert!(has_evidence(
        f,
        "sys/module/ib_core/parameters/netns_mode",
        "N"
    ));
    assert!(f.fix[0].contains("rdma system set netns shared"));
}

#[test]
fn node_ip_flag_moves_the_node_address() {
    let opts = DetectOptions {
        node_ip: Some("10.10.0.12".parse().unwrap()),
    };
    let i = detect_root(&fixture("multihomed-1g"), &opts).unwrap();
    let ni = i.node_ip.as_ref().unwrap();
    assert_eq!(ni.interface, "ens2f0np0");
    assert_eq!(ni.source, "node-ip-flag");
    assert_eq!(
        ni.route.as_deref(),
        Some("10.10.0.0/24 dev ens2f0np0 src 10.10.0.12")
    );
    let r = diagnose(&i);
    assert_eq!(r.with_id("node-ip-slow-link").count(), 0);

    let bad: IpAddr = "10.9.9.9".parse().unwrap();
    let e = detect_root(
        &fixture("multihomed-1g"),
        &DetectOptions { node_ip: Some(bad) },
    )
    .unwrap_err();
    assert!(matches!(e, DetectError::NodeIpNotFound { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("10.9.9.9") && msg.contains("172.16.1.12 on eno1"),
        "{msg}"
    );
}

#[test]
fn nic_trained_at_pcie_x8() {
    let i = inv("cx5-pcie-x8");
    let pci = i.rdma_devices[0].pci.as_ref().unwrap();
    // The pre-5.7 "8 GT/s" format.
    assert_eq!(pci.current_link_speed.as_deref(), Some("8 GT/s"));
    assert_eq!(pci.current_speed_gts, Some(8.0));
    assert_eq!((pci.current_width, pci.max_width), (Some(8), Some(16)));
    assert_eq!(pci.ceiling_gbps, Some(63.008));
    assert_eq!(pci.max_ceiling_gbps, Some(126.016));

    let r = diagnose(&i);
    assert_eq!(ids(&r, Severity::Error), vec!["pcie-ceiling"]);
    assert_eq!(ids(&r, Severity::Warning), vec!["pcie-downgraded"]);
    let f = one(&r, "pcie-ceiling");
    assert_eq!(f.cost_gbps, Some(37.0));
    assert!(has_evidence(
        f,
        "sys/bus/pci/devices/0000:01:00.0/current_link_width",
        "8"
    ));
    assert!(has_evidence(
        f,
        "sys/class/infiniband/mlx5_0/ports/1/rate",
        "100 Gb/sec (4X EDR)"
    ));
    let f = one(&r, "pcie-downgraded");
    assert_eq!(f.cost_gbps, Some(37.0));
}

#[test]
fn ib_port_stuck_in_init_means_no_subnet_manager() {
    let d = scratch("cx6-hdr-ib");
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    put(d.path(), &format!("{port}/state"), "2: INIT\n");
    put(d.path(), &format!("{port}/lid"), "0x0\n");
    put(d.path(), &format!("{port}/sm_lid"), "0x0\n");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert_eq!(i.rdma_devices[0].ports[0].state, "INIT");
    let r = diagnose(&i);
    let f = one(&r, "port-not-active");
    assert_eq!(f.severity, Severity::Error);
    assert!(f.summary.contains("no subnet manager"));
    assert!(has_evidence(f, "ports/1/sm_lid", "0x0"));
    assert!(f.fix.iter().any(|x| x.contains("opensm")));
}

#[test]
fn down_port_is_a_warning() {
    let d = scratch("cx5-roce");
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    put(d.path(), &format!("{port}/state"), "1: DOWN\n");
    put(d.path(), &format!("{port}/phys_state"), "2: Polling\n");
    let r = diagnose(&detect_root(d.path(), &DetectOptions::default()).unwrap());
    let f = one(&r, "port-not-active");
    assert_eq!(f.severity, Severity::Warning);
    assert!(f.summary.contains("Polling"));
}

#[test]
fn roce_port_without_v2_ipv4_gid() {
    let d = scratch("cx5-roce");
    let gids = "/sys/class/infiniband/mlx5_0/ports/1";
    // Only the link-local entries remain (no IPv4 on the netdev).
    for i in [2, 3] {
        put(
            d.path(),
            &format!("{gids}/gids/{i}"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        remove(d.path(), &format!("{gids}/gid_attrs/types/{i}"));
        remove(d.path(), &format!("{gids}/gid_attrs/ndevs/{i}"));
    }
    // ...and drop the netdev's IPv4 address from `ip -j addr show`.
    let path = d.path().join("ip-addr.json");
    let mut links: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for l in links.as_array_mut().unwrap() {
        if l["ifname"] == "ens1f0np0" {
            l["addr_info"]
                .as_array_mut()
                .unwrap()
                .retain(|a| a["family"] != "inet");
        }
    }
    std::fs::write(&path, links.to_string()).unwrap();
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    let p = &i.rdma_devices[0].ports[0];
    assert_eq!(p.roce_v2_ipv4_gid_index, None);
    // Link-local GIDs are never chosen.
    assert_eq!(p.preferred_gid_index, None);
    let r = diagnose(&i);
    let f = one(&r, "roce-v2-gid-missing");
    assert_eq!(f.severity, Severity::Warning);
    assert!(f.fix[0].contains("ip addr add"), "{:?}", f.fix);
}

#[test]
fn sparse_gid_table_as_in_a_pod() {
    let d = scratch("cx5-roce");
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    // Pod view: only one IPv4 RoCE v2 entry, at index 7.
    for i in 0..4 {
        put(
            d.path(),
            &format!("{port}/gids/{i}"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
    }
    put(
        d.path(),
        &format!("{port}/gids/7"),
        "0000:0000:0000:0000:0000:ffff:0a0a:000b\n",
    );
    put(d.path(), &format!("{port}/gid_attrs/types/7"), "RoCE v2\n");
    put(
        d.path(),
        &format!("{port}/gid_attrs/ndevs/7"),
        "ens1f0np0\n",
    );
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    let p = &i.rdma_devices[0].ports[0];
    assert_eq!(p.gids.len(), 1);
    assert_eq!(p.roce_v2_ipv4_gid_index, Some(7));
    assert_eq!(p.preferred_gid_index, Some(7));
}

#[test]
fn inventory_json_honours_the_contract() {
    let i = inv("multihomed-1g");
    let v: serde_json::Value = serde_json::from_str(&i.to_json_pretty()).unwrap();
    assert_eq!(v["schema"], "fabperf.detect/1");
    assert!(v["hostname"].is_string());
    assert!(v["rdma_available"].is_boolean());
    assert!(v["rdma_note"].is_null());
    let d = &v["rdma_devices"][0];
    for k in ["name", "driver", "node_guid"] {
        assert!(d[k].is_string(), "{k}");
    }
    assert!(d["software"].is_boolean());
    let pci = &d["pci"];
    assert_eq!(pci["address"], "0000:5e:00.0");
    assert_eq!(pci["vendor_id"], "15b3");
    assert_eq!(pci["device_id"], "1017");
    assert_eq!(pci["model"], "ConnectX-5");
    assert_eq!(pci["is_vf"], false);
    let p = &d["ports"][0];
    assert_eq!(p["port"], 1);
    assert_eq!(p["link_layer"], "Ethernet");
    assert_eq!(p["state"], "ACTIVE");
    assert_eq!(p["rate_gbps"], 100.0);
    assert_eq!(p["netdevs"][0], "ens2f0np0");
    let n = v["netdevs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "ens2f0np0")
        .unwrap();
    assert_eq!(n["kind"], "ethernet");
    assert_eq!(n["mtu"], 9000);
    assert_eq!(n["speed_mbps"], 100000);
    assert_eq!(n["operstate"], "up");
    assert_eq!(n["ipv4"][0], "10.10.0.12/24");
    assert!(n["ipv6"].is_array());
    assert!(n["ipoib_mode"].is_null());
    assert_eq!(n["rdma_device"], "rocep94s0f0");
    assert_eq!(n["rdma_port"], 1);
    let eno2 = v["netdevs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "eno2")
        .unwrap();
    assert!(eno2["speed_mbps"].is_null());
    assert_eq!(v["node_ip"]["address"], "172.16.1.12");
    assert_eq!(v["node_ip"]["interface"], "eno1");
    assert_eq!(v["node_ip"]["source"], "default-route");

    // Software device: pci null. No RDMA: rdma_note set.
    let rxe: serde_json::Value = serde_json::from_str(&inv("rxe-veth").to_json_pretty()).unwrap();
    assert!(rxe["rdma_devices"][0]["pci"].is_null());
    assert_eq!(rxe["rdma_devices"][0]["software"], true);
}

#[test]
fn inventory_loads_back_from_a_json_file() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "cx5-roce",
        "cx6-hdr-ib",
        "rxe-veth",
        "multihomed-1g",
        "cx5-pcie-x8",
    ] {
        let i = inv(name);
        let p = dir.path().join(format!("{name}.json"));
        std::fs::write(&p, i.to_json_pretty()).unwrap();
        let back = Inventory::from_json_file(&p).unwrap();
        assert_eq!(back, i, "{name}");
        // Doctor on a loaded file gives the same findings.
        assert_eq!(diagnose(&back), diagnose(&i));
    }
    let p = dir.path().join("bad.json");
    std::fs::write(&p, "{\"schema\": \"fabperf.detect/1\", \"netdevs\": 5}").unwrap();
    let e = Inventory::from_json_file(&p).unwrap_err().to_string();
    assert!(e.contains("not a fabperf detect JSON file"), "{e}");
    let mut v: serde_json::Value = serde_json::from_str(&inv("cx5-roce").to_json_pretty()).unwrap();
    v["schema"] = "fabperf.detect/99".into();
    std::fs::write(&p, v.to_string()).unwrap();
    let e = Inventory::from_json_file(&p).unwrap_err().to_string();
    assert!(e.contains("fabperf.detect/99"), "{e}");
    assert!(Inventory::from_json_file(dir.path().join("missing.json")).is_err());
}

#[test]
fn doctor_json_has_ids_severity_evidence_cost_fix() {
    let r = diagnose(&inv("cx5-pcie-x8"));
    let v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
    assert_eq!(v["schema"], "fabperf.doctor/1");
    assert_eq!(v["errors"], 1);
    let f = &v["findings"][0];
    assert_eq!(f["id"], "pcie-ceiling");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["cost_gbps"], 37.0);
    assert!(f["evidence"][0]["path"].is_string() && f["evidence"][0]["value"].is_string());
    assert!(f["fix"].as_array().is_some_and(|a| !a.is_empty()));
}

#[test]
fn bad_roots_are_input_errors() {
    let e = detect_root(Path::new("/nonexistent/fabperf"), &DetectOptions::default()).unwrap_err();
    assert!(matches!(e, DetectError::RootMissing(_)));
    let d = tempfile::tempdir().unwrap();
    let e = detect_root(d.path(), &DetectOptions::default()).unwrap_err();
    assert!(matches!(e, DetectError::NotASnapshot(_)));
    assert!(e.to_string().contains("--capture"));
}

/// Every value in `old` is present and equal in `new` (which may have more fields).
fn json_subset(old: &serde_json::Value, new: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                let nv = n.get(k).unwrap_or_else(|| panic!("{at}.{k} missing"));
                json_subset(v, nv, &format!("{at}.{k}"));
            }
        }
        (Value::Array(o), Value::Array(n)) => {
            assert_eq!(o.len(), n.len(), "{at}: length");
            for (idx, (a, b)) in o.iter().zip(n).enumerate() {
                json_subset(a, b, &format!("{at}[{idx}]"));
            }
        }
        (a, b) => assert_eq!(a, b, "{at}"),
    }
}

/// A real capture taken inside the soft-RoCE QEMU guest (kernel 7.3.4, rxe0 on veth0 and rxe1
/// on veth1 in another network namespace) with `fabperf detect --capture`; only the all-zero
/// GID entries were dropped before committing (the detector skips them anyway).
#[test]
fn real_soft_roce_capture_reads_back_as_captured() {
    let dir = fixture("rxe-qemu-capture");
    let i = detect_root(&dir, &DetectOptions::default()).unwrap();
    // Everything the guest saw live (detect.json, written by the capture) is read back the
    // same; fields added to the inventory since the capture are not in the file.
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("detect.json")).unwrap()).unwrap();
    assert_eq!(saved["source"]["mode"], "live");
    let mut now = serde_json::to_value(&i).unwrap();
    now["source"] = saved["source"].clone();
    json_subset(&saved, &now, "$");
    // doctor.json in the bundle: same findings.
    let saved_doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("doctor.json")).unwrap()).unwrap();
    let key = |f: &serde_json::Value| format!("{} {} {}", f["id"], f["severity"], f["subject"]);
    let saved_ids: Vec<String> = saved_doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    let now_doc = serde_json::to_value(diagnose(&i)).unwrap();
    let now_ids: Vec<String> = now_doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    assert_eq!(saved_ids, now_ids);

    assert_eq!(i.hostname, "softroce");
    let rxe0 = i.rdma_device("rxe0").unwrap();
    assert!(rxe0.software);
    assert_eq!(rxe0.driver.as_deref(), Some("rdma_rxe"));
    assert_eq!(rxe0.parent_netdev.as_deref(), Some("veth0"));
    let p = &rxe0.ports[0];
    assert_eq!(p.rate.as_deref(), Some("10 Gb/sec (1X FDR10)"));
    assert_eq!(p.rate_gbps, Some(10.0));
    assert_eq!(p.gids.len(), 2);
    assert_eq!(p.gids[1].ipv4.as_deref(), Some("10.77.0.1"));
    assert_eq!(p.roce_v2_ipv4_gid_index, Some(1));
    let veth0 = i.netdev("veth0").unwrap();
    assert_eq!(veth0.rdma_device.as_deref(), Some("rxe0"));
    assert_eq!(veth0.mtu, Some(9000));
    // rxe1's netdev lives in another namespace: bound by its GIDs, absent from /sys/class/net.
    assert_eq!(
        i.rdma_device("rxe1").unwrap().ports[0].netdevs,
        vec!["veth1"]
    );
    assert!(i.netdev("veth1").is_none());
    let r = diagnose(&i);
    assert!(!r.has_error(), "{:#?}", r.findings);
}

/// A file holding only the contract fields (as another tool might write it) loads and diagnoses.
#[test]
fn contract_only_json_loads() {
    let text = r#"{
      "schema": "fabperf.detect/1", "hostname": "node-a", "rdma_available": true, "rdma_note": null,
      "rdma_devices": [{"name": "mlx5_0", "driver": "mlx5_core", "software": false,
        "node_guid": "0c42:a103:0065:3f5c",
        "pci": {"address": "0000:3b:00.0", "vendor_id": "15b3", "device_id": "1017",
                "model": "ConnectX-5", "is_vf": false},
        "ports": [{"port": 1, "link_layer": "Ethernet", "state": "ACTIVE", "rate_gbps": 100.0,
                   "netdevs": ["ens1f0np0"]}]}],
      "netdevs": [
        {"name": "ens1f0np0", "kind": "ethernet", "mtu": 9000, "speed_mbps": 100000,
         "operstate": "up", "ipv4": ["10.0.1.5/24"], "ipv6": [], "ipoib_mode": null,
         "rdma_device": "mlx5_0", "rdma_port": 1},
        {"name": "eno1", "kind": "ethernet", "mtu": 1500, "speed_mbps": 1000, "operstate": "up",
         "ipv4": ["10.0.0.5/24"], "ipv6": [], "ipoib_mode": null, "rdma_device": null,
         "rdma_port": null}],
      "node_ip": {"address": "10.0.0.5", "interface": "eno1", "source": "default-route"}
    }"#;
    let i = Inventory::from_json_str(text, "contract").unwrap();
    assert_eq!(
        i.rdma_devices[0].pci.as_ref().unwrap().model.as_deref(),
        Some("ConnectX-5")
    );
    assert_eq!(i.netdev("eno1").unwrap().speed_mbps, Some(1000));
    let r = diagnose(&i);
    let f = one(&r, "node-ip-slow-link");
    assert_eq!(f.cost_gbps, Some(99.0));
    assert!(f.fix.iter().any(|x| x.contains("--node-ip=10.0.1.5")));
}

/// The software-device rule other crates use (the RDMA engine's poll priority).
#[test]
fn software_rdma_devices_are_told_apart() {
    use fabperf_detect::rdma_device_is_software as sw;
    assert_eq!(sw(&fixture("rxe-veth"), "rxe0"), Some(true));
    assert_eq!(sw(&fixture("rxe-qemu-capture"), "rxe1"), Some(true));
    assert_eq!(sw(&fixture("cx5-roce"), "mlx5_0"), Some(false));
    assert_eq!(sw(&fixture("cx6-hdr-ib"), "mlx5_0"), Some(false));
    assert_eq!(sw(&fixture("cx5-roce"), "absent"), None);
    assert_eq!(sw(&fixture("cx5-roce"), "../../net"), None);
    // Same verdict as the inventory's.
    for name in ["rxe-veth", "cx5-roce", "multihomed-1g"] {
        for d in inv(name).rdma_devices {
            assert_eq!(
                sw(&fixture(name), &d.name),
                Some(d.software),
                "{name} {}",
                d.name
            );
        }
    }
}
