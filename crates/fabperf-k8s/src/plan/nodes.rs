//! `[nodes]` tolerations and `[resources]` (whole CPUs, memory) of the agents.

use super::*;

fn check_tolerations(cx: &mut Diagnostics, raw: &[S<RawToleration>]) -> Vec<TolerationPlan> {
    let mut out = Vec::new();
    for t in raw {
        let sp = t.span();
        let t = t.get_ref();
        let operator = match &t.operator {
            None => "Equal".to_string(),
            Some(o) if o.get_ref() == "Exists" || o.get_ref() == "Equal" => o.get_ref().clone(),
            Some(o) => {
                cx.at(
                    o.span(),
                    format!(
                        "toleration operator {:?} must be Exists or Equal",
                        o.get_ref()
                    ),
                );
                continue;
            }
        };
        if let Some(k) = &t.key {
            if !is_label_key(k.get_ref()) {
                cx.at(
                    k.span(),
                    format!("toleration key {:?} is not a valid taint key", k.get_ref()),
                );
            }
        } else if operator != "Exists" {
            cx.at(sp.clone(), "a toleration without key must use operator = \"Exists\" (it then tolerates every taint)");
        }
        if let Some(v) = &t.value {
            if operator == "Exists" {
                cx.at(v.span(), "a toleration with operator Exists takes no value");
            } else if !is_label_value(v.get_ref()) {
                cx.at(
                    v.span(),
                    format!(
                        "toleration value {:?} is not a valid taint value",
                        v.get_ref()
                    ),
                );
            }
        }
        if let Some(e) = &t.effect {
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&e.get_ref().as_str()) {
                cx.at(e.span(), format!("toleration effect {:?} must be NoSchedule, PreferNoSchedule or NoExecute (or left out for all)", e.get_ref()));
            }
        }
        out.push(TolerationPlan {
            key: t.key.as_ref().map(|k| k.get_ref().clone()),
            operator,
            value: t.value.as_ref().map(|v| v.get_ref().clone()),
            effect: t.effect.as_ref().map(|e| e.get_ref().clone()),
        });
    }
    out
}

/// `512Mi`, `4Gi` -> MiB.
pub(crate) fn parse_memory_mib(s: &str) -> Option<u64> {
    let (num, mul) = if let Some(n) = s.strip_suffix("Gi") {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, 1)
    } else {
        return None;
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 7 {
        return None;
    }
    num.parse::<u64>().ok().map(|n| n * mul)
}

pub(super) fn check_resources(
    cx: &mut Diagnostics,
    raw: Option<&S<RawResources>>,
) -> ResourcesPlan {
    let mut r = ResourcesPlan {
        cpu: DEFAULT_AGENT_CPU,
        memory_mib: DEFAULT_AGENT_MEMORY_MIB,
    };
    let Some(raw) = raw else { return r };
    let raw = raw.get_ref();
    if let Some(c) = &raw.cpu {
        // Whole CPUs: the static CPU manager pins only integer requests of Guaranteed pods.
        if let Some(n) = u32_in(cx, c, "[resources].cpu (whole CPUs)", 1, 256) {
            r.cpu = n;
        }
    }
    if let Some(m) = &raw.memory {
        match parse_memory_mib(m.get_ref()) {
            Some(n) if (512..=1024 * 1024).contains(&n) => r.memory_mib = n,
            Some(n) => cx.at(
                m.span(),
                format!("[resources].memory {n} MiB is out of range 512Mi..=1024Gi"),
            ),
            None => cx.at(
                m.span(),
                format!(
                    "[resources].memory {:?} must be a whole number of Mi or Gi, e.g. \"4Gi\"",
                    m.get_ref()
                ),
            ),
        }
    }
    r
}

/// `[nodes]`: the node names the agents are pinned to, the node selector,
/// and the tolerations (by default: GPU nodes' `nvidia.com/gpu` taint).
pub(super) fn check_nodes(
    cx: &mut Diagnostics,
    raw: Option<&S<RawNodes>>,
) -> (Vec<String>, BTreeMap<String, String>, Vec<TolerationPlan>) {
    let mut node_names = Vec::new();
    let mut node_selector = BTreeMap::new();
    let mut tolerations = vec![TolerationPlan {
        key: Some(GPU_TAINT_KEY.into()),
        operator: "Exists".into(),
        value: None,
        effect: Some("NoSchedule".into()),
    }];
    if let Some(n) = raw {
        let n = n.get_ref();
        if let Some(names) = &n.names {
            for nm in names.get_ref() {
                if !is_dns_subdomain(nm.get_ref()) {
                    cx.at(
                        nm.span(),
                        format!(
                            "node name {:?} is not a valid Kubernetes node name",
                            nm.get_ref()
                        ),
                    );
                } else if node_names.contains(nm.get_ref()) {
                    cx.at(
                        nm.span(),
                        format!("node {:?} is listed twice", nm.get_ref()),
                    );
                } else {
                    node_names.push(nm.get_ref().clone());
                }
            }
            if names.get_ref().is_empty() {
                cx.at(
                    names.span(),
                    "nodes.names is empty; list node names or drop the key",
                );
            }
        }
        if let Some(sel) = &n.selector {
            for (k, v) in sel.get_ref() {
                if !is_label_key(k) || !is_label_value(v.get_ref()) {
                    cx.at(
                        v.span(),
                        format!(
                            "node selector {k:?} = {:?} is not a valid label key/value",
                            v.get_ref()
                        ),
                    );
                }
                node_selector.insert(k.clone(), v.get_ref().clone());
            }
        }
        if let Some(t) = &n.tolerations {
            tolerations = check_tolerations(cx, t.get_ref());
        }
    }
    (node_names, node_selector, tolerations)
}
