//! PCI configuration space, as sysfs gives it (`/sys/bus/pci/devices/<addr>/config`).
//!
//! Only what fabperf's doctor judges is decoded, at the offsets of the Linux kernel's
//! `include/uapi/linux/pci_regs.h`:
//!
//! * the standard capability list (`PCI_STATUS` 0x06 bit 4 says it exists, its head is the byte
//!   at `PCI_CAPABILITY_LIST` 0x34, each entry is ID then next pointer, pointers with their low two
//!   bits masked), searched for the PCI Express capability (ID 0x10): its capabilities register
//!   (+0x02, device/port type in bits 7:4), Device Control (+0x08: Max_Payload_Size bits 7:5,
//!   Max_Read_Request_Size bits 14:12, both 128 << value), Link Capabilities (+0x0c: max speed
//!   3:0, max width 9:4) and Link Status (+0x12: current speed 3:0, width 9:4);
//! * the extended capability list from 0x100 (4096-byte config spaces only; header: ID 15:0,
//!   version 19:16, next offset bits 31:20 with the low two bits masked, a next offset below 0x100
//!   ends it), searched for Access Control Services (ID 0x000d): ACS Capability (+0x04) and ACS
//!   Control (+0x06; bit 0 Source Validation, 1 Translation Blocking, 2 P2P Request Redirect,
//!   3 P2P Completion Redirect, 4 Upstream Forwarding, 5 P2P Egress Control, 6 Direct
//!   Translated P2P).
//!
//! The bytes are untrusted (a snapshot from another machine, or a device with a broken list):
//! every walk is bounded (48 standard entries as the kernel's `PCI_FIND_CAP_TTL`, 480 extended
//! ones, i.e. (4096 - 256) / 8), every read is bounds-checked, and a truncated buffer yields
//! "unknown", never a panic. An unprivileged reader gets only the first 64 bytes from sysfs: then
//! nothing beyond the header is known.

use serde::{Deserialize, Serialize};

/// `PCI_CAPABILITY_LIST`.
const CAP_LIST_PTR: usize = 0x34;
/// `PCI_STATUS` and its `PCI_STATUS_CAP_LIST` bit.
const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 0x10;
/// `PCI_CAP_ID_EXP`.
const CAP_ID_EXP: u8 = 0x10;
/// `PCI_EXT_CAP_ID_ACS`.
const EXT_CAP_ID_ACS: u16 = 0x000d;
/// `PCI_CFG_SPACE_SIZE`: extended capabilities start here.
const EXT_START: usize = 0x100;
/// `PCI_FIND_CAP_TTL`.
const CAP_TTL: usize = 48;
/// Most extended capabilities a 4096-byte space can chain.
const EXT_TTL: usize = (4096 - 256) / 8;

/// ACS Control bits (`PCI_ACS_*`).
pub const ACS_SV: u16 = 0x0001;
pub const ACS_TB: u16 = 0x0002;
pub const ACS_RR: u16 = 0x0004;
pub const ACS_CR: u16 = 0x0008;
pub const ACS_UF: u16 = 0x0010;
pub const ACS_EC: u16 = 0x0020;
pub const ACS_DT: u16 = 0x0040;

/// What fabperf reads from one function's configuration space.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigInfo {
    /// Bytes of configuration space that could be read (64 unprivileged, 256 conventional,
    /// 4096 PCIe as root).
    pub bytes: u32,
    /// Offset of the PCI Express capability.
    pub pcie_cap: Option<u16>,
    /// Device/port type of the PCI Express capability (see [`port_type_name`]).
    pub port_type: Option<u8>,
    /// Max_Payload_Size in use (Device Control), bytes.
    pub max_payload: Option<u32>,
    /// Max_Read_Request_Size in use (Device Control), bytes.
    pub max_read_request: Option<u32>,
    /// Device Control register value.
    pub devctl: Option<u16>,
    /// Link Capabilities: max speed code (1 = 2.5 GT/s ... 6 = 64 GT/s) and width.
    pub link_cap_speed: Option<u8>,
    pub link_cap_width: Option<u8>,
    /// Link Status: current speed code and negotiated width.
    pub link_speed: Option<u8>,
    pub link_width: Option<u8>,
    /// Offset of the ACS extended capability.
    pub acs_cap_offset: Option<u16>,
    /// ACS Capability register (what the port can do).
    pub acs_cap: Option<u16>,
    /// ACS Control register (what is enabled).
    pub acs_ctrl: Option<u16>,
}

