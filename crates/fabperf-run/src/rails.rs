//! Rails: the RDMA devices (or fabric interfaces) of every node, paired rail
//! *i* with rail *i* across nodes, all rails of a round at the same time.
//!
//! One agent per node serves all of its rails (docs/run.md, "Rails"): its
//! hello lists the node's links ([`HelloLink`]: each RDMA port with the
//! interface and address that carry it, and every other interface with an
//! address), the plan's `rails` says which of them are the rails, and the
//! runner resolves that per node. A rail cell is one flow (sender, receiver)
//! on one rail (`dims.rail`, and `dims.rail_to` for a cross-rail cell); the
//! cells of a mesh round × rail shift form one batch that starts at one
//! instant, its tests in one group so an agent serves its rails at once.
//! A rail flow goes to the receiver's address on that rail; RDMA flows also
//! name both ends' devices, so each end uses its rail's NIC whatever its
//! routing table says.

use crate::cells::RosterAgent;
use crate::plan::{Kind, TestDecl};
use fabperf_store::CellSpec;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};

/// Most rails a test may have.
pub const MAX_RAILS: usize = 32;
/// Most links read from one agent's hello.
pub const MAX_LINKS: usize = 256;

/// One link of a node, as its agent announces it (`inventory.links` in the
/// hello): an RDMA port with the interface that carries it, or an
/// interface with an address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HelloLink {
    /// The network interface (absent: an RDMA port without one here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iface: Option<String>,
    /// Its address (the first IPv4, else the first global IPv6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_port: Option<u8>,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    /// Port state (`ACTIVE`, `DOWN`, ...), for RDMA ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_rate_gbps: Option<f64>,
    /// The rail the agent's `--rails` rule numbered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<u32>,
    /// It carries the node address (the default route's interface).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_ip: bool,
}

impl HelloLink {
    /// `fab1 (10.100.1.11)`, `mlx5_1 port 1 on enp1s0np0 (10.100.1.11)`.
    pub fn describe(&self) -> String {
        let mut s = match (&self.rdma_device, &self.iface) {
            (Some(d), Some(i)) => format!("{d} port {} on {i}", self.rdma_port.unwrap_or(1)),
            (Some(d), None) => format!("{d} port {}", self.rdma_port.unwrap_or(1)),
            (None, Some(i)) => i.clone(),
            (None, None) => "?".into(),
        };
        if let Some(a) = self.addr {
            s.push_str(&format!(" ({a})"));
        }
        s
    }

    fn names(&self, n: &str) -> bool {
        self.rdma_device.as_deref() == Some(n) || self.iface.as_deref() == Some(n)
    }

    /// A link from an agent's hello passes only with names a device or an
    /// interface can have (the hello comes from the network).
    fn sane(&self) -> bool {
        let name_ok = |s: &Option<String>| {
            s.as_ref().is_none_or(|n| {
                !n.is_empty()
                    && n.len() <= 64
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.@:".contains(&b))
            })
        };
        name_ok(&self.iface)
            && name_ok(&self.rdma_device)
            && (self.iface.is_some() || self.rdma_device.is_some())
            && self.rail.is_none_or(|r| (r as usize) < MAX_RAILS)
    }
}

/// Which links are a node's rails (a test's `rails`).
#[derive(Debug, Clone, PartialEq)]
pub enum RailSpec {
    /// Every RDMA device with an address (`rails = "rdma"`): numbered by
    /// the agents' `--rails` rule when they have one, else in name order,
    /// leaving out the node address's interface (the frontend) when there
    /// are others.
    Rdma,
    /// Rail *i* is the *i*-th name: an RDMA device or an interface, the same
    /// on every node (`rails = ["mlx5_0", "mlx5_1"]`, `["net1", "net2"]`).
    Named(Vec<String>),
}

/// A test's rails.
#[derive(Debug, Clone, PartialEq)]
pub struct Rails {
    pub spec: RailSpec,
    /// Also every rail *i* → rail *j ≠ i* (`cross_rails = true`).
    pub cross: bool,
}

/// The kinds that can run on rails: several at once on one agent, each on
/// its own link (UDP tests bind the agent's one UDP port; HTTP load and
/// MTU probing are not per rail).
pub fn kind_ok(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::TcpBw | Kind::TcpLat | Kind::RdmaBw | Kind::RdmaLat
    )
}

