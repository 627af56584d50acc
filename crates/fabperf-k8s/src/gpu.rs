//! GPU nodes in a plan (`[gpu]`): the RDMA agents request GPUs (`nvidia.com/gpu`) so that
//! `fabperf rdma-bw --mem cuda` can run in them, and optionally one RDMA resource per rail, so
//! a pod can hold a given rail's NIC.
//!
//! What the devices plugins do (checked against their sources at the pinned releases): the
//! NVIDIA device plugin (v0.20.0) reports each GPU's NUMA node as its topology hint and, for
//! several GPUs, prefers a set well connected among themselves (go-gpuallocator's best-effort
//! policy); it knows nothing of NICs. The k8s-rdma-shared-dev-plugin (v1.5.3) announces
//! `rdmaHcaMax` interchangeable devices per resource with no topology and no preferred
//! allocation, and mounts every RDMA device its selectors match into each pod that asks. So the
//! two pick independently: a pod asking for one GPU gets whichever GPU is free, which need not
//! sit under the same PCIe switch as its NIC (the kubelet's Topology Manager can at most align
//! NUMA nodes, and the RDMA plugin gives it nothing to align). The one placement a plan can
//! guarantee is all of a node's GPUs in the agent pod (`gpus = "all"`, the default): then the
//! GPU under each NIC's switch is there, and `--mem cuda` picks it. With a number instead, the
//! records say which relationship the test got (`placement_*.gpu.relation`).

use crate::crd::{RdmaResourceConfig, RdmaSelectors};
use crate::detect::DetectReport;
use crate::plan::PathKind;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::Spanned;

/// The extended resource of the NVIDIA device plugin.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Prefix and name stem of the per-rail RDMA resources (`rdma/gpu_rail0`, ...).
pub const RAIL_RESOURCE_PREFIX: &str = "rdma";
pub const RAIL_RESOURCE_STEM: &str = "gpu_rail";

type S<T> = Spanned<T>;

/// `gpus = "all"` or a number.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum RawCount {
    Number(i64),
    Word(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGpu {
    gpus: Option<S<RawCount>>,
    resource: Option<S<String>>,
    rail_resources: Option<S<bool>>,
}

/// One rail's RDMA resource: the NIC nearest GPU i on each node (rail i), by its netdev.
#[derive(Debug, Clone, PartialEq)]
pub struct RailResource {
    pub rail: u32,
    /// Resource name without prefix (`gpu_rail0`).
    pub name: String,
    /// The rail's netdev on each node (the plugin's `ifNames`, OR'ed).
    pub if_names: Vec<String>,
}

impl RailResource {
    /// `rdma/gpu_rail0`.
    pub fn resource(&self) -> String {
        format!("{RAIL_RESOURCE_PREFIX}/{}", self.name)
    }
}

/// The plan's `[gpu]` table, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlan {
    /// `nvidia.com/gpu` unless told.
    pub resource: String,
    /// GPUs per RDMA agent pod.
    pub count: u32,
    /// `count` is every GPU of the nodes (`gpus = "all"`).
    pub all: bool,
    /// Per-rail RDMA resources (`rail_resources = true`), rail 0 first.
    pub rails: Vec<RailResource>,
}

impl GpuPlan {
    /// The device plugin entries of the rails (same `rdmaHcaMax` as the plan's other ones).
    pub fn rail_configs(&self, rdma_hca_max: u32) -> Vec<RdmaResourceConfig> {
        self.rails
            .iter()
            .map(|r| RdmaResourceConfig {
                resource_name: r.name.clone(),
                resource_prefix: RAIL_RESOURCE_PREFIX.into(),
                rdma_hca_max,
                selectors: RdmaSelectors {
                    if_names: r.if_names.clone(),
                    ..Default::default()
                },
            })
            .collect()
    }

    /// What an RDMA agent's container asks for beyond its RDMA device: the GPUs and the rails.
    pub fn limits(&self) -> Vec<(String, String)> {
        let mut v = vec![(self.resource.clone(), self.count.to_string())];
        v.extend(self.rails.iter().map(|r| (r.resource(), "1".to_string())));
        v
    }

