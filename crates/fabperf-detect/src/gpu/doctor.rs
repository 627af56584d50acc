//! The doctor rules about GPUs and their NICs: PCIe MaxReadReq, GPUDirect
//! RDMA prerequisites, ACS, the IOMMU, degraded GPU links, GPU/NIC pairs
//! that cross the system interconnect.

use super::render::link_text;
use super::*;

pub(super) fn ev(inv: &Inventory, host_path: &str, value: impl ToString) -> Evidence {
    Evidence {
        path: inv.path(host_path),
        value: value.to_string(),
    }
}

pub(super) fn config_ev(inv: &Inventory, p: &PciInfo, what: String) -> Evidence {
    ev(inv, &format!("{}/config", p.sysfs_or_bus()), what)
}

pub(super) fn hw_nics(inv: &Inventory) -> impl Iterator<Item = (&RdmaDevice, &PciInfo)> {
    inv.rdma_devices
        .iter()
        .filter(|d| !d.software)
        .filter_map(|d| d.pci.as_ref().map(|p| (d, p)))
}

/// The GPU rules of `fabperf doctor` (and the NIC's MaxReadReq, judged on every node).
pub(crate) fn check(inv: &Inventory, out: &mut Vec<Finding>) {
    check_mrrs(inv, out);
    if inv.gpus.is_empty() {
        return;
    }
    check_gpudirect(inv, out);
    check_acs(inv, out);
    check_iommu(inv, out);
    check_gpu_links(inv, out);
    check_sys(inv, out);
}

pub(super) fn check_mrrs(inv: &Inventory, out: &mut Vec<Finding>) {
    let gpu_node = !inv.gpus.is_empty();
    for (d, p) in hw_nics(inv) {
        let Some(c) = &p.config else { continue };
        let (Some(mrrs), Some(cap)) = (c.max_read_request, c.pcie_cap) else {
            continue;
        };
        if mrrs >= 4096 || p.is_vf {
            continue;
        }
        out.push(Finding {
            id: "pcie-mrrs-low".into(),
            severity: if gpu_node { Severity::Warning } else { Severity::Info },
            subject: format!("{} ({})", p.address, d.name),
            summary: format!(
                "{} PCIe Max_Read_Request_Size is {mrrs} bytes, not 4096",
                d.name
            ),
            detail: format!(
                "Every RDMA send, write source and read response is fetched by the NIC with PCIe read requests of at most this size; small requests mean more requests and completions in flight for the same bytes. NVIDIA's ConnectX tuning guides set 4096{}.",
                if gpu_node {
                    ", and with GPUDirect RDMA the reads go to GPU memory across the PCIe switch, where the request size matters most"
                } else {
                    "; on nodes that already reach line rate it costs little"
                }
            ),
            evidence: vec![config_ev(
                inv,
                p,
                format!(
                    "Device Control 0x{:04x} at PCIe capability 0x{cap:02x}+0x08: MaxReadReq {mrrs} bytes",
                    c.devctl.unwrap_or(0)
                ),
            )],
            cost_gbps: None,
            fix: vec![
                format!(
                    "`setpci -s {} CAP_EXP+0x08.w=5000:7000` (MaxReadReq 4096 until the next reboot or driver reset; run it while no test runs)",
                    p.address
                ),
                "persistently: the BIOS/firmware PCIe setting for Max Read Request (or a boot-time unit running the setpci line)".into(),
            ],
        });
    }
}