/// The links an agent's hello announces (malformed entries left out).
pub fn hello_links(hello: &Value) -> Vec<HelloLink> {
    let Some(list) = hello
        .pointer("/agent/inventory/links")
        .or_else(|| hello.pointer("/inventory/links"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .take(MAX_LINKS)
        .filter_map(|v| serde_json::from_value::<HelloLink>(v.clone()).ok())
        .filter(HelloLink::sane)
        .collect()
}

/// Natural order of device names: `mlx5_2` before `mlx5_10`.
fn natural(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
        } else {
            if !num.is_empty() {
                out.push((std::mem::take(&mut text), num.parse().unwrap_or(u64::MAX)));
                num.clear();
            }
            text.push(c);
        }
    }
    out.push((text, num.parse().unwrap_or(0)));
    out
}

/// A node's rails by `spec`: entry *i* is rail *i* (`None`: the node has no
/// such rail).
pub fn resolve(spec: &RailSpec, links: &[HelloLink]) -> Vec<Option<HelloLink>> {
    match spec {
        RailSpec::Named(names) => names
            .iter()
            .map(|n| {
                let mut found: Vec<&HelloLink> = links.iter().filter(|l| l.names(n)).collect();
                // A device with several ports: the one with an address, then
                // an ACTIVE one, then the lowest.
                found.sort_by_key(|l| {
                    (
                        l.addr.is_none(),
                        l.state.as_deref().is_some_and(|s| !s.contains("ACTIVE")),
                        l.rdma_port,
                    )
                });
                found.first().map(|l| (*l).clone())
            })
            .collect(),
        RailSpec::Rdma => {
            let rdma: Vec<&HelloLink> = links
                .iter()
                .filter(|l| l.rdma_device.is_some() && l.addr.is_some())
                .collect();
            if rdma.iter().any(|l| l.rail.is_some()) {
                let n = rdma
                    .iter()
                    .filter_map(|l| l.rail)
                    .max()
                    .map_or(0, |m| m as usize + 1);
                let mut out = vec![None; n];
                for l in rdma {
                    if let Some(r) = l.rail {
                        out[r as usize].get_or_insert_with(|| l.clone());
                    }
                }
                return out;
            }
            let mut picked: Vec<&HelloLink> = if rdma.iter().any(|l| !l.node_ip) {
                rdma.into_iter().filter(|l| !l.node_ip).collect()
            } else {
                rdma
            };
            picked.sort_by_key(|l| (natural(l.rdma_device.as_deref().unwrap_or("")), l.rdma_port));
            picked
                .into_iter()
                .take(MAX_RAILS)
                .map(|l| Some(l.clone()))
                .collect()
        }
    }
}

/// How many rails a test has with these agents: the names given, or the
/// most any agent has.
pub fn rail_count(rails: &Rails, agents: &[&RosterAgent]) -> usize {
    match &rails.spec {
        RailSpec::Named(n) => n.len(),
        RailSpec::Rdma => agents
            .iter()
            .map(|a| resolve(&rails.spec, &hello_links(&a.hello)).len())
            .max()
            .unwrap_or(0),
    }
    .min(MAX_RAILS)
}

/// The rail shifts a test runs: 0 (rail *i* → rail *i*), and with
/// `cross_rails` every other shift *k* (rail *i* → rail *(i + k) mod R*):
/// each shift uses every NIC once as a sender and once as a receiver, so
/// its flows run at the same time.
pub fn shifts(rails: &Rails, count: usize) -> Vec<usize> {
    if rails.cross {
        (0..count).collect()
    } else {
        vec![0]
    }
}

/// The pattern instance of the flow on rail `i` with shift `k` of `r`
/// rails: the pair's instance with `rail` (and `rail_to` when it crosses).
pub fn instance(mut pair: Value, i: usize, k: usize, r: usize) -> Value {
    pair["rail"] = json!(i);
    if k != 0 {
        pair["rail_to"] = json!((i + k) % r);
    }
    pair
}

/// A cell's dimensions: the sweep point's, and its rails from its instance.
pub fn cell_dims(dims: &serde_json::Map<String, Value>, instance: &Value) -> Value {
    let mut d = dims.clone();
    for k in ["rail", "rail_to"] {
        if let Some(v) = instance.get(k) {
            d.insert(k.into(), v.clone());
        }
    }
    Value::Object(d)
}

/// Carry a cell's rails into a derived instance (a re-test's).
pub fn tag_instance(instance: &mut Value, dims: &Value) {
    for k in ["rail", "rail_to"] {
        if let Some(v) = dims.get(k) {
            instance[k] = v.clone();
        }
    }
}

