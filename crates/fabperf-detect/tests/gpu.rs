//! GPU nodes: the GPU × RDMA matrix, rails, GPUDirect prerequisites and the doctor's GPU rules
//! on the hand-written fixtures (an 8 × H100 / 8 × ConnectX-7 node with two levels of PCIe
//! switches, clean and with ACS on, a degraded link, no GPUDirect path; a 2-GPU node whose second
//! GPU has no NIC on its socket).

mod common;

use common::{fixture, put, remove, scratch};
use fabperf_detect::doctor::{diagnose, DoctorReport, Severity};
use fabperf_detect::{assign_rails, detect_root, DetectOptions, Inventory, RailRule};

fn inv(name: &str) -> Inventory {
    detect_root(&fixture(name), &DetectOptions::default()).expect("fixture reads")
}

fn ids(r: &DoctorReport) -> Vec<(String, Severity, String)> {
    r.findings
        .iter()
        .map(|f| (f.id.clone(), f.severity, f.subject.clone()))
        .collect()
}

const GPU_IDS: [&str; 7] = [
    "gpudirect-unavailable",
    "pcie-acs-redirect",
    "iommu-translated",
    "pcie-mrrs-low",
    "gpu-pcie-downgraded",
    "gpu-nic-sys",
    "pcie-downgraded",
];

#[test]
fn hgx_inventory() {
    let i = inv("hgx-h100");
    assert_eq!(i.gpus.len(), 8, "NVSwitches (class 0x0680) are not GPUs");
    let g0 = &i.gpus[0];
    assert_eq!(g0.index, 0);
    assert_eq!(g0.pci.address, "0000:1a:00.0");
    assert_eq!(g0.model.as_deref(), Some("H100 SXM5 80GB"));
    assert_eq!(g0.pci.numa_node, Some(0));
    assert_eq!(g0.pci.host_bridge.as_deref(), Some("pci0000:15"));
    assert_eq!(
        g0.pci.upstream,
        [
            "0000:15:01.0",
            "0000:16:00.0",
            "0000:17:00.0",
            "0000:18:00.0",
            "0000:19:00.0"
        ]
    );
    assert_eq!(g0.pci.iommu_type.as_deref(), Some("identity"));
    assert_eq!(
        (g0.pci.current_gen, g0.pci.current_width),
        (Some(5), Some(16))
    );
    // GPUs keep their 512-byte MaxReadReq by design: read, never judged.
    assert_eq!(
        g0.pci.config.as_ref().and_then(|c| c.max_read_request),
        Some(512)
    );
    assert_eq!(g0.nearest_rdma, ["mlx5_0"]);
    assert_eq!(g0.nearest.as_deref(), Some("PIX"));
    let order: Vec<&str> = i.gpus.iter().map(|g| g.pci.address.as_str()).collect();
    assert_eq!(
        order,
        [
            "0000:1a:00.0",
            "0000:1e:00.0",
            "0000:3c:00.0",
            "0000:40:00.0",
            "0000:9c:00.0",
            "0000:a0:00.0",
            "0000:bc:00.0",
            "0000:c0:00.0"
        ]
    );
    for g in &i.gpus {
        assert_eq!(g.nearest_rdma, [format!("mlx5_{}", g.index)]);
    }
    // 8 GPUs × 9 RDMA devices.
    assert_eq!(i.gpu_nic.len(), 72);
    let pix = i
        .gpu_nic
        .iter()
        .find(|l| l.gpu_index == 0 && l.rdma_device == "mlx5_0")
        .unwrap();
    assert_eq!(
        pix.bridges,
        ["0000:18:00.0", "0000:19:00.0", "0000:19:01.0"]
    );
    let nic = i.rdma_device("mlx5_0").unwrap().pci.as_ref().unwrap();
    let c = nic.config.as_ref().unwrap();
    assert_eq!((c.max_read_request, c.max_payload), (Some(4096), Some(256)));
    assert_eq!(c.port_type, Some(0));
    // Every bridge on those paths, with its port type and ACS.
    let d2a = i
        .pci_bridges
        .iter()
        .find(|b| b.address == "0000:19:00.0")
        .unwrap();
    let c = d2a.config.as_ref().unwrap();
    assert_eq!(c.port_type, Some(6));
    assert_eq!((c.acs_cap, c.acs_ctrl), (Some(0x5f), Some(0)));
    let gd = i.gpudirect.as_ref().unwrap();
    assert_eq!(gd.peermem.as_deref(), Some("nvidia_peermem"));
    assert_eq!(
        (
            gd.kernel_dmabuf,
            gd.nvidia_open,
            gd.ibverbs_dmabuf,
            gd.dmabuf
        ),
        (Some(true), Some(true), Some(true), Some(true))
    );
    assert_eq!(gd.nvidia_version.as_deref(), Some("550.54.15"));
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    assert!(i.unreadable.is_empty());
}

