//! The plan as a whole: its top-level keys, the rules between sections
//! (netns modes, address overlaps, node selection, agent CPUs), and the
//! assembly of the [`Plan`]; each section is checked in its own file.

use super::*;

pub(super) fn check(cx: &mut Diagnostics, raw: RawPlan, base_dir: &Path) -> Option<Plan> {
    // namespace, image, pull policy
    let namespace = match &raw.namespace {
        Some(ns) if !is_dns_label(ns.get_ref()) => {
            cx.at(
                ns.span(),
                format!(
                    "namespace {:?} is not a DNS-1123 label (lowercase a-z, 0-9, '-', at most 63)",
                    ns.get_ref()
                ),
            );
            String::new()
        }
        Some(ns) => ns.get_ref().clone(),
        None => "fabperf".to_string(),
    };
    let image = raw.image.get_ref().trim().to_string();
    if image.is_empty() || image.contains(char::is_whitespace) {
        cx.at(
            raw.image.span(),
            "image must be a container image reference such as registry.example.com/fabperf:0.1.0",
        );
    }
    let image_pull_policy = match &raw.image_pull_policy {
        Some(p) if !["Always", "IfNotPresent", "Never"].contains(&p.get_ref().as_str()) => {
            cx.at(
                p.span(),
                format!(
                    "image_pull_policy {:?} must be Always, IfNotPresent or Never",
                    p.get_ref()
                ),
            );
            String::new()
        }
        Some(p) => p.get_ref().clone(),
        None => "IfNotPresent".into(),
    };

    // paths
    let mut paths = BTreeSet::new();
    let mut path_spans: BTreeMap<PathKind, Range<usize>> = BTreeMap::new();
    if raw.paths.get_ref().is_empty() {
        cx.at(
            raw.paths.span(),
            "paths is empty; list at least one of host, pod, service, ipoib, roce",
        );
    }
    for p in raw.paths.get_ref() {
        match PathKind::parse(p.get_ref()) {
            Some(k) => {
                if !paths.insert(k) {
                    cx.at(p.span(), format!("path {:?} is listed twice", p.get_ref()));
                }
                path_spans.insert(k, p.span());
            }
            None => cx.at(
                p.span(),
                format!(
                    "unknown path {:?}: expected one of host, pod, service, ipoib, roce",
                    p.get_ref()
                ),
            ),
        }
    }
    if let Some(sp) = path_spans.get(&PathKind::Service) {
        if !paths.contains(&PathKind::Pod) {
            cx.at(sp.clone(), "path \"service\" puts a ClusterIP Service in front of the \"pod\" agents; add \"pod\" to paths");
        }
    }

    let control_port = match &raw.control_port {
        Some(p) => u32_in(cx, p, "control_port", 1, 65535).unwrap_or(0) as u16,
        None => DEFAULT_CONTROL_PORT,
    };

    // token: never inline (a plan is a committed file); from token_file or
    // out of band.
    if let Some(t) = &raw.token {
        cx.at(
            t.span(),
            "an inline token ends up in version control with the plan: put it in a file outside the repository (`openssl rand -hex 24 > token; chmod 600 token`) and set token_file = \"FILE\" or pass --token-file, or leave both out and create the Secret with the `kubectl create secret` command render prints",
        );
    }
    let token = match &raw.token_file {
        None => None,
        Some(f) => {
            let p = base_dir.join(f.get_ref());
            match read_token_file(&p) {
                Ok(t) => Some(t),
                Err(e) => {
                    cx.at(f.span(), format!("token_file: {e}"));
                    None
                }
            }
        }
    };

    let rdma_resource = match &raw.rdma_resource {
        Some(r) => {
            let v = r.get_ref();
            let ok = v.split_once('/').is_some_and(|(pre, name)| {
                is_dns_subdomain(pre)
                    && !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
            if !ok {
                cx.at(r.span(), format!("rdma_resource {v:?} must be PREFIX/NAME, e.g. {DEFAULT_RDMA_RESOURCE} (NAME: letters, digits, '_')"));
            }
            v.clone()
        }
        None => DEFAULT_RDMA_RESOURCE.into(),
    };

    let (node_names, mut node_selector, tolerations) = check_nodes(cx, raw.nodes.as_ref());

    let resources = check_resources(cx, raw.resources.as_ref());

    let ipam = match &raw.ipam {
        None => IpamKind::NvIpam,
        Some(v) => match v.get_ref().as_str() {
            "nv-ipam" => IpamKind::NvIpam,
            "whereabouts" => IpamKind::Whereabouts,
            other => {
                cx.at(
                    v.span(),
                    format!("ipam {other:?} must be \"nv-ipam\" (network-operator's IPAM) or \"whereabouts\" (installed on its own)"),
                );
                IpamKind::NvIpam
            }
        },
    };

    let detects = check_detect(cx, raw.detect.as_ref(), &node_names, base_dir);
    let detected_nodes: Vec<String> = {
        let mut v: Vec<String> = detects.iter().map(|d| d.node.clone()).collect();
        v.sort();
        v
    };
    let node_ips: BTreeMap<String, NodeIp> = detects
        .iter()
        .filter_map(|d| d.node_ip.clone().map(|ip| (d.node.clone(), ip)))
        .collect();

    let ipoib = match (&raw.ipoib, path_spans.get(&PathKind::Ipoib)) {
        (Some(t), Some(_)) => check_ipoib(cx, t, &detects),
        (Some(t), None) => {
            cx.at(
                t.span(),
                "table [ipoib] is given but \"ipoib\" is not in paths; add it or drop the table",
            );
            None
        }
        (None, Some(sp)) => {
            cx.at(
                sp.clone(),
                "path \"ipoib\" needs an [ipoib] table with at least range = \"CIDR\"",
            );
            None
        }
        (None, None) => None,
    };
    let roce = match (&raw.roce, path_spans.get(&PathKind::Roce)) {
        (Some(t), Some(_)) => check_roce(cx, t, &detects),
        (Some(t), None) => {
            cx.at(
                t.span(),
                "table [roce] is given but \"roce\" is not in paths; add it or drop the table",
            );
            None
        }
        (None, Some(sp)) => {
            cx.at(
                sp.clone(),
                "path \"roce\" needs a [roce] table with at least range = \"CIDR\"",
            );
            None
        }
        (None, None) => None,
    };

    // Shared and exclusive RDMA netns modes cannot coexist on one node: the
    // shared device plugin needs `rdma system` netns shared, SR-IOV RDMA VFs
    // in pods need exclusive. Every path of a plan runs on the same nodes.
    let roce_shared = roce.as_ref().is_some_and(|r| r.attach == Attach::Shared);
    let roce_sriov = roce.as_ref().is_some_and(|r| r.attach == Attach::Sriov);
    let ipoib_sriov = ipoib.as_ref().is_some_and(|i| i.attach == Attach::Sriov);
    let any_sriov = roce_sriov || ipoib_sriov;
    if any_sriov && (roce_shared || raw.device_plugin.is_some()) {
        let sp = raw
            .device_plugin
            .as_ref()
            .map(|d| d.span())
            .or_else(|| raw.roce.as_ref().map(|r| r.span()))
            .unwrap_or(0..0);
        cx.at(sp, "the plan mixes shared RDMA (the shared device plugin: [device_plugin] or [roce] attach = \"shared\") with SR-IOV (attach = \"sriov\", RDMA netns exclusive) on the same nodes; a node's RDMA subsystem is either shared or exclusive (`rdma system set netns ...`): choose one for every path");
    }
    if any_sriov && !node_names.is_empty() {
        let sp = raw.nodes.as_ref().map(|n| n.span()).unwrap_or(0..0);
        cx.at(sp, "SR-IOV node policies select nodes by label: drop [nodes].names and use [nodes].selector (the default selects the NFD label feature.node.kubernetes.io/pci-15b3.present=true)");
    }
    // Default node selection: the nodes with a detect file (pinned by name),
    // else the hardware label. SR-IOV node policies select by label only.
    if node_names.is_empty() && node_selector.is_empty() && (detected_nodes.is_empty() || any_sriov)
    {
        node_selector.insert(NFD_NIC_LABEL.into(), "true".into());
    }
    if let (Some(t), false) = (&raw.sriov, any_sriov) {
        cx.at(t.span(), "table [sriov] is given but no path uses attach = \"sriov\"; set it in [roce] or [ipoib], or drop the table");
    }

    let device_plugin = if (roce_shared && paths.contains(&PathKind::Roce))
        || (raw.device_plugin.is_some() && !any_sriov)
    {
        check_device_plugin(
            cx,
            raw.device_plugin.as_ref(),
            &rdma_resource,
            roce.as_ref(),
            &detects,
        )
    } else {
        None
    };

    let mut operator = OperatorPlan {
        repository: DEFAULT_OPERATOR_REPOSITORY.into(),
        version: DEFAULT_OPERATOR_VERSION.into(),
        namespace: DEFAULT_OPERATOR_NAMESPACE.into(),
        per_node_block_size: 16,
    };
    if let Some(o) = &raw.network_operator {
        let o = o.get_ref();
        if let Some(r) = &o.repository {
            if r.get_ref().is_empty()
                || !r
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"./-:_".contains(&b))
            {
                cx.at(
                    r.span(),
                    format!(
                        "network_operator.repository {:?} is not an image repository (lowercase letters, digits, '.', '/', '-', '_', ':')",
                        r.get_ref()
                    ),
                );
            }
            operator.repository = r.get_ref().clone();
        }
        if let Some(v) = &o.version {
            if v.get_ref().is_empty()
                || !v
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                cx.at(
                    v.span(),
                    format!(
                        "network_operator.version {:?} may only hold letters, digits, '.' and '-'",
                        v.get_ref()
                    ),
                );
            }
            operator.version = v.get_ref().clone();
        }
        if let Some(n) = &o.namespace {
            if !is_dns_label(n.get_ref()) {
                cx.at(
                    n.span(),
                    format!(
                        "network_operator.namespace {:?} is not a DNS-1123 label",
                        n.get_ref()
                    ),
                );
            }
            operator.namespace = n.get_ref().clone();
        }
        if let Some(b) = &o.per_node_block_size {
            if let Some(n) = u32_in(cx, b, "network_operator.per_node_block_size", 2, 65536) {
                operator.per_node_block_size = n;
            }
        }
    }

    let sriov = if any_sriov {
        check_sriov(
            cx,
            raw.sriov.as_ref(),
            roce.as_ref(),
            ipoib.as_ref(),
            &detects,
        )
    } else {
        None
    };

    let cni = raw
        .cni
        .as_ref()
        .and_then(|c| check_cni(cx, c, roce.as_ref(), &detects));

    // RoCE host-device moves the netdev into the pod: never the one that
    // carries the CNI or the node IP.
    if let (Some(r), Some(t)) = (&roce, &raw.roce) {
        if matches!(r.plugin, CniPlugin::HostDevice { .. }) {
            let sp = t
                .get_ref()
                .netdev
                .as_ref()
                .map(|n| n.span())
                .unwrap_or(t.span());
            if let Some(c) = &cni {
                if c.interface == r.netdev {
                    cx.at(sp.clone(), format!("[roce] network_type = \"host-device\" would move {} into the agent pod, but {} carries the CNI ([cni].interface): the node's pod network would go with it; use macvlan or a second NIC", r.netdev, r.netdev));
                }
            }
            for d in &detects {
                if d.node_ip
                    .as_ref()
                    .is_some_and(|ip| ip.interface == r.netdev)
                {
                    cx.at(sp.clone(), format!("[roce] network_type = \"host-device\" would move {} into the agent pod, but it carries node {}'s node IP: the node would drop off the cluster; use macvlan or a second NIC", r.netdev, d.node));
                }
            }
        }
    }

    let mut warnings = Vec::new();
    if node_names.is_empty() && detected_nodes.is_empty() {
        warnings.push(format!(
            "nodes: no [nodes] names and no detect files, so the agents run on every node with {} (the label{} the plan selects): every such node joins the runner's mesh, and one without a working NIC fails its cells; list the nodes' detect files under [detect] to pin the agents to them",
            node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
            if node_selector.len() == 1 { "" } else { "s" }
        ));
    }
    if let Some(sp) = path_spans.get(&PathKind::Service) {
        if node_names.is_empty() && detected_nodes.is_empty() {
            cx.at(sp.clone(), "path \"service\" renders one single-endpoint Service per node (a Service with several endpoints sends a test's data connections to other agents than its control connection): name the nodes, in [nodes] names or by their detect files under [detect]");
        }
    }
    if let Some(c) = &cni {
        check_cilium_link(
            cx,
            raw.cni.as_ref().map(|t| t.span()).unwrap_or(0..0),
            c,
            &detects,
            &mut warnings,
        );
    }

    let host = if paths.contains(&PathKind::Host) {
        check_host(
            cx,
            raw.host.as_ref(),
            cni.as_ref(),
            &detects,
            &node_names,
            &mut warnings,
        )
    } else {
        if let Some(h) = &raw.host {
            cx.at(
                h.span(),
                "table [host] is given but \"host\" is not in paths; add it or drop the table",
            );
        }
        None
    };

    // overlapping address ranges
    let mut ranges: Vec<(&str, IpNet, Range<usize>)> = Vec::new();
    if let (Some(t), Some(ip)) = (&raw.ipoib, &ipoib) {
        if let Ok(c) = cidr::parse(&ip.ipam.range) {
            ranges.push(("[ipoib].range", c, t.get_ref().range.span()));
        }
    }
    if let (Some(t), Some(r)) = (&raw.roce, &roce) {
        if let Ok(c) = cidr::parse(&r.ipam.range) {
            ranges.push(("[roce].range", c, t.get_ref().range.span()));
        }
    }
    if let (Some(t), Some(c)) = (&raw.cni, &cni) {
        ranges.push(("[cni].pod_cidr", c.pod_cidr, t.get_ref().pod_cidr.span()));
    }
    for i in 0..ranges.len() {
        for j in 0..i {
            if cidr::overlaps(&ranges[i].1, &ranges[j].1) {
                let msg = format!(
                    "{} {} overlaps {} {}; each network needs its own addresses",
                    ranges[i].0, ranges[i].1, ranges[j].0, ranges[j].1
                );
                cx.at(ranges[i].2.clone(), msg);
            }
        }
    }
    // nv-ipam hands out per-node blocks: the range must hold a block for each node.
    if ipam == IpamKind::NvIpam {
        let mut secondary: Vec<(&str, &WhereaboutsIpam, Range<usize>)> = Vec::new();
        if let (Some(t), Some(ip)) = (&raw.ipoib, &ipoib) {
            secondary.push(("[ipoib].range", &ip.ipam, t.get_ref().range.span()));
        }
        if let (Some(t), Some(r)) = (&raw.roce, &roce) {
            secondary.push(("[roce].range", &r.ipam, t.get_ref().range.span()));
        }
        let nodes = if node_names.is_empty() {
            detected_nodes.len()
        } else {
            node_names.len()
        };
        for (name, range, sp) in secondary {
            let Ok(IpNet::V4(c)) = cidr::parse(&range.range) else {
                continue;
            };
            let exclusions = crate::render::nv_ipam_exclusions(range);
            let size = operator.per_node_block_size;
            let blocks = nv_ipam_blocks(c, size, &exclusions);
            if blocks == 0 {
                cx.at(sp, format!("{name} {c} cannot hold one nv-ipam block of {size} addresses (network_operator.per_node_block_size)"));
            } else if nodes > 0 && blocks < nodes as u64 {
                let fits = (0..size.ilog2())
                    .map(|e| size >> (e + 1))
                    .find(|b| nv_ipam_blocks(c, *b, &exclusions) >= nodes as u64);
                cx.at(sp, format!(
                    "{name} {c} holds {blocks} nv-ipam blocks of {size} addresses (nv-ipam v0.4.0 gives every node one block of network_operator.per_node_block_size, from the first address after the network's, never the broadcast's), but the plan has {nodes} nodes: {}",
                    match fits {
                        Some(b) => format!("set [network_operator] per_node_block_size = {b} (each node's agent needs one address) or give a larger range"),
                        None => "give a larger range".into(),
                    }
                ));
            } else if nodes == 0 {
                warnings.push(format!(
                    "{name} {c}: nv-ipam gives every node a block of {size} addresses, so this pool serves at most {blocks} nodes; the agents of any further node stay ContainerCreating without an address (name the nodes to have render check it)"
                ));
            }
        }
    }

    // CPUs per agent from the port rate: TCP at line rate needs about one
    // core per 25 Gbit/s (one stream per core with sendfile and GRO, as the
    // suite measures it) on each end; 2 CPUs stop near 50 Gbit/s.
    let mut resources = resources;
    let tested: Vec<&str> = [
        cni.as_ref().map(|c| c.interface.as_str()),
        host.as_ref().map(|h| h.interface.as_str()),
        roce.as_ref().map(|r| r.netdev.as_str()),
        ipoib.as_ref().map(|i| i.master.as_str()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let fastest = detects
        .iter()
        .flat_map(|d| d.report.netdevs.iter().map(move |n| (d, n)))
        .filter(|(_, n)| tested.contains(&n.name.as_str()))
        .filter_map(|(d, n)| n.speed_mbps.map(|m| (m, d.node.as_str(), n.name.as_str())))
        .max_by_key(|(m, _, _)| *m);
    if let Some((mbps, node, ifname)) = fastest {
        let gbps = mbps as f64 / 1000.0;
        let want = ((gbps / GBPS_PER_AGENT_CPU).ceil() as u32)
            .clamp(DEFAULT_AGENT_CPU, MAX_AUTO_AGENT_CPU);
        let explicit = raw
            .resources
            .as_ref()
            .and_then(|r| r.get_ref().cpu.as_ref().map(|c| c.span()));
        match explicit {
            None => resources.cpu = want,
            Some(sp) if resources.cpu < want => {
                let _ = sp;
                warnings.push(format!(
                    "[resources] cpu = {} per agent: {ifname} on {node} runs at {gbps:.0} Gbit/s, and TCP at that rate needs about {want} CPUs (about {GBPS_PER_AGENT_CPU:.0} Gbit/s per core); socket bandwidth tests will be CPU-bound, not link-bound. Set cpu = {want} (or leave it out: render sizes it from the detected port rate)",
                    resources.cpu
                ));
            }
            Some(_) => {}
        }
    }

    // The example plan's image is not published: say how to build one.
    if image == EXAMPLE_IMAGE {
        warnings.push(format!(
            "image {EXAMPLE_IMAGE} is the examples' placeholder and is not published: the pods would stay ImagePullBackOff. Build and push the image (Containerfile): `buildah build -t REGISTRY/fabperf:TAG -f Containerfile . && buildah push REGISTRY/fabperf:TAG` (or podman/docker), then set image = \"REGISTRY/fabperf:TAG\" in the plan (docs/k8s.md, Agent image)"
        ));
    }

    // The in-cluster runner: its run plan is validated here, so its
    // problems come with the plan's others (unless what it builds on is
    // already reported broken: no cascade of errors from one).
    let runner_inputs_ok = !namespace.is_empty() && control_port != 0 && !paths.is_empty();
    let runner = if !runner_inputs_ok {
        None
    } else {
        let mut rdma_paths = BTreeSet::new();
        if paths.contains(&PathKind::Roce) {
            rdma_paths.insert(PathKind::Roce);
        }
        if paths.contains(&PathKind::Ipoib)
            && ipoib.as_ref().is_some_and(|i| i.attach == Attach::Sriov)
        {
            rdma_paths.insert(PathKind::Ipoib);
        }
        let inputs = crate::runner::Inputs {
            text: cx.text(),
            source_name: cx.file(),
            namespace: &namespace,
            paths: &paths,
            control_port,
            rdma_paths,
            service_nodes: if node_names.is_empty() {
                &detected_nodes
            } else {
                &node_names
            },
        };
        let mut errs = Vec::new();
        let r = crate::runner::check(raw.runner.as_ref(), &inputs, &mut |sp, m| {
            errs.push((sp, m))
        });
        errs.sort_by_key(|(sp, _): &(Range<usize>, String)| sp.start);
        for (sp, m) in errs {
            cx.at(sp, m);
        }
        r
    };
    let policy_scale = crate::policy::check(raw.policy_scale.as_ref(), &mut |sp, m| cx.at(sp, m));
    let gpu = raw.gpu.as_ref().and_then(|g| {
        let nodes: Vec<crate::gpu::Node<'_>> = detects
            .iter()
            .map(|d| crate::gpu::Node {
                name: &d.node,
                report: &d.report,
            })
            .collect();
        let rdma = paths.contains(&PathKind::Roce)
            || (paths.contains(&PathKind::Ipoib)
                && ipoib.as_ref().is_some_and(|i| i.attach == Attach::Sriov));
        let shared = paths.contains(&PathKind::Roce)
            && roce.as_ref().is_some_and(|r| r.attach == Attach::Shared);
        let moved = roce
            .as_ref()
            .filter(|r| matches!(r.plugin, CniPlugin::HostDevice { .. }))
            .map(|r| r.netdev.as_str());
        crate::gpu::check(
            g,
            &nodes,
            rdma,
            shared,
            moved,
            &mut |sp, m| cx.at(sp, m),
            &mut warnings,
        )
    });
    let mut device_plugin = device_plugin;
    if let (Some(g), Some(dp)) = (&gpu, device_plugin.as_mut()) {
        let max = dp
            .config_list
            .first()
            .map(|c| c.rdma_hca_max)
            .unwrap_or(1000);
        dp.config_list.extend(g.rail_configs(max));
    }

    if !cx.is_empty() {
        return None;
    }
    Some(Plan {
        source_name: cx.file().to_string(),
        namespace,
        image,
        image_pull_policy,
        paths,
        control_port,
        token,
        rdma_resource,
        ipam,
        node_names,
        detected_nodes,
        node_selector,
        tolerations,
        resources,
        node_ips,
        host,
        ipoib,
        roce,
        sriov,
        device_plugin,
        operator,
        cni,
        policy_scale,
        warnings,
        runner,
        gpu,
    })
}
