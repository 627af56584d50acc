//! Parsers for the kernel's sysfs text formats and the PCI ID / PCIe tables.
//!
//! Every parser returns `None` on text it does not understand: a malformed file is an unknown
//! value, never a panic.

use std::net::{Ipv4Addr, Ipv6Addr};

/// `ports/N/state` (`"%d: %s"`, e.g. `4: ACTIVE`) -> state name.
pub fn port_state(text: &str) -> Option<String> {
    let (num, name) = text.split_once(':')?;
    let num: u32 = num.trim().parse().ok()?;
    let name = name.trim();
    let by_num = match num {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => return (!name.is_empty()).then(|| name.to_ascii_uppercase()),
    };
    Some(by_num.to_string())
}

/// `ports/N/phys_state` (`"%u: %s"`, e.g. `5: LinkUp`) -> the text part.
pub fn phys_state(text: &str) -> Option<String> {
    let (num, name) = text.split_once(':')?;
    num.trim().parse::<u32>().ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// A parsed `ports/N/rate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    pub gbps: f64,
    pub lanes: Option<u32>,
    pub lane_speed: Option<String>,
}

/// `ports/N/rate` (`"%d%s Gb/sec (%dX%s)"`, e.g. `100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`).
pub fn port_rate(text: &str) -> Option<Rate> {
    let (num, rest) = text.trim().split_once(' ')?;
    let gbps: f64 = num.parse().ok()?;
    if !gbps.is_finite() || gbps < 0.0 {
        return None;
    }
    let rest = rest.trim();
    if !rest.starts_with("Gb/sec") {
        return None;
    }
    let mut lanes = None;
    let mut lane_speed = None;
    if let (Some(open), Some(close)) = (rest.find('('), rest.rfind(')')) {
        if open < close {
            let inner = rest[open + 1..close].trim();
            let (w, name) = match inner.split_once(' ') {
                Some((w, n)) => (w, Some(n.trim())),
                None => (inner, None),
            };
            lanes = w
                .strip_suffix(['X', 'x'])
                .and_then(|n| n.parse::<u32>().ok());
            lane_speed = name.filter(|n| !n.is_empty()).map(|n| n.to_string());
        }
    }
    Some(Rate {
        gbps,
        lanes,
        lane_speed,
    })
}

/// Per-lane signalling rate of an InfiniBand lane speed name, Gb/s.
pub fn ib_lane_gbps(name: &str) -> Option<f64> {
    Some(match name {
        "SDR" => 2.5,
        "DDR" => 5.0,
        "QDR" | "FDR10" => 10.0,
        "FDR" => 14.0,
        "EDR" => 25.0,
        "HDR" => 50.0,
        "NDR" => 100.0,
        "XDR" => 200.0,
        _ => return None,
    })
}

/// A GID as printed by sysfs (`fe80:0000:0000:0000:0ac0:ebff:fe21:03da`) -> 16 bytes.
pub fn gid_bytes(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        if g.is_empty() || g.len() > 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub fn gid_ipv4(g: &[u8; 16]) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*g).to_ipv4_mapped()
}

/// True for fe80::/10.
pub fn gid_link_local(g: &[u8; 16]) -> bool {
    g[0] == 0xfe && (g[1] & 0xc0) == 0x80
}