/// A cell's (sender rail, receiver rail), when it is a rail cell.
pub fn cell_rails(c: &CellSpec) -> Option<(u32, u32)> {
    let from = c.dims.get("rail")?.as_u64()? as u32;
    let to = match c.dims.get("rail_to") {
        Some(v) => v.as_u64()? as u32,
        None => from,
    };
    Some((from, to))
}

/// The test group of a batch with rail cells: its agents serve their rails
/// at once (a node sends or receives on every rail of a round). A hash of
/// the batch's cells, so a retried subset gets its own.
pub fn batch_group(cells: &[CellSpec]) -> Option<String> {
    if !cells.iter().any(|c| cell_rails(c).is_some()) {
        return None;
    }
    let mut ids: Vec<&str> = cells.iter().map(|c| c.cell_id.as_str()).collect();
    ids.sort_unstable();
    let h = Sha256::digest(format!("rails {}", ids.join(" ")).as_bytes());
    Some(crate::hex(&h[..12]))
}

/// Where a rail cell's flow goes and what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The receiver's address on its rail (its agent's port), or its agent's
    /// address for an RDMA rail without an address.
    pub target: SocketAddr,
    /// The engine parameters with both ends' RDMA devices named.
    pub params: Value,
}

fn rail_name(t: &TestDecl, i: u32) -> String {
    match t.rails.as_ref().map(|r| &r.spec) {
        Some(RailSpec::Named(n)) => n
            .get(i as usize)
            .map(|n| format!("rail {i} ({n})"))
            .unwrap_or_else(|| format!("rail {i}")),
        _ => format!("rail {i}"),
    }
}