    /// Environment of the RDMA agents: the driver capabilities the NVIDIA container runtime
    /// mounts (libcuda.so.1 is in `compute`), and mlx5's scatter-to-CQE off so that sends can
    /// be received into GPU memory (what perftest sets for its device-memory tests).
    pub fn env(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
            ("MLX5_SCATTER_TO_CQE", "0"),
        ]
    }

    /// One line for the agent manifests' headers.
    pub fn header(&self) -> String {
        let mut s = if self.all {
            format!(
                "GPU memory: every GPU of the node ({} x {}) in the agent pod, so the GPU under each NIC's PCIe switch is there for `rdma-bw --mem cuda`",
                self.count, self.resource
            )
        } else {
            format!(
                "GPU memory: {} x {} per agent pod, chosen by the NVIDIA device plugin without regard to the NIC (it and the RDMA plugin allocate independently): the GPU may sit far from the NIC; records carry the relationship",
                self.count, self.resource
            )
        };
        if !self.rails.is_empty() {
            s.push_str(&format!(
                "; rail RDMA resources {}",
                self.rails
                    .iter()
                    .map(|r| r.resource())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        s
    }
}

/// Whether a path's agents get the GPU resources: the ones holding an RDMA device.
pub fn applies_to(has_rdma_resource: bool, path: PathKind) -> bool {
    has_rdma_resource && matches!(path, PathKind::Roce | PathKind::Ipoib)
}

/// Nodes and their detect reports, as the plan checker holds them.
pub(crate) struct Node<'a> {
    pub name: &'a str,
    pub report: &'a DetectReport,
}

/// Resolve `[gpu]`. `rdma_paths`: the plan has an agent with an RDMA device; `shared`: that
/// device comes from the shared device plugin (per-rail resources need it); `moved`: the
/// netdev `[roce] network_type = "host-device"` moves into the agent pods.
pub(crate) fn check(
    raw: &S<RawGpu>,
    nodes: &[Node<'_>],
    rdma_paths: bool,
    shared: bool,
    moved: Option<&str>,
    err: &mut dyn FnMut(Range<usize>, String),
    warnings: &mut Vec<String>,
) -> Option<GpuPlan> {
    let t = raw.get_ref();
    let mut ok = true;
    if !rdma_paths {
        err(
            raw.span(),
            "[gpu] gives GPUs to the agents that hold an RDMA device (path \"roce\", or \"ipoib\" with attach = \"sriov\"); the plan has none".into(),
        );
        ok = false;
    }
    let resource = match &t.resource {
        Some(r) => {
            let v = r.get_ref();
            let valid = v.split_once('/').is_some_and(|(p, n)| {
                !p.is_empty()
                    && !n.is_empty()
                    && p.contains('.')
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-._/".contains(c))
            });
            if !valid {
                err(
                    r.span(),
                    format!("[gpu].resource {v:?} must be a DOMAIN/NAME extended resource, e.g. {DEFAULT_GPU_RESOURCE}"),
                );
                ok = false;
            }
            v.clone()
        }
        None => DEFAULT_GPU_RESOURCE.to_string(),
    };
    let counts: Vec<(&str, usize)> = nodes
        .iter()
        .map(|n| (n.name, n.report.gpus.len()))
        .collect();
    let mut every_gpu = |sp: Range<usize>, ok: &mut bool| -> (u32, bool) {
        if counts.is_empty() {
            err(
                sp,
                "[gpu] gpus = \"all\" counts the GPUs in the nodes' detect files ([detect]); list them, or give a number".into(),
            );
            *ok = false;
            return (0, true);
        }
        let none: Vec<&str> = counts
            .iter()
            .filter(|(_, c)| *c == 0)
            .map(|(n, _)| *n)
            .collect();
        if !none.is_empty() {
            err(
                sp,
                format!(
                    "[gpu]: the detect files of {} list no GPU; an agent asking for GPUs would stay Pending there (leave those nodes out of the plan, or drop [gpu])",
                    none.join(", ")
                ),
            );
            *ok = false;
        }
        let min = counts.iter().map(|(_, c)| *c).min().unwrap_or(0);
        let max = counts.iter().map(|(_, c)| *c).max().unwrap_or(0);
        if min != max && min > 0 {
            warnings.push(format!(
                "[gpu] gpus = \"all\": the nodes have {min} to {max} GPUs; every agent asks for {min}, so on the larger nodes some GPUs (and the NICs under them) may be outside the pod"
            ));
        }
        (min as u32, true)
    };
    let (count, all) = match &t.gpus {
        None => every_gpu(raw.span(), &mut ok),
        Some(g) => match g.get_ref() {
            RawCount::Word(w) if w == "all" => every_gpu(g.span(), &mut ok),
            RawCount::Word(w) => {
                err(
                    g.span(),
                    format!("[gpu] gpus = {w:?}: use \"all\" or a number of GPUs per agent pod"),
                );
                ok = false;
                (0, false)
            }
            RawCount::Number(n) if !(1..=64).contains(n) => {
                err(g.span(), format!("[gpu] gpus = {n} is out of range 1..=64"));
                ok = false;
                (0, false)
            }
            RawCount::Number(n) => {
                let n = *n as u32;
                for (node, c) in &counts {
                    if (*c as u32) < n {
                        err(
                            g.span(),
                            format!("[gpu] gpus = {n}, but node {node}'s detect file lists {c} GPU(s): its agent would stay Pending"),
                        );
                        ok = false;
                    }
                }
                let all = !counts.is_empty() && counts.iter().all(|(_, c)| *c as u32 == n);
                if !all {
                    warnings.push(format!(
                        "[gpu] gpus = {n}: the NVIDIA device plugin picks the GPU(s) without regard to the NIC, so a test may get a GPU far from it (the record's placement_*.gpu.relation says which); gpus = \"all\" guarantees the GPU under each NIC's switch"
                    ));
                }
                (n, all)
            }
        },
    };
    let mut rails = Vec::new();
    if let Some(r) = &t.rail_resources {
        if *r.get_ref() {
            if !shared {
                err(
                    r.span(),
                    "[gpu] rail_resources needs the shared RDMA device plugin ([roce] attach = \"shared\"): SR-IOV resources are pools of VFs, not one NIC each".into(),
                );
                ok = false;
            } else if nodes.is_empty() {
                err(
                    r.span(),
                    "[gpu] rail_resources finds each rail's NIC in the nodes' detect files ([detect]); list them".into(),
                );
                ok = false;
            } else {
                match rail_resources(nodes) {
                    Ok((r, w)) => {
                        // k8s-rdma-shared-dev-plugin v1.5.3 reads a moved
                        // netdev's name as empty (pkg/resources/
                        // pci_net_device.go) and has no PCI address selector.
                        let hit = moved.and_then(|m| {
                            r.iter()
                                .find(|x| x.if_names.iter().any(|n| n == m))
                                .map(|x| (m, x.rail))
                        });
                        if let Some((m, rail)) = hit {
                            err(raw.span(), format!("[gpu] rail_resources selects rail {rail}'s NIC by its netdev {m} (ifNames; the shared RDMA device plugin has no PCI address selector), but [roce] network_type = \"host-device\" moves {m} into the agent pod, where the plugin no longer sees its name: rdma/{RAIL_RESOURCE_STEM}{rail} would drop to 0 while an agent holds the NIC and a restarted agent would stay Pending. Use network_type = \"macvlan\", a [roce] netdev that is no rail NIC, or rail_resources = false"));
                            ok = false;
                        } else {
                            rails = r;
                            warnings.extend(w);
                        }
                    }
                    Err(e) => {
                        err(r.span(), e);
                        ok = false;
                    }
                }
            }
        }
    }
    ok.then_some(GpuPlan {
        resource,
        count,
        all,
        rails,
    })
}

/// Rail i = the NIC nearest GPU i (fabperf-detect's `gpu-order` rule) on each node, named by
/// its netdev for the plugin's `ifNames`.
fn rail_resources(nodes: &[Node<'_>]) -> Result<(Vec<RailResource>, Vec<String>), String> {
    let mut by_rail: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut per_node: Vec<(&str, usize)> = Vec::new();
    for n in nodes {
        let mut inv = n.report.0.clone();
        fabperf_detect::assign_rails(&mut inv, &fabperf_detect::RailRule::GpuOrder)
            .map_err(|e| format!("node {}: {e}", n.name))?;
        let mut count = 0;
        for d in inv.rdma_devices.iter().filter(|d| d.rail.is_some()) {
            let rail = d.rail.unwrap_or_default();
            let netdev = d
                .ports
                .iter()
                .flat_map(|p| p.netdevs.iter())
                .next()
                .ok_or_else(|| {
                    format!(
                        "[gpu] rail_resources: node {}'s rail {rail} NIC {} has no netdev, and the shared device plugin selects NICs by netdev (ifNames)",
                        n.name, d.name
                    )
                })?;
            let names = by_rail.entry(rail).or_default();
            if !names.contains(netdev) {
                names.push(netdev.clone());
            }
            count += 1;
        }
        per_node.push((n.name, count));
    }
    if by_rail.is_empty() {
        return Err("[gpu] rail_resources: no node has a NIC below a GPU's PCIe switch (the detect files' gpu_nic shows no PIX/PXB pair), so there is no rail to name".into());
    }
    let mut warnings = Vec::new();
    let max = per_node.iter().map(|(_, c)| *c).max().unwrap_or(0);
    for (node, c) in &per_node {
        if *c < max {
            warnings.push(format!(
                "[gpu] rail_resources: node {node} has {c} rail NIC(s) of {max}; its agent asks for every rail and stays Pending until the missing ones appear"
            ));
        }
    }
    let rails = by_rail
        .into_iter()
        .map(|(rail, mut if_names)| {
            if_names.sort();
            RailResource {
                rail,
                name: format!("{RAIL_RESOURCE_STEM}{rail}"),
                if_names,
            }
        })
        .collect();
    Ok((rails, warnings))
}