pub(super) fn check_gpudirect(inv: &Inventory, out: &mut Vec<Finding>) {
    let Some(g) = &inv.gpudirect else { return };
    if hw_nics(inv).next().is_none() || g.peermem.is_some() || g.dmabuf == Some(true) {
        return;
    }
    let yn = |v: Option<bool>, yes: &str, no: &str| match v {
        Some(true) => yes.to_string(),
        Some(false) => no.to_string(),
        None => "unknown".to_string(),
    };
    let mut evidence = vec![
        ev(inv, "/sys/module/nvidia_peermem", "absent"),
        ev(inv, "/sys/module/nv_peer_mem", "absent"),
        ev(
            inv,
            "/proc/sys/kernel/osrelease",
            format!(
                "{} ({})",
                g.kernel.as_deref().unwrap_or("unreadable"),
                yn(g.kernel_dmabuf, ">= 5.12", "older than 5.12")
            ),
        ),
    ];
    if g.nvidia_loaded {
        evidence.push(ev(
            inv,
            "/sys/module/nvidia/taint",
            format!(
                "{} ({})",
                g.nvidia_taint.as_deref().unwrap_or("unreadable"),
                yn(
                    g.nvidia_open,
                    "open GPU kernel module",
                    "proprietary GPU kernel module: no dma-buf export"
                )
            ),
        ));
    } else {
        evidence.push(ev(
            inv,
            "/sys/module/nvidia",
            "absent: the NVIDIA driver is not loaded",
        ));
    }
    evidence.push(Evidence {
        path: match (&g.ibverbs_source, inv.source.mode.as_str()) {
            (None, _) => "libibverbs (not recorded in this snapshot)".into(),
            (Some(l), "snapshot") => format!("{} ({l})", inv.path("/fabperf-userspace.json")),
            (Some(l), _) => format!("dlopen {l}"),
        },
        value: format!(
            "ibv_reg_dmabuf_mr {}",
            yn(
                g.ibverbs_dmabuf,
                "exported",
                "missing (rdma-core older than 34, or no libibverbs)"
            )
        ),
    });
    let mut missing = Vec::new();
    if !g.nvidia_loaded {
        missing.push("the NVIDIA kernel module is not loaded");
    }
    if g.kernel_dmabuf == Some(false) {
        missing.push("the kernel is older than 5.12");
    }
    if g.nvidia_open == Some(false) {
        missing.push("the GPU kernel module is the proprietary one");
    }
    if g.ibverbs_dmabuf == Some(false) {
        missing.push("libibverbs has no ibv_reg_dmabuf_mr");
    }
    let proven = g.dmabuf == Some(false);
    let mut fix = Vec::new();
    if !g.nvidia_loaded {
        fix.push("load the NVIDIA driver (`modprobe nvidia`; install it if missing)".into());
    }
    fix.push("peermem: `modprobe nvidia_peermem` (it ships with the NVIDIA driver, R470 and later, and needs the RDMA core loaded); keep it with `echo nvidia_peermem > /etc/modules-load.d/nvidia-peermem.conf`".into());
    if g.nvidia_open == Some(false) {
        fix.push("dma-buf: install the open GPU kernel modules of the same driver branch (R515 or later: the `-open` driver packages such as nvidia-driver-550-open, or the open-module choice of NVIDIA's .run installer)".into());
    }
    if g.kernel_dmabuf == Some(false) {
        fix.push(
            "dma-buf: a kernel 5.12 or later (the RDMA core imports dma-bufs from 5.12)".into(),
        );
    }
    if g.ibverbs_dmabuf != Some(true) {
        fix.push("dma-buf: rdma-core 34 or later (libibverbs with ibv_reg_dmabuf_mr)".into());
    }
    out.push(Finding {
        id: "gpudirect-unavailable".into(),
        severity: if proven { Severity::Error } else { Severity::Warning },
        subject: "node".into(),
        summary: if proven {
            format!(
                "no GPUDirect RDMA path: nvidia_peermem is not loaded and dma-buf cannot work ({})",
                missing.join("; ")
            )
        } else {
            "GPUDirect RDMA unverified: nvidia_peermem is not loaded and part of the dma-buf path could not be read".into()
        },
        detail: "An RDMA NIC reaches GPU memory either through the peermem module (ibv_reg_mr on a GPU pointer) or through dma-buf (cuMemGetHandleForAddressRange exports the memory, ibv_reg_dmabuf_mr registers it: kernel 5.12+, the open GPU kernel module, rdma-core 34+, a provider that imports dma-bufs such as mlx5). Without either, `ib_write_bw --use_cuda`, NCCL's GDR and `fabperf rdma-bw --mem cuda` fall back to host memory or fail.".into(),
        evidence,
        cost_gbps: None,
        fix,
    });
}

