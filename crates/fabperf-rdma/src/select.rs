//! Device, port and GID selection rules (pure functions over a snapshot of
//! the device list, so they are testable without hardware).

use crate::error::RdmaUnavailable;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv6Addr};

/// GID type as the kernel names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GidKind {
    #[serde(rename = "IB")]
    Ib,
    #[serde(rename = "RoCE v1")]
    RoceV1,
    #[serde(rename = "RoCE v2")]
    RoceV2,
}

impl GidKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GidKind::Ib => "IB",
            GidKind::RoceV1 => "RoCE v1",
            GidKind::RoceV2 => "RoCE v2",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
}

impl LinkLayer {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

/// One valid (non-empty) GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Ipv6Addr,
    pub kind: GidKind,
}

impl GidEntry {
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        self.gid.to_ipv4_mapped()
    }
    pub fn is_link_local(&self) -> bool {
        (self.gid.segments()[0] & 0xffc0) == 0xfe80
    }
    /// Does this GID carry `ip`?
    pub fn matches_ip(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => self.ipv4() == Some(v4),
            IpAddr::V6(v6) => {
                self.gid == v6 || v6.to_ipv4_mapped().is_some_and(|m| self.ipv4() == Some(m))
            }
        }
    }
    pub fn describe(&self) -> String {
        format!("{} ({}, {})", self.index, self.gid, self.kind.as_str())
    }
}

/// Port snapshot.
#[derive(Debug, Clone)]
pub struct PortSnap {
    pub port: u8,
    pub active: bool,
    /// e.g. "ACTIVE", "DOWN", "INIT".
    pub state: String,
    pub link_layer: LinkLayer,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    pub lid: u16,
    /// Valid GID entries only (tables can be sparse).
    pub gids: Vec<GidEntry>,
}

/// Device snapshot.
#[derive(Debug, Clone)]
pub struct DevSnap {
    pub name: String,
    pub ports: Vec<PortSnap>,
}

/// Which device/port to use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortChoice {
    pub dev: usize,
    pub port: usize,
    /// Set when the choice was automatic among several ACTIVE ports.
    pub note: Option<String>,
}

/// Pick the device and port.
///
/// Explicit `device`/`port` must exist and be ACTIVE. Otherwise: the first
/// ACTIVE port, preferring one with a GID that carries `prefer_ip` (the
/// address this host uses to reach the peer), so on a multi-NIC node the
/// NIC on the tested path wins.
pub fn pick_port(
    devs: &[DevSnap],
    device: Option<&str>,
    port: Option<u8>,
    prefer_ip: Option<IpAddr>,
) -> Result<PortChoice, RdmaUnavailable> {
    if devs.is_empty() {
        return Err(RdmaUnavailable::NoDevice);
    }
    let candidates: Vec<usize> = match device {
        Some(name) => match devs.iter().position(|d| d.name == name) {
            Some(i) => vec![i],
            None => {
                return Err(RdmaUnavailable::DeviceNotFound {
                    name: name.to_string(),
                    available: devs.iter().map(|d| d.name.clone()).collect(),
                })
            }
        },
        None => (0..devs.len()).collect(),
    };
    if let Some(p) = port {
        // An explicit port: on one device it must be ACTIVE; without a
        // device, take the first device whose port p is ACTIVE.
        let mut last_state = None;
        for &d in &candidates {
            match devs[d].ports.iter().position(|ps| ps.port == p) {
                Some(pi) if devs[d].ports[pi].active => {
                    return Ok(PortChoice {
                        dev: d,
                        port: pi,
                        note: None,
                    })
                }
                Some(pi) => last_state = Some((d, devs[d].ports[pi].state.clone())),
                None if device.is_some() => {
                    return Err(RdmaUnavailable::NoSuchPort {
                        device: devs[d].name.clone(),
                        port: p,
                        ports: devs[d].ports.len() as u8,
                    })
                }
                None => {}
            }
        }
        return Err(match last_state {
            Some((d, state)) if device.is_some() => RdmaUnavailable::PortNotActive {
                device: devs[d].name.clone(),
                port: p,
                state,
            },
            _ => RdmaUnavailable::NoActivePort(port_states(devs, &candidates)),
        });
    }
    let active: Vec<(usize, usize)> = candidates
        .iter()
        .flat_map(|&d| {
            devs[d]
                .ports
                .iter()
                .enumerate()
                .filter(|(_, p)| p.active)
                .map(move |(pi, _)| (d, pi))
        })
        .collect();
    if active.is_empty() {
        if let (Some(_), [d]) = (device, candidates.as_slice()) {
            if let [p] = devs[*d].ports.as_slice() {
                return Err(RdmaUnavailable::PortNotActive {
                    device: devs[*d].name.clone(),
                    port: p.port,
                    state: p.state.clone(),
                });
            }
        }
        return Err(RdmaUnavailable::NoActivePort(port_states(
            devs,
            &candidates,
        )));
    }
    let preferred = prefer_ip.and_then(|ip| {
        active
            .iter()
            .copied()
            .find(|&(d, p)| devs[d].ports[p].gids.iter().any(|g| g.matches_ip(ip)))
    });
    let (d, p) = preferred.unwrap_or(active[0]);
    let note = (active.len() > 1).then(|| {
        let why = if preferred.is_some() {
            format!("it carries {} ", prefer_ip.map(|i| i.to_string()).unwrap_or_default())
        } else {
            "first ACTIVE port ".to_string()
        };
        format!(
            "{} ACTIVE RDMA ports here; using {} port {} ({}; pick another with --device/--ib-port)",
            active.len(),
            devs[d].name,
            devs[d].ports[p].port,
            why.trim_end()
        )
    });
    Ok(PortChoice {
        dev: d,
        port: p,
        note,
    })
}