/// `current_link_speed` / `max_link_speed` -> GT/s per lane. Accepts `8.0 GT/s PCIe` and the
/// pre-5.7 `8 GT/s`, `2.5 GT/s`; `Unknown` / `Unknown speed` -> None.
pub fn pcie_speed_gts(text: &str) -> Option<f64> {
    let t = text.trim();
    let num = t.strip_suffix("PCIe").unwrap_or(t).trim();
    let num = num.strip_suffix("GT/s")?.trim();
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// PCIe generation of a per-lane transfer rate.
pub fn pcie_gen(gts: f64) -> Option<u8> {
    let g = [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
    ];
    g.iter()
        .find(|(s, _)| (gts - s).abs() < 0.01)
        .map(|(_, g)| *g)
}

/// Usable Mb/s per lane after line encoding, exactly as the kernel's `PCIE_SPEED2MBS_ENC`
/// (integer arithmetic): Gen1/2 8b/10b, Gen3..5 128b/130b, Gen6 (FLIT) 1/1.
pub fn pcie_lane_mbps(gts: f64) -> Option<u64> {
    Some(match pcie_gen(gts)? {
        1 => 2500 * 8 / 10,
        2 => 5000 * 8 / 10,
        3 => 8000 * 128 / 130,
        4 => 16000 * 128 / 130,
        5 => 32000 * 128 / 130,
        6 => 64000,
        _ => return None,
    })
}

/// Usable Gbit/s of a link (the figure the kernel prints as "available PCIe bandwidth").
pub fn pcie_ceiling_gbps(gts: Option<f64>, width: Option<u32>) -> Option<f64> {
    let per_lane = pcie_lane_mbps(gts?)?;
    let w = width?;
    if w == 0 {
        return None;
    }
    Some((per_lane * u64::from(w)) as f64 / 1000.0)
}

/// Product family for a PCI vendor/device ID (lowercase hex, no `0x`), and whether it is a VF.
pub fn pci_model(vendor: &str, device: &str) -> Option<(&'static str, bool)> {
    if vendor != "15b3" {
        return None;
    }
    Some(match device {
        "1003" => ("ConnectX-3", false),
        "1004" => ("ConnectX-3 VF", true),
        "1007" => ("ConnectX-3 Pro", false),
        "1011" => ("Connect-IB", false),
        "1012" => ("Connect-IB VF", true),
        "1013" => ("ConnectX-4", false),
        "1014" => ("ConnectX-4 VF", true),
        "1015" => ("ConnectX-4 Lx", false),
        "1016" => ("ConnectX-4 Lx VF", true),
        "1017" => ("ConnectX-5", false),
        "1018" => ("ConnectX-5 VF", true),
        "1019" => ("ConnectX-5 Ex", false),
        "101a" => ("ConnectX-5 Ex VF", true),
        "101b" => ("ConnectX-6", false),
        "101c" => ("ConnectX-6 VF", true),
        "101d" => ("ConnectX-6 Dx", false),
        "101e" => ("ConnectX Family VF (ConnectX-6 Dx and later)", true),
        "101f" => ("ConnectX-6 Lx", false),
        "1021" => ("ConnectX-7", false),
        "1023" => ("ConnectX-8", false),
        "1025" => ("ConnectX-9", false),
        "a2d2" => ("BlueField", false),
        "a2d3" => ("BlueField VF", true),
        "a2d6" => ("BlueField-2", false),
        "a2dc" => ("BlueField-3", false),
        _ => return None,
    })
}

/// ConnectX-4 and later run "enhanced IPoIB", which supports datagram mode only.
pub fn enhanced_ipoib_only(device: &str) -> bool {
    matches!(
        device,
        "1013"
            | "1014"
            | "1015"
            | "1016"
            | "1017"
            | "1018"
            | "1019"
            | "101a"
            | "101b"
            | "101c"
            | "101d"
            | "101e"
            | "101f"
            | "1021"
            | "1023"
            | "1025"
            | "a2d2"
            | "a2d3"
            | "a2d6"
            | "a2dc"
    )
}

/// `0x15b3` / `0x1017` -> `15b3` / `1017`.
pub fn hex_id(text: &str) -> Option<String> {
    let t = text.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some(t.to_ascii_lowercase())
}

/// A decimal unsigned value (sysctls, mtu, width).
pub fn uint(text: &str) -> Option<u32> {
    text.trim().parse().ok()
}

/// True for a PCI address `dddd:bb:dd.f`.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        assert_eq!(port_state("4: ACTIVE").as_deref(), Some("ACTIVE"));
        assert_eq!(port_state("2: INIT").as_deref(), Some("INIT"));
        assert_eq!(port_state("1: DOWN\n").as_deref(), Some("DOWN"));
        assert_eq!(port_state("garbage"), None);
        assert_eq!(phys_state("5: LinkUp").as_deref(), Some("LinkUp"));
        assert_eq!(phys_state("3: Disabled").as_deref(), Some("Disabled"));
    }

    #[test]
    fn rates() {
        let r = port_rate("100 Gb/sec (4X EDR)").unwrap();
        assert_eq!(r.gbps, 100.0);
        assert_eq!(r.lanes, Some(4));
        assert_eq!(r.lane_speed.as_deref(), Some("EDR"));
        let r = port_rate("2.5 Gb/sec (1X SDR)").unwrap();
        assert_eq!(r.gbps, 2.5);
        let r = port_rate("10 Gb/sec (4X)").unwrap();
        assert_eq!((r.lanes, r.lane_speed), (Some(4), None));
        let r = port_rate("200 Gb/sec (4X HDR)").unwrap();
        assert_eq!(
            r.gbps,
            r.lanes.unwrap() as f64 * ib_lane_gbps(r.lane_speed.as_deref().unwrap()).unwrap()
        );
        assert_eq!(port_rate("fast"), None);
        assert_eq!(port_rate(""), None);
        assert_eq!(port_rate("x Gb/sec (4X EDR)"), None);
    }

    #[test]
    fn gids() {
        let g = gid_bytes("0000:0000:0000:0000:0000:ffff:c0a8:d3f2").unwrap();
        assert_eq!(gid_ipv4(&g), Some(Ipv4Addr::new(192, 168, 211, 242)));
        assert!(!gid_link_local(&g));
        let g = gid_bytes("fe80:0000:0000:0000:0ac0:ebff:fe21:03da").unwrap();
        assert!(gid_link_local(&g));
        assert_eq!(gid_ipv4(&g), None);
        assert_eq!(gid_bytes("fe80::1"), None);
        assert_eq!(gid_bytes("zz80:0000:0000:0000:0ac0:ebff:fe21:03da"), None);
    }

    #[test]
    fn pcie() {
        assert_eq!(pcie_speed_gts("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(pcie_speed_gts("8 GT/s"), Some(8.0));
        assert_eq!(pcie_speed_gts("2.5 GT/s"), Some(2.5));
        assert_eq!(pcie_speed_gts("16.0 GT/s PCIe"), Some(16.0));
        assert_eq!(pcie_speed_gts("Unknown"), None);
        assert_eq!(pcie_speed_gts("Unknown speed"), None);
        // The kernel's own figures (dmesg): 63.008 Gb/s at Gen3 x8, 126.016 at Gen3 x16.
        assert_eq!(pcie_ceiling_gbps(Some(8.0), Some(8)), Some(63.008));
        assert_eq!(pcie_ceiling_gbps(Some(8.0), Some(16)), Some(126.016));
        assert_eq!(pcie_ceiling_gbps(Some(2.5), Some(1)), Some(2.0));
        assert_eq!(pcie_ceiling_gbps(Some(5.0), Some(4)), Some(16.0));
        assert_eq!(pcie_ceiling_gbps(Some(16.0), Some(16)), Some(252.048));
        assert_eq!(pcie_ceiling_gbps(Some(16.0), None), None);
        assert_eq!(pcie_ceiling_gbps(Some(3.0), Some(16)), None);
    }

    #[test]
    fn ids() {
        assert_eq!(pci_model("15b3", "1017"), Some(("ConnectX-5", false)));
        assert_eq!(pci_model("15b3", "1018"), Some(("ConnectX-5 VF", true)));
        assert_eq!(pci_model("15b3", "a2dc"), Some(("BlueField-3", false)));
        assert_eq!(pci_model("8086", "1017"), None);
        assert_eq!(hex_id("0x15B3\n").as_deref(), Some("15b3"));
        assert_eq!(hex_id("0xzz"), None);
        assert!(is_pci_address("0000:3b:00.0"));
        assert!(!is_pci_address("virtio2"));
        assert!(!is_pci_address("pci0000:00"));
    }
}