#[test]
fn hgx_clean_has_no_gpu_finding() {
    let r = diagnose(&inv("hgx-h100"));
    assert!(!r.has_error(), "{:#?}", r.findings);
    assert_eq!(r.warnings, 0, "{:#?}", r.findings);
    for f in &r.findings {
        assert!(!GPU_IDS.contains(&f.id.as_str()), "false positive {f:#?}");
    }
}

#[test]
fn acs_iommu_and_max_read_request() {
    let r = diagnose(&inv("hgx-h100-acs"));
    let acs: Vec<_> = r.with_id("pcie-acs-redirect").collect();
    assert_eq!(acs.len(), 8, "one per GPU and its PIX NIC");
    let a = acs[0];
    assert_eq!(a.severity, Severity::Error);
    assert_eq!(a.subject, "GPU0 0000:1a:00.0 <-> mlx5_0");
    assert!(
        a.summary.contains("0000:19:00.0, 0000:19:01.0"),
        "{}",
        a.summary
    );
    assert!(a
        .evidence
        .iter()
        .any(|e| e.path.ends_with("0000:19:00.0/config")
            && e.value.contains("ACS Control 0x001d at 0x148+0x06")
            && e.value.contains("ReqRedir+ CmpltRedir+")));
    assert!(a.fix[0].contains("setpci -s 0000:19:00.0 ECAP_ACS+0x6.w=0000"));
    assert!(a.fix[1].contains("pci=disable_acs_redir=0000:19:00.0;0000:19:01.0"));
    // The root ports have ACS on too, but GPU↔NIC traffic below a switch never reaches them.
    assert!(acs
        .iter()
        .all(|f| !f.summary.contains(":01.0,") && !f.summary.contains("0000:15:01.0")));

    let io: Vec<_> = r.with_id("iommu-translated").collect();
    assert_eq!(io.len(), 1);
    assert_eq!(io[0].severity, Severity::Warning);
    // 8 GPUs + 9 NICs in translated groups.
    assert_eq!(io[0].evidence.len(), 17);
    assert!(io[0].evidence[0]
        .path
        .ends_with("/sys/kernel/iommu_groups/10/type"));
    assert!(io[0].evidence[0].value.starts_with("DMA-FQ (GPU0"));
    assert!(io[0].fix[0].contains("iommu=pt"));

    let mrrs: Vec<_> = r.with_id("pcie-mrrs-low").collect();
    assert_eq!(mrrs.len(), 9, "every NIC, none of the GPUs");
    let m = mrrs.iter().find(|f| f.subject.contains("mlx5_0")).unwrap();
    assert_eq!(m.severity, Severity::Warning);
    assert!(m.summary.contains("512 bytes, not 4096"));
    assert!(m.evidence[0].value.contains("MaxReadReq 512"));
    assert!(m.fix[0].contains("setpci -s 0000:1b:00.0 CAP_EXP+0x08.w=5000:7000"));
    assert_eq!(r.with_id("gpudirect-unavailable").count(), 0);
}

