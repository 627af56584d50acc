//! NUMA placement: which CPUs are near a NIC, which of them a process may use, which serve the
//! NIC's interrupts, and the choice of CPUs for a test's data threads.
//!
//! Inputs, all through a [`Root`] so fixtures and snapshots work like the live host:
//! - `/sys/devices/system/node/node<N>/cpulist`: the CPUs of NUMA node N;
//! - `/proc/self/status` `Cpus_allowed_list`: the CPUs the process may run on (its affinity,
//!   which a cgroup cpuset — a Kubernetes CPU manager's choice — narrows);
//! - `/sys/bus/pci/devices/<addr>/msi_irqs/*`: the NIC's interrupts, and for each
//!   `/proc/irq/<n>/effective_affinity_list` (else `smp_affinity_list`): the CPU serving it.
//!
//! [`choose`] is the `--cpu auto` rule: the allowed CPUs of the NIC's node, without the CPUs
//! that serve the NIC's interrupts when others remain; all allowed CPUs when the node is
//! unknown, or when none of them is on the NIC's node (then a warning and a doctor finding
//! say so).

use crate::root::Root;

/// Highest CPU number accepted in a CPU list (Linux's NR_CPUS is at most 8192).
pub const MAX_CPU: u32 = 8191;

/// Parse a kernel CPU list (`0-3,8,10-11`; an empty list is empty). Sorted, without repeats.
/// Refused: anything but digits, commas and ranges, a range that runs backwards, a CPU above
/// [`MAX_CPU`].
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Ok(out);
    }
    let num = |t: &str| -> Result<u32, String> {
        let t = t.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{t:?} is not a CPU number"));
        }
        match t.parse::<u32>() {
            Ok(n) if n <= MAX_CPU => Ok(n),
            _ => Err(format!(
                "CPU {t} is above the highest CPU number, {MAX_CPU}"
            )),
        }
    };
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("CPU range {a}-{b} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The kernel's list format of sorted CPUs (`[0, 1, 2, 3, 8]` -> `0-3,8`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The CPUs of NUMA node `node`.
pub fn node_cpus(root: &Root, node: u32) -> Result<Vec<u32>, String> {
    let p = format!("/sys/devices/system/node/node{node}/cpulist");
    let text = root
        .try_read_limited(&p, crate::root::MAX_ATTR_BYTES)
        .map_err(|e| format!("{}: {e}", root.display(&p)))?;
    parse_cpu_list(&String::from_utf8_lossy(&text))
        .map_err(|e| format!("{}: {e}", root.display(&p)))
}

/// Every NUMA node and its CPU list text, as read (nodes without a readable list are left
/// out; a machine without NUMA support has none).
pub fn numa_nodes(root: &Root) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = root
        .list("/sys/devices/system/node")
        .into_iter()
        .filter_map(|n| n.strip_prefix("node")?.parse::<u32>().ok())
        .filter_map(|n| {
            let t = root.read(&format!("/sys/devices/system/node/node{n}/cpulist"))?;
            Some((n, t.trim().to_string()))
        })
        .collect();
    out.sort_unstable();
    out
}

