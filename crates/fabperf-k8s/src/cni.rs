//! Helm values for the primary CNI that pin the fast interface, choose the
//! encapsulation and set the MTU. Which MTU each chart wants differs:
//! - Antrea `defaultMTU` and Calico `calicoNetwork.mtu` are the pod MTU: the
//!   renderer subtracts the overhead (VXLAN/Geneve 50, IP-in-IP 20,
//!   WireGuard 60 on IPv4);
//! - Cilium `MTU` and flannel `flannel.mtu` (net-conf.json `Backend.MTU`,
//!   chart v0.27.4 templates/config.yaml) are the underlay MTU: the CNI
//!   subtracts its own overhead (VXLAN/Geneve 50, WireGuard 80).

use crate::plan::{CniKind, CniPlan, Encap};
use serde_json::{json, Value};

/// Escape a literal interface name for a regular expression (Calico's
/// `nodeAddressAutodetectionV4.interface` is a regex).
fn regex_literal(s: &str) -> String {
    let mut out = String::from("^");
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

/// Chart releases the values were checked against: flannel
/// chart/kube-flannel (templates/config.yaml), Antrea build/charts/antrea
/// (values.yaml; pkg/agent/agent.go uses an explicit defaultMTU as given),
/// Calico charts/tigera-operator (the Installation CRD's calicoNetwork, in
/// charts/crd.projectcalico.org.v1 since v3.32).
pub const FLANNEL_CHART_VERSION: &str = "v0.27.4";
pub const ANTREA_CHART_VERSION: &str = "v2.7.0";
pub const CALICO_CHART_VERSION: &str = "v3.32.1";

/// The values document and the header lines that explain it. `multus`: the
/// plan attaches secondary networks through Multus.
pub fn values(cni: CniKind, p: &CniPlan, multus: bool) -> (Value, Vec<String>) {
    let pod_mtu = p.pod_mtu(cni);
    let e = p.encapsulation;
    let mut notes = vec![format!(
        "underlay {} MTU {}, encapsulation {} ({} reserves {} B) -> pod MTU {pod_mtu}",
        p.interface,
        p.underlay_mtu,
        e.name(),
        cni.name(),
        e.overhead_for(cni)
    )];
    let v = match cni {
        CniKind::Antrea => {
            notes.push("helm repo add antrea https://charts.antrea.io".into());
            notes.push(format!(
                "helm install antrea antrea/antrea --version {ANTREA_CHART_VERSION} --namespace kube-system -f antrea-values.yaml"
            ));
            let (mode, tunnel, encryption) = match e {
                Encap::None => ("noEncap", None, "none"),
                Encap::Vxlan => ("encap", Some("vxlan"), "none"),
                Encap::Geneve => ("encap", Some("geneve"), "none"),
                // WireGuard acts as the tunnel; tunnelType is ignored then.
                Encap::Wireguard => ("encap", None, "wireGuard"),
                Encap::Ipip => unreachable!("rejected by plan validation"),
            };
            let mut v = json!({
                "transportInterface": p.interface,
                "trafficEncapMode": mode,
                "trafficEncryptionMode": encryption,
                "defaultMTU": pod_mtu,
            });
            if let Some(t) = tunnel {
                v["tunnelType"] = json!(t);
            }
            v
        }
        CniKind::Calico => {
            notes.push("helm repo add projectcalico https://docs.tigera.io/calico/charts".into());
            // Calico v3.32 ships its CRDs (operator.tigera.io Installation
            // included) in the crd.projectcalico.org.v1 chart, not in
            // tigera-operator (charts/*/README.md at v3.32.1); installed
            // server-side: some CRDs exceed the client-side apply limit.
            notes.push(format!("helm template calico-crds projectcalico/crd.projectcalico.org.v1 --version {CALICO_CHART_VERSION} | kubectl apply --server-side -f -"));
            notes.push(format!("helm install calico projectcalico/tigera-operator --version {CALICO_CHART_VERSION} --namespace tigera-operator --create-namespace -f calico-values.yaml"));
            notes.push("(Calico v3.32 moved the CRDs out of the tigera-operator chart: without the CRD chart the install fails with no matches for kind \"Installation\")".into());
            let encap = match e {
                Encap::None => "None",
                Encap::Vxlan => "VXLAN",
                Encap::Ipip => "IPIP",
                Encap::Geneve | Encap::Wireguard => unreachable!("rejected by plan validation"),
            };
            // IPIP and unencapsulated pools route with BGP; VXLAN needs none.
            let bgp = if e == Encap::Vxlan {
                "Disabled"
            } else {
                "Enabled"
            };
            json!({
                "installation": {
                    "enabled": true,
                    "calicoNetwork": {
                        "bgp": bgp,
                        "mtu": pod_mtu,
                        "nodeAddressAutodetectionV4": { "interface": regex_literal(&p.interface) },
                        "ipPools": [{
                            "name": "default-ipv4-ippool",
                            "cidr": p.pod_cidr.to_string(),
                            "blockSize": 26,
                            "encapsulation": encap,
                            "natOutgoing": "Enabled",
                            "nodeSelector": "all()",
                        }],
                    },
                },
            })
        }
        CniKind::Cilium => {
            notes.push(
                "Cilium's MTU value is the underlay MTU; Cilium itself subtracts the tunnel".into(),
            );
            notes.push(format!(
                "or WireGuard overhead for pod routes (here: {pod_mtu})"
            ));
            notes.push(format!(
                "Cilium tunnels between the nodes' InternalIPs (kubelet --node-ip), whatever `devices` says: those must be on {}.",
                p.interface
            ));
            if multus {
                notes.push("cni.exclusive: false keeps Multus' CNI config (exclusive mode renames it to *.cilium_bak and the secondary networks vanish).".into());
            }
            notes.push("helm repo add cilium https://helm.cilium.io".into());
            // Not pinned: the Cilium chart source was not available to check
            // against; the keys (routingMode/tunnelProtocol since 1.14,
            // cni.exclusive, devices, MTU) are those of current releases.
            notes.push(
                "helm install cilium cilium/cilium --version <release you validated> --namespace kube-system -f cilium-values.yaml"
                    .into(),
            );
            let mut v = json!({
                "devices": [p.interface],
                "MTU": p.underlay_mtu,
                "ipam": {"operator": {"clusterPoolIPv4PodCIDRList": [p.pod_cidr.to_string()]}},
            });
            if multus {
                v["cni"] = json!({"exclusive": false});
            }
            match e {
                Encap::Vxlan | Encap::Geneve => {
                    v["routingMode"] = json!("tunnel");
                    v["tunnelProtocol"] = json!(e.name());
                }
                Encap::None | Encap::Wireguard => {
                    v["routingMode"] = json!("native");
                    v["autoDirectNodeRoutes"] = json!(true);
                    v["ipv4NativeRoutingCIDR"] = json!(p.pod_cidr.to_string());
                    if e == Encap::Wireguard {
                        v["encryption"] = json!({"enabled": true, "type": "wireguard"});
                    }
                }
                Encap::Ipip => unreachable!("rejected by plan validation"),
            }
            v
        }
        CniKind::Flannel => {
            // flannel's README at v0.27.4: the namespace first, labelled for
            // the privileged Pod Security level (flannel runs privileged
            // with the host network).
            notes.push("kubectl create namespace kube-flannel".into());
            notes.push("kubectl label --overwrite namespace kube-flannel pod-security.kubernetes.io/enforce=privileged".into());
            notes.push("helm repo add flannel https://flannel-io.github.io/flannel/".into());
            notes.push(format!("helm install flannel flannel/flannel --version {FLANNEL_CHART_VERSION} --namespace kube-flannel -f flannel-values.yaml"));
            if e != Encap::None {
                notes.push("flannel.mtu is the underlay MTU: flannel subtracts its own overhead (vxlan 50, wireguard 80).".into());
            }
            let backend = match e {
                Encap::None => "host-gw",
                Encap::Vxlan => "vxlan",
                Encap::Wireguard => "wireguard",
                Encap::Geneve | Encap::Ipip => unreachable!("rejected by plan validation"),
            };
            let mut flannel = json!({
                "args": ["--ip-masq", "--kube-subnet-mgr", format!("--iface={}", p.interface)],
                "backend": backend,
            });
            // flannel.mtu (net-conf.json Backend.MTU) applies to the vxlan and
            // wireguard backends only and is the underlay MTU.
            if e != Encap::None {
                flannel["mtu"] = json!(p.underlay_mtu);
            }
            json!({ "podCidr": p.pod_cidr.to_string(), "flannel": flannel })
        }
    };
    (v, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(e: Encap) -> CniPlan {
        CniPlan {
            plugins: CniKind::ALL.to_vec(),
            interface: "ens1f0np0".into(),
            underlay_mtu: 9000,
            encapsulation: e,
            pod_cidr: "10.244.0.0/16".parse().unwrap(),
        }
    }

    #[test]
    fn mtu_is_underlay_minus_overhead() {
        let (a, _) = values(CniKind::Antrea, &plan(Encap::Geneve), false);
        assert_eq!(a["defaultMTU"], 8950);
        assert_eq!(a["tunnelType"], "geneve");
        assert_eq!(a["transportInterface"], "ens1f0np0");
        let (c, _) = values(CniKind::Calico, &plan(Encap::Ipip), false);
        assert_eq!(c["installation"]["calicoNetwork"]["mtu"], 8980);
        assert_eq!(
            c["installation"]["calicoNetwork"]["ipPools"][0]["encapsulation"],
            "IPIP"
        );
        assert_eq!(
            c["installation"]["calicoNetwork"]["nodeAddressAutodetectionV4"]["interface"],
            "^ens1f0np0$"
        );
        let (f, notes) = values(CniKind::Flannel, &plan(Encap::Wireguard), false);
        // flannel wants the underlay MTU and subtracts 80 itself.
        assert_eq!(f["flannel"]["mtu"], 9000);
        assert!(notes[0].contains("pod MTU 8920"), "{notes:?}");
        assert_eq!(f["flannel"]["backend"], "wireguard");
        let (f, _) = values(CniKind::Flannel, &plan(Encap::None), false);
        assert_eq!(f["flannel"]["backend"], "host-gw");
        assert!(f["flannel"].get("mtu").is_none());
        let (ci, notes) = values(CniKind::Cilium, &plan(Encap::Vxlan), false);
        assert_eq!(ci["MTU"], 9000);
        assert_eq!(ci["routingMode"], "tunnel");
        assert!(notes.iter().any(|n| n.contains("8950")));
        assert!(ci.get("cni").is_none());
        let (ci, _) = values(CniKind::Cilium, &plan(Encap::None), true);
        assert_eq!(ci["routingMode"], "native");
        assert_eq!(ci["ipv4NativeRoutingCIDR"], "10.244.0.0/16");
        // With Multus, Cilium must not take /etc/cni/net.d over.
        assert_eq!(ci["cni"]["exclusive"], false);
        let (_, notes) = values(CniKind::Cilium, &plan(Encap::Wireguard), true);
        assert!(
            notes[0].contains("reserves 80 B") && notes[0].contains("pod MTU 8920"),
            "{notes:?}"
        );
        let (a, _) = values(CniKind::Antrea, &plan(Encap::Wireguard), false);
        assert_eq!(a["defaultMTU"], 8940);
    }

    #[test]
    fn regex_escapes_dots() {
        assert_eq!(regex_literal("bond0.100"), "^bond0\\.100$");
    }
}