pub(super) fn check_acs(inv: &Inventory, out: &mut Vec<Finding>) {
    let bridges: BTreeMap<&str, &PciInfo> = inv
        .pci_bridges
        .iter()
        .map(|b| (b.address.as_str(), b))
        .collect();
    for g in &inv.gpus {
        for link in inv.gpu_nic.iter().filter(|l| {
            l.gpu_index == g.index
                && g.nearest_rdma.contains(&l.rdma_device)
                && l.relation
                    .as_deref()
                    .and_then(Relation::parse)
                    .is_some_and(Relation::below_switches)
        }) {
            let on: Vec<(&PciInfo, u16, u16)> = link
                .bridges
                .iter()
                .filter_map(|a| bridges.get(a.as_str()).copied())
                .filter_map(|b| {
                    let c = b.config.as_ref()?;
                    let ctrl = c.acs_ctrl?;
                    pcie::acs_redirects(ctrl).then_some((b, ctrl, c.acs_cap_offset?))
                })
                .collect();
            if on.is_empty() {
                continue;
            }
            let names: Vec<&str> = on.iter().map(|(b, _, _)| b.address.as_str()).collect();
            out.push(Finding {
                id: "pcie-acs-redirect".into(),
                severity: Severity::Error,
                subject: format!("GPU{} {} <-> {}", g.index, g.pci.address, link.rdma_device),
                summary: format!(
                    "ACS P2P redirect is on at {} between GPU{} and {} ({})",
                    names.join(", "),
                    g.index,
                    link.rdma_device,
                    link.relation.as_deref().unwrap_or("?")
                ),
                detail: "With Access Control Services P2P Request/Completion Redirect enabled on a switch port, the GPU's and the NIC's peer-to-peer traffic is sent up to the root complex instead of across the switch: GPUDirect RDMA crawls at a fraction of the link rate or fails. A kernel that runs an IOMMU enables ACS on every port at boot.".into(),
                evidence: on
                    .iter()
                    .map(|(b, ctrl, off)| {
                        config_ev(
                            inv,
                            b,
                            format!(
                                "{} ACS Control 0x{ctrl:04x} at 0x{off:03x}+0x06: {}",
                                b.config
                                    .as_ref()
                                    .and_then(|c| c.port_type)
                                    .map(pcie::port_type_name)
                                    .unwrap_or("bridge"),
                                pcie::acs_ctrl_text(*ctrl)
                            ),
                        )
                    })
                    .collect(),
                cost_gbps: None,
                fix: vec![
                    format!(
                        "now (until reboot): {}",
                        names
                            .iter()
                            .map(|a| format!("`setpci -s {a} ECAP_ACS+0x6.w=0000`"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    format!(
                        "at boot: kernel parameter `pci=disable_acs_redir={}` (clears request/completion redirect and egress control on those ports), or the BIOS setting that disables ACS",
                        names.join(";")
                    ),
                    "verify: `lspci -vvv -s <port> | grep ACSCtl` shows ReqRedir- CmpltRedir-".into(),
                ],
            });
        }
    }
}

pub(super) fn check_iommu(inv: &Inventory, out: &mut Vec<Finding>) {
    let translated = |t: &Option<String>| matches!(t.as_deref(), Some("DMA") | Some("DMA-FQ"));
    let mut who: Vec<(String, &PciInfo)> = inv
        .gpus
        .iter()
        .filter(|g| translated(&g.pci.iommu_type))
        .map(|g| (format!("GPU{}", g.index), &g.pci))
        .collect();
    who.extend(
        hw_nics(inv)
            .filter(|(_, p)| translated(&p.iommu_type))
            .map(|(d, p)| (d.name.clone(), p)),
    );
    if who.is_empty() {
        return;
    }
    let groups: BTreeSet<u32> = who.iter().filter_map(|(_, p)| p.iommu_group).collect();
    out.push(Finding {
        id: "iommu-translated".into(),
        severity: Severity::Warning,
        subject: "node".into(),
        summary: format!(
            "the IOMMU translates DMA of {} (group type DMA/DMA-FQ, not passthrough)",
            who.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
        ),
        detail: "In translated mode every peer-to-peer transfer between a NIC and a GPU goes through the IOMMU (and ACS sends it up to the root complex): GPUDirect RDMA slows down or fails. GPU nodes run the IOMMU in passthrough (`iommu=pt`) or off.".into(),
        evidence: who
            .iter()
            .map(|(n, p)| {
                ev(
                    inv,
                    &p.iommu_group
                        .map(|g| format!("/sys/kernel/iommu_groups/{g}/type"))
                        .unwrap_or_else(|| format!("{}/iommu_group/type", p.sysfs_or_bus())),
                    format!("{} ({n} {})", p.iommu_type.as_deref().unwrap_or("?"), p.address),
                )
            })
            .collect(),
        cost_gbps: None,
        fix: vec![
            "kernel command line: `iommu=pt` (Intel also `intel_iommu=on iommu=pt`; AMD `iommu=pt`), then reboot".into(),
            format!(
                "per group, with the devices' drivers unbound (kernel 5.11+): `echo identity > /sys/kernel/iommu_groups/<N>/type` for groups {}",
                groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", ")
            ),
        ],
    });
}

pub(super) fn check_gpu_links(inv: &Inventory, out: &mut Vec<Finding>) {
    for g in &inv.gpus {
        let p = &g.pci;
        let narrow = matches!((p.current_width, p.max_width), (Some(c), Some(m)) if c < m);
        let slow = matches!((p.current_gen, p.max_gen), (Some(c), Some(m)) if c < m);
        if !narrow && !slow {
            continue;
        }
        let base = p.sysfs_or_bus();
        out.push(Finding {
            id: "gpu-pcie-downgraded".into(),
            severity: if narrow { Severity::Warning } else { Severity::Info },
            subject: format!("GPU{} {}", g.index, p.address),
            summary: format!(
                "GPU{} PCIe link is {}, below the {} it is capable of",
                g.index,
                link_text(p, true),
                link_text(p, false)
            ),
            detail: if narrow {
                format!(
                    "A narrower link is a slot, riser or seating problem and caps everything the GPU moves over PCIe, GPUDirect RDMA included: {} usable instead of {}.",
                    p.ceiling_gbps.map(|c| format!("{c} Gbit/s")).unwrap_or_else(|| "unknown".into()),
                    p.max_ceiling_gbps.map(|c| format!("{c} Gbit/s")).unwrap_or_else(|| "unknown".into())
                )
            } else {
                "Only the speed is lower: NVIDIA GPUs drop their PCIe link to a lower speed while idle and retrain to full speed under load, so this is expected on an idle GPU. Read it again while a test runs; if it stays low, it is a slot or BIOS setting.".into()
            },
            evidence: vec![
                ev(inv, &format!("{base}/current_link_speed"), p.current_link_speed.as_deref().unwrap_or("unknown")),
                ev(inv, &format!("{base}/current_link_width"), p.current_width.map(|w| w.to_string()).unwrap_or_else(|| "unknown".into())),
                ev(inv, &format!("{base}/max_link_speed"), p.max_link_speed.as_deref().unwrap_or("unknown")),
                ev(inv, &format!("{base}/max_link_width"), p.max_width.map(|w| w.to_string()).unwrap_or_else(|| "unknown".into())),
            ],
            cost_gbps: None,
            fix: if narrow {
                vec![
                    format!("reseat the GPU or its riser/baseboard cable and check the slot's lane setting in the BIOS; verify with `lspci -vv -s {} | grep LnkSta`", p.address),
                ]
            } else {
                vec![format!(
                    "check under load: `cat {base}/current_link_speed` while `fabperf rdma-bw --mem cuda:{}` runs (or `nvidia-smi -q -d PCIE`)",
                    g.index
                )]
            },
        });
    }
}

pub(super) fn check_sys(inv: &Inventory, out: &mut Vec<Finding>) {
    for g in &inv.gpus {
        if g.nearest.as_deref() != Some("SYS") {
            continue;
        }
        let mut evidence = vec![ev(
            inv,
            &format!("{}/numa_node", g.pci.sysfs_or_bus()),
            g.pci
                .numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into()),
        )];
        for (d, p) in hw_nics(inv) {
            evidence.push(ev(
                inv,
                &format!("{}/numa_node", p.sysfs_or_bus()),
                format!(
                    "{} ({})",
                    p.numa_node
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "unknown".into()),
                    d.name
                ),
            ));
        }
        out.push(Finding {
            id: "gpu-nic-sys".into(),
            severity: Severity::Warning,
            subject: format!("GPU{} {}", g.index, g.pci.address),
            summary: format!(
                "GPU{}'s nearest RDMA device ({}) is across the socket link (SYS)",
                g.index,
                g.nearest_rdma.join(", ")
            ),
            detail: "GPUDirect RDMA between a GPU and a NIC on different NUMA nodes crosses the inter-socket link (UPI/xGMI): bandwidth drops and NCCL disables GDR for such pairs by default, staging through host memory instead.".into(),
            evidence,
            cost_gbps: None,
            fix: vec![
                "put a NIC in a slot of the GPU's socket (ideally under the same PCIe switch)".into(),
                "or run this GPU's traffic through a NIC of its socket via another GPU (NCCL's PXN), and pin the job to the GPU's NUMA node".into(),
            ],
        });
    }
}