#[test]
fn degraded_links() {
    let r = diagnose(&inv("hgx-h100-degraded"));
    let got = ids(&r);
    assert!(got.contains(&(
        "gpu-pcie-downgraded".into(),
        Severity::Warning,
        "GPU3 0000:40:00.0".into()
    )));
    // Speed only: GPUs idle at a lower speed.
    assert!(got.contains(&(
        "gpu-pcie-downgraded".into(),
        Severity::Info,
        "GPU6 0000:bc:00.0".into()
    )));
    assert!(got.contains(&(
        "pcie-downgraded".into(),
        Severity::Warning,
        "0000:a1:00.0 (mlx5_5)".into()
    )));
    assert!(got.contains(&(
        "pcie-ceiling".into(),
        Severity::Error,
        "0000:a1:00.0 (mlx5_5)".into()
    )));
    let g3 = r
        .with_id("gpu-pcie-downgraded")
        .find(|f| f.subject.starts_with("GPU3"))
        .unwrap();
    assert!(g3.summary.contains("32.0 GT/s x8, below the 32.0 GT/s x16"));
    assert!(g3
        .evidence
        .iter()
        .any(|e| e.path.ends_with("0000:40:00.0/current_link_width") && e.value == "8"));
    assert_eq!(
        r.with_id("gpu-pcie-downgraded").count(),
        2,
        "{:#?}",
        r.findings
    );
}

#[test]
fn no_gpudirect_path() {
    let i = inv("hgx-h100-no-gdr");
    let gd = i.gpudirect.as_ref().unwrap();
    assert_eq!(gd.peermem, None);
    assert_eq!(gd.kernel_dmabuf, Some(false));
    assert_eq!(gd.nvidia_open, Some(false));
    assert_eq!(gd.ibverbs_dmabuf, Some(false));
    assert_eq!(gd.dmabuf, Some(false));
    let r = diagnose(&i);
    let f: Vec<_> = r.with_id("gpudirect-unavailable").collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Error);
    for part in ["older than 5.12", "proprietary one", "no ibv_reg_dmabuf_mr"] {
        assert!(f[0].summary.contains(part), "{}", f[0].summary);
    }
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.path.ends_with("sys/module/nvidia/taint") && e.value.starts_with("PO")));
    assert!(f[0]
        .fix
        .iter()
        .any(|x| x.contains("modprobe nvidia_peermem")));

    // peermem alone is a path: no finding.
    let d = scratch("hgx-h100-no-gdr");
    std::fs::create_dir_all(d.path().join("sys/module/nvidia_peermem")).unwrap();
    put(d.path(), "/sys/module/nvidia_peermem/initstate", "live\n");
    let r = diagnose(&detect_root(d.path(), &DetectOptions::default()).unwrap());
    assert_eq!(r.with_id("gpudirect-unavailable").count(), 0);

    // Without a record of libibverbs and without peermem, a node whose other dma-buf parts are
    // fine is unverified: a warning, not an error.
    let d = scratch("hgx-h100");
    remove(d.path(), "/sys/module/nvidia_peermem");
    remove(d.path(), "/fabperf-userspace.json");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert_eq!(i.gpudirect.as_ref().unwrap().dmabuf, None);
    let r = diagnose(&i);
    let f: Vec<_> = r.with_id("gpudirect-unavailable").collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].summary.contains("unverified"));
}

#[test]
fn gpu_without_a_nic_on_its_socket() {
    let i = inv("pcie-2gpu-sys");
    assert_eq!(i.gpus.len(), 2);
    assert_eq!(i.gpus[0].nearest.as_deref(), Some("PHB"));
    assert_eq!(i.gpus[1].nearest.as_deref(), Some("SYS"));
    let r = diagnose(&i);
    assert_eq!(
        ids(&r),
        [(
            "gpu-nic-sys".to_string(),
            Severity::Warning,
            "GPU1 0000:cb:00.0".to_string()
        )]
    );
}

