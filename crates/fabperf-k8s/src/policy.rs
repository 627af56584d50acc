//! Policy scale (the KubeCon study measured 0–200 NetworkPolicies): N
//! NetworkPolicies that select the agents, and the Role/RoleBinding that
//! let an in-cluster runner create and delete them in its namespace only.
//!
//! ```toml
//! [policy_scale]
//! count = 200                                 # NetworkPolicies rendered into 30-policy-scale.yaml
//! rbac = true                                 # 31-policy-scale-rbac.yaml (off by default)
//! runner_service_account = "fabperf-runner"   # who the RoleBinding names
//! ```
//!
//! Every policy selects the agent pods (label `fabperf.io/path` present)
//! for ingress. Policies 1..N-1 each admit one peer that never exists (a
//! /32 in 198.19.0.0/16, RFC 2544's benchmark range) on the agent port; the
//! N-th admits every pod of the namespace (the agents and a runner Job), so
//! the tests pass and the CNI's policy engine holds N policies for them, as
//! fabperf-tune's nftables model holds N rules. Host-network agents are not
//! subject to NetworkPolicy in the common CNIs.

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::Spanned;

/// Label on every rendered policy (what a runner's command deletes by).
pub const SCALE_LABEL: &str = "fabperf.io/policy-scale";
/// Most policies rendered.
pub const MAX_POLICIES: u32 = 10_000;
/// Default ServiceAccount of the in-cluster runner.
pub const DEFAULT_RUNNER_SA: &str = "fabperf-runner";

/// `[policy_scale]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicyScale {
    count: Option<Spanned<i64>>,
    rbac: Option<bool>,
    runner_service_account: Option<Spanned<String>>,
}

/// `[policy_scale]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyScale {
    pub count: u32,
    pub rbac: bool,
    pub runner_service_account: String,
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Check `[policy_scale]`; problems go to `err` with their location.
pub fn check(
    raw: Option<&Spanned<RawPolicyScale>>,
    err: &mut dyn FnMut(Range<usize>, String),
) -> Option<PolicyScale> {
    let raw = raw?;
    let r = raw.get_ref();
    let count = match &r.count {
        None => 0,
        Some(c) if (0..=MAX_POLICIES as i64).contains(c.get_ref()) => *c.get_ref() as u32,
        Some(c) => {
            err(
                c.span(),
                format!(
                    "[policy_scale] count {} is out of range 0..={MAX_POLICIES}",
                    c.get_ref()
                ),
            );
            0
        }
    };
    let sa = match &r.runner_service_account {
        None => DEFAULT_RUNNER_SA.to_string(),
        Some(s) if dns_label(s.get_ref()) => s.get_ref().clone(),
        Some(s) => {
            err(
                s.span(),
                format!(
                    "[policy_scale] runner_service_account {:?} is not a ServiceAccount name (lower-case letters, digits, '-', at most 63)",
                    s.get_ref()
                ),
            );
            DEFAULT_RUNNER_SA.to_string()
        }
    };
    if count == 0 && r.rbac != Some(true) {
        err(
            raw.span(),
            "[policy_scale] renders nothing: give count = N (policies) and/or rbac = true".into(),
        );
    }
    Some(PolicyScale {
        count,
        rbac: r.rbac.unwrap_or(false),
        runner_service_account: sa,
    })
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/part-of".into(), "fabperf".into()),
        ("app.kubernetes.io/managed-by".into(), "fabperf".into()),
        (SCALE_LABEL.into(), "true".into()),
    ])
}

/// The N NetworkPolicies.
pub fn network_policies(namespace: &str, control_port: u16, count: u32) -> Vec<NetworkPolicy> {
    let agents = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: crate::objects::PATH_LABEL.into(),
            operator: "Exists".into(),
            values: None,
        }]),
        match_labels: None,
    };
    (1..=count.min(MAX_POLICIES))
        .map(|i| {
            let rule = if i < count {
                NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: format!("198.19.{}.{}/32", i >> 8, i & 0xff),
                            except: None,
                        }),
                        ..Default::default()
                    }]),
                    ports: Some(
                        ["TCP", "UDP"]
                            .iter()
                            .map(|p| NetworkPolicyPort {
                                port: Some(IntOrString::Int(control_port as i32)),
                                protocol: Some((*p).into()),
                                end_port: None,
                            })
                            .collect(),
                    ),
                }
            } else {
                // The last one admits the namespace's pods: the peers under test.
                NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        pod_selector: Some(LabelSelector::default()),
                        ..Default::default()
                    }]),
                    ports: None,
                }
            };
            NetworkPolicy {
                metadata: ObjectMeta {
                    name: Some(format!("fabperf-scale-{i:05}")),
                    namespace: Some(namespace.to_string()),
                    labels: Some(labels()),
                    ..Default::default()
                },
                spec: Some(NetworkPolicySpec {
                    pod_selector: Some(agents.clone()),
                    policy_types: Some(vec!["Ingress".into()]),
                    ingress: Some(vec![rule]),
                    egress: None,
                }),
            }
        })
        .collect()
}