/// The route of a rail cell from agent `s` to agent `d`: `None` for a cell
/// without rails, an error (that cannot pass on a retry) when a node lacks
/// the rail.
pub fn route(
    t: &TestDecl,
    c: &CellSpec,
    s: &RosterAgent,
    d: &RosterAgent,
) -> Option<Result<Route, String>> {
    let (from, to) = cell_rails(c)?;
    let rails = t.rails.as_ref()?;
    let pick = |a: &RosterAgent, i: u32| -> Result<HelloLink, String> {
        let links = hello_links(&a.hello);
        resolve(&rails.spec, &links)
            .get(i as usize)
            .cloned()
            .flatten()
            .ok_or_else(|| {
                let have: Vec<String> = links.iter().map(HelloLink::describe).collect();
                format!(
                    "node {} has no {}: its agent announces {}",
                    a.name,
                    rail_name(t, i),
                    if have.is_empty() {
                        "no links (an agent older than rails, or detect failed there)".into()
                    } else {
                        have.join(", ")
                    }
                )
            })
    };
    Some((|| {
        let sl = pick(s, from)?;
        let dl = pick(d, to)?;
        let target = match dl.addr {
            Some(a) => SocketAddr::new(a, d.test_addr.port()),
            None if t.kind.is_rdma() && dl.rdma_device.is_some() => d.test_addr,
            None => {
                return Err(format!(
                    "node {}'s {} ({}) has no address to test it on",
                    d.name,
                    rail_name(t, to),
                    dl.describe()
                ))
            }
        };
        let mut params = c.params.clone();
        if t.kind.is_rdma() {
            if let Some(o) = params.as_object_mut() {
                if let Some(dev) = &sl.rdma_device {
                    o.insert("device".into(), json!(dev));
                    if let Some(p) = sl.rdma_port {
                        o.insert("ib_port".into(), json!(p));
                    }
                }
                if let Some(dev) = &dl.rdma_device {
                    o.insert("remote_device".into(), json!(dev));
                    if let Some(p) = dl.rdma_port {
                        o.insert("remote_ib_port".into(), json!(p));
                    }
                }
            }
        }
        Ok(Route { target, params })
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(iface: &str, addr: &str, dev: Option<&str>) -> HelloLink {
        HelloLink {
            iface: Some(iface.into()),
            addr: Some(addr.parse().unwrap()),
            rdma_device: dev.map(str::to_string),
            rdma_port: dev.map(|_| 1),
            ..Default::default()
        }
    }

    #[test]
    fn rails_by_name_and_by_rdma_device() {
        let links = vec![
            HelloLink {
                node_ip: true,
                ..link("ens21f0np0", "192.168.1.11", Some("mlx5_8"))
            },
            link("enp2s0np0", "10.100.2.11", Some("mlx5_2")),
            link("enp10s0np0", "10.100.10.11", Some("mlx5_10")),
            link("enp1s0np0", "10.100.1.11", Some("mlx5_1")),
            link("eth0", "10.0.0.11", None),
            // An RDMA device without an address here (another namespace's).
            HelloLink {
                rdma_device: Some("mlx5_9".into()),
                rdma_port: Some(1),
                ..Default::default()
            },
        ];
        // "rdma": devices with an address, natural order, not the frontend.
        let r = resolve(&RailSpec::Rdma, &links);
        let devs: Vec<&str> = r
            .iter()
            .map(|l| l.as_ref().unwrap().rdma_device.as_deref().unwrap())
            .collect();
        assert_eq!(devs, ["mlx5_1", "mlx5_2", "mlx5_10"]);
        // The frontend alone is a rail when it is the only one.
        let r = resolve(&RailSpec::Rdma, &links[..1]);
        assert_eq!(r.len(), 1);
        // Rails numbered by the agent's rule win, holes stay holes.
        let mut numbered = links.clone();
        numbered[1].rail = Some(2);
        numbered[3].rail = Some(0);
        let r = resolve(&RailSpec::Rdma, &numbered);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[0].as_ref().unwrap().rdma_device.as_deref(),
            Some("mlx5_1")
        );
        assert!(r[1].is_none());
        assert_eq!(
            r[2].as_ref().unwrap().rdma_device.as_deref(),
            Some("mlx5_2")
        );
        // By name: a device or an interface; a missing one is a hole.
        let r = resolve(
            &RailSpec::Named(vec!["mlx5_2".into(), "eth0".into(), "fab7".into()]),
            &links,
        );
        assert_eq!(r[0].as_ref().unwrap().iface.as_deref(), Some("enp2s0np0"));
        assert_eq!(
            r[1].as_ref().unwrap().addr,
            Some("10.0.0.11".parse().unwrap())
        );
        assert!(r[2].is_none());
    }

    #[test]
    fn hostile_hello_links_are_left_out() {
        let hello = json!({"agent": {"inventory": {"links": [
            {"iface": "fab0", "addr": "10.0.0.1"},
            {"iface": "a\u{1b}[2Jb", "addr": "10.0.0.2"},
            {"iface": "x".repeat(65), "addr": "10.0.0.3"},
            {"addr": "10.0.0.4"},
            {"iface": "fab1", "addr": "not an address"},
            {"iface": "fab2", "rail": 4_000_000_000u64},
            {"iface": "fab3", "rail": 1_000_000},
            "garbage",
            {"iface": "fab4", "rdma_port": 300},
        ]}}});
        let l = hello_links(&hello);
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0].iface.as_deref(), Some("fab0"));
        assert!(hello_links(&json!({"agent": {"inventory": {"links": 5}}})).is_empty());
        assert!(hello_links(&json!(null)).is_empty());
        let many: Vec<Value> = (0..1000)
            .map(|i| json!({"iface": format!("e{i}")}))
            .collect();
        assert_eq!(
            hello_links(&json!({"agent": {"inventory": {"links": many}}})).len(),
            MAX_LINKS
        );
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1", "ib0", "mlx4_0"];
        v.sort_by_key(|s| natural(s));
        assert_eq!(v, ["ib0", "mlx4_0", "mlx5_1", "mlx5_2", "mlx5_10"]);
    }

    #[test]
    fn shifts_pair_every_nic_once() {
        let same = Rails {
            spec: RailSpec::Rdma,
            cross: false,
        };
        assert_eq!(shifts(&same, 4), [0]);
        let cross = Rails {
            spec: RailSpec::Rdma,
            cross: true,
        };
        assert_eq!(shifts(&cross, 4), [0, 1, 2, 3]);
        for k in 0..4 {
            let to: std::collections::BTreeSet<u64> = (0..4)
                .map(|i| instance(json!({}), i, k, 4))
                .map(|v| {
                    v.get("rail_to")
                        .or(v.get("rail"))
                        .unwrap()
                        .as_u64()
                        .unwrap()
                })
                .collect();
            assert_eq!(to.len(), 4, "shift {k} reaches every receiving NIC once");
        }
        assert!(instance(json!({"pair": ["a", "b"]}), 2, 0, 4)
            .get("rail_to")
            .is_none());
    }
}
