//! Malformed and missing inputs degrade to "unknown", never a panic.

mod common;

use common::{put, remove, scratch};
use fabperf_detect::doctor::diagnose;
use fabperf_detect::{detect_root, DetectOptions};
use std::fs;
use std::path::{Path, PathBuf};

const FIXTURES: [&str; 6] = [
    "cx5-roce",
    "cx6-hdr-ib",
    "rxe-veth",
    "multihomed-1g",
    "cx5-pcie-x8",
    "pcie-2gpu-sys",
];

fn regular_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let ft = fs::symlink_metadata(&p).unwrap().file_type();
        if ft.is_dir() {
            regular_files(&p, out);
        } else if ft.is_file() {
            out.push(p);
        }
    }
}

/// Every file of every fixture, one at a time: deleted, emptied, or filled with garbage.
/// Detection and diagnosis must still succeed.
#[test]
fn every_file_missing_empty_or_garbage() {
    let garbage: &[&[u8]] = &[
        b"",
        b"\xff\xfe\x00garbage ::: -1 0x 4: 99999999999999999999999\n",
        b"[{\"ifname\": 5, \"addr_info\": [{\"family\": \"inet\", \"local\": \"x\"}]}]",
    ];
    let mut runs = 0;
    for name in FIXTURES {
        let d = scratch(name);
        let mut files = Vec::new();
        regular_files(d.path(), &mut files);
        assert!(files.len() > 20, "{name}: {} files", files.len());
        for f in &files {
            let orig = fs::read(f).unwrap();
            fs::remove_file(f).unwrap();
            let i = detect_root(d.path(), &DetectOptions::default())
                .unwrap_or_else(|e| panic!("{name} without {}: {e}", f.display()));
            let _ = diagnose(&i);
            runs += 1;
            for g in garbage {
                fs::write(f, g).unwrap();
                let i = detect_root(d.path(), &DetectOptions::default())
                    .unwrap_or_else(|e| panic!("{name} with garbage {}: {e}", f.display()));
                let r = diagnose(&i);
                let _ = fabperf_detect::render::inventory_text(&i);
                let _ = fabperf_detect::render::doctor_text(&r);
                runs += 1;
            }
            fs::write(f, &orig).unwrap();
        }
    }
    assert!(runs > 500, "{runs}");
}

#[test]
fn unreadable_values_become_unknown() {
    let d = scratch("cx5-pcie-x8");
    let dev = "/sys/class/infiniband/mlx5_0";
    let pci = "/sys/bus/pci/devices/0000:01:00.0";
    remove(d.path(), &format!("{dev}/ports/1/rate"));
    put(d.path(), &format!("{dev}/ports/1/state"), "garbage\n");
    put(d.path(), &format!("{pci}/current_link_speed"), "Unknown\n");
    put(
        d.path(),
        &format!("{pci}/max_link_speed"),
        "Unknown speed\n",
    );
    remove(d.path(), "/sys/class/net/enp1s0f0np0/speed");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    let p = &i.rdma_devices[0].ports[0];
    assert_eq!(p.rate, None);
    assert_eq!(p.rate_gbps, None);
    assert_eq!(p.state, "UNKNOWN");
    assert!(i.warnings.iter().any(|w| w.contains("state unreadable")));
    let pc = i.rdma_devices[0].pci.as_ref().unwrap();
    assert_eq!(pc.current_speed_gts, None);
    assert_eq!(pc.ceiling_gbps, None);
    assert_eq!(i.netdev("enp1s0f0np0").unwrap().speed_mbps, None);
    // Without a rate or a ceiling there is no ceiling verdict (and no guess); the width
    // downgrade is still known, its cost is not.
    let r = diagnose(&i);
    assert_eq!(r.with_id("pcie-ceiling").count(), 0);
    let f: Vec<_> = r.with_id("pcie-downgraded").collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].cost_gbps, None);
    assert_eq!(f[0].severity, fabperf_detect::doctor::Severity::Warning);
}