#[test]
fn rails_by_rule() {
    let mut i = inv("hgx-h100");
    assign_rails(&mut i, &RailRule::PciOrder).unwrap();
    let rail = |i: &Inventory, d: &str| i.rdma_device(d).unwrap().rail;
    // PCI order: 1b, 1f, 21 (the frontend NIC), 3d, ...
    assert_eq!(rail(&i, "mlx5_0"), Some(0));
    assert_eq!(rail(&i, "mlx5_1"), Some(1));
    assert_eq!(rail(&i, "mlx5_8"), Some(2));
    assert_eq!(rail(&i, "mlx5_2"), Some(3));
    assert_eq!(i.rail_rule.as_deref(), Some("pci-order"));
    // GPU order: rail i = the NIC under GPU i's switch; the frontend NIC gets none.
    assign_rails(&mut i, &RailRule::GpuOrder).unwrap();
    for n in 0..8 {
        assert_eq!(rail(&i, &format!("mlx5_{n}")), Some(n));
    }
    assert_eq!(rail(&i, "mlx5_8"), None);
    // Explicit, by device or netdev name.
    let m: RailRule = "mlx5_3=0,ens21f0np0=7".parse().unwrap();
    assign_rails(&mut i, &m).unwrap();
    assert_eq!(rail(&i, "mlx5_3"), Some(0));
    assert_eq!(rail(&i, "mlx5_8"), Some(7));
    assert_eq!(rail(&i, "mlx5_0"), None);
    let e = assign_rails(&mut i, &"mlx5_9=0".parse().unwrap()).unwrap_err();
    assert!(
        e.contains("no RDMA device or netdev named \"mlx5_9\""),
        "{e}"
    );
    assert!(e.contains("mlx5_0, mlx5_1"), "{e}");
    let e = assign_rails(&mut i, &"mlx5_0=1,mlx5_1=1".parse().unwrap()).unwrap_err();
    assert!(e.contains("both given rail 1"), "{e}");
    let text = fabperf_detect::render::inventory_text(&{
        let mut i = inv("hgx-h100");
        assign_rails(&mut i, &RailRule::GpuOrder).unwrap();
        i
    });
    assert!(
        text.contains(
            "  rail         0       1       2       3       4       5       6       7       -\n"
        ),
        "{text}"
    );
    assert!(text.contains("Rails (gpu-order): mlx5_0 rail 0,"), "{text}");
}

#[test]
fn partial_and_hostile_gpu_inputs() {
    // A non-root reader gets 64 bytes of config space: ACS and MaxReadReq are unknown, and
    // unknown is never a finding.
    let d = scratch("hgx-h100-acs");
    for a in ["0000:19:00.0", "0000:19:01.0", "0000:1b:00.0"] {
        let p = d.path().join(format!("sys/bus/pci/devices/{a}/config"));
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..64]).unwrap();
    }
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    let r = diagnose(&i);
    assert!(!r
        .with_id("pcie-acs-redirect")
        .any(|f| f.subject.starts_with("GPU0 ")));
    assert!(!r
        .with_id("pcie-mrrs-low")
        .any(|f| f.subject.contains("mlx5_0")));
    assert_eq!(r.with_id("pcie-acs-redirect").count(), 7);
    // Garbage config space, a GPU without numa_node, a missing iommu group type.
    let d = scratch("hgx-h100");
    put(
        d.path(),
        "/sys/bus/pci/devices/0000:18:00.0/config",
        "\u{ff}garbage",
    );
    remove(d.path(), "/sys/bus/pci/devices/0000:9c:00.0/numa_node");
    remove(d.path(), "/sys/kernel/iommu_groups/10/type");
    let i = detect_root(d.path(), &DetectOptions::default()).unwrap();
    assert_eq!(i.gpus.len(), 8);
    // GPU4's NUMA node is unknown on a two-node machine: its cross-host-bridge relationships
    // are unknown, not guessed; below its own switch it is still PIX.
    let rel = |g: u32, n: &str| {
        i.gpu_nic
            .iter()
            .find(|l| l.gpu_index == g && l.rdma_device == n)
            .unwrap()
            .relation
            .clone()
    };
    assert_eq!(rel(4, "mlx5_0"), None);
    assert_eq!(rel(4, "mlx5_4").as_deref(), Some("PIX"));
    assert_eq!(i.gpus[0].pci.iommu_type, None);
    let r = diagnose(&i);
    assert!(!r.has_error(), "{:#?}", r.findings);
    let _ = fabperf_detect::render::inventory_text(&i);
}