fn port_states(devs: &[DevSnap], which: &[usize]) -> Vec<String> {
    which
        .iter()
        .flat_map(|&d| {
            devs[d]
                .ports
                .iter()
                .map(move |p| format!("{} port {}: {}", devs[d].name, p.port, p.state))
        })
        .collect()
}

/// The addressing a port will use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressing {
    /// GID used in the GRH (RoCE) or reported for information (IB).
    pub gid: Option<GidEntry>,
    /// RoCE: true (GRH with the GID). InfiniBand: false (LID routing).
    pub use_grh: bool,
}

/// Pick the GID on a port.
///
/// `--gid-index` wins and must name a valid entry. On InfiniBand the LID is
/// used and no GRH is sent. On RoCE the rule is: the GID carrying
/// `prefer_ip` (the address on the tested path), then the peer's GID type,
/// then RoCE v2 over v1, IPv4-mapped over IPv6, global over link-local,
/// lowest index last. Only entries present in the (possibly sparse) table
/// are considered, so a pod whose table starts at index 5 works.
pub fn pick_gid(
    device: &str,
    port: &PortSnap,
    gid_index: Option<u32>,
    prefer_ip: Option<IpAddr>,
    peer_kind: Option<GidKind>,
) -> Result<Addressing, RdmaUnavailable> {
    let valid = || {
        if port.gids.is_empty() {
            "none".to_string()
        } else {
            port.gids
                .iter()
                .map(|g| g.describe())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    if let Some(i) = gid_index {
        return match port.gids.iter().find(|g| g.index == i) {
            Some(g) => Ok(Addressing {
                gid: Some(g.clone()),
                use_grh: port.link_layer == LinkLayer::Ethernet,
            }),
            None => Err(RdmaUnavailable::Other(format!(
                "GID index {i} is empty or missing on {device} port {}; valid entries: {}",
                port.port,
                valid()
            ))),
        };
    }
    if port.link_layer == LinkLayer::InfiniBand {
        return Ok(Addressing {
            gid: port.gids.iter().min_by_key(|g| g.index).cloned(),
            use_grh: false,
        });
    }
    let best = port.gids.iter().max_by_key(|g| {
        (
            prefer_ip.is_some_and(|ip| g.matches_ip(ip)),
            peer_kind.is_some_and(|k| k == g.kind),
            g.kind == GidKind::RoceV2,
            g.ipv4().is_some(),
            !g.is_link_local(),
            std::cmp::Reverse(g.index),
        )
    });
    match best {
        Some(g) => Ok(Addressing {
            gid: Some(g.clone()),
            use_grh: true,
        }),
        None => Err(RdmaUnavailable::Other(format!(
            "{device} port {} (RoCE) has no GID: give its network interface an IP address \
             (RoCE GIDs are derived from the interface's addresses)",
            port.port
        ))),
    }
}

/// IB MTU enum value <-> bytes.
pub fn mtu_bytes(enum_val: u32) -> u32 {
    match enum_val {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        _ => 0,
    }
}

pub fn mtu_enum(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// Path MTU: the smaller active MTU of both ends unless the user forces one
/// (which may not exceed either end).
pub fn path_mtu(local: u32, remote: u32, forced: Option<u32>) -> Result<u32, String> {
    let auto = local.min(remote);
    match forced {
        None => Ok(auto),
        Some(m) if mtu_enum(m).is_none() => Err(format!(
            "--mtu {m} is not an IB MTU; use 256, 512, 1024, 2048 or 4096"
        )),
        Some(m) if m > auto => Err(format!(
            "--mtu {m} exceeds the active MTU (this end {local}, peer {remote}); \
             raise the network interface MTU (RoCE) or use at most {auto}"
        )),
        Some(m) => Ok(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(index: u32, s: &str, kind: GidKind) -> GidEntry {
        GidEntry {
            index,
            gid: s.parse().unwrap(),
            kind,
        }
    }

    fn roce_port(port: u8, active: bool, gids: Vec<GidEntry>) -> PortSnap {
        PortSnap {
            port,
            active,
            state: if active {
                "ACTIVE".into()
            } else {
                "DOWN".into()
            },
            link_layer: LinkLayer::Ethernet,
            active_mtu: 1024,
            lid: 0,
            gids,
        }
    }

    fn mlx5_table() -> Vec<GidEntry> {
        // mlx5: 0/1 link-local v1/v2, then per address v1 then v2.
        vec![
            gid(0, "fe80::ac0:ebff:fe21:3da", GidKind::RoceV1),
            gid(1, "fe80::ac0:ebff:fe21:3da", GidKind::RoceV2),
            gid(2, "::ffff:192.168.211.242", GidKind::RoceV1),
            gid(3, "::ffff:192.168.211.242", GidKind::RoceV2),
        ]
    }

    #[test]
    fn roce_v2_ipv4_global_wins_on_mlx5_table() {
        let p = roce_port(1, true, mlx5_table());
        let a = pick_gid("mlx5_0", &p, None, None, None).unwrap();
        assert_eq!(a.gid.unwrap().index, 3);
        assert!(a.use_grh);
    }

    #[test]
    fn rxe_table_picks_index_1() {
        let p = roce_port(
            1,
            true,
            vec![
                gid(0, "fe80::5054:ff:fe12:3456", GidKind::RoceV2),
                gid(1, "::ffff:10.77.0.1", GidKind::RoceV2),
            ],
        );
        assert_eq!(
            pick_gid("rxe0", &p, None, None, None)
                .unwrap()
                .gid
                .unwrap()
                .index,
            1
        );
    }

    #[test]
    fn sparse_table_in_a_pod() {
        // Only indices 5 and 7 exist; nothing may assume index 0..n.
        let p = roce_port(
            1,
            true,
            vec![
                gid(5, "::ffff:10.1.0.9", GidKind::RoceV1),
                gid(7, "::ffff:10.1.0.9", GidKind::RoceV2),
            ],
        );
        assert_eq!(
            pick_gid("mlx5_3", &p, None, None, None)
                .unwrap()
                .gid
                .unwrap()
                .index,
            7
        );
        let err = pick_gid("mlx5_3", &p, Some(3), None, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("GID index 3") && err.contains("5 (") && err.contains("7 ("),
            "{err}"
        );
        assert_eq!(
            pick_gid("mlx5_3", &p, Some(5), None, None)
                .unwrap()
                .gid
                .unwrap()
                .index,
            5
        );
    }

    #[test]
    fn address_on_tested_path_and_peer_type_win() {
        let mut t = mlx5_table();
        t.push(gid(4, "::ffff:10.9.9.9", GidKind::RoceV1));
        t.push(gid(5, "::ffff:10.9.9.9", GidKind::RoceV2));
        let p = roce_port(1, true, t);
        let ip: IpAddr = "10.9.9.9".parse().unwrap();
        assert_eq!(
            pick_gid("d", &p, None, Some(ip), None)
                .unwrap()
                .gid
                .unwrap()
                .index,
            5
        );
        // A peer that only has RoCE v1 pulls us to v1.
        assert_eq!(
            pick_gid("d", &p, None, Some(ip), Some(GidKind::RoceV1))
                .unwrap()
                .gid
                .unwrap()
                .index,
            4
        );
    }

    #[test]
    fn infiniband_uses_lid_without_grh() {
        let p = PortSnap {
            port: 1,
            active: true,
            state: "ACTIVE".into(),
            link_layer: LinkLayer::InfiniBand,
            active_mtu: 4096,
            lid: 7,
            gids: vec![gid(0, "fe80::248a:703:49:d4f0", GidKind::Ib)],
        };
        let a = pick_gid("mlx5_0", &p, None, None, None).unwrap();
        assert!(!a.use_grh);
        assert_eq!(a.gid.unwrap().kind, GidKind::Ib);
    }

    #[test]
    fn roce_without_gids_explains() {
        let p = roce_port(1, true, vec![]);
        let e = pick_gid("rxe0", &p, None, None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("IP address"), "{e}");
    }

    #[test]
    fn port_selection_rules() {
        let devs = vec![
            DevSnap {
                name: "mlx5_0".into(),
                ports: vec![roce_port(1, false, mlx5_table())],
            },
            DevSnap {
                name: "mlx5_1".into(),
                ports: vec![roce_port(
                    1,
                    true,
                    vec![gid(3, "::ffff:10.0.0.1", GidKind::RoceV2)],
                )],
            },
            DevSnap {
                name: "mlx5_2".into(),
                ports: vec![roce_port(
                    1,
                    true,
                    vec![gid(3, "::ffff:10.0.0.2", GidKind::RoceV2)],
                )],
            },
        ];
        // First ACTIVE port, and say which was picked.
        let c = pick_port(&devs, None, None, None).unwrap();
        assert_eq!((c.dev, c.port), (1, 0));
        assert!(c.note.unwrap().contains("mlx5_1"));
        // The NIC on the tested path wins.
        let c = pick_port(&devs, None, None, Some("10.0.0.2".parse().unwrap())).unwrap();
        assert_eq!(c.dev, 2);
        // Explicit but down.
        let e = pick_port(&devs, Some("mlx5_0"), None, None).unwrap_err();
        assert!(matches!(e, RdmaUnavailable::PortNotActive { .. }), "{e}");
        let e = pick_port(&devs, Some("mlx5_0"), Some(1), None).unwrap_err();
        assert!(matches!(e, RdmaUnavailable::PortNotActive { .. }), "{e}");
        let e = pick_port(&devs, Some("mlx5_1"), Some(2), None).unwrap_err();
        assert!(matches!(e, RdmaUnavailable::NoSuchPort { .. }), "{e}");
        let e = pick_port(&devs, Some("nope"), None, None).unwrap_err();
        assert!(e.to_string().contains("mlx5_2"));
        assert_eq!(
            pick_port(&[], None, None, None).unwrap_err(),
            RdmaUnavailable::NoDevice
        );
        let down = vec![devs[0].clone()];
        let e = pick_port(&down, None, None, None).unwrap_err().to_string();
        assert!(
            e.contains("no ACTIVE RDMA port") && e.contains("mlx5_0 port 1: DOWN"),
            "{e}"
        );
    }

    #[test]
    fn path_mtu_rules() {
        assert_eq!(path_mtu(4096, 1024, None).unwrap(), 1024);
        assert_eq!(path_mtu(4096, 4096, Some(2048)).unwrap(), 2048);
        assert!(path_mtu(1024, 4096, Some(4096))
            .unwrap_err()
            .contains("exceeds"));
        assert!(path_mtu(1024, 4096, Some(1000))
            .unwrap_err()
            .contains("256"));
        assert_eq!(mtu_bytes(mtu_enum(2048).unwrap()), 2048);
    }
}
