//! The local end of a path: which interface the kernel sends through, its
//! MTU, and, for a tunnel or overlay, what it costs per packet.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;

/// An interface and what its MTU leaves for IP packets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    /// The configured MTU (`/sys/class/net/NAME/mtu`).
    pub mtu: u32,
    /// `ethernet`, `vxlan`, `geneve`, `wireguard`, `ipip`, `sit`, `gre`,
    /// `ip6tnl`, `ipoib`, `loopback`, or the kernel's DEVTYPE.
    pub kind: String,
    /// An encapsulation's bytes per packet, and what they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Overhead>,
    /// The interface the encapsulated packets leave through, when the
    /// kernel names one (a VXLAN device's `dev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay: Option<Underlay>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overhead {
    pub bytes: u32,
    /// E.g. "outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8".
    pub parts: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Underlay {
    pub name: String,
    pub mtu: u32,
}

impl Interface {
    /// The MTU the underlay leaves for this overlay (underlay MTU minus the
    /// overhead), when both are known.
    pub fn underlay_allows(&self) -> Option<u32> {
        Some(
            self.underlay
                .as_ref()?
                .mtu
                .saturating_sub(self.overhead.as_ref()?.bytes),
        )
    }

    /// One line naming the encapsulation, e.g. "VXLAN over mgmt0 (MTU
    /// 1500): 50 bytes per packet (outer Ethernet 14 + ...), so at most 1450".
    pub fn describe_overhead(&self) -> Option<String> {
        // An agent's interface is peer text: escaped for the terminal.
        let e = fabperf_results::escape::terminal;
        let o = self.overhead.as_ref()?;
        let what = match self.kind.as_str() {
            "vxlan" => "VXLAN",
            "geneve" => "Geneve",
            "wireguard" => "WireGuard",
            "ipip" => "IP-in-IP",
            "sit" => "IPv6-in-IPv4 (sit)",
            "gre" => "GRE",
            "gretap" => "GRE with Ethernet (gretap)",
            "ip6tnl" => "IP-in-IPv6",
            k => k,
        };
        let what = e(what);
        Some(match (&self.underlay, self.underlay_allows()) {
            (Some(u), Some(fit)) => format!(
                "{what} over {} (MTU {}): {} bytes per packet ({}), so at most {fit}",
                e(&u.name),
                u.mtu,
                o.bytes,
                e(&o.parts)
            ),
            _ => format!("{what}: {} bytes per packet ({})", o.bytes, e(&o.parts)),
        })
    }
}

/// The encapsulation of an interface kind, for an IPv4 or IPv6 underlay.
pub fn overhead(kind: &str, underlay_v6: bool) -> Option<Overhead> {
    let ip = if underlay_v6 {
        ("IPv6", 40)
    } else {
        ("IPv4", 20)
    };
    let (bytes, parts) = match kind {
        "vxlan" => (
            14 + ip.1 + 8 + 8,
            format!("outer Ethernet 14 + {} {} + UDP 8 + VXLAN 8", ip.0, ip.1),
        ),
        "geneve" => (
            14 + ip.1 + 8 + 8,
            format!(
                "outer Ethernet 14 + {} {} + UDP 8 + Geneve 8, plus any options",
                ip.0, ip.1
            ),
        ),
        "wireguard" => (
            ip.1 + 8 + 32,
            format!("{} {} + UDP 8 + WireGuard header 16 and tag 16", ip.0, ip.1),
        ),
        "ipip" => (20, "outer IPv4 20".to_string()),
        "sit" => (20, "outer IPv4 20".to_string()),
        "ip6tnl" => (40, "outer IPv6 40".to_string()),
        "gre" => (
            24,
            "outer IPv4 20 + GRE 4, plus key/sequence options".to_string(),
        ),
        "gretap" => (
            38,
            "outer IPv4 20 + GRE 4 + inner Ethernet 14, plus options".to_string(),
        ),
        _ => return None,
    };
    Some(Overhead { bytes, parts })
}

fn read_trim(p: &Path) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    Some(s.trim().to_string())
}

