//! `[detect]`: the nodes' detect reports (and their node IPs), and picking
//! the one interface name every report agrees on.

use super::*;

/// One node's detect report, with where it was named in the plan.
pub(super) struct NodeDetect {
    pub(super) node: String,
    pub(super) report: DetectReport,
    pub(super) node_ip: Option<NodeIp>,
    pub(super) span: Range<usize>,
}

/// detect's `node_ip` object (`fabperf.detect/1`): the address the kubelet
/// advertises and the interface that carries it. Read from the same text as
/// the report, since the renderer's detect model has no such field.
#[derive(Deserialize)]
struct NodeIpDoc {
    #[serde(default)]
    node_ip: Option<NodeIpField>,
}

#[derive(Deserialize)]
struct NodeIpField {
    address: String,
    interface: String,
}

/// Read a detect file (size-capped, regular files only) and its node IP.
fn load_detect(path: &Path) -> anyhow::Result<(DetectReport, Option<NodeIp>)> {
    let text = crate::files::read_text_capped(path, crate::files::MAX_INPUT_BYTES, "detect file")?;
    let origin = path.display().to_string();
    let report = DetectReport::parse(&text, &origin)?;
    let doc: NodeIpDoc =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{origin}: node_ip: {e}"))?;
    let node_ip = match doc.node_ip {
        None => None,
        Some(n) => {
            if n.address.parse::<std::net::IpAddr>().is_err() || !is_ifname(&n.interface) {
                anyhow::bail!(
                    "{origin}: node_ip {:?} on {:?} is not an address on an interface name",
                    n.address,
                    n.interface
                );
            }
            Some(NodeIp {
                address: n.address,
                interface: n.interface,
            })
        }
    };
    Ok((report, node_ip))
}

/// Pick one interface name that every detect report agrees on.
pub(super) fn pick_from_detect(
    cx: &mut Diagnostics,
    table_span: Range<usize>,
    what: &str,
    key: &str,
    detects: &[NodeDetect],
    candidates: impl Fn(&DetectReport) -> Vec<String>,
) -> Option<String> {
    if detects.is_empty() {
        cx.at(
            table_span,
            format!("missing interface: set {key} = \"NAME\" (the {what}) or list per-node detect files under [detect]"),
        );
        return None;
    }
    let mut chosen: Option<(String, String)> = None;
    for d in detects {
        let c = candidates(&d.report);
        match c.as_slice() {
            [] => {
                let note = d
                    .report
                    .rdma_note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                cx.at(
                    d.span.clone(),
                    format!(
                        "missing interface: node {} has no {what}{note}; fix the node or set {key}",
                        d.node
                    ),
                );
                return None;
            }
            [one] => match &chosen {
                Some((name, node)) if name != one => {
                    cx.at(d.span.clone(), format!(
                        "the {what} is {one} on {} but {name} on {node}; a NetworkAttachmentDefinition names one interface, so give them one name (udev rule) and set {key}",
                        d.node
                    ));
                    return None;
                }
                Some(_) => {}
                None => chosen = Some((one.clone(), d.node.clone())),
            },
            many => {
                cx.at(d.span.clone(), format!("node {} has several candidates for the {what} ({}); set {key} to one of them", d.node, many.join(", ")));
                return None;
            }
        }
    }
    chosen.map(|c| c.0)
}

/// `[detect]`: each node's detect file read (relative to the plan), for
/// the nodes of `nodes.names` when the plan lists them.
pub(super) fn check_detect(
    cx: &mut Diagnostics,
    raw: Option<&S<BTreeMap<String, S<String>>>>,
    node_names: &[String],
    base_dir: &Path,
) -> Vec<NodeDetect> {
    let mut detects: Vec<NodeDetect> = Vec::new();
    if let Some(d) = raw {
        for (node, file) in d.get_ref() {
            if !node_names.is_empty() && !node_names.contains(node) {
                cx.at(
                    file.span(),
                    format!(
                        "detect file for node {node:?}, which is not in nodes.names {node_names:?}"
                    ),
                );
                continue;
            }
            if !is_dns_subdomain(node) {
                cx.at(
                    file.span(),
                    format!("[detect] key {node:?} is not a valid Kubernetes node name"),
                );
                continue;
            }
            match load_detect(&base_dir.join(file.get_ref())) {
                Ok((report, node_ip)) => detects.push(NodeDetect {
                    node: node.clone(),
                    report,
                    node_ip,
                    span: file.span(),
                }),
                Err(e) => cx.at(file.span(), format!("{e:#}")),
            }
        }
    }
    detects
}
