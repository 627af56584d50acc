//! A test's `rails` and `cross_rails`: which of the nodes' rails it runs
//! on, and whether rail i meets rail j.

use super::*;

/// A test's `rails` and `cross_rails`, checked.
pub(super) fn rails_decl(
    cx: &mut Diagnostics,
    t: &RawTest,
    kind: Kind,
    pattern: &str,
    name: &str,
) -> Option<crate::rails::Rails> {
    use crate::rails::{RailSpec, Rails, MAX_RAILS};
    let Some(r) = &t.rails else {
        if let Some(c) = &t.cross_rails {
            cx.at(c.span(), "`cross_rails` needs `rails`");
        }
        return None;
    };
    let sp = r.span();
    let spec = match r.get_ref() {
        toml::Value::String(s) if s == "rdma" => RailSpec::Rdma,
        toml::Value::Array(a) => {
            let mut names: Vec<String> = Vec::new();
            for v in a {
                match v.as_str() {
                    Some(n) if is_name(n) && n.len() <= 64 => {
                        if names.iter().any(|m| m == n) {
                            cx.at(sp.clone(), format!("rails: {n:?} is listed twice; each rail is one device or interface"));
                        }
                        names.push(n.to_string());
                    }
                    _ => cx.at(sp.clone(), format!("rails: {v} is not a device or interface name (letters, digits, '-', '_', '.')")),
                }
            }
            if names.is_empty() {
                cx.at(sp.clone(), "`rails` is empty");
            }
            if names.len() > MAX_RAILS {
                cx.at(
                    sp.clone(),
                    format!("rails: {} rails, at most {MAX_RAILS}", names.len()),
                );
            }
            RailSpec::Named(names)
        }
        other => {
            cx.at(
                sp.clone(),
                format!("rails = {other}: give \"rdma\" (every RDMA device with an address) or a list of RDMA devices or interfaces, rail 0 first (e.g. [\"mlx5_0\", \"mlx5_1\"])"),
            );
            return None;
        }
    };
    if !crate::rails::kind_ok(kind) {
        cx.at(sp.clone(), format!("test {name:?}: {} cannot run on rails (several tests at once on one agent): use tcp-bw, tcp-lat, rdma-bw or rdma-lat", kind.name()));
    }
    if pattern != "mesh" && pattern != "pairs" {
        cx.at(sp.clone(), format!("test {name:?}: rails take the patterns \"mesh\" and \"pairs\" (rail i of one node with rail i of the other), not {pattern:?}"));
    }
    if t.profiles.is_some() || t.policies.is_some() {
        cx.at(sp.clone(), format!("test {name:?}: rails run a node's rails at once, and `profiles`/`policies` apply per cell: give them to a test without rails"));
    }
    if let Some(p) = &t.params {
        for k in ["device", "ib_port", "remote_device", "remote_ib_port"] {
            if p.get_ref().contains_key(k) {
                cx.at(p.span(), format!("test {name:?}: with rails the runner names each end's RDMA device and port for its rail; remove `{k}` from params"));
            }
        }
    }
    let cross = t.cross_rails.as_ref().is_some_and(|c| *c.get_ref());
    if cross && !kind.is_rdma() {
        if let Some(c) = &t.cross_rails {
            cx.at(c.span(), format!("test {name:?}: cross_rails needs an RDMA kind: a socket test to another rail's address leaves by the interface the routing table picks (that rail's own), so it would not cross; RDMA names each end's NIC"));
        }
    }
    Some(Rails { spec, cross })
}