/// The interface named `name` as sysfs describes it (under `sys`, normally
/// `/sys/class/net`), an encapsulation's overhead for an IPv4 underlay
/// unless the device says otherwise ([`describe_as`]).
pub fn describe(sys: &Path, name: &str) -> Option<Interface> {
    describe_as(sys, name, None)
}

/// As [`describe`], with the underlay's address family when the device
/// fixes it (`Some(true)`: IPv6, e.g. a VXLAN device with a `local` or
/// `remote` IPv6 address: 70 bytes instead of 50). When it is not known
/// (a device in external mode), the IPv4 figure is given and the parts
/// say what an IPv6 underlay adds.
pub fn describe_as(sys: &Path, name: &str, underlay_v6: Option<bool>) -> Option<Interface> {
    let dir = sys.join(name);
    let mtu: u32 = read_trim(&dir.join("mtu"))?.parse().ok()?;
    let ty: u32 = read_trim(&dir.join("type"))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let devtype = read_trim(&dir.join("uevent")).and_then(|u| {
        u.lines()
            .find_map(|l| l.strip_prefix("DEVTYPE=").map(str::to_string))
    });
    let kind = match (devtype.as_deref(), ty) {
        (Some(d), _) => d.to_string(),
        (None, 1) => "ethernet".into(),
        (None, 32) => "ipoib".into(),
        (None, 768) => "ipip".into(),
        (None, 769) => "ip6tnl".into(),
        (None, 772) => "loopback".into(),
        (None, 776) => "sit".into(),
        (None, 778) => "gre".into(),
        (None, 65534) => "none".into(),
        (None, t) => format!("type {t}"),
    };
    // A VXLAN/Geneve device's lower device, when it has one (iflink is
    // its own index otherwise).
    let own: Option<u32> = read_trim(&dir.join("ifindex")).and_then(|v| v.parse().ok());
    let link: Option<u32> = read_trim(&dir.join("iflink")).and_then(|v| v.parse().ok());
    let underlay = match (own, link) {
        (Some(o), Some(l)) if l != o && l != 0 => by_index(sys, l).and_then(|u| {
            let m = read_trim(&sys.join(&u).join("mtu"))?.parse().ok()?;
            Some(Underlay { name: u, mtu: m })
        }),
        _ => None,
    };
    let mut over = overhead(&kind, underlay_v6 == Some(true));
    if let Some(o) = over.as_mut() {
        if underlay_v6.is_none() && matches!(kind.as_str(), "vxlan" | "geneve" | "wireguard") {
            o.parts
                .push_str("; IPv4 underlay assumed, an IPv6 underlay adds 20");
        }
    }
    Some(Interface {
        name: name.to_string(),
        mtu,
        overhead: over,
        kind,
        underlay,
    })
}

fn by_index(sys: &Path, index: u32) -> Option<String> {
    for e in std::fs::read_dir(sys).ok()?.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if read_trim(&e.path().join("ifindex")).and_then(|v| v.parse::<u32>().ok()) == Some(index) {
            return Some(n);
        }
    }
    None
}

