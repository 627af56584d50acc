//! Support bundles made with `cp -rL`, `tar -h` or `rsync -L`: every sysfs symlink became a
//! real directory, so `sys/class/infiniband/<dev>/device` no longer points at the PCI function.
//! PCIe link, NUMA node and driver must still be read (from the `device` directory itself and
//! its `uevent`), and doctor's PCIe findings must still fire.

mod common;

use common::{copy_dereferenced, fixture};
use fabperf_detect::doctor::diagnose;
use fabperf_detect::{detect_root, DetectOptions};
use std::fs;

#[test]
fn dereferenced_copy_keeps_pcie_numa_and_driver() {
    let d = tempfile::tempdir().unwrap();
    let copy = d.path().join("bundle");
    copy_dereferenced(&fixture("cx5-pcie-x8"), &copy);
    let dev = copy.join("sys/class/infiniband/mlx5_0/device");
    let md = fs::symlink_metadata(&dev).unwrap();
    assert!(md.is_dir() && !md.file_type().is_symlink());
    // What the kernel has in the function's uevent (fixtures keep only what detect reads live).
    let uevent = "DRIVER=mlx5_core\nPCI_CLASS=20000\nPCI_ID=15B3:1017\nPCI_SUBSYS_ID=15B3:0007\nPCI_SLOT_NAME=0000:01:00.0\nMODALIAS=pci:v000015B3d00001017sv000015B3sd00000007bc02sc00i00\n";
    fs::write(dev.join("uevent"), uevent).unwrap();
    fs::write(copy.join("sys/class/net/enp1s0f0np0/device/uevent"), uevent).unwrap();
    // A dereferenced `driver` link is a plain directory named `driver`: not a driver name.
    fs::create_dir_all(dev.join("driver")).unwrap();
    // The bus directory may be lost too (bundles often copy only sys/class).
    fs::remove_dir_all(copy.join("sys/bus")).unwrap();

    let opts = DetectOptions::default();
    let orig = detect_root(&fixture("cx5-pcie-x8"), &opts).unwrap();
    let deref = detect_root(&copy, &opts).unwrap();
    let (o, x) = (&orig.rdma_devices[0], &deref.rdma_devices[0]);
    let (op, xp) = (o.pci.as_ref().unwrap(), x.pci.as_ref().unwrap());
    assert_eq!(xp.address, "0000:01:00.0");
    assert_eq!(xp.sysfs, "/sys/class/infiniband/mlx5_0/device");
    for (a, b, what) in [
        (
            &op.current_link_speed,
            &xp.current_link_speed,
            "current_link_speed",
        ),
        (&op.max_link_speed, &xp.max_link_speed, "max_link_speed"),
    ] {
        assert_eq!(a, b, "{what}");
    }
    assert_eq!((xp.current_width, xp.max_width), (Some(8), Some(16)));
    assert_eq!(xp.ceiling_gbps, op.ceiling_gbps);
    assert_eq!(
        (xp.vendor_id.as_str(), xp.device_id.as_str()),
        ("15b3", "1017")
    );
    assert_eq!(xp.model, op.model);
    assert_eq!(x.numa_node, o.numa_node);
    assert!(x.numa_node.is_some());
    assert_eq!(x.driver.as_deref(), Some("mlx5_core"));
    assert!(!x.software);
    let nd = deref.netdev("enp1s0f0np0").unwrap();
    assert_eq!(nd.pci_address.as_deref(), Some("0000:01:00.0"));
    assert_eq!(nd.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(nd.rdma_device.as_deref(), Some("mlx5_0"));

    let ids = |r: &fabperf_detect::doctor::DoctorReport| {
        let mut v: Vec<String> = r.findings.iter().map(|f| f.id.clone()).collect();
        v.sort();
        v
    };
    let (ro, rx) = (diagnose(&orig), diagnose(&deref));
    assert_eq!(ids(&rx), ids(&ro));
    let f = rx
        .with_id("pcie-ceiling")
        .next()
        .expect("pcie-ceiling fires");
    assert_eq!(f.cost_gbps, Some(37.0));
    assert!(f.evidence.iter().any(|e| e
        .path
        .ends_with("sys/class/infiniband/mlx5_0/device/current_link_width")
        && e.value == "8"));
    assert!(rx.with_id("pcie-downgraded").next().is_some());
}