/// `Cpus_allowed_list` of a `/proc/<pid>/status` text.
pub fn allowed_from_status(status: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// The CPUs serving the interrupts of PCI function `pci` (empty when it has no MSI
/// interrupts listed, e.g. a virtual device, or they cannot be read).
pub fn irq_cpus(root: &Root, pci: &str) -> Vec<u32> {
    if pci.is_empty() || pci.contains('/') || pci.starts_with('.') {
        return Vec::new();
    }
    let mut out = Vec::new();
    // At most 4096 interrupts (a NIC has one per channel, at most a few hundred).
    for irq in root
        .list(&format!("/sys/bus/pci/devices/{pci}/msi_irqs"))
        .into_iter()
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .take(4096)
    {
        let list = root
            .read(&format!("/proc/irq/{irq}/effective_affinity_list"))
            .filter(|t| !t.trim().is_empty())
            .or_else(|| root.read(&format!("/proc/irq/{irq}/smp_affinity_list")));
        if let Some(cpus) = list.and_then(|t| parse_cpu_list(&t).ok()) {
            out.extend(cpus);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The `--cpu auto` choice for one end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuChoice {
    /// The CPUs to pin the data threads to (empty: do not pin).
    pub cpus: Vec<u32>,
    /// Allowed CPUs of the NIC's node were found (false: node unknown, or none allowed).
    pub node_local: bool,
    /// The allowed set holds no CPU of the NIC's node.
    pub mismatch: bool,
    /// CPUs left out because they serve the NIC's interrupts.
    pub avoided_irq: Vec<u32>,
}

/// The rule: the allowed CPUs of the NIC's node (`node_cpus`, when the node is known), minus
/// the CPUs that serve the NIC's interrupts when that leaves any; all allowed CPUs when the
/// node is unknown or none of its CPUs is allowed (`mismatch`).
pub fn choose(allowed: &[u32], node_cpus: Option<&[u32]>, irq: &[u32]) -> CpuChoice {
    let (base, node_local, mismatch) = match node_cpus {
        Some(nc) => {
            let local: Vec<u32> = allowed.iter().copied().filter(|c| nc.contains(c)).collect();
            if local.is_empty() {
                (
                    allowed.to_vec(),
                    false,
                    !allowed.is_empty() && !nc.is_empty(),
                )
            } else {
                (local, true, false)
            }
        }
        None => (allowed.to_vec(), false, false),
    };
    let rest: Vec<u32> = base.iter().copied().filter(|c| !irq.contains(c)).collect();
    let (cpus, avoided_irq) = if !rest.is_empty() && rest.len() < base.len() {
        let avoided = base.iter().copied().filter(|c| irq.contains(c)).collect();
        (rest, avoided)
    } else {
        (base, Vec::new())
    };
    CpuChoice {
        cpus,
        node_local,
        mismatch,
        avoided_irq,
    }
}

/// The fix for a process whose CPUs are all on another node than its NIC.
pub fn numa_fix(node: u32, node_cpus: &str) -> Vec<String> {
    vec![
        "Kubernetes: run the kubelet with the Topology Manager policy `single-numa-node` and the \
         CPU Manager policy `static` (KubeletConfiguration `topologyManagerPolicy: \
         single-numa-node`, `cpuManagerPolicy: static`; flags `--topology-manager-policy`, \
         `--cpu-manager-policy`) and make the pod Guaranteed (integer CPU requests equal to \
         limits, memory requests equal to limits) with the RDMA/SR-IOV resource in the same \
         container, so its CPUs and the NIC come from one NUMA node"
            .to_string(),
        format!(
            "outside Kubernetes: start the test on the NIC's node: `taskset -c {node_cpus} \
             fabperf ...` or `numactl --cpunodebind={node} --membind={node} fabperf ...`"
        ),
    ]
}

/// Doctor: the process may use no CPU of a fabric NIC's NUMA node (an RDMA device, or the
/// node address's netdev).
pub(crate) fn check_numa(inv: &crate::Inventory, out: &mut Vec<crate::doctor::Finding>) {
    use crate::doctor::{Evidence, Finding, Severity};
    let Some(allowed_text) = &inv.cpus_allowed else {
        return;
    };
    let Ok(allowed) = parse_cpu_list(allowed_text) else {
        return;
    };
    let mut nics: Vec<(String, String, u32)> = inv
        .rdma_devices
        .iter()
        .filter_map(|d| {
            let pci = d.pci.as_ref()?;
            let node = u32::try_from(d.numa_node.or(pci.numa_node)?).ok()?;
            Some((
                d.name.clone(),
                format!("{}/numa_node", pci.sysfs_or_bus()),
                node,
            ))
        })
        .collect();
    if let Some(nd) = inv
        .node_ip
        .as_ref()
        .and_then(|ni| inv.netdev(&ni.interface))
        .filter(|nd| nd.rdma_device.is_none())
    {
        if let Some(pci) = &nd.pci {
            if let Some(node) = pci.numa_node.and_then(|n| u32::try_from(n).ok()) {
                nics.push((
                    nd.name.clone(),
                    format!("{}/numa_node", pci.sysfs_or_bus()),
                    node,
                ));
            }
        }
    }
    for (name, node_path, node) in nics {
        let Some(nn) = inv.numa_nodes.iter().find(|n| n.node == node) else {
            continue;
        };
        let Ok(node_cpus) = parse_cpu_list(&nn.cpulist) else {
            continue;
        };
        if !choose(&allowed, Some(&node_cpus), &[]).mismatch {
            continue;
        }
        out.push(Finding {
            id: "numa-cpuset-mismatch".into(),
            severity: Severity::Warning,
            subject: name.clone(),
            summary: format!(
                "this process may only run on CPUs {allowed_text}, none of them on NUMA node {node} where {name} sits (CPUs {})",
                nn.cpulist
            ),
            detail: "Every packet then crosses the inter-socket link between the NIC and the CPUs and memory that handle it: bandwidth drops (halved in reported cases, ~30 instead of ~194 Gbit/s when pinned by the GPU's node instead of the NIC's) and latency grows. In a pod the allowed set is the container's cpuset.".into(),
            evidence: vec![
                Evidence {
                    path: inv.path("/proc/self/status"),
                    value: format!("Cpus_allowed_list {allowed_text}"),
                },
                Evidence {
                    path: inv.path(&node_path),
                    value: node.to_string(),
                },
                Evidence {
                    path: inv.path(&format!("/sys/devices/system/node/node{node}/cpulist")),
                    value: nn.cpulist.clone(),
                },
            ],
            cost_gbps: None,
            fix: numa_fix(node, &nn.cpulist),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    fn write(base: &Path, rel: &str, text: &str) {
        let p = base.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn cpu_lists_parse_and_print() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("5,1,1,3-4").unwrap(), vec![1, 3, 4, 5]);
        assert_eq!(format_cpu_list(&[8, 0, 1, 2, 3, 10, 11, 3]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "");
        for (bad, why) in [
            ("3-1", "backwards"),
            ("a", "not a CPU number"),
            ("1-", "not a CPU number"),
            ("-1", "not a CPU number"),
            ("1,,2", "not a CPU number"),
            ("0-99999999999", "above"),
            ("0-4294967295", "above"),
            ("1 2", "not a CPU number"),
            ("0x3", "not a CPU number"),
        ] {
            let e = parse_cpu_list(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // The largest list is bounded by MAX_CPU, not by the input.
        assert_eq!(parse_cpu_list("0-8191").unwrap().len(), 8192);
    }

    #[test]
    fn the_auto_rule() {
        let node1: Vec<u32> = (16..32).collect();
        // Allowed on both nodes: node 1's CPUs, minus the one serving the NIC's interrupts.
        let allowed: Vec<u32> = (0..32).collect();
        let c = choose(&allowed, Some(&node1), &[16, 40]);
        assert_eq!(c.cpus, (17..32).collect::<Vec<_>>());
        assert!(c.node_local && !c.mismatch);
        assert_eq!(c.avoided_irq, vec![16]);
        // A pod pinned to node 0: no CPU of the NIC's node, so all it has, and a mismatch.
        let pod: Vec<u32> = vec![2, 3];
        let c = choose(&pod, Some(&node1), &[]);
        assert_eq!(c.cpus, pod);
        assert!(c.mismatch && !c.node_local);
        // Every allowed CPU serves an interrupt (mlx5 spreads one per channel): keep them.
        let c = choose(&[16, 17], Some(&node1), &[16, 17]);
        assert_eq!(c.cpus, vec![16, 17]);
        assert!(c.avoided_irq.is_empty());
        // Node unknown (virtual device, single-node machine): all allowed CPUs.
        let c = choose(&[0, 1], None, &[]);
        assert_eq!(c.cpus, vec![0, 1]);
        assert!(!c.mismatch && !c.node_local);
        // Nothing allowed (a hostile status file): nothing to pin to.
        let c = choose(&[], Some(&node1), &[]);
        assert!(c.cpus.is_empty() && !c.mismatch);
        // A node without CPUs (memory-only, CXL): no mismatch to report, all allowed CPUs.
        let c = choose(&[0, 1], Some(&[]), &[]);
        assert_eq!(c.cpus, vec![0, 1]);
        assert!(!c.mismatch);
    }

    /// A two-socket machine: node 0 CPUs 0-15, node 1 CPUs 16-31; the NIC at 0000:81:00.0 on
    /// node 1 with two interrupts on CPUs 16 and 17.
    fn two_socket(base: &Path) {
        write(base, "sys/devices/system/node/node0/cpulist", "0-15\n");
        write(base, "sys/devices/system/node/node1/cpulist", "16-31\n");
        write(base, "sys/devices/system/node/possible", "0-1\n");
        let dev = "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
        write(base, &format!("{dev}/numa_node"), "1\n");
        write(base, &format!("{dev}/msi_irqs/120"), "msix\n");
        write(base, &format!("{dev}/msi_irqs/121"), "msix\n");
        write(base, &format!("{dev}/msi_irqs/notanirq"), "x\n");
        write(base, "proc/irq/120/effective_affinity_list", "16\n");
        write(base, "proc/irq/121/effective_affinity_list", "\n");
        write(base, "proc/irq/121/smp_affinity_list", "17\n");
        fs::create_dir_all(base.join("sys/bus/pci/devices")).unwrap();
        let _ = std::os::unix::fs::symlink(
            "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0",
            base.join("sys/bus/pci/devices/0000:81:00.0"),
        );
    }

    #[test]
    fn fixture_tree_two_sockets() {
        let d = tempfile::tempdir().unwrap();
        two_socket(d.path());
        let root = Root::at(d.path());
        assert_eq!(node_cpus(&root, 1).unwrap(), (16..32).collect::<Vec<_>>());
        assert!(node_cpus(&root, 7).unwrap_err().contains("node7/cpulist"));
        assert_eq!(
            numa_nodes(&root),
            vec![(0, "0-15".to_string()), (1, "16-31".to_string())]
        );
        assert_eq!(irq_cpus(&root, "0000:81:00.0"), vec![16, 17]);
        assert!(irq_cpus(&root, "../../etc").is_empty());
        assert!(irq_cpus(&root, "0000:99:00.0").is_empty());
        let allowed = parse_cpu_list(
            &allowed_from_status(
                "Name:\tfabperf\nCpus_allowed:\tffffffff\nCpus_allowed_list:\t0-31\n",
            )
            .unwrap(),
        )
        .unwrap();
        let nc = node_cpus(&root, 1).unwrap();
        let c = choose(&allowed, Some(&nc), &irq_cpus(&root, "0000:81:00.0"));
        assert_eq!(format_cpu_list(&c.cpus), "18-31");
        assert_eq!(c.avoided_irq, vec![16, 17]);
    }

    #[test]
    fn hostile_fixture_trees() {
        let d = tempfile::tempdir().unwrap();
        let b = d.path();
        write(b, "sys/devices/system/node/node0/cpulist", "0-4294967295\n");
        write(b, "sys/devices/system/node/node1/cpulist", "banana\n");
        write(b, "sys/devices/system/node/nodeX/cpulist", "0\n");
        write(
            b,
            "sys/devices/system/node/node2/cpulist",
            &"0,".repeat(40_000),
        );
        let root = Root::at(b);
        assert!(node_cpus(&root, 0).unwrap_err().contains("above"));
        assert!(node_cpus(&root, 1)
            .unwrap_err()
            .contains("not a CPU number"));
        // Larger than a sysfs attribute can be: refused, not parsed.
        assert!(node_cpus(&root, 2).is_err());
        // A directory where the list should be, a FIFO-free absent tree: errors, no panic.
        fs::create_dir_all(b.join("sys/devices/system/node/node3/cpulist")).unwrap();
        assert!(node_cpus(&root, 3).is_err());
        // Interrupt affinity files with garbage are skipped.
        let dev = b.join("sys/bus/pci/devices/0000:01:00.0/msi_irqs");
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("7"), "").unwrap();
        write(b, "proc/irq/7/effective_affinity_list", "zzz\n");
        assert!(irq_cpus(&root, "0000:01:00.0").is_empty());
        assert_eq!(allowed_from_status("Name: x\n"), None);
    }

    #[test]
    fn doctor_finds_a_cpuset_on_the_wrong_node() {
        use crate::model::{NumaNode, PciInfo, RdmaDevice};
        let mut inv = crate::Inventory {
            rdma_devices: vec![RdmaDevice {
                name: "mlx5_0".into(),
                numa_node: Some(1),
                pci: Some(PciInfo {
                    address: "0000:81:00.0".into(),
                    numa_node: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            numa_nodes: vec![
                NumaNode {
                    node: 0,
                    cpulist: "0-15".into(),
                },
                NumaNode {
                    node: 1,
                    cpulist: "16-31".into(),
                },
            ],
            cpus_allowed: Some("2-3".into()),
            ..Default::default()
        };
        inv.source.root = "/".into();
        let r = crate::doctor::diagnose(&inv);
        let f: Vec<_> = r.with_id("numa-cpuset-mismatch").collect();
        assert_eq!(f.len(), 1, "{:?}", r.findings);
        assert_eq!(f[0].subject, "mlx5_0");
        assert!(f[0].summary.contains("CPUs 2-3") && f[0].summary.contains("node 1"));
        assert!(f[0].fix[0].contains("single-numa-node") && f[0].fix[0].contains("Guaranteed"));
        assert!(f[0].fix[1].contains("taskset -c 16-31"));
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.path == "/sys/bus/pci/devices/0000:81:00.0/numa_node"));
        // A CPU of node 1 allowed, no allowed list, garbage, an unknown node: no finding.
        for allowed in [Some("2-3,17"), None, Some("x-y")] {
            inv.cpus_allowed = allowed.map(str::to_string);
            assert_eq!(
                crate::doctor::diagnose(&inv)
                    .with_id("numa-cpuset-mismatch")
                    .count(),
                0
            );
        }
        inv.cpus_allowed = Some("2-3".into());
        inv.rdma_devices[0].numa_node = Some(5);
        inv.rdma_devices[0].pci.as_mut().unwrap().numa_node = Some(5);
        assert_eq!(
            crate::doctor::diagnose(&inv)
                .with_id("numa-cpuset-mismatch")
                .count(),
            0
        );
    }

    #[test]
    fn live_host() {
        let root = Root::live();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let allowed = parse_cpu_list(&allowed_from_status(&status).unwrap()).unwrap();
        assert!(!allowed.is_empty());
        let nodes = numa_nodes(&root);
        // This machine may or may not expose NUMA nodes; when it does, node 0's CPUs parse
        // and every allowed CPU is on some node.
        if let Some((n, _)) = nodes.first() {
            let all: Vec<u32> = nodes
                .iter()
                .flat_map(|(n, _)| node_cpus(&root, *n).unwrap())
                .collect();
            assert!(
                allowed.iter().all(|c| all.contains(c)),
                "{allowed:?} {all:?}"
            );
            let c = choose(&allowed, Some(&node_cpus(&root, *n).unwrap()), &[]);
            assert!(!c.cpus.is_empty() && c.cpus.iter().all(|x| allowed.contains(x)));
        }
    }
}