/// The local address the kernel would use toward `dest` (a connected UDP
/// socket sends nothing).
pub fn source_for(dest: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if dest.is_ipv6() {
        "[::]:0".parse().ok()?
    } else {
        "0.0.0.0:0".parse().ok()?
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(dest).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// The interface that holds `ip` (getifaddrs).
pub fn interface_of(ip: IpAddr) -> Option<String> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .find(|a| {
            let Some(addr) = &a.address else {
                return false;
            };
            let have = match (addr.as_sockaddr_in(), addr.as_sockaddr_in6()) {
                (Some(v4), _) => IpAddr::from(v4.ip()),
                (_, Some(v6)) => IpAddr::from(v6.ip()),
                _ => return false,
            };
            have == ip
        })
        .map(|a| a.interface_name)
}

/// The interface packets to `dest` leave through: the output device of the
/// kernel's route to it (not the interface that holds the source address,
/// which may be another one: a loopback or dummy service address), with
/// its underlay's family from the device's link info. Falls back to the
/// interface holding the source address when netlink cannot answer.
pub fn interface_toward(dest: IpAddr, src: Option<IpAddr>) -> Option<Interface> {
    let sys = Path::new("/sys/class/net");
    if let Ok(route) = fabperf_detect::netlink::route_get(dest) {
        if let Some(d) = route
            .oif
            .and_then(|i| fabperf_detect::netlink::link_details(i).ok().flatten())
        {
            if let Some(i) = describe_as(sys, &d.name, d.underlay_v6) {
                return Some(i);
            }
        }
    }
    src.or_else(|| source_for(SocketAddr::new(dest, 9)))
        .and_then(interface_of)
        .and_then(|n| describe(sys, &n))
}

/// The local address and interface toward `dest`, described.
pub fn toward(dest: SocketAddr) -> (Option<IpAddr>, Option<Interface>) {
    let src = source_for(dest);
    (src, interface_toward(dest.ip(), src))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_address_is_on_lo() {
        assert_eq!(
            interface_of(IpAddr::from([127, 0, 0, 1])).as_deref(),
            Some("lo")
        );
        assert_eq!(interface_of(IpAddr::from([192, 0, 2, 213])), None);
    }

    fn fake(dir: &Path, name: &str, files: &[(&str, &str)]) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in files {
            std::fs::write(d.join(f), v).unwrap();
        }
    }

    #[test]
    fn a_vxlan_device_names_its_overhead_and_underlay() {
        let t = std::env::temp_dir().join(format!("fabperf-mtu-sys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        fake(
            &t,
            "mgmt0",
            &[
                ("mtu", "1500\n"),
                ("type", "1\n"),
                ("ifindex", "2\n"),
                ("iflink", "9\n"),
                ("uevent", "INTERFACE=mgmt0\nIFINDEX=2\n"),
            ],
        );
        fake(
            &t,
            "vxlan0",
            &[
                ("mtu", "1500\n"),
                ("type", "1\n"),
                ("ifindex", "5\n"),
                ("iflink", "2\n"),
                ("uevent", "DEVTYPE=vxlan\nINTERFACE=vxlan0\n"),
            ],
        );
        fake(
            &t,
            "tun0",
            &[
                ("mtu", "1480\n"),
                ("type", "768\n"),
                ("ifindex", "6\n"),
                ("iflink", "0\n"),
            ],
        );
        let v = describe(&t, "vxlan0").unwrap();
        assert_eq!(v.kind, "vxlan");
        assert_eq!(v.overhead.as_ref().unwrap().bytes, 50);
        assert_eq!(
            v.underlay,
            Some(Underlay {
                name: "mgmt0".into(),
                mtu: 1500
            })
        );
        assert_eq!(v.underlay_allows(), Some(1450));
        let d = v.describe_overhead().unwrap();
        assert!(
            d.contains("VXLAN over mgmt0 (MTU 1500): 50 bytes") && d.contains("at most 1450"),
            "{d}"
        );
        let m = describe(&t, "mgmt0").unwrap();
        assert_eq!((m.kind.as_str(), m.overhead.is_none()), ("ethernet", true));
        assert!(
            m.underlay.is_none(),
            "a veth's peer index names no local device"
        );
        let i = describe(&t, "tun0").unwrap();
        assert_eq!((i.kind.as_str(), i.overhead.unwrap().bytes), ("ipip", 20));
        assert!(describe(&t, "nope").is_none());
        // A damaged sysfs (MTU not a number) describes nothing.
        fake(&t, "bad0", &[("mtu", "lots\n")]);
        assert!(describe(&t, "bad0").is_none());
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn loopback_is_found_for_127_0_0_1() {
        let (src, iface) = toward("127.0.0.1:9".parse().unwrap());
        assert_eq!(src, Some("127.0.0.1".parse().unwrap()));
        let i = iface.expect("lo");
        assert_eq!(i.name, "lo");
        assert_eq!(i.kind, "loopback");
    }
}