fn u8_at(b: &[u8], off: usize) -> Option<u8> {
    b.get(off).copied()
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Offset of standard capability `id`, walking the list from 0x34.
pub fn find_cap(b: &[u8], id: u8) -> Option<usize> {
    let status = u16_at(b, STATUS)?;
    if status & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut pos = usize::from(u8_at(b, CAP_LIST_PTR)? & !3);
    for _ in 0..CAP_TTL {
        // Capabilities live after the 64-byte header; 0 ends the list.
        if pos < 0x40 {
            return None;
        }
        let cap_id = u8_at(b, pos)?;
        if cap_id == 0xff {
            return None;
        }
        if cap_id == id {
            return Some(pos);
        }
        pos = usize::from(u8_at(b, pos + 1)? & !3);
    }
    None
}

/// Offset of extended capability `id`, walking the list from 0x100.
pub fn find_ext_cap(b: &[u8], id: u16) -> Option<usize> {
    let mut pos = EXT_START;
    for _ in 0..EXT_TTL {
        let header = u32_at(b, pos)?;
        // An all-zero or all-ones header means no extended capabilities (or no device).
        if header == 0 || header == 0xffff_ffff {
            return None;
        }
        if (header & 0xffff) as u16 == id {
            return Some(pos);
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next < EXT_START {
            return None;
        }
        pos = next;
    }
    None
}

/// Bytes for a Max_Payload_Size / Max_Read_Request_Size field value (128 << v, v ≤ 5).
fn size_code(v: u16) -> Option<u32> {
    (v <= 5).then(|| 128u32 << v)
}

/// Decode a configuration space (any length; fields beyond it are unknown).
pub fn parse(b: &[u8]) -> ConfigInfo {
    let mut c = ConfigInfo {
        bytes: u32::try_from(b.len()).unwrap_or(u32::MAX),
        ..ConfigInfo::default()
    };
    if let Some(p) = find_cap(b, CAP_ID_EXP) {
        c.pcie_cap = u16::try_from(p).ok();
        if let Some(flags) = u16_at(b, p + 0x02) {
            c.port_type = Some(((flags >> 4) & 0xf) as u8);
        }
        if let Some(ctl) = u16_at(b, p + 0x08) {
            c.devctl = Some(ctl);
            c.max_payload = size_code((ctl >> 5) & 0x7);
            c.max_read_request = size_code((ctl >> 12) & 0x7);
        }
        if let Some(cap) = u32_at(b, p + 0x0c) {
            c.link_cap_speed = Some((cap & 0xf) as u8).filter(|s| *s != 0);
            c.link_cap_width = Some(((cap >> 4) & 0x3f) as u8).filter(|w| *w != 0);
        }
        if let Some(sta) = u16_at(b, p + 0x12) {
            c.link_speed = Some((sta & 0xf) as u8).filter(|s| *s != 0);
            c.link_width = Some(((sta >> 4) & 0x3f) as u8).filter(|w| *w != 0);
        }
    }
    if let Some(p) = find_ext_cap(b, EXT_CAP_ID_ACS) {
        c.acs_cap_offset = u16::try_from(p).ok();
        c.acs_cap = u16_at(b, p + 0x04);
        c.acs_ctrl = u16_at(b, p + 0x06);
    }
    c
}

/// The PCI Express device/port type in words (`PCI_EXP_TYPE_*`).
pub fn port_type_name(t: u8) -> &'static str {
    match t {
        0x0 => "endpoint",
        0x1 => "legacy endpoint",
        0x4 => "root port",
        0x5 => "switch upstream port",
        0x6 => "switch downstream port",
        0x7 => "PCIe-to-PCI bridge",
        0x8 => "PCI-to-PCIe bridge",
        0x9 => "root complex integrated endpoint",
        0xa => "root complex event collector",
        _ => "unknown port type",
    }
}

/// `PCI_EXP_TYPE_ROOT_PORT`, `_UPSTREAM`, `_DOWNSTREAM`.
pub const TYPE_ROOT_PORT: u8 = 0x4;
pub const TYPE_UPSTREAM: u8 = 0x5;
pub const TYPE_DOWNSTREAM: u8 = 0x6;

/// The enabled ACS controls as `lspci -vv` names them (`SrcValid+ ReqRedir+ ...`), only the set
/// ones; `"none"` when nothing is enabled.
pub fn acs_ctrl_text(ctrl: u16) -> String {
    let names = [
        (ACS_SV, "SrcValid"),
        (ACS_TB, "TransBlk"),
        (ACS_RR, "ReqRedir"),
        (ACS_CR, "CmpltRedir"),
        (ACS_UF, "UpstreamFwd"),
        (ACS_EC, "EgressCtrl"),
        (ACS_DT, "DirectTrans"),
    ];
    let on: Vec<String> = names
        .iter()
        .filter(|(bit, _)| ctrl & bit != 0)
        .map(|(_, n)| format!("{n}+"))
        .collect();
    if on.is_empty() {
        "none".into()
    } else {
        on.join(" ")
    }
}

/// True when P2P Request Redirect or P2P Completion Redirect is on: peer-to-peer requests (or
/// their completions) between the port's devices go up to the root complex instead of across
/// the switch.
pub fn acs_redirects(ctrl: u16) -> bool {
    ctrl & (ACS_RR | ACS_CR) != 0
}

/// GT/s of a Link Capabilities / Link Status speed code.
pub fn speed_code_gts(code: u8) -> Option<f64> {
    match code {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A 4096-byte PCIe function: PM capability at 0x40, PCI Express at 0x60 (type, devctl,
    /// link cap/status), AER at 0x100 then ACS at 0x148 when `acs` is given.
    pub(crate) fn space(
        port_type: u8,
        devctl: u16,
        link: (u8, u8, u8, u8),
        acs: Option<(u16, u16)>,
    ) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[0..2].copy_from_slice(&0x15b3u16.to_le_bytes());
        b[6..8].copy_from_slice(&0x0010u16.to_le_bytes());
        b[0x34] = 0x40;
        b[0x40] = 0x01;
        b[0x41] = 0x60;
        b[0x60] = 0x10;
        b[0x61] = 0x00;
        b[0x62..0x64].copy_from_slice(&(0x0002u16 | (u16::from(port_type) << 4)).to_le_bytes());
        b[0x68..0x6a].copy_from_slice(&devctl.to_le_bytes());
        let cap = u32::from(link.0) | (u32::from(link.1) << 4);
        b[0x6c..0x70].copy_from_slice(&cap.to_le_bytes());
        let sta = u16::from(link.2) | (u16::from(link.3) << 4);
        b[0x72..0x74].copy_from_slice(&sta.to_le_bytes());
        let next: u32 = if acs.is_some() { 0x148 } else { 0 };
        b[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (next << 20)).to_le_bytes());
        if let Some((cap, ctrl)) = acs {
            b[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
            b[0x14c..0x14e].copy_from_slice(&cap.to_le_bytes());
            b[0x14e..0x150].copy_from_slice(&ctrl.to_le_bytes());
        }
        b
    }

    #[test]
    fn decodes_device_control_link_and_acs() {
        // MPS 256 (001 in 7:5), MRRS 4096 (101 in 14:12); Gen5 x16 capable, Gen4 x8 now.
        let b = space(6, (1 << 5) | (5 << 12), (5, 16, 4, 8), Some((0x5f, 0x1d)));
        let c = parse(&b);
        assert_eq!(c.bytes, 4096);
        assert_eq!(c.pcie_cap, Some(0x60));
        assert_eq!(c.port_type, Some(TYPE_DOWNSTREAM));
        assert_eq!(port_type_name(6), "switch downstream port");
        assert_eq!((c.max_payload, c.max_read_request), (Some(256), Some(4096)));
        assert_eq!((c.link_cap_speed, c.link_cap_width), (Some(5), Some(16)));
        assert_eq!((c.link_speed, c.link_width), (Some(4), Some(8)));
        assert_eq!(c.acs_cap_offset, Some(0x148));
        assert_eq!((c.acs_cap, c.acs_ctrl), (Some(0x5f), Some(0x1d)));
        assert!(acs_redirects(0x1d));
        assert_eq!(
            acs_ctrl_text(0x1d),
            "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
        );
        assert!(!acs_redirects(ACS_SV | ACS_UF));
        assert_eq!(acs_ctrl_text(0), "none");
        assert_eq!(speed_code_gts(5), Some(32.0));
        // MRRS 512 (010).
        let c = parse(&space(0, 2 << 12, (5, 16, 5, 16), None));
        assert_eq!(c.max_read_request, Some(512));
        assert_eq!(c.acs_ctrl, None);
    }

    #[test]
    fn unprivileged_and_truncated_reads_know_nothing_beyond_them() {
        let b = space(0, 5 << 12, (5, 16, 5, 16), Some((0x5f, 0x1d)));
        // sysfs gives non-root readers the 64-byte header only.
        let c = parse(&b[..64]);
        assert_eq!(c.bytes, 64);
        assert_eq!(c.pcie_cap, None);
        assert_eq!(c.max_read_request, None);
        // Conventional 256 bytes: standard capabilities, no extended ones.
        let c = parse(&b[..256]);
        assert_eq!(c.max_read_request, Some(4096));
        assert_eq!(c.acs_ctrl, None);
        // Cut inside the ACS capability.
        let c = parse(&b[..0x14d]);
        assert_eq!(c.acs_cap_offset, Some(0x148));
        assert_eq!(c.acs_ctrl, None);
        for n in 0..b.len() {
            let _ = parse(&b[..n]);
        }
    }

    #[test]
    fn hostile_lists_end() {
        let mut b = space(0, 0, (5, 16, 5, 16), Some((0, 0)));
        // A standard capability pointing at itself.
        b[0x41] = 0x40;
        b[0x40] = 0x05;
        assert_eq!(find_cap(&b, CAP_ID_EXP), None);
        // An extended capability pointing at itself.
        b[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x100 << 20)).to_le_bytes());
        assert_eq!(find_ext_cap(&b, EXT_CAP_ID_ACS), None);
        // No capability list bit: the pointer is not followed.
        let mut b = space(0, 0, (5, 16, 5, 16), None);
        b[6] = 0;
        assert_eq!(parse(&b).pcie_cap, None);
        // Pointers into the header, or off the end of a short buffer.
        let mut b = space(0, 0, (5, 16, 5, 16), None);
        b[0x34] = 0x3c;
        assert_eq!(find_cap(&b, CAP_ID_EXP), None);
        b[0x34] = 0xfc;
        assert_eq!(find_cap(&b[..0xfd], CAP_ID_EXP), None);
        // Out-of-range size codes (6, 7 are reserved).
        let c = parse(&space(0, (7 << 5) | (6 << 12), (0, 0, 0, 0), None));
        assert_eq!((c.max_payload, c.max_read_request), (None, None));
        assert_eq!((c.link_cap_speed, c.link_width), (None, None));
        assert_eq!(parse(&[]), ConfigInfo::default());
        assert_eq!(parse(&[0xff; 4096]).pcie_cap, None);
    }
}