#[test]
fn partial_sysfs() {
    let d = scratch("multihomed-1g");
    // A device without ports, a netdev without its device link, no sysctls, no /proc/self.
    remove(d.path(), "/sys/class/infiniband/rocep94s0f1/ports");
    remove(d.path(), "/sys/class/net/eno1/device");
    remove(d.path(), "/proc/sys/net/ipv4/conf");
    remove(d.path(), "/proc/self");
    remove(d.path(), "/proc/sys/kernel/hostname");
    remove(d.path(), "/sys/class/infiniband/rocep94s0f0/device");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    // No PCI link: still hardware, named from hca_type MT4119 (= 0x1017).
    let d0 = i.rdma_device("rocep94s0f0").unwrap();
    assert!(!d0.software);
    assert_eq!(d0.pci, None);
    assert_eq!(d0.model.as_deref(), Some("ConnectX-5"));
    let dev = i.rdma_device("rocep94s0f1").unwrap();
    assert!(dev.ports.is_empty());
    assert!(i
        .warnings
        .iter()
        .any(|w| w.contains("rocep94s0f1: no ports")));
    let eno1 = i.netdev("eno1").unwrap();
    assert_eq!(eno1.pci_address, None);
    assert_eq!(eno1.driver, None);
    assert_eq!(i.sysctl.all.rp_filter, None);
    assert!(i.sysctl.interfaces.is_empty());
    assert_eq!(i.memlock, None);
    assert_eq!(i.hostname, "unknown");
    // Still diagnosable: the 1 GbE node IP is still found from addresses + sysfs speed.
    let r = diagnose(&i);
    assert_eq!(r.with_id("node-ip-slow-link").count(), 1);
    assert_eq!(
        r.with_id("memlock-low").count(),
        0,
        "unknown memlock is not reported as low"
    );
}

#[test]
fn missing_and_malformed_iproute_json() {
    let d = scratch("cx5-roce");
    fs::write(d.path().join("ip-addr.json"), "this is not json").unwrap();
    fs::remove_file(d.path().join("ip-route.json")).unwrap();
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert!(i.netdevs.iter().all(|n| n.ipv4.is_empty()));
    assert_eq!(i.node_ip, None);
    assert!(i.warnings.iter().any(|w| w.contains("ip-addr.json")));
    assert!(i.warnings.iter().any(|w| w.contains("ip-route.json")));
    // Netdevs and RDMA are still there.
    assert_eq!(i.rdma_devices.len(), 1);
    assert_eq!(
        i.netdev("ens1f0np0").unwrap().rdma_device.as_deref(),
        Some("mlx5_0")
    );
    let r = diagnose(&i);
    assert_eq!(r.with_id("node-ip-unknown").count(), 1);
}

#[test]
fn a_snapshot_cannot_reach_the_real_host() {
    let d = scratch("rxe-veth");
    // An absolute symlink is resolved inside the snapshot, not on the host.
    remove(d.path(), "/proc/self");
    std::os::unix::fs::symlink("/proc/1", d.path().join("proc/self")).unwrap();
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert_eq!(i.memlock, None);
    // A symlink loop is an unknown, not a hang.
    remove(d.path(), "/sys/class/net/veth1");
    std::os::unix::fs::symlink("veth1", d.path().join("sys/class/net/veth1")).unwrap();
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    let v = i.netdev("veth1").unwrap();
    assert_eq!((v.mtu, v.arphrd), (None, None));
}

#[test]
fn empty_infiniband_class_is_reported_plainly() {
    let d = scratch("cx5-roce");
    remove(d.path(), "/sys/class/infiniband/mlx5_0");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert!(!i.rdma_available);
    assert!(i.rdma_note.as_deref().unwrap().contains("is empty"));
    remove(d.path(), "/sys/class/infiniband");
    remove(d.path(), "/sys/module/ib_core");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert!(i
        .rdma_note
        .as_deref()
        .unwrap()
        .contains("/sys/class/infiniband is absent"));
    let r = diagnose(&i);
    assert!(!r.has_error());
    assert_eq!(r.with_id("no-rdma").count(), 1);
}
