//! Device discovery: open the devices a choice needs, read their ports and
//! GID tables, and pick the port and addressing to use.

use crate::error::RdmaUnavailable;
use crate::select::{
    mtu_bytes, pick_gid, pick_port, Addressing, DevSnap, GidEntry, GidKind, LinkLayer, PortSnap,
};
use sideway::ibverbs::address::GidType;
use sideway::ibverbs::device::{Device as DeviceInfo_, DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use std::net::IpAddr;
use std::sync::Arc;

fn port_state_name(v: u32) -> &'static str {
    match v {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

fn gid_kind(t: GidType) -> GidKind {
    match t {
        GidType::InfiniBand => GidKind::Ib,
        GidType::RoceV1 => GidKind::RoceV1,
        GidType::RoceV2 => GidKind::RoceV2,
    }
}

/// The valid GID entries of one port (tables may be sparse).
fn gid_table(
    ctx: &DeviceContext,
    port: u8,
    len: i32,
    all: &Option<Vec<GidEntry>>,
) -> Vec<GidEntry> {
    if let Some(all) = all {
        return all.clone();
    }
    let mut out = Vec::new();
    for i in 0..len.max(0) as u32 {
        if let Ok(e) = ctx.query_gid_ex(port, i) {
            let g = e.gid();
            if !g.is_zero() {
                out.push(GidEntry {
                    index: i,
                    gid: g.into(),
                    kind: gid_kind(e.gid_type()),
                });
            }
        }
    }
    out
}

/// An opened device with the chosen port and addressing.
pub(crate) struct Device {
    pub ctx: Arc<DeviceContext>,
    pub name: String,
    pub port: PortSnap,
    pub addressing: Addressing,
    /// min(max_qp_rd_atom, max_qp_init_rd_atom, 16).
    pub max_rd_atomic: u8,
    /// The device's largest queue (work requests) and CQ (entries).
    pub max_qp_wr: u32,
    pub max_cqe: u32,
    /// What the user should know about the choice: why this port among
    /// several, and devices that could not be opened (and were skipped).
    pub notes: Vec<String>,
    /// A software device (rxe, siw): the kernel does its protocol work.
    pub software: bool,
}

/// One opened device: its snapshot, context and limits.
struct Opened {
    snap: DevSnap,
    ctx: Arc<DeviceContext>,
    max_rd_atomic: u8,
    max_qp_wr: u32,
    max_cqe: u32,
}

/// Open one device and read its ports and GID tables.
fn open_one(dev: &DeviceInfo_<'_>) -> Result<Opened, String> {
    let name = dev.name();
    let ctx = dev.open().map_err(|e| format!("opening {name}: {e}"))?;
    let attr = ctx
        .query_device()
        .map_err(|e| format!("querying {name}: {e}"))?;
    let rd = attr
        .attr
        .orig_attr
        .max_qp_rd_atom
        .min(attr.attr.orig_attr.max_qp_init_rd_atom)
        .clamp(1, 16) as u8;
    let max_qp_wr = attr.attr.orig_attr.max_qp_wr.max(0) as u32;
    let max_cqe = attr.attr.orig_attr.max_cqe.max(0) as u32;
    // The whole table at once when the library supports it.
    let table: Option<Vec<(u32, GidEntry)>> = ctx.query_gid_table().ok().map(|t| {
        t.iter()
            .filter(|e| !e.gid().is_zero())
            .map(|e| {
                (
                    e.port_num(),
                    GidEntry {
                        index: e.gid_index(),
                        gid: e.gid().into(),
                        kind: gid_kind(e.gid_type()),
                    },
                )
            })
            .collect()
    });
    let mut ports = Vec::new();
    for p in 1..=attr.phys_port_cnt() {
        let pa = ctx
            .query_port(p)
            .map_err(|e| format!("querying {name} port {p}: {e}"))?;
        let raw = &pa.attr;
        let state = raw.state;
        let link_layer = if raw.link_layer == rdma_mummy_sys::IBV_LINK_LAYER_ETHERNET {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        };
        let for_port = table.as_ref().map(|t| {
            t.iter()
                .filter(|(pn, _)| *pn == p as u32)
                .map(|(_, g)| g.clone())
                .collect::<Vec<_>>()
        });
        ports.push(PortSnap {
            port: p,
            active: state == 4,
            state: port_state_name(state).to_string(),
            link_layer,
            active_mtu: mtu_bytes(raw.active_mtu),
            lid: raw.lid,
            gids: gid_table(&ctx, p, raw.gid_tbl_len, &for_port),
        });
    }
    Ok(Opened {
        snap: DevSnap { name, ports },
        ctx,
        max_rd_atomic: rd,
        max_qp_wr,
        max_cqe,
    })
}

/// Open the devices a choice needs: only `device` when it is named (the
/// others are listed by name, never opened), else every device, where one
/// that cannot be opened is skipped with a note instead of failing the test.
fn open_devices(device: Option<&str>) -> Result<(Vec<Opened>, Vec<String>), RdmaUnavailable> {
    let list = DeviceList::new().map_err(|e| {
        let io = match e.0 {
            sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) => io,
            other => std::io::Error::other(other.to_string()),
        };
        crate::error::device_list_error(io.raw_os_error(), &io.to_string())
    })?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    if names.is_empty() {
        return Err(RdmaUnavailable::NoDevice);
    }
    if let Some(want) = device {
        let Some(dev) = list.iter().find(|d| d.name() == want) else {
            return Err(RdmaUnavailable::DeviceNotFound {
                name: want.to_string(),
                available: names,
            });
        };
        let one = open_one(&dev).map_err(|e| RdmaUnavailable::Other(format!("RDMA device {e}")))?;
        return Ok((vec![one], Vec::new()));
    }
    let mut opened = Vec::new();
    let mut skipped = Vec::new();
    for dev in list.iter() {
        match open_one(&dev) {
            Ok(o) => opened.push(o),
            Err(e) => skipped.push(e),
        }
    }
    if opened.is_empty() {
        return Err(RdmaUnavailable::Other(format!(
            "no RDMA device could be opened: {}",
            skipped.join("; ")
        )));
    }
    let notes = skipped
        .into_iter()
        .map(|e| {
            format!(
                "skipped an RDMA device that cannot be used ({e}); --device picks one explicitly"
            )
        })
        .collect();
    Ok((opened, notes))
}

/// Open the device and port to use, and pick the GID.
pub(crate) fn open_device(
    device: Option<&str>,
    ib_port: Option<u8>,
    gid_index: Option<u32>,
    prefer_ip: Option<IpAddr>,
    peer_kind: Option<GidKind>,
) -> Result<Device, RdmaUnavailable> {
    let (mut all, mut notes) = open_devices(device)?;
    let snaps: Vec<DevSnap> = all.iter().map(|o| o.snap.clone()).collect();
    let choice = pick_port(&snaps, device, ib_port, prefer_ip)?;
    let o = all.swap_remove(choice.dev);
    let port = o.snap.ports[choice.port].clone();
    let addressing = pick_gid(&o.snap.name, &port, gid_index, prefer_ip, peer_kind)?;
    let software = fabperf_detect::rdma_device_is_software(std::path::Path::new("/"), &o.snap.name)
        .unwrap_or(false);
    notes.extend(choice.note);
    Ok(Device {
        ctx: o.ctx,
        name: o.snap.name,
        port,
        addressing,
        max_rd_atomic: o.max_rd_atomic,
        max_qp_wr: o.max_qp_wr,
        max_cqe: o.max_cqe,
        notes,
        software,
    })
}

/// The P_Key at index 0 of a port, as sysfs shows it (e.g. `0xffff`).
pub(crate) fn pkey0(sysfs: &std::path::Path, dev: &str, port: u8) -> Option<String> {
    let p = sysfs
        .join("class/infiniband")
        .join(dev)
        .join(format!("ports/{port}/pkeys/0"));
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkey_is_read_from_sysfs() {
        let root = std::env::temp_dir().join(format!("fabperf-pkey-{}", std::process::id()));
        let d = root.join("class/infiniband/mlx5_0/ports/1/pkeys");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("0"), "0xffff\n").unwrap();
        assert_eq!(pkey0(&root, "mlx5_0", 1).as_deref(), Some("0xffff"));
        assert_eq!(pkey0(&root, "mlx5_0", 2), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