/// The Role and RoleBinding that let the runner's ServiceAccount manage
/// NetworkPolicies in this namespace only.
pub fn rbac(namespace: &str, runner_sa: &str) -> (Role, RoleBinding) {
    let name = "fabperf-policy-scale";
    let meta = || ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels()),
        ..Default::default()
    };
    let role = Role {
        metadata: meta(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["networking.k8s.io".into()]),
            resources: Some(vec!["networkpolicies".into()]),
            verbs: [
                "get",
                "list",
                "watch",
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: runner_sa.to_string(),
            namespace: Some(namespace.to_string()),
            api_group: None,
        }]),
    };
    (role, binding)
}

/// The render hook: `30-policy-scale.yaml` (the policies) and, with
/// `rbac = true`, `31-policy-scale-rbac.yaml`.
pub fn render_files(
    plan: &crate::plan::Plan,
    ps: &PolicyScale,
    out: &mut Vec<crate::render::RenderedFile>,
) -> anyhow::Result<()> {
    use crate::render::{header_lines, Doc};
    if ps.count > 0 {
        let mut d = Doc::new(&header_lines(
            plan,
            &[
                format!(
                    "Policy scale: {} NetworkPolicies selecting the agents (label {SCALE_LABEL}=true).",
                    ps.count
                ),
                "Policies 1..N-1 each admit one absent peer (198.19.0.0/16) on the agent port; the last admits".into(),
                "the namespace's pods. The in-cluster runner holds each count per cell itself (`fabperf k8s policy-scale --apply`, docs/k8s.md).".into(),
            ],
        ));
        for p in network_policies(&plan.namespace, plan.control_port, ps.count) {
            d.push(&p)?;
        }
        out.push(d.file("30-policy-scale.yaml"));
    }
    if ps.rbac {
        let mut d = Doc::new(&header_lines(
            plan,
            &[format!(
                "RBAC for an in-cluster runner (ServiceAccount {}) to manage NetworkPolicies in {} only.",
                ps.runner_service_account, plan.namespace
            )],
        ));
        let (role, binding) = rbac(&plan.namespace, &ps.runner_service_account);
        d.push(&role)?;
        d.push(&binding)?;
        out.push(d.file("31-policy-scale-rbac.yaml"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_policies_select_the_agents_and_the_last_admits_the_namespace() {
        let v = network_policies("fabperf", 5301, 3);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].metadata.name.as_deref(), Some("fabperf-scale-00001"));
        let s0 = v[0].spec.as_ref().unwrap();
        let from = &s0.ingress.as_ref().unwrap()[0].from.as_ref().unwrap()[0];
        assert_eq!(from.ip_block.as_ref().unwrap().cidr, "198.19.0.1/32");
        let last = &v[2].spec.as_ref().unwrap().ingress.as_ref().unwrap()[0];
        assert!(last.ports.is_none());
        assert_eq!(
            last.from.as_ref().unwrap()[0].pod_selector,
            Some(LabelSelector::default())
        );
        assert!(network_policies("fabperf", 5301, 0).is_empty());
        assert_eq!(
            network_policies("x", 1, 300)[299].metadata.name.as_deref(),
            Some("fabperf-scale-00300")
        );
    }

    #[test]
    fn bad_sections_are_errors() {
        let parse = |t: &str| -> (Option<PolicyScale>, Vec<String>) {
            #[derive(Deserialize)]
            struct W {
                policy_scale: Option<Spanned<RawPolicyScale>>,
            }
            let w: W = toml::from_str(t).unwrap();
            let mut errs = Vec::new();
            let p = check(w.policy_scale.as_ref(), &mut |_, m| errs.push(m));
            (p, errs)
        };
        let (p, e) = parse("[policy_scale]\ncount = 200\nrbac = true\n");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(p.unwrap().runner_service_account, DEFAULT_RUNNER_SA);
        let (_, e) = parse("[policy_scale]\ncount = -1\n");
        assert!(e[0].contains("out of range"), "{e:?}");
        let (_, e) = parse("[policy_scale]\ncount = 5\nrunner_service_account = \"Runner!\"\n");
        assert!(e[0].contains("not a ServiceAccount name"), "{e:?}");
        let (_, e) = parse("[policy_scale]\n");
        assert!(e[0].contains("renders nothing"), "{e:?}");
        assert!(toml::from_str::<RawPolicyScale>("cuont = 3").is_err());
    }
}
